//! Failover: the servers of an upstream a request is tried on, in what
//! order, and when a failed try goes on to the next one.
//!
//! ## Order
//!
//! The first try goes to the next of `servers` round-robin that health
//! (see [`super::health`]) says is up. After a failure the rest follow:
//! the other `servers` that are up, then the `backup` servers that are up,
//! then the servers that are down (as a last resort, so that a recovered
//! one is found), each group from the same round-robin start. A server that
//! is *out* (set down or draining by an administrator, or failing its
//! health check: see [`super::health`]) is never tried. A backup
//! server therefore serves only while every one of `servers` is down or has
//! failed for this request. `tries` bounds the whole (default: every
//! server once).
//!
//! ## When to go on
//!
//! * A request that never reached the server (connect refused or timed out,
//!   TLS handshake failed, or the connection closed before the request was
//!   written and hyper gave it back) goes on whatever its method: nothing
//!   was processed. Its body, not streamed yet, goes with it.
//! * Otherwise only an idempotent method (RFC 9110 §9.2.2) with an empty
//!   body goes on, and only on the upstream's `retry_on` conditions:
//!   `error` (the connection failed or was reset before a response head),
//!   `timeout` (no response head within `read_timeout`), `502`, `503`,
//!   `504` (that answer from the server). A body already streamed is never
//!   sent twice.
//! * On the last try, an answer with a retryable status goes to the client
//!   as it is.

use http::Method;
use std::sync::atomic::{AtomicU32, Ordering};

pub use hoard_config::RetryOn;

/// How one try on a server ended without an answer for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request never reached the server (see the module docs).
    Unsent,
    /// The connection failed or was reset after the request was (maybe)
    /// written, before a response head.
    Error,
    /// No response head within the read timeout.
    Timeout,
    /// The server answered with this retryable status (502, 503, 504).
    Status(u16),
    /// Anything else (the client's body failed, a response with broken
    /// framing): never tried elsewhere.
    Final,
}

impl Failure {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Unsent => "unsent",
            Failure::Error => "error",
            Failure::Timeout => "timeout",
            Failure::Status(502) => "502",
            Failure::Status(503) => "503",
            Failure::Status(_) => "504",
            Failure::Final => "final",
        }
    }

    /// Whether the request goes on to the next server after this failure.
    /// `replayable`: its body is empty, so it can be sent again.
    pub fn goes_on(self, on: RetryOn, method: &Method, replayable: bool) -> bool {
        match self {
            Failure::Unsent => true,
            Failure::Final => false,
            _ if !(replayable && method.is_idempotent()) => false,
            Failure::Error => on.has("error"),
            Failure::Timeout => on.has("timeout"),
            Failure::Status(s) => on.status(s),
        }
    }
}

/// The number of servers a request was tried on, for its access log line:
/// set by the upstream, read by the request's task when it logs.
#[derive(Debug, Default)]
pub struct Tries(AtomicU32);

impl Tries {
    /// Servers tried so far.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, n: u32) {
        self.0.store(n, Ordering::Relaxed);
    }
}

/// A server's state for the order of tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Usable {
    /// Up: tried in turn.
    Up,
    /// Down after failed requests: tried last.
    Down,
    /// Out of service: never tried.
    Out,
}

/// Indexes `0..primaries` are the upstream's `servers`, the next
/// `backups` its `backup` ones. The first server to try from round-robin
/// position `start`: the first up one of `servers`, else of `backup`, else
/// the first of `servers` (then of `backup`) that is not out; `None` when
/// every server is out. Allocates nothing.
pub(super) fn first(
    primaries: usize,
    backups: usize,
    start: usize,
    state: impl Fn(usize) -> Usable,
) -> Option<usize> {
    let all = || rotation(0, primaries, start).chain(rotation(primaries, backups, start));
    all()
        .find(|&i| state(i) == Usable::Up)
        .or_else(|| all().find(|&i| state(i) != Usable::Out))
}

/// Every server that is not out, in the order of the module docs, from
/// round-robin position `start`, with `state` read once per server.
pub(super) fn order(
    primaries: usize,
    backups: usize,
    start: usize,
    state: impl Fn(usize) -> Usable,
) -> Vec<usize> {
    let st: Vec<Usable> = (0..primaries + backups).map(state).collect();
    let all = || rotation(0, primaries, start).chain(rotation(primaries, backups, start));
    all()
        .filter(|&i| st[i] == Usable::Up)
        .chain(all().filter(|&i| st[i] == Usable::Down))
        .collect()
}

fn rotation(base: usize, n: usize, start: usize) -> impl Iterator<Item = usize> + Clone {
    (0..n).map(move |k| base + (start + k) % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_if(f: impl Fn(usize) -> bool) -> impl Fn(usize) -> Usable {
        move |i| if f(i) { Usable::Up } else { Usable::Down }
    }

    #[test]
    fn order_puts_backups_after_live_servers_and_down_ones_last() {
        // servers 0, 1, 2; backups 3, 4; 1 and 3 down.
        let up = up_if(|i: usize| i != 1 && i != 3);
        assert_eq!(order(3, 2, 1, &up), [2, 0, 4, 1, 3]);
        assert_eq!(first(3, 2, 1, &up), Some(2));
        // Every primary down: a backup first.
        assert_eq!(first(2, 1, 0, up_if(|i| i == 2)), Some(2));
        // Everything down: round-robin over the primaries.
        assert_eq!(first(2, 1, 1, up_if(|_| false)), Some(1));
        assert_eq!(order(2, 1, 1, up_if(|_| false)), [1, 0, 2]);
    }

    #[test]
    fn servers_out_are_never_tried() {
        // servers 0, 1; backup 2; 0 out, 1 down.
        let st = |i: usize| match i {
            0 => Usable::Out,
            1 => Usable::Down,
            _ => Usable::Up,
        };
        assert_eq!(first(2, 1, 0, st), Some(2));
        assert_eq!(order(2, 1, 0, st), [2, 1]);
        assert_eq!(
            first(2, 0, 0, |i| if i == 0 { Usable::Out } else { Usable::Down }),
            Some(1)
        );
        assert_eq!(first(2, 1, 0, |_| Usable::Out), None);
        assert!(order(2, 1, 0, |_| Usable::Out).is_empty());
    }

    #[test]
    fn only_unsent_requests_go_on_whatever_the_method() {
        let on = RetryOn::DEFAULT.with("503").unwrap();
        assert!(Failure::Unsent.goes_on(RetryOn::NONE, &Method::POST, false));
        assert!(Failure::Error.goes_on(on, &Method::GET, true));
        assert!(!Failure::Error.goes_on(on, &Method::POST, true));
        assert!(
            !Failure::Error.goes_on(on, &Method::PUT, false),
            "body streamed"
        );
        assert!(!Failure::Timeout.goes_on(on, &Method::GET, true));
        assert!(Failure::Status(503).goes_on(on, &Method::GET, true));
        assert!(!Failure::Status(502).goes_on(on, &Method::GET, true));
        assert!(!Failure::Final.goes_on(on, &Method::GET, true));
        assert!(RetryOn::NONE.with("bogus").is_err());
        assert_eq!(on.names().collect::<Vec<_>>(), ["error", "503"]);
    }
}
