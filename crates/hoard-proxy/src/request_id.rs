//! Request ids: in `X-Request-Id` to the origin and
//! in the access log.
//!
//! ## Model
//!
//! A request that comes from a peer in `server.trusted_proxies` (a load
//! balancer in front) keeps the `X-Request-Id` it carries when the value is
//! sane ([`RequestId::kept`]: 1 to [`MAX_LEN`] visible ASCII characters).
//! Any other request gets one made here ([`RequestId::make`]): 128 bits
//! written as 32 lowercase hex digits, the form of nginx's `$request_id`.
//!
//! Making one costs a few instructions and no lock: each thread holds a
//! random 64-bit prefix (read once from the system's generator) and a
//! counter; the id is the prefix and a bijective mix of the counter, so ids
//! are unique per thread without looking sequential. A made id is kept as
//! its 16 bytes; its text is written only where it is used (the log's
//! writer thread, the origin request).
//!
//! It is made only when the access log is on (once per request, for its
//! line; the origin requests of that request carry the same id) or, with
//! the log off, for each request that goes to the origin: a hit with the
//! log off makes none.

use std::cell::Cell;

use http::HeaderValue;

/// The field that carries the id (a de facto standard: Heroku, nginx
/// `proxy_set_header X-Request-Id $request_id`, most tracing set-ups).
pub const FIELD: &str = "x-request-id";

/// Longest client id kept; a longer one is replaced.
pub const MAX_LEN: usize = 128;

/// A request's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestId {
    /// Sent by a trusted proxy in front.
    Kept(HeaderValue),
    /// Made here: written as 32 hex digits.
    Made([u64; 2]),
}

thread_local! {
    /// (random prefix, counter) of this thread's ids.
    static STATE: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

impl RequestId {
    /// A new id (see the module docs).
    pub fn make() -> RequestId {
        let (prefix, n) = STATE.with(|s| {
            let (prefix, n) = s.get().unwrap_or_else(seed);
            s.set(Some((prefix, n.wrapping_add(1))));
            (prefix, n)
        });
        RequestId::Made([prefix, mix(n)])
    }

    /// The client's `X-Request-Id` when the client is a trusted proxy
    /// (`from_trusted`) and the value is sane (see [`RequestId::kept`]).
    pub fn from_client(from_trusted: bool, headers: &http::HeaderMap) -> Option<RequestId> {
        from_trusted.then(|| RequestId::kept(headers)).flatten()
    }

    /// The client's `X-Request-Id` when it is sane: 1 to [`MAX_LEN`]
    /// visible ASCII characters (no spaces, no control bytes). The caller
    /// decides whether the client may set it (a trusted proxy).
    pub fn kept(headers: &http::HeaderMap) -> Option<RequestId> {
        let v = headers.get(FIELD)?;
        let b = v.as_bytes();
        (!b.is_empty() && b.len() <= MAX_LEN && b.iter().all(u8::is_ascii_graphic))
            .then(|| RequestId::Kept(v.clone()))
    }

    /// The id as a field value (a made one is written out).
    pub fn to_header(&self) -> HeaderValue {
        match self {
            RequestId::Kept(v) => v.clone(),
            RequestId::Made(_) => {
                let mut s = String::with_capacity(32);
                self.push_to(&mut s);
                // 32 hex digits: always a valid value.
                HeaderValue::from_maybe_shared(bytes::Bytes::from(s))
                    .unwrap_or_else(|_| HeaderValue::from_static("-"))
            }
        }
    }

    /// Appends the id's text (a kept one is visible ASCII, checked).
    pub fn push_to(&self, out: &mut String) {
        match self {
            RequestId::Kept(v) => out.push_str(v.to_str().unwrap_or("-")),
            RequestId::Made(words) => {
                // Written into a buffer and appended once: a push per
                // digit costs a capacity check each (the log writes one
                // per line).
                let mut text = [0u8; 32];
                let bytes = words.map(u64::to_be_bytes);
                for (pair, b) in text.chunks_exact_mut(2).zip(bytes.as_flattened()) {
                    pair.copy_from_slice(&HEX_PAIRS[usize::from(*b)]);
                }
                out.push_str(std::str::from_utf8(&text).unwrap_or("-"));
            }
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::with_capacity(32);
        self.push_to(&mut s);
        f.write_str(&s)
    }
}

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 0xf]];
        i += 1;
    }
    t
};

/// A thread's first state: a random prefix and starting point.
fn seed() -> (u64, u64) {
    let mut b = [0u8; 16];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).is_err() {
        // No system randomness from ring: the standard library's hash
        // keys (seeded per thread, never the same twice) stand in.
        use std::hash::{BuildHasher, Hasher};
        let h = std::collections::hash_map::RandomState::new().build_hasher();
        let p = h.finish();
        return (p, mix(p ^ std::process::id() as u64));
    }
    let (p, n) = b.split_at(8);
    (
        u64::from_le_bytes(p.try_into().unwrap_or_default()),
        u64::from_le_bytes(n.try_into().unwrap_or_default()),
    )
}

/// SplitMix64's finaliser: a bijection on `u64`, so distinct counters give
/// distinct ids.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_are_32_hex_digits_and_distinct() {
        let a = RequestId::make().to_string();
        let b = RequestId::make().to_string();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        assert_eq!(a[..16], b[..16], "one prefix per thread");
        let h = RequestId::make();
        assert_eq!(h.to_header().to_str().unwrap(), h.to_string());
    }

    #[test]
    fn only_sane_client_ids_are_kept() {
        let with = |v: &[u8]| {
            let mut h = http::HeaderMap::new();
            h.insert(FIELD, HeaderValue::from_bytes(v).unwrap());
            RequestId::kept(&h)
        };
        assert_eq!(
            with(b"lb-42").unwrap(),
            RequestId::Kept(HeaderValue::from_static("lb-42"))
        );
        assert!(with(b"").is_none());
        assert!(with(b"a b").is_none());
        assert!(with(b"\xffx").is_none());
        assert!(with(&[b'a'; MAX_LEN]).is_some());
        assert!(with(&[b'a'; MAX_LEN + 1]).is_none());
        assert!(RequestId::kept(&http::HeaderMap::new()).is_none());
    }
}
