//! Freshness lifetime and age (RFC 9111 §4.2).
//!
//! A stored response keeps the four instants that §4.2.3 needs
//! ([`StoredTimes`]); its age at any later `now` is computed from them, never
//! stored. Lifetimes are [`Duration`]s, so sub-second TTLs from configuration
//! are exact (no whole-second rounding; `Age` headers are floored to seconds).

use std::time::{Duration, SystemTime};

use crate::cache_control::Delta;
use crate::config::CachePolicy;
use crate::facts::{Expires, ResponseFacts};

/// Where a freshness lifetime came from; shows up in logs and `Cache-Status` details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifetimeSource {
    /// `s-maxage` (§5.2.2.10).
    SMaxAge,
    /// `max-age` (§5.2.2.1).
    MaxAge,
    /// `Expires` minus `Date` (§4.2.1).
    Expires,
    /// The route's configured default TTL for the status.
    Configured,
    /// Heuristic from `Last-Modified` (§4.2.2).
    Heuristic,
    /// Set by an origin filter (`hoard.ttl`), whatever the response said.
    Filter,
}

impl LifetimeSource {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LifetimeSource::SMaxAge => "s-maxage",
            LifetimeSource::MaxAge => "max-age",
            LifetimeSource::Expires => "expires",
            LifetimeSource::Configured => "configured",
            LifetimeSource::Heuristic => "heuristic",
            LifetimeSource::Filter => "filter",
        }
    }
}

/// The freshness lifetime of a response (§4.2.1), or `None` when the response
/// carries no freshness information and none may be assumed.
///
/// Precedence: `s-maxage` > `max-age` > `Expires` > configured default >
/// heuristic. `response_time` stands in for a missing `Date`.
pub fn freshness_lifetime(
    facts: &ResponseFacts,
    policy: &CachePolicy,
    response_time: SystemTime,
) -> Option<(Duration, LifetimeSource)> {
    let explicit = if let Some(d) = facts.cc.s_maxage {
        Some((delta(d), LifetimeSource::SMaxAge))
    } else if let Some(d) = facts.cc.max_age {
        Some((delta(d), LifetimeSource::MaxAge))
    } else {
        facts.expires.map(|e| {
            let lifetime = match e {
                Expires::At(at) => {
                    let date = facts.date.unwrap_or(response_time);
                    at.duration_since(date).unwrap_or(Duration::ZERO)
                }
                Expires::Invalid => Duration::ZERO,
            };
            (lifetime, LifetimeSource::Expires)
        })
    };
    let found = explicit
        .or_else(|| {
            policy
                .default_ttl(facts.status)
                .map(|t| (t, LifetimeSource::Configured))
        })
        .or_else(|| {
            heuristic(facts, policy, response_time).map(|t| (t, LifetimeSource::Heuristic))
        });
    found.map(|(t, src)| match policy.max_ttl {
        Some(max) if t > max => (max, src),
        _ => (t, src),
    })
}

fn delta(d: Delta) -> Duration {
    Duration::from_secs(d.secs_or_zero())
}

/// Heuristic freshness (§4.2.2): a fraction of the time since `Last-Modified`,
/// for heuristically cacheable statuses or responses marked `public`.
fn heuristic(
    facts: &ResponseFacts,
    policy: &CachePolicy,
    response_time: SystemTime,
) -> Option<Duration> {
    if !(crate::status::heuristically_cacheable(facts.status) || facts.cc.public) {
        return None;
    }
    let lm = facts.last_modified?;
    let date = facts.date.unwrap_or(response_time);
    let since = date.duration_since(lm).ok()?;
    let t = since.mul_f64(f64::from(policy.heuristic_percent) / 100.0);
    Some(t.min(policy.heuristic_max))
}

/// The instants a stored response needs for age calculation (§4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTimes {
    /// When the request that produced the response was sent.
    pub request_time: SystemTime,
    /// When the response was received.
    pub response_time: SystemTime,
    /// The response's `Date`, or `response_time` when absent.
    pub date: SystemTime,
    /// The response's `Age` value in seconds, when it carried one.
    pub age_value: Option<u64>,
    /// The freshness lifetime.
    pub lifetime: Duration,
}

impl StoredTimes {
    /// `corrected_initial_age` (§4.2.3).
    ///
    /// The response delay corrects an `Age` measured by a cache upstream for
    /// the time the response then spent in flight. A response without `Age`
    /// comes from the origin, whose `Date` already dates it (apparent age):
    /// adding the delay there would store every response slower than its
    /// `max-age` as already stale, as nginx and Varnish do not.
    pub fn corrected_initial_age(&self) -> Duration {
        let apparent_age = self
            .response_time
            .duration_since(self.date)
            .unwrap_or(Duration::ZERO);
        let corrected_age_value = match self.age_value {
            Some(age) => {
                let response_delay = self
                    .response_time
                    .duration_since(self.request_time)
                    .unwrap_or(Duration::ZERO);
                Duration::from_secs(age) + response_delay
            }
            None => Duration::ZERO,
        };
        apparent_age.max(corrected_age_value)
    }

    /// `current_age` at `now` (§4.2.3).
    pub fn current_age(&self, now: SystemTime) -> Duration {
        let resident = now
            .duration_since(self.response_time)
            .unwrap_or(Duration::ZERO);
        self.corrected_initial_age() + resident
    }

    /// Time left until the response becomes stale; negative once stale.
    /// Returned as signed milliseconds.
    pub fn ttl_millis(&self, now: SystemTime) -> i64 {
        self.ttl_millis_at(self.current_age(now))
    }

    /// [`StoredTimes::ttl_millis`] for a `current_age` already computed.
    pub fn ttl_millis_at(&self, current_age: Duration) -> i64 {
        self.lifetime.as_millis() as i64 - current_age.as_millis() as i64
    }

    /// True while `freshness_lifetime > current_age` (§4.2).
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        self.lifetime > self.current_age(now)
    }

    /// The same response made stale at `now` (a soft purge): its lifetime
    /// ends at its current age, so `stale-while-revalidate` and
    /// `stale-if-error` windows count from `now` (RFC 5861 §3, §4).
    pub fn made_stale(&self, now: SystemTime) -> StoredTimes {
        StoredTimes {
            lifetime: self.lifetime.min(self.current_age(now)),
            ..*self
        }
    }

    /// How long the response has been stale at `now` (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        self.current_age(now).saturating_sub(self.lifetime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn facts(hdrs: &[(&str, &str)], status: u16, policy: &CachePolicy) -> ResponseFacts {
        let mut h = HeaderMap::new();
        for (k, v) in hdrs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        ResponseFacts::read(status, &h, policy)
    }

    #[test]
    fn lifetime_table() {
        let date = httpdate::fmt_http_date(t(0));
        let exp = httpdate::fmt_http_date(t(100));
        let lm = httpdate::fmt_http_date(t(0) - Duration::from_secs(1000));
        let p = CachePolicy::default();
        let cases: Vec<(Vec<(&str, &str)>, u16, Option<(u64, LifetimeSource)>)> = vec![
            (
                vec![("cache-control", "max-age=60")],
                200,
                Some((60, LifetimeSource::MaxAge)),
            ),
            (
                vec![("cache-control", "max-age=60, s-maxage=5")],
                200,
                Some((5, LifetimeSource::SMaxAge)),
            ),
            (
                vec![
                    ("cache-control", "max-age=60"),
                    ("expires", &exp),
                    ("date", &date),
                ],
                200,
                Some((60, LifetimeSource::MaxAge)),
            ),
            (
                vec![("expires", &exp), ("date", &date)],
                200,
                Some((100, LifetimeSource::Expires)),
            ),
            (
                vec![("expires", "0"), ("date", &date)],
                200,
                Some((0, LifetimeSource::Expires)),
            ),
            (
                vec![("cache-control", "max-age=-3")],
                200,
                Some((0, LifetimeSource::MaxAge)),
            ),
            (
                vec![("last-modified", &lm), ("date", &date)],
                200,
                Some((100, LifetimeSource::Heuristic)),
            ),
            (
                vec![("last-modified", &lm), ("date", &date)],
                404,
                Some((100, LifetimeSource::Heuristic)),
            ),
            (vec![("last-modified", &lm), ("date", &date)], 302, None),
            (
                vec![
                    ("last-modified", &lm),
                    ("date", &date),
                    ("cache-control", "public"),
                ],
                302,
                Some((100, LifetimeSource::Heuristic)),
            ),
            (vec![("date", &date)], 200, None),
            (
                vec![
                    ("cdn-cache-control", "max-age=7"),
                    ("cache-control", "max-age=60"),
                ],
                200,
                Some((7, LifetimeSource::MaxAge)),
            ),
            (
                vec![
                    ("cdn-cache-control", "no-store"),
                    ("expires", &exp),
                    ("date", &date),
                ],
                200,
                None,
            ),
            // An invalid CDN-Cache-Control is ignored as a whole (RFC 9213).
            (
                vec![
                    ("cdn-cache-control", "max-age=7, &&&"),
                    ("cache-control", "max-age=60"),
                ],
                200,
                Some((60, LifetimeSource::MaxAge)),
            ),
            (
                vec![
                    ("cdn-cache-control", "max-age=\"7\""),
                    ("cache-control", "max-age=60"),
                ],
                200,
                None,
            ),
        ];
        for (h, status, want) in cases {
            let f = facts(&h, status, &p);
            let got = freshness_lifetime(&f, &p, t(0)).map(|(d, s)| (d.as_secs(), s));
            assert_eq!(got, want, "headers {h:?} status {status}");
        }
    }

    #[test]
    fn configured_ttl_beats_heuristic_and_is_sub_second() {
        let p = CachePolicy {
            default_ttls: vec![crate::config::DefaultTtl {
                status: crate::config::StatusMatch::Any,
                ttl: Duration::from_millis(500),
            }],
            ..Default::default()
        };
        let f = facts(
            &[("last-modified", "Mon, 01 Jan 2001 00:00:00 GMT")],
            200,
            &p,
        );
        assert_eq!(
            freshness_lifetime(&f, &p, t(0)),
            Some((Duration::from_millis(500), LifetimeSource::Configured))
        );
        let f = facts(&[], 500, &p);
        assert_eq!(freshness_lifetime(&f, &p, t(0)), None);
    }

    #[test]
    fn age_field_list_uses_first_member() {
        let p = CachePolicy::default();
        assert_eq!(facts(&[("age", "7200, 0")], 200, &p).age, Some(7200));
        assert_eq!(facts(&[("age", "abc")], 200, &p).age, None);
    }

    #[test]
    fn age_calculation() {
        // §4.2.3: Date 10 s before receipt, Age 2, response delay 1 s.
        let st = StoredTimes {
            request_time: t(9),
            response_time: t(10),
            date: t(0),
            age_value: Some(2),
            lifetime: Duration::from_secs(60),
        };
        assert_eq!(st.corrected_initial_age(), Duration::from_secs(10));
        assert_eq!(st.current_age(t(15)), Duration::from_secs(15));
        assert!(st.is_fresh(t(59)));
        assert!(!st.is_fresh(t(60)));
        assert_eq!(st.ttl_millis(t(75)), -15000);
        // Without Age, a slow origin's response is as old as its Date says.
        let st = StoredTimes {
            request_time: t(0),
            response_time: t(3),
            date: t(3),
            age_value: None,
            lifetime: Duration::from_secs(2),
        };
        assert_eq!(st.current_age(t(3)), Duration::ZERO);
        // Age header dominates when larger than apparent age.
        let st = StoredTimes {
            request_time: t(10),
            response_time: t(10),
            date: t(10),
            age_value: Some(30),
            lifetime: Duration::from_secs(60),
        };
        assert_eq!(st.current_age(t(10)), Duration::from_secs(30));
    }
}
