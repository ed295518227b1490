//! List fields read from requests and responses: purge tags
//! (`Surrogate-Key`, `Cache-Tag`), `Vary` and the request's varied fields,
//! preconditions (`If-Match`, `If-None-Match`, `If-Modified-Since`,
//! `If-Unmodified-Since` against `ETag` and `Last-Modified`), `Connection`
//! and the 304 header merge.
//!
//! The input is two blocks of field lines, request and stored response,
//! separated by an empty line. Beyond not panicking, checks that:
//! - tags are non-empty, at most `MAX_TAG_LEN` bytes, unique, and gone
//!   after `tags::strip`;
//! - `Vary` names are sorted and unique, and normalising a varied field is
//!   idempotent (its normal form normalises to itself);
//! - without preconditions the answer is `Pass`; entity-tag comparison is
//!   symmetric, reflexive when weak, and a strong match is a weak match;
//! - no hop-by-hop field survives `strip_hop_by_hop`;
//! - a 304 merge keeps the stored `Content-Length`.
#![no_main]

use hoard_fuzz::header_map;
use hoard_policy::conditional::{add_validators, etag_eq, evaluate, merge_304, Precondition};
use hoard_policy::headers::{is_hop_by_hop, strip_hop_by_hop, strip_never_stored};
use hoard_policy::tags::{self, MAX_TAG_LEN};
use hoard_policy::vary::{normalized, VaryNames};
use http::header::{self, HeaderMap, HeaderValue};
use http::Method;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.windows(2).position(|w| w == b"\n\n");
    let (req_bytes, resp_bytes) = match split {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let req = header_map(req_bytes);
    let resp = header_map(resp_bytes);

    let mut tagged = resp.clone();
    let found = tags::tags(&tagged);
    for (i, t) in found.iter().enumerate() {
        assert!(!t.is_empty() && t.len() <= MAX_TAG_LEN);
        assert!(!found[..i].contains(t), "duplicate tag {t:?}");
    }
    tags::strip(&mut tagged);
    assert!(tags::tags(&tagged).is_empty());

    let names = VaryNames::from_response(&resp);
    for w in names.0.windows(2) {
        assert!(w[0].as_str() < w[1].as_str());
    }
    let _ = names.variant(&req);
    for name in names.0.iter().chain(req.keys()) {
        if let Some(n) = normalized(name, &req) {
            let mut once = HeaderMap::new();
            once.insert(
                name.clone(),
                HeaderValue::from_str(&n).expect("normal form is ASCII"),
            );
            assert_eq!(
                normalized(name, &once).as_deref(),
                Some(n.as_str()),
                "{name}"
            );
        }
    }

    for method in [Method::GET, Method::HEAD, Method::PUT] {
        let p = evaluate(&method, &req, &resp);
        let conditional = [
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_UNMODIFIED_SINCE,
        ]
        .iter()
        .any(|n| req.contains_key(n));
        if !conditional {
            assert_eq!(p, Precondition::Pass);
        }
    }
    if let (Some(a), Some(b)) = (text(&req, header::IF_MATCH), text(&resp, header::ETAG)) {
        for strong in [true, false] {
            assert_eq!(etag_eq(a, b, strong), etag_eq(b, a, strong));
        }
        assert!(!etag_eq(a, b, true) || etag_eq(a, b, false));
        assert!(etag_eq(a, a, false));
    }

    let mut origin_req = req.clone();
    let added = add_validators(&mut origin_req, &resp);
    assert_eq!(
        added,
        resp.contains_key(header::ETAG) || resp.contains_key(header::LAST_MODIFIED)
    );

    let mut hop = req.clone();
    strip_hop_by_hop(&mut hop);
    assert!(hop.keys().all(|n| !is_hop_by_hop(n)));
    strip_never_stored(&mut hop);
    assert!(!hop.contains_key(header::SET_COOKIE));

    let mut stored = resp.clone();
    merge_304(&mut stored, &req);
    let lengths = |h: &HeaderMap| -> Vec<HeaderValue> {
        h.get_all(header::CONTENT_LENGTH).iter().cloned().collect()
    };
    assert_eq!(lengths(&stored), lengths(&resp));
});

fn text(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}
