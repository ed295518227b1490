//! The body of an origin's response: the read timeout between frames,
//! bytes counted for metrics, and the connection returned to its pool at
//! the end (dropped, never reused, after an error).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;

use super::pool::PoolReturn;
use hoard_metrics::metrics::UpstreamStats;

/// Why an origin body failed.
#[derive(Debug)]
pub enum OriginBodyError {
    /// No data within the read timeout.
    Timeout,
    /// The connection failed or the framing was broken.
    Aborted(hyper::Error),
}

impl std::fmt::Display for OriginBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OriginBodyError::Timeout => f.write_str("origin body read timed out"),
            OriginBodyError::Aborted(e) => write!(f, "origin body aborted: {e}"),
        }
    }
}

impl std::error::Error for OriginBodyError {}

/// A response body from an origin: read timeout between frames, connection
/// returned to the pool at the end.
#[derive(Debug)]
pub struct OriginBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    ret: Option<PoolReturn>,
    stats: Arc<UpstreamStats>,
}

impl OriginBody {
    pub(super) fn new(
        inner: Incoming,
        timeout: Duration,
        ret: PoolReturn,
        stats: Arc<UpstreamStats>,
    ) -> OriginBody {
        let mut b = OriginBody {
            inner,
            timeout,
            sleep: None,
            ret: Some(ret),
            stats,
        };
        if b.inner.is_end_stream() {
            b.release();
        }
        b
    }

    fn release(&mut self) {
        if let Some(r) = self.ret.take() {
            r.release();
        }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = OriginBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginBodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                this.sleep = None;
                if let Some(d) = f.data_ref() {
                    this.stats
                        .bytes
                        .fetch_add(d.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                if this.inner.is_end_stream() {
                    this.release();
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.ret = None;
                Poll::Ready(Some(Err(OriginBodyError::Aborted(e))))
            }
            Poll::Ready(None) => {
                this.release();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if sleep.as_mut().poll(cx).is_ready() {
                    this.ret = None;
                    return Poll::Ready(Some(Err(OriginBodyError::Timeout)));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
