//! The future of a request being served ([`Pipeline::serve`]).
//!
//! ## Model
//!
//! `serve` does the request's first, synchronous part itself (counters,
//! the access log's record, the intercept check) and returns a
//! [`Serving`]: the work left ([`Work`]) and what its `log` phase needs.
//! The work is one of:
//!
//! - `Now`: a node's own answer, already made (not logged);
//! - `Intercept`: a logged intercept (`PURGE` and the like), boxed: rare;
//! - `Route`: the route's phases (`recv` to `deliver`), run inside the
//!   task-local slot where they note their outcome (see `noted`).
//!
//! Once the work answers, `poll` runs the `log` phase and is done; it is
//! not polled again (hyper drops a finished future).
//!
//! Written out by hand, not as an `async fn`: an `async fn` keeps its
//! arguments (the request and the connection, 328 bytes) for its whole
//! life beside the future it awaits, and a future that awaits another
//! holds it inline. hyper moves every byte of the request's future when
//! the request starts; `future_sizes` keeps the budget.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use hoard_origin::error::ProxyError;
use hoard_policy::cache_status::Outcome;
use http::Response;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Instant;

use super::{trace, Noted, Pipeline};
use crate::body::ProxyBody;
use crate::tally::{Pending, Tallied};

pin_project_lite::pin_project! {
    /// A request being served: its work, then its `log` phase (see the
    /// module docs). `F` is the route phases' future.
    pub struct Serving<F> {
        pub(super) pipeline: Arc<Pipeline>,
        pub(super) started: Instant,
        pub(super) line: Option<Box<Pending>>,
        pub(super) watched: Option<Box<trace::Traced>>,
        #[pin]
        pub(super) work: Work<F>,
    }
}

/// A logged intercept's future.
type Intercepted = Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send>>;

pin_project_lite::pin_project! {
    /// What a request being served still has to do.
    #[project = WorkProj]
    pub(super) enum Work<F> {
        /// The node's own answer, made at once; taken when polled.
        Now { resp: Option<Response<Tallied>> },
        /// A logged intercept (counted and logged as `purge`).
        Intercept { fut: Intercepted },
        /// The route's phases, inside the request's noted state.
        Route {
            #[pin]
            fut: TaskLocalFuture<Cell<Noted>, F>,
        },
    }
}

impl<F> Future for Serving<F>
where
    F: Future<Output = Result<Response<ProxyBody>, ProxyError>>,
{
    type Output = Response<Tallied>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<Tallied>> {
        let this = self.project();
        let (resp, noted, purge) = match this.work.project() {
            WorkProj::Now { resp } => {
                return Poll::Ready(resp.take().expect("invariant: not polled after Ready"))
            }
            WorkProj::Intercept { fut } => (ready!(fut.as_mut().poll(cx)), Noted::default(), true),
            WorkProj::Route { mut fut } => {
                let result = ready!(fut.as_mut().poll(cx));
                let mut noted = fut.take_value().map(Cell::into_inner).unwrap_or_default();
                let resp = match result {
                    Ok(resp) => resp,
                    Err(e) => {
                        // Made outside the noted state, where its own note
                        // of the outcome goes nowhere: noted here (the
                        // last outcome wins, and this is the last).
                        noted.outcome = Some(Outcome::Error);
                        this.pipeline.error_response(&e, None)
                    }
                };
                (resp, noted, false)
            }
        };
        Poll::Ready(this.pipeline.log(
            resp,
            noted,
            purge,
            *this.started,
            this.line.take(),
            this.watched.take(),
        ))
    }
}
