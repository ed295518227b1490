//! Values with variables, expanded per request: `$host`, `$request_uri`,
//! `$remote_addr`, `$scheme` and, in a redirect from a `regex` route, the
//! capture groups `$1` ... `$9`. On delivery (`response_headers`) also
//! `$cache_status` (`HIT`, `MISS`, `EXPIRED`, `STALE`, `REVALIDATED`,
//! `PASS`, `ERROR`, `NONE`), `$cache_hits` (the stored object's hits, this
//! one included; 0 when not from the cache), `$upstream_name` and `$age`. `${name}` delimits a name; `$$` is a `$`.
//! Parsed once when the configuration is read; a value without variables
//! is expanded for free.

use std::fmt::Write as _;
use std::net::IpAddr;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    Host,
    RequestUri,
    RemoteAddr,
    Scheme,
    Group(usize),
    CacheStatus,
    CacheHits,
    UpstreamName,
    Age,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What a template's variables stand for in one request.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// The host the client asked for, without the port (nginx `$host`).
    pub host: &'a str,
    /// The path and query (normalised target).
    pub request_uri: &'a str,
    /// The client's address (as the PROXY protocol or trusted proxies give it).
    pub remote_addr: IpAddr,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The path, for the capture groups of a `regex` route.
    pub path: &'a str,
    /// On delivery: what the response is (see [`Delivery`]).
    pub delivery: Option<Delivery<'a>>,
}

/// What delivery variables stand for in one response.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delivery<'a> {
    /// `HIT`, `MISS`, `EXPIRED`... (see the module docs).
    pub cache_status: &'a str,
    /// The stored object's hits, this one included (0: not from the cache).
    pub cache_hits: u64,
    /// The route's upstream.
    pub upstream_name: &'a str,
    /// The `Age` sent (empty when none).
    pub age: &'a str,
}

impl Template {
    /// Parses `text`; `groups` allows `$1`...`$9` (redirects from a `regex` route).
    ///
    /// # Errors
    /// The message for the operator: an unknown variable, or a group where
    /// none is available.
    pub fn parse(text: &str, groups: usize) -> Result<Template, String> {
        Template::parse_for(text, groups, false)
    }

    /// As [`Template::parse`]; `delivery` allows the delivery variables
    /// (`response_headers`).
    ///
    /// # Errors
    /// As [`Template::parse`], and a delivery variable where there is none.
    pub fn parse_for(text: &str, groups: usize, delivery: bool) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            }
            let (name, after) = if let Some(r) = rest.strip_prefix('{') {
                let end = r
                    .find('}')
                    .ok_or_else(|| format!("{text:?}: `${{` without `}}`"))?;
                (&r[..end], &r[end + 1..])
            } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
                (&rest[..1], &rest[1..])
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            let part = match name {
                "host" => Part::Host,
                "request_uri" => Part::RequestUri,
                "remote_addr" => Part::RemoteAddr,
                "scheme" => Part::Scheme,
                "cache_status" | "cache_hits" | "upstream_name" | "age" if !delivery => {
                    return Err(format!(
                        "{text:?}: `${name}` is known only when a response is delivered \
                         (response_headers)"
                    ))
                }
                "cache_status" => Part::CacheStatus,
                "cache_hits" => Part::CacheHits,
                "upstream_name" => Part::UpstreamName,
                "age" => Part::Age,
                n if n.len() == 1 && n.as_bytes()[0].is_ascii_digit() => {
                    let g = usize::from(n.as_bytes()[0] - b'0');
                    if g == 0 || g > groups {
                        return Err(format!(
                            "{text:?}: `${g}` names no capture group of this route's regex \
                             ({groups} groups)"
                        ));
                    }
                    Part::Group(g)
                }
                "" => {
                    return Err(format!(
                        "{text:?}: `$` without a variable name (`$$` is a `$`)"
                    ))
                }
                other => {
                    return Err(format!(
                        "{text:?}: unknown variable `${other}` (known: $host, $request_uri, \
                         $remote_addr, $scheme{}{})",
                        if groups > 0 { ", $1..." } else { "" },
                        if delivery {
                            ", $cache_status, $cache_hits, $upstream_name, $age"
                        } else {
                            ""
                        }
                    ))
                }
            };
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(part);
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// The text, when the template has no variables.
    pub fn fixed(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// True when it uses a delivery variable.
    pub fn uses_delivery(&self) -> bool {
        self.parts.iter().any(|p| {
            matches!(
                p,
                Part::CacheStatus | Part::CacheHits | Part::UpstreamName | Part::Age
            )
        })
    }

    /// True when it uses `$cache_hits`.
    pub fn uses_cache_hits(&self) -> bool {
        self.parts.contains(&Part::CacheHits)
    }

    /// True when it uses `$request_uri` (a redirect then keeps the query itself).
    pub fn has_request_uri(&self) -> bool {
        self.parts.contains(&Part::RequestUri)
    }

    /// The value for one request. `captures` are the route regex's groups
    /// over the path (only redirects from a `regex` route have them).
    pub fn expand(&self, vars: &Vars<'_>, captures: Option<&regex::Captures<'_>>) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Host => out.push_str(vars.host),
                Part::RequestUri => out.push_str(vars.request_uri),
                Part::RemoteAddr => {
                    let _ = write!(out, "{}", vars.remote_addr);
                }
                Part::Scheme => out.push_str(vars.scheme),
                Part::Group(g) => {
                    if let Some(m) = captures.and_then(|c| c.get(*g)) {
                        out.push_str(m.as_str());
                    }
                }
                Part::CacheStatus => {
                    out.push_str(vars.delivery.map_or("NONE", |d| d.cache_status));
                }
                Part::CacheHits => {
                    let _ = write!(out, "{}", vars.delivery.map_or(0, |d| d.cache_hits));
                }
                Part::UpstreamName => out.push_str(vars.delivery.map_or("", |d| d.upstream_name)),
                Part::Age => out.push_str(vars.delivery.map_or("", |d| d.age)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars<'static> {
        Vars {
            host: "example.com",
            request_uri: "/a?b=1",
            remote_addr: "192.0.2.7".parse().unwrap(),
            scheme: "http",
            path: "/a",
            delivery: None,
        }
    }

    #[test]
    fn delivery_variables_on_delivery_only() {
        let t =
            Template::parse_for("$cache_status $cache_hits $upstream_name $age", 0, true).unwrap();
        assert!(t.uses_delivery() && t.uses_cache_hits());
        let mut v = vars();
        v.delivery = Some(Delivery {
            cache_status: "HIT",
            cache_hits: 3,
            upstream_name: "app",
            age: "12",
        });
        assert_eq!(t.expand(&v, None), "HIT 3 app 12");
        assert!(Template::parse("$cache_status", 0)
            .unwrap_err()
            .contains("only when a response is delivered"));
        assert!(!Template::parse("$host", 0).unwrap().uses_delivery());
    }

    #[test]
    fn expands_variables() {
        let t = Template::parse("https://$host${request_uri}#$$", 0).unwrap();
        assert_eq!(t.expand(&vars(), None), "https://example.com/a?b=1#$");
        assert!(t.has_request_uri());
        let t = Template::parse("for=$remote_addr;proto=$scheme", 0).unwrap();
        assert_eq!(t.expand(&vars(), None), "for=192.0.2.7;proto=http");
        assert_eq!(Template::parse("plain", 0).unwrap().fixed(), Some("plain"));
    }

    #[test]
    fn capture_groups() {
        let re = regex::Regex::new("^/old/(.*)$").unwrap();
        let t = Template::parse("/new/$1", 1).unwrap();
        let caps = re.captures("/old/x/y").unwrap();
        assert_eq!(t.expand(&vars(), Some(&caps)), "/new/x/y");
    }

    #[test]
    fn refuses_unknown_names() {
        assert!(Template::parse("$hots", 0)
            .unwrap_err()
            .contains("unknown variable `$hots`"));
        assert!(Template::parse("/x/$1", 0)
            .unwrap_err()
            .contains("no capture group"));
        assert!(Template::parse("${host", 0).is_err());
        assert!(Template::parse("a$", 0).is_err());
    }
}
