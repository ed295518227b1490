//! The executor hyper's HTTP/2 server runs each stream on (and
//! [`run_inline`], the same for each HTTP/3 request stream, `super::h3`).
//!
//! hyper hands every accepted HTTP/2 stream to an executor as a future
//! (the request's service future plus the sending of its response). Spawned
//! as a task of its own, a stream that is a cache hit finishes in its first
//! poll, wakes the connection task, and — as tokio runs a woken task next —
//! the connection writes that one response before the next stream has run:
//! one socket write (and one TLS record) per response, ten for ten streams
//! that arrived in one read.
//!
//! [`InlineExec`] polls a stream once, right where hyper accepts it, inside
//! the connection's task. A stream that completes (a hit from memory) never
//! becomes a task: its response is queued on the connection at once, and
//! with the connection's writes held back for the rest of that poll (see
//! [`super::cork`]) every response of the batch goes out in one write. A
//! stream that is still pending (a miss, a body still arriving, a disk read)
//! is spawned as a task and goes on as before; it is polled again there
//! with the task's waker, so nothing registered during the first poll is
//! relied upon (the first poll runs with a no-op waker).
//!
//! A panic in that first poll is caught: the stream is dropped (h2 resets
//! it) and the connection goes on, as it would have with a spawned task.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Polls each future once in place; spawns it on the tokio runtime only if
/// it is not done.
#[derive(Debug, Clone, Copy, Default)]
pub struct InlineExec;

impl<F> hyper::rt::Executor<F> for InlineExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        run_inline(
            fut,
            |f| {
                tokio::spawn(f);
            },
            "an HTTP/2 stream",
        );
    }
}

/// Polls `fut` once, here, and hands it to `spawn` only if it is not done:
/// what [`InlineExec`] does with hyper's HTTP/2 streams, and the HTTP/3
/// listener with each request stream (`super::h3`). A panic in that poll
/// is caught and logged (`what` panicked); the future is dropped, as a
/// task's would be (h2 resets the stream; quinn finishes an HTTP/3 one,
/// so a response without a length may look complete to its client).
pub fn run_inline<F>(fut: F, spawn: impl FnOnce(Pin<Box<F>>), what: &str)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => {}
        Ok(Poll::Pending) => spawn(fut),
        Err(_) => {
            tracing::error!("{what} panicked; it was dropped, the connection goes on");
        }
    }
}
