//! Per-client limits of a route: a request rate (nginx `limit_req` with
//! `nodelay`) and requests in progress (nginx `limit_conn`).
//!
//! ## Rate
//! Each client address gets a GCRA cell from the `governor` crate: `rate`
//! requests per second (or minute) on average, `burst` more at once.
//! Excess requests are answered 429 with `Retry-After` (the whole seconds
//! until one more would conform), never queued. The cells live in a
//! bounded cache (`quick_cache`, CLOCK-Pro eviction) of `max_clients`
//! entries, so a flood of new addresses evicts cold entries rather than
//! growing memory; an address that comes back after eviction starts with a
//! full burst. The cells run on the proxy's clock (tests move it).
//!
//! ## Requests in progress
//! A count per address, taken before the lookup and given back when the
//! response body has been sent (or dropped). An entry exists only while
//! its address has a request in progress, so memory is bounded by the
//! requests in progress. Over the limit: 429 with `Retry-After: 1`. Each
//! HTTP/2 stream counts, as each request on a connection does in nginx.
//!
//! ## Across a reload
//! Both are state of the running configuration, not of the file (see
//! `hoard_proxy::pipeline::limits`): a reload keeps a route's rate cells when
//! its `limit` is the same as before (a changed one starts empty), and
//! always keeps its counts of requests in progress (a changed
//! `limit_connections` applies to them at once).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::Quota;
use hoard_policy::clock::Clock;

/// A rate as configured: `"10r/s"` or `"30r/m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests per `per`.
    pub requests: u32,
    /// One second or one minute.
    pub per: Duration,
}

impl Rate {
    /// Parses `Nr/s` or `Nr/m`.
    ///
    /// # Errors
    /// The message for the operator.
    pub fn parse(s: &str) -> Result<Rate, String> {
        let bad =
            || format!("{s:?}: expected requests per second or minute, as \"10r/s\" or \"30r/m\"");
        let (n, unit) = s.trim().split_once("r/").ok_or_else(bad)?;
        let requests: u32 = n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            _ => return Err(bad()),
        };
        Ok(Rate { requests, per })
    }
}

/// The limits' settings of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec {
    /// The sustained rate.
    pub rate: Rate,
    /// Requests a client may send at once beyond the rate (nginx `burst`).
    pub burst: u32,
    /// Addresses tracked at most.
    pub max_clients: usize,
}

/// [`Clock`] as `governor` wants it.
#[derive(Debug, Clone)]
struct LimitClock(Arc<dyn Clock>);

impl governor::clock::Clock for LimitClock {
    type Instant = SystemTime;
    fn now(&self) -> SystemTime {
        self.0.now()
    }
}

type Cell = governor::RateLimiter<NotKeyed, InMemoryState, LimitClock, NoOpMiddleware<SystemTime>>;

/// The per-address rate cells of one route. See the module docs.
#[derive(Debug)]
pub struct RateLimiter {
    spec: RateSpec,
    quota: Quota,
    clock: LimitClock,
    cells: quick_cache::sync::Cache<IpAddr, Arc<Cell>>,
}

impl RateLimiter {
    /// Cells for `spec`, on `clock`.
    pub fn new(spec: &RateSpec, clock: Arc<dyn Clock>) -> RateLimiter {
        let period = spec.rate.per / spec.rate.requests;
        let quota = Quota::with_period(period.max(Duration::from_nanos(1)))
            .expect("a period of at least 1ns")
            .allow_burst(NonZeroU32::new(spec.burst.saturating_add(1)).expect("at least 1"));
        RateLimiter {
            spec: *spec,
            quota,
            clock: LimitClock(clock),
            cells: quick_cache::sync::Cache::new(spec.max_clients.max(1)),
        }
    }

    /// The settings the cells were made for.
    pub fn spec(&self) -> &RateSpec {
        &self.spec
    }

    /// `Ok` when `client` may go on, else how long until it may.
    pub fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let cell = self
            .cells
            .get_or_insert_with(&client, || {
                Ok::<_, std::convert::Infallible>(Arc::new(Cell::direct_with_clock(
                    self.quota,
                    self.clock.clone(),
                )))
            })
            .unwrap_or_else(|never| match never {});
        cell.check()
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.cells.len()
    }
}

/// The whole seconds of `Retry-After` for a wait (at least 1).
pub fn retry_after(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// Requests in progress per address. See the module docs.
#[derive(Debug)]
pub struct ConnLimit {
    max: u32,
    /// Shared with the limit's successors after a reload (see
    /// [`ConnLimit::renew`]).
    held: Arc<parking_lot::Mutex<HashMap<IpAddr, u32>>>,
}

/// One request in progress; given back when dropped.
#[derive(Debug)]
pub struct ConnGuard {
    limit: Arc<ConnLimit>,
    client: IpAddr,
}

impl ConnLimit {
    /// At most `max` requests in progress per address.
    pub fn new(max: u32) -> ConnLimit {
        ConnLimit {
            max,
            held: Arc::default(),
        }
    }

    /// The same counts under a new maximum (a reload): requests in
    /// progress stay counted, and give their place back here when they end.
    pub fn renew(&self, max: u32) -> ConnLimit {
        ConnLimit {
            max,
            held: self.held.clone(),
        }
    }

    /// A guard, or `None` when `client` has `max` requests in progress.
    pub fn enter(self: &Arc<Self>, client: IpAddr) -> Option<ConnGuard> {
        let mut held = self.held.lock();
        let n = held.entry(client).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ConnGuard {
            limit: self.clone(),
            client,
        })
    }

    /// Addresses with a request in progress.
    pub fn tracked(&self) -> usize {
        self.held.lock().len()
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut held = self.limit.held.lock();
        if let Some(n) = held.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Debug, Default)]
    struct Manual(AtomicU64);
    impl Clock for Manual {
        fn now(&self) -> SystemTime {
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(1_000_000)
                + Duration::from_millis(self.0.load(Ordering::Relaxed))
        }
    }

    #[test]
    fn rates_parse() {
        assert_eq!(
            Rate::parse("10r/s").unwrap(),
            Rate {
                requests: 10,
                per: Duration::from_secs(1)
            }
        );
        assert_eq!(Rate::parse("30r/m").unwrap().per, Duration::from_secs(60));
        for bad in ["10", "0r/s", "10r/h", "r/s", "-1r/s"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn burst_then_rate() {
        let clock = Arc::new(Manual::default());
        let spec = RateSpec {
            rate: Rate::parse("10r/s").unwrap(),
            burst: 4,
            max_clients: 10,
        };
        let lim = RateLimiter::new(&spec, clock.clone());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..5 {
            assert!(lim.check(a).is_ok());
        }
        let wait = lim.check(a).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert_eq!(retry_after(wait), 1);
        // Another address has its own cell.
        assert!(lim.check("192.0.2.2".parse().unwrap()).is_ok());
        clock.0.fetch_add(100, Ordering::Relaxed);
        assert!(lim.check(a).is_ok());
        assert!(lim.check(a).is_err());
    }

    #[test]
    fn cells_are_bounded() {
        let spec = RateSpec {
            rate: Rate::parse("1r/m").unwrap(),
            burst: 0,
            max_clients: 100,
        };
        let lim = RateLimiter::new(&spec, Arc::new(Manual::default()));
        for i in 0..10_000u32 {
            let _ = lim.check(IpAddr::from(i.to_be_bytes()));
        }
        assert!(lim.tracked() <= 100, "{} cells", lim.tracked());
    }

    #[test]
    fn connections_counted_and_given_back() {
        let lim = Arc::new(ConnLimit::new(2));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let g1 = lim.enter(a).unwrap();
        let g2 = lim.enter(a).unwrap();
        assert!(lim.enter(a).is_none());
        assert!(lim.enter("192.0.2.9".parse().unwrap()).is_some());
        drop(g1);
        let g3 = lim.enter(a).unwrap();
        drop((g2, g3));
        assert_eq!(lim.tracked(), 0);
    }

    #[test]
    fn a_renewed_limit_keeps_the_counts() {
        let old = Arc::new(ConnLimit::new(2));
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let g = old.enter(a).unwrap();
        let new = Arc::new(old.renew(1));
        assert!(new.enter(a).is_none(), "the old request counts");
        drop(g);
        let g = new.enter(a).unwrap();
        assert_eq!(old.tracked(), 1, "one count, shared");
        drop(g);
        assert_eq!(new.tracked(), 0);
    }
}
