//! The pipeline's edge step: a route's redirect, limits, access and
//! credentials before anything is looked up, in nginx's order, then its
//! fixed answer (`respond`), if it has one (see
//! [`crate::edge`] for the rules themselves).

use std::sync::Arc;

use hoard_policy::cache_status::{CacheStatus, Outcome};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::limits::Limits;
use super::Pipeline;
use crate::body::ProxyBody;
use crate::config::PathMatch;
use crate::edge::limit::{retry_after, ConnGuard};
use crate::edge::template::Vars;
use crate::edge::Edge;
use crate::error::{ErrorKind, ProxyError};

impl Pipeline {
    /// Lets the request in (with its in-progress guard, if the route
    /// counts them) or answers it.
    pub(super) async fn admit(
        &self,
        edge: &Edge,
        limits: &Limits,
        path: &PathMatch,
        vars: &Vars<'_>,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<ConnGuard>>, Response<ProxyBody>> {
        if let Some(r) = &edge.redirect {
            self.counters.inc(&self.counters.edge_redirects);
            let captures = match path {
                PathMatch::Regex(re) => re.captures(vars.path),
                PathMatch::Prefix(_) => None,
            };
            let location = r.location(vars, captures.as_ref());
            let Ok(location) = HeaderValue::try_from(location) else {
                let e = ProxyError::internal("a redirect target that is no field value");
                return Err(self.error_response(&e, None));
            };
            let mut resp = Response::new(ProxyBody::Full(Some(format!("{}\n", r.status).into())));
            *resp.status_mut() = r.status;
            let h = resp.headers_mut();
            h.insert(header::LOCATION, location);
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            let cs = CacheStatus {
                detail: Some("redirect"),
                ..Default::default()
            };
            self.add_cache_status(&mut resp, &cs);
            super::note_outcome(Outcome::Redirect);
            return Err(resp);
        }
        if let Some(rate) = &limits.rate {
            if let Err(wait) = rate.check(vars.remote_addr) {
                self.counters.inc(&self.counters.edge_rate_limited);
                let e = ProxyError::client(
                    ErrorKind::RateLimited,
                    format!("{} over the route's rate", vars.remote_addr),
                );
                return Err(self.retry_later(&e, retry_after(wait)));
            }
        }
        let mut guard = None;
        if let Some(limit) = &limits.connections {
            match limit.enter(vars.remote_addr) {
                Some(g) => guard = Some(Arc::new(g)),
                None => {
                    self.counters.inc(&self.counters.edge_connections_limited);
                    let e = ProxyError::client(
                        ErrorKind::ConnectionLimit,
                        format!(
                            "{} has limit_connections requests in progress",
                            vars.remote_addr
                        ),
                    );
                    return Err(self.retry_later(&e, 1));
                }
            }
        }
        if !edge.access.admits(vars.remote_addr) {
            self.counters.inc(&self.counters.edge_access_denied);
            let e = ProxyError::client(
                ErrorKind::AccessDenied,
                format!("{} refused by allow/deny", vars.remote_addr),
            );
            return Err(self.error_response(&e, None));
        }
        if let Some(auth) = &edge.auth {
            if !auth.admits(headers).await {
                self.counters.inc(&self.counters.edge_auth_failed);
                let e = ProxyError::client(ErrorKind::AuthRequired, "no valid credentials");
                let mut resp = self.error_response(&e, None);
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, auth.challenge.clone());
                return Err(resp);
            }
        }
        Ok(guard)
    }

    /// A route's fixed answer (`respond`): never stored, never forwarded.
    pub(super) fn fixed_answer(
        &self,
        r: &crate::edge::respond::Respond,
        method: &http::Method,
    ) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.edge_responds);
        let mut resp = r.answer(method);
        let cs = CacheStatus {
            detail: Some("respond"),
            ..Default::default()
        };
        self.add_cache_status(&mut resp, &cs);
        super::note_outcome(Outcome::Respond);
        resp
    }

    fn retry_later(&self, e: &ProxyError, secs: u64) -> Response<ProxyBody> {
        let mut resp = self.error_response(e, None);
        debug_assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        resp
    }
}
