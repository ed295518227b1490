//! Bypass and no-store rules of a route (nginx `proxy_cache_bypass` /
//! `proxy_no_cache`, Varnish's passes in `vcl_recv`).
//!
//! A rule has a name and conditions on the request: a cookie (by name or
//! `*` pattern), a header (present, or with a value), a query parameter
//! (present, or with a value), the method, the client address. A rule
//! matches when all its conditions do; a route's rules are tried in order
//! and the first match wins. `bypass` rules send the request to the origin
//! without a lookup (`store = true` stores the response, refreshing the
//! cache); `no_store` rules look up as usual but never store.
//!
//! ```toml
//! [[site.route.bypass]]
//! name = "logged-in"
//! cookie = "wordpress_logged_in_*"
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, COOKIE};
use http::Method;
use serde::Deserialize;
use toml::Spanned;

use super::ops::Cidr;
use super::{ConfigError, Resolver};

/// A rule as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// `name`.
    pub name: Option<Spanned<String>>,
    /// `cookie = "name"` or a `*` pattern.
    pub cookie: Option<Spanned<String>>,
    /// `header = "Name"` or `"Name: value"`.
    pub header: Option<Spanned<String>>,
    /// `query = "param"` or `"param=value"`.
    pub query: Option<Spanned<String>>,
    /// `method = ["GET", ...]`.
    pub method: Option<Vec<Spanned<String>>>,
    /// `client = ["10.0.0.0/8", ...]`.
    pub client: Option<Vec<Spanned<String>>>,
    /// `store = true` (bypass rules only).
    pub store: Option<bool>,
}

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// Straight to the origin, no lookup.
    Bypass,
    /// Look up, never store.
    NoStore,
}

impl RuleKind {
    fn as_str(self) -> &'static str {
        match self {
            RuleKind::Bypass => "bypass",
            RuleKind::NoStore => "no_store",
        }
    }
}

/// One condition on a request.
#[derive(Debug, Clone)]
pub enum Condition {
    /// A cookie whose name matches (`*` matches any run of characters).
    Cookie(String),
    /// A header field, present or with this value (compared whole, without case).
    Header(HeaderName, Option<String>),
    /// A query parameter, present or with this value.
    Query(String, Option<String>),
    /// One of these methods.
    Method(Vec<Method>),
    /// A client address in one of these ranges.
    Client(Vec<Cidr>),
}

/// A named rule. See the module docs.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its name, as configured.
    pub name: String,
    /// What `Cache-Status` says when it matched: `bypass-rule:NAME` or `no-store-rule:NAME`.
    pub label: Arc<str>,
    /// All must match.
    pub conditions: Vec<Condition>,
    /// For a bypass rule: store the response. Default: false.
    pub store: bool,
}

/// What a rule looks at.
#[derive(Debug, Clone, Copy)]
pub struct RuleInput<'a> {
    /// The method.
    pub method: &'a Method,
    /// The request header fields.
    pub headers: &'a HeaderMap,
    /// The query, without `?`.
    pub query: Option<&'a str>,
    /// The client's address (the PROXY protocol's, or from a trusted
    /// proxy's `X-Forwarded-For`; see `pipeline::forwarding::client_addr`).
    pub client: IpAddr,
}

impl Rule {
    /// True when every condition holds for `req`.
    pub fn matches(&self, req: &RuleInput<'_>) -> bool {
        self.conditions.iter().all(|c| c.holds(req))
    }
}

/// The first rule of `rules` that matches `req`.
pub fn first_match<'r>(rules: &'r [Rule], req: &RuleInput<'_>) -> Option<&'r Rule> {
    rules.iter().find(|r| r.matches(req))
}

impl Condition {
    fn holds(&self, req: &RuleInput<'_>) -> bool {
        match self {
            Condition::Cookie(pattern) => req
                .headers
                .get_all(COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .filter_map(|pair| pair.split_once('=').map(|(n, _)| n.trim()))
                .any(|name| glob(pattern, name)),
            Condition::Header(name, None) => req.headers.contains_key(name),
            Condition::Header(name, Some(want)) => req.headers.get_all(name).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|v| v.trim().eq_ignore_ascii_case(want))
            }),
            Condition::Query(name, value) => req.query.is_some_and(|q| {
                q.split('&').any(|pair| {
                    let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
                    n == name && value.as_deref().is_none_or(|want| v == want)
                })
            }),
            Condition::Method(methods) => methods.contains(req.method),
            Condition::Client(ranges) => ranges.iter().any(|c| c.contains(req.client)),
        }
    }
}

/// `*` matches any run of characters, everything else itself. Allocates
/// nothing (rules and query rewrites run it on every request).
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts = parts.peekable();
    while let Some(p) = parts.next() {
        if parts.peek().is_none() {
            // The last part: the text's end.
            return rest.len() >= p.len() && rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The conditions a rule or a route's `when` can hold, as written.
#[derive(Debug, Default)]
pub(super) struct RawConditions {
    pub cookie: Option<Spanned<String>>,
    pub header: Option<Spanned<String>>,
    pub query: Option<Spanned<String>>,
    pub method: Option<Vec<Spanned<String>>>,
    pub client: Option<Vec<Spanned<String>>>,
}

/// A route's `when`, as written: what the request must also have for the
/// route to take it (`method` one name or a list).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWhen {
    /// `cookie = "name"` or a `*` pattern.
    pub cookie: Option<Spanned<String>>,
    /// `header = "Name"` or `"Name: value"`.
    pub header: Option<Spanned<String>>,
    /// `query = "param"` or `"param=value"`.
    pub query: Option<Spanned<String>>,
    /// `method = "GET"` or `["GET", "HEAD"]`.
    pub method: Option<OneOrMany>,
    /// `client = ["10.0.0.0/8", ...]`.
    pub client: Option<Vec<Spanned<String>>>,
}

/// One string, or a list of them (errors point at the `when` table).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `"GET"`.
    One(String),
    /// `["GET", "HEAD"]`.
    Many(Vec<String>),
}

/// True when every condition holds for `req` (an empty list always does).
pub fn all_hold(conditions: &[Condition], req: &RuleInput<'_>) -> bool {
    conditions.iter().all(|c| c.holds(req))
}

impl Resolver<'_> {
    /// A route's `when` (`at` names the route): its conditions, at least one.
    pub(super) fn when(
        &self,
        at: &str,
        raw: Spanned<RawWhen>,
    ) -> Result<Vec<Condition>, ConfigError> {
        let span = raw.span();
        let w = raw.into_inner();
        let at = format!("{at}.when");
        let method = w.method.map(|m| match m {
            OneOrMany::One(s) => vec![Spanned::new(span.clone(), s)],
            OneOrMany::Many(v) => v
                .into_iter()
                .map(|s| Spanned::new(span.clone(), s))
                .collect(),
        });
        let conditions = self.conditions(
            &at,
            RawConditions {
                cookie: w.cookie,
                header: w.header,
                query: w.query,
                method,
                client: w.client,
            },
        )?;
        if conditions.is_empty() {
            return Err(self.err(
                Some(span),
                at,
                "no condition (cookie, header, query, method or client)".into(),
            ));
        }
        Ok(conditions)
    }

    /// The conditions of a rule or a `when` (`at` names it).
    fn conditions(&self, at: &str, r: RawConditions) -> Result<Vec<Condition>, ConfigError> {
        let mut conditions = Vec::new();
        if let Some(c) = r.cookie {
            conditions.push(Condition::Cookie(c.into_inner()));
        }
        if let Some(h) = r.header {
            let (n, v) = match h.get_ref().split_once(':') {
                Some((n, v)) => (n.trim(), Some(v.trim().to_string())),
                None => (h.get_ref().trim(), None),
            };
            let n = HeaderName::from_bytes(n.as_bytes()).map_err(|_| {
                self.err(
                    Some(h.span()),
                    format!("{at}.header"),
                    format!(
                        "{:?} is not a header name (write \"Name\" or \"Name: value\")",
                        n
                    ),
                )
            })?;
            conditions.push(Condition::Header(n, v));
        }
        if let Some(q) = r.query {
            let (n, v) = match q.get_ref().split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (q.get_ref().clone(), None),
            };
            conditions.push(Condition::Query(n, v));
        }
        if let Some(ms) = r.method {
            let mut methods = Vec::new();
            for m in ms {
                methods.push(
                    Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()).map_err(
                        |_| {
                            self.err(
                                Some(m.span()),
                                format!("{at}.method"),
                                format!("{:?} is not a method", m.get_ref()),
                            )
                        },
                    )?,
                );
            }
            conditions.push(Condition::Method(methods));
        }
        if let Some(cs) = r.client {
            let mut ranges = Vec::new();
            for c in cs {
                ranges.push(
                    Cidr::parse(c.get_ref())
                        .map_err(|e| self.err(Some(c.span()), format!("{at}.client"), e))?,
                );
            }
            conditions.push(Condition::Client(ranges));
        }
        Ok(conditions)
    }

    /// Resolves a route's `bypass` or `no_store` list; `at` names the route.
    pub(super) fn rules(
        &self,
        raw: Vec<RawRule>,
        at: &str,
        kind: RuleKind,
    ) -> Result<Vec<Rule>, ConfigError> {
        let mut rules: Vec<Rule> = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let at = format!("{at}.{}[{i}]", kind.as_str());
            let Some(name) = r.name else {
                return Err(self.err(None, format!("{at}.name"), "every rule needs a name".into()));
            };
            if rules.iter().any(|x| x.name == *name.get_ref()) {
                return Err(self.err(
                    Some(name.span()),
                    format!("{at}.name"),
                    format!("{:?} names two rules", name.get_ref()),
                ));
            }
            let conditions = self.conditions(
                &at,
                RawConditions {
                    cookie: r.cookie,
                    header: r.header,
                    query: r.query,
                    method: r.method,
                    client: r.client,
                },
            )?;
            if conditions.is_empty() {
                return Err(self.err(
                    Some(name.span()),
                    at.clone(),
                    format!(
                        "rule {:?} has no condition (cookie, header, query, method or client)",
                        name.get_ref()
                    ),
                ));
            }
            if r.store.is_some() && kind == RuleKind::NoStore {
                return Err(self.err(
                    Some(name.span()),
                    format!("{at}.store"),
                    "`store` belongs to bypass rules (a no_store rule never stores)".into(),
                ));
            }
            let name = name.into_inner();
            let label = match kind {
                RuleKind::Bypass => format!("bypass-rule:{name}"),
                RuleKind::NoStore => format!("no-store-rule:{name}"),
            };
            rules.push(Rule {
                label: label.into(),
                name,
                conditions,
                store: r.store.unwrap_or(false),
            });
        }
        Ok(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> RuleInput<'a> {
        RuleInput {
            method: &Method::GET,
            headers,
            query,
            client: "10.1.2.3".parse().unwrap(),
        }
    }

    #[test]
    fn globs() {
        assert!(glob("wordpress_logged_in_*", "wordpress_logged_in_abc"));
        assert!(glob("wordpress_logged_in_*", "wordpress_logged_in_"));
        assert!(!glob("wordpress_logged_in_*", "wordpress_test_cookie"));
        assert!(glob("*SESS*", "SSESS12ab"));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXcYb"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        assert!(glob("*", ""));
    }

    #[test]
    fn conditions() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=1; wordpress_logged_in_x=2".parse().unwrap());
        h.insert("x-debug", "ON".parse().unwrap());
        let req = input(&h, Some("p=1&preview=true"));
        assert!(Condition::Cookie("wordpress_logged_in_*".into()).holds(&req));
        assert!(!Condition::Cookie("b".into()).holds(&req));
        assert!(Condition::Header(HeaderName::from_static("x-debug"), None).holds(&req));
        assert!(
            Condition::Header(HeaderName::from_static("x-debug"), Some("on".into())).holds(&req)
        );
        assert!(
            !Condition::Header(HeaderName::from_static("x-debug"), Some("off".into())).holds(&req)
        );
        assert!(Condition::Query("preview".into(), None).holds(&req));
        assert!(Condition::Query("preview".into(), Some("true".into())).holds(&req));
        assert!(!Condition::Query("pre".into(), None).holds(&req));
        assert!(Condition::Method(vec![Method::GET]).holds(&req));
        assert!(Condition::Client(vec![Cidr::parse("10.0.0.0/8").unwrap()]).holds(&req));
        assert!(!Condition::Client(vec![Cidr::parse("192.168.0.0/16").unwrap()]).holds(&req));
    }
}
