//! Passing a request to the origin without the cache, and invalidation
//! after unsafe methods (RFC 9111 §4.4).

use hoard_policy::cache_status::{CacheStatus, Fwd};
use http::header::{self, HeaderMap};
use http::{Method, Response, Uri};

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use hoard_config::rules::Rule;
use hoard_origin::error::ProxyError;
use hoard_origin::ReqBody;

impl Pipeline {
    /// Forwards the request as is and streams the response back. `rule`:
    /// the route rule that sent it here, and how `Cache-Status` says so.
    pub(crate) async fn pass(
        &self,
        ctx: &Ctx<'_>,
        body: Option<ReqBody>,
        rule: Option<(Fwd, &Rule)>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        self.counters.inc(&self.counters.cache_pass);
        let oreq = self.origin_request(ctx, false, body);
        let resp = ctx.upstream.send(oreq).await?;
        let (parts, body) = resp.into_parts();
        let mut headers = parts.headers;
        hoard_policy::headers::strip_hop_by_hop(&mut headers);
        if !is_safe(&ctx.method) && (parts.status.is_success() || parts.status.is_redirection()) {
            self.invalidate(ctx, &headers).await;
        }
        self.add_via(&mut headers, parts.version);
        let fwd = match rule {
            Some((fwd, _)) => fwd,
            None if ctx.method == Method::GET || ctx.method == Method::HEAD => Fwd::Bypass,
            None => Fwd::Method,
        };
        let cs = CacheStatus {
            fwd: Some(fwd),
            fwd_status: Some(parts.status.as_u16()),
            rule: rule.map(|(_, r)| r.label.clone()),
            ..Default::default()
        };
        if !ctx.run.cfg.admin.forward_tags {
            hoard_policy::tags::strip(&mut headers);
        }
        let mut r = Response::new(ProxyBody::Origin(body));
        *r.status_mut() = parts.status;
        *r.headers_mut() = headers;
        self.add_cache_status(&mut r, &cs);
        Ok(r)
    }

    /// Removes the target URI and the same-origin `Location` and
    /// `Content-Location` URIs from the cache (RFC 9111 §4.4), off the
    /// serving threads (see `Store::invalidate`).
    async fn invalidate(&self, ctx: &Ctx<'_>, resp_headers: &HeaderMap) {
        let mut targets = vec![(
            ctx.uri.path().to_string(),
            ctx.uri.query().map(str::to_string),
        )];
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let Some(v) = resp_headers.get(&name).and_then(|v| v.to_str().ok()) else {
                continue;
            };
            let Ok(uri) = v.parse::<Uri>() else { continue };
            if let Some(a) = uri.authority() {
                if !a.as_str().eq_ignore_ascii_case(&ctx.authority) {
                    continue; // another origin: never invalidated (§4.4)
                }
            }
            if uri.path().starts_with('/') {
                targets.push((uri.path().to_string(), uri.query().map(str::to_string)));
            }
        }
        for (path, query) in targets {
            let Some(route) = ctx.site.route_for(&path).map(|i| &ctx.site.routes[i]) else {
                continue;
            };
            let key = ctx.key_for(route, &path, query.as_deref());
            // A fill in flight fetched before the change: not stored, not joined.
            self.fills.coalescer.detach_key(&key.text);
            // The object and its partial copy; a fill of either that
            // started before stores nothing (not only a coalesced one).
            let partial = crate::fill::partial_key(&key);
            let n = self.store.invalidate(key.digest, &key.text).await
                + self.store.invalidate(partial.digest, &partial.text).await;
            self.counters.add(&self.counters.invalidations, n as u64);
        }
    }
}

fn is_safe(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}
