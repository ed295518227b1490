//! Range requests answered from a full response (RFC 9110 §14).
//!
//! [`decide`] turns a request's `Range` and `If-Range` fields and a full
//! `200` response of known length into what to send: the whole response,
//! one or more byte ranges (`206`), or `416`. Pure: the caller has the body.

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};

use crate::conditional::etag_eq;
use crate::facts::date_header;

/// Most ranges one request may ask for; more is answered with the whole
/// response (RFC 9110 §14.2 lets a server ignore a Range it finds abusive).
pub const MAX_RANGES: usize = 16;

/// Bytes `start..end` (end exclusive) of a representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes (zero for a range that ends before it starts).
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True for an empty range (never produced by [`decide`]).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The `Content-Range` value for this non-empty range of `total` bytes
    /// (§14.4); [`decide`] and [`parse_content_range`] never give an empty one.
    pub fn content_range(&self, total: u64) -> String {
        format!("bytes {}-{}/{}", self.start, self.end - 1, total)
    }
}

/// Reads a `Content-Range` of a 206 (RFC 9110 §14.4): `bytes FIRST-LAST/TOTAL`
/// as the range and the complete length. `None` for anything else,
/// including an unknown length (`/*`) and a range outside the length.
pub fn parse_content_range(value: &str) -> Option<(ByteRange, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let digits = |s: &str| -> Option<u64> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (first, last, total) = (digits(first)?, digits(last)?, digits(total)?);
    // `then`, not `then_some`: `last + 1` overflows for `last == u64::MAX`,
    // which the check excludes.
    (first <= last && last < total).then(|| {
        (
            ByteRange {
                start: first,
                end: last + 1,
            },
            total,
        )
    })
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeDecision {
    /// No (usable) Range: the whole response.
    Full,
    /// `206 Partial Content` with these ranges, in ascending order, not
    /// overlapping (§14.2: overlapping ranges are coalesced).
    Partial(Vec<ByteRange>),
    /// `416 Range Not Satisfiable` with `Content-Range: bytes */len` (§15.5.17).
    Unsatisfiable,
}

/// One `range-spec` of a `Range: bytes=` field (§14.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-last` or `first-`.
    From(u64, Option<u64>),
    /// `-suffix`.
    Suffix(u64),
}

/// Parses `bytes=...`; `None` for another unit or a syntax error (the
/// field is then ignored, §14.2).
fn parse(value: &str) -> Option<Vec<Spec>> {
    let (unit, set) = value.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let mut out = Vec::new();
    for spec in set.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            // Empty list elements are allowed (§5.6.1).
            continue;
        }
        let (a, b) = spec.split_once('-')?;
        let num = |s: &str| -> Option<u64> {
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (a, b) = (a.trim(), b.trim());
        out.push(if a.is_empty() {
            Spec::Suffix(num(b)?)
        } else {
            let first = num(a)?;
            let last = if b.is_empty() { None } else { Some(num(b)?) };
            if last.is_some_and(|l| l < first) {
                // "first-last" with last < first is invalid (§14.1.1).
                return None;
            }
            Spec::From(first, last)
        });
    }
    (!out.is_empty()).then_some(out)
}

/// True if `If-Range` lets the Range apply to this response (§13.1.5): an
/// entity-tag that strongly matches the `ETag`, or a date equal to a
/// strong `Last-Modified` (one at least a second before `Date`).
fn if_range_holds(if_range: &HeaderValue, resp: &HeaderMap) -> bool {
    let Ok(v) = if_range.to_str() else {
        return false;
    };
    let v = v.trim();
    if v.starts_with('"') || v.starts_with("W/") {
        return resp
            .get(header::ETAG)
            .and_then(|e| e.to_str().ok())
            .is_some_and(|e| etag_eq(v, e.trim(), true));
    }
    let Some(asked) = crate::facts::parse_date(v) else {
        return false;
    };
    let Some(lm) = date_header(resp, &header::LAST_MODIFIED) else {
        return false;
    };
    let strong = date_header(resp, &header::DATE)
        .is_some_and(|d| d.duration_since(lm).is_ok_and(|gap| gap.as_secs() >= 1));
    lm == asked && strong
}

/// The `If-Range` value that asks an origin for the rest of a stored
/// partial response with fields `stored` (RFC 9110 §13.1.5): its strong
/// entity-tag, or (with no entity-tag) its `Last-Modified` if that is a
/// strong validator (§8.8.2.2: at least a second before `Date`). `None`:
/// the stored part cannot be joined to anything (§15.3.7.3).
pub fn completion_validator(stored: &HeaderMap) -> Option<&HeaderValue> {
    match stored.get(header::ETAG) {
        Some(e) if e.as_bytes().starts_with(b"W/") => None,
        Some(e) => Some(e),
        None => strong_last_modified(stored).then(|| stored.get(header::LAST_MODIFIED))?,
    }
}

/// Whether two partial responses may be combined (RFC 9110 §15.3.7.3):
/// they share a strong validator, the same strong entity-tag or, with no
/// entity-tag on either, the same strong `Last-Modified`.
pub fn share_strong_validator(a: &HeaderMap, b: &HeaderMap) -> bool {
    match (a.get(header::ETAG), b.get(header::ETAG)) {
        (Some(x), Some(y)) => x == y && !x.as_bytes().starts_with(b"W/"),
        (None, None) => {
            strong_last_modified(a)
                && strong_last_modified(b)
                && date_header(a, &header::LAST_MODIFIED) == date_header(b, &header::LAST_MODIFIED)
        }
        _ => false,
    }
}

/// `Last-Modified` present and at least a second before `Date` (§8.8.2.2).
fn strong_last_modified(h: &HeaderMap) -> bool {
    match (
        date_header(h, &header::LAST_MODIFIED),
        date_header(h, &header::DATE),
    ) {
        (Some(lm), Some(d)) => d.duration_since(lm).is_ok_and(|gap| gap.as_secs() >= 1),
        _ => false,
    }
}

/// What to send for a request with `req` fields, answered from a full
/// response with `status` and `resp` fields whose body is `len` bytes
/// (`None`: not known yet, the whole response is sent).
///
/// Range applies to GET only (§14.2), to a `200` only, and never when
/// `If-Range` does not hold (§13.1.5).
pub fn decide(
    method: &Method,
    req: &HeaderMap,
    status: StatusCode,
    resp: &HeaderMap,
    len: Option<u64>,
) -> RangeDecision {
    let Some(range) = req.get(header::RANGE) else {
        return RangeDecision::Full;
    };
    if method != Method::GET || status != StatusCode::OK {
        return RangeDecision::Full;
    }
    let Some(len) = len else {
        return RangeDecision::Full;
    };
    if let Some(ir) = req.get(header::IF_RANGE) {
        if !if_range_holds(ir, resp) {
            return RangeDecision::Full;
        }
    }
    let Some(specs) = range.to_str().ok().and_then(parse) else {
        return RangeDecision::Full;
    };
    if specs.len() > MAX_RANGES {
        return RangeDecision::Full;
    }
    // A zero-length representation satisfies a non-zero suffix-range
    // (§14.1.2), but no `Content-Range` can name zero bytes: send it whole.
    if len == 0 && specs.iter().any(|s| matches!(s, Spec::Suffix(n) if *n > 0)) {
        return RangeDecision::Full;
    }
    let mut ranges: Vec<ByteRange> = specs
        .into_iter()
        .filter_map(|s| match s {
            Spec::From(first, _) if first >= len => None,
            Spec::From(first, last) => Some(ByteRange {
                start: first,
                end: last.map_or(len, |l| l.saturating_add(1).min(len)),
            }),
            Spec::Suffix(0) => None,
            Spec::Suffix(n) => Some(ByteRange {
                start: len.saturating_sub(n),
                end: len,
            }),
        })
        .collect();
    if ranges.is_empty() {
        return RangeDecision::Unsatisfiable;
    }
    // Coalesce overlapping and adjacent ranges (§14.2), in ascending order.
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
            _ => merged.push(r),
        }
    }
    RangeDecision::Partial(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_of_a_206() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((ByteRange { start: 0, end: 100 }, 1000))
        );
        assert_eq!(
            parse_content_range("bytes 999-999/1000"),
            Some((
                ByteRange {
                    start: 999,
                    end: 1000
                },
                1000
            ))
        );
        for bad in [
            "bytes 0-99/*",
            "bytes */1000",
            "bytes 5-4/1000",
            "bytes 0-1000/1000",
            "items 0-1/2",
            "bytes +0-1/2",
            "bytes 0-1/",
            // The last byte position may not be u64::MAX (its end would overflow).
            "bytes 0-18446744073709551615/18446744073709551615",
            "bytes 18446744073709551615-18446744073709551615/1",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }

    fn req(range: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, range.parse().unwrap());
        h
    }

    fn get(range: &str, len: u64) -> RangeDecision {
        decide(
            &Method::GET,
            &req(range),
            StatusCode::OK,
            &HeaderMap::new(),
            Some(len),
        )
    }

    fn one(start: u64, end: u64) -> RangeDecision {
        RangeDecision::Partial(vec![ByteRange { start, end }])
    }

    #[test]
    fn single_suffix_and_open_ranges() {
        assert_eq!(get("bytes=0-499", 10_000), one(0, 500));
        assert_eq!(get("bytes=9500-", 10_000), one(9500, 10_000));
        assert_eq!(get("bytes=-500", 10_000), one(9500, 10_000));
        assert_eq!(get("bytes=-50000", 10_000), one(0, 10_000));
        assert_eq!(get("bytes=0-99999", 10_000), one(0, 10_000));
        assert_eq!(get("BYTES = 5-5", 10_000), one(5, 6));
    }

    #[test]
    fn several_ranges_are_sorted_and_coalesced() {
        assert_eq!(
            get("bytes=500-599, 0-99", 1000),
            RangeDecision::Partial(vec![
                ByteRange { start: 0, end: 100 },
                ByteRange {
                    start: 500,
                    end: 600
                }
            ])
        );
        assert_eq!(get("bytes=0-99,50-199,200-249", 1000), one(0, 250));
        // Unsatisfiable members are dropped while one is satisfiable.
        assert_eq!(get("bytes=5000-,0-0", 1000), one(0, 1));
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(get("bytes=1000-", 1000), RangeDecision::Unsatisfiable);
        assert_eq!(get("bytes=-0", 1000), RangeDecision::Unsatisfiable);
        assert_eq!(get("bytes=0-0", 0), RangeDecision::Unsatisfiable);
        // Syntax errors and other units: the field is ignored.
        for bad in [
            "bytes=5-1",
            "bytes=a-b",
            "items=0-1",
            "bytes=",
            "bytes=1",
            "bytes=--1",
        ] {
            assert_eq!(get(bad, 1000), RangeDecision::Full, "{bad}");
        }
        let many = format!("bytes={}", vec!["0-0"; MAX_RANGES + 1].join(","));
        assert_eq!(get(&many, 1000), RangeDecision::Full);
    }

    #[test]
    fn only_get_on_a_200_of_known_length() {
        let h = req("bytes=0-1");
        let none = HeaderMap::new();
        assert_eq!(
            decide(&Method::HEAD, &h, StatusCode::OK, &none, Some(10)),
            RangeDecision::Full
        );
        assert_eq!(
            decide(&Method::GET, &h, StatusCode::NOT_FOUND, &none, Some(10)),
            RangeDecision::Full
        );
        assert_eq!(
            decide(&Method::GET, &h, StatusCode::OK, &none, None),
            RangeDecision::Full
        );
    }

    #[test]
    fn combining_needs_a_shared_strong_validator() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let date = ("date", "Mon, 01 Dec 2025 10:00:10 GMT");
        let lm = ("last-modified", "Mon, 01 Dec 2025 10:00:00 GMT");
        let lm_now = ("last-modified", "Mon, 01 Dec 2025 10:00:10 GMT");
        assert!(share_strong_validator(
            &h(&[("etag", "\"a\"")]),
            &h(&[("etag", "\"a\"")])
        ));
        assert!(!share_strong_validator(
            &h(&[("etag", "\"a\"")]),
            &h(&[("etag", "\"b\"")])
        ));
        assert!(!share_strong_validator(
            &h(&[("etag", "W/\"a\"")]),
            &h(&[("etag", "W/\"a\"")])
        ));
        assert!(!share_strong_validator(
            &h(&[("etag", "\"a\"")]),
            &h(&[date, lm])
        ));
        assert!(share_strong_validator(&h(&[date, lm]), &h(&[date, lm])));
        assert!(!share_strong_validator(
            &h(&[date, lm_now]),
            &h(&[date, lm_now])
        ));
        assert!(
            !share_strong_validator(&h(&[]), &h(&[])),
            "no validator: never combined"
        );
        assert_eq!(
            completion_validator(&h(&[("etag", "\"a\"")])).unwrap(),
            "\"a\""
        );
        assert!(completion_validator(&h(&[("etag", "W/\"a\""), date, lm])).is_none());
        assert_eq!(completion_validator(&h(&[date, lm])).unwrap(), lm.1);
        assert!(completion_validator(&h(&[date, lm_now])).is_none());
        assert!(completion_validator(&h(&[])).is_none());
    }

    #[test]
    fn if_range_with_etag_or_date() {
        let mut resp = HeaderMap::new();
        resp.insert(header::ETAG, "\"v1\"".parse().unwrap());
        resp.insert(
            header::LAST_MODIFIED,
            "Sun, 01 Nov 2026 10:00:00 GMT".parse().unwrap(),
        );
        resp.insert(
            header::DATE,
            "Sun, 01 Nov 2026 12:00:00 GMT".parse().unwrap(),
        );
        let with_in = |resp: &HeaderMap, ir: &str| {
            let mut h = req("bytes=0-1");
            h.insert(header::IF_RANGE, ir.parse().unwrap());
            decide(&Method::GET, &h, StatusCode::OK, resp, Some(10))
        };
        let with = |ir: &str| with_in(&resp, ir);
        assert_eq!(with("\"v1\""), one(0, 2));
        assert_eq!(with("\"v2\""), RangeDecision::Full);
        assert_eq!(
            with("W/\"v1\""),
            RangeDecision::Full,
            "weak tags never match"
        );
        assert_eq!(with("Sun, 01 Nov 2026 10:00:00 GMT"), one(0, 2));
        assert_eq!(with("Sun, 01 Nov 2026 10:00:01 GMT"), RangeDecision::Full);
        // A Last-Modified as late as Date is weak: the date never matches.
        let mut weak = resp.clone();
        weak.insert(
            header::DATE,
            "Sun, 01 Nov 2026 10:00:00 GMT".parse().unwrap(),
        );
        assert_eq!(
            with_in(&weak, "Sun, 01 Nov 2026 10:00:00 GMT"),
            RangeDecision::Full
        );
    }

    #[test]
    fn suffix_of_an_empty_body_is_the_whole_body() {
        // A non-zero suffix-range is satisfiable for a zero-length
        // representation (§14.1.2), but no Content-Range names an empty range:
        // the (empty) whole response is sent instead of a 206 of zero bytes.
        assert_eq!(get("bytes=-5", 0), RangeDecision::Full);
        assert_eq!(get("bytes=0-0,-1", 0), RangeDecision::Full);
        assert_eq!(get("bytes=-0", 0), RangeDecision::Unsatisfiable);
        assert_eq!(get("bytes=0-", 0), RangeDecision::Unsatisfiable);
    }

    #[test]
    fn content_range_values() {
        assert_eq!(
            ByteRange { start: 0, end: 500 }.content_range(1000),
            "bytes 0-499/1000"
        );
    }
}
