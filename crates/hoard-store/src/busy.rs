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
//! chunks are then dropped as soon as every reader has read them, and the
//! writer waits ([`BusyWriter::room`]) while more than a window of bytes is
//! unread by the slowest reader, so a huge pass-through body read by a slow
//! client holds a bounded amount of memory. No new reader may attach after
//! that, and when every reader has gone the writer learns it and can stop.
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
}

impl FillError {
    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            FillError::OriginAborted => "origin-aborted",
            FillError::OriginTimeout => "origin-timeout",
            FillError::Dangling => "dangling",
        }
    }
}

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fill ended before the body was complete: {}", self.as_str())
    }
}

impl std::error::Error for FillError {}

#[derive(Debug, Default)]
struct State {
    chunks: VecDeque<Bytes>,
    /// Index (in the whole body) of `chunks[0]`.
    first: usize,
    len: u64,
    end: Option<Result<(), FillError>>,
    keep_history: bool,
    /// Bytes held in `chunks`.
    buffered: u64,
    /// Position (chunk index) of each reader, by reader id; `None` once dropped.
    readers: Vec<Option<usize>>,
    wakers: Vec<Waker>,
    /// The writer, waiting for readers to make room.
    writer_waker: Option<Waker>,
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
#[derive(Debug)]
pub struct BusyReader {
    body: Arc<BusyBody>,
    id: usize,
    pos: usize,
}

impl BusyBody {
    /// A new empty body and its writer.
    pub fn new() -> (Arc<BusyBody>, BusyWriter) {
        let body = Arc::new(BusyBody {
            state: Mutex::new(State { keep_history: true, ..State::default() }),
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
        st.readers.push(Some(0));
        Some(BusyReader { body: self.clone(), id, pos: 0 })
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
}

impl BusyWriter {
    /// Appends a chunk and wakes waiting readers.
    pub fn append(&self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        let wakers = {
            let mut st = self.body.state.lock();
            debug_assert!(st.end.is_none(), "invariant: no append after end");
            st.len += chunk.len() as u64;
            st.buffered += chunk.len() as u64;
            st.chunks.push_back(chunk);
            std::mem::take(&mut st.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.body.state.lock().len
    }

    /// True when nothing was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops keeping chunks that every reader has read (see module docs).
    pub fn release_history(&self) {
        let mut st = self.body.state.lock();
        st.keep_history = false;
        drop(trim(&mut st));
    }

    /// All chunks so far, when history is kept (to store the object before
    /// readers see the end).
    pub fn chunks(&self) -> Option<Vec<Bytes>> {
        let st = self.body.state.lock();
        st.keep_history.then(|| st.chunks.iter().cloned().collect())
    }

    /// Waits until the slowest reader leaves at most `window` bytes unread
    /// (only after [`BusyWriter::release_history`]). Returns false when no
    /// reader is left: nobody wants the rest of the body.
    pub async fn room(&self, window: u64) -> bool {
        std::future::poll_fn(|cx| {
            let mut st = self.body.state.lock();
            if st.keep_history {
                return Poll::Ready(true);
            }
            if st.readers.iter().all(Option::is_none) {
                return Poll::Ready(false);
            }
            if st.buffered <= window {
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
            let chunks = if st.keep_history { Some(st.chunks.iter().cloned().collect()) } else { None };
            (chunks, std::mem::take(&mut st.wakers))
        };
        wakers.into_iter().for_each(Waker::wake);
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
            std::mem::take(&mut st.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl Drop for BusyWriter {
    fn drop(&mut self) {
        if !self.done {
            self.end_with(FillError::Dangling);
        }
    }
}

/// Drops chunks every reader has read (once history is released) and wakes
/// the writer if it waits for room. Returns the writer's waker to wake after
/// the lock is released.
#[must_use]
fn trim(st: &mut State) -> Option<Waker> {
    if st.keep_history {
        return None;
    }
    let min = st.readers.iter().flatten().copied().min().unwrap_or(st.first + st.chunks.len());
    while st.first < min {
        let Some(c) = st.chunks.pop_front() else { break };
        st.buffered -= c.len() as u64;
        st.first += 1;
    }
    st.writer_waker.take()
}

impl BusyReader {
    /// The next chunk: `Ready(Some(Ok))` with data, `Ready(None)` at a complete
    /// end, `Ready(Some(Err))` when the fill failed, `Pending` while waiting.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, FillError>>> {
        let mut st = self.body.state.lock();
        let idx = self.pos - st.first;
        if let Some(chunk) = st.chunks.get(idx).cloned() {
            self.pos += 1;
            st.readers[self.id] = Some(self.pos);
            let writer = trim(&mut st);
            drop(st);
            if let Some(w) = writer {
                w.wake();
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        match st.end {
            Some(Ok(())) => Poll::Ready(None),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                // Drained on every append: a reader registers once per wake-up.
                st.wakers.push(cx.waker().clone());
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
        st.readers[self.id] = None;
        let writer = trim(&mut st).or_else(|| st.writer_waker.take());
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
            w.release_history();
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn readers_see_all_chunks_then_end() {
        let (body, w) = BusyBody::new();
        let mut r1 = body.reader().unwrap();
        w.append(Bytes::from_static(b"a"));
        let t = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(c) = r1.next_chunk().await {
                got.extend_from_slice(&c.unwrap());
            }
            got
        });
        w.append(Bytes::from_static(b"b"));
        let mut r2 = body.reader().unwrap();
        assert_eq!(w.finish().unwrap().len(), 2);
        assert_eq!(t.await.unwrap(), b"ab");
        assert_eq!(r2.next_chunk().await.unwrap().unwrap(), "a");
        assert_eq!(r2.next_chunk().await.unwrap().unwrap(), "b");
        assert!(r2.next_chunk().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_readers_at_their_own_pace_see_the_same_bytes() {
        let (body, w) = BusyBody::new();
        let readers: Vec<_> = (0..8u64)
            .map(|i| {
                let mut r = body.reader().unwrap();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(c) = r.next_chunk().await {
                        got.extend_from_slice(&c.unwrap());
                        if got.len() % (1 + i as usize * 7) == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    got
                })
            })
            .collect();
        let mut want = Vec::new();
        for n in 0..2000u32 {
            let chunk = Bytes::from(n.to_le_bytes().to_vec());
            want.extend_from_slice(&chunk);
            w.append(chunk);
            if n % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        w.finish();
        for r in readers {
            assert_eq!(r.await.unwrap(), want);
        }
    }

    #[tokio::test]
    async fn dropped_writer_is_an_error_not_an_end() {
        let (body, w) = BusyBody::new();
        let mut r = body.reader().unwrap();
        w.append(Bytes::from_static(b"x"));
        drop(w);
        assert_eq!(r.next_chunk().await.unwrap().unwrap(), "x");
        assert_eq!(r.next_chunk().await.unwrap(), Err(FillError::Dangling));
    }

    #[tokio::test]
    async fn writer_waits_for_the_slowest_reader_and_stops_when_none_is_left() {
        let (body, w) = BusyBody::new();
        let mut r = body.reader().unwrap();
        w.release_history();
        w.append(Bytes::from(vec![0u8; 600]));
        w.append(Bytes::from(vec![0u8; 600]));
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), w.room(1000)).await.is_err(), "1200 unread bytes > window");
        let room = tokio::spawn({
            let body = body.clone();
            async move {
                let w = w;
                let ok = w.room(1000).await;
                drop(body);
                (ok, w)
            }
        });
        r.next_chunk().await.unwrap().unwrap();
        let (ok, w) = room.await.unwrap();
        assert!(ok, "the reader made room");
        drop(r);
        assert!(!w.room(1000).await, "no reader left");
    }

    #[tokio::test]
    async fn released_history_drops_read_chunks() {
        let (body, w) = BusyBody::new();
        let mut r = body.reader().unwrap();
        w.release_history();
        w.append(Bytes::from_static(b"x"));
        w.append(Bytes::from_static(b"y"));
        assert_eq!(r.next_chunk().await.unwrap().unwrap(), "x");
        assert_eq!(body.state.lock().chunks.len(), 1);
        assert!(body.reader().is_none(), "late readers cannot start at byte 0");
        assert!(w.finish().is_none());
        assert_eq!(r.next_chunk().await.unwrap().unwrap(), "y");
        assert!(r.next_chunk().await.is_none());
    }
}
