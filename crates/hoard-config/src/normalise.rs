//! A route's request normalisation, which the cache key, `Vary` and the
//! origin all see (unlike `key.query_exclude`, which changes the key
//! only): `rewrite_query` (Varnish's `std.querysort` and the regsuball
//! that strip tracking parameters) and `normalise` (a header mapped to the
//! best of a few values: Varnish's Accept-Language normalisation).
//!
//! ```toml
//! rewrite_query = { sort = true, remove = ["utm_*", "gclid"] }
//! normalise = { "accept-language" = ["en", "de", "fr"] }
//! ```
//!
//! Pure: the pipeline applies them to the request before its key.

use http::header::HeaderName;
use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::Resolver;

/// `rewrite_query`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryRewrite {
    /// Parameters in name order (stable: one name's values keep theirs).
    pub sort: bool,
    /// Names removed; `*` matches any run of characters.
    pub remove: Vec<NamePattern>,
}

/// A parameter name pattern, in the form that matches it cheapest (the
/// rewrite runs on every request of its route).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamePattern {
    /// `gclid`.
    Exact(String),
    /// `utm_*`.
    Prefix(String),
    /// Anything else with `*`.
    Glob(String),
}

impl NamePattern {
    /// The pattern as written.
    pub fn parse(p: &str) -> NamePattern {
        match p.find('*') {
            None => NamePattern::Exact(p.to_owned()),
            Some(at) if at == p.len() - 1 => NamePattern::Prefix(p[..at].to_owned()),
            Some(_) => NamePattern::Glob(p.to_owned()),
        }
    }

    fn matches(&self, name: &[u8]) -> bool {
        match self {
            NamePattern::Exact(e) => e.as_bytes() == name,
            NamePattern::Prefix(p) => name.starts_with(p.as_bytes()),
            NamePattern::Glob(g) => {
                std::str::from_utf8(name).is_ok_and(|n| crate::rules::glob(g, n))
            }
        }
    }
}

impl QueryRewrite {
    /// The query rewritten, or `None` when it stays as it is. An empty
    /// result is `Some("")` (the `?` goes too).
    pub fn apply(&self, query: &str) -> Option<String> {
        let mut out = String::new();
        self.apply_into(query, &mut out).then_some(out)
    }

    /// As [`QueryRewrite::apply`], appending the new query to `out`; false
    /// (and nothing appended) when it stays as it is.
    ///
    /// One pass over the bytes finds each parameter and its name; up to
    /// 16 parameters are kept as offsets on the stack (a request's usual
    /// few; more, or a query over 64 KiB, take a slower path with a
    /// vector). Whether they are in order is seen on the way, so an
    /// already sorted query is not sorted again.
    pub fn apply_into(&self, query: &str, out: &mut String) -> bool {
        let bytes = query.as_bytes();
        if bytes.len() > usize::from(u16::MAX) {
            return self.apply_many(query, out);
        }
        let mut few = [Param::default(); 16];
        let mut n = 0;
        let mut removed = false;
        let mut unsorted = false;
        // The last parameter kept, for `unsorted`.
        let mut last: &[u8] = &[];
        // One parameter, `start..end` with its name to `eq`: false when
        // there are more than a request's usual few.
        let mut param = |start: usize, eq: usize, end: usize| -> bool {
            if end == start {
                return true;
            }
            let name = &bytes[start..eq.min(end)];
            if self.remove.iter().any(|pat| pat.matches(name)) {
                removed = true;
                return true;
            }
            if n == few.len() {
                return false;
            }
            if self.sort {
                unsorted |= less(name, last);
                last = name;
            }
            few[n] = Param {
                start: start as u16,
                eq: eq.min(end) as u16,
                end: end as u16,
            };
            n += 1;
            true
        };
        let mut start = 0usize;
        let mut eq = usize::MAX;
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'=' {
                eq = eq.min(i);
            } else if b == b'&' {
                if !param(start, eq, i) {
                    return self.apply_many(query, out);
                }
                start = i + 1;
                eq = usize::MAX;
            }
        }
        if !param(start, eq, bytes.len()) {
            return self.apply_many(query, out);
        }
        if !(removed || unsorted) {
            return false;
        }
        let params = &mut few[..n];
        if unsorted {
            // Insertion sort: stable (one name's values keep their order)
            // and the cheapest for a query's few parameters.
            for i in 1..params.len() {
                let mut j = i;
                while j > 0 && less(params[j].name(bytes), params[j - 1].name(bytes)) {
                    params.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            out.push_str(&query[usize::from(p.start)..usize::from(p.end)]);
        }
        true
    }

    /// [`QueryRewrite::apply_into`] for a query of many parameters, or a
    /// long one.
    fn apply_many(&self, query: &str, out: &mut String) -> bool {
        let mut removed = false;
        let mut params: Vec<&str> = Vec::new();
        for p in query.split('&').filter(|p| !p.is_empty()) {
            let name = p.split_once('=').map_or(p, |(n, _)| n);
            if self.remove.iter().any(|pat| pat.matches(name.as_bytes())) {
                removed = true;
            } else {
                params.push(p);
            }
        }
        let name = |p: &str| p.split_once('=').map_or(p, |(n, _)| n).to_owned();
        let unsorted = self.sort && params.windows(2).any(|w| name(w[1]) < name(w[0]));
        if !(removed || unsorted) {
            return false;
        }
        if unsorted {
            params.sort_by_key(|p| name(p));
        }
        out.push_str(&params.join("&"));
        true
    }
}

/// `a < b` as bytes, inline (names are a few bytes; a call to compare
/// them would cost more than the comparison).
fn less(a: &[u8], b: &[u8]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x < y;
        }
    }
    a.len() < b.len()
}

/// A parameter as offsets into its query: `start..end` whole, `start..eq`
/// its name.
#[derive(Debug, Clone, Copy, Default)]
struct Param {
    start: u16,
    eq: u16,
    end: u16,
}

impl Param {
    fn name<'q>(&self, query: &'q [u8]) -> &'q [u8] {
        &query[usize::from(self.start)..usize::from(self.eq)]
    }
}

/// One `normalise` entry: a header mapped to the best of `values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalise {
    /// The header.
    pub header: HeaderName,
    /// The values it may take; the first when none matches.
    pub values: Vec<String>,
}

impl Normalise {
    /// The value for a request whose header says `sent` (`None`: absent):
    /// RFC 4647 §3.4 lookup over the ranges by quality (RFC 9110 §12.4.2;
    /// `q=0` excluded), each range tried whole and then shortened at its
    /// last `-`; `*` takes the first value; the first value when nothing
    /// matches.
    pub fn pick(&self, sent: Option<&str>) -> &str {
        let first = self.values.first().map_or("", String::as_str);
        let Some(sent) = sent else { return first };
        let mut ranges: Vec<(&str, u16)> = sent
            .split(',')
            .filter_map(|part| {
                let mut it = part.split(';');
                let range = it.next()?.trim();
                let q = it
                    .filter_map(|p| p.trim().strip_prefix("q="))
                    .next()
                    .map_or(1000, qvalue);
                (!range.is_empty() && q > 0).then_some((range, q))
            })
            .collect();
        ranges.sort_by_key(|r| std::cmp::Reverse(r.1));
        for (range, _) in ranges {
            if range == "*" {
                return first;
            }
            let mut tag = range;
            loop {
                if let Some(v) = self.values.iter().find(|v| v.eq_ignore_ascii_case(tag)) {
                    return v;
                }
                match tag.rfind('-') {
                    Some(at) => tag = &tag[..at],
                    None => break,
                }
            }
        }
        first
    }
}

/// A quality value in thousandths (RFC 9110 §12.4.2); 0 when malformed.
fn qvalue(s: &str) -> u16 {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    match int {
        "1" => 1000,
        "0" => {
            let digits: String = frac.chars().take(3).collect();
            if digits.is_empty() {
                return 0;
            }
            let n: u16 = digits.parse().unwrap_or(0);
            n * 10u16.pow(3 - digits.len() as u32)
        }
        _ => 0,
    }
}

/// `rewrite_query` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueryRewrite {
    pub sort: Option<bool>,
    #[serde(default)]
    pub remove: Vec<String>,
}

impl Resolver<'_> {
    /// `at.rewrite_query`, checked.
    pub(super) fn rewrite_query(
        &self,
        at: &str,
        raw: Spanned<RawQueryRewrite>,
    ) -> Result<QueryRewrite, ConfigError> {
        let span = raw.span();
        let r = raw.into_inner();
        if !r.sort.unwrap_or(false) && r.remove.is_empty() {
            return Err(self.err(
                Some(span),
                format!("{at}.rewrite_query"),
                "says nothing to do (sort = true, or remove = [...])".into(),
            ));
        }
        if let Some(bad) = r
            .remove
            .iter()
            .find(|n| n.is_empty() || n.contains(['&', '=', ' ']))
        {
            return Err(self.err(
                Some(span),
                format!("{at}.rewrite_query.remove"),
                format!("{bad:?} is not a parameter name (a `*` pattern at the most)"),
            ));
        }
        Ok(QueryRewrite {
            sort: r.sort.unwrap_or(false),
            remove: r.remove.iter().map(|p| NamePattern::parse(p)).collect(),
        })
    }

    /// `at.normalise`, checked.
    pub(super) fn normalise(
        &self,
        at: &str,
        raw: Spanned<std::collections::BTreeMap<String, Vec<String>>>,
    ) -> Result<Vec<Normalise>, ConfigError> {
        let span = raw.span();
        let mut out = Vec::new();
        for (name, values) in raw.into_inner() {
            let key = format!("{at}.normalise.{name}");
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                self.err(
                    Some(span.clone()),
                    key.clone(),
                    format!("{name:?} is not a header name"),
                )
            })?;
            if values.is_empty() {
                return Err(self.err(
                    Some(span.clone()),
                    key,
                    "lists no value (the first is the default)".into(),
                ));
            }
            if let Some(bad) = values
                .iter()
                .find(|v| http::HeaderValue::from_str(v).is_err() || v.is_empty())
            {
                return Err(self.err(
                    Some(span.clone()),
                    key,
                    format!("{bad:?} is not a header value"),
                ));
            }
            out.push(Normalise { header, values });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_lose_tracking_and_sort() {
        let r = QueryRewrite {
            sort: true,
            remove: vec![NamePattern::parse("utm_*"), NamePattern::parse("gclid")],
        };
        assert_eq!(
            r.apply("b=2&a=1&utm_source=news&gclid=XYZ").as_deref(),
            Some("a=1&b=2")
        );
        assert_eq!(r.apply("a=1&b=2"), None, "already so");
        assert_eq!(
            r.apply("a&b=x=y&&c="),
            None,
            "bare names, `=` in values, empty pairs"
        );
        assert_eq!(r.apply("c&a=x=y&&b").as_deref(), Some("a=x=y&b&c"));
        assert_eq!(
            r.apply("gclid&utm_=1").as_deref(),
            Some(""),
            "names without values"
        );
        assert_eq!(r.apply(""), None);
        assert_eq!(
            r.apply("b=%26&a=%3D").as_deref(),
            Some("a=%3D&b=%26"),
            "escapes stay"
        );
        assert_eq!(r.apply("utm_x=1").as_deref(), Some(""));
        assert_eq!(
            r.apply("b=1&a=2&b=0").as_deref(),
            Some("a=2&b=1&b=0"),
            "stable"
        );
        let many: String = (0..20)
            .rev()
            .map(|i| format!("p{i:02}=1&utm_{i}=x"))
            .collect::<Vec<_>>()
            .join("&");
        let sorted: String = (0..20)
            .map(|i| format!("p{i:02}=1"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(
            r.apply(&many).as_deref(),
            Some(sorted.as_str()),
            "more than 16"
        );
        let keep = QueryRewrite {
            sort: false,
            remove: vec![NamePattern::parse("x"), NamePattern::parse("a*c*")],
        };
        assert_eq!(keep.apply("z=1&x=2&a=3").as_deref(), Some("z=1&a=3"));
        assert_eq!(keep.apply("abc=1&y=2").as_deref(), Some("y=2"));
    }

    #[test]
    fn languages_by_lookup_and_quality() {
        let n = Normalise {
            header: HeaderName::from_static("accept-language"),
            values: vec!["en".into(), "de".into(), "fr".into()],
        };
        assert_eq!(n.pick(None), "en");
        assert_eq!(n.pick(Some("de-CH,de;q=0.9,en;q=0.8")), "de");
        assert_eq!(n.pick(Some("fr-FR;q=0.5, en-GB;q=0.7")), "en");
        assert_eq!(n.pick(Some("es, fr;q=0.1")), "fr");
        assert_eq!(n.pick(Some("es, pt")), "en");
        assert_eq!(n.pick(Some("FR")), "fr");
        assert_eq!(n.pick(Some("de;q=0, *")), "en");
        assert_eq!(n.pick(Some("zh-Hant-TW, de-AT-1996;q=0.3")), "de");
        assert_eq!(qvalue("0.25"), 250);
        assert_eq!(qvalue("1.000"), 1000);
        assert_eq!(qvalue("x"), 0);
    }
}
