//! The body of a response to a client, whatever its source.
//!
//! An enum rather than a boxed trait object: a hit is `Stored` (a refcount bump
//! on the object, then its chunks) or `File` (a disk object, read block by
//! block on the zone's I/O pool), a fill is `Busy` (read while the origin
//! writes it), a pass is `Origin` (streamed straight through). An error from
//! `Busy` or `Origin` makes hyper abort the response (connection closed, or
//! h2 stream reset), so a truncated body never looks complete.

pub mod decode;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_store::busy::BusyReader;
use hoard_store::disk::reader::FileReader;
use hoard_store::object::{ObjectBody, StoredObject};
use http_body::{Body, Frame, SizeHint};

use crate::sendfile::{SendQueue, SPAN_MAX};
use hoard_origin::error::BoxError;
use hoard_origin::OriginBody;

/// A response body. See the module docs.
#[derive(Debug)]
pub enum ProxyBody {
    /// No body (HEAD, 304, errors without text).
    Empty,
    /// One chunk of bytes.
    Full(Option<Bytes>),
    /// A stored object's body, chunk by chunk.
    Stored {
        /// The object (kept alive while sending).
        obj: Arc<StoredObject>,
        /// Next chunk.
        next: usize,
    },
    /// A stored body read from its disk file, block by block; with a send
    /// queue (plain HTTP/1.1), verified page-cached spans go out with
    /// `sendfile` (see `server::sendfile`).
    File(FileReader, Option<Arc<SendQueue>>),
    /// A body being filled.
    Busy(BusyReader),
    /// Streamed from the origin.
    Origin(OriginBody),
    /// Byte ranges of a stored body (and multipart framing), in order.
    Parts {
        /// What is left to send.
        parts: VecDeque<Part>,
        /// The connection's sendfile queue, for file parts.
        send: Option<Arc<SendQueue>>,
    },
    /// Bytes `start..end` of a body being filled, sent as they arrive.
    BusyRange {
        /// Reads the fill from the chunk that holds `start`.
        reader: BusyReader,
        /// End of what the reader has handed out (0 before the first chunk).
        pos: u64,
        /// First byte to send.
        start: u64,
        /// One past the last byte to send.
        end: u64,
    },
    /// Parts of an object cached as slices (slice mode), opened as sent.
    Sliced(Box<dyn SlicedBody>),
    /// Several ranges of a body being filled, with their multipart
    /// framing, each sent as its bytes arrive (boxed: rare, and large).
    BusyParts(Box<BusyParts>),
    /// Another body decoded as it streams (a fill's coded body, for a
    /// client that does not accept its coding: see `crate::body::decode`).
    Decoded(Box<crate::body::decode::DecodedBody>),
    /// Another body passed through a layer above (a route's Proxy-Wasm
    /// filters' body callbacks: see `crate::pipeline::filter_body`).
    Wrapped(Box<dyn WrappedBody>),
}

/// A body a layer above wraps around a [`ProxyBody`].
pub trait WrappedBody:
    Body<Data = Bytes, Error = BoxError> + std::fmt::Debug + Send + Unpin
{
}

impl<T: Body<Data = Bytes, Error = BoxError> + std::fmt::Debug + Send + Unpin> WrappedBody for T {}

/// The body of an object cached as slices (slice mode): its parts, each
/// slice opened as it is sent. The pipeline's slice mode implements it
/// (`crate::pipeline::slice_body`), above this module.
pub trait SlicedBody:
    Body<Data = Bytes, Error = BoxError> + std::fmt::Debug + Send + Unpin
{
    /// The first slice came from the cache (a range of the body is then
    /// not answered from a fill).
    fn first_hit(&self) -> bool;
    /// The whole object's length.
    fn total(&self) -> u64;
    /// Sends `parts` (framing and [`Part::Sliced`] spans) instead of the
    /// whole object.
    fn set_parts(&mut self, parts: VecDeque<Part>);
}

/// One piece of a [`ProxyBody::Parts`] body.
#[derive(Debug)]
pub enum Part {
    /// Bytes in memory (a slice of a stored chunk, or multipart framing).
    Bytes(Bytes),
    /// A range of a disk object.
    File(FileReader),
    /// Bytes `start..end` of an object cached as slices (only in a
    /// [`ProxyBody::Sliced`] body).
    Sliced(u64, u64),
    /// Bytes `start..end` of a body being filled (only in a
    /// [`ProxyBody::BusyParts`] body).
    Fill(u64, u64),
}

/// The state of a [`ProxyBody::BusyParts`] body.
#[derive(Debug)]
pub struct BusyParts {
    /// Reads the fill in order, from the chunk that holds the first range.
    pub reader: BusyReader,
    /// What is left to send: framing ([`Part::Bytes`]) and ranges
    /// ([`Part::Fill`], whose start moves on as bytes go out).
    pub parts: VecDeque<Part>,
    /// The last chunk the reader handed out, and its offset: the next
    /// range may begin inside it.
    pub carry: Option<(u64, Bytes)>,
}

/// A disk body (or range) this small, resident in the page cache, is copied
/// on the serving thread and leaves with its head in one write: cheaper
/// than a `sendfile` of its own (a second system call and a second packet).
/// The tail of a larger body still goes by `sendfile`: it has no head to
/// join.
pub const COPY_MAX: u64 = 16 * 1024;

/// Most bytes of a resident disk body copied on the serving thread at once
/// where there is no `sendfile` (TLS, HTTP/2): no trip to the I/O pool.
pub const COPY_CHUNK: u64 = 256 * 1024;

/// The next frame of a disk body: resident bytes copied at once when small
/// (or when the connection cannot `sendfile`); a sendfile placeholder when
/// the connection has a queue and the span can go that way; else bytes
/// read on the I/O pool.
fn poll_file(
    r: &mut FileReader,
    send: Option<&Arc<SendQueue>>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    if let Some(q) = send {
        if r.untouched() && r.remaining() <= COPY_MAX {
            if let Some(b) = r.read_resident(COPY_MAX) {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
        }
        if let Some(span) = r.take_span(SPAN_MAX) {
            return Poll::Ready(Some(Ok(Frame::data(q.push(span)))));
        }
    } else if let Some(b) = r.read_resident(COPY_CHUNK) {
        return Poll::Ready(Some(Ok(Frame::data(b))));
    }
    r.poll_chunk(cx)
        .map(|o| o.map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxError)))
}

impl Part {
    /// Bytes left to send.
    pub(crate) fn remaining(&self) -> u64 {
        match self {
            Part::Bytes(b) => b.len() as u64,
            Part::File(r) => r.remaining(),
            Part::Sliced(start, end) | Part::Fill(start, end) => end - start,
        }
    }
}

impl ProxyBody {
    /// A body of static text.
    pub fn text(s: &'static str) -> ProxyBody {
        ProxyBody::Full(Some(Bytes::from_static(s.as_bytes())))
    }

    /// A stored object's body; `send` is the connection's sendfile queue,
    /// if it has one.
    pub fn stored(obj: Arc<StoredObject>, send: Option<&Arc<SendQueue>>) -> ProxyBody {
        match &obj.body {
            ObjectBody::File(f) => ProxyBody::File(f.reader(0, f.len()), send.cloned()),
            ObjectBody::Chunks { chunks, .. } => match chunks.as_slice() {
                [] => ProxyBody::Empty,
                [one] => ProxyBody::Full(Some(one.clone())),
                _ => ProxyBody::Stored { obj, next: 0 },
            },
        }
    }

    /// A part of a stored object (see `crate::encode`): in a file, or in
    /// memory as one chunk.
    pub fn part(body: &ObjectBody, send: Option<&Arc<SendQueue>>) -> ProxyBody {
        match body {
            ObjectBody::File(f) => ProxyBody::File(f.reader(0, f.len()), send.cloned()),
            ObjectBody::Chunks { chunks, .. } => match chunks.as_slice() {
                [] => ProxyBody::Empty,
                [one] => ProxyBody::Full(Some(one.clone())),
                many => ProxyBody::Full(Some(many.concat().into())),
            },
        }
    }

    fn stored_chunks(obj: &StoredObject) -> &[Bytes] {
        obj.body.chunks().unwrap_or_default()
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Stored { obj, next } => {
                let chunk = ProxyBody::stored_chunks(obj).get(*next).cloned();
                *next += 1;
                Poll::Ready(chunk.map(|c| Ok(Frame::data(c))))
            }
            ProxyBody::File(r, send) => poll_file(r, send.as_ref(), cx),
            ProxyBody::Busy(r) => r
                .poll_chunk(cx)
                .map(|o| o.map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxError))),
            ProxyBody::Origin(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|o| o.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
            ProxyBody::Parts { parts, send } => loop {
                match parts.front_mut() {
                    None => return Poll::Ready(None),
                    Some(Part::Bytes(_)) => {
                        let Some(Part::Bytes(b)) = parts.pop_front() else {
                            unreachable!("front is Bytes")
                        };
                        if !b.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(b))));
                        }
                    }
                    Some(Part::File(r)) => {
                        if r.remaining() == 0 {
                            parts.pop_front();
                            continue;
                        }
                        return poll_file(r, send.as_ref(), cx);
                    }
                    Some(Part::Sliced(..) | Part::Fill(..)) => {
                        return Poll::Ready(Some(Err(
                            "invariant: sliced and fill parts only in their own bodies".into(),
                        )))
                    }
                }
            },
            ProxyBody::BusyParts(b) => loop {
                let BusyParts {
                    reader,
                    parts,
                    carry,
                } = &mut **b;
                if matches!(parts.front(), Some(Part::Fill(start, end)) if start >= end) {
                    parts.pop_front();
                    continue;
                }
                let (start, end) = match parts.front_mut() {
                    None => return Poll::Ready(None),
                    Some(Part::Fill(start, end)) => (start, *end),
                    Some(Part::Bytes(_)) => {
                        let Some(Part::Bytes(b)) = parts.pop_front() else {
                            unreachable!("front is Bytes")
                        };
                        if b.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(b))));
                    }
                    Some(_) => {
                        return Poll::Ready(Some(Err(
                            "invariant: only framing and fill parts in a fill's multipart body"
                                .into(),
                        )))
                    }
                };
                // The range's next bytes from the last chunk, if it holds them.
                if let Some((from, c)) = carry.as_ref() {
                    let to = from + c.len() as u64;
                    if *from <= *start && *start < to {
                        let a = (*start - from) as usize;
                        let b = (end.min(to) - from) as usize;
                        *start += (b - a) as u64;
                        return Poll::Ready(Some(Ok(Frame::data(c.slice(a..b)))));
                    }
                }
                reader.skip_to(*start);
                match ready!(reader.poll_chunk_at(cx)) {
                    None => {
                        return Poll::Ready(Some(Err("fill ended before the range".into())));
                    }
                    Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e) as BoxError))),
                    // Chunks come in order and without gaps, or this is an
                    // error: never a wrong byte.
                    Some(Ok((from, _))) if from > *start => {
                        return Poll::Ready(Some(Err("fill chunks out of order".into())));
                    }
                    Some(Ok(chunk)) => *carry = Some(chunk),
                }
            },
            ProxyBody::Sliced(b) => Pin::new(&mut **b).poll_frame(cx),
            ProxyBody::Wrapped(b) => Pin::new(&mut **b).poll_frame(cx),
            ProxyBody::Decoded(b) => Pin::new(&mut **b).poll_frame(cx),
            ProxyBody::BusyRange {
                reader,
                pos,
                start,
                end,
            } => loop {
                if *pos >= *end {
                    return Poll::Ready(None);
                }
                match ready!(reader.poll_chunk_at(cx)) {
                    None => {
                        // The fill ended short of the range: never pad.
                        return Poll::Ready(Some(Err("fill ended before the range".into())));
                    }
                    Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e) as BoxError))),
                    Some(Ok((from, chunk))) => {
                        // Contiguous from a chunk that holds `start`, or an
                        // error: never a wrong byte.
                        let gap = if *pos == 0 {
                            from > *start
                        } else {
                            from != *pos
                        };
                        if gap {
                            return Poll::Ready(Some(Err("fill chunks out of order".into())));
                        }
                        let to = from + chunk.len() as u64;
                        *pos = to;
                        if to <= *start {
                            continue;
                        }
                        let a = (*start).saturating_sub(from) as usize;
                        let b = ((*end).min(to) - from) as usize;
                        return Poll::Ready(Some(Ok(Frame::data(chunk.slice(a..b)))));
                    }
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Stored { obj, next } => *next >= ProxyBody::stored_chunks(obj).len(),
            ProxyBody::File(r, _) => r.remaining() == 0,
            ProxyBody::Busy(_) => false,
            ProxyBody::Origin(b) => b.is_end_stream(),
            ProxyBody::Parts { parts, .. } => parts.iter().all(|p| p.remaining() == 0),
            ProxyBody::BusyRange { pos, end, .. } => pos >= end,
            ProxyBody::Sliced(b) => b.is_end_stream(),
            ProxyBody::Wrapped(b) => b.is_end_stream(),
            ProxyBody::Decoded(b) => b.is_end_stream(),
            ProxyBody::BusyParts(b) => b.parts.iter().all(|p| p.remaining() == 0),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Stored { obj, next } => {
                let chunks = ProxyBody::stored_chunks(obj);
                SizeHint::with_exact(
                    chunks[(*next).min(chunks.len())..]
                        .iter()
                        .map(|c| c.len() as u64)
                        .sum(),
                )
            }
            ProxyBody::File(r, _) => SizeHint::with_exact(r.remaining()),
            ProxyBody::Busy(_) => SizeHint::default(),
            ProxyBody::Origin(b) => b.size_hint(),
            ProxyBody::Parts { parts, .. } => {
                SizeHint::with_exact(parts.iter().map(Part::remaining).sum())
            }
            ProxyBody::BusyRange {
                pos, start, end, ..
            } => SizeHint::with_exact(end - (*pos).clamp(*start, *end)),
            ProxyBody::Sliced(b) => b.size_hint(),
            ProxyBody::Wrapped(b) => b.size_hint(),
            ProxyBody::Decoded(b) => b.size_hint(),
            ProxyBody::BusyParts(b) => {
                SizeHint::with_exact(b.parts.iter().map(Part::remaining).sum())
            }
        }
    }
}
