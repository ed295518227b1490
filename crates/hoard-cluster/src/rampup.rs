//! Joining a warm cluster without an origin storm.
//!
//! When a member joins, rendezvous hashing moves to it about `1/N` of the
//! keys, each from one previous owner, which still holds it. For
//! `rampup` after this node joined (its discovery first found other
//! members; with a static list, after its start), a miss for a key it owns
//! is first asked of the key's second choice, which is the key's previous
//! owner under the member set without this node, with
//! `Cache-Control: only-if-cached` (RFC 9111 §5.2.1.7): a fresh stored copy
//! comes back and is stored here as this node's own; anything else (504,
//! no connection) and the miss goes on to the parent tier or the origin as
//! usual. Revalidations are not asked: the previous owner holds no fresher
//! state than this node's stored copy. The cost when the previous owner
//! does not hold the key is one loopback-sized round trip, for `rampup`
//! only.
//!
//! ## State
//!
//! One atomic: the end of the ramp-up window (Unix ms, 0 while it has not
//! begun), set once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::header::{HeaderValue, CACHE_CONTROL};
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;

use super::member::Member;
use super::Cluster;
use hoard_origin::{OriginBody, OriginRequest};

/// The ramp-up window. See the module docs.
#[derive(Debug)]
pub struct Rampup {
    length: Duration,
    until_ms: AtomicU64,
}

impl Rampup {
    /// A window of `length` (zero: none), not begun.
    pub fn new(length: Duration) -> Rampup {
        Rampup {
            length,
            until_ms: AtomicU64::new(0),
        }
    }

    /// Begins the window at `now_ms` (once; later calls do nothing).
    pub fn begin(&self, now_ms: u64) {
        if self.length.is_zero() {
            return;
        }
        let until = now_ms + self.length.as_millis() as u64;
        let _ = self
            .until_ms
            .compare_exchange(0, until, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// True while the window is open at `now_ms`.
    pub fn open(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Relaxed)
    }

    /// The window's end (Unix ms), if it has begun.
    pub fn until_ms(&self) -> Option<u64> {
        Some(self.until_ms.load(Ordering::Relaxed)).filter(|u| *u != 0)
    }
}

impl Cluster {
    /// Asks `prev`, the previous owner of a key this node owns, for a
    /// fresh stored copy while this node ramps up; its answer if it had
    /// one. See the module docs.
    pub(super) async fn ask_previous(
        &self,
        prev: &Member,
        tls: bool,
        base: &OriginRequest,
    ) -> Option<Response<OriginBody>> {
        let now = self.clock_ms();
        if !self.rampup.open(now)
            || base.method != Method::GET
            || base.headers.contains_key(http::header::IF_NONE_MATCH)
            || base.headers.contains_key(http::header::IF_MODIFIED_SINCE)
            || base.headers.contains_key(http::header::RANGE)
            || !prev.up()
        {
            return None;
        }
        let mut hop = self.hop(base, tls);
        hop.headers
            .insert(CACHE_CONTROL, HeaderValue::from_static("only-if-cached"));
        match self.ask(prev, hop, false).await {
            Ok(resp) if resp.status() != StatusCode::GATEWAY_TIMEOUT => {
                self.counters.inc(&self.counters.cluster_rampup_hits);
                Some(resp)
            }
            Ok(resp) => {
                // Read to the end: the connection goes back to the pool.
                let _ = resp.into_body().collect().await;
                self.counters.inc(&self.counters.cluster_rampup_misses);
                None
            }
            Err(e) => {
                self.counters.inc(&self.counters.cluster_rampup_misses);
                tracing::info!(previous = %prev.name, error = %e, "previous owner not reached while ramping up; on to the origin");
                None
            }
        }
    }

    /// Begins this node's ramp-up window now (see the module docs).
    pub fn begin_rampup(&self) {
        self.rampup.begin(self.clock_ms());
    }

    /// The end of this node's ramp-up window (Unix ms), if it began.
    pub fn rampup_until_ms(&self) -> Option<u64> {
        self.rampup.until_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_begins_once_and_closes() {
        let r = Rampup::new(Duration::from_secs(60));
        assert!(!r.open(1_000));
        r.begin(1_000);
        r.begin(50_000);
        assert!(r.open(60_999));
        assert!(!r.open(61_000));
        let none = Rampup::new(Duration::ZERO);
        none.begin(1_000);
        assert!(!none.open(1_001));
        assert_eq!(none.until_ms(), None);
    }
}
