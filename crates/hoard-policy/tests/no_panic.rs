//! No field value from a client or an origin panics a parser, and what the
//! parsers accept keeps its invariants.
//!
//! A fast, deterministic companion of the fuzz targets in `fuzz/`: each
//! parser family gets ten thousand inputs built by a fixed-seed xorshift
//! generator from fragments of its syntax (plus random characters and
//! non-ASCII bytes), and the inputs the fuzzers found interesting. The
//! checks are the cheap ones of the fuzz targets.

use std::time::{Duration, SystemTime};

use hoard_policy::cache_control::{
    delta_secs, split_commas, CacheControl, Delta, DELTA_SECONDS_MAX,
};
use hoard_policy::conditional::{etag_eq, evaluate, merge_304, Precondition};
use hoard_policy::config::CachePolicy;
use hoard_policy::facts::{parse_date, ResponseFacts, CDN_CACHE_CONTROL};
use hoard_policy::freshness::{freshness_lifetime, StoredTimes};
use hoard_policy::headers::{is_hop_by_hop, strip_hop_by_hop};
use hoard_policy::key::{Digest, KeyInput, KeyTemplate, KeyUrl, QueryKey};
use hoard_policy::range::{decide, parse_content_range, RangeDecision, MAX_RANGES};
use hoard_policy::reuse::{request_cache_control, reuse, StoredRules};
use hoard_policy::structured::{parse_dictionary, Item};
use hoard_policy::tags::{tags, MAX_TAG_LEN};
use hoard_policy::target::{normalise_authority, normalise_path_and_query};
use hoard_policy::vary::{normalized, VaryNames};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

const ROUNDS: usize = 10_000;

/// xorshift64*: small, fast and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Up to `max` fragments of `pieces`, now and then a random character.
    fn text(&mut self, pieces: &[&str], max: usize) -> String {
        let mut s = String::new();
        for _ in 0..self.below(max + 1) {
            match self.below(10) {
                0 => s.push(char::from(0x20 + self.below(0x5f) as u8)),
                1 => s.push(['é', '\t', '\u{7f}', '\0', '\n'][self.below(5)]),
                _ => s.push_str(pieces[self.below(pieces.len())]),
            }
        }
        s
    }

    /// Field lines of `names` with values from `pieces`; invalid values are
    /// skipped, and now and then a value ends in an obs-text byte.
    fn fields(&mut self, names: &[&str], pieces: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for _ in 0..self.below(6) {
            let name = HeaderName::from_bytes(names[self.below(names.len())].as_bytes()).unwrap();
            // Half the values are one whole fragment (a date, a tag list).
            let mut value = match self.below(2) {
                0 => pieces[self.below(pieces.len())].to_string(),
                _ => self.text(pieces, 8),
            }
            .into_bytes();
            if self.below(8) == 0 {
                value.push(0xff);
            }
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                h.append(name, v);
            }
        }
        h
    }
}

const CC: &[&str] = &[
    "max-age",
    "s-maxage",
    "max-stale",
    "min-fresh",
    "no-cache",
    "no-store",
    "private",
    "public",
    "must-revalidate",
    "proxy-revalidate",
    "must-understand",
    "immutable",
    "only-if-cached",
    "stale-while-revalidate",
    "stale-if-error",
    "MAX-AGE",
    "=",
    "=",
    ",",
    ", ",
    " ",
    "\"",
    "\\",
    "0",
    "60",
    "-1",
    "2147483648",
    "99999999999999999999",
    "1.5",
    "?0",
    "?1",
    "(",
    ")",
    ";",
    ":",
    "*",
    "a",
    "x=1",
    ":aGk=:",
];

const RANGE: &[&str] = &[
    "bytes=",
    "bytes",
    "=",
    "-",
    "-",
    ",",
    ", ",
    " ",
    "0",
    "1",
    "7",
    "499",
    "999",
    "18446744073709551615",
    "18446744073709551616",
    "items=",
    "*",
    "/",
    "bytes ",
];

const FIELDS: &[&str] = &[
    "\"v1\"",
    "W/\"v1\"",
    "*",
    ",",
    ", ",
    " ",
    "gzip",
    "br",
    "en-US",
    "Accept-Encoding",
    "accept-language",
    "x-a",
    "close",
    "keep-alive",
    "set-cookie",
    "te",
    "tag",
    "\t",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "Thu, 01 Jan 1970 00:00:00 GMT",
    "0",
    "-1",
    "7200",
    "99999999999999999999",
    "max-age=60",
    "s-maxage=5",
    "no-store",
    "public",
    "stale-if-error=9",
];

const DATES: &[&str] = &[
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "Thu, 01 Jan 1970 00:00:00 GMT",
    "Tue, 14 Nov 2023 22:13:20 GMT",
    "Mon, 13 Nov 2023 22:13:20 GMT",
    "Tue, 14 Nov 2023 22:13:20 UTC",
    "Tue, 31 Feb 2023 22:13:20 GMT",
];

const FIELD_NAMES: &[&str] = &[
    "cache-control",
    "cdn-cache-control",
    "pragma",
    "date",
    "expires",
    "last-modified",
    "age",
    "etag",
    "vary",
    "set-cookie",
    "surrogate-key",
    "cache-tag",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "accept-encoding",
    "accept-language",
    "connection",
    "keep-alive",
    "te",
    "content-length",
    "x-a",
];

/// Inputs the fuzzers found or that sit on an edge, with the body length for ranges.
const RANGE_CORPUS: &[(&str, u64)] = &[
    ("bytes =-7 ", 0), // found by the `range` target: a 206 of zero bytes
    ("bytes=-1", 0),
    ("bytes=0-0,-1", 0),
    ("bytes=-0", 0),
    ("bytes=0-", 0),
    ("bytes=-18446744073709551615", 1),
    ("bytes=18446744073709551615-18446744073709551615", u64::MAX),
    ("bytes=0-18446744073709551615", u64::MAX),
    (
        "bytes=0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0",
        1,
    ),
    ("bytes=,,,", 10),
];

const TEXT_CORPUS: &[&str] = &[
    "",
    "=",
    "\"",
    "max-age=\"",
    "max-age=\"\\",
    "a=\"\\\"",
    "max-age=-",
    "a=-",
    "a=1.",
    "a=.5",
    "a=9999999999999999",
    "a=999999999999999",
    "a=-999999999999999.999",
    "a=(",
    "a=(1 ",
    "a=:",
    "a;",
    "a;b=",
    "bytes 0-0/0",
    "bytes 18446744073709551614-18446744073709551614/18446744073709551615",
    "bytes 0-18446744073709551615/18446744073709551615",
    "|||",
    " slice=|",
    "http|é|/#",
];

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn check_text(s: &str) {
    let cc = CacheControl::parse(s);
    check_cc(&cc);
    assert_eq!(split_commas(s).join(","), s);
    if let Some(d) = delta_secs(s) {
        assert!(d <= DELTA_SECONDS_MAX);
    }
    if !s.contains(['"', '\\']) {
        assert_eq!(CacheControl::parse(&format!("{s}, {s}")), cc, "{s:?}");
    }
    if let Some(dict) = parse_dictionary(s) {
        for (i, (k, item)) in dict.iter().enumerate() {
            assert!(dict[..i].iter().all(|(k2, _)| k2 != k), "{s:?}");
            if let Item::Integer(n) = item {
                assert!(n.unsigned_abs() <= 999_999_999_999_999);
            }
        }
        let printed = serialize(&dict);
        assert_eq!(
            parse_dictionary(&printed),
            Some(dict),
            "{s:?} -> {printed:?}"
        );
    }
    if let Some((r, total)) = parse_content_range(s) {
        assert!(r.start < r.end && r.end <= total, "{s:?}");
        assert_eq!(
            parse_content_range(&r.content_range(total)),
            Some((r, total))
        );
    }
    if let Some(url) = KeyUrl::parse(s) {
        let _ = (url.starts_with(s), url.on_host(s));
    }
    let _ = parse_date(s);
}

fn check_cc(cc: &CacheControl) {
    let deltas = [cc.max_age, cc.s_maxage].into_iter().flatten();
    for d in deltas {
        assert!(d.secs_or_zero() <= DELTA_SECONDS_MAX, "{d:?}");
    }
    let plain = [
        cc.max_stale.flatten(),
        cc.min_fresh,
        cc.stale_while_revalidate,
        cc.stale_if_error,
    ];
    assert!(plain.into_iter().flatten().all(|s| s <= DELTA_SECONDS_MAX));
}

fn serialize(dict: &[(String, Item)]) -> String {
    let members: Vec<String> = dict
        .iter()
        .map(|(k, item)| match item {
            Item::Boolean(true) => k.clone(),
            Item::Boolean(false) => format!("{k}=?0"),
            Item::Integer(n) => format!("{k}={n}"),
            Item::Decimal(d) => format!("{k}={d:.3}"),
            Item::String(s) => format!("{k}=\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            Item::Token(t) => format!("{k}={t}"),
            Item::Bytes(b) => format!("{k}=:{b}:"),
            Item::InnerList => format!("{k}=()"),
        })
        .collect();
    members.join(", ")
}

/// Checks one range request; true when it was answered with a 206.
fn check_range(range: &str, if_range: Option<&str>, resp: &HeaderMap, len: u64) -> bool {
    let mut req = HeaderMap::new();
    let Ok(v) = HeaderValue::from_str(range) else {
        return false;
    };
    req.insert(header::RANGE, v);
    if let Some(v) = if_range.and_then(|v| HeaderValue::from_str(v).ok()) {
        req.insert(header::IF_RANGE, v);
    }
    if let RangeDecision::Partial(ranges) =
        decide(&Method::GET, &req, StatusCode::OK, resp, Some(len))
    {
        assert!(
            !ranges.is_empty() && ranges.len() <= MAX_RANGES,
            "{range:?}"
        );
        for r in &ranges {
            assert!(r.start < r.end && r.end <= len, "{range:?} of {len}: {r:?}");
            assert_eq!(parse_content_range(&r.content_range(len)), Some((*r, len)));
        }
        for w in ranges.windows(2) {
            assert!(w[0].end < w[1].start, "{range:?}: {ranges:?}");
        }
        return true;
    }
    false
}

#[test]
fn corpus() {
    for s in TEXT_CORPUS
        .iter()
        .chain(CC)
        .chain(RANGE)
        .chain(FIELDS)
        .chain(DATES)
    {
        check_text(s);
    }
    for (range, len) in RANGE_CORPUS {
        check_range(range, None, &HeaderMap::new(), *len);
    }
}

#[test]
fn directive_lists_and_dictionaries() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut dictionaries = 0;
    for _ in 0..ROUNDS {
        let text = rng.text(CC, 12);
        check_text(&text);
        dictionaries += usize::from(parse_dictionary(&text).is_some_and(|d| !d.is_empty()));
        let lines = rng.fields(&["cache-control", "cdn-cache-control", "pragma"], CC);
        for name in [header::CACHE_CONTROL, CDN_CACHE_CONTROL.clone()] {
            if let Some(cc) = CacheControl::from_headers(&lines, &name) {
                check_cc(&cc);
            }
            if let Some(cc) = CacheControl::from_structured(&lines, &name) {
                check_cc(&cc);
            }
        }
        check_cc(&request_cache_control(&lines));
    }
    assert!(
        dictionaries > ROUNDS / 50,
        "only {dictionaries} dictionaries"
    );
}

/// A mostly well-formed `bytes=` range set of one to five specs.
fn range_set(rng: &mut Rng) -> String {
    const NUMS: &[&str] = &[
        "0",
        "1",
        "7",
        "99",
        "499",
        "999",
        "1999",
        "18446744073709551615",
    ];
    let mut specs = Vec::new();
    for _ in 0..1 + rng.below(5) {
        let kind = rng.below(4);
        let mut num = || NUMS[rng.below(NUMS.len())];
        specs.push(match kind {
            0 => format!("-{}", num()),
            1 => format!("{}-", num()),
            2 => format!("{}-{}", num(), num()),
            _ => format!(" {} - {} ", num(), num()),
        });
    }
    format!("bytes={}", specs.join(","))
}

#[test]
fn ranges() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut partial = 0;
    for _ in 0..ROUNDS {
        let range = if rng.below(4) == 0 {
            rng.text(RANGE, 8)
        } else {
            range_set(&mut rng)
        };
        let len = match rng.below(3) {
            0 => rng.below(4) as u64,
            1 => rng.below(2000) as u64,
            _ => rng.next(),
        };
        let resp = rng.fields(&["etag", "last-modified", "date"], FIELDS);
        let if_range = (rng.below(4) == 0).then(|| rng.text(FIELDS, 2));
        partial += usize::from(check_range(&range, if_range.as_deref(), &resp, len));
        check_text(&range);
    }
    // The generator must reach the interesting path, not only syntax errors.
    assert!(partial > ROUNDS / 50, "only {partial} partial answers");
}

#[test]
fn keys() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let pieces = &[
        "|", "#", " slice=", "?", "&", "=", "/", ":", "80", "443", ".", "A", "a", "%", "://",
        "b=1", "a=2",
    ];
    for _ in 0..ROUNDS {
        let names = || vec!["a".to_string(), "utm_source".to_string()];
        let template = KeyTemplate {
            scheme: rng.below(2) == 0,
            host: rng.below(2) == 0,
            query: match rng.below(5) {
                0 => QueryKey::All,
                1 => QueryKey::Sorted,
                2 => QueryKey::None,
                3 => QueryKey::Only(names()),
                _ => QueryKey::Except(names()),
            },
            headers: vec![HeaderName::from_static("x-a")],
            cookies: vec!["a".into(), "".into()],
        };
        let host = rng.text(pieces, 4);
        let path = format!("/{}", rng.text(pieces, 4));
        let query = (rng.below(3) > 0).then(|| rng.text(pieces, 6));
        let headers = rng.fields(&["x-a", "cookie"], pieces);
        let input = KeyInput {
            scheme: ["http", "https"][rng.below(2)],
            host: &host,
            path: &path,
            query: query.as_deref(),
            headers: &headers,
        };
        let key = template.key(input);
        assert_eq!(key.digest, Digest::of(key.text.as_bytes()));
        // A Host or path with a space may hold the slice mark and cut the
        // key short; such a Host is refused before keying.
        let plain = |s: &str| !s.contains(['|', '#', ' ']);
        let url = KeyUrl::parse(&key.text);
        assert!(url.is_some() || !(plain(&host) && plain(&path)), "{key:?}");
        if let Some(url) = url {
            let _ = (url.starts_with(&host), url.on_host(&host));
        }
        if let (QueryKey::Sorted, Some(q)) = (&template.query, &query) {
            let reversed: Vec<&str> = q.split('&').rev().collect();
            let again = template.key(KeyInput {
                query: Some(&reversed.join("&")),
                ..input
            });
            assert_eq!(again, key);
        }
    }
}

#[test]
fn response_facts_and_ages() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let policy = CachePolicy {
        max_ttl: Some(Duration::from_secs(86_400)),
        ..CachePolicy::default()
    };
    let mut dated = 0;
    for _ in 0..ROUNDS {
        let mut resp = rng.fields(FIELD_NAMES, FIELDS);
        for name in ["date", "expires", "last-modified"] {
            if rng.below(2) == 0 {
                resp.insert(
                    name,
                    HeaderValue::from_static(DATES[rng.below(DATES.len())]),
                );
            }
        }
        if rng.below(2) == 0 {
            let cc = [
                "max-age=60",
                "s-maxage=5",
                "max-age=99999999999",
                "no-cache",
                "public",
            ];
            resp.append(
                "cache-control",
                HeaderValue::from_static(cc[rng.below(cc.len())]),
            );
        }
        let req = rng.fields(FIELD_NAMES, FIELDS);
        let status = [200, 203, 204, 206, 301, 304, 404, 500, 999][rng.below(9)];
        let facts = ResponseFacts::read(status, &resp, &policy);
        assert!(facts.age.is_none_or(|a| a <= DELTA_SECONDS_MAX));
        for t in [facts.date, facts.last_modified].into_iter().flatten() {
            assert_eq!(parse_date(&httpdate::fmt_http_date(t)), Some(t));
        }
        let response_time = at(1_700_000_000 + rng.below(1000) as u64);
        let lifetime = freshness_lifetime(&facts, &policy, response_time);
        dated += usize::from(facts.date.is_some() && lifetime.is_some());
        assert!(lifetime.is_none_or(|(l, _)| l <= Duration::from_secs(86_400)));
        let times = StoredTimes {
            request_time: response_time - Duration::from_secs(rng.below(5) as u64),
            response_time,
            date: facts.date.unwrap_or(response_time),
            age_value: facts.age,
            lifetime: lifetime.map_or(Duration::ZERO, |(l, _)| l),
        };
        let now = response_time + Duration::from_secs(rng.below(100_000) as u64);
        let (fresh, ttl) = (times.is_fresh(now), times.ttl_millis(now));
        assert!(if fresh { ttl >= 0 } else { ttl <= 0 });
        assert!(!times.made_stale(now).is_fresh(now));
        let rules = StoredRules::new(&facts.cc, None, None);
        let _ = reuse(&times, &rules, &request_cache_control(&req), now);
        if let Some(Delta::Secs(s)) = facts.cc.max_age {
            assert!(s <= DELTA_SECONDS_MAX);
        }
    }
    assert!(dated > ROUNDS / 50, "only {dated} dated lifetimes");
}

#[test]
fn list_fields() {
    let mut rng = Rng(0xfeed_face_0bad_f00d);
    for _ in 0..ROUNDS {
        let req = rng.fields(FIELD_NAMES, FIELDS);
        let resp = rng.fields(FIELD_NAMES, FIELDS);
        let found = tags(&resp);
        for (i, t) in found.iter().enumerate() {
            assert!(!t.is_empty() && t.len() <= MAX_TAG_LEN && !found[..i].contains(t));
        }
        let names = VaryNames::from_response(&resp);
        assert!(names.0.windows(2).all(|w| w[0].as_str() < w[1].as_str()));
        let _ = names.variant(&req);
        for name in req.keys() {
            if let Some(n) = normalized(name, &req) {
                let mut once = HeaderMap::new();
                once.insert(name.clone(), HeaderValue::from_str(&n).unwrap());
                assert_eq!(normalized(name, &once), Some(n));
            }
        }
        let conditional = [
            "if-match",
            "if-none-match",
            "if-modified-since",
            "if-unmodified-since",
        ]
        .iter()
        .any(|n| req.contains_key(*n));
        let p = evaluate(&Method::GET, &req, &resp);
        assert!(conditional || p == Precondition::Pass);
        let a = rng.text(FIELDS, 3);
        let b = rng.text(FIELDS, 3);
        assert_eq!(etag_eq(&a, &b, true), etag_eq(&b, &a, true));
        assert!(etag_eq(&a, &a, false));
        let mut hop = req.clone();
        strip_hop_by_hop(&mut hop);
        assert!(hop.keys().all(|n| !is_hop_by_hop(n)));
        let mut stored = resp.clone();
        merge_304(&mut stored, &req);
        assert_eq!(
            stored.get(header::CONTENT_LENGTH),
            resp.get(header::CONTENT_LENGTH)
        );
    }
}

#[test]
fn request_targets_and_hosts() {
    let mut rng = Rng(0x5eed_0f7a_59e7_0001);
    let path_pieces = &[
        "/", "/", ".", "..", "%2e", "%2E", "%2F", "%7e", "%", "%0", "%00", "%c3%a9", "a", "?", "*",
        "é", "|",
    ];
    let host_pieces = &[
        "a", "B", ".", ":", "80", "443", "65535", "65536", "[", "]", "::1", "@", "-", "_", " ",
    ];
    let mut normal = 0;
    for _ in 0..ROUNDS {
        let path = rng.text(path_pieces, 8);
        let query = (rng.below(2) == 0).then(|| rng.text(path_pieces, 4));
        if let Ok((p, q)) = normalise_path_and_query(&path, query.as_deref()) {
            normal += 1;
            let again = normalise_path_and_query(&p, q.as_deref()).expect("normal form");
            assert_eq!((again.0, again.1), (p.clone(), q.clone()), "{path:?}");
            assert!(
                p == "*" || p.split('/').all(|s| s != "." && s != ".."),
                "{p:?}"
            );
        }
        let scheme = ["http", "https"][rng.below(2)];
        let authority = rng.text(host_pieces, 6);
        if let Ok(h) = normalise_authority(&authority, scheme) {
            assert!(!h.contains(['|', '#', ' ', '@']), "{authority:?} -> {h:?}");
            assert!(normalise_authority(&h, scheme).is_ok(), "{h:?}");
        }
    }
    assert!(normal > ROUNDS / 50, "only {normal} normal targets");
}
