//! Response fields that decide caching: `Date`, `Expires`, `Last-Modified`,
//! `Age`, `Vary: *`, `Cache-Control` and `CDN-Cache-Control`, read by
//! `ResponseFacts::read` and then used for freshness, storability, age and
//! reuse (RFC 9111 §3, §4.2, RFC 5861).
//!
//! The header bytes are field lines (`name: value`, one per line); the
//! instants and the route's knobs come from the input too. Beyond not
//! panicking, checks that:
//! - `Age` is clamped to `DELTA_SECONDS_MAX`;
//! - every date that parses prints (`httpdate`) and parses back the same;
//! - a lifetime never exceeds a configured `max_ttl`;
//! - freshness, staleness and `ttl_millis` agree with each other, and a
//!   response made stale at `now` is not fresh at `now`.
#![no_main]

use std::time::{Duration, SystemTime};

use hoard_fuzz::header_map;
use hoard_policy::cache_control::DELTA_SECONDS_MAX;
use hoard_policy::config::{CachePolicy, DefaultTtl, StatusMatch};
use hoard_policy::facts::{parse_date, Expires, ResponseFacts};
use hoard_policy::freshness::{freshness_lifetime, StoredTimes};
use hoard_policy::reuse::{request_cache_control, reuse, stale_if_error, StoredRules};
use hoard_policy::storable::{storability, RequestFacts};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    status: u16,
    /// Seconds since the epoch (u32: up to 2106).
    request_time: u32,
    response_delay: u16,
    later: u32,
    heuristic_percent: u32,
    heuristic_max: u32,
    max_ttl: Option<u32>,
    default_ttl_ms: Option<u32>,
    swr: Option<u16>,
    sie: Option<u16>,
    ignore: u8,
    authorization: bool,
    request: &'a [u8],
    response: &'a [u8],
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fuzz_target!(|inp: Input<'_>| {
    let policy = CachePolicy {
        default_ttls: inp
            .default_ttl_ms
            .map(|ms| DefaultTtl {
                status: StatusMatch::Any,
                ttl: Duration::from_millis(ms.into()),
            })
            .into_iter()
            .collect(),
        ignore_cache_control: inp.ignore & 1 != 0,
        ignore_cdn_cache_control: inp.ignore & 2 != 0,
        ignore_expires: inp.ignore & 4 != 0,
        ignore_set_cookie: inp.ignore & 8 != 0,
        ignore_vary: inp.ignore & 16 != 0,
        heuristic_percent: inp.heuristic_percent,
        heuristic_max: Duration::from_secs(inp.heuristic_max.into()),
        max_ttl: inp.max_ttl.map(|s| Duration::from_secs(s.into())),
        stale_while_revalidate: inp.swr.map(|s| Duration::from_secs(s.into())),
        stale_if_error: inp.sie.map(|s| Duration::from_secs(s.into())),
    };
    let resp = header_map(inp.response);
    let req = header_map(inp.request);
    let request_time = at(inp.request_time.into());
    let response_time = request_time + Duration::from_secs(inp.response_delay.into());
    let now = response_time + Duration::from_secs(inp.later.into());

    let facts = ResponseFacts::read(inp.status, &resp, &policy);
    if let Some(age) = facts.age {
        assert!(age <= DELTA_SECONDS_MAX);
    }
    let expires = match facts.expires {
        Some(Expires::At(t)) => Some(t),
        _ => None,
    };
    for t in [facts.date, facts.last_modified, expires]
        .into_iter()
        .flatten()
    {
        let printed = httpdate::fmt_http_date(t);
        assert_eq!(parse_date(&printed), Some(t), "{printed}");
    }

    let lifetime = freshness_lifetime(&facts, &policy, response_time);
    if let (Some((l, _)), Some(max)) = (lifetime, policy.max_ttl) {
        assert!(l <= max);
    }
    let req_cc = request_cache_control(&req);
    let _ = storability(
        RequestFacts {
            cacheable_method: true,
            cc: &req_cc,
            authorization: inp.authorization,
        },
        &facts,
        &policy,
        response_time,
    );

    let times = StoredTimes {
        request_time,
        response_time,
        date: facts.date.unwrap_or(response_time),
        age_value: facts.age,
        lifetime: lifetime.map_or(Duration::ZERO, |(l, _)| l),
    };
    let fresh = times.is_fresh(now);
    let ttl = times.ttl_millis(now);
    if fresh {
        assert!(ttl >= 0 && times.staleness(now).is_zero());
    } else {
        assert!(ttl <= 0);
    }
    assert!(!times.made_stale(now).is_fresh(now));
    let rules = StoredRules::new(
        &facts.cc,
        policy.stale_while_revalidate,
        policy.stale_if_error,
    );
    let _ = reuse(&times, &rules, &req_cc, now);
    let _ = stale_if_error(&times, &rules, &req_cc, now);
});
