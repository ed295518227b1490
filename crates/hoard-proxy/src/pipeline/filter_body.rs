//! A response body streamed through a route's Proxy-Wasm filters' body
//! callbacks (`proxy_on_response_body`), in reverse order, as it goes to
//! the client (see `filters`).
//!
//! ## Model
//! Each chunk goes through the streams nearest the origin first; a stream
//! that returns `Pause` holds what it has seen (see
//! `hoard_wasm::Stream::on_body`) and the streams after it see nothing
//! until it lets the bytes go. The body's end is announced to every
//! stream in turn (`end_of_stream`), so all held bytes come out then.
//! Trailers follow the last bytes.
//!
//! ## Lifecycle
//! Streams of filters without a body callback are here only to end with
//! the body. The body owns the request's streams: they end (`proxy_on_log`,
//! `proxy_on_done`, `proxy_on_delete`) when it is dropped, after the last
//! byte or when the client goes away. A filter's failure mid-body aborts
//! the response (the connection is closed or the stream reset: the head
//! is gone already), counted and logged with the filter's name.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_metrics::counters::Counters;
use hoard_origin::error::BoxError;
use hoard_wasm::{BodyStep, Stream};
use http_body::{Body, Frame, SizeHint};

use crate::body::ProxyBody;

/// See the module docs.
pub(crate) struct FilteredBody {
    inner: ProxyBody,
    /// In request order (chunks go through them in reverse).
    streams: Vec<Stream>,
    counters: Arc<Counters>,
    /// Trailers that wait for the last bytes to go out.
    trailers: Option<Frame<Bytes>>,
    /// The inner body ended and every stream was told.
    ended: bool,
}

impl std::fmt::Debug for FilteredBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilteredBody")
            .field("streams", &self.streams)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl FilteredBody {
    pub(crate) fn new(inner: ProxyBody, streams: Vec<Stream>, counters: Arc<Counters>) -> Self {
        FilteredBody {
            inner,
            streams,
            counters,
            trailers: None,
            ended: false,
        }
    }

    /// `chunk` through the streams, in reverse; what comes out (`None`:
    /// a stream holds it).
    fn through(&mut self, mut chunk: Bytes, end: bool) -> Result<Option<Bytes>, BoxError> {
        for s in self.streams.iter_mut().rev() {
            // A stream kept only for its end (`proxy_on_log`) lets the
            // bytes by.
            if !s.wants_body(true) {
                continue;
            }
            let step = s.on_body(true, chunk, end);
            match step {
                Ok(BodyStep::Pass(out)) => chunk = out,
                Ok(BodyStep::Held) => return Ok(None),
                Ok(BodyStep::Respond(_)) => {
                    self.counters.inc(&self.counters.filter_failures);
                    tracing::warn!(filter = s.filter(), "a filter answered in a response body callback, after the response began; the response is cut");
                    return Err("a filter answered after the response began".into());
                }
                Err(e) => {
                    self.counters.inc(&self.counters.filter_failures);
                    tracing::warn!(filter = %e.filter, failure = e.kind.as_str(), detail = %e.detail, "a filter failed a response body; the response is cut");
                    return Err(Box::new(e));
                }
            }
        }
        Ok(Some(chunk))
    }
}

impl Body for FilteredBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let me = self.get_mut();
        loop {
            if me.ended {
                return Poll::Ready(me.trailers.take().map(Ok));
            }
            let (chunk, end) = match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => (data, false),
                    Err(trailers) => {
                        me.trailers = Some(trailers);
                        (Bytes::new(), true)
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => (Bytes::new(), true),
            };
            me.ended = end;
            match me.through(chunk, end) {
                Ok(Some(out)) if !out.is_empty() => return Poll::Ready(Some(Ok(Frame::data(out)))),
                Ok(_) => {}
                Err(e) => {
                    me.ended = true;
                    me.trailers = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
