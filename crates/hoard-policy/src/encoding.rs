//! Content codings: which representation a request gets (RFC 9110
//! §12.5.3 `Accept-Encoding`, §8.4 `Content-Encoding`), and which responses
//! are worth compressing. Pure: no I/O, no clock.
//!
//! Negotiation: each coding the request names gets its q-value (default
//! 1, `q=0` "not acceptable"); a coding it does not name gets the `*`
//! entry's q, else 0, except `identity`, which is acceptable unless
//! `identity;q=0`, or `*;q=0` without an `identity` entry, excludes it
//! (§12.5.3); unnamed, it ranks below every coding the request names
//! (`gzip;q=0.5` gets gzip, as nginx does). The best q among the codings available wins, ties broken by
//! the configured preference order. A request without `Accept-Encoding`
//! gets identity, as browsers and nginx expect (the RFC would allow any
//! coding); an empty field value allows only identity.

use http::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, VARY};

/// A content coding hoard can produce or decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coding {
    /// No coding.
    Identity,
    /// Brotli (RFC 7932).
    Br,
    /// Zstandard (RFC 8878).
    Zstd,
    /// gzip (RFC 1952).
    Gzip,
}

impl Coding {
    /// The token in `Content-Encoding` and `Accept-Encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The coding a token names (`x-gzip` is gzip, §8.4.1.3), if known.
    pub fn parse(token: &str) -> Option<Coding> {
        let t = token.trim();
        [
            ("identity", Coding::Identity),
            ("br", Coding::Br),
            ("zstd", Coding::Zstd),
            ("gzip", Coding::Gzip),
            ("x-gzip", Coding::Gzip),
        ]
        .into_iter()
        .find(|(n, _)| t.eq_ignore_ascii_case(n))
        .map(|(_, c)| c)
    }
}

/// A request's `Accept-Encoding`, parsed into the q-values of the codings
/// hoard knows and of `*` (small and `Copy`: it rides in every request's
/// context; tokens hoard does not know do not matter to its choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    /// The field was present.
    present: bool,
    /// q in thousandths per coding (`Coding as usize`), [`UNNAMED`] when
    /// the request does not name it.
    named: [u16; 4],
    /// The `*` entry's q, or [`UNNAMED`].
    star: u16,
}

/// Not named in the field.
const UNNAMED: u16 = u16::MAX;

impl Default for Accept {
    fn default() -> Accept {
        Accept {
            present: false,
            named: [UNNAMED; 4],
            star: UNNAMED,
        }
    }
}

impl Accept {
    /// Parses `Accept-Encoding` from request fields (all lines).
    pub fn from_request(headers: &HeaderMap) -> Accept {
        let mut a = Accept::default();
        if !crate::headers::has_any(headers, &[ACCEPT_ENCODING]) {
            return a;
        }
        for v in headers.get_all(ACCEPT_ENCODING) {
            a.present = true;
            let Ok(s) = v.to_str() else { continue };
            for member in s.split(',') {
                let mut parts = member.split(';');
                let token = parts.next().unwrap_or("").trim();
                if token.is_empty() {
                    continue;
                }
                let q = parts
                    .filter_map(|p| p.split_once('='))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                    .map_or(Some(1000), |(_, v)| qvalue(v.trim()));
                // A malformed weight makes the member meaningless: skipped.
                let Some(q) = q else { continue };
                let slot = if token == "*" {
                    &mut a.star
                } else if let Some(c) = Coding::parse(token) {
                    &mut a.named[c as usize]
                } else {
                    continue;
                };
                *slot = if *slot == UNNAMED { q } else { (*slot).max(q) };
            }
        }
        a
    }

    /// The q-value (thousandths) of `c` for this request.
    pub fn q(&self, c: Coding) -> u16 {
        if !self.present {
            // No preference stated: identity only (see the module docs).
            return if c == Coding::Identity { 1000 } else { 0 };
        }
        let named = self.named[c as usize];
        if named != UNNAMED {
            return named;
        }
        match (c, self.star) {
            (Coding::Identity, 0) => 0,
            // Acceptable, but after any coding the request names.
            (Coding::Identity, _) => 1,
            (_, UNNAMED) => 0,
            (_, q) => q,
        }
    }

    /// The field again, for an exchange passed to the origin as the
    /// client's (the codings hoard knows and `*`, with their q-values);
    /// `None` when the request had none.
    pub fn to_field(&self) -> Option<String> {
        if !self.present {
            return None;
        }
        let all = [Coding::Identity, Coding::Br, Coding::Zstd, Coding::Gzip];
        let mut out: Vec<String> = all
            .iter()
            .filter(|c| self.named[**c as usize] != UNNAMED)
            .map(|c| (c.as_str(), self.named[*c as usize]))
            .chain((self.star != UNNAMED).then_some(("*", self.star)))
            .map(|(t, q)| match q {
                1000 => t.to_string(),
                0 => format!("{t};q=0"),
                q => format!("{t};q={}", format!("0.{q:03}").trim_end_matches('0')),
            })
            .collect();
        if out.is_empty() {
            out.push(String::new());
        }
        Some(out.join(", "))
    }

    /// True when the request allows `c`.
    pub fn accepts(&self, c: Coding) -> bool {
        self.q(c) > 0
    }

    /// The best of `available` for this request: highest q, ties broken by
    /// the order of `preference` (codings not in it come last, identity
    /// before them); `None` when none is acceptable.
    pub fn choose(&self, available: &[Coding], preference: &[Coding]) -> Option<Coding> {
        let rank = |c: Coding| {
            preference
                .iter()
                .position(|p| *p == c)
                .unwrap_or(preference.len() + usize::from(c != Coding::Identity))
        };
        available
            .iter()
            .copied()
            .filter(|c| self.accepts(*c))
            .max_by(|a, b| {
                self.q(*a)
                    .cmp(&self.q(*b))
                    .then_with(|| rank(*b).cmp(&rank(*a)))
            })
    }
}

/// A qvalue (§12.4.2): `0` to `1` with at most three decimals, in
/// thousandths; `None` when malformed.
fn qvalue(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scaled = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(scaled),
        "1" if scaled == 0 => Some(1000),
        _ => None,
    }
}

/// The coding a response's body is in: `Some(Identity)` without
/// `Content-Encoding`, `Some(c)` for one known coding, `None` for anything
/// else (an unknown coding, or several stacked).
pub fn content_coding(headers: &HeaderMap) -> Option<Coding> {
    let mut codings = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("identity"));
    match (codings.next(), codings.next()) {
        (None, _) => Some(Coding::Identity),
        (Some(one), None) => Coding::parse(one),
        _ => None,
    }
}

/// True when a stored response may be served to a request whose
/// `Accept-Encoding` was `field` (the client's own, before fills asked
/// for identity), as far as its coding goes. Only a response in a coding
/// hoard cannot decode (unknown, or stacked) that varies on
/// `Accept-Encoding` ([`coding_varies`]) is refused, to a request that does
/// not accept each of its codings ([`codings_accepted`]). Without `Vary`
/// the origin says its answer does not depend on the field (RFC 9111
/// §4.1): it is served to every request, as sent.
pub fn served_as_stored(response: &HeaderMap, field: Option<&HeaderValue>) -> bool {
    !coding_varies(response) || codings_accepted(response, field)
}

/// The part of [`served_as_stored`] a response decides alone, worked out
/// once for a stored object: its coding is one hoard cannot decode
/// (unknown, or stacked) and it varies on `Accept-Encoding`.
pub fn coding_varies(response: &HeaderMap) -> bool {
    if !crate::headers::has_any(response, &[CONTENT_ENCODING]) || content_coding(response).is_some()
    {
        return false;
    }
    response
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("accept-encoding"))
}

/// The request's part of [`served_as_stored`]: `field` accepts each of
/// the response's codings (RFC 9110 §12.5.3: named with q > 0, or by a
/// `*` with q > 0; no field accepts none).
pub fn codings_accepted(response: &HeaderMap, field: Option<&HeaderValue>) -> bool {
    let field = field.and_then(|f| f.to_str().ok());
    response
        .get_all(CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("identity"))
        .all(|t| field.is_some_and(|f| token_q(f, t) > 0))
}

/// The q-value (thousandths) a field gives `token`: its own entry, else
/// the `*` entry's, else 0.
fn token_q(field: &str, token: &str) -> u16 {
    let (mut named, mut star) = (None, None);
    for member in field.split(',') {
        let mut parts = member.split(';');
        let t = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1000), |(_, v)| qvalue(v.trim()));
        let Some(q) = q else { continue };
        if t.eq_ignore_ascii_case(token) {
            named = Some(named.map_or(q, |n: u16| n.max(q)));
        } else if t == "*" {
            star = Some(star.map_or(q, |s: u16| s.max(q)));
        }
    }
    named.or(star).unwrap_or(0)
}

/// True when the response's media type is one of `types` (`text/*`
/// matches every text type; parameters are ignored).
pub fn compressible(headers: &HeaderMap, types: &[String]) -> bool {
    let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    types.iter().any(|t| match t.strip_suffix("/*") {
        Some(prefix) => media.split_once('/').is_some_and(|(top, _)| top == prefix),
        None => media == *t,
    })
}

/// The default compressible media types.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/ld+json",
    "application/manifest+json",
    "application/javascript",
    "application/x-javascript",
    "application/ecmascript",
    "application/xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/xhtml+xml",
    "application/wasm",
    "application/vnd.api+json",
    "application/graphql-response+json",
    "image/svg+xml",
    "font/ttf",
    "font/otf",
];

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn accept(v: &str) -> Accept {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        Accept::from_request(&h)
    }

    const ALL: [Coding; 4] = [Coding::Identity, Coding::Br, Coding::Zstd, Coding::Gzip];
    const PREF: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    #[test]
    fn browsers_get_their_best_coding() {
        assert_eq!(
            accept("gzip, deflate, br, zstd").choose(&ALL, &PREF),
            Some(Coding::Br)
        );
        assert_eq!(
            accept("gzip, deflate").choose(&ALL, &PREF),
            Some(Coding::Gzip)
        );
        assert_eq!(
            accept("gzip;q=1.0, br;q=0.5, zstd;q=0.9").choose(&ALL, &PREF),
            Some(Coding::Gzip)
        );
        assert_eq!(accept("ZSTD").choose(&ALL, &PREF), Some(Coding::Zstd));
        assert_eq!(accept("x-gzip").choose(&ALL, &PREF), Some(Coding::Gzip));
    }

    #[test]
    fn identity_rules_of_rfc_9110() {
        // No field: identity (what browsers and nginx expect).
        assert_eq!(
            Accept::from_request(&HeaderMap::new()).choose(&ALL, &PREF),
            Some(Coding::Identity)
        );
        // An empty value: only identity.
        assert_eq!(accept("").choose(&ALL, &PREF), Some(Coding::Identity));
        // Nothing named but identity stays acceptable.
        assert_eq!(
            accept("deflate").choose(&ALL, &PREF),
            Some(Coding::Identity)
        );
        // identity;q=0 excludes it; *;q=0 too unless identity is named.
        assert_eq!(
            accept("identity;q=0").choose(&[Coding::Identity], &PREF),
            None
        );
        assert_eq!(accept("*;q=0").choose(&[Coding::Identity], &PREF), None);
        assert_eq!(
            accept("*;q=0, identity").choose(&[Coding::Identity], &PREF),
            Some(Coding::Identity)
        );
        // `*` stands for every coding not named.
        assert_eq!(accept("*").choose(&ALL, &PREF), Some(Coding::Br));
        assert_eq!(accept("*, br;q=0").choose(&ALL, &PREF), Some(Coding::Zstd));
        // q=0 means not acceptable, whatever the rest.
        assert_eq!(
            accept("br;q=0, gzip;q=0").choose(&ALL, &PREF),
            Some(Coding::Identity)
        );
        // Identity wins a tie only after the preferred codings.
        assert_eq!(
            accept("identity, gzip").choose(&ALL, &PREF),
            Some(Coding::Gzip)
        );
    }

    #[test]
    fn the_field_is_rebuilt_for_passes() {
        assert_eq!(accept("gzip, deflate, br").to_field().unwrap(), "br, gzip");
        assert_eq!(
            accept("gzip;q=0.5, *;q=0").to_field().unwrap(),
            "gzip;q=0.5, *;q=0"
        );
        assert_eq!(Accept::from_request(&HeaderMap::new()).to_field(), None);
        assert_eq!(accept("").to_field().unwrap(), "");
    }

    #[test]
    fn malformed_weights_are_skipped() {
        assert_eq!(
            accept("br;q=2, gzip").choose(&ALL, &PREF),
            Some(Coding::Gzip)
        );
        assert_eq!(
            accept("br;q=0.0001, gzip;q=0.5").choose(&ALL, &PREF),
            Some(Coding::Gzip)
        );
        assert_eq!(qvalue("0.5"), Some(500));
        assert_eq!(qvalue("1.000"), Some(1000));
        assert_eq!(qvalue("1.1"), None);
        assert_eq!(qvalue("0."), Some(0));
    }

    #[test]
    fn unknown_codings_that_vary_are_served_only_where_accepted() {
        let resp = |ce: &str, vary: Option<&str>| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_ENCODING, HeaderValue::from_str(ce).unwrap());
            if let Some(v) = vary {
                h.insert(VARY, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let ok = |r: &HeaderMap, f: Option<&str>| {
            served_as_stored(r, f.map(|f| HeaderValue::from_str(f).unwrap()).as_ref())
        };
        let v = resp("x-custom", Some("Origin, accept-encoding"));
        for f in [
            "x-custom",
            "X-CUSTOM;q=0.5, gzip",
            "*",
            "gzip, *;q=0.1",
            "x-custom;q=1.0",
        ] {
            assert!(ok(&v, Some(f)), "{f}");
        }
        for f in [
            None,
            Some("gzip"),
            Some("x-custom;q=0, *"),
            Some("*;q=0"),
            Some(""),
        ] {
            assert!(!ok(&v, f), "{f:?}");
        }
        // Without Vary on the field, or a coding hoard knows: always.
        assert!(ok(&resp("x-custom", None), Some("gzip")));
        assert!(ok(&resp("x-custom", Some("Origin")), None));
        assert!(ok(&resp("gzip", Some("Accept-Encoding")), None));
        // Stacked: each must be accepted.
        let stacked = resp("gzip, x-custom", Some("Accept-Encoding"));
        assert!(ok(&stacked, Some("gzip, x-custom")));
        assert!(!ok(&stacked, Some("x-custom")));
        // The response's own part, kept with a stored object.
        assert!(coding_varies(&v) && coding_varies(&stacked));
        assert!(!coding_varies(&resp("x-custom", None)));
        assert!(!coding_varies(&resp("gzip", Some("Accept-Encoding"))));
        assert!(!coding_varies(&HeaderMap::new()));
    }

    #[test]
    fn what_a_body_is_coded_in_and_what_is_worth_compressing() {
        let mut h = HeaderMap::new();
        assert_eq!(content_coding(&h), Some(Coding::Identity));
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(content_coding(&h), Some(Coding::Gzip));
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip, br"));
        assert_eq!(content_coding(&h), None);
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("compress"));
        assert_eq!(content_coding(&h), None);
        let types: Vec<String> = DEFAULT_TYPES.iter().map(|s| s.to_string()).collect();
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        assert!(compressible(&h, &types));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("Application/JSON"));
        assert!(compressible(&h, &types));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("image/png"));
        assert!(!compressible(&h, &types));
        assert!(!compressible(&HeaderMap::new(), &types));
    }
}
