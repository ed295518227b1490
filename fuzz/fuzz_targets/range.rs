//! Range requests (RFC 9110 §14): `range::decide` and `parse_content_range`.
//!
//! Feeds `Range`, `If-Range`, the stored `ETag`, `Last-Modified` and `Date`,
//! a method, a status and a body length, and checks, beyond not panicking,
//! that a `206` answer is at most `MAX_RANGES` non-empty ranges inside the
//! body, ascending, neither overlapping nor touching, each of whose
//! `Content-Range` parses back to itself; that only a GET of a 200 of known
//! length gets anything but the whole response; and that whatever
//! `parse_content_range` accepts is a non-empty range inside its length that
//! prints and parses back the same.
#![no_main]

use hoard_fuzz::set;
use hoard_policy::range::{decide, parse_content_range, RangeDecision, MAX_RANGES};
use http::header::{self, HeaderMap};
use http::{Method, StatusCode};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    range: Option<&'a str>,
    if_range: Option<&'a str>,
    etag: Option<&'a str>,
    last_modified: Option<&'a str>,
    date: Option<&'a str>,
    head: bool,
    not_found: bool,
    small: bool,
    len: Option<u64>,
    content_range: &'a str,
}

fuzz_target!(|inp: Input<'_>| {
    let mut req = HeaderMap::new();
    set(&mut req, header::RANGE, inp.range);
    set(&mut req, header::IF_RANGE, inp.if_range);
    let mut resp = HeaderMap::new();
    set(&mut resp, header::ETAG, inp.etag);
    set(&mut resp, header::LAST_MODIFIED, inp.last_modified);
    set(&mut resp, header::DATE, inp.date);
    let method = if inp.head { Method::HEAD } else { Method::GET };
    let status = if inp.not_found {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    // Small lengths reach the edges (empty bodies, one byte) more often.
    let len = inp.len.map(|l| if inp.small { l % 64 } else { l });

    match decide(&method, &req, status, &resp, len) {
        RangeDecision::Full => {}
        RangeDecision::Unsatisfiable => {
            assert!(method == Method::GET && status == StatusCode::OK && len.is_some());
        }
        RangeDecision::Partial(ranges) => {
            assert!(method == Method::GET && status == StatusCode::OK);
            let total = len.expect("a partial answer needs a known length");
            assert!(!ranges.is_empty() && ranges.len() <= MAX_RANGES);
            for r in &ranges {
                assert!(r.start < r.end && r.end <= total, "{r:?} of {total}");
                assert!(!r.is_empty() && r.len() == r.end - r.start);
                assert_eq!(
                    parse_content_range(&r.content_range(total)),
                    Some((*r, total))
                );
            }
            for w in ranges.windows(2) {
                assert!(w[0].end < w[1].start, "{ranges:?}");
            }
        }
    }

    if let Some((r, total)) = parse_content_range(inp.content_range) {
        assert!(r.start < r.end && r.end <= total, "{r:?} of {total}");
        assert_eq!(
            parse_content_range(&r.content_range(total)),
            Some((r, total))
        );
    }
});
