//! Cache keys: which parts of a request name a stored object.
//!
//! A [`KeyTemplate`] (per route, from configuration) turns a request into the
//! key text, e.g. `http|example.com|/a?x=1`, and a 128-bit [`Digest`] of it.
//! The store indexes by digest and keeps the text with the object, comparing it
//! on lookup, so a digest collision can never serve another URL's object.

use std::fmt;

use http::header::{HeaderMap, HeaderName, COOKIE};

/// 128-bit digest of a key text (xxh3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub u128);

impl Digest {
    /// Digest of arbitrary bytes.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(xxhash_rust::xxh3::xxh3_128(bytes))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// How the query string takes part in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryKey {
    /// As sent (default).
    All,
    /// Parameters sorted by name, so `?b=1&a=2` and `?a=2&b=1` share an object.
    Sorted,
    /// Ignored.
    None,
    /// Only these parameters, sorted. A name ending in `*` stands for
    /// every name it begins (see [`query_name_matches`]).
    Only(Vec<String>),
    /// All parameters but these, sorted (e.g. tracking parameters, as
    /// `utm_*`). A name ending in `*` stands for every name it begins.
    Except(Vec<String>),
}

/// Whether a query parameter `name` is named by `pattern`: the same
/// name, or, for a pattern ending in `*`, any name that begins with what
/// precedes the `*` (`utm_*` names `utm_source` and `utm_`). Names are
/// compared as sent (not percent-decoded), case-sensitively.
pub fn query_name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Which request parts make the key. Default: scheme, host, path and the full query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    /// Include the scheme.
    pub scheme: bool,
    /// Include the Host (lowercased, default port removed).
    pub host: bool,
    /// The query string.
    pub query: QueryKey,
    /// Request header values to include.
    pub headers: Vec<HeaderName>,
    /// Cookie values to include, by cookie name.
    pub cookies: Vec<String>,
}

impl Default for KeyTemplate {
    fn default() -> Self {
        KeyTemplate {
            scheme: true,
            host: true,
            query: QueryKey::All,
            headers: Vec::new(),
            cookies: Vec::new(),
        }
    }
}

/// The request parts a key is made from.
#[derive(Debug, Clone, Copy)]
pub struct KeyInput<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The Host (or `:authority`).
    pub host: &'a str,
    /// The path, as sent.
    pub path: &'a str,
    /// The query, without `?`.
    pub query: Option<&'a str>,
    /// The request header fields.
    pub headers: &'a HeaderMap,
}

/// A primary cache key: its text and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// The key text (shown in `Cache-Status` when debugging is on).
    pub text: String,
    /// The digest of `text`.
    pub digest: Digest,
}

impl KeyTemplate {
    /// Builds the primary key of a request.
    pub fn key(&self, input: KeyInput<'_>) -> CacheKey {
        let mut text = String::with_capacity(input.host.len() + input.path.len() + 24);
        if self.scheme {
            text.push_str(input.scheme);
        }
        text.push('|');
        if self.host {
            push_host(&mut text, input.host, input.scheme);
        }
        text.push('|');
        text.push_str(input.path);
        if let Some(q) = input.query {
            self.push_query(&mut text, q);
        }
        for name in &self.headers {
            text.push('|');
            text.push_str(name.as_str());
            text.push('=');
            let values: Vec<&str> = input
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            text.push_str(&values.join(","));
        }
        if !self.cookies.is_empty() {
            let jar: Vec<(&str, &str)> = input
                .headers
                .get_all(COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|s| s.split(';'))
                .filter_map(|c| c.trim().split_once('='))
                .collect();
            for name in &self.cookies {
                text.push_str("|cookie:");
                text.push_str(name);
                text.push('=');
                if let Some((_, v)) = jar.iter().find(|(n, _)| n == name) {
                    text.push_str(v);
                }
            }
        }
        let digest = Digest::of(text.as_bytes());
        CacheKey { text, digest }
    }

    fn push_query(&self, text: &mut String, q: &str) {
        let keep = |name: &str| match &self.query {
            QueryKey::Only(names) => names.iter().any(|n| query_name_matches(n, name)),
            QueryKey::Except(names) => !names.iter().any(|n| query_name_matches(n, name)),
            _ => true,
        };
        match &self.query {
            QueryKey::None => {}
            QueryKey::All => {
                text.push('?');
                text.push_str(q);
            }
            QueryKey::Sorted | QueryKey::Only(_) | QueryKey::Except(_) => {
                let mut params: Vec<&str> = q
                    .split('&')
                    .filter(|p| !p.is_empty())
                    .filter(|p| keep(p.split_once('=').map_or(*p, |(n, _)| n)))
                    .collect();
                params.sort_unstable();
                if !params.is_empty() {
                    text.push('?');
                    text.push_str(&params.join("&"));
                }
            }
        }
    }
}

/// What separates a slice's key from its object's key: a slice of the
/// object keyed `K` is keyed `K slice=SIZE:N` (a space never occurs in a
/// request target, so no request's key looks like a slice's).
pub const SLICE_MARK: &str = " slice=";

/// What follows an object's key text in the key of its partial copy (a
/// stored 206, RFC 9111 §3.3).
pub const PARTIAL_MARK: &str = " partial";

/// What follows an object's key text in the coalescing slot of a
/// forwarded range request (never a stored key).
pub const RANGE_MARK: &str = " range=";

/// The URL parts of a key text, for purges: `scheme|host|target[|extra...]`,
/// with a slice's mark removed. An empty scheme or host means the route's
/// key leaves it out (it matches any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUrl<'a> {
    /// `http`, `https`, or empty.
    pub scheme: &'a str,
    /// The host, lowercased, without the scheme's default port; or empty.
    pub host: &'a str,
    /// Path and query as keyed.
    pub target: &'a str,
}

impl<'a> KeyUrl<'a> {
    /// Splits a key text made by [`KeyTemplate::key`] (or a slice's or a
    /// partial copy's key).
    pub fn parse(text: &'a str) -> Option<KeyUrl<'a>> {
        let text = text.strip_suffix(PARTIAL_MARK).unwrap_or(text);
        let whole = text.find(SLICE_MARK).map_or(text, |at| &text[..at]);
        let mut parts = whole.splitn(4, '|');
        let scheme = parts.next()?;
        let host = parts.next()?;
        let target = parts.next()?;
        // A variant's fill is keyed `KEY#variant`; `#` never occurs in a
        // request target (a fragment is not sent).
        let target = target.split_once('#').map_or(target, |(t, _)| t);
        Some(KeyUrl {
            scheme,
            host,
            target,
        })
    }

    /// True when this key's URL starts with `prefix` (`scheme://host/path...`).
    pub fn starts_with(&self, prefix: &str) -> bool {
        let (scheme, rest) = prefix.split_once("://").unwrap_or(("", prefix));
        if !(self.scheme.is_empty() || scheme.is_empty() || self.scheme == scheme) {
            return false;
        }
        if self.host.is_empty() {
            // Host-less keys: compare the target only.
            let target = rest.find('/').map_or("", |at| &rest[at..]);
            return self.target.starts_with(target);
        }
        match rest.strip_prefix(self.host) {
            Some(after) => self.target.starts_with(after),
            None => self.host.starts_with(rest),
        }
    }

    /// True when this key belongs to `host` (any port unless `host` names one).
    pub fn on_host(&self, host: &str) -> bool {
        self.host == host
            || self
                .host
                .strip_prefix(host)
                .is_some_and(|rest| rest.starts_with(':'))
    }
}

/// A Host as keys hold it: lowercased, without a trailing dot or the
/// scheme's default port.
pub fn normalize_host(host: &str, scheme: &str) -> String {
    let mut s = String::with_capacity(host.len());
    push_host(&mut s, host, scheme);
    s
}

fn push_host(text: &mut String, host: &str, scheme: &str) {
    let host = host.trim_end_matches('.');
    let default_port = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => "",
    };
    let host = match host.strip_suffix(default_port) {
        Some(h) if !default_port.is_empty() => h,
        _ => host,
    };
    let start = text.len();
    text.push_str(host);
    text[start..].make_ascii_lowercase();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_url_parts_prefixes_and_hosts() {
        let k = KeyUrl::parse("http|example.com|/img/a.jpg?x=1|accept=x slice=1048576:3").unwrap();
        assert_eq!(
            k,
            KeyUrl {
                scheme: "http",
                host: "example.com",
                target: "/img/a.jpg?x=1"
            }
        );
        assert!(k.starts_with("http://example.com/img/"));
        assert!(k.starts_with("http://example.com"));
        assert!(k.starts_with("http://exa"));
        assert!(!k.starts_with("https://example.com/img/"));
        assert!(!k.starts_with("http://example.com/video/"));
        assert!(!k.starts_with("http://example.org/"));
        let partial = KeyUrl::parse("http|example.com|/v.mp4 partial").unwrap();
        assert_eq!(partial.target, "/v.mp4");
        let no_scheme = KeyUrl::parse("|example.com|/a").unwrap();
        assert!(no_scheme.starts_with("https://example.com/"));
        let no_host = KeyUrl::parse("http||/a/b").unwrap();
        assert!(no_host.starts_with("http://anything/a/"));
        assert!(!no_host.starts_with("http://anything/b"));
        let port = KeyUrl::parse("http|example.com:8080|/").unwrap();
        assert!(port.on_host("example.com"));
        assert!(port.on_host("example.com:8080"));
        assert!(!port.on_host("example.co"));
        assert_eq!(normalize_host("Example.COM:80", "http"), "example.com");
    }

    fn key(
        t: &KeyTemplate,
        host: &str,
        path: &str,
        query: Option<&str>,
        hdrs: &[(&str, &str)],
    ) -> String {
        let mut h = HeaderMap::new();
        for (k, v) in hdrs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        t.key(KeyInput {
            scheme: "http",
            host,
            path,
            query,
            headers: &h,
        })
        .text
    }

    #[test]
    fn table() {
        let all = KeyTemplate::default();
        let sorted = KeyTemplate {
            query: QueryKey::Sorted,
            ..Default::default()
        };
        let only = KeyTemplate {
            query: QueryKey::Only(vec!["id".into()]),
            ..Default::default()
        };
        let except = KeyTemplate {
            query: QueryKey::Except(vec!["utm_source".into()]),
            ..Default::default()
        };
        let none = KeyTemplate {
            query: QueryKey::None,
            host: false,
            ..Default::default()
        };
        let hdr = KeyTemplate {
            headers: vec![HeaderName::from_static("x-device")],
            cookies: vec!["lang".into()],
            ..Default::default()
        };
        assert_eq!(
            key(&all, "Example.COM:80", "/a", Some("b=1&a=2"), &[]),
            "http|example.com|/a?b=1&a=2"
        );
        assert_eq!(
            key(&sorted, "h", "/a", Some("b=1&a=2"), &[]),
            "http|h|/a?a=2&b=1"
        );
        assert_eq!(
            key(&only, "h", "/a", Some("x=1&id=7"), &[]),
            "http|h|/a?id=7"
        );
        assert_eq!(
            key(&except, "h", "/a", Some("utm_source=x&id=7"), &[]),
            "http|h|/a?id=7"
        );
        assert_eq!(key(&none, "h", "/a", Some("x=1"), &[]), "http||/a");
        let prefix = KeyTemplate {
            query: QueryKey::Except(vec!["utm_*".into(), "fbclid".into()]),
            ..Default::default()
        };
        for q in [
            "id=7&utm_source=a&utm_medium=b",
            "utm_campaign=x&id=7&fbclid=1",
            "id=7&utm_=",
        ] {
            assert_eq!(
                key(&prefix, "h", "/a", Some(q), &[]),
                "http|h|/a?id=7",
                "{q}"
            );
        }
        // Only a trailing `*` is a prefix; a name that merely begins the
        // same is kept.
        assert_eq!(
            key(&prefix, "h", "/a", Some("utm=1&fbclid2=2"), &[]),
            "http|h|/a?fbclid2=2&utm=1"
        );
        let only_prefix = KeyTemplate {
            query: QueryKey::Only(vec!["page*".into()]),
            ..Default::default()
        };
        assert_eq!(
            key(&only_prefix, "h", "/a", Some("x=1&page=2&page_size=9"), &[]),
            "http|h|/a?page=2&page_size=9"
        );
        assert_eq!(
            key(
                &hdr,
                "h",
                "/",
                None,
                &[("x-device", "mobile"), ("cookie", "a=1; lang=fr")]
            ),
            "http|h|/|x-device=mobile|cookie:lang=fr"
        );
        assert_ne!(Digest::of(b"a"), Digest::of(b"b"));
    }
}
