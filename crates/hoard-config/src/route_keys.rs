//! Three keys of a site or route, resolved here: `max_body_size` (route
//! over site over `[server]`), `respond` (a fixed answer, see
//! [`hoard_edge::respond`]) and `client_no_cache` (see
//! [`hoard_policy::config::ClientNoCache`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use hoard_policy::config::ClientNoCache;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Resolver};
use hoard_edge::error_pages::content_type;
use hoard_edge::headers::REFUSED;
use hoard_edge::respond::Respond;
use hoard_edge::Edge;

/// `respond` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRespond {
    pub status: Spanned<u16>,
    pub body: Option<Spanned<String>>,
    pub body_file: Option<Spanned<String>>,
    pub content_type: Option<Spanned<String>>,
    pub headers: Option<BTreeMap<String, Spanned<String>>>,
}

impl Resolver<'_> {
    /// `client_no_cache` at `at`; default `"revalidate"`.
    pub(super) fn client_no_cache(
        &self,
        at: &str,
        raw: Option<Spanned<String>>,
    ) -> Result<ClientNoCache, ConfigError> {
        let Some(v) = raw else {
            return Ok(ClientNoCache::default());
        };
        ClientNoCache::parse(v.get_ref()).ok_or_else(|| {
            self.err(
                Some(v.span()),
                format!("{at}.client_no_cache"),
                format!("{:?}: expected \"revalidate\" or \"ignore\"", v.get_ref()),
            )
        })
    }

    /// The route's edge with its `respond` added (a route whose only edge
    /// key is `respond` gets an edge of its own).
    pub(super) fn with_respond(
        &self,
        at: &str,
        edge: Option<Arc<Edge>>,
        raw: Option<Spanned<RawRespond>>,
    ) -> Result<Option<Arc<Edge>>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(edge);
        };
        let span = raw.span();
        let respond = self.respond(&format!("{at}.respond"), raw.into_inner())?;
        let mut edge = edge.map(|e| (*e).clone()).unwrap_or_default();
        if edge.redirect.is_some() {
            return Err(self.err(
                Some(span),
                format!("{at}.respond"),
                "set either `redirect` or `respond`, not both".into(),
            ));
        }
        edge.respond = Some(Arc::new(respond));
        Ok(Some(Arc::new(edge)))
    }

    fn respond(&self, at: &str, raw: RawRespond) -> Result<Respond, ConfigError> {
        let code = *raw.status.get_ref();
        let status = StatusCode::from_u16(code)
            .ok()
            .filter(|_| (200..600).contains(&code))
            .ok_or_else(|| {
                self.err(
                    Some(raw.status.span()),
                    format!("{at}.status"),
                    format!("{code}: expected a final status, 200 to 599"),
                )
            })?;
        let (body, default_type) = match (raw.body, raw.body_file) {
            (Some(_), Some(f)) => {
                return Err(self.err(
                    Some(f.span()),
                    format!("{at}.body_file"),
                    "set either `body` or `body_file`, not both".into(),
                ))
            }
            (Some(b), None) => (
                Bytes::from(b.into_inner()),
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (None, Some(f)) => {
                let path = self.file_path(f.get_ref());
                let body = std::fs::read(&path).map_err(|e| {
                    self.err(
                        Some(f.span()),
                        format!("{at}.body_file"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                (Bytes::from(body), content_type(&path))
            }
            (None, None) => (
                Bytes::new(),
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
        };
        if !body.is_empty() && matches!(code, 204 | 304) {
            return Err(self.err(
                Some(raw.status.span()),
                format!("{at}.status"),
                format!("{code} has no body (RFC 9110 §15.3.5, §15.4.5)"),
            ));
        }
        let mut headers = HeaderMap::new();
        let content_type = match raw.content_type {
            None => default_type,
            Some(t) => HeaderValue::from_str(t.get_ref()).map_err(|_| {
                self.err(
                    Some(t.span()),
                    format!("{at}.content_type"),
                    format!("{:?} is not a valid field value", t.get_ref()),
                )
            })?,
        };
        if !body.is_empty() {
            headers.insert(CONTENT_TYPE, content_type);
        }
        for (name, value) in raw.headers.unwrap_or_default() {
            let key = format!("{at}.headers.{name}");
            let h = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                self.err(
                    Some(value.span()),
                    key.clone(),
                    format!("{name:?} is not a header name"),
                )
            })?;
            if h == CONTENT_TYPE {
                return Err(self.err(
                    Some(value.span()),
                    key,
                    "set by `respond.content_type` (or from the body file's extension), \
                     not in `headers`"
                        .into(),
                ));
            }
            if REFUSED.contains(&h.as_str()) {
                return Err(self.err(
                    Some(value.span()),
                    key,
                    format!(
                        "{name:?} belongs to the connection or the message framing and cannot \
                         be set"
                    ),
                ));
            }
            let v = HeaderValue::from_str(value.get_ref()).map_err(|_| {
                self.err(
                    Some(value.span()),
                    key.clone(),
                    format!("{:?} is not a valid field value", value.get_ref()),
                )
            })?;
            headers.append(h, v);
        }
        Ok(Respond::new(status, body, headers))
    }
}

#[cfg(test)]
mod tests;
