//! A route's storing rules (`[[site.route.store]]`): decisions on what the
//! origin sent, as Varnish's `vcl_backend_response` makes them. Each rule
//! has conditions on the response (its status, a header present or
//! matching, its content type) and what to do: `action = "pass"` (not
//! stored; the key passes for the route's `hit_for_pass` time), or a `ttl`
//! that replaces the response's own lifetime, and `grace`
//! (stale-while-revalidate) or `stale_if_error` windows. Rules are tried
//! in order; the first whose conditions all hold decides.
//!
//! ```toml
//! [[site.route.store]]
//! name = "errors-briefly"
//! status = ["5xx", 404]
//! ttl = "10s"
//! ```
//!
//! Pure: the fill reads them when it judges a response (`fill::decide`).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, CONTENT_TYPE};
use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::units::Dur;
use crate::Resolver;

/// One rule, resolved.
#[derive(Debug, Clone)]
pub struct StoreRule {
    /// Its name (`Cache-Status` says `store-rule:NAME` when it refuses).
    pub name: String,
    /// What `Cache-Status` says when it refuses storing.
    pub label: std::sync::Arc<str>,
    /// Statuses, as ranges `lo..=hi` (`"5xx"` is 500..=599); empty: any.
    pub status: Vec<(u16, u16)>,
    /// A header present, or whose value matches a `*` pattern (without case).
    pub header: Option<(HeaderName, Option<String>)>,
    /// The media type (before any `;`) matches this `*` pattern.
    pub content_type: Option<String>,
    /// What it decides.
    pub action: StoreAction,
}

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreAction {
    /// Not stored (the key passes for a while).
    Pass,
    /// Stored with these lifetimes where given (else the response's).
    Store {
        /// The freshness lifetime.
        ttl: Option<Duration>,
        /// Stale-while-revalidate.
        grace: Option<Duration>,
        /// Stale-if-error.
        stale_if_error: Option<Duration>,
    },
}

impl StoreRule {
    /// Whether every condition holds for a response of `status` with
    /// `headers`.
    pub fn matches(&self, status: u16, headers: &HeaderMap) -> bool {
        if !self.status.is_empty()
            && !self
                .status
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&status))
        {
            return false;
        }
        if let Some((name, value)) = &self.header {
            let ok = headers.get_all(name).iter().any(|v| match value {
                None => true,
                Some(p) => v.to_str().is_ok_and(|v| {
                    crate::rules::glob(&p.to_ascii_lowercase(), &v.trim().to_ascii_lowercase())
                }),
            });
            if !ok {
                return false;
            }
        }
        if let Some(p) = &self.content_type {
            let ct = headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase()
                });
            if !ct.is_some_and(|ct| crate::rules::glob(p, &ct)) {
                return false;
            }
        }
        true
    }
}

/// The first rule of `rules` that holds for the response.
pub fn first_match<'r>(
    rules: &'r [StoreRule],
    status: u16,
    headers: &HeaderMap,
) -> Option<&'r StoreRule> {
    rules.iter().find(|r| r.matches(status, headers))
}

/// A status as written: `404` or `"5xx"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawStatus {
    /// `404`.
    Code(u16),
    /// `"5xx"`, `"404"`.
    Text(String),
}

/// A rule as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStoreRule {
    pub name: Option<Spanned<String>>,
    pub status: Option<Spanned<Vec<RawStatus>>>,
    pub header: Option<Spanned<String>>,
    pub content_type: Option<Spanned<String>>,
    pub action: Option<Spanned<String>>,
    pub ttl: Option<Dur>,
    pub grace: Option<Dur>,
    pub stale_if_error: Option<Dur>,
}

impl Resolver<'_> {
    /// A route's `store` list (`at` names the route).
    pub(super) fn store_rules(
        &self,
        at: &str,
        raw: Vec<Spanned<RawStoreRule>>,
    ) -> Result<Vec<StoreRule>, ConfigError> {
        let mut out: Vec<StoreRule> = Vec::new();
        for (i, r) in raw.into_iter().enumerate() {
            let at = format!("{at}.store[{i}]");
            let span = r.span();
            let r = r.into_inner();
            let name = r.name.map_or_else(|| format!("{i}"), Spanned::into_inner);
            if out.iter().any(|o| o.name == name) {
                return Err(self.err(
                    Some(span),
                    format!("{at}.name"),
                    format!("{name:?} names two rules"),
                ));
            }
            let mut status = Vec::new();
            if let Some(list) = r.status {
                let sp = list.span();
                for s in list.into_inner() {
                    let range = match &s {
                        RawStatus::Code(c) if (100..=599).contains(c) => Some((*c, *c)),
                        RawStatus::Text(t) => match t.as_bytes() {
                            [d @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
                                let lo = u16::from(d - b'0') * 100;
                                Some((lo, lo + 99))
                            }
                            _ => t
                                .parse::<u16>()
                                .ok()
                                .filter(|c| (100..=599).contains(c))
                                .map(|c| (c, c)),
                        },
                        RawStatus::Code(_) => None,
                    };
                    let Some(range) = range else {
                        return Err(self.err(
                            Some(sp),
                            format!("{at}.status"),
                            format!("{s:?}: a status (404) or a class (\"5xx\")"),
                        ));
                    };
                    status.push(range);
                }
            }
            let header = match r.header {
                None => None,
                Some(h) => {
                    let (n, v) = match h.get_ref().split_once(':') {
                        Some((n, v)) => (n.trim(), Some(v.trim().to_string())),
                        None => (h.get_ref().trim(), None),
                    };
                    let n = HeaderName::from_bytes(n.as_bytes()).map_err(|_| {
                        self.err(
                            Some(h.span()),
                            format!("{at}.header"),
                            format!(
                                "{n:?} is not a header name (write \"Name\" or \"Name: value\")"
                            ),
                        )
                    })?;
                    Some((n, v))
                }
            };
            let content_type = r.content_type.map(|c| c.into_inner().to_ascii_lowercase());
            let timing = r.ttl.is_some() || r.grace.is_some() || r.stale_if_error.is_some();
            let action = match r.action.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
                Some(("pass", sp)) if timing => {
                    return Err(self.err(
                        Some(sp),
                        format!("{at}.action"),
                        "a rule that passes sets no ttl, grace or stale_if_error".into(),
                    ))
                }
                Some(("pass", _)) => StoreAction::Pass,
                Some(("store", _)) | None if timing => StoreAction::Store {
                    ttl: r.ttl.map(|d| d.0),
                    grace: r.grace.map(|d| d.0),
                    stale_if_error: r.stale_if_error.map(|d| d.0),
                },
                None | Some(("store", _)) => {
                    return Err(self.err(
                        Some(span),
                        at,
                        "decides nothing: action = \"pass\", or a ttl, grace or stale_if_error"
                            .into(),
                    ))
                }
                Some((other, sp)) => {
                    return Err(self.err(
                        Some(sp),
                        format!("{at}.action"),
                        format!("{other:?}: expected \"pass\" or \"store\""),
                    ))
                }
            };
            out.push(StoreRule {
                label: format!("store-rule:{name}").into(),
                name,
                status,
                header,
                content_type,
                action,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        status: Vec<(u16, u16)>,
        header: Option<(&str, Option<&str>)>,
        ct: Option<&str>,
    ) -> StoreRule {
        StoreRule {
            name: "r".into(),
            label: "store-rule:r".into(),
            status,
            header: header.map(|(n, v)| {
                (
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    v.map(String::from),
                )
            }),
            content_type: ct.map(String::from),
            action: StoreAction::Pass,
        }
    }

    #[test]
    fn conditions_all_hold() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "image/png; q=1".parse().unwrap());
        h.insert("x-private", "Yes".parse().unwrap());
        assert!(rule(vec![], None, None).matches(200, &h));
        assert!(rule(vec![(500, 599)], None, None).matches(503, &h));
        assert!(!rule(vec![(500, 599), (404, 404)], None, None).matches(200, &h));
        assert!(rule(vec![], Some(("x-private", None)), Some("image/*")).matches(200, &h));
        assert!(rule(vec![], Some(("x-private", Some("y*"))), None).matches(200, &h));
        assert!(!rule(vec![], Some(("x-private", Some("no"))), None).matches(200, &h));
        assert!(!rule(vec![], None, Some("text/*")).matches(200, &h));
        assert!(!rule(vec![], Some(("x-other", None)), None).matches(200, &h));
    }
}
