//! The edge keys of a route (and a site's `error_pages`) as written, and
//! how they become an [`Edge`]. Files named here (`users_file`, the error
//! pages) are read now, so a reload reads them again; a relative path is
//! taken from the configuration file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{HeaderName, StatusCode};
use toml::Spanned;

use super::raw::edge::{RawHeaderEdits, RawRedirect};
use super::raw::RawEdge;
use super::{Cidr, ConfigError, PathMatch, Resolver};
use hoard_edge::access::Access;
use hoard_edge::basic_auth::BasicAuth;
use hoard_edge::error_pages::{content_type, ErrorPages, Page};
use hoard_edge::headers::{HeaderEdits, Value, REFUSED};
use hoard_edge::htpasswd::Users;
use hoard_edge::limit::{Rate, RateSpec};
use hoard_edge::redirect::{Redirect, STATUSES};
use hoard_edge::template::{Template, Vars};
use hoard_edge::Edge;

/// Where a redirect's target lands, when it is a path this site serves.
#[derive(Debug)]
pub struct LoopProbe {
    path: String,
    to: String,
    span: std::ops::Range<usize>,
    key: String,
}

/// Default `limit.max_clients`.
pub const MAX_CLIENTS: usize = 100_000;

impl Resolver<'_> {
    /// A path as configured, from the configuration file's directory when relative.
    pub(super) fn file_path(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        match self.base {
            Some(base) if p.is_relative() => base.join(p),
            _ => p.to_path_buf(),
        }
    }

    /// `error_pages` at `at`, over `inherited` (a site's, for a route).
    pub(super) fn error_pages(
        &self,
        at: &str,
        raw: Option<BTreeMap<String, Spanned<String>>>,
        inherited: Option<&Arc<ErrorPages>>,
    ) -> Result<Option<Arc<ErrorPages>>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(inherited.cloned());
        };
        let mut pages = inherited.map(|p| (**p).clone()).unwrap_or_default();
        for (code, file) in raw {
            let key = format!("{at}.error_pages.{code}");
            let status = code
                .parse::<u16>()
                .ok()
                .filter(|c| (400..600).contains(c))
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| {
                    self.err(
                        Some(file.span()),
                        key.clone(),
                        format!("{code:?}: expected an error status, 400 to 599"),
                    )
                })?;
            let path = self.file_path(file.get_ref());
            let body = std::fs::read(&path).map_err(|e| {
                self.err(
                    Some(file.span()),
                    key.clone(),
                    format!("{}: {e}", path.display()),
                )
            })?;
            pages.insert(
                status,
                Page {
                    body: body.into(),
                    content_type: content_type(&path),
                },
            );
        }
        Ok((!pages.is_empty()).then(|| Arc::new(pages)))
    }

    pub(super) fn header_edits(
        &self,
        at: &str,
        raw: Option<Spanned<RawHeaderEdits>>,
    ) -> Result<HeaderEdits, ConfigError> {
        let Some(raw) = raw else {
            return Ok(HeaderEdits::default());
        };
        let raw = raw.into_inner();
        let name = |n: &str, span: std::ops::Range<usize>, what: &str| {
            let key = format!("{at}.{what}");
            let h = HeaderName::from_bytes(n.as_bytes()).map_err(|_| {
                self.err(
                    Some(span.clone()),
                    key.clone(),
                    format!("{n:?} is not a header name"),
                )
            })?;
            if REFUSED.contains(&h.as_str()) {
                return Err(self.err(
                    Some(span),
                    key,
                    format!(
                        "{n:?} belongs to the connection or the message framing and cannot be \
                         edited{}",
                        if h == http::header::HOST {
                            " (the origin's Host is `upstream.host`)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            Ok(h)
        };
        let mut edits = HeaderEdits::default();
        for r in raw.remove {
            edits.remove.push(name(r.get_ref(), r.span(), "remove")?);
        }
        for (list, what) in [(raw.set, "set"), (raw.add, "add")] {
            for (n, v) in list {
                let h = name(&n, v.span(), what)?;
                // Delivery variables ($cache_status...) exist on responses.
                let value = Value::parse_for(v.get_ref(), at.ends_with("response_headers"))
                    .map_err(|m| self.err(Some(v.span()), format!("{at}.{what}.{n}"), m))?;
                if what == "set" {
                    edits.set.push((h, value));
                } else {
                    edits.add.push((h, value));
                }
            }
        }
        Ok(edits)
    }

    fn cidrs(
        &self,
        key: &str,
        raw: Option<Vec<Spanned<String>>>,
    ) -> Result<Vec<Cidr>, ConfigError> {
        raw.unwrap_or_default()
            .iter()
            .map(|c| {
                Cidr::parse(c.get_ref()).map_err(|m| self.err(Some(c.span()), key.to_string(), m))
            })
            .collect()
    }

    /// The route's [`Edge`], `None` when it sets no edge key.
    pub(super) fn edge(
        &self,
        at: &str,
        raw: RawEdge,
        path: &PathMatch,
        site_pages: Option<&Arc<ErrorPages>>,
    ) -> Result<(Option<Arc<Edge>>, Option<LoopProbe>), ConfigError> {
        let mut edge = Edge {
            response_headers: self
                .header_edits(&format!("{at}.response_headers"), raw.response_headers)?,
            request_headers: self
                .header_edits(&format!("{at}.request_headers"), raw.request_headers)?,
            access: Access {
                allow: self.cidrs(&format!("{at}.allow"), raw.allow)?,
                deny: self.cidrs(&format!("{at}.deny"), raw.deny)?,
            },
            error_pages: self.error_pages(at, raw.error_pages, site_pages)?,
            ..Edge::default()
        };
        let mut probe = None;
        if let Some(r) = raw.redirect {
            let (redirect, p) = self.redirect(at, r, path)?;
            edge.redirect = Some(redirect);
            probe = p;
        }
        if let Some(a) = raw.basic_auth {
            let a = a.into_inner();
            let key = format!("{at}.basic_auth.users_file");
            let path = self.file_path(a.users_file.get_ref());
            let text = std::fs::read_to_string(&path).map_err(|e| {
                self.err(
                    Some(a.users_file.span()),
                    key.clone(),
                    format!("{}: {e}", path.display()),
                )
            })?;
            let users = Users::parse(&text).map_err(|(line, m)| {
                self.err(
                    Some(a.users_file.span()),
                    key.clone(),
                    format!("{}:{line}: {m}", path.display()),
                )
            })?;
            if users.is_empty() {
                return Err(self.err(
                    Some(a.users_file.span()),
                    key,
                    format!("{}: names no user: nobody could log in", path.display()),
                ));
            }
            let realm = a.realm.unwrap_or_else(|| "restricted".into());
            edge.auth =
                Some(Arc::new(BasicAuth::new(&realm, users).map_err(|m| {
                    self.err(None, format!("{at}.basic_auth.realm"), m)
                })?));
        }
        if let Some(l) = raw.limit {
            let l = l.into_inner();
            let rate = Rate::parse(l.rate.get_ref())
                .map_err(|m| self.err(Some(l.rate.span()), format!("{at}.limit.rate"), m))?;
            edge.rate = Some(RateSpec {
                rate,
                burst: l.burst.unwrap_or(0),
                max_clients: l.max_clients.unwrap_or(MAX_CLIENTS).max(1),
            });
        }
        if let Some(n) = raw.limit_connections {
            if *n.get_ref() == 0 {
                return Err(self.err(
                    Some(n.span()),
                    format!("{at}.limit_connections"),
                    "0 would refuse every request: at least 1".into(),
                ));
            }
            edge.connections = Some(*n.get_ref());
        }
        if let Some(s) = raw.signed_urls {
            edge.signed = Some(self.signed_urls(at, s)?);
        }
        Ok(((!edge.is_empty()).then(|| Arc::new(edge)), probe))
    }

    /// A redirect whose target the same route answers again sends clients
    /// round forever: refused. `probes[i]` belongs to route `i` of `site`.
    pub(super) fn check_loops(
        &self,
        site: &super::SiteConfig,
        probes: Vec<Option<LoopProbe>>,
    ) -> Result<(), ConfigError> {
        for (i, probe) in probes.into_iter().enumerate() {
            let Some(p) = probe else { continue };
            if site.route_for(&p.path) == Some(i) {
                return Err(self.err(
                    Some(p.span),
                    p.key,
                    format!(
                        "{:?} redirects to itself: a request for {:?} comes back to this route",
                        p.to, p.path
                    ),
                ));
            }
        }
        Ok(())
    }

    fn redirect(
        &self,
        at: &str,
        raw: Spanned<RawRedirect>,
        path: &PathMatch,
    ) -> Result<(Redirect, Option<LoopProbe>), ConfigError> {
        let raw = raw.into_inner();
        let status = match &raw.status {
            None => StatusCode::MOVED_PERMANENTLY,
            Some(s) if STATUSES.contains(s.get_ref()) => {
                StatusCode::from_u16(*s.get_ref()).expect("a redirect status")
            }
            Some(s) => {
                return Err(self.err(
                    Some(s.span()),
                    format!("{at}.redirect.status"),
                    format!("{}: a redirect is 301, 302, 303, 307 or 308", s.get_ref()),
                ))
            }
        };
        let groups = match path {
            PathMatch::Regex(re) => re.captures_len() - 1,
            PathMatch::Prefix(_) => 0,
        };
        let key = format!("{at}.redirect.to");
        let to = Template::parse(raw.to.get_ref(), groups)
            .map_err(|m| self.err(Some(raw.to.span()), key.clone(), m))?;
        if raw.to.get_ref().is_empty() {
            return Err(self.err(Some(raw.to.span()), key, "empty target".into()));
        }
        // Where a request lands after the redirect, when that can be known
        // here: checked against the site's routes once they are all read.
        let sample = match path {
            PathMatch::Prefix(p) => Some(p.as_str()),
            PathMatch::Regex(_) => None,
        };
        let vars = Vars {
            host: "",
            request_uri: sample.unwrap_or("/"),
            remote_addr: std::net::Ipv4Addr::LOCALHOST.into(),
            scheme: "http",
            path: sample.unwrap_or("/"),
            delivery: None,
        };
        let probe = (to.fixed().is_some() || sample.is_some())
            .then(|| to.expand(&vars, None))
            .filter(|t| t.starts_with('/') && !t.starts_with("//"))
            .map(|t| LoopProbe {
                path: t.split(['?', '#']).next().unwrap_or("").to_string(),
                to: raw.to.get_ref().clone(),
                span: raw.to.span(),
                key,
            });
        Ok((Redirect { to, status }, probe))
    }
}
