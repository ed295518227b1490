//! The request pipeline: recv → lookup → {hit, revalidate, miss, pass} → deliver.
//!
//! ```text
//!  recv ──(not GET/HEAD, or route cache=off)──────────────► pass ──► deliver
//!   │                                                        (unsafe + 2xx/3xx: invalidate, §4.4)
//!   ▼
//!  lookup ──Hit, reuse()=Fresh/StaleAllowed──────────────► hit ──► deliver (Age, 304/412 from cache)
//!   │  └───Hit, reuse()=Revalidate────► fetch with validators ─304─► merge, store, deliver
//!   │                                        └─200/other──► as a miss
//!   │                                        └─error/5xx──► stale-if-error or 502/504
//!   ├──UriMiss / VaryMiss──► fetch ─storable──► fill task (BusyBody) ──► deliver from the fill
//!   │                              └not storable─► stream origin body through
//!   └──miss on a slicing route──► sliced: slice fills with Range ──► deliver slice by slice
//! ```
//!
//! Each step records its outcome in a [`CacheStatus`] (RFC 9211) that goes out
//! on the response, and in counters. The steps live in sibling files:
//! `recv` (this file), `origin_request`, `hit`, `fetch`, `pass`, `range`,
//! `slice` and `slice_body`.

pub(crate) mod client_body;
mod edge;
mod fetch;
pub mod forwarding;
#[cfg(test)]
mod future_sizes;
mod hit;
mod intercept;
pub mod limits;
mod origin_request;
mod partial;
mod pass;
pub mod phases;
pub(crate) mod purge;
mod range;
pub mod running;
mod slice;
pub(crate) mod slice_body;
mod tunnel;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::request_body::RequestBody;
use bytes::Bytes;
use hoard_policy::cache_status::{CacheStatus, Fwd, Outcome};
use hoard_policy::clock::Clock;
use hoard_policy::encoding::served_as_stored;
use hoard_policy::headers::strip_hop_by_hop;
use hoard_policy::key::{CacheKey, KeyInput};
use hoard_policy::reuse::{request_cache_control_for, reuse, Reuse};
use hoard_policy::target::{normalise_authority, normalise_path_and_query, TargetError};
use hoard_store::{Lookup, Store};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use self::edge::deliver_steps;
use crate::access_log::{AccessLog, Record};
use crate::body::ProxyBody;
use crate::config::rules::{first_match, Rule, RuleInput};
use crate::config::{ColdRange, Config, HostMatch, RouteConfig, SiteConfig};
use crate::counters::Counters;
use crate::error::{ErrorKind, ProxyError};
use crate::fill::FillEngine;
use crate::metrics::Metrics;
use crate::request_id::RequestId;
use crate::server::sendfile::SendQueue;
use crate::server::tally::{Pending, Tallied};
use crate::upstream::{ReqBody, Upstream};

/// The store type the pipeline uses.
pub type StoreHandle = Store;

/// Shared state of the request pipeline.
#[derive(Debug)]
pub struct Pipeline {
    /// The running configuration (see `running`): swapped by a reload.
    running: arc_swap::ArcSwap<running::Running>,
    /// Reloads asked for through the admin API (to the proxy's owner).
    pub(crate) reload_asks: Option<tokio::sync::mpsc::Sender<running::ReloadAsk>>,
    /// The last reload, for `/status`.
    pub(crate) last_reload: parking_lot::Mutex<Option<running::ReloadRecord>>,
    pub(crate) store: Arc<Store>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Fills: the in-flight table, hit-for-pass marks and the fill tasks.
    pub(crate) fills: Arc<FillEngine>,
    /// The cluster, if this node is in one (fixed at start).
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Automatic HTTPS, when listeners have `acme` names: its HTTP-01
    /// answers are given here, before anything else.
    pub acme: Option<Arc<crate::acme::Acme>>,
    /// The bound on slice prefetches running at once.
    pub(crate) prefetches: Arc<tokio::sync::Semaphore>,
    /// Requests by outcome, bytes to clients.
    pub(crate) metrics: Arc<Metrics>,
    /// The access log, when it is on.
    pub(crate) access_log: Option<Arc<AccessLog>>,
    /// One permit per open client connection (`server.max_connections`).
    pub(crate) connections: Arc<tokio::sync::Semaphore>,
    /// Signalled when the permits run out: the oldest connection that has
    /// not sent a byte closes to make room.
    pub(crate) pressure: tokio::sync::Notify,
    /// Connections waiting for their first byte (only they heed `pressure`).
    pub(crate) silent: std::sync::atomic::AtomicUsize,
    /// The node's intercepts, in order (see [`phases::Intercept`]).
    intercepts: Box<[phases::Intercept]>,
}

/// What the connection knows about a request it hands to [`Pipeline::serve`].
#[derive(Debug, Clone)]
pub struct Conn {
    /// The client's address (after the PROXY protocol).
    pub peer: SocketAddr,
    /// Arrived over TLS.
    pub tls: bool,
    /// The connection's sendfile queue (plain HTTP/1.x only).
    pub send: Option<Arc<SendQueue>>,
    /// Where interim responses to this request go (HTTP/1.1 only).
    pub interim: Option<crate::server::watch::Interim>,
    /// The listener redirects to HTTPS on this port (see
    /// `ListenerConfig::redirect_https`).
    pub redirect_https: Option<u16>,
    /// The listener it came in on: its index in the configuration's
    /// listeners (for sites' `listeners`; a `u16` fits beside the fields
    /// above, where a `usize` would grow every request's future).
    pub listener: u16,
}

/// A request ready for the edge rules and the cache (see `Pipeline::prepare`).
struct Recv<'r> {
    ctx: Ctx<'r>,
    body: RequestBody,
    upgrade: Option<(tunnel::Asked, hyper::upgrade::OnUpgrade)>,
    /// (site, route) indices.
    at: (usize, usize),
}

/// What `prepare` made of a request. Moved once, never kept across a
/// wait: boxing `Go` would cost every request an allocation.
#[allow(clippy::large_enum_variant)]
enum Prepared<'r> {
    /// On to the edge rules and the cache.
    Go(Recv<'r>),
    /// Answered already (no route).
    Answered(Response<ProxyBody>),
}

tokio::task_local! {
    /// The [`Outcome`] of the request the task is serving: set where its
    /// `Cache-Status` is (`add_cache_status`, `error_response`, a tunnel, a
    /// redirect), read by `serve` for the metrics and the access log. A
    /// slot of the request's task rather than a response extension, which
    /// would cost every request three allocations.
    static OUTCOME: std::cell::Cell<Noted>;
}

/// What a request's task notes for `serve` (see [`OUTCOME`]).
#[derive(Debug, Default)]
pub(crate) struct Noted {
    /// The cache outcome; the last one wins.
    pub outcome: Option<Outcome>,
    /// In a cluster: the member (index) that owns the key of a request
    /// that went forward to another member, for the access log.
    pub owner: Option<u16>,
    /// For a request that went to the origin: the number of servers its
    /// upstream tried (set by the upstream, which may run in a fill's
    /// task), for the access log. The last origin request wins.
    pub tries: Option<Arc<crate::upstream::failover::Tries>>,
}

/// Changes what the request's task noted (see [`OUTCOME`]).
fn note(f: impl FnOnce(&mut Noted)) {
    let _ = OUTCOME.try_with(|c| {
        let mut n = c.take();
        f(&mut n);
        c.set(n);
    });
}

/// Records the request's outcome (see [`OUTCOME`]); the last one wins.
pub(crate) fn note_outcome(outcome: Outcome) {
    note(|n| n.outcome = Some(outcome));
}

/// Records the member that owns the request's key (see [`Noted::owner`]).
pub(crate) fn note_owner(owner: u16) {
    note(|n| n.owner = Some(owner));
}

/// A count of servers tried for an origin request of this request's task
/// (see [`Noted::tries`]); `None` outside a request's task.
pub(crate) fn note_tries() -> Option<Arc<crate::upstream::failover::Tries>> {
    let tries = Arc::new(crate::upstream::failover::Tries::default());
    OUTCOME
        .try_with(|c| {
            let mut n = c.take();
            n.tries = Some(tries.clone());
            c.set(n);
        })
        .ok()?;
    Some(tries)
}

/// The route rule that matched a cacheable request, if any.
#[derive(Debug, Clone, Copy)]
enum Applied<'r> {
    None,
    /// A bypass rule with `store = true`: no lookup, the response is stored.
    BypassStore(&'r Rule),
    /// A no-store rule: look up, serve only what is usable as it is, never store.
    NoStore(&'r Rule),
}

/// One request as the pipeline sees it after recv.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub route: &'a Arc<RouteConfig>,
    pub site: &'a SiteConfig,
    pub upstream: &'a Arc<Upstream>,
    pub peer: SocketAddr,
    /// The client's address as the access log, the edge rules, the cache
    /// rules and `$remote_addr` see it: the peer's (the PROXY protocol's),
    /// or from `X-Forwarded-For` when the peer is a trusted proxy.
    pub client: std::net::IpAddr,
    /// With the access log on: the request's id in its line, which goes
    /// to the origin too (see [`crate::request_id`]).
    pub request_id: Option<&'a RequestId>,
    pub tls: bool,
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    /// Client header fields, hop-by-hop removed.
    pub headers: HeaderMap,
    /// Host as sent (with port).
    pub authority: String,
    /// The connection's sendfile queue (plain HTTP/1.x only).
    pub send: Option<Arc<SendQueue>>,
    /// Where interim responses to this request go (HTTP/1.1 only).
    pub interim: Option<crate::server::watch::Interim>,
    /// The running configuration the request is served with.
    pub run: &'a running::Running,
    /// Sent by another cluster member (a checked peer field): filled
    /// here, never forwarded again.
    pub from_peer: bool,
    /// How far the sending member had applied the invalidation log (a
    /// peer's request, with a bus): see [`crate::cluster::bus`].
    pub peer_log: Option<crate::cluster::bus::EntryId>,
    /// This node is in a cluster.
    pub clustered: bool,
    /// On a route with `encodings`, for GET and HEAD: the client's own
    /// `Accept-Encoding`, parsed (`headers` then carry `identity`, what
    /// fills ask the origin for; see [`crate::encode`]).
    pub accept: Option<hoard_policy::encoding::Accept>,
    /// With `accept`: the client's `Accept-Encoding` field as sent (its
    /// first line), for a stored coding hoard does not know (see
    /// `hoard_policy::encoding::served_as_stored`).
    pub accept_field: Option<HeaderValue>,
}

impl Ctx<'_> {
    /// See [`crate::fill::FillJob::cluster_tls`].
    pub fn cluster_tls(&self) -> Option<bool> {
        (self.clustered && !self.from_peer).then_some(self.tls)
    }

    /// See [`crate::fill::FillJob::tier_tls`].
    pub fn tier_tls(&self) -> Option<bool> {
        (self.clustered && self.from_peer).then_some(self.tls)
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// In a cluster, the key's owner is chosen by this when the route sets
    /// `cluster_key` (else by the cache key's text).
    pub fn route_key(&self) -> Option<Arc<str>> {
        let t = self.route.cluster_key.as_ref().filter(|_| self.clustered)?;
        let k = t.key(KeyInput {
            scheme: self.scheme(),
            host: &self.authority,
            path: self.uri.path(),
            query: self.uri.query(),
            headers: &self.headers,
        });
        Some(Arc::from(k.text))
    }

    pub fn key_for(&self, route: &RouteConfig, path: &str, query: Option<&str>) -> CacheKey {
        route.key.key(KeyInput {
            scheme: self.scheme(),
            host: &self.authority,
            path,
            query,
            headers: &self.headers,
        })
    }
}

impl Pipeline {
    /// A pipeline over a store, with upstreams built from the configuration.
    pub fn new(
        cfg: Arc<Config>,
        store: Arc<Store>,
        counters: Arc<Counters>,
        clock: Arc<dyn Clock>,
    ) -> Pipeline {
        let first = running::Running::first(cfg.clone(), &counters, &clock);
        let via = first.via.clone();
        let cluster = cfg.cluster.as_ref().map(|c| {
            let zone_dir = cfg
                .cache
                .zones
                .first()
                .and_then(|z| z.dirs.first())
                .map(|d| d.path.clone());
            Arc::new(crate::cluster::Cluster::new(
                c,
                zone_dir,
                counters.clone(),
                clock.clone(),
            ))
        });
        let mut fills = FillEngine::new(
            store.clone(),
            counters.clone(),
            clock.clone(),
            cfg.cache.clone(),
            via.clone(),
        );
        fills.cluster = cluster.clone();
        let fills = Arc::new(fills);
        let prefetches = Arc::new(tokio::sync::Semaphore::new(cfg.cache.max_prefetches));
        Pipeline {
            prefetches,
            metrics: Arc::default(),
            access_log: None,
            connections: Arc::new(tokio::sync::Semaphore::new(cfg.server.max_connections)),
            running: arc_swap::ArcSwap::from_pointee(first),
            last_reload: parking_lot::Mutex::new(None),
            pressure: tokio::sync::Notify::new(),
            silent: std::sync::atomic::AtomicUsize::new(0),
            reload_asks: None,
            store,
            counters,
            clock,
            fills,
            intercepts: phases::Intercept::registered(cluster.is_some()),
            cluster,
            acme: None,
        }
    }

    /// The running configuration, for a short look (no reference count).
    pub(crate) fn run(&self) -> arc_swap::Guard<Arc<running::Running>> {
        self.running.load()
    }

    /// The running configuration, to hold (a request keeps its snapshot).
    pub fn snapshot(&self) -> Arc<running::Running> {
        self.running.load_full()
    }

    /// Makes `next` the running configuration for new requests.
    pub(crate) fn install(&self, next: running::Running) {
        self.running.store(Arc::new(next));
    }

    /// Serves one client request (or a `PURGE`); errors become responses;
    /// then its outcome and time to first byte go to the metrics and its
    /// body is counted and logged as it is sent.
    pub async fn serve(
        self: Arc<Self>,
        req: Request<RequestBody>,
        conn: Conn,
    ) -> Response<Tallied> {
        let (peer, tls) = (conn.peer, conn.tls);
        let started = Instant::now();
        let c = &self.counters;
        c.inc(match req.version() {
            http::Version::HTTP_2 => &c.requests_http2,
            http::Version::HTTP_3 => &c.requests_http3,
            _ => &c.requests_http1,
        });
        // Boxed, and only with the log on: the request's future keeps it.
        let line = self.access_log.as_ref().map(|log| {
            Box::new(Pending {
                log: log.clone(),
                record: self.record(&req, peer.ip()),
                started,
            })
        });
        // intercept: the node's own answers, before any site or route.
        let claimed = self
            .intercepts
            .iter()
            .copied()
            .find(|i| i.claims(&self, &req, &conn));
        let (resp, noted) = match claimed {
            Some(i) if !i.logged() => return self.answer_now(i, &req, &conn),
            Some(i) => (
                Box::pin(self.intercept(i, req, peer, tls)).await,
                Noted::default(),
            ),
            None => {
                self.counters.inc(&self.counters.requests_total);
                OUTCOME
                    .scope(std::cell::Cell::new(Noted::default()), async {
                        // The log line's id goes to the origin too.
                        let id = line.as_deref().and_then(|l| l.record.request_id.as_ref());
                        // recv, key, fetch, store and deliver.
                        let resp = match self.recv(req, conn, id).await {
                            Ok(resp) => resp,
                            Err(e) => self.error_response(&e, None),
                        };
                        (resp, OUTCOME.with(std::cell::Cell::take))
                    })
                    .await
            }
        };
        // log: the metrics now, the access log's line when the body is sent.
        let purge = claimed.is_some();
        let outcome = noted.outcome;
        let ttfb = started.elapsed();
        if !purge {
            self.metrics
                .request(outcome.unwrap_or(Outcome::Error), ttfb);
        }
        let (parts, body) = resp.into_parts();
        let pending = match line {
            Some(mut line) => {
                let record = &mut line.record;
                record.status = parts.status.as_u16();
                record.cache = match outcome {
                    _ if purge => "purge",
                    Some(o) => o.as_str(),
                    None => Outcome::Error.as_str(),
                };
                record.upstream = outcome.is_some_and(Outcome::went_forward).then_some(ttfb);
                if record.upstream.is_some() {
                    record.upstream_tries = noted.tries.as_ref().map_or(0, |t| t.get());
                }
                record.owner = noted
                    .owner
                    .and_then(|i| self.cluster.as_ref().and_then(|c| c.name(i)));
                match parts.extensions.get::<tunnel::TunnelEnd>() {
                    // A tunnel's line is written when it closes.
                    Some(end) => {
                        end.put(line);
                        None
                    }
                    None => Some(line),
                }
            }
            None => None,
        };
        let mut parts = parts;
        let mut held = parts
            .extensions
            .remove::<Arc<crate::edge::limit::ConnGuard>>();
        if let Some(end) = parts.extensions.get::<tunnel::TunnelEnd>() {
            // Counted for the tunnel's life, not its empty body's.
            if let Some(guard) = held.take() {
                end.hold(guard);
            }
        }
        let mut body = Tallied::new(body, self.metrics.clone(), pending);
        body.hold(held);
        Response::from_parts(parts, body)
    }

    /// The access log's record of a request as it arrives, with the
    /// client's address and the request id the rest of the pipeline takes
    /// (the same rules, the same running configuration).
    fn record<B>(&self, req: &Request<B>, peer: std::net::IpAddr) -> Record {
        let run = self.run();
        let trusted = &run.cfg.server.trusted_proxies;
        let mut record = Record::start(
            self.clock.now(),
            forwarding::client_addr(peer, req.headers(), trusted),
            req.method().clone(),
            req.headers(),
            req.uri().clone(),
            req.version(),
        );
        let from_trusted = trusted.iter().any(|c| c.contains(peer));
        record.request_id = Some(
            RequestId::from_client(from_trusted, req.headers()).unwrap_or_else(RequestId::make),
        );
        record
    }

    /// A request's route phases (see [`phases`]): `recv` (`prepare`, then
    /// the route's steps), `key`, `fetch` and `store` (the cache, or a pass,
    /// or a tunnel), then the route's `deliver` steps on the response.
    async fn recv(
        self: &Arc<Self>,
        req: Request<RequestBody>,
        conn: Conn,
        request_id: Option<&RequestId>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let tls = conn.tls;
        let run = self.snapshot();
        let Recv {
            mut ctx,
            body,
            upgrade,
            at,
        } = match self.prepare(&run, req, conn, request_id)? {
            Prepared::Go(r) => r,
            Prepared::Answered(resp) => return Ok(resp),
        };
        // recv: the route's steps (most routes have none: one test).
        let steps = &run.steps[at.0][at.1];
        let mut held = None;
        if !steps.recv.is_empty() {
            let limits = run.limits.get(at.0, at.1);
            match self.recv_steps(steps, limits, &mut ctx, tls).await {
                Ok(guard) => held = guard,
                Err(resp) => return Ok(resp),
            }
        }
        // key, fetch and store (or a pass, or a tunnel).
        let result = self.route_request(&ctx, upgrade, body).await;
        // deliver: the route's steps on every response.
        if steps.deliver.is_empty() && held.is_none() {
            return result;
        }
        let mut resp = result.unwrap_or_else(|e| self.error_response(&e, None));
        if let Some(edge) = ctx.route.edge.as_deref() {
            let vars = edge_vars(&ctx.uri, &ctx.authority, ctx.client, tls);
            deliver_steps(steps, edge, &mut resp, &vars);
        }
        if let Some(guard) = held {
            resp.extensions_mut().insert(guard);
        }
        Ok(resp)
    }

    /// What is done with a request before anything is waited for: limits, the target
    /// and Host in normal form, site and route, upgrades, hop-by-hop
    /// fields and `Expect`. A plain function, so that its locals take no
    /// room in the request's future.
    fn prepare<'r>(
        &self,
        run: &'r running::Running,
        req: Request<RequestBody>,
        conn: Conn,
        request_id: Option<&'r RequestId>,
    ) -> Result<Prepared<'r>, ProxyError> {
        let Conn {
            peer,
            tls,
            send,
            interim,
            listener,
            ..
        } = conn;
        let (mut parts, body) = req.into_parts();
        // A request from another member: its scheme is the client's at the
        // first node; a forged peer field is removed (see `cluster`).
        let hop = self
            .cluster
            .as_ref()
            .and_then(|c| c.take_hop(&mut parts.headers, &parts.method, &parts.uri));
        let tls = hop.as_ref().map_or(tls, |h| h.tls);
        let peer_log = self
            .cluster
            .as_ref()
            .and_then(|c| c.take_log(&mut parts.headers))
            .filter(|_| hop.is_some());
        let limits = &run.cfg.server;
        if parts.uri.path_and_query().map_or(0, |p| p.as_str().len()) > limits.max_uri_length {
            return Err(ProxyError::client(
                ErrorKind::UriTooLong,
                "request target too long",
            ));
        }
        tunnel::refuse_connect(&parts)?;
        let authority = request_authority(&parts, tls)?;
        normalise_target(&mut parts.uri)?;
        let site_idx = select_site(&run.cfg, &authority, tls, Some(usize::from(listener)))
            .ok_or_else(|| {
                ProxyError::client(
                    ErrorKind::NoRoute,
                    format!("no site for host {authority:?}"),
                )
            })?;
        let site = &run.cfg.sites[site_idx];
        let path = parts.uri.path();
        let Some(route_idx) = site.route_for(path) else {
            let e = ProxyError::client(ErrorKind::NoRoute, format!("no route for {path:?}"));
            let mut resp = self.error_response(&e, None);
            if let Some(pages) = &site.error_pages {
                crate::edge::replace_error(pages, &mut resp);
            }
            if !site.response_headers.is_empty() {
                let trusted = &run.cfg.server.trusted_proxies;
                let client = forwarding::client_addr(peer.ip(), &parts.headers, trusted);
                let vars = edge_vars(&parts.uri, &authority, client, tls);
                site.response_headers.apply(resp.headers_mut(), &vars);
            }
            return Ok(Prepared::Answered(resp));
        };
        let route = &site.routes[route_idx];
        // Costs one look at an empty list unless trusted proxies are set.
        let client =
            forwarding::client_addr(peer.ip(), &parts.headers, &run.cfg.server.trusted_proxies);
        // hoard's own refusals from here on answer for the route: its error
        // page and header edits apply, as to its other answers.
        let refuse = |e: ProxyError, uri: &Uri| match route.edge.as_deref() {
            None => Err(e),
            Some(edge) => {
                let mut resp = self.error_response(&e, None);
                let vars = edge_vars(uri, &authority, client, tls);
                deliver_steps(&run.steps[site_idx][route_idx], edge, &mut resp, &vars);
                Ok(Prepared::Answered(resp))
            }
        };
        // A declared body over the route's limit: 413 before anything is
        // sent on (a streamed one is cut in `route_request`).
        if let Some(len) = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            if len > route.max_body_size.unwrap_or(limits.max_body_size) {
                let e = ProxyError::client(ErrorKind::BodyTooLarge, format!("body of {len} bytes"));
                return refuse(e, &parts.uri);
            }
        }
        let asked = match tunnel::check(&parts, route.upgrade) {
            Ok(asked) => asked,
            Err(e) => return refuse(e, &parts.uri),
        };
        let upgrade = asked.and_then(|asked| {
            if matches!(asked, tunnel::Asked::WebSocketOverHttp2) {
                // RFC 8441 §5: a GET with an Upgrade, to the origin.
                parts.method = Method::GET;
            }
            let on = parts.extensions.remove::<hyper::upgrade::OnUpgrade>()?;
            Some((asked, on))
        });
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        // `100-continue` is answered here (hyper sends `100 Continue` when
        // the body is first read, i.e. when it goes to the origin), so the
        // origin gets a plain request; any other expectation is refused
        // (RFC 9110 §10.1.1).
        if let Some(expect) = headers.remove(header::EXPECT) {
            if !expect.as_bytes().eq_ignore_ascii_case(b"100-continue") {
                let e = ProxyError::client(ErrorKind::ExpectationFailed, "unsupported expectation");
                return refuse(e, &parts.uri);
            }
        }
        // Fills ask the origin for identity; the client's field is kept
        // for choosing among the stored codings (see `crate::encode`).
        let (accept, accept_field) = if !route.encodings.is_empty()
            && (parts.method == Method::GET || parts.method == Method::HEAD)
            && upgrade.is_none()
        {
            let a = hoard_policy::encoding::Accept::from_request(&headers);
            let field = headers.insert(header::ACCEPT_ENCODING, route.fill_accept_encoding.clone());
            (Some(a), field)
        } else {
            (None, None)
        };
        let ctx = Ctx {
            route,
            site,
            // Only a route that answers by itself has no upstream to use.
            upstream: run
                .upstreams
                .get(route.upstream)
                .unwrap_or(&run.no_upstream),
            run,
            peer,
            client,
            request_id,
            tls,
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            headers,
            authority,
            send,
            interim,
            from_peer: hop.is_some(),
            peer_log,
            clustered: self.cluster.is_some(),
            accept,
            accept_field,
        };
        Ok(Prepared::Go(Recv {
            ctx,
            body,
            upgrade,
            at: (site_idx, route_idx),
        }))
    }

    /// The request after recv: a tunnel, a lookup or a pass.
    async fn route_request(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        upgrade: Option<(tunnel::Asked, hyper::upgrade::OnUpgrade)>,
        body: RequestBody,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let route = ctx.route;
        if let Some((asked, on)) = upgrade {
            drop(body);
            return Box::pin(self.tunnel(ctx, asked, on)).await;
        }
        if (ctx.method == Method::GET || ctx.method == Method::HEAD) && route.cache {
            drop(body);
            let input = RuleInput {
                method: &ctx.method,
                headers: &ctx.headers,
                query: ctx.uri.query(),
                client: ctx.client,
            };
            if let Some(rule) = first_match(&route.bypass, &input) {
                self.counters.inc(&self.counters.bypass_rule_matches);
                if !rule.store {
                    return Box::pin(self.pass(ctx, None, Some((Fwd::Bypass, rule)))).await;
                }
                return self.cacheable(ctx, Applied::BypassStore(rule)).await;
            }
            match first_match(&route.no_store, &input) {
                Some(rule) => {
                    self.counters.inc(&self.counters.no_store_rule_matches);
                    self.cacheable(ctx, Applied::NoStore(rule)).await
                }
                None => self.cacheable(ctx, Applied::None).await,
            }
        } else {
            let limits = &ctx.run.cfg.server;
            let body = if http_body::Body::is_end_stream(&body) {
                None
            } else {
                let max = route.max_body_size.unwrap_or(limits.max_body_size);
                let limited = Limited::new(body, usize::try_from(max).unwrap_or(usize::MAX))
                    .map_err(|e| e as crate::error::BoxError);
                Some(
                    client_body::ClientBody::new(limited, limits.body_read_timeout).boxed()
                        as ReqBody,
                )
            };
            Box::pin(self.pass(ctx, body, None)).await
        }
    }
}

/// What the variables of a route's edge values stand for in one request.
pub(crate) fn edge_vars<'a>(
    uri: &'a Uri,
    authority: &'a str,
    client: std::net::IpAddr,
    tls: bool,
) -> crate::edge::template::Vars<'a> {
    crate::edge::template::Vars {
        host: strip_port(authority),
        request_uri: uri.path_and_query().map_or("/", |p| p.as_str()),
        remote_addr: client,
        scheme: if tls { "https" } else { "http" },
        path: uri.path(),
    }
}

/// The site that serves `authority`, which is in normal form (lower case,
/// see `hoard_policy::target`), over TLS or not, on a listener (`None`:
/// any), among the sites whose `scheme` and `listeners` admit the request:
/// the first whose hosts match; for a Host no site lists, the site with
/// `default = true`, else the first without hosts, else the first (as
/// nginx takes the `default_server`, else the first server of a port).
pub(crate) fn select_site(
    cfg: &Config,
    authority: &str,
    tls: bool,
    listener: Option<usize>,
) -> Option<usize> {
    let sites = &cfg.sites;
    if let [only] = sites.as_slice() {
        if only.hosts.is_empty() && only.tls.is_none() && only.bind.on(listener) {
            return Some(0);
        }
    }
    let host = strip_port(authority);
    let here = |s: &SiteConfig| s.tls.is_none_or(|t| t == tls) && s.bind.on(listener);
    sites
        .iter()
        .position(|s| {
            here(s)
                && s.hosts.iter().any(|m| match m {
                    HostMatch::Exact(h) => h == host,
                    HostMatch::Suffix(suffix) => host.ends_with(suffix.as_str()),
                })
        })
        .or_else(|| sites.iter().position(|s| here(s) && s.bind.default))
        .or_else(|| sites.iter().position(|s| here(s) && s.hosts.is_empty()))
        .or_else(|| sites.iter().position(here))
}

impl Pipeline {
    /// Cacheable method on a caching route: look up and decide.
    async fn cacheable(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        applied: Applied<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        // A route with `client_no_cache = "ignore"` reads the client's
        // directives without those that would force a revalidation.
        let req_cc = request_cache_control_for(&ctx.headers, ctx.route.policy.client_no_cache);
        let key = ctx.key_for(ctx.route, ctx.uri.path(), ctx.uri.query());
        let now = self.clock.now();
        let mut variant = None;
        let behind = match (ctx.peer_log, &self.cluster) {
            // Boxed: a hit's future has no room for the wait.
            (Some(at), Some(c)) => !Box::pin(c.caught_up_to(at)).await,
            _ => false,
        };
        let lookup = match applied {
            // A bypass that stores: no lookup, a fill that replaces the object.
            Applied::BypassStore(_) => Lookup::UriMiss,
            // The sending member has applied purges this node has not read
            // yet: what is stored here may be what they removed.
            _ if behind => Lookup::UriMiss,
            _ => self.store.lookup(key.digest, &key.text, &ctx.headers).await,
        };
        let (stale, fwd) = match lookup {
            // A coding hoard cannot decode, varying on `Accept-Encoding`,
            // that this request does not accept: the origin's own answer.
            Lookup::Hit(obj)
                if ctx.accept.is_some()
                    && !served_as_stored(&obj.headers, ctx.accept_field.as_ref()) =>
            {
                self.counters.inc(&self.counters.cache_miss);
                return Box::pin(self.pass(ctx, None, None)).await;
            }
            Lookup::Hit(obj) => match self.reuse_here(&obj, &req_cc, now) {
                Reuse::Fresh | Reuse::StaleAllowed => {
                    self.counters.inc(&self.counters.cache_hit);
                    let mut status = CacheStatus {
                        hit: true,
                        ..Default::default()
                    };
                    if obj.near {
                        // A copy of an object another member owns.
                        self.counters.inc(&self.counters.cluster_near_hits);
                        status.detail = Some("near");
                    }
                    return Ok(self.serve_stored(ctx, &key, obj, status, now));
                }
                // A no-store request takes only what may be served as it is:
                // a refresh in its name (with its cookies) must not be stored.
                _ if matches!(applied, Applied::NoStore(_)) => (None, Fwd::Stale),
                Reuse::StaleWhileRevalidate => {
                    // RFC 5861 §3: serve the stale copy now; one background refresh
                    // (a fill nobody waits for) runs unless one is in flight.
                    self.counters
                        .inc(&self.counters.stale_while_revalidate_served);
                    let job = self.fill_job(ctx, &key, &req_cc, Some(obj.clone()), false);
                    self.fills.spawn_refresh(job, ctx.route.fill_max_age);
                    let status = CacheStatus {
                        hit: true,
                        detail: Some("stale-while-revalidate"),
                        ..Default::default()
                    };
                    return Ok(self.serve_stored(ctx, &key, obj, status, now));
                }
                Reuse::Revalidate(reason) => {
                    let fwd = match reason {
                        hoard_policy::reuse::RevalidateReason::RequestNoCache
                        | hoard_policy::reuse::RevalidateReason::RequestFreshness => Fwd::Request,
                        _ => Fwd::Stale,
                    };
                    (Some(obj), fwd)
                }
            },
            Lookup::VaryMiss(names) => {
                // Fills of this variant share a slot of their own.
                variant = Some(names.variant(&ctx.headers));
                (None, Fwd::VaryMiss)
            }
            Lookup::UriMiss => (None, Fwd::UriMiss),
        };
        let fwd = match applied {
            Applied::BypassStore(_) => Fwd::Bypass,
            _ => fwd,
        };
        // The object is not stored whole: a partial copy may answer, or be
        // completed (not on slicing routes, whose slices are their own).
        let mut partial = None;
        if fwd == Fwd::UriMiss && ctx.method == Method::GET && ctx.route.slice.is_none() {
            // Boxed: only misses pay for this future's room.
            match Box::pin(self.partial_copy(ctx, &key, &req_cc, now)).await {
                partial::PartialUse::Served(resp) => return Ok(*resp),
                partial::PartialUse::Complete(want) => partial = Some(want),
                partial::PartialUse::No => {
                    if ctx.route.cold_range == ColdRange::Forward
                        && ctx.headers.contains_key(header::RANGE)
                    {
                        partial = Some(partial::PartialWant::Forward);
                    }
                }
            }
        }
        if req_cc.only_if_cached {
            if let (None, Some(size)) = (&stale, ctx.route.slice) {
                // Answered only if every slice it needs is stored (no slice
                // is fetched for it; see `slice`).
                if let Some(resp) = Box::pin(self.sliced(ctx, &key, &req_cc, size)).await? {
                    return Ok(resp);
                }
            }
            self.counters.inc(&self.counters.only_if_cached_miss);
            let e = ProxyError::client(
                ErrorKind::OnlyIfCached,
                "only-if-cached and nothing usable stored",
            );
            return Ok(self.error_response(&e, Some(fwd)));
        }
        if let Applied::NoStore(rule) = applied {
            self.counters.inc(&self.counters.cache_miss);
            return Box::pin(self.pass(ctx, None, Some((fwd, rule)))).await;
        }
        if let (None, Some(size)) = (&stale, ctx.route.slice) {
            if let Some(resp) = Box::pin(self.sliced(ctx, &key, &req_cc, size)).await? {
                return Ok(resp);
            }
        }
        if stale.is_some() {
            self.counters.inc(&self.counters.cache_revalidate);
        } else {
            self.counters.inc(&self.counters.cache_miss);
        }
        // Revalidated because this cluster node may have missed a purge (it
        // stood still, or is not caught up with the log): Cache-Status says so.
        let fenced = stale
            .as_ref()
            .filter(|o| {
                self.cluster
                    .as_ref()
                    .is_some_and(|c| c.fenced(o.times.response_time))
            })
            .map(|_| Arc::<str>::from("cluster-fenced"));
        // Boxed, as the other steps that go to the origin: a hit's future
        // has no room for them (see `future_sizes`).
        Box::pin(self.fetch(fetch::Want {
            ctx,
            key: &key,
            req_cc: &req_cc,
            fwd,
            stale,
            variant,
            hit_for_pass: false,
            rule: match applied {
                Applied::BypassStore(rule) => Some(rule.label.clone()),
                _ => fenced,
            },
            partial,
        }))
        .await
    }

    /// Adds `Cache-Status` (RFC 9211), appended after any upstream cache's
    /// entry, and notes the request's [`Outcome`] for metrics and the log.
    pub(crate) fn add_cache_status(&self, resp: &mut Response<ProxyBody>, status: &CacheStatus) {
        // The String's buffer becomes the value's: no copy, no allocation.
        let text = Bytes::from(status.to_header(&self.run().cfg.server.via));
        if let Ok(v) = HeaderValue::from_maybe_shared(text) {
            resp.headers_mut().append("cache-status", v);
        }
        note_outcome(status.outcome());
    }

    /// RFC 9111's reuse decision, except that in a cluster a response this
    /// node stored before it stood still is revalidated first (it may have
    /// missed a purge; see `cluster::probe`).
    fn reuse_here(
        &self,
        obj: &hoard_store::object::StoredObject,
        req_cc: &hoard_policy::cache_control::CacheControl,
        now: std::time::SystemTime,
    ) -> Reuse {
        match &self.cluster {
            Some(c) if c.fenced(obj.times.response_time) => {
                Reuse::Revalidate(hoard_policy::reuse::RevalidateReason::Stale)
            }
            _ => reuse(&obj.times, &obj.rules, req_cc, now),
        }
    }

    /// Appends this hop to `Via` (RFC 9110 §7.6.3).
    pub(crate) fn add_via(&self, headers: &mut HeaderMap, version: Version) {
        self.run().via.add(headers, version);
    }

    /// A response for an error generated by hoard.
    pub(crate) fn error_response(&self, e: &ProxyError, fwd: Option<Fwd>) -> Response<ProxyBody> {
        if e.source == crate::error::ErrorSource::Client {
            self.counters.inc(&self.counters.client_errors);
        }
        if e.kind == ErrorKind::Internal {
            tracing::error!(error = %e, "request failed on a broken invariant");
        } else {
            tracing::info!(error = %e, "request failed");
        }
        let status = e.status();
        let mut resp = Response::new(ProxyBody::Full(Some(Bytes::from(format!("{}\n", status)))));
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if e.kind == ErrorKind::BodyTimeout {
            self.counters.inc(&self.counters.client_body_timeouts);
        }
        if matches!(
            e.kind,
            ErrorKind::BadRequest | ErrorKind::BodyTooLarge | ErrorKind::BodyTimeout
        ) {
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let cs = CacheStatus {
            fwd,
            detail: Some(e.as_str()),
            ..Default::default()
        };
        self.add_cache_status(&mut resp, &cs);
        note_outcome(Outcome::Error);
        resp.extensions_mut()
            .insert(crate::edge::error_pages::Generated);
        resp
    }

    pub(crate) fn status_only(&self, status: StatusCode) -> Response<ProxyBody> {
        let mut resp = Response::new(ProxyBody::Empty);
        *resp.status_mut() = status;
        resp
    }
}

/// The request's authority in normal form (see `hoard_policy::target`): from
/// an absolute-form target or `:authority`, which must agree with a Host field
/// if one is sent too (RFC 9112 §3.2.2, RFC 9113 §8.3.1), else from the one
/// Host field.
fn request_authority(parts: &http::request::Parts, tls: bool) -> Result<String, ProxyError> {
    let scheme = if tls { "https" } else { "http" };
    let bad = |e: TargetError| ProxyError::client(ErrorKind::BadRequest, e.to_string());
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let host = match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => {
            return Err(ProxyError::client(
                ErrorKind::BadRequest,
                "several Host fields (RFC 9112 §3.2)",
            ))
        }
        (Some(one), None) => Some(
            one.to_str()
                .map_err(|_| ProxyError::client(ErrorKind::BadRequest, "invalid Host"))?,
        ),
        (None, _) => None,
    };
    let host = host
        .map(|h| normalise_authority(h, scheme).map_err(bad))
        .transpose()?;
    match (parts.uri.authority(), host) {
        (Some(target), host) => {
            let target = normalise_authority(target.as_str(), scheme).map_err(bad)?;
            if host.is_some_and(|h| h != target) {
                return Err(bad(TargetError::HostMismatch));
            }
            Ok(target.into_owned())
        }
        (None, Some(host)) => Ok(host.into_owned()),
        (None, None) if parts.version < Version::HTTP_11 => Ok(String::new()),
        (None, None) => Err(ProxyError::client(
            ErrorKind::BadRequest,
            "missing Host (RFC 9112 §3.2)",
        )),
    }
}

/// Replaces the target by its normal form, the one that is routed, keyed
/// and forwarded; 400 when it has none.
fn normalise_target(uri: &mut Uri) -> Result<(), ProxyError> {
    let bad = |e: TargetError| ProxyError::client(ErrorKind::BadRequest, e.to_string());
    let Some(pq) = uri.path_and_query() else {
        return Err(bad(TargetError::NotOriginForm));
    };
    let (path, query) = normalise_path_and_query(pq.path(), pq.query()).map_err(bad)?;
    if matches!(path, Cow::Borrowed(_)) && !matches!(query, Some(Cow::Owned(_))) {
        if uri.authority().is_some() {
            // Absolute-form: keep the origin-form part only.
            *uri = Uri::from(pq.clone());
        }
        return Ok(());
    }
    let text = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.into_owned(),
    };
    *uri = Uri::try_from(text).map_err(|_| bad(TargetError::NotOriginForm))?;
    Ok(())
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..h.len() + 1]);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}
