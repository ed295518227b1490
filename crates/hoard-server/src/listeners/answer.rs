//! The future hyper runs for each request of a TCP connection: the
//! pipeline's [`Serving`](hoard_proxy::pipeline::Serving), then what the
//! connection adds to its response.
//!
//! ## Lifecycle
//!
//! 1. The request is served (`serving`).
//! 2. An HTTP/1.1 request is closed to interim responses; one still being
//!    written (a `103` the origin sent late) is waited for, in a boxed
//!    future: rare, so every other request's future keeps no room for it.
//! 3. The response gets `Alt-Svc` (HTTP/3 on the same port) and
//!    `Connection: close` (the connection's last request), and its body
//!    holds the request's [`InFlight`] token until it ends.
//!
//! Written out by hand rather than as an `async` block, which would keep
//! the request and the connection's facts beside the pipeline's future
//! that took them: hyper moves every byte of this future when the request
//! starts.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hoard_origin::interim::InterimQueue;
use http::{HeaderValue, Response};

use super::watch::{InFlight, Tracked};

/// Waiting for the request's interim responses to be written.
type Finishing = Pin<Box<dyn Future<Output = ()> + Send>>;

pin_project_lite::pin_project! {
    /// A request's answer on a TCP connection (see the module docs).
    pub(super) struct Answer<F, B> {
        #[pin]
        serving: F,
        // The response, once served, while interim responses are written.
        resp: Option<Response<B>>,
        interim: Option<Arc<InterimQueue>>,
        finishing: Option<Finishing>,
        alt_svc: Option<HeaderValue>,
        last: bool,
        token: Option<InFlight>,
    }
}

impl<F, B> Answer<F, B> {
    /// The answer to a request served by `serving`; `interim` is the
    /// connection's interim queue for an HTTP/1.1 request; `last` asks for
    /// `Connection: close`.
    pub(super) fn new(
        serving: F,
        interim: Option<Arc<InterimQueue>>,
        alt_svc: Option<HeaderValue>,
        last: bool,
        token: InFlight,
    ) -> Answer<F, B> {
        Answer {
            serving,
            resp: None,
            interim,
            finishing: None,
            alt_svc,
            last,
            token: Some(token),
        }
    }
}

impl<F, B> Future for Answer<F, B>
where
    F: Future<Output = Response<B>>,
{
    type Output = Result<Response<Tracked<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.resp.is_none() {
            let resp = ready!(this.serving.poll(cx));
            *this.resp = Some(resp);
            if let Some(q) = this.interim.take() {
                if !q.close() {
                    *this.finishing = Some(Box::pin(async move { q.finish().await }));
                }
            }
        }
        if let Some(f) = this.finishing.as_mut() {
            ready!(f.as_mut().poll(cx));
            *this.finishing = None;
        }
        let mut resp = this.resp.take().expect("invariant: not polled after Ready");
        if let Some(v) = this.alt_svc.take() {
            resp.headers_mut().insert(http::header::ALT_SVC, v);
        }
        if *this.last {
            resp.headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        let token = this
            .token
            .take()
            .expect("invariant: not polled after Ready");
        Poll::Ready(Ok(resp.map(|b| Tracked::new(b, token))))
    }
}

#[cfg(test)]
mod tests {
    use super::super::watch::{Activity, Limits};
    use super::*;
    use std::time::Duration;

    fn activity() -> Arc<Activity> {
        Activity::new(Limits {
            keep_alive_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            max_resets: 100,
            header_read_timeout: None,
        })
    }

    /// Polls `f` once with a waker that does nothing.
    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[tokio::test]
    async fn a_served_response_gets_the_connections_fields() {
        let a = activity();
        let answer = Answer::new(
            std::future::ready(Response::new(())),
            Some(Arc::new(InterimQueue::default())),
            Some(HeaderValue::from_static("h3=\":443\"")),
            true,
            a.request(),
        );
        let resp = answer.await.unwrap();
        assert_eq!(resp.headers()[http::header::ALT_SVC], "h3=\":443\"");
        assert_eq!(resp.headers()[http::header::CONNECTION], "close");
    }

    #[tokio::test]
    async fn the_answer_waits_until_a_queued_interim_response_is_written() {
        let a = activity();
        let q = Arc::new(InterimQueue::default());
        q.open(1).early_hints(&http::HeaderMap::new());
        let mut answer = std::pin::pin!(Answer::new(
            std::future::ready(Response::new(())),
            Some(q.clone()),
            None,
            false,
            a.request(),
        ));
        assert!(poll_once(answer.as_mut()).is_pending());
        assert!(poll_once(answer.as_mut()).is_pending());
        let mut written = Vec::new();
        let flushed = q.write_with(|b| {
            written.extend_from_slice(b);
            Poll::Ready(Ok(b.len()))
        });
        assert!(matches!(flushed, Poll::Ready(Ok(()))));
        assert!(written.starts_with(b"HTTP/1.1 103 Early Hints\r\n"));
        let resp = answer.await.unwrap();
        assert!(!resp.headers().contains_key(http::header::CONNECTION));
    }
}
