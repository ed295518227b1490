//! Purges: what the admin API, the `PURGE` method and `hoard purge` share.
//!
//! A purge names a URL, a URL prefix, a host or a tag; the store's
//! catalogue finds the keys (every variant, every keyed header or cookie
//! value, every slice) and the store removes their objects from every tier,
//! or with `soft` makes them stale. Fills that raced the purge do not store
//! what they fetched before it (see `hoard_store::catalog`).
//!
//! A regex purge is a ban (`hoard_store::bans`): it takes effect at once
//! (every hit is checked against the pending bans, fills racing it do not
//! store) and a background sweep removes what it selects; the answer does
//! not wait for the sweep. At most `admin.max_pending_bans` are pending:
//! the admin API refuses one more with 429; one that comes from another
//! member is applied at once instead (a scan, as a prefix purge is).

use std::borrow::Cow;

use crate::request_body::RequestBody;
use bytes::Bytes;
use hoard_policy::key::{normalize_host, KeyInput, KeyUrl};
use hoard_policy::target::{normalise_authority, normalise_path_and_query};
use hoard_store::catalog::Selector;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};

use super::Pipeline;
use crate::body::ProxyBody;

/// The request field that asks a `PURGE` to be soft.
pub const SOFT_PURGE_FIELD: &str = "soft-purge";

impl Pipeline {
    /// The selector of one URL, keyed as the route that serves it keys it
    /// (query normalisation included; keyed headers and cookies match any
    /// value).
    pub fn url_selector(
        &self,
        scheme: &str,
        authority: &str,
        path: &str,
        query: Option<&str>,
    ) -> Selector {
        // The same normal form as a request's (`hoard_policy::target`), so a
        // purge names what a request for this URL would have stored.
        let authority = normalise_authority(authority, scheme).unwrap_or(Cow::Borrowed(authority));
        let authority = authority.as_ref();
        let (path, query) = normalise_path_and_query(path, query)
            .unwrap_or((Cow::Borrowed(path), query.map(Cow::Borrowed)));
        let (path, query) = (path.as_ref(), query.as_deref());
        let host = normalize_host(authority, scheme);
        let run = self.snapshot();
        let route = super::select_site(&run.cfg, &host, scheme == "https", None).and_then(|s| {
            let site = &run.cfg.sites[s];
            site.route_for(path).map(|r| &site.routes[r])
        });
        let target = route.and_then(|route| {
            let mut t = route.key.clone();
            t.scheme = true;
            t.host = true;
            t.headers.clear();
            t.cookies.clear();
            let key = t.key(KeyInput {
                scheme,
                host: authority,
                path,
                query,
                headers: &HeaderMap::new(),
            });
            KeyUrl::parse(&key.text).map(|k| k.target.to_string())
        });
        let target = target.unwrap_or_else(|| match query {
            Some(q) => format!("{path}?{q}"),
            None => path.to_string(),
        });
        Selector::Url {
            scheme: scheme.to_string(),
            host,
            target,
        }
    }

    /// Runs a purge; returns how many objects it removed or made stale.
    /// `source` names who asked, for the log.
    pub async fn purge(&self, selector: &Selector, soft: bool, source: &str) -> usize {
        let c = &self.counters;
        c.inc(match selector {
            Selector::Url { .. } => &c.purges_url,
            Selector::Prefix(_) => &c.purges_prefix,
            Selector::Host(_) => &c.purges_host,
            Selector::Tag(_) => &c.purges_tag,
            Selector::Regex(_) => &c.purges_regex,
            // Not a purge kind of the API (invalidations count apart).
            Selector::Key(_) => &c.purges_url,
        });
        if soft {
            c.inc(&c.purges_soft);
        }
        let started = tokio::time::Instant::now();
        let detached = if soft {
            0
        } else {
            self.fills
                .coalescer
                .detach(|key, headers| selector.selects(key, headers))
        };
        let n = match selector {
            Selector::Regex(_) => self.ban(selector, soft, source).await,
            _ => {
                let n = self.store.purge(selector, soft, self.clock.now()).await;
                self.purge_log.note(
                    self.clock.now(),
                    selector.kind(),
                    selector.pattern(),
                    soft,
                    source,
                    Some(n),
                );
                n
            }
        };
        c.add(&c.purged_objects, n as u64);
        tracing::info!(
            source,
            kind = selector.kind(),
            what = ?selector,
            soft,
            purged = n,
            fills_detached = detached,
            ms = started.elapsed().as_millis() as u64,
            "purge"
        );
        n
    }

    /// Adds a ban for a regex purge; returns how many keys its sweep will
    /// visit. With the list full, the purge is applied at once instead.
    async fn ban(&self, selector: &Selector, soft: bool, source: &str) -> usize {
        let counters = self.counters.clone();
        let sweep_source = source.to_string();
        let log = self.purge_log.clone();
        let entry = log.note(
            self.clock.now(),
            selector.kind(),
            selector.pattern(),
            soft,
            source,
            None,
        );
        let swept = move |ban: &hoard_store::bans::Ban, n: usize| {
            log.done(entry, n);
            tracing::info!(
                source = sweep_source,
                ban = ban.id,
                what = ?ban.selector,
                soft = ban.soft,
                purged = n,
                "ban swept"
            );
            counters.add(&counters.purged_objects, n as u64);
        };
        match self
            .store
            .ban(selector, soft, self.clock.now(), swept)
            .await
        {
            // Objects are counted when the sweep has removed them.
            Ok(_) => 0,
            Err(full) => {
                self.counters.inc(&self.counters.bans_refused);
                tracing::warn!(source, what = ?selector, "{full}: applied at once instead");
                let n = self.store.purge(selector, soft, self.clock.now()).await;
                self.purge_log.done(entry, n);
                n
            }
        }
    }

    /// True when a regex purge would be refused now: `admin.max_pending_bans`
    /// bans are pending.
    pub fn bans_full(&self) -> bool {
        let bans = self.store.bans();
        bans.pending() >= bans.max()
    }

    /// Runs a purge here and, in a cluster, on every other member (see
    /// `cluster::purge`); the JSON answer: `{"purged": N}`, in a cluster
    /// with `N` the members' total, `"members": [{"node": "n1", "state":
    /// "acked", "purged": 1}, ...]` and `"nodes": {"n1": "acked", ...}`.
    ///
    /// Applied here first (with a bus, this node's position in the log then
    /// means applied): a request forwarded meanwhile to an owner that has
    /// not applied it yet may bring back the old body, which this node then
    /// serves but does not keep (`Cluster::purge_window`).
    pub async fn purge_everywhere(&self, selector: &Selector, soft: bool, source: &str) -> String {
        let n = self.purge(selector, soft, source).await;
        let mut local = serde_json::json!({ "purged": n });
        if let Selector::Regex(_) = selector {
            // The sweep runs on: how many bans (this one included) are pending.
            local["pending_bans"] = self.store.bans().pending().into();
        }
        match &self.cluster {
            None => local.to_string(),
            Some(c) => {
                let started = tokio::time::Instant::now();
                let spread = c.spread(selector, soft, n as u64).await;
                self.metrics.purge_fanout(started.elapsed());
                let nodes: serde_json::Map<String, serde_json::Value> = spread
                    .acks
                    .iter()
                    .map(|a| (a.node.clone(), a.ack.as_str().into()))
                    .collect();
                let mut answer = local;
                answer["purged"] = spread
                    .acks
                    .iter()
                    .filter_map(|a| a.purged)
                    .sum::<u64>()
                    .into();
                answer["members"] = spread.acks.iter().map(|a| a.to_json()).collect();
                answer["nodes"] = nodes.into();
                match spread.log {
                    Some(Ok(entry)) => answer["entry"] = entry.to_string().into(),
                    // The log could not take it: sent over HTTP instead.
                    Some(Err(())) => answer["bus"] = "unreachable".into(),
                    None => {}
                }
                answer.to_string()
            }
        }
    }

    /// `POST` of `cluster::purge::PATH` on a main listener: a purge another
    /// member fanned out. Signed by a member, or 403; applied here only.
    pub(crate) async fn peer_purge(&self, req: Request<RequestBody>) -> Response<ProxyBody> {
        let (hop, body) = match self.peer_body(req).await {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        let Some((selector, soft)) = hoard_cluster::purge::decode(&body) else {
            return json_response(StatusCode::BAD_REQUEST, "{\"error\":\"selector\"}\n".into());
        };
        let n = self
            .purge(&selector, soft, &format!("member {}", hop.node))
            .await;
        json_response(StatusCode::OK, format!("{{\"purged\":{n}}}\n"))
    }

    /// `POST` of `acme::share::PATH` on a main listener: another member's
    /// ACME message (a challenge answer, a certificate, a fetch). Signed
    /// by a member, or 403.
    pub(crate) async fn peer_acme(&self, req: Request<RequestBody>) -> Response<ProxyBody> {
        let (hop, body) = match self.peer_body(req).await {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        let Some(acme) = &self.acme else {
            return json_response(StatusCode::NOT_FOUND, "{\"error\":\"no ACME\"}\n".into());
        };
        let (status, answer) = acme.peer_message(&hop.node, &body).await;
        json_response(status, answer)
    }

    /// The hop and body (up to 64 KiB) of a member's signed `POST`; 403
    /// when unsigned or not in a cluster, 400 when the body breaks off.
    async fn peer_body(
        &self,
        req: Request<RequestBody>,
    ) -> Result<(hoard_cluster::peer_auth::PeerHop, bytes::Bytes), Response<ProxyBody>> {
        let refuse = |msg: &str| {
            self.counters.inc(&self.counters.purges_refused);
            json_response(StatusCode::FORBIDDEN, format!("{{\"error\":\"{msg}\"}}\n"))
        };
        let Some(cluster) = &self.cluster else {
            return Err(refuse("not in a cluster"));
        };
        let (mut parts, body) = req.into_parts();
        let field = parts
            .headers
            .get(hoard_cluster::peer_auth::FIELD)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let Some(hop) = cluster.take_hop(&mut parts.headers, &parts.method, &parts.uri) else {
            return Err(refuse("a member's signature is required"));
        };
        let body =
            match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, 64 * 1024))
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return Err(json_response(
                        StatusCode::BAD_REQUEST,
                        "{\"error\":\"body\"}\n".into(),
                    ))
                }
            };
        let body_field = parts.headers.get(hoard_cluster::peer_auth::BODY_FIELD);
        if let Err(why) =
            cluster.check_body(field.as_deref().unwrap_or_default(), &body, body_field)
        {
            tracing::info!(member = %hop.node, reason = why, "a member's message refused");
            return Err(refuse(why));
        }
        Ok((hop, body))
    }

    /// `PURGE /path` on a main listener: allowed from `admin.purge_allow`
    /// only (405 when the list is empty, 403 from elsewhere).
    pub(crate) async fn purge_method(
        &self,
        req: Request<RequestBody>,
        client: std::net::IpAddr,
        tls: bool,
    ) -> Response<ProxyBody> {
        let allow = &self.run().cfg.admin.purge_allow;
        let refuse = |status: StatusCode, msg: &str| {
            self.counters.inc(&self.counters.purges_refused);
            json_response(status, format!("{{\"error\":\"{msg}\"}}\n"))
        };
        if allow.is_empty() {
            return refuse(StatusCode::METHOD_NOT_ALLOWED, "PURGE is not enabled");
        }
        if !allow.iter().any(|c| c.contains(client)) {
            tracing::info!(%client, "PURGE refused: client not in purge_allow");
            return refuse(StatusCode::FORBIDDEN, "client not allowed to purge");
        }
        let authority = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                req.headers()
                    .get(header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            })
            .unwrap_or_default();
        let scheme = if tls { "https" } else { "http" };
        let selector = self.url_selector(scheme, &authority, req.uri().path(), req.uri().query());
        let soft = req
            .headers()
            .get(SOFT_PURGE_FIELD)
            .is_some_and(|v| v.as_bytes() == b"1" || v.as_bytes().eq_ignore_ascii_case(b"true"));
        let answer = self
            .purge_everywhere(&selector, soft, &client.to_string())
            .await;
        json_response(StatusCode::OK, answer + "\n")
    }
}

/// A JSON response that no cache keeps (also the admin API's).
pub fn json_response(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::Full(Some(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The cluster's log reader applies other nodes' purges here.
impl hoard_cluster::bus::BusNode for Pipeline {
    fn cluster(&self) -> Option<&std::sync::Arc<hoard_cluster::Cluster>> {
        self.cluster.as_ref()
    }

    fn counters(&self) -> &hoard_metrics::counters::Counters {
        &self.counters
    }

    fn warm(&self) -> bool {
        self.store.has_zones()
    }

    fn purge(
        &self,
        selector: &Selector,
        soft: bool,
        source: &'static str,
    ) -> impl std::future::Future<Output = usize> + Send {
        Pipeline::purge(self, selector, soft, source)
    }
}
