//! Sites ([`SiteConfig`]): the virtual hosts selected by Host, each with
//! its routes, resolved from `[[site]]` tables.
//!
//! Sites and routes as written, checked as a whole: a route that can never
//! match because an earlier route of its site takes every path it would
//! (routes are tried in order and the first match wins), the site that
//! answers Hosts no site lists (`default = true`), and the listeners a
//! site answers on (`listeners = ["public"]`).

use std::sync::Arc;

use toml::Spanned;

use super::raw::{RawRoute, RawSite};
use super::{
    CacheConfig, ConfigError, ListenerConfig, PathMatch, Resolver, RouteConfig, UpstreamConfig,
};
use hoard_edge::headers::HeaderEdits;
use hoard_edge::Edge;

/// How a site is selected by Host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// Exactly this host (lowercase, no port).
    Exact(String),
    /// `*.example.com`: any subdomain.
    Suffix(String),
}

/// A virtual host.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// Host patterns; empty: it answers Hosts no site lists (see
    /// `pipeline::select_site`).
    pub hosts: Vec<HostMatch>,
    /// Routes, tried in order (shared: a fill holds its route).
    pub routes: Vec<std::sync::Arc<RouteConfig>>,
    /// Pages for hoard's own errors (`error_pages`), routes inherit them.
    pub error_pages: Option<std::sync::Arc<hoard_edge::error_pages::ErrorPages>>,
    /// `response_headers`: under each route's own (merged into its edge),
    /// and on the site's answer for a path no route takes.
    pub response_headers: hoard_edge::headers::HeaderEdits,
    /// `scheme = "http"` (`Some(false)`) or `"https"` (`Some(true)`): the
    /// site serves only requests that arrived so. `None`: both.
    pub tls: Option<bool>,
    /// Its listeners, and whether it answers Hosts no site lists.
    pub bind: Bind,
}

impl SiteConfig {
    /// The index of the first route whose path matches `path`, whatever
    /// its `when` (purges and invalidations, which have a URL only).
    pub fn route_for(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| path_matches(&r.path, path))
    }

    /// The index of the first route that takes the request: its path
    /// matches `path` and every condition of its `when` holds for `req`
    /// (see `rules`).
    #[inline]
    pub fn route_for_request(
        &self,
        path: &str,
        req: &crate::rules::RuleInput<'_>,
    ) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| path_matches(&r.path, path) && crate::rules::all_hold(&r.when, req))
    }
}

/// A route's bypass rules: `request_cookie = "pass"` first (a request
/// with a `Cookie` after the route's request edits goes to the origin, as
/// Varnish's built-in `vcl_recv` passes it), then the route's own, then
/// its site's that it does not name itself.
fn inherit_bypass(route: &mut RouteConfig, site: &[crate::rules::Rule], cookie_pass: bool) {
    let own: Vec<crate::rules::Rule> = std::mem::take(&mut route.bypass);
    if cookie_pass {
        route.bypass.push(crate::rules::Rule {
            name: "request-cookie".into(),
            label: "request-cookie".into(),
            conditions: vec![crate::rules::Condition::Cookie("*".into())],
            store: false,
        });
    }
    let inherited: Vec<crate::rules::Rule> = site
        .iter()
        .filter(|r| !own.iter().any(|o| o.name == r.name))
        .cloned()
        .collect();
    route.bypass.extend(own);
    route.bypass.extend(inherited);
}

fn path_matches(m: &PathMatch, path: &str) -> bool {
    match m {
        PathMatch::Prefix(p) => path.starts_with(p.as_str()),
        PathMatch::Regex(re) => re.is_match(path),
    }
}

/// Where a site answers: its listeners, and whether it is their default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bind {
    /// `default = true`: the site answers Hosts that no site on the
    /// listener lists.
    pub default: bool,
    /// Indices into `Config::listeners` (`listeners = [...]`); empty:
    /// every listener.
    pub listeners: Vec<usize>,
}

impl Bind {
    /// The site answers on this listener (`None`: a request from no
    /// listener, such as a purge through the admin API).
    #[inline]
    pub fn on(&self, listener: Option<usize>) -> bool {
        match listener {
            Some(l) => self.listeners.is_empty() || self.listeners.contains(&l),
            None => true,
        }
    }
}

/// How a route matches, as written (for the messages).
enum Written<'a> {
    Prefix(&'a str),
    Regex(&'a str),
}

impl Written<'_> {
    fn of(r: &RawRoute) -> Written<'_> {
        match (&r.prefix, &r.regex) {
            (_, Some(re)) => Written::Regex(re.get_ref()),
            (Some(p), None) => Written::Prefix(p.get_ref()),
            (None, None) => Written::Prefix("/"),
        }
    }

    fn describe(&self) -> String {
        match self {
            Written::Prefix(p) => format!("prefix {p:?}"),
            Written::Regex(r) => format!("regex {r:?}"),
        }
    }

    /// A prefix such that the route matches every path starting with it,
    /// when that is certain.
    fn covers(&self) -> Option<&str> {
        match *self {
            Written::Prefix(p) => Some(p),
            Written::Regex(r) => {
                if matches!(r, "" | "^" | ".*" | "^.*" | ".*$" | "^.*$") {
                    return Some("");
                }
                let rest = r.strip_prefix('^')?;
                let lit = literal_run(rest);
                // Paths hold no newline, so `.` takes every character.
                matches!(&rest[lit.len()..], "" | ".*" | ".*$").then_some(lit)
            }
        }
    }

    /// A prefix every path the route matches starts with, when that is
    /// certain (`None`: nothing is known).
    fn within(&self) -> Option<&str> {
        match *self {
            Written::Prefix(p) => Some(p),
            Written::Regex(r) => {
                if r.contains('|') {
                    return None;
                }
                let rest = r.strip_prefix('^')?;
                let lit = literal_run(rest);
                // A quantifier makes the character before it optional.
                match rest[lit.len()..].chars().next() {
                    Some('?' | '*' | '{' | '+') => {
                        let cut = lit.char_indices().last().map_or(0, |(i, _)| i);
                        Some(&lit[..cut])
                    }
                    _ => Some(lit),
                }
            }
        }
    }
}

/// The leading characters of a regex that stand for themselves.
fn literal_run(re: &str) -> &str {
    let end = re
        .find(|c: char| "\\.+*?()|[]{}^$".contains(c))
        .unwrap_or(re.len());
    &re[..end]
}

impl Resolver<'_> {
    /// `request_cookie`: `Some(true)` for `"pass"`, `Some(false)` for
    /// `"cache"` (the default: a request's cookies change nothing).
    fn request_cookie(
        &self,
        at: &str,
        raw: Option<Spanned<String>>,
    ) -> Result<Option<bool>, ConfigError> {
        let Some(v) = raw else { return Ok(None) };
        match v.get_ref().as_str() {
            "pass" => Ok(Some(true)),
            "cache" => Ok(Some(false)),
            other => Err(self.err(
                Some(v.span()),
                format!("{at}.request_cookie"),
                format!("{other:?}: expected \"pass\" (requests with a Cookie go to the origin) or \"cache\""),
            )),
        }
    }

    /// Every `[[site]]` with its routes; without one, a site of one
    /// catch-all route.
    pub(super) fn sites(
        &self,
        written: Vec<RawSite>,
        listeners: &[ListenerConfig],
        upstreams: &[UpstreamConfig],
        cache: &CacheConfig,
        filters: &[crate::filters::FilterConfig],
    ) -> Result<Vec<SiteConfig>, ConfigError> {
        let mut sites = Vec::new();
        let default_spans: Vec<_> = written
            .iter()
            .map(|s| s.default.as_ref().map(|d| d.span()))
            .collect();
        for (i, site) in written.into_iter().enumerate() {
            self.check_shadowed(i, &site.routes)?;
            let bind = self.bind(i, &site, listeners)?;
            let hosts = site
                .hosts
                .iter()
                .map(|h| {
                    let h = h.to_ascii_lowercase();
                    match h.strip_prefix("*.") {
                        Some(s) => HostMatch::Suffix(format!(".{s}")),
                        None => HostMatch::Exact(h),
                    }
                })
                .collect();
            let error_pages = self.error_pages(&format!("site[{i}]"), site.error_pages, None)?;
            let response_headers = self.header_edits(
                &format!("site[{i}].response_headers"),
                site.response_headers,
            )?;
            let mut routes = Vec::new();
            let mut probes = Vec::new();
            let site_bypass = self.rules(
                site.bypass,
                &format!("site[{i}]"),
                crate::rules::RuleKind::Bypass,
            )?;
            let site_cookie = self.request_cookie(&format!("site[{i}]"), site.request_cookie)?;
            for (j, r) in site.routes.into_iter().enumerate() {
                let at = format!("site[{i}].route[{j}]");
                let mut r = r.into_inner();
                let names = r.filters.take();
                let origin_names = r.origin_filters.take();
                let cookie = self
                    .request_cookie(&at, r.request_cookie.take())?
                    .or(site_cookie);
                let (route, probe) = self.route(&at, r, upstreams, cache, error_pages.as_ref())?;
                let mut route = route;
                inherit_bypass(&mut route, &site_bypass, cookie == Some(true));
                route.filters = self.route_filters(&at, "filters", names, filters)?;
                route.origin_filters =
                    self.route_filters(&at, "origin_filters", origin_names, filters)?;
                route.max_body_size = route.max_body_size.or(site.max_body_size.map(|s| s.0));
                routes.push(std::sync::Arc::new(route));
                probes.push(probe);
            }
            if routes.is_empty() {
                let mut route = RouteConfig::catch_all();
                route.max_body_size = site.max_body_size.map(|s| s.0);
                inherit_bypass(&mut route, &site_bypass, site_cookie == Some(true));
                if let Some(pages) = &error_pages {
                    route.edge = Some(std::sync::Arc::new(hoard_edge::Edge {
                        error_pages: Some(pages.clone()),
                        ..Default::default()
                    }));
                }
                routes.push(std::sync::Arc::new(route));
            }
            under_site_headers(&mut routes, &response_headers);
            for route in &mut routes {
                let counts = route
                    .edge
                    .as_ref()
                    .is_some_and(|e| e.response_headers.uses_cache_hits());
                if counts {
                    Arc::make_mut(route).count_hits = true;
                }
            }
            let tls = match site
                .scheme
                .as_ref()
                .map(|s| (s.get_ref().as_str(), s.span()))
            {
                None => None,
                Some(("http", _)) => Some(false),
                Some(("https", _)) => Some(true),
                Some((other, span)) => {
                    return Err(self.err(
                        Some(span),
                        format!("site[{i}].scheme"),
                        format!("{other:?}: expected \"http\" or \"https\""),
                    ))
                }
            };
            let site = SiteConfig {
                hosts,
                routes,
                error_pages,
                response_headers,
                tls,
                bind,
            };
            self.check_loops(&site, probes)?;
            sites.push(site);
        }
        self.check_defaults(&sites, &default_spans, listeners.len())?;
        if sites.is_empty() {
            sites.push(SiteConfig {
                hosts: Vec::new(),
                routes: vec![std::sync::Arc::new(RouteConfig::catch_all())],
                error_pages: None,
                response_headers: Default::default(),
                tls: None,
                bind: Bind::default(),
            });
        }
        Ok(sites)
    }

    /// The line a span starts on.
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.sources.locate(span.start).1
    }

    /// `FILE:LINE` of a span (for a key that may be in another file).
    fn place(&self, span: std::ops::Range<usize>) -> String {
        let (file, line) = self.sources.locate(span.start);
        format!("{file}:{line}")
    }

    /// The span of a route's path match (its table when it has none).
    fn route_span(r: &Spanned<RawRoute>) -> std::ops::Range<usize> {
        let inner = r.get_ref();
        match (&inner.regex, &inner.prefix) {
            (Some(re), _) => re.span(),
            (None, Some(p)) => p.span(),
            (None, None) => r.span(),
        }
    }

    /// Refuses a route an earlier route of the site (one without `when`)
    /// always takes first.
    pub(super) fn check_shadowed(
        &self,
        site: usize,
        routes: &[Spanned<RawRoute>],
    ) -> Result<(), ConfigError> {
        for (j, later) in routes.iter().enumerate() {
            let w = Written::of(later.get_ref());
            for (i, earlier) in routes[..j].iter().enumerate() {
                // A route with `when` takes only some requests of its paths.
                if earlier.get_ref().when.is_some() {
                    continue;
                }
                let e = Written::of(earlier.get_ref());
                let covered = match (&e, &w) {
                    (Written::Regex(a), Written::Regex(b)) if a == b => true,
                    _ => match (e.covers(), w.within()) {
                        // Every path: nothing after it is reached.
                        (Some(""), _) => true,
                        (Some(c), Some(p)) => p.starts_with(c),
                        _ => false,
                    },
                };
                if covered {
                    let span = Self::route_span(later);
                    return Err(self.err(
                        Some(span.clone()),
                        format!("site[{site}].route[{j}]"),
                        format!(
                            "{} (line {}) is never reached: `site[{site}].route[{i}]` ({}, \
                             line {}) matches every path it would \
                             (routes are tried in order and the first match wins: list the \
                             narrower route first)",
                            w.describe(),
                            self.line(span),
                            e.describe(),
                            self.line(Self::route_span(earlier)),
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A site's `default` and `listeners`, the names looked up among the
    /// listeners.
    pub(super) fn bind(
        &self,
        i: usize,
        site: &RawSite,
        listeners: &[ListenerConfig],
    ) -> Result<Bind, ConfigError> {
        let mut bind = Bind {
            default: site.default.as_ref().is_some_and(|d| *d.get_ref()),
            listeners: Vec::new(),
        };
        let Some(names) = &site.listeners else {
            return Ok(bind);
        };
        if names.get_ref().is_empty() {
            return Err(self.err(
                Some(names.span()),
                format!("site[{i}].listeners"),
                "names no listener: the site would never answer (leave the key out for every \
                 listener)"
                    .into(),
            ));
        }
        for n in names.get_ref() {
            let at = listeners
                .iter()
                .position(|l| l.name.as_deref() == Some(n.get_ref().as_str()))
                .ok_or_else(|| {
                    let known: Vec<&str> =
                        listeners.iter().filter_map(|l| l.name.as_deref()).collect();
                    self.err(
                        Some(n.span()),
                        format!("site[{i}].listeners"),
                        format!(
                            "unknown listener {:?} ({})",
                            n.get_ref(),
                            if known.is_empty() {
                                "no [[listener]] has a `name`".to_string()
                            } else {
                                format!("named: {}", known.join(", "))
                            }
                        ),
                    )
                })?;
            if !bind.listeners.contains(&at) {
                bind.listeners.push(at);
            }
        }
        Ok(bind)
    }

    /// Refuses two default sites that answer on one listener and scheme.
    /// `spans` holds each site's `default` key.
    pub(super) fn check_defaults(
        &self,
        sites: &[SiteConfig],
        spans: &[Option<std::ops::Range<usize>>],
        listeners: usize,
    ) -> Result<(), ConfigError> {
        let shared = |a: &SiteConfig, b: &SiteConfig| {
            let scheme = a.tls.is_none() || b.tls.is_none() || a.tls == b.tls;
            scheme && (0..listeners).any(|l| a.bind.on(Some(l)) && b.bind.on(Some(l)))
        };
        for (j, b) in sites.iter().enumerate().filter(|(_, s)| s.bind.default) {
            for (i, a) in sites[..j]
                .iter()
                .enumerate()
                .filter(|(_, s)| s.bind.default)
            {
                if shared(a, b) {
                    return Err(self.err(
                        spans[j].clone(),
                        format!("site[{j}].default"),
                        format!(
                            "a second default site: `site[{i}]` ({}) is the default already \
                             on the same listener",
                            spans[i].clone().map_or("?".into(), |s| self.place(s)),
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Puts a site's `response_headers` under each of its routes' own (see
/// [`HeaderEdits::under`]): a route without edge keys gets an edge for them.
pub(super) fn under_site_headers(routes: &mut [Arc<RouteConfig>], site: &HeaderEdits) {
    if site.is_empty() {
        return;
    }
    for route in routes {
        let route = Arc::make_mut(route);
        let mut edge = route.edge.as_deref().cloned().unwrap_or_else(Edge::default);
        edge.response_headers = site.under(&edge.response_headers);
        route.edge = Some(Arc::new(edge));
    }
}

/// Refuses two listeners with one name.
pub(super) fn check_listener_names(
    r: &Resolver<'_>,
    listeners: &[ListenerConfig],
    spans: &[Option<std::ops::Range<usize>>],
) -> Result<(), ConfigError> {
    for (j, l) in listeners.iter().enumerate() {
        let Some(name) = &l.name else { continue };
        if let Some(i) = listeners[..j]
            .iter()
            .position(|o| o.name.as_ref() == Some(name))
        {
            return Err(r.err(
                spans[j].clone(),
                format!("listener[{j}].name"),
                format!(
                    "{name:?} names `listener[{i}]` ({}) already",
                    spans[i].clone().map_or("?".into(), |s| r.place(s))
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "sites_tests.rs"]
mod tests;
