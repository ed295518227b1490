//! Health of one origin server, as seen from the requests sent to it.
//!
//! Consecutive failures (connect errors, timeouts, 502/503/504) past a
//! threshold (upstream `down_after`, default 3) mark the server *down* for a
//! backoff that doubles while failures go on (1 s, 2 s, 4 s ... up to
//! `down_backoff_max`, default 30 s); any success marks it up again. While a
//! server is down, requests that have a stale copy allowed by stale-if-error
//! get it at once instead of waiting for another connect timeout. Requests
//! without a usable stale copy still go to the origin, so a recovered server
//! is found again.
//!
//! Time is the proxy clock's, so tests can move it.

use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

const BACKOFF_MIN: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct State {
    failures: u32,
    down_until: Option<SystemTime>,
    backoff: Duration,
}

/// One server's health. See the module docs.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
    threshold: u32,
    backoff_max: Duration,
}

impl Health {
    /// Down after `threshold` consecutive failures (0: never), backoff up to `backoff_max`.
    pub fn new(threshold: u32, backoff_max: Duration) -> Health {
        Health {
            state: Mutex::new(State::default()),
            threshold,
            backoff_max,
        }
    }

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
        if self.threshold > 0 && st.failures >= self.threshold {
            st.backoff = if st.backoff.is_zero() {
                BACKOFF_MIN.min(self.backoff_max)
            } else {
                (st.backoff * 2).min(self.backoff_max)
            };
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
        let h = Health::new(3, Duration::from_secs(30));
        let t0 = SystemTime::UNIX_EPOCH;
        h.failure(t0);
        h.failure(t0);
        assert!(!h.is_down(t0));
        h.failure(t0);
        assert!(h.is_down(t0));
        assert!(!h.is_down(t0 + Duration::from_secs(1)), "backoff of 1 s");
        h.failure(t0);
        assert!(
            h.is_down(t0 + Duration::from_millis(1999)),
            "backoff doubles"
        );
        h.success();
        assert!(!h.is_down(t0));
        let never = Health::new(0, Duration::from_secs(30));
        (0..10).for_each(|_| never.failure(t0));
        assert!(!never.is_down(t0), "down_after = 0 disables it");
    }
}
