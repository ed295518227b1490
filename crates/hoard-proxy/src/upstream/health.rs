//! Health of one origin server, as seen from the requests sent to it.
//!
//! Consecutive failures (connect errors, timeouts, 502/503/504) past a
//! threshold mark the server *down* for a backoff that doubles while failures
//! go on (1 s, 2 s, 4 s ... 30 s); any success marks it up again. While a
//! server is down, requests that have a stale copy allowed by stale-if-error
//! get it at once instead of waiting for another connect timeout. Requests
//! without a usable stale copy still go to the origin, so a recovered server
//! is found again.
//!
//! Time is the proxy clock's, so tests can move it.

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// Consecutive failures before a server is considered down.
pub const FAILURE_THRESHOLD: u32 = 3;
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct State {
    failures: u32,
    down_until: Option<SystemTime>,
    backoff: Duration,
}

/// One server's health. See the module docs.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<State>,
}

impl Health {
    /// A request succeeded.
    pub fn success(&self) {
        let mut st = self.state.lock();
        st.failures = 0;
        st.down_until = None;
        st.backoff = Duration::ZERO;
    }

    /// A request failed at `now`.
    pub fn failure(&self, now: SystemTime) {
        let mut st = self.state.lock();
        st.failures += 1;
        if st.failures >= FAILURE_THRESHOLD {
            st.backoff = if st.backoff.is_zero() { BACKOFF_MIN } else { (st.backoff * 2).min(BACKOFF_MAX) };
            st.down_until = Some(now + st.backoff);
        }
    }

    /// True while the server is considered down at `now`.
    pub fn is_down(&self, now: SystemTime) -> bool {
        self.state.lock().down_until.is_some_and(|t| now < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_threshold_up_after_success() {
        let h = Health::default();
        let t0 = SystemTime::UNIX_EPOCH;
        h.failure(t0);
        h.failure(t0);
        assert!(!h.is_down(t0));
        h.failure(t0);
        assert!(h.is_down(t0));
        assert!(!h.is_down(t0 + Duration::from_secs(1)), "backoff of 1 s");
        h.failure(t0);
        assert!(h.is_down(t0 + Duration::from_millis(1999)), "backoff doubles");
        h.success();
        assert!(!h.is_down(t0));
    }
}
