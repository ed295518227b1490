//! Hop-by-hop header fields (RFC 9110 §7.6.1) and proxy bookkeeping fields.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The fields that are hop-by-hop whether or not `Connection` names them.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TE
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::TRAILER
        || name == header::PROXY_AUTHORIZATION
        || name == header::PROXY_AUTHENTICATE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// Up to this many names, a map is scanned rather than looked up: a
/// request has a handful of fields and most of the look-ups made for it
/// find nothing, and one pass comparing names costs less than hashing
/// each name (a hashed miss is about 90 instructions).
const SCANNED: usize = 12;

/// Whether `headers` hold a field named one of `names` (see [`SCANNED`]).
pub fn has_any(headers: &HeaderMap, names: &[HeaderName]) -> bool {
    if headers.keys_len() > SCANNED {
        return names.iter().any(|n| headers.contains_key(n));
    }
    headers.keys().any(|k| names.contains(k))
}

/// The first two values of the field `name`, in order (a field that must
/// appear once is refused when the second is there); one pass over a
/// small map (see [`SCANNED`]).
pub fn first_two<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> (Option<&'a HeaderValue>, Option<&'a HeaderValue>) {
    if headers.keys_len() > SCANNED {
        let mut all = headers.get_all(name).iter();
        return (all.next(), all.next());
    }
    let mut found = (None, None);
    for (n, v) in headers {
        if n == name {
            if found.0.is_none() {
                found.0 = Some(v);
            } else {
                found.1 = Some(v);
                break;
            }
        }
    }
    found
}

/// Removes the fields hoard never stores: those a cache must not store
/// (RFC 9111 §3.1: `Proxy-Authentication-Info`), and `Set-Cookie`, which
/// belongs to the client whose request fetched the response.
pub fn strip_never_stored(headers: &mut HeaderMap) {
    headers.remove("proxy-authentication-info");
    headers.remove(header::SET_COOKIE);
}

/// Removes hop-by-hop fields, including every field named in `Connection`
/// (RFC 9110 §7.6.1). Used in both directions.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // `Connection` is hop-by-hop itself: with no such field there is
    // nothing to remove, found in one pass over the names.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for n in hop {
        headers.remove(n);
    }
}

/// Fields a client must not be able to send to the origin unkeyed: they
/// change what an origin thinks the request is (host, scheme, port, path,
/// method, client address). A proxy sets them itself from what it knows
/// (cache poisoning otherwise: an origin that reflects one would have its
/// answer cached for everyone under a key without it).
pub const FORWARDING_OWNED: [&str; 22] = [
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-scheme",
    "x-forwarded-port",
    "x-forwarded-server",
    "x-forwarded-prefix",
    "x-forwarded-ssl",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "front-end-https",
    "x-url-scheme",
    "forwarded",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_any_small_and_large_maps() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "a".parse().unwrap());
        assert!(has_any(&h, &[header::PRAGMA, header::HOST]));
        assert!(!has_any(&h, &[header::PRAGMA, header::CACHE_CONTROL]));
        // Past twelve names: looked up, the same answers.
        for i in 0..20 {
            h.insert(
                HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        assert!(has_any(&h, &[header::PRAGMA, header::HOST]));
        assert!(has_any(&h, &[HeaderName::from_static("x-19")]));
        assert!(!has_any(&h, &[header::PRAGMA]));
    }

    #[test]
    fn first_two_small_and_large_maps() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, "x".parse().unwrap());
        assert_eq!(first_two(&h, &header::HOST), (None, None));
        h.append(header::HOST, "a".parse().unwrap());
        assert_eq!(first_two(&h, &header::HOST).0.unwrap(), "a");
        assert_eq!(first_two(&h, &header::HOST).1, None);
        h.append(header::HOST, "b".parse().unwrap());
        h.append(header::HOST, "c".parse().unwrap());
        let two = |h: &HeaderMap| {
            let (a, b) = first_two(h, &header::HOST);
            (a.unwrap().clone(), b.unwrap().clone())
        };
        assert_eq!(two(&h), ("a".parse().unwrap(), "b".parse().unwrap()));
        // Past the scanned size: looked up, the same answers.
        for i in 0..20 {
            h.insert(
                HeaderName::from_bytes(format!("x-{i}").as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        assert_eq!(two(&h), ("a".parse().unwrap(), "b".parse().unwrap()));
    }

    #[test]
    fn strips_named_and_standard() {
        let mut h = HeaderMap::new();
        h.insert("connection", "close, X-Secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("te", "trailers".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }
}
