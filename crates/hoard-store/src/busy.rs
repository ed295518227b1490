//! The body of an object still being filled from the origin.
//!
//! ## Model
//!
//! A [`BusyBody`] is an append-only list of chunks plus an end state. One
//! [`BusyWriter`] (the fill) appends; any number of [`BusyReader`]s read from
//! byte 0 at their own pace. A reader that has caught up registers its waker
//! and is woken by the next append or by the end: no timers, no polling.
//!
//! ## Ending
//!
//! The writer ends the body with [`BusyWriter::finish`] (complete) or
//! [`BusyWriter::abort`] (the origin failed mid-body). Dropping a writer
//! without finishing aborts it (a fill task that panics or is cancelled can
//! never strand its readers). Readers of an aborted body get an error after the
//! last chunk that arrived, never a silent end: the proxy turns it into a reset
//! stream or a closed connection, so a truncated body never looks complete.
//!
//! ## History
//!
//! By default every chunk is kept, so a reader joining late still starts at
//! byte 0 and the complete body can be stored. When the fill learns that the
//! body will not be stored (too large), it calls [`BusyWriter::release_history`]:
//! chunks are then dropped as soon as every live reader has read them; the
//! writer waits ([`BusyWriter::room`]) while its *fastest* reader has more
//! than a window unread (a lone slow client paces the fill), and a reader
//! that falls more than the lag limit behind is cut off (its next read is
//! [`FillError::ReaderTooSlow`]), so one stalled client never stalls the
//! others and a huge pass-through body holds bounded memory. No new reader
//! may attach after that, and when every reader has gone the writer learns
//! it and can stop.
//!
//! ## Spilling to disk
//!
//! A fill that is written to a disk zone hands the busy body the file it
//! writes ([`SpillRead`]) and calls [`BusyWriter::spill`] as its writes
//! complete: chunks that are on disk and more than a tail behind the end
//! leave memory (their offsets stay). A reader whose next chunk was spilled
//! reads that stretch from the file, then goes on from memory. So a fill
//! of any size holds about one tail of memory, and a reader joining late
//! still starts at byte 0.
//!
//! ## Locking
//!
//! One mutex per body guards chunks, reader positions and wakers; it is held
//! only to push or clone a `Bytes` and never across an await. Wakers are
//! woken after the lock is released. The protocol (a reader that finds no
//! chunk registers its waker under the same lock the writer takes to append
//! and to drain the wakers, so no wake-up can be lost) is model-checked with
//! loom (`sync.rs`).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::sync::{Arc, Mutex};

/// Why a busy body ended without completing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillError {
    /// The origin closed or failed mid-body.
    OriginAborted,
    /// The origin stopped sending for longer than the read timeout.
    OriginTimeout,
    /// The fill was dropped (cancelled or panicked) before finishing.
    Dangling,
    /// This reader fell too far behind a body that is not being stored.
    ReaderTooSlow,
    /// Every reader stopped reading for longer than the read timeout.
    ReadersStalled,
    /// Reading a spilled stretch back from disk failed.
    SpillRead,
}

/// A future reading spilled bytes back.
pub type SpillFuture = Pin<Box<dyn Future<Output = std::io::Result<Bytes>> + Send>>;

/// Where spilled chunks can be read back from (the fill's disk file).
pub trait SpillRead: Send + Sync + fmt::Debug {
    /// Reads body bytes `offset .. offset + len` (already written).
    fn read(&self, offset: u64, len: u64) -> SpillFuture;
}

impl FillError {
    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FillError::OriginAborted => "origin-aborted",
            FillError::OriginTimeout => "origin-timeout",
            FillError::Dangling => "dangling",
            FillError::ReaderTooSlow => "reader-too-slow",
            FillError::ReadersStalled => "readers-stalled",
            FillError::SpillRead => "spill-read",
        }
    }
}

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fill ended before the body was complete: {}",
            self.as_str()
        )
    }
}

impl std::error::Error for FillError {}

/// A reader's place in the body.
#[derive(Debug)]
enum ReaderState {
    /// Reading: next chunk index, and its waker while it waits for data.
    Live { pos: usize, waker: Option<Waker> },
    /// Fell more than the lag limit behind a body that is not kept: its next
    /// read is an error.
    Cut,
    /// Dropped.
    Gone,
}

#[derive(Debug, Default)]
struct State {
    /// Chunks still held, each with the byte offset it starts at. The first
    /// `spilled` of them are on disk only (their `Bytes` are empty).
    chunks: VecDeque<(u64, Bytes)>,
    spilled: usize,
    spill: Option<crate::sync::Arc<dyn SpillRead>>,
    /// Index (in the whole body) of `chunks[0]`.
    first: usize,
    len: u64,
    end: Option<Result<(), FillError>>,
    keep_history: bool,
    /// Once history is released: how far behind the body's end a reader may fall.
    lag_limit: u64,
    /// Bytes held in `chunks`.
    buffered: u64,
    /// Every reader, by id.
    readers: Vec<ReaderState>,
    /// The writer, waiting for readers to make room.
    writer_waker: Option<Waker>,
}

impl State {
    /// Byte offset of chunk index `pos`.
    fn offset(&self, pos: usize) -> u64 {
        self.chunks
            .get(pos - self.first)
            .map_or(self.len, |(o, _)| *o)
    }

    fn live_positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.readers.iter().filter_map(|r| match r {
            ReaderState::Live { pos, .. } => Some(*pos),
            _ => None,
        })
    }

    /// Takes the wakers of every waiting reader.
    fn take_reader_wakers(&mut self) -> Vec<Waker> {
        self.readers
            .iter_mut()
            .filter_map(|r| match r {
                ReaderState::Live { waker, .. } => waker.take(),
                _ => None,
            })
            .collect()
    }

    /// Drops chunks every live reader has read (once history is released).
    /// Returns the writer's waker, to wake after the lock is released.
    fn trim(&mut self) -> Option<Waker> {
        if self.keep_history {
            return None;
        }
        let min = self
            .live_positions()
            .min()
            .unwrap_or(self.first + self.chunks.len());
        while self.first < min {
            let Some((_, c)) = self.chunks.pop_front() else {
                break;
            };
            if self.spilled > 0 {
                self.spilled -= 1;
            }
            self.buffered -= c.len() as u64;
            self.first += 1;
        }
        self.writer_waker.take()
    }
}

/// An object body being filled. See the module docs.
#[derive(Debug)]
pub struct BusyBody {
    state: Mutex<State>,
}

/// The single writer of a [`BusyBody`]. Aborts the body when dropped unfinished.
#[derive(Debug)]
pub struct BusyWriter {
    body: Arc<BusyBody>,
    done: bool,
}

/// A reader of a [`BusyBody`], starting at byte 0.
pub struct BusyReader {
    body: Arc<BusyBody>,
    id: usize,
    /// A spilled stretch being read back, how many chunks it covers, and
    /// its offset in the body.
    pending: Option<(SpillFuture, usize, u64)>,
    /// Chunks that end at or before this byte are skipped, not read (a
    /// range reader starting there).
    from: u64,
}

impl fmt::Debug for BusyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusyReader")
            .field("id", &self.id)
            .field("reading_spill", &self.pending.is_some())
            .finish()
    }
}

impl BusyBody {
    /// A new empty body and its writer.
    pub fn new() -> (Arc<BusyBody>, BusyWriter) {
        let body = Arc::new(BusyBody {
            state: Mutex::new(State {
                keep_history: true,
                ..State::default()
            }),
        });
        (body.clone(), BusyWriter { body, done: false })
    }

    /// A new reader at byte 0, or `None` once history was released.
    pub fn reader(self: &Arc<Self>) -> Option<BusyReader> {
        let mut st = self.state.lock();
        if !st.keep_history && st.first > 0 {
            return None;
        }
        let id = st.readers.len();
        st.readers.push(ReaderState::Live {
            pos: 0,
            waker: None,
        });
        Some(BusyReader {
            body: self.clone(),
            id,
            pending: None,
            from: 0,
        })
    }

    /// Bytes received so far.
    pub fn len(&self) -> u64 {
        self.state.lock().len
    }

    /// True when nothing has been received yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The end state, once ended.
    pub fn end(&self) -> Option<Result<(), FillError>> {
        self.state.lock().end
    }

    /// Body bytes held in memory.
    pub fn buffered(&self) -> u64 {
        self.state.lock().buffered
    }
}

fn wake_all(wakers: Vec<Waker>) {
    wakers.into_iter().for_each(Waker::wake);
}

impl BusyWriter {
    /// Appends a chunk and wakes waiting readers. Once history is released,
    /// a reader that falls more than the lag limit behind is cut off.
    pub fn append(&self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        let wakers = {
            let mut st = self.body.state.lock();
            debug_assert!(st.end.is_none(), "invariant: no append after end");
            let start = st.len;
            st.len += chunk.len() as u64;
            st.buffered += chunk.len() as u64;
            st.chunks.push_back((start, chunk));
            let mut wakers = st.take_reader_wakers();
            if !st.keep_history {
                let (len, limit) = (st.len, st.lag_limit);
                let lagging: Vec<usize> = st
                    .readers
                    .iter()
                    .enumerate()
                    .filter_map(|(id, r)| match r {
                        ReaderState::Live { pos, .. } if len - st.offset(*pos) > limit => Some(id),
                        _ => None,
                    })
                    .collect();
                for id in lagging {
                    st.readers[id] = ReaderState::Cut;
                }
                if let Some(w) = st.trim() {
                    wakers.push(w);
                }
            }
            wakers
        };
        wake_all(wakers);
    }

    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.body.state.lock().len
    }

    /// True when nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops keeping chunks that every reader has read (see module docs); a
    /// reader falling more than `lag_limit` bytes behind is cut off.
    pub fn release_history(&self, lag_limit: u64) {
        let mut st = self.body.state.lock();
        st.keep_history = false;
        st.lag_limit = lag_limit;
        drop(st.trim());
    }

    /// All chunks so far, when history is kept (to store the object before
    /// readers see the end).
    pub fn chunks(&self) -> Option<Vec<Bytes>> {
        let st = self.body.state.lock();
        (st.keep_history && st.spilled == 0)
            .then(|| st.chunks.iter().map(|(_, c)| c.clone()).collect())
    }

    /// Drops from memory the chunks that lie wholly below `durable` (bytes
    /// written to the file `source` reads) and more than `tail` bytes
    /// behind the end; readers read them back from `source`.
    pub fn spill(&self, source: &crate::sync::Arc<dyn SpillRead>, durable: u64, tail: u64) {
        let mut st = self.body.state.lock();
        if st.spill.is_none() {
            st.spill = Some(source.clone());
        }
        let limit = durable.min(st.len.saturating_sub(tail));
        while st.spilled < st.chunks.len() {
            let i = st.spilled;
            let end = st.chunks.get(i + 1).map_or(st.len, |(o, _)| *o);
            if end > limit {
                break;
            }
            let c = std::mem::take(&mut st.chunks[i].1);
            st.buffered -= c.len() as u64;
            st.spilled += 1;
        }
    }

    /// Waits until the *fastest* live reader has at most `window` bytes unread
    /// (only after [`BusyWriter::release_history`]): a single reader paces the
    /// fill, and one stalled reader among several cannot stall the others (it
    /// is cut off past the lag limit instead). Returns false when no reader is
    /// left: nobody wants the rest of the body.
    pub async fn room(&self, window: u64) -> bool {
        std::future::poll_fn(|cx| {
            let mut st = self.body.state.lock();
            if st.keep_history {
                return Poll::Ready(true);
            }
            let Some(fastest) = st.live_positions().max() else {
                return Poll::Ready(false);
            };
            if st.len - st.offset(fastest) <= window {
                return Poll::Ready(true);
            }
            st.writer_waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Ends the body as complete and returns all chunks (when history was kept).
    pub fn finish(mut self) -> Option<Vec<Bytes>> {
        self.done = true;
        let (chunks, wakers) = {
            let mut st = self.body.state.lock();
            st.end = Some(Ok(()));
            let chunks = (st.keep_history && st.spilled == 0)
                .then(|| st.chunks.iter().map(|(_, c)| c.clone()).collect());
            (chunks, st.take_reader_wakers())
        };
        wake_all(wakers);
        chunks
    }

    /// Ends the body with an error; readers see it after the chunks already sent.
    pub fn abort(mut self, err: FillError) {
        self.done = true;
        self.end_with(err);
    }

    fn end_with(&self, err: FillError) {
        let wakers = {
            let mut st = self.body.state.lock();
            if st.end.is_none() {
                st.end = Some(Err(err));
            }
            st.take_reader_wakers()
        };
        wake_all(wakers);
    }
}

impl Drop for BusyWriter {
    fn drop(&mut self) {
        if !self.done {
            self.end_with(FillError::Dangling);
        }
    }
}

impl BusyReader {
    /// Bytes the fill has received so far.
    pub fn filled(&self) -> u64 {
        self.body.len()
    }

    /// Skips chunks that end at or before byte `offset` (they are neither
    /// handed out nor read back from a spill). The first chunk handed out
    /// may still start before `offset`: the caller trims it.
    pub fn skip_to(&mut self, offset: u64) {
        self.from = offset;
    }

    /// The next chunk: `Ready(Some(Ok))` with data, `Ready(None)` at a complete
    /// end, `Ready(Some(Err))` when the fill failed (or this reader was cut
    /// off for lagging), `Pending` while waiting.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, FillError>>> {
        self.poll_chunk_at(cx).map(|o| o.map(|r| r.map(|(_, b)| b)))
    }

    /// [`BusyReader::poll_chunk`] with the offset of the chunk in the body.
    pub fn poll_chunk_at(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<(u64, Bytes), FillError>>> {
        if let Some((fut, covered, at)) = &mut self.pending {
            let (covered, at) = (*covered, *at);
            let r = match fut.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            self.pending = None;
            let Ok(bytes) = r else {
                return Poll::Ready(Some(Err(FillError::SpillRead)));
            };
            let mut st = self.body.state.lock();
            if let ReaderState::Live { pos, .. } = st.readers[self.id] {
                st.readers[self.id] = ReaderState::Live {
                    pos: pos + covered,
                    waker: None,
                };
            }
            let writer = st.trim();
            drop(st);
            if let Some(w) = writer {
                w.wake();
            }
            return Poll::Ready(Some(Ok((at, bytes))));
        }
        let mut st = self.body.state.lock();
        let pos = match &st.readers[self.id] {
            ReaderState::Live { pos, .. } => *pos,
            ReaderState::Cut | ReaderState::Gone => {
                st.readers[self.id] = ReaderState::Gone;
                return Poll::Ready(Some(Err(FillError::ReaderTooSlow)));
            }
        };
        let mut pos = pos;
        // Skip whole chunks before `from`.
        // (A spilled chunk's bytes are empty: its end is where the next
        // chunk starts.)
        while self.from > 0 && pos - st.first < st.chunks.len() {
            let i = pos - st.first;
            let end = st.chunks.get(i + 1).map_or(st.len, |(o, _)| *o);
            if end > self.from {
                break;
            }
            pos += 1;
        }
        if let ReaderState::Live { pos: p, .. } = &mut st.readers[self.id] {
            *p = pos;
        }
        let idx = pos - st.first;
        if idx < st.spilled {
            // On disk only: read back a stretch of spilled chunks (at most 256 KiB,
            // at least one chunk), then go on.
            let start = st.chunks[idx].0;
            let mut covered = 1;
            while idx + covered < st.spilled
                && st.chunks.get(idx + covered + 1).map_or(st.len, |(o, _)| *o) - start
                    <= 256 * 1024
            {
                covered += 1;
            }
            let end = st.chunks.get(idx + covered).map_or(st.len, |(o, _)| *o);
            let source = st
                .spill
                .clone()
                .expect("invariant: spilled chunks have a source");
            drop(st);
            self.pending = Some((source.read(start, end - start), covered, start));
            return self.poll_chunk_at(cx);
        }
        if let Some((at, chunk)) = st.chunks.get(pos - st.first).cloned() {
            st.readers[self.id] = ReaderState::Live {
                pos: pos + 1,
                waker: None,
            };
            let writer = st.trim();
            drop(st);
            if let Some(w) = writer {
                w.wake();
            }
            return Poll::Ready(Some(Ok((at, chunk))));
        }
        match st.end {
            Some(Ok(())) => Poll::Ready(None),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                // One waker per reader, replaced on each wait: no pile-up.
                st.readers[self.id] = ReaderState::Live {
                    pos,
                    waker: Some(cx.waker().clone()),
                };
                Poll::Pending
            }
        }
    }

    /// Async form of [`BusyReader::poll_chunk`].
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, FillError>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }
}

impl Drop for BusyReader {
    fn drop(&mut self) {
        let mut st = self.body.state.lock();
        st.readers[self.id] = ReaderState::Gone;
        let writer = st.trim().or_else(|| st.writer_waker.take());
        drop(st);
        if let Some(w) = writer {
            w.wake();
        }
    }
}

#[cfg(all(test, hoard_loom))]
mod loom_tests {
    use super::*;

    #[test]
    fn loom_reader_never_misses_a_wake_up() {
        loom::model(|| {
            let (body, w) = BusyBody::new();
            let mut r = body.reader().unwrap();
            let writer = loom::thread::spawn(move || {
                w.append(Bytes::from_static(b"a"));
                w.append(Bytes::from_static(b"b"));
                w.finish();
            });
            loom::future::block_on(async {
                assert_eq!(r.next_chunk().await.unwrap().unwrap(), "a");
                assert_eq!(r.next_chunk().await.unwrap().unwrap(), "b");
                assert!(r.next_chunk().await.is_none());
            });
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_dropped_writer_always_reaches_the_reader() {
        loom::model(|| {
            let (body, w) = BusyBody::new();
            let mut r = body.reader().unwrap();
            let writer = loom::thread::spawn(move || drop(w));
            loom::future::block_on(async {
                assert_eq!(r.next_chunk().await.unwrap(), Err(FillError::Dangling));
            });
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_writer_waiting_for_room_is_woken_by_the_reader() {
        loom::model(|| {
            let (body, w) = BusyBody::new();
            let mut r = body.reader().unwrap();
            w.release_history(1 << 20);
            w.append(Bytes::from_static(b"xxxx"));
            let reader = loom::thread::spawn(move || {
                loom::future::block_on(async {
                    r.next_chunk().await.unwrap().unwrap();
                });
                drop(r);
            });
            let room = loom::future::block_on(w.room(1));
            reader.join().unwrap();
            // Either the reader made room or it had already gone: never a hang.
            let _ = room;
            drop(body);
        });
    }
}

#[cfg(all(test, not(hoard_loom)))]
mod tests;
