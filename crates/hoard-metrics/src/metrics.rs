//! Labelled metrics: requests by outcome, time to first byte, bytes, and
//! per-upstream results, timings and bytes.
//!
//! Plain counters live in [`crate::counters`]; this module holds what needs
//! labels or buckets. Every update is a relaxed atomic add; nothing here
//! allocates or locks on the request path. `admin::prometheus` renders it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hoard_policy::cache_status::Outcome;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with the fixed [`BUCKETS`].
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative; the last one is `+Inf`).
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Cumulative counts per bucket (last: `+Inf`, the total) and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let mut acc = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                acc += c.load(Ordering::Relaxed);
                acc
            })
            .collect();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (cumulative, sum)
    }
}

/// How an origin request ended, for `hoard_origin_requests_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginResult {
    /// A 1xx/2xx response head.
    Status2xx,
    /// A 3xx response head.
    Status3xx,
    /// A 4xx response head.
    Status4xx,
    /// A 5xx response head.
    Status5xx,
    /// No response: connection refused or reset, bad response.
    Error,
    /// No response head in time.
    Timeout,
}

impl OriginResult {
    /// Every result, in index order.
    pub const ALL: [OriginResult; 6] = [
        OriginResult::Status2xx,
        OriginResult::Status3xx,
        OriginResult::Status4xx,
        OriginResult::Status5xx,
        OriginResult::Error,
        OriginResult::Timeout,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginResult::Status2xx => "2xx",
            OriginResult::Status3xx => "3xx",
            OriginResult::Status4xx => "4xx",
            OriginResult::Status5xx => "5xx",
            OriginResult::Error => "error",
            OriginResult::Timeout => "timeout",
        }
    }

    /// The result of a response status.
    pub fn of_status(status: u16) -> OriginResult {
        match status {
            0..=299 => OriginResult::Status2xx,
            300..=399 => OriginResult::Status3xx,
            400..=499 => OriginResult::Status4xx,
            _ => OriginResult::Status5xx,
        }
    }
}

/// What one upstream has done.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    /// Requests by [`OriginResult`].
    pub results: [AtomicU64; 6],
    /// Time from sending a request to its response head.
    pub seconds: Histogram,
    /// Body bytes received.
    pub bytes: AtomicU64,
    /// Connections opened, HTTP/1.1 then HTTP/2 (see
    /// [`UpstreamStats::PROTOCOLS`]).
    pub connections: [AtomicU64; 2],
}

impl UpstreamStats {
    /// The `protocol` label of each of [`UpstreamStats::connections`].
    pub const PROTOCOLS: [&'static str; 2] = ["h1", "h2"];

    /// Records a request's end and its time to the response head.
    pub fn record(&self, result: OriginResult, took: Duration) {
        self.results[result as usize].fetch_add(1, Ordering::Relaxed);
        self.seconds.observe(took);
    }

    /// Requests with this result so far.
    pub fn result(&self, r: OriginResult) -> u64 {
        self.results[r as usize].load(Ordering::Relaxed)
    }
}

/// Requests by outcome and their time to first byte; bytes sent to clients.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: [AtomicU64; Outcome::ALL.len()],
    ttfb: [Histogram; Outcome::ALL.len()],
    /// Body bytes sent to clients.
    pub client_bytes: AtomicU64,
    /// Time from applying a purge here to the last member's acknowledgement
    /// (or the purge timeout), in a cluster.
    pub purge_fanout: Histogram,
}

impl Metrics {
    /// Records a request's outcome and the time until its response head was ready.
    #[inline]
    pub fn request(&self, outcome: Outcome, ttfb: Duration) {
        self.requests[outcome.index()].fetch_add(1, Ordering::Relaxed);
        self.ttfb[outcome.index()].observe(ttfb);
    }

    /// Requests with this outcome so far.
    pub fn requests(&self, outcome: Outcome) -> u64 {
        self.requests[outcome.index()].load(Ordering::Relaxed)
    }

    /// The time-to-first-byte histogram of an outcome.
    pub fn ttfb(&self, outcome: Outcome) -> &Histogram {
        &self.ttfb[outcome.index()]
    }

    /// Records how long a purge's fan-out to the members took.
    pub fn purge_fanout(&self, took: Duration) {
        self.purge_fanout.observe(took);
    }

    /// Bytes sent to clients so far.
    pub fn client_bytes(&self) -> u64 {
        self.client_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let (c, sum) = h.snapshot();
        assert_eq!(c.len(), BUCKETS.len() + 1);
        assert_eq!(c[0], 1);
        assert_eq!(c[3], 2);
        assert_eq!(c[BUCKETS.len() - 1], 2);
        assert_eq!(c[BUCKETS.len()], 3);
        assert!((sum - 60.0031).abs() < 1e-6);
    }
}
