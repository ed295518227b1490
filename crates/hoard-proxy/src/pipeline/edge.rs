//! A route's registered steps (see [`super::phases`]): in `recv`, its
//! redirect, limits, access, credentials and a signed link's check before
//! anything is looked up, in nginx's order, then its fixed answer
//! (`respond`) and its request edits; in `deliver`, its error pages and response edits (see
//! [`hoard_edge`] for the rules themselves).

use std::sync::Arc;

use hoard_policy::cache_status::{CacheStatus, Outcome};
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::limits::Limits;
use super::phases::{DeliverStep, RecvStep, RouteSteps};
use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use hoard_config::PathMatch;
use hoard_edge::error_pages::{ErrorPages, Generated};
use hoard_edge::limit::{retry_after, ConnGuard};
use hoard_edge::respond::Respond;
use hoard_edge::template::Vars;
use hoard_edge::Edge;
use hoard_origin::error::{ErrorKind, ProxyError};

impl Pipeline {
    /// The route's `recv` steps, in order (see [`RouteSteps`]): the request
    /// goes on (with its in-progress guard, if the route counts them), or
    /// the route answers it, its `deliver` steps applied.
    pub(super) async fn recv_steps(
        &self,
        steps: &RouteSteps,
        limits: &Limits,
        ctx: &mut Ctx<'_>,
        tls: bool,
    ) -> Result<Option<Arc<ConnGuard>>, Response<ProxyBody>> {
        let Some(edge) = ctx.route.edge.as_deref() else {
            return Ok(None);
        };
        // Worked out once a step needs them (a signed link's check does not).
        let mut vars = None;
        macro_rules! vars {
            () => {
                &*vars.get_or_insert_with(|| {
                    super::edge_vars(&ctx.uri, &ctx.authority, ctx.client, tls)
                })
            };
        }
        let client = ctx.client;
        let mut guard = None;
        // A signed link's target without its signature, put in place once
        // the steps no longer read the request's (`$request_uri` stays the
        // client's, as nginx's).
        let mut unsigned = None;
        for step in steps.recv.iter() {
            let refused = match step {
                RecvStep::Redirect => edge
                    .redirect
                    .as_ref()
                    .map(|r| self.redirect(r, &ctx.route.path, vars!())),
                RecvStep::Rate => limits.rate.as_ref().and_then(|rate| {
                    let wait = rate.check(client).err()?;
                    self.counters.inc(&self.counters.edge_rate_limited);
                    let e = ProxyError::client(
                        ErrorKind::RateLimited,
                        format!("{} over the route's rate", client),
                    );
                    Some(self.retry_later(&e, retry_after(wait)))
                }),
                RecvStep::Connections => match &limits.connections {
                    Some(limit) => match limit.enter(client) {
                        Some(g) => {
                            guard = Some(Arc::new(g));
                            None
                        }
                        None => {
                            self.counters.inc(&self.counters.edge_connections_limited);
                            let e = ProxyError::client(
                                ErrorKind::ConnectionLimit,
                                format!("{} has limit_connections requests in progress", client),
                            );
                            Some(self.retry_later(&e, 1))
                        }
                    },
                    None => None,
                },
                RecvStep::Access => (!edge.access.admits(client)).then(|| {
                    self.counters.inc(&self.counters.edge_access_denied);
                    let e = ProxyError::client(
                        ErrorKind::AccessDenied,
                        format!("{} refused by allow/deny", client),
                    );
                    self.error_response(&e, None)
                }),
                RecvStep::Auth => match &edge.auth {
                    Some(auth) if !auth.admits(&ctx.headers).await => {
                        self.counters.inc(&self.counters.edge_auth_failed);
                        let e = ProxyError::client(ErrorKind::AuthRequired, "no valid credentials");
                        let mut resp = self.error_response(&e, None);
                        resp.headers_mut()
                            .insert(header::WWW_AUTHENTICATE, auth.challenge.clone());
                        Some(resp)
                    }
                    _ => {
                        // The credentials were hoard's (see `edge::basic_auth`).
                        ctx.headers.remove(header::AUTHORIZATION);
                        None
                    }
                },
                RecvStep::Signed => match &edge.signed {
                    // A cluster member's fill: the first node checked the
                    // link and sent its target without the signature.
                    Some(_) if ctx.from_peer => None,
                    Some(signed) => {
                        match signed.check(ctx.uri.path(), ctx.uri.query(), self.clock.now()) {
                            Ok(target) => {
                                unsigned = Some(target);
                                None
                            }
                            Err(r) => Some(self.signed_refusal(r)),
                        }
                    }
                    None => None,
                },
                RecvStep::Respond => {
                    // After the limits and access checks, which protect it.
                    if let Some(r) = &edge.respond {
                        let mut resp = self.fixed_answer(r, &ctx.method);
                        deliver_steps(steps, edge, &mut resp, vars!());
                        if let Some(guard) = guard {
                            resp.extensions_mut().insert(guard);
                        }
                        return Err(resp);
                    }
                    None
                }
                RecvStep::RequestHeaders => {
                    edge.request_headers.apply(&mut ctx.headers, vars!());
                    None
                }
            };
            if let Some(mut resp) = refused {
                deliver_steps(steps, edge, &mut resp, vars!());
                return Err(resp);
            }
        }
        if let Some(target) = unsigned {
            // The key and the origin see the link without its signature:
            // every valid link to a file shares one stored object.
            match http::uri::PathAndQuery::try_from(target) {
                Ok(pq) => ctx.uri = http::Uri::from(pq),
                Err(_) => {
                    let e = ProxyError::internal("a signed link's target that is no target");
                    return Err(self.error_response(&e, None));
                }
            }
        }
        Ok(guard)
    }

    /// A link `signed_urls` refuses: 403 without a valid signature, 410
    /// past its expiry.
    fn signed_refusal(&self, r: hoard_edge::signed::Refusal) -> Response<ProxyBody> {
        let e = match r {
            hoard_edge::signed::Refusal::Invalid(why) => {
                self.counters.inc(&self.counters.edge_signature_refused);
                ProxyError::client(ErrorKind::BadSignature, why)
            }
            hoard_edge::signed::Refusal::Expired => {
                self.counters.inc(&self.counters.edge_link_expired);
                ProxyError::client(ErrorKind::LinkExpired, "the signed link's expiry passed")
            }
        };
        self.error_response(&e, None)
    }

    /// A route's `redirect`: every request answered with it.
    fn redirect(
        &self,
        r: &hoard_edge::redirect::Redirect,
        path: &PathMatch,
        vars: &Vars<'_>,
    ) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.edge_redirects);
        let captures = match path {
            PathMatch::Regex(re) => re.captures(vars.path),
            PathMatch::Prefix(_) => None,
        };
        let location = r.location(vars, captures.as_ref());
        let Ok(location) = HeaderValue::try_from(location) else {
            let e = ProxyError::internal("a redirect target that is no field value");
            return self.error_response(&e, None);
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
        resp
    }

    /// A route's fixed answer (`respond`): never stored, never forwarded.
    pub(super) fn fixed_answer(&self, r: &Respond, method: &http::Method) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.edge_responds);
        let mut resp = respond_answer(r, method);
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

/// The route's `deliver` steps on one of its responses: an error page for
/// hoard's own error, then the response header edits.
pub(super) fn deliver_steps(
    steps: &RouteSteps,
    edge: &Edge,
    resp: &mut Response<ProxyBody>,
    vars: &Vars<'_>,
) {
    for step in steps.deliver.iter() {
        match step {
            DeliverStep::ErrorPage => {
                if let Some(pages) = &edge.error_pages {
                    replace_error(pages, resp);
                }
            }
            DeliverStep::ResponseHeaders => edge.response_headers.apply(resp.headers_mut(), vars),
        }
    }
}

/// A route's fixed answer to one request: HEAD gets the fields and no body
/// (RFC 9110 §9.3.2).
fn respond_answer(r: &Respond, method: &http::Method) -> Response<ProxyBody> {
    let body = if *method == http::Method::HEAD || r.body.is_empty() {
        ProxyBody::Empty
    } else {
        ProxyBody::Full(Some(r.body.clone()))
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = r.status;
    *resp.headers_mut() = r.headers.clone();
    resp
}

/// Puts the page of `resp`'s status in place of the body of an error hoard
/// generated.
pub(super) fn replace_error(pages: &ErrorPages, resp: &mut Response<ProxyBody>) {
    if resp.extensions().get::<Generated>().is_none() {
        return;
    }
    if let Some(page) = pages.get(resp.status()) {
        *resp.body_mut() = ProxyBody::Full(Some(page.body.clone()));
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, page.content_type.clone());
        h.remove(header::CONTENT_LENGTH);
    }
}
