//! The forwarding fields: hoard owns them.
//!
//! An origin may reflect fields such as `X-Forwarded-Host` or
//! `X-Original-URL` into its response; if a client could set them, that
//! response would be cached for everyone under a key that does not contain
//! them (cache poisoning). So by default every field of [`OWNED`] that a
//! client sent is removed, and hoard sets `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Forwarded-Host` and `Forwarded` (RFC 7239) from
//! what it knows: the peer address, the scheme and the Host.
//!
//! * From a peer in `server.trusted_proxies` (a load balancer in front), the
//!   chain fields ([`CHAIN`]) are kept and extended.
//! * A route may keep a field with `forward_headers`; the field is then part
//!   of the route's cache key (unless `forward_unkeyed = true`), so no
//!   configuration forwards an unkeyed field by accident.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Fields a client must not be able to send to the origin unkeyed (see
/// [`hoard_policy::headers::FORWARDING_OWNED`]).
pub use hoard_policy::headers::FORWARDING_OWNED as OWNED;

/// The chain fields a trusted proxy in front may set; hoard extends them.
pub const CHAIN: [&str; 4] = [
    "x-forwarded-for",
    "forwarded",
    "x-forwarded-proto",
    "x-forwarded-host",
];

/// What hoard knows about the request.
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    /// The peer's address.
    pub peer: std::net::IpAddr,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The Host (or `:authority`) the client sent; empty if none.
    pub host: &'a str,
    /// The peer is in `server.trusted_proxies`.
    pub trusted: bool,
}

/// Removes the client's copies of [`OWNED`] fields (but those the route
/// forwards, and the chain from a trusted peer) and sets the forwarding
/// fields.
pub fn prepare(headers: &mut HeaderMap, hop: Hop<'_>, route_forwards: &[HeaderName]) {
    for name in OWNED {
        let keep = route_forwards.iter().any(|h| h.as_str() == name)
            || (hop.trusted && CHAIN.contains(&name));
        if !keep {
            headers.remove(name);
        }
    }
    let ip = hop.peer.to_string();
    // Every `X-Forwarded-For` field a trusted peer sent, in order (RFC
    // 9110 §5.3: several fields are one list), as `client_addr` reads them.
    let mut xff = String::new();
    for prev in headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        xff.push_str(prev);
        xff.push_str(", ");
    }
    xff.push_str(&ip);
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    if !headers.contains_key("x-forwarded-proto") {
        headers.insert(
            "x-forwarded-proto",
            HeaderValue::from_static(if hop.scheme == "https" {
                "https"
            } else {
                "http"
            }),
        );
    }
    if !headers.contains_key("x-forwarded-host") && !hop.host.is_empty() {
        if let Ok(v) = HeaderValue::from_str(hop.host) {
            headers.insert("x-forwarded-host", v);
        }
    }
    let node = if hop.peer.is_ipv6() {
        format!("\"[{ip}]\"")
    } else {
        ip
    };
    let mut fwd = format!("for={node};proto={}", hop.scheme);
    if !hop.host.is_empty()
        && hop
            .host
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
    {
        fwd.push_str(";host=\"");
        fwd.push_str(hop.host);
        fwd.push('"');
    }
    if let Ok(v) = HeaderValue::from_str(&fwd) {
        headers.append(header::FORWARDED, v);
    }
}

/// The client's address as the edge rules see it: the peer's, or, from a
/// peer in `trusted` (a load balancer in front), the last address of
/// `X-Forwarded-For` that is not itself in `trusted` (nginx's `realip`
/// with `real_ip_recursive on`). A malformed entry ends the walk at the
/// address before it.
pub fn client_addr(
    peer: std::net::IpAddr,
    headers: &HeaderMap,
    trusted: &[hoard_config::Cidr],
) -> std::net::IpAddr {
    if !trusted.iter().any(|c| c.contains(peer)) {
        return peer;
    }
    let mut client = peer;
    // From the last hop back, over every line of the field.
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.rsplit(','));
    for hop in hops {
        let Ok(ip) = hop.trim().parse::<std::net::IpAddr>() else {
            break;
        };
        client = ip;
        if !trusted.iter().any(|c| c.contains(ip)) {
            break;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(trusted: bool) -> Hop<'static> {
        Hop {
            peer: "192.0.2.7".parse().unwrap(),
            scheme: "https",
            host: "shop.example",
            trusted,
        }
    }

    fn client() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-host", "evil.example".parse().unwrap());
        h.insert("x-forwarded-for", "10.9.9.9".parse().unwrap());
        h.insert("x-original-url", "/admin".parse().unwrap());
        h.insert("x-http-method-override", "DELETE".parse().unwrap());
        h.insert("forwarded", "for=10.9.9.9".parse().unwrap());
        h.insert("accept", "*/*".parse().unwrap());
        h
    }

    #[test]
    fn untrusted_client_fields_are_replaced() {
        let mut h = client();
        prepare(&mut h, hop(false), &[]);
        assert_eq!(h["x-forwarded-host"], "shop.example");
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert!(h.get("x-original-url").is_none());
        assert!(h.get("x-http-method-override").is_none());
        let fwd: Vec<_> = h.get_all("forwarded").iter().collect();
        assert_eq!(fwd, ["for=192.0.2.7;proto=https;host=\"shop.example\""]);
        assert_eq!(h["accept"], "*/*");
    }

    #[test]
    fn trusted_chain_is_extended_and_routes_may_forward() {
        let mut h = client();
        prepare(
            &mut h,
            hop(true),
            &[HeaderName::from_static("x-original-url")],
        );
        assert_eq!(h["x-forwarded-host"], "evil.example");
        assert_eq!(h["x-forwarded-for"], "10.9.9.9, 192.0.2.7");
        assert_eq!(h["x-original-url"], "/admin");
        assert!(h.get("x-http-method-override").is_none());
        assert_eq!(h.get_all("forwarded").iter().count(), 2);
        // Several fields are one list.
        let mut h = client();
        h.append("x-forwarded-for", "10.8.8.8".parse().unwrap());
        prepare(&mut h, hop(true), &[]);
        assert_eq!(h["x-forwarded-for"], "10.9.9.9, 10.8.8.8, 192.0.2.7");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
    }
}
