//! The body clients get: a [`ProxyBody`] that counts what it sends and, when
//! it ends or is dropped, adds the bytes to the metrics and writes the
//! request's access log line.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::access_log::{AccessLog, Record};
use crate::body::ProxyBody;
use hoard_metrics::metrics::Metrics;
use hoard_origin::error::BoxError;

/// An access log line waiting for the end of its body.
#[derive(Debug)]
pub struct Pending {
    /// Where the line goes.
    pub log: Arc<AccessLog>,
    /// The line so far.
    pub record: Record,
    /// When the request head arrived.
    pub started: Instant,
}

impl Pending {
    /// Writes the line: `sent` body bytes, and the time since the request
    /// head.
    pub fn write(self, sent: u64) {
        let Pending {
            log,
            mut record,
            started,
        } = self;
        record.bytes = sent;
        record.total = started.elapsed();
        log.write(record);
    }
}

/// A counted response body. See the module docs.
#[derive(Debug)]
pub struct Tallied {
    inner: ProxyBody,
    sent: u64,
    metrics: Arc<Metrics>,
    pending: Option<Box<Pending>>,
    /// A request in progress of a route's `limit_connections`, given back
    /// when the body ends.
    held: Option<Arc<hoard_edge::limit::ConnGuard>>,
}

impl Tallied {
    /// Wraps a body; `pending` is its access log line, if the log is on.
    pub fn new(inner: ProxyBody, metrics: Arc<Metrics>, pending: Option<Box<Pending>>) -> Tallied {
        Tallied {
            inner,
            sent: 0,
            metrics,
            pending,
            held: None,
        }
    }

    /// Keeps `guard` until the body ends.
    pub fn hold(&mut self, guard: Option<Arc<hoard_edge::limit::ConnGuard>>) {
        self.held = guard;
    }
}

impl Drop for Tallied {
    fn drop(&mut self) {
        self.metrics
            .client_bytes
            .fetch_add(self.sent, std::sync::atomic::Ordering::Relaxed);
        if let Some(p) = self.pending.take() {
            p.write(self.sent);
        }
        self.held.take();
    }
}

impl Body for Tallied {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if let Some(d) = f.data_ref() {
                this.sent += d.len() as u64;
            }
        }
        r
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
