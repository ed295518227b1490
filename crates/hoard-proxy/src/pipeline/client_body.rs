//! A request body on its way to the origin, with a deadline on each wait:
//! a client that stops sending for `body_read_timeout` gets 408 (nginx's
//! `client_body_timeout`). Only time spent waiting for the client counts;
//! time the origin takes to read is not the client's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use hoard_origin::error::BoxError;

pub use hoard_origin::error::BodyTimeout;

/// See the module docs.
#[derive(Debug)]
pub struct ClientBody<B> {
    inner: B,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<B> ClientBody<B> {
    /// Wraps a body; each wait for the next frame may last `timeout`.
    pub fn new(inner: B, timeout: Duration) -> ClientBody<B> {
        ClientBody {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            waiting: false,
        }
    }
}

impl<B> Body for ClientBody<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if !this.waiting {
            this.deadline.as_mut().reset(Instant::now() + this.timeout);
            this.waiting = true;
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.waiting = false;
                Poll::Ready(r)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
