//! Parsing of `Cache-Control` and `CDN-Cache-Control` (RFC 9111 §5.2, RFC 9213).
//!
//! Parsing is tolerant, as RFC 9111 §4.2.1 and §5.2 ask of recipients:
//! directive names are case-insensitive, arguments may be tokens or quoted
//! strings, unknown directives are ignored, and when a directive appears more
//! than once the first occurrence is used. A `max-age`/`s-maxage` whose argument
//! is not a valid delta-seconds is kept as [`Delta::Invalid`], which freshness
//! code treats as "already stale" (the conservative reading of §4.2.1).

use http::header::{HeaderMap, HeaderName};

/// Largest delta-seconds value; larger values are clamped to it (RFC 9111 §1.2.2).
pub const DELTA_SECONDS_MAX: u64 = 2_147_483_648;

/// A delta-seconds argument of a directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    /// A valid number of seconds (clamped to [`DELTA_SECONDS_MAX`]).
    Secs(u64),
    /// The argument was missing or not a non-negative integer.
    Invalid,
}

impl Delta {
    /// Seconds, with an invalid argument read as zero.
    pub fn secs_or_zero(self) -> u64 {
        match self {
            Delta::Secs(s) => s,
            Delta::Invalid => 0,
        }
    }
}

/// The cache directives hoard understands, from requests and responses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age` (§5.2.1.1 request, §5.2.2.1 response).
    pub max_age: Option<Delta>,
    /// `s-maxage` (§5.2.2.10); shared caches only.
    pub s_maxage: Option<Delta>,
    /// `max-stale` (§5.2.1.2): `Some(None)` accepts any staleness.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh` (§5.2.1.3).
    pub min_fresh: Option<u64>,
    /// `no-cache` (§5.2.1.4, §5.2.2.4). A qualified form is treated as unqualified.
    pub no_cache: bool,
    /// `no-store` (§5.2.1.5, §5.2.2.5).
    pub no_store: bool,
    /// `only-if-cached` (§5.2.1.7).
    pub only_if_cached: bool,
    /// `must-revalidate` (§5.2.2.2).
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8).
    pub proxy_revalidate: bool,
    /// `must-understand` (§5.2.2.3).
    pub must_understand: bool,
    /// `private` (§5.2.2.7). A qualified form is treated as unqualified.
    pub private: bool,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `no-transform` (§5.2.2.6).
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate` (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error` (RFC 5861 §4).
    pub stale_if_error: Option<u64>,
}

impl CacheControl {
    /// Parses every line of `name` in `headers`. Returns `None` when the field is absent.
    pub fn from_headers(headers: &HeaderMap, name: &HeaderName) -> Option<CacheControl> {
        let mut values = headers.get_all(name).iter().peekable();
        values.peek()?;
        let mut cc = CacheControl::default();
        for v in values {
            // A field value that is not visible ASCII is ignored as a whole.
            if let Ok(s) = v.to_str() {
                cc.parse_into(s);
            }
        }
        Some(cc)
    }

    /// Parses a field defined as a Structured Field Dictionary (RFC 9213 §2.1,
    /// `CDN-Cache-Control`). `None` when absent or invalid: an invalid field is
    /// ignored as a whole; a directive whose value has the wrong type is ignored.
    pub fn from_structured(headers: &HeaderMap, name: &HeaderName) -> Option<CacheControl> {
        let mut lines = headers.get_all(name).iter().peekable();
        lines.peek()?;
        let mut joined = String::new();
        for v in lines {
            if !joined.is_empty() {
                joined.push_str(", ");
            }
            joined.push_str(v.to_str().ok()?);
        }
        let dict = crate::structured::parse_dictionary(&joined)?;
        let mut cc = CacheControl::default();
        for (key, item) in dict {
            use crate::structured::Item;
            let secs = match item {
                Item::Integer(n) if n >= 0 => Some((n as u64).min(DELTA_SECONDS_MAX)),
                _ => None,
            };
            let flag = !matches!(item, Item::Boolean(false));
            match key.as_str() {
                "max-age" => cc.max_age = secs.map(Delta::Secs),
                "s-maxage" => cc.s_maxage = secs.map(Delta::Secs),
                "stale-while-revalidate" => cc.stale_while_revalidate = secs,
                "stale-if-error" => cc.stale_if_error = secs,
                "no-cache" => cc.no_cache = flag,
                "no-store" => cc.no_store = flag,
                "must-revalidate" => cc.must_revalidate = flag,
                "proxy-revalidate" => cc.proxy_revalidate = flag,
                "must-understand" => cc.must_understand = flag,
                "private" => cc.private = flag,
                "public" => cc.public = flag,
                "no-transform" => cc.no_transform = flag,
                "immutable" => cc.immutable = flag,
                _ => {}
            }
        }
        Some(cc)
    }

    /// Parses one field value (a comma-separated directive list).
    pub fn parse(value: &str) -> CacheControl {
        let mut cc = CacheControl::default();
        cc.parse_into(value);
        cc
    }

    fn parse_into(&mut self, value: &str) {
        for (name, arg) in directives(value) {
            self.apply(&name, arg.as_deref());
        }
    }

    /// True when the response carries any directive that sets an explicit lifetime.
    pub fn has_explicit_lifetime(&self) -> bool {
        self.max_age.is_some() || self.s_maxage.is_some()
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        // First occurrence wins (RFC 9111 §4.2.1).
        macro_rules! first {
            ($field:expr, $v:expr) => {
                if $field.is_none() {
                    $field = Some($v);
                }
            };
        }
        match name {
            "max-age" => first!(self.max_age, parse_delta(arg)),
            "s-maxage" => first!(self.s_maxage, parse_delta(arg)),
            "max-stale" => first!(
                self.max_stale,
                // An invalid argument is read as "no staleness accepted".
                arg.map(|a| delta_secs(a).unwrap_or(0))
            ),
            "min-fresh" => first!(self.min_fresh, arg.and_then(delta_secs).unwrap_or(0)),
            "stale-while-revalidate" => {
                if let Some(s) = arg.and_then(delta_secs) {
                    first!(self.stale_while_revalidate, s)
                }
            }
            "stale-if-error" => {
                if let Some(s) = arg.and_then(delta_secs) {
                    first!(self.stale_if_error, s)
                }
            }
            "no-cache" => self.no_cache = true,
            "no-store" => self.no_store = true,
            "only-if-cached" => self.only_if_cached = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "must-understand" => self.must_understand = true,
            "private" => self.private = true,
            "public" => self.public = true,
            "no-transform" => self.no_transform = true,
            "immutable" => self.immutable = true,
            _ => {}
        }
    }
}

fn parse_delta(arg: Option<&str>) -> Delta {
    match arg.and_then(delta_secs) {
        Some(s) => Delta::Secs(s),
        None => Delta::Invalid,
    }
}

/// Parses delta-seconds (RFC 9111 §1.2.2): 1*DIGIT, clamped to 2^31.
pub fn delta_secs(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        s.parse::<u64>()
            .map_or(DELTA_SECONDS_MAX, |v| v.min(DELTA_SECONDS_MAX)),
    )
}

/// Splits a directive list into lowercase names and unquoted arguments.
fn directives(value: &str) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    split_commas(value).into_iter().filter_map(|item| {
        let item = item.trim();
        if item.is_empty() {
            return None;
        }
        let (name, arg) = match item.find('=') {
            Some(i) => (item[..i].trim(), Some(item[i + 1..].trim())),
            None => (item, None),
        };
        if name.is_empty() {
            return None;
        }
        let arg = arg.map(|a| {
            if a.len() >= 2 && a.starts_with('"') && a.ends_with('"') {
                unescape(&a[1..a.len() - 1])
            } else {
                a.to_string()
            }
        });
        Some((name.to_ascii_lowercase(), arg))
    })
}

/// Splits on commas that are not inside a quoted string.
pub fn split_commas(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, b) in value.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&value[start..]);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, CacheControl)] = &[
            (
                "max-age=60",
                CacheControl {
                    max_age: Some(Delta::Secs(60)),
                    ..Default::default()
                },
            ),
            (
                "MAX-AGE=60",
                CacheControl {
                    max_age: Some(Delta::Secs(60)),
                    ..Default::default()
                },
            ),
            (
                "max-age=\"60\"",
                CacheControl {
                    max_age: Some(Delta::Secs(60)),
                    ..Default::default()
                },
            ),
            (
                "max-age=60, max-age=10",
                CacheControl {
                    max_age: Some(Delta::Secs(60)),
                    ..Default::default()
                },
            ),
            (
                "max-age=-1",
                CacheControl {
                    max_age: Some(Delta::Invalid),
                    ..Default::default()
                },
            ),
            (
                "max-age=abc",
                CacheControl {
                    max_age: Some(Delta::Invalid),
                    ..Default::default()
                },
            ),
            (
                "max-age",
                CacheControl {
                    max_age: Some(Delta::Invalid),
                    ..Default::default()
                },
            ),
            (
                "max-age=99999999999999999999",
                CacheControl {
                    max_age: Some(Delta::Secs(DELTA_SECONDS_MAX)),
                    ..Default::default()
                },
            ),
            (
                "s-maxage=5, public",
                CacheControl {
                    s_maxage: Some(Delta::Secs(5)),
                    public: true,
                    ..Default::default()
                },
            ),
            (
                "no-store",
                CacheControl {
                    no_store: true,
                    ..Default::default()
                },
            ),
            (
                "private=\"set-cookie, x\", max-age=3",
                CacheControl {
                    private: true,
                    max_age: Some(Delta::Secs(3)),
                    ..Default::default()
                },
            ),
            (
                "no-cache=\"Set-Cookie\"",
                CacheControl {
                    no_cache: true,
                    ..Default::default()
                },
            ),
            (
                "max-stale",
                CacheControl {
                    max_stale: Some(None),
                    ..Default::default()
                },
            ),
            (
                "max-stale=5",
                CacheControl {
                    max_stale: Some(Some(5)),
                    ..Default::default()
                },
            ),
            (
                "min-fresh=5",
                CacheControl {
                    min_fresh: Some(5),
                    ..Default::default()
                },
            ),
            (
                "stale-while-revalidate=30, stale-if-error=60",
                CacheControl {
                    stale_while_revalidate: Some(30),
                    stale_if_error: Some(60),
                    ..Default::default()
                },
            ),
            (
                "foo=\"a,b\", must-revalidate",
                CacheControl {
                    must_revalidate: true,
                    ..Default::default()
                },
            ),
            (
                " , ,only-if-cached",
                CacheControl {
                    only_if_cached: true,
                    ..Default::default()
                },
            ),
        ];
        for (input, want) in cases {
            assert_eq!(&CacheControl::parse(input), want, "input: {input}");
        }
    }

    #[test]
    fn several_lines_are_one_list() {
        let mut h = HeaderMap::new();
        h.append("cache-control", "max-age=10".parse().unwrap());
        h.append("cache-control", "no-cache, max-age=20".parse().unwrap());
        let cc = CacheControl::from_headers(&h, &http::header::CACHE_CONTROL).unwrap();
        assert_eq!(cc.max_age, Some(Delta::Secs(10)));
        assert!(cc.no_cache);
        assert!(CacheControl::from_headers(&h, &http::header::EXPIRES).is_none());
    }
}
