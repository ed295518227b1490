//! Conditional requests: answering a client's preconditions from a stored
//! response (RFC 9110 §13.2) and validating with the origin (RFC 9111 §4.3).

use http::header::{self, HeaderMap, HeaderValue};
use http::Method;

use crate::facts::{date_header, parse_date};

/// The outcome of evaluating a request's preconditions against a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition applies, or all passed: send the full response.
    Pass,
    /// 304 Not Modified (RFC 9110 §15.4.5).
    NotModified,
    /// 412 Precondition Failed (RFC 9110 §15.5.13).
    Failed,
}

/// Evaluates preconditions in the order of RFC 9110 §13.2.2 against the
/// stored response's `ETag` and `Last-Modified`.
pub fn evaluate(method: &Method, req: &HeaderMap, stored: &HeaderMap) -> Precondition {
    // The common case, no precondition at all, costs one pass over the
    // request's field names (a handful) rather than four hashed lookups.
    if !req.keys().any(|k| k.as_str().starts_with("if-")) {
        return Precondition::Pass;
    }
    let etag = stored.get(header::ETAG).and_then(|v| v.to_str().ok());
    let last_modified = date_header(stored, &header::LAST_MODIFIED);
    let get_or_head = method == Method::GET || method == Method::HEAD;

    // Step 1: If-Match (strong comparison, §13.1.1).
    if let Some(im) = joined(req, &header::IF_MATCH) {
        if !list_matches(&im, etag, true) {
            return Precondition::Failed;
        }
    } else if let Some(ius) = req
        .get(header::IF_UNMODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_date)
    {
        // Step 2: If-Unmodified-Since (§13.1.4).
        if let Some(lm) = last_modified {
            if lm > ius {
                return Precondition::Failed;
            }
        }
    }
    // Step 3: If-None-Match (weak comparison, §13.1.2).
    if let Some(inm) = joined(req, &header::IF_NONE_MATCH) {
        if list_matches(&inm, etag, false) {
            return if get_or_head {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
        return Precondition::Pass;
    }
    // Step 4: If-Modified-Since, GET and HEAD only (§13.1.3).
    if get_or_head {
        if let Some(ims) = req
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_date)
        {
            // RFC 9111 §4.3.2: without Last-Modified, the stored Date stands in.
            if let Some(lm) = last_modified.or_else(|| date_header(stored, &header::DATE)) {
                if lm <= ims {
                    return Precondition::NotModified;
                }
            }
        }
    }
    Precondition::Pass
}

fn joined(req: &HeaderMap, name: &header::HeaderName) -> Option<String> {
    let mut it = req
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .peekable();
    it.peek()?;
    Some(it.collect::<Vec<_>>().join(","))
}

/// Does an entity-tag list (`*` or `"a", W/"b"`) match `etag`?
fn list_matches(list: &str, etag: Option<&str>, strong: bool) -> bool {
    // `*` matches any current representation, with or without an ETag (§13.1.1, §13.1.2).
    if list.trim() == "*" {
        return true;
    }
    let Some(etag) = etag else { return false };
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .any(|t| etag_eq(t, etag.trim(), strong))
}

/// Entity-tag comparison (RFC 9110 §8.8.3.2).
pub fn etag_eq(a: &str, b: &str, strong: bool) -> bool {
    let (wa, ta) = split_weak(a);
    let (wb, tb) = split_weak(b);
    if strong && (wa || wb) {
        return false;
    }
    ta == tb
}

fn split_weak(t: &str) -> (bool, &str) {
    match t.strip_prefix("W/") {
        Some(rest) => (true, rest),
        None => (false, t),
    }
}

/// Adds the validators of a stored response to a request to the origin (§4.3.1):
/// `If-None-Match` from `ETag`, `If-Modified-Since` from `Last-Modified`.
/// Returns false when the stored response has no validator.
pub fn add_validators(origin_req: &mut HeaderMap, stored: &HeaderMap) -> bool {
    let mut added = false;
    if let Some(etag) = stored.get(header::ETAG) {
        origin_req.insert(header::IF_NONE_MATCH, etag.clone());
        added = true;
    }
    if let Some(lm) = stored.get(header::LAST_MODIFIED) {
        origin_req.insert(header::IF_MODIFIED_SINCE, lm.clone());
        added = true;
    }
    added
}

/// Header fields that a 304 does not update in the stored response (RFC 9111 §3.2).
fn kept_on_update(name: &header::HeaderName) -> bool {
    name == header::CONTENT_LENGTH
        || name == header::CONTENT_ENCODING
        || name == header::TRANSFER_ENCODING
        || name == header::CONTENT_RANGE
        || name == header::CONNECTION
        || crate::headers::is_hop_by_hop(name)
}

/// Merges the header fields of a 304 into the stored ones (RFC 9111 §3.2, §4.3.4).
pub fn merge_304(stored: &mut HeaderMap, not_modified: &HeaderMap) {
    let mut names: Vec<&header::HeaderName> =
        not_modified.keys().filter(|n| !kept_on_update(n)).collect();
    names.dedup();
    for name in names {
        let values: Vec<HeaderValue> = not_modified.get_all(name).iter().cloned().collect();
        stored.remove(name);
        for v in values {
            stored.append(name.clone(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn table() {
        use Precondition::*;
        let stored = h(&[
            ("etag", "\"v1\""),
            ("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
        ]);
        let weak = h(&[("etag", "W/\"v1\"")]);
        let dated = h(&[("date", "Mon, 01 Jan 2024 00:00:00 GMT")]);
        let cases: &[(&HeaderMap, Method, &[(&str, &str)], Precondition)] = &[
            (&stored, Method::GET, &[], Pass),
            (
                &stored,
                Method::GET,
                &[("if-none-match", "\"v1\"")],
                NotModified,
            ),
            (
                &stored,
                Method::HEAD,
                &[("if-none-match", "\"x\", \"v1\"")],
                NotModified,
            ),
            (
                &stored,
                Method::GET,
                &[("if-none-match", "W/\"v1\"")],
                NotModified,
            ),
            (
                &weak,
                Method::GET,
                &[("if-none-match", "\"v1\"")],
                NotModified,
            ),
            (&stored, Method::GET, &[("if-none-match", "*")], NotModified),
            (&stored, Method::GET, &[("if-none-match", "\"v2\"")], Pass),
            (
                &stored,
                Method::GET,
                &[
                    ("if-none-match", "\"v2\""),
                    ("if-modified-since", "Tue, 02 Jan 2024 00:00:00 GMT"),
                ],
                Pass,
            ),
            (
                &stored,
                Method::GET,
                &[("if-modified-since", "Tue, 02 Jan 2024 00:00:00 GMT")],
                NotModified,
            ),
            (
                &stored,
                Method::GET,
                &[("if-modified-since", "Sun, 31 Dec 2023 00:00:00 GMT")],
                Pass,
            ),
            (
                &stored,
                Method::GET,
                &[("if-modified-since", "garbage")],
                Pass,
            ),
            (&stored, Method::GET, &[("if-match", "\"v2\"")], Failed),
            (&stored, Method::GET, &[("if-match", "\"v1\"")], Pass),
            (&weak, Method::GET, &[("if-match", "W/\"v1\"")], Failed),
            (
                &stored,
                Method::GET,
                &[("if-unmodified-since", "Sun, 31 Dec 2023 00:00:00 GMT")],
                Failed,
            ),
            (
                &dated,
                Method::GET,
                &[("if-modified-since", "Tue, 02 Jan 2024 00:00:00 GMT")],
                NotModified,
            ),
            (
                &dated,
                Method::GET,
                &[("if-modified-since", "Sun, 31 Dec 2023 00:00:00 GMT")],
                Pass,
            ),
            (&dated, Method::GET, &[("if-match", "*")], Pass),
            (&dated, Method::GET, &[("if-none-match", "*")], NotModified),
        ];
        for (stored, m, req, want) in cases {
            assert_eq!(evaluate(m, &h(req), stored), *want, "{m} {req:?}");
        }
    }

    #[test]
    fn merge_keeps_length_and_replaces_others() {
        let mut stored = h(&[
            ("content-length", "10"),
            ("etag", "\"a\""),
            ("x-a", "1"),
            ("x-a", "2"),
            ("cache-control", "max-age=1"),
        ]);
        merge_304(
            &mut stored,
            &h(&[
                ("content-length", "0"),
                ("cache-control", "max-age=60"),
                ("x-a", "3"),
                ("x-new", "n"),
            ]),
        );
        assert_eq!(stored.get("content-length").unwrap(), "10");
        assert_eq!(stored.get("cache-control").unwrap(), "max-age=60");
        assert_eq!(stored.get_all("x-a").iter().count(), 1);
        assert_eq!(stored.get("x-new").unwrap(), "n");
        assert_eq!(stored.get("etag").unwrap(), "\"a\"");
    }
}
