//! Health of one origin server: what the requests sent to it found
//! (passive), what the upstream's probes found (active, see
//! [`crate::probe`]), and what an administrator set.
//!
//! ## Passive
//! Consecutive failures (connect errors, timeouts, 502/503/504) past a
//! threshold (upstream `down_after`, default 3) mark the server *down* for a
//! backoff that doubles while failures go on (1 s, 2 s, 4 s ... up to
//! `down_backoff_max`, default 30 s); any success marks it up again. While a
//! server is down, requests that have a stale copy allowed by stale-if-error
//! get it at once instead of waiting for another connect timeout. Requests
//! without a usable stale copy still go to the origin, so a recovered server
//! is found again.
//!
//! ## Active
//! With `health_check`, the last `window` probes are kept; the server is in
//! service while at least `threshold` of them passed. It starts as if every
//! probe had passed (a start or reload takes no server out before its
//! probes say so). A server the probes fail is *out*: no request goes to it,
//! not even as a last resort (its recovery is the probes' to find).
//!
//! ## Administrative
//! `up` keeps a server in service whatever the probes say, `down` and
//! `drain` take it out (requests in progress finish; `drain` says so), `auto`
//! goes back to the rest of this module. A reload or restart returns every
//! server to `auto`.
//!
//! Time is the proxy clock's, so tests can move it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// What an administrator set for a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    /// Health decides (passive and active).
    Auto,
    /// In service, whatever the probes say.
    Up,
    /// Out of service.
    Down,
    /// Out of service for new requests; those in progress finish.
    Drain,
}

impl Admin {
    /// The name in the admin API, `/status` and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Admin::Auto => "auto",
            Admin::Up => "up",
            Admin::Down => "down",
            Admin::Drain => "drain",
        }
    }

    /// The state named `s` in the admin API.
    pub fn parse(s: &str) -> Option<Admin> {
        [Admin::Auto, Admin::Up, Admin::Down, Admin::Drain]
            .into_iter()
            .find(|a| a.as_str() == s)
    }
}

/// The last probes of a server, newest in the lowest bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeWindow {
    bits: u64,
    window: u8,
    threshold: u8,
}

impl ProbeWindow {
    /// `window` probes (1 to 64), `threshold` of them to pass; starts as if
    /// all had passed.
    pub fn new(window: u8, threshold: u8) -> ProbeWindow {
        let window = window.clamp(1, 64);
        ProbeWindow {
            bits: mask(window),
            window,
            threshold: threshold.clamp(1, window),
        }
    }

    /// Records a probe.
    pub fn record(&mut self, passed: bool) {
        self.bits = ((self.bits << 1) | u64::from(passed)) & mask(self.window);
    }

    /// Probes passed among the last `window`.
    pub fn passed(&self) -> u8 {
        self.bits.count_ones() as u8
    }

    /// The window's size.
    pub fn window(&self) -> u8 {
        self.window
    }

    /// At least `threshold` passed.
    pub fn healthy(&self) -> bool {
        self.passed() >= self.threshold
    }
}

fn mask(window: u8) -> u64 {
    if window >= 64 {
        u64::MAX
    } else {
        (1u64 << window) - 1
    }
}

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
    /// The probes' window, with `health_check`.
    probes: Option<Mutex<ProbeWindow>>,
    /// An [`Admin`] as `u8`.
    admin: AtomicU8,
}

impl Health {
    /// Down after `threshold` consecutive failures (0: never), backoff up to `backoff_max`.
    pub fn new(threshold: u32, backoff_max: Duration) -> Health {
        Health {
            state: Mutex::new(State::default()),
            threshold,
            backoff_max,
            probes: None,
            admin: AtomicU8::new(Admin::Auto as u8),
        }
    }

    /// With probes: `window` kept, `threshold` to pass (see the module docs).
    pub fn with_probes(mut self, window: u8, threshold: u8) -> Health {
        self.probes = Some(Mutex::new(ProbeWindow::new(window, threshold)));
        self
    }

    /// Records a probe; true when it changed whether the probes keep the
    /// server in service.
    pub fn probed(&self, passed: bool) -> bool {
        let Some(p) = &self.probes else { return false };
        let mut w = p.lock();
        let before = w.healthy();
        w.record(passed);
        before != w.healthy()
    }

    /// The probes' window now, with probes.
    pub fn probe_window(&self) -> Option<ProbeWindow> {
        self.probes.as_ref().map(|p| *p.lock())
    }

    /// What an administrator set.
    pub fn admin(&self) -> Admin {
        match self.admin.load(Ordering::Relaxed) {
            1 => Admin::Up,
            2 => Admin::Down,
            3 => Admin::Drain,
            _ => Admin::Auto,
        }
    }

    /// Sets what an administrator wants.
    pub fn set_admin(&self, a: Admin) {
        self.admin.store(a as u8, Ordering::Relaxed);
    }

    /// True when no request may go to the server at all: set down or
    /// draining, or failing its probes (unless set up).
    pub fn is_out(&self) -> bool {
        match self.admin() {
            Admin::Down | Admin::Drain => true,
            Admin::Up => false,
            Admin::Auto => self.probe_window().is_some_and(|w| !w.healthy()),
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

    /// True while the server is considered down at `now`: out (see
    /// [`Health::is_out`]), or down after failed requests (unless set up).
    pub fn is_down(&self, now: SystemTime) -> bool {
        if self.is_out() {
            return true;
        }
        self.admin() != Admin::Up && self.state.lock().down_until.is_some_and(|t| now < t)
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

    #[test]
    fn probes_keep_a_window() {
        let mut w = ProbeWindow::new(5, 3);
        assert!(w.healthy(), "starts as if every probe passed");
        w.record(false);
        w.record(false);
        assert!(w.healthy(), "3 of 5 passed");
        w.record(false);
        assert!(!w.healthy());
        assert_eq!(w.passed(), 2);
        (0..5).for_each(|_| w.record(false));
        w.record(true);
        w.record(true);
        assert!(!w.healthy());
        w.record(true);
        assert!(w.healthy(), "3 passes bring it back");
        let mut big = ProbeWindow::new(64, 64);
        big.record(false);
        assert!(!big.healthy());
        assert_eq!(big.passed(), 63);
    }

    #[test]
    fn an_administrator_overrides_health() {
        let t0 = SystemTime::UNIX_EPOCH;
        let h = Health::new(1, Duration::from_secs(30)).with_probes(2, 2);
        assert!(!h.is_out() && !h.is_down(t0));
        assert!(h.probed(false), "2 of 2 needed: out at the first failure");
        assert!(h.is_out() && h.is_down(t0));
        h.set_admin(Admin::Up);
        assert!(!h.is_out() && !h.is_down(t0));
        h.failure(t0);
        assert!(
            !h.is_down(t0),
            "set up: requests' failures do not take it out"
        );
        h.set_admin(Admin::Drain);
        assert!(h.is_out());
        h.set_admin(Admin::Auto);
        assert!(h.is_out(), "back to the probes");
        assert!(!h.probed(true));
        assert!(h.probed(true));
        assert!(!h.is_out());
        assert_eq!(Admin::parse("drain"), Some(Admin::Drain));
        assert_eq!(Admin::parse("sick"), None);
    }
}
