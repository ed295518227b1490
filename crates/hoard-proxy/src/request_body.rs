//! A client's request body, whatever the connection's protocol: hyper's
//! (HTTP/1.1, HTTP/2) or an HTTP/3 request stream's (see
//! `hoard_server::listeners::h3`). The pipeline reads it as one `http_body::Body`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use hoard_origin::error::BoxError;

/// An HTTP/3 request stream's receiving half.
pub type H3Recv = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// See the module docs.
pub enum RequestBody {
    /// HTTP/1.1 or HTTP/2.
    Hyper(Incoming),
    /// HTTP/3: the stream's data frames, then its trailers. `None` once
    /// the body ended.
    H3 {
        /// The stream, until its end.
        stream: Option<Box<H3Recv>>,
        /// Its data ended; trailers are next.
        data_done: bool,
        /// No body at all (the request's head ended the stream).
        empty: bool,
    },
    /// Read whole already (by a route's filters' body callbacks); `None`
    /// once sent.
    Full(Option<Bytes>),
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestBody::Hyper(b) => b.fmt(f),
            RequestBody::H3 { data_done, .. } => {
                f.debug_struct("H3").field("data_done", data_done).finish()
            }
            RequestBody::Full(b) => f
                .debug_tuple("Full")
                .field(&b.as_ref().map(Bytes::len))
                .finish(),
        }
    }
}

impl RequestBody {
    /// The body of an HTTP/3 request; `empty` when the client said there
    /// is none (no `Content-Length`, or 0, on a method without a body).
    pub fn h3(stream: H3Recv, empty: bool) -> RequestBody {
        RequestBody::H3 {
            stream: (!empty).then(|| Box::new(stream)),
            data_done: false,
            empty,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            RequestBody::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|o| o.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
            RequestBody::H3 {
                stream, data_done, ..
            } => {
                let Some(s) = stream.as_mut() else {
                    return Poll::Ready(None);
                };
                if !*data_done {
                    match s.poll_recv_data(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(Some(mut buf))) => {
                            let n = buf.remaining();
                            return Poll::Ready(Some(Ok(Frame::data(buf.copy_to_bytes(n)))));
                        }
                        Poll::Ready(Ok(None)) => *data_done = true,
                        Poll::Ready(Err(e)) => {
                            *stream = None;
                            return Poll::Ready(Some(Err(Box::new(e))));
                        }
                    }
                }
                let r = match s.poll_recv_trailers(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => r,
                };
                *stream = None;
                match r {
                    Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
                    Ok(None) => Poll::Ready(None),
                    Err(e) => Poll::Ready(Some(Err(Box::new(e)))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(b) => b.is_end_stream(),
            RequestBody::H3 { stream, empty, .. } => *empty || stream.is_none(),
            RequestBody::Full(b) => b.as_ref().is_none_or(Bytes::is_empty),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(b) => b.size_hint(),
            RequestBody::H3 { empty: true, .. } => SizeHint::with_exact(0),
            RequestBody::H3 { .. } => SizeHint::default(),
            RequestBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
