//! What a request's task notes for `serve`'s `log` phase: its cache
//! outcome, the member that owned its key, the servers its upstream tried.
//! A task-local slot rather than a response extension, which would cost
//! every request three allocations; written by whichever step decides
//! (the last one wins), read once by `serve`.

use std::sync::Arc;

use hoard_policy::cache_status::Outcome;

tokio::task_local! {
    /// The [`Outcome`] of the request the task is serving: set where its
    /// `Cache-Status` is (`add_cache_status`, `error_response`, a tunnel, a
    /// redirect), read by `serve` for the metrics and the access log. A
    /// slot of the request's task rather than a response extension, which
    /// would cost every request three allocations.
    pub(super) static OUTCOME: std::cell::Cell<Noted>;
}

/// What a request's task notes for `serve` (see [`OUTCOME`]).
#[derive(Debug, Default)]
pub(crate) struct Noted {
    /// The cache outcome; the last one wins.
    pub outcome: Option<Outcome>,
    /// In a cluster: the member (index) that owns the key of a request
    /// that went forward to another member, for the access log.
    pub owner: Option<u16>,
    /// For a request that went to the origin: the number of servers its
    /// upstream tried (set by the upstream, which may run in a fill's
    /// task), for the access log. The last origin request wins.
    pub tries: Option<Arc<hoard_origin::failover::Tries>>,
}

/// Changes what the request's task noted (see [`OUTCOME`]).
fn note(f: impl FnOnce(&mut Noted)) {
    let _ = OUTCOME.try_with(|c| {
        let mut n = c.take();
        f(&mut n);
        c.set(n);
    });
}

/// Records the request's outcome (see [`OUTCOME`]); the last one wins.
pub(crate) fn note_outcome(outcome: Outcome) {
    note(|n| n.outcome = Some(outcome));
}

/// The outcome noted so far (see [`OUTCOME`]).
pub(crate) fn current_outcome() -> Option<Outcome> {
    let mut out = None;
    note(|n| out = n.outcome);
    out
}

/// Records the member that owns the request's key (see [`Noted::owner`]).
pub(crate) fn note_owner(owner: u16) {
    note(|n| n.owner = Some(owner));
}

/// A count of servers tried for an origin request of this request's task
/// (see [`Noted::tries`]); `None` outside a request's task.
pub(crate) fn note_tries() -> Option<Arc<hoard_origin::failover::Tries>> {
    let tries = Arc::new(hoard_origin::failover::Tries::default());
    OUTCOME
        .try_with(|c| {
            let mut n = c.take();
            n.tries = Some(tries.clone());
            c.set(n);
        })
        .ok()?;
    Some(tries)
}
