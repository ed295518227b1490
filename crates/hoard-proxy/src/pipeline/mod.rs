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
//! Each step records its outcome in a `CacheStatus` (RFC 9211) that goes out
//! on the response, and in counters. `serve` (this file) runs the phases of
//! [`phases`]; the steps live in sibling files: `intercept`, `prepare` and
//! `edge` (recv), `lookup` (key), `origin_request`, `fetch`, `partial`,
//! `slice` and `slice_body` (fetch), `hit`, `range`, `answers` (deliver),
//! `pass` and `tunnel`; `ctx` is the request as they see it, `noted` what
//! they leave for the log.

mod answers;
pub mod client_body;
mod ctx;
mod edge;
mod esi;
mod fetch;
mod filter_body;
mod filters;
pub mod forwarding;
#[cfg(test)]
mod future_sizes;
mod hit;
mod intercept;
pub mod limits;
mod lookup;
mod noted;
mod origin_request;
mod partial;
mod pass;
pub mod phases;
mod prepare;
pub mod purge;
pub mod purge_log;
mod range;
mod rewrite_memo;
pub mod running;
mod serving;
mod slice;
pub mod slice_body;
pub mod trace;
mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::request_body::RequestBody;
use hoard_policy::cache_status::{Fwd, Outcome};
use hoard_policy::clock::Clock;
use hoard_store::Store;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use self::edge::deliver_steps;
use crate::access_log::{AccessLog, Record};
use crate::body::ProxyBody;
use crate::fill::FillEngine;
use crate::request_id::RequestId;
use crate::sendfile::SendQueue;
use crate::tally::{Pending, Tallied};
use hoard_config::rules::{first_match, RuleInput};
use hoard_config::Config;
use hoard_metrics::counters::Counters;
use hoard_metrics::metrics::Metrics;
use hoard_origin::error::ProxyError;
use hoard_origin::ReqBody;

use self::ctx::Applied;
pub(crate) use self::ctx::Ctx;
use self::noted::OUTCOME;
pub(crate) use self::noted::{note_outcome, note_owner, note_tries, Noted};
pub(crate) use self::prepare::edge_vars;
pub use self::prepare::select_site;
use self::prepare::{Prepared, Recv};
pub use self::serving::Serving;
use self::serving::Work;

/// The store type the pipeline uses.
pub type StoreHandle = Store;

/// Shared state of the request pipeline.
#[derive(Debug)]
pub struct Pipeline {
    /// The running configuration (see `running`): swapped by a reload.
    running: arc_swap::ArcSwap<running::Running>,
    /// Reloads asked for through the admin API (to the proxy's owner).
    pub reload_asks: Option<tokio::sync::mpsc::Sender<running::ReloadAsk>>,
    /// The last reload, for `/status`.
    pub last_reload: parking_lot::Mutex<Option<running::ReloadRecord>>,
    /// The cache (memory and disk tiers).
    pub store: Arc<Store>,
    /// Counters every layer updates.
    pub counters: Arc<Counters>,
    /// The clock (a test clock in tests).
    pub clock: Arc<dyn Clock>,
    /// Fills: the in-flight table, hit-for-pass marks and the fill tasks.
    pub fills: Arc<FillEngine>,
    /// The cluster, if this node is in one (fixed at start).
    pub cluster: Option<Arc<hoard_cluster::Cluster>>,
    /// Automatic HTTPS, when listeners have `acme` names: its HTTP-01
    /// answers are given here, before anything else.
    pub acme: Option<Arc<hoard_acme::Acme>>,
    /// The bound on slice prefetches running at once.
    pub prefetches: Arc<tokio::sync::Semaphore>,
    /// Requests by outcome, bytes to clients.
    pub metrics: Arc<Metrics>,
    /// The access log, when it is on.
    pub access_log: Option<Arc<AccessLog>>,
    /// One permit per open client connection (`server.max_connections`).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Signalled when the permits run out: the oldest connection that has
    /// not sent a byte closes to make room.
    pub pressure: tokio::sync::Notify,
    /// Connections waiting for their first byte (only they heed `pressure`).
    pub silent: std::sync::atomic::AtomicUsize,
    /// The node's intercepts, in order (see [`phases::Intercept`]).
    intercepts: Box<[phases::Intercept]>,
    /// The recent purges, for `GET /purges`.
    pub purge_log: Arc<purge_log::PurgeLog>,
    /// Requests as they happen, for `GET /trace` (see [`trace`]).
    pub trace: trace::Trace,
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
    pub interim: Option<hoard_origin::interim::Interim>,
    /// The listener redirects to HTTPS on this port (see
    /// `ListenerConfig::redirect_https`).
    pub redirect_https: Option<u16>,
    /// The listener it came in on: its index in the configuration's
    /// listeners (for sites' `listeners`; a `u16` fits beside the fields
    /// above, where a `usize` would grow every request's future).
    pub listener: u16,
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
            Arc::new(hoard_cluster::Cluster::new(
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
            purge_log: Arc::default(),
            trace: trace::Trace::default(),
        }
    }

    /// The running configuration, for a short look (no reference count).
    pub fn run(&self) -> arc_swap::Guard<Arc<running::Running>> {
        self.running.load()
    }

    /// The running configuration, to hold (a request keeps its snapshot).
    pub fn snapshot(&self) -> Arc<running::Running> {
        self.running.load_full()
    }

    /// Makes `next` the running configuration for new requests.
    pub fn install(&self, next: running::Running) {
        self.running.store(Arc::new(next));
    }

    /// Serves one client request (or a `PURGE`); errors become responses;
    /// then its outcome and time to first byte go to the metrics and its
    /// body is counted and logged as it is sent.
    ///
    /// The future is written out by hand ([`Serving`]) rather than as an
    /// `async fn`: one would keep the request and the connection (328
    /// bytes) beside the phases' future that took them, and hyper moves
    /// every byte of this future when a request starts (see
    /// `future_sizes`).
    pub fn serve(
        self: Arc<Self>,
        req: Request<RequestBody>,
        conn: Conn,
    ) -> Serving<impl std::future::Future<Output = Result<Response<ProxyBody>, ProxyError>> + Send>
    {
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
        // Boxed, and only while someone watches (`GET /trace`).
        let watched = self.trace.on().then(|| {
            let host = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_owned())
                .or_else(|| {
                    req.headers()
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            Box::new(trace::Traced {
                time: self.clock.now(),
                client: peer.ip(),
                method: req.method().clone(),
                host,
                target: req
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_owned(),
                status: 0,
                outcome: "",
                cache_status: String::new(),
                ttfb: std::time::Duration::ZERO,
                tries: 0,
            })
        });
        // intercept: the node's own answers, before any site or route.
        let mut claimed = None;
        for &i in self.intercepts.iter() {
            if i.claims(&self, &req, &conn) {
                claimed = Some(i);
                break;
            }
        }
        if let Some(i) = claimed {
            tracing::debug!(
                intercept = i.as_str(),
                path = req.uri().path(),
                "intercepted"
            );
        }
        let work = match claimed {
            Some(phases::Intercept::Now(i)) => Work::Now {
                resp: Some(self.answer_now(i, &req, &conn)),
            },
            Some(phases::Intercept::Logged(i)) => {
                let p = self.clone();
                Work::Intercept {
                    fut: Box::pin(async move { p.intercept(i, req, peer, tls).await }),
                }
            }
            None => {
                self.counters.inc(&self.counters.requests_total);
                // The log line's id goes to the origin too.
                let id = line.as_ref().and_then(|l| l.record.request_id.clone());
                // recv, key, fetch, store and deliver.
                Work::Route {
                    fut: OUTCOME.scope(
                        std::cell::Cell::new(Noted::default()),
                        self.clone().recv(req, conn, id, watched.is_some()),
                    ),
                }
            }
        };
        Serving {
            pipeline: self,
            started,
            line,
            watched,
            work,
        }
    }

    /// The `log` phase of a request its phases answered with `resp`
    /// (see [`Pipeline::serve`]).
    fn log(
        &self,
        resp: Response<ProxyBody>,
        noted: Noted,
        purge: bool,
        started: Instant,
        line: Option<Box<Pending>>,
        watched: Option<Box<trace::Traced>>,
    ) -> Response<Tallied> {
        // log: the metrics now, the access log's line when the body is sent.
        let outcome = noted.outcome;
        let ttfb = started.elapsed();
        if !purge {
            self.metrics
                .request(outcome.unwrap_or(Outcome::Error), ttfb);
        }
        let (parts, body) = resp.into_parts();
        if let Some(mut t) = watched {
            t.status = parts.status.as_u16();
            t.outcome = if purge {
                "purge"
            } else {
                outcome.unwrap_or(Outcome::Error).as_str()
            };
            t.cache_status = parts
                .headers
                .get("cache-status")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            t.ttfb = ttfb;
            t.tries = noted.tries.as_ref().map_or(0, |n| n.get());
            self.trace.publish(*t);
        }
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
            .remove::<Arc<hoard_edge::limit::ConnGuard>>();
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
        self: Arc<Self>,
        req: Request<RequestBody>,
        conn: Conn,
        request_id: Option<RequestId>,
        watched: bool,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let tls = conn.tls;
        let run = self.snapshot();
        let request_id = request_id.as_ref();
        let Recv {
            mut ctx,
            body,
            upgrade,
            at,
        } = match self.prepare(&run, req, conn, request_id, watched)? {
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
        // recv: the route's filters, after its edge rules (one test);
        // then key, fetch and store (or a pass, or a tunnel). No answer is
        // held across the wait: the request's future stays as small.
        let result = if ctx.route.filters.is_empty() {
            self.route_request(&ctx, upgrade, body).await
        } else {
            // Boxed: a filtered request's extra waits (HTTP calls) take
            // no room in every request's future.
            Box::pin(self.route_filtered(&mut ctx, upgrade, body)).await
        };
        // deliver: ESI, then the route's filters and steps on every
        // response.
        // (A route with filters always has their state: `route_filtered`.)
        if steps.deliver_is_empty(ctx.route) && held.is_none() {
            return result;
        }
        let mut resp = result.unwrap_or_else(|e| self.error_response(&e, None));
        if let Some(cfg) = &ctx.route.esi {
            // Boxed: pages are rare; other requests' futures stay small.
            resp = Box::pin(self.esi_page(&ctx, cfg, resp)).await;
        }
        if let Some(f) = ctx.filtered.take() {
            self.filter_response(*f, &mut resp);
        }
        if let Some(edge) = ctx.route.edge.as_deref() {
            let mut vars = edge_vars(&ctx.uri, &ctx.authority, ctx.client, tls);
            let age: Option<String>;
            if steps.delivery_vars {
                age = resp
                    .headers()
                    .get(http::header::AGE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                vars.delivery = Some(hoard_edge::template::Delivery {
                    cache_status: delivery_status(&resp),
                    cache_hits: resp.extensions().get::<hit::CacheHits>().map_or(0, |h| h.0),
                    upstream_name: &ctx.upstream.cfg.name,
                    age: age.as_deref().unwrap_or(""),
                });
            }
            deliver_steps(steps, edge, &mut resp, &vars);
        }
        if let Some(guard) = held {
            resp.extensions_mut().insert(guard);
        }
        Ok(resp)
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
                    .map_err(|e| e as hoard_origin::error::BoxError);
                Some(
                    client_body::ClientBody::new(limited, limits.body_read_timeout).boxed()
                        as ReqBody,
                )
            };
            Box::pin(self.pass(ctx, body, None)).await
        }
    }
}

/// `$cache_status` of a response being delivered (nginx's
/// `$upstream_cache_status` names): from the request's outcome, with
/// `EXPIRED` for a miss of a stored object past its lifetime.
fn delivery_status(resp: &Response<ProxyBody>) -> &'static str {
    match noted::current_outcome() {
        Some(Outcome::Hit) => "HIT",
        Some(Outcome::Stale) => "STALE",
        Some(Outcome::Revalidated) => "REVALIDATED",
        Some(Outcome::Pass | Outcome::HitForPass) => "PASS",
        Some(Outcome::Miss) => {
            let expired = resp
                .headers()
                .get("cache-status")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("fwd=stale"));
            if expired {
                "EXPIRED"
            } else {
                "MISS"
            }
        }
        Some(Outcome::Error) => "ERROR",
        Some(Outcome::Redirect | Outcome::Respond) | None => "NONE",
    }
}
