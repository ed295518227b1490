//! May a stored response be used for a request? (RFC 9111 §4, RFC 5861)

use std::time::{Duration, SystemTime};

use http::header::{self, HeaderMap};

use crate::cache_control::CacheControl;
use crate::config::ClientNoCache;
use crate::freshness::StoredTimes;

/// Why a stored response has to be validated before use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevalidateReason {
    /// The request said `no-cache` (or `Pragma: no-cache`, §5.4).
    RequestNoCache,
    /// The request's `max-age` or `min-fresh` is not satisfied (§5.2.1.1, §5.2.1.3).
    RequestFreshness,
    /// The stored response said `no-cache` (§5.2.2.4).
    ResponseNoCache,
    /// The stored response is stale (§4.2).
    Stale,
}

/// What to do with a stored response for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Fresh: serve it.
    Fresh,
    /// Stale, but the request's `max-stale` accepts it (§5.2.1.2).
    StaleAllowed,
    /// Stale within a stale-while-revalidate window (RFC 5861 §3): serve it and refresh.
    StaleWhileRevalidate,
    /// Validate with the origin first (§4.3).
    Revalidate(RevalidateReason),
}

/// The directives and windows of a stored response that govern its reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredRules {
    /// `no-cache` on the response.
    pub no_cache: bool,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage` (§5.2.2.2, §5.2.2.8,
    /// §5.2.2.10): never served stale.
    pub no_stale: bool,
    /// Stale-while-revalidate window (header, else route configuration).
    pub stale_while_revalidate: Duration,
    /// Stale-if-error window (header, else route configuration).
    pub stale_if_error: Duration,
}

impl StoredRules {
    /// Derives the rules from effective response directives and route defaults.
    pub fn new(
        cc: &CacheControl,
        swr_default: Option<Duration>,
        sie_default: Option<Duration>,
    ) -> StoredRules {
        StoredRules {
            no_cache: cc.no_cache,
            no_stale: cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some(),
            stale_while_revalidate: cc
                .stale_while_revalidate
                .map(Duration::from_secs)
                .or(swr_default)
                .unwrap_or(Duration::ZERO),
            stale_if_error: cc
                .stale_if_error
                .map(Duration::from_secs)
                .or(sie_default)
                .unwrap_or(Duration::ZERO),
        }
    }
}

/// The request's cache directives, with `Pragma: no-cache` read as
/// `Cache-Control: no-cache` when there is no `Cache-Control` (§5.4).
pub fn request_cache_control(headers: &HeaderMap) -> CacheControl {
    if !crate::headers::has_any(headers, &[header::CACHE_CONTROL, header::PRAGMA]) {
        return CacheControl::default();
    }
    match CacheControl::from_headers(headers, &header::CACHE_CONTROL) {
        Some(cc) => cc,
        None => {
            let pragma_no_cache = headers.get_all(header::PRAGMA).iter().any(|v| {
                v.to_str()
                    .map(|s| {
                        s.split(',')
                            .any(|t| t.trim().eq_ignore_ascii_case("no-cache"))
                    })
                    .unwrap_or(false)
            });
            CacheControl {
                no_cache: pragma_no_cache,
                ..CacheControl::default()
            }
        }
    }
}

/// The request's cache directives as a route with `client_no_cache`
/// reads them for the lookup: with [`ClientNoCache::Ignore`], those that
/// ask for a fresher response than the stored one (`no-cache`, `Pragma:
/// no-cache`, `max-age`, `min-fresh`) are dropped; the others
/// (`only-if-cached`, `max-stale`, `stale-if-error`, `no-store`) stay.
pub fn request_cache_control_for(headers: &HeaderMap, mode: ClientNoCache) -> CacheControl {
    let mut cc = request_cache_control(headers);
    if mode == ClientNoCache::Ignore {
        cc.no_cache = false;
        cc.max_age = None;
        cc.min_fresh = None;
    }
    cc
}

/// Decides how a stored response may be reused for a request at `now` (§4).
pub fn reuse(
    times: &StoredTimes,
    rules: &StoredRules,
    req: &CacheControl,
    now: SystemTime,
) -> Reuse {
    reuse_aged(times, rules, req, times.current_age(now))
}

/// [`reuse`] for a response whose `current_age` (§4.2.3) at the time of
/// the request is `age`: a hit computes it once, for this decision and
/// for its `Age` field.
pub fn reuse_aged(
    times: &StoredTimes,
    rules: &StoredRules,
    req: &CacheControl,
    age: Duration,
) -> Reuse {
    if req.no_cache {
        return Reuse::Revalidate(RevalidateReason::RequestNoCache);
    }
    if rules.no_cache {
        return Reuse::Revalidate(RevalidateReason::ResponseNoCache);
    }
    if let Some(max_age) = req.max_age {
        if age > Duration::from_secs(max_age.secs_or_zero()) {
            return Reuse::Revalidate(RevalidateReason::RequestFreshness);
        }
    }
    if times.lifetime > age {
        if let Some(min_fresh) = req.min_fresh {
            if times.lifetime.saturating_sub(age) < Duration::from_secs(min_fresh) {
                return Reuse::Revalidate(RevalidateReason::RequestFreshness);
            }
        }
        return Reuse::Fresh;
    }
    if rules.no_stale {
        return Reuse::Revalidate(RevalidateReason::Stale);
    }
    let staleness = age.saturating_sub(times.lifetime);
    match req.max_stale {
        Some(None) => return Reuse::StaleAllowed,
        Some(Some(secs)) if staleness <= Duration::from_secs(secs) => return Reuse::StaleAllowed,
        _ => {}
    }
    // RFC 5861 §3: only when the request does not ask for more freshness.
    if req.min_fresh.is_none() && staleness < rules.stale_while_revalidate {
        return Reuse::StaleWhileRevalidate;
    }
    Reuse::Revalidate(RevalidateReason::Stale)
}

/// May a stale response stand in for an origin error at `now`? (RFC 5861 §4)
pub fn stale_if_error(
    times: &StoredTimes,
    rules: &StoredRules,
    req: &CacheControl,
    now: SystemTime,
) -> bool {
    // A response that must be revalidated on every use (§5.2.2.4) or never
    // served stale (§5.2.2.2) cannot stand in for a failed revalidation.
    if rules.no_stale || rules.no_cache || req.no_cache {
        return false;
    }
    let staleness = times.staleness(now);
    // The request may carry its own stale-if-error (RFC 5861 §4).
    let window = req
        .stale_if_error
        .map(Duration::from_secs)
        .unwrap_or(rules.stale_if_error);
    staleness < window || (times.is_fresh(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn table() {
        use RevalidateReason::*;
        let times = StoredTimes {
            request_time: t(0),
            response_time: t(0),
            date: t(0),
            age_value: None,
            lifetime: Duration::from_secs(10),
        };
        let plain = StoredRules::new(&CacheControl::default(), None, None);
        let swr = StoredRules::new(&CacheControl::parse("stale-while-revalidate=5"), None, None);
        let mr = StoredRules::new(
            &CacheControl::parse("must-revalidate, stale-while-revalidate=5"),
            None,
            None,
        );
        let nc = StoredRules::new(&CacheControl::parse("no-cache"), None, None);
        let cases: &[(u64, &StoredRules, &str, Reuse)] = &[
            (5, &plain, "", Reuse::Fresh),
            (10, &plain, "", Reuse::Revalidate(Stale)),
            (5, &plain, "no-cache", Reuse::Revalidate(RequestNoCache)),
            (5, &plain, "max-age=3", Reuse::Revalidate(RequestFreshness)),
            (5, &plain, "max-age=5", Reuse::Fresh),
            (
                5,
                &plain,
                "min-fresh=6",
                Reuse::Revalidate(RequestFreshness),
            ),
            (5, &plain, "min-fresh=5", Reuse::Fresh),
            (12, &plain, "max-stale", Reuse::StaleAllowed),
            (12, &plain, "max-stale=2", Reuse::StaleAllowed),
            (12, &plain, "max-stale=1", Reuse::Revalidate(Stale)),
            (12, &swr, "", Reuse::StaleWhileRevalidate),
            (15, &swr, "", Reuse::Revalidate(Stale)),
            (12, &mr, "max-stale", Reuse::Revalidate(Stale)),
            (1, &nc, "", Reuse::Revalidate(ResponseNoCache)),
        ];
        for (at, rules, req, want) in cases {
            assert_eq!(
                reuse(&times, rules, &CacheControl::parse(req), t(*at)),
                *want,
                "at {at} req {req:?} rules {rules:?}"
            );
        }
    }

    #[test]
    fn stale_if_error_respects_no_cache_and_windows() {
        let times = StoredTimes {
            request_time: t(0),
            response_time: t(0),
            date: t(0),
            age_value: None,
            lifetime: Duration::from_secs(10),
        };
        let sie = StoredRules::new(&CacheControl::parse("stale-if-error=30"), None, None);
        let nc = StoredRules::new(
            &CacheControl::parse("no-cache, stale-if-error=30"),
            None,
            None,
        );
        let none = CacheControl::default();
        assert!(stale_if_error(&times, &sie, &none, t(5)));
        assert!(stale_if_error(&times, &sie, &none, t(39)));
        assert!(!stale_if_error(&times, &sie, &none, t(40)));
        assert!(
            !stale_if_error(&times, &nc, &none, t(5)),
            "no-cache: never without revalidation"
        );
        let plain = StoredRules::new(&CacheControl::default(), None, Some(Duration::from_secs(5)));
        assert!(
            stale_if_error(&times, &plain, &none, t(14)),
            "configured window"
        );
        assert!(
            stale_if_error(
                &times,
                &StoredRules::new(&CacheControl::default(), None, None),
                &CacheControl::parse("stale-if-error=100"),
                t(50)
            ),
            "request window"
        );
    }

    #[test]
    fn pragma_no_cache_only_without_cache_control() {
        let mut h = HeaderMap::new();
        h.insert("pragma", "no-cache".parse().unwrap());
        assert!(request_cache_control(&h).no_cache);
        h.insert("cache-control", "max-age=5".parse().unwrap());
        assert!(!request_cache_control(&h).no_cache);
    }

    #[test]
    fn client_no_cache_ignore_drops_what_asks_for_fresher() {
        let times = StoredTimes {
            request_time: t(0),
            response_time: t(0),
            date: t(0),
            age_value: None,
            lifetime: Duration::from_secs(10),
        };
        let rules = StoredRules::new(&CacheControl::default(), None, None);
        let cases: &[(&str, &str, Reuse)] = &[
            ("pragma", "no-cache", Reuse::Fresh),
            ("cache-control", "no-cache", Reuse::Fresh),
            ("cache-control", "max-age=0", Reuse::Fresh),
            ("cache-control", "min-fresh=60", Reuse::Fresh),
        ];
        for (name, value, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(*name, value.parse().unwrap());
            let ignored = request_cache_control_for(&h, ClientNoCache::Ignore);
            assert_eq!(
                reuse(&times, &rules, &ignored, t(5)),
                *want,
                "{name}: {value}"
            );
            let kept = request_cache_control_for(&h, ClientNoCache::Revalidate);
            assert!(
                matches!(reuse(&times, &rules, &kept, t(5)), Reuse::Revalidate(_)),
                "{name}: {value}"
            );
        }
        // What can only spare the origin stays.
        let mut h = HeaderMap::new();
        h.insert(
            "cache-control",
            "no-cache, only-if-cached, max-stale=5, no-store"
                .parse()
                .unwrap(),
        );
        let cc = request_cache_control_for(&h, ClientNoCache::Ignore);
        assert!(cc.only_if_cached && cc.no_store && !cc.no_cache);
        assert_eq!(cc.max_stale, Some(Some(5)));
        assert_eq!(reuse(&times, &rules, &cc, t(12)), Reuse::StaleAllowed);
    }
}
