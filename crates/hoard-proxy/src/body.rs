//! The body of a response to a client, whatever its source.
//!
//! An enum rather than a boxed trait object: a hit is `Stored` (a refcount bump
//! on the object, then its chunks), a fill is `Busy` (read while the origin
//! writes it), a pass is `Origin` (streamed straight through). An error from
//! `Busy` or `Origin` makes hyper abort the response (connection closed, or
//! h2 stream reset), so a truncated body never looks complete.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hoard_store::busy::BusyReader;
use hoard_store::object::StoredObject;
use http_body::{Body, Frame, SizeHint};

use crate::upstream::{BoxError, OriginBody};

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
    /// A body being filled.
    Busy(BusyReader),
    /// Streamed from the origin.
    Origin(OriginBody),
}

impl ProxyBody {
    /// A body of static text.
    pub fn text(s: &'static str) -> ProxyBody {
        ProxyBody::Full(Some(Bytes::from_static(s.as_bytes())))
    }

    /// A stored object's body.
    pub fn stored(obj: Arc<StoredObject>) -> ProxyBody {
        match obj.body.chunks() {
            [] => ProxyBody::Empty,
            [one] => ProxyBody::Full(Some(one.clone())),
            _ => ProxyBody::Stored { obj, next: 0 },
        }
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
                let chunk = obj.body.chunks().get(*next).cloned();
                *next += 1;
                Poll::Ready(chunk.map(|c| Ok(Frame::data(c))))
            }
            ProxyBody::Busy(r) => r
                .poll_chunk(cx)
                .map(|o| o.map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxError))),
            ProxyBody::Origin(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|o| o.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Stored { obj, next } => *next >= obj.body.chunks().len(),
            ProxyBody::Busy(_) => false,
            ProxyBody::Origin(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Stored { obj, next } => SizeHint::with_exact(
                obj.body.chunks()[(*next).min(obj.body.chunks().len())..]
                    .iter()
                    .map(|c| c.len() as u64)
                    .sum(),
            ),
            ProxyBody::Busy(_) => SizeHint::default(),
            ProxyBody::Origin(b) => b.size_hint(),
        }
    }
}
