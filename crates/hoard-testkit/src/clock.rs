//! A wall clock that only moves when the test says so.
//!
//! The proxy and the fake origin share one [`TestClock`]: the origin stamps
//! `Date` from it and the proxy computes `Age` and freshness from it, so
//! `t.clock.advance(..)` moves both together. It starts at a fixed whole
//! second, 2026-01-01T00:00:00Z ([`TestClock::START_UNIX_SECS`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hoard_policy::clock::Clock;
use parking_lot::Mutex;

use crate::transcript::Transcript;

/// A shared, manually advanced wall clock. Clones share the same time.
#[derive(Clone)]
pub struct TestClock {
    now: Arc<Mutex<SystemTime>>,
    transcript: Option<Transcript>,
}

impl TestClock {
    /// The start time, 2026-01-01T00:00:00Z, in seconds since the Unix epoch.
    pub const START_UNIX_SECS: u64 = 1_767_225_600;

    /// A clock at the start time that logs nowhere.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// A clock at the start time that logs each `advance` to `transcript`.
    pub(crate) fn with_transcript(transcript: Transcript) -> Self {
        Self::build(Some(transcript))
    }

    fn build(transcript: Option<Transcript>) -> Self {
        let start = UNIX_EPOCH + Duration::from_secs(Self::START_UNIX_SECS);
        Self {
            now: Arc::new(Mutex::new(start)),
            transcript,
        }
    }

    /// The start time as a [`SystemTime`].
    pub fn start() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(Self::START_UNIX_SECS)
    }

    /// The current time of this clock.
    pub fn now(&self) -> SystemTime {
        *self.now.lock()
    }

    /// How far the clock has moved since the start time.
    pub fn elapsed(&self) -> Duration {
        self.now().duration_since(Self::start()).unwrap_or_default()
    }

    /// Moves the clock forward by `by` (sub-second steps are allowed).
    pub fn advance(&self, by: Duration) {
        let now = {
            let mut now = self.now.lock();
            *now += by;
            *now
        };
        if let Some(t) = &self.transcript {
            t.log(
                "clock",
                format_args!("advance {by:?} -> {}", httpdate::fmt_http_date(now)),
            );
        }
    }

    /// This clock as the trait object the proxy takes.
    pub fn as_clock(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }
}

impl Default for TestClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TestClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TestClock")
            .field(&httpdate::fmt_http_date(self.now()))
            .finish()
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        TestClock::now(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_2026_and_advances() {
        let c = TestClock::new();
        assert_eq!(
            httpdate::fmt_http_date(c.now()),
            "Thu, 01 Jan 2026 00:00:00 GMT"
        );
        let shared = c.as_clock();
        c.advance(Duration::from_millis(1500));
        assert_eq!(
            shared.now(),
            TestClock::start() + Duration::from_millis(1500)
        );
        assert_eq!(c.elapsed(), Duration::from_millis(1500));
    }
}
