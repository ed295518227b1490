//! Sites and routes as written, checked as a whole: a route that can never
//! match because an earlier route of its site takes every path it would
//! (routes are tried in order and the first match wins), the site that
//! answers Hosts no site lists (`default = true`), and the listeners a
//! site answers on (`listeners = ["public"]`).

use std::sync::Arc;

use toml::Spanned;

use super::raw::{RawRoute, RawSite};
use super::{ConfigError, ListenerConfig, Resolver, RouteConfig, SiteConfig};
use crate::edge::headers::HeaderEdits;
use crate::edge::Edge;

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

    /// Refuses a route an earlier route of the site always takes first.
    pub(super) fn check_shadowed(
        &self,
        site: usize,
        routes: &[Spanned<RawRoute>],
    ) -> Result<(), ConfigError> {
        for (j, later) in routes.iter().enumerate() {
            let w = Written::of(later.get_ref());
            for (i, earlier) in routes[..j].iter().enumerate() {
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
