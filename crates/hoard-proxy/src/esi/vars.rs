//! ESI variables (ESI 1.0 §5): `$(HTTP_HOST)`, `$(HTTP_COOKIE{name})`,
//! `$(QUERY_STRING{name})` and the others a request carries, with an
//! optional default (`$(HTTP_COOKIE{id}|'guest')`).
//!
//! Pure: a page's values are read once from its request ([`Values`]) and
//! every variable of the page is looked up there.

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{HeaderMap, ACCEPT_LANGUAGE, COOKIE, HOST, REFERER, USER_AGENT};

/// A variable as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    /// Its name (`HTTP_COOKIE`).
    pub name: String,
    /// Its key, for dictionary variables (`{name}`).
    pub key: Option<String>,
    /// What it is when the request has no value for it.
    pub default: Option<String>,
}

/// Text whose variables are replaced on each request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text(pub Vec<Piece>);

/// A piece of [`Text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Bytes as they are.
    Lit(Bytes),
    /// A variable's value.
    Var(Var),
}

/// The values of a page's request that variables name.
#[derive(Debug, Clone, Default)]
pub struct Values {
    host: String,
    cookie: String,
    query: String,
    user_agent: String,
    referer: String,
    accept_language: String,
}

impl Values {
    /// The values of a request with these fields, Host and query.
    pub fn of(headers: &HeaderMap, authority: &str, query: Option<&str>) -> Values {
        let field = |name: http::header::HeaderName| {
            let mut all = String::new();
            for v in headers.get_all(&name) {
                if let Ok(v) = v.to_str() {
                    if !all.is_empty() {
                        all.push_str(if name == COOKIE { "; " } else { ", " });
                    }
                    all.push_str(v);
                }
            }
            all
        };
        Values {
            host: if authority.is_empty() {
                field(HOST)
            } else {
                authority.to_owned()
            },
            cookie: field(COOKIE),
            query: query.unwrap_or("").to_owned(),
            user_agent: field(USER_AGENT),
            referer: field(REFERER),
            accept_language: field(ACCEPT_LANGUAGE),
        }
    }

    /// A variable's value (its default, or empty, when the request has
    /// none; ESI 1.0 §5: an undefined variable is the empty string).
    pub fn get<'a>(&'a self, v: &'a Var) -> Cow<'a, str> {
        let found: Option<Cow<'a, str>> = match (v.name.as_str(), v.key.as_deref()) {
            ("HTTP_HOST", None) => Some(Cow::Borrowed(&self.host)),
            ("HTTP_COOKIE", None) => Some(Cow::Borrowed(&self.cookie)),
            ("HTTP_COOKIE", Some(k)) => cookie(&self.cookie, k).map(Cow::Borrowed),
            ("QUERY_STRING", None) => Some(Cow::Borrowed(&self.query)),
            ("QUERY_STRING", Some(k)) => query_param(&self.query, k).map(Cow::Borrowed),
            ("HTTP_USER_AGENT", None) => Some(Cow::Borrowed(&self.user_agent)),
            ("HTTP_REFERER", None) => Some(Cow::Borrowed(&self.referer)),
            ("HTTP_ACCEPT_LANGUAGE", None) => Some(Cow::Borrowed(&self.accept_language)),
            // A list test (ESI 1.0 §5): "true" when the language is there.
            ("HTTP_ACCEPT_LANGUAGE", Some(lang)) => Some(Cow::Borrowed(
                if self.accept_language.split(',').any(|r| {
                    r.split(';')
                        .next()
                        .is_some_and(|t| t.trim().eq_ignore_ascii_case(lang))
                }) {
                    "true"
                } else {
                    "false"
                },
            )),
            _ => None,
        };
        match found {
            Some(s) if !s.is_empty() => s,
            _ => Cow::Borrowed(v.default.as_deref().unwrap_or("")),
        }
    }
}

/// A cookie's value in a `Cookie` field.
fn cookie<'a>(field: &'a str, name: &str) -> Option<&'a str> {
    field.split(';').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n.trim() == name).then(|| v.trim())
    })
}

/// A query parameter's value, as sent (percent-encoded).
fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        (n == name).then_some(v)
    })
}

impl Text {
    /// No variables in it.
    #[cfg(test)]
    pub fn is_plain(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Piece::Lit(_)))
    }

    /// The text for a request, for a page's body: variables' values are
    /// HTML-escaped (they come from the client: a cookie never becomes
    /// markup).
    pub fn render_html(&self, values: &Values) -> Bytes {
        if let [Piece::Lit(b)] = self.0.as_slice() {
            return b.clone();
        }
        let mut out = Vec::new();
        for p in &self.0 {
            match p {
                Piece::Lit(b) => out.extend_from_slice(b),
                Piece::Var(v) => {
                    for c in values.get(v).chars() {
                        match c {
                            '<' => out.extend_from_slice(b"&lt;"),
                            '>' => out.extend_from_slice(b"&gt;"),
                            '&' => out.extend_from_slice(b"&amp;"),
                            '"' => out.extend_from_slice(b"&quot;"),
                            '\'' => out.extend_from_slice(b"&#39;"),
                            c => {
                                let mut buf = [0; 4];
                                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                    }
                }
            }
        }
        Bytes::from(out)
    }

    /// The text for a request, for a URL (`src`, `alt`): bytes a request
    /// target cannot hold are percent-encoded.
    pub fn render_url(&self, values: &Values) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Lit(b) => out.push_str(&String::from_utf8_lossy(b)),
                Piece::Var(v) => {
                    for b in values.get(v).bytes() {
                        if b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:@/?".contains(&b) {
                            out.push(b as char);
                        } else {
                            out.push_str(&format!("%{b:02X}"));
                        }
                    }
                }
            }
        }
        out
    }

    /// The text for a request, as it is.
    #[cfg(test)]
    pub fn render_plain(&self, values: &Values) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Lit(b) => out.push_str(&String::from_utf8_lossy(b)),
                Piece::Var(v) => out.push_str(&values.get(v)),
            }
        }
        out
    }
}

/// Text with `$(...)` variables parsed; `None` when one is malformed (an
/// unclosed `$(`).
pub fn parse_text(src: &Bytes) -> Option<Text> {
    let b = src.as_ref();
    let mut pieces = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'$' && b[i + 1] == b'(' {
            let (var, end) = parse_var(b, i)?;
            if i > lit_start {
                pieces.push(Piece::Lit(src.slice(lit_start..i)));
            }
            pieces.push(Piece::Var(var));
            i = end;
            lit_start = end;
        } else {
            i += 1;
        }
    }
    if lit_start < b.len() {
        pieces.push(Piece::Lit(src.slice(lit_start..)));
    }
    Some(Text(pieces))
}

/// The variable at `b[at..]` (which starts `$(`) and the index past it.
pub(crate) fn parse_var(b: &[u8], at: usize) -> Option<(Var, usize)> {
    let close = at + 2 + b[at + 2..].iter().position(|&c| c == b')')?;
    let inner = std::str::from_utf8(&b[at + 2..close]).ok()?;
    let (spec, default) = match inner.split_once('|') {
        Some((s, d)) => {
            let d = d.trim();
            let d = d
                .strip_prefix('\'')
                .and_then(|d| d.strip_suffix('\''))
                .unwrap_or(d);
            (s, Some(d.to_owned()))
        }
        None => (inner, None),
    };
    let (name, key) = match spec.split_once('{') {
        Some((n, k)) => (n, Some(k.strip_suffix('}')?.to_owned())),
        None => (spec, None),
    };
    if name.is_empty() || !name.bytes().all(|c| c.is_ascii_uppercase() || c == b'_') {
        return None;
    }
    Some((
        Var {
            name: name.to_owned(),
            key,
            default,
        },
        close + 1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=1; user=bob; x=<b>".parse().unwrap());
        h.insert(ACCEPT_LANGUAGE, "de-DE, en;q=0.5".parse().unwrap());
        Values::of(&h, "www.example.com", Some("p=2&q=a%20b"))
    }

    #[test]
    fn variables_take_request_values_and_defaults() {
        let v = values();
        let t = parse_text(&Bytes::from_static(
            b"$(HTTP_HOST)/$(HTTP_COOKIE{user})/$(QUERY_STRING{q})/$(HTTP_COOKIE{none}|'guest')/$(NOPE)",
        ))
        .unwrap();
        assert_eq!(t.render_plain(&v), "www.example.com/bob/a%20b/guest/");
        let html = parse_text(&Bytes::from_static(b"<i>$(HTTP_COOKIE{x})</i>")).unwrap();
        assert_eq!(&html.render_html(&v)[..], b"<i>&lt;b&gt;</i>");
        let lang = parse_text(&Bytes::from_static(
            b"$(HTTP_ACCEPT_LANGUAGE{en}) $(HTTP_ACCEPT_LANGUAGE{fr})",
        ))
        .unwrap();
        assert_eq!(lang.render_plain(&v), "true false");
        let url = parse_text(&Bytes::from_static(b"/f?u=$(HTTP_COOKIE{x})")).unwrap();
        assert_eq!(url.render_url(&v), "/f?u=%3Cb%3E");
        assert!(parse_text(&Bytes::from_static(b"$(HTTP_HOST")).is_none());
        assert!(parse_text(&Bytes::from_static(b"costs $5 (cheap)"))
            .unwrap()
            .is_plain());
    }
}
