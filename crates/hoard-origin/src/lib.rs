//! hoard's origins: upstream server groups, connections and the
//! request/response exchange with them, and the errors of a request
//! ([`error`]: where each came from and what happens next).
//!
//! [`Upstream::send`] picks a server round-robin, takes an idle connection or
//! opens one (connect timeout), sends the request and waits for the response
//! head (read timeout). The response body is an [`OriginBody`], which enforces
//! the read timeout between chunks and returns the connection to its pool at
//! the end. A request that fails on a *reused* connection before any response
//! arrived is retried once on a fresh connection (the idle connection had been
//! closed by the origin). A request that fails on a server goes on to the
//! next one as [`failover`] says (backup servers included).
//!
//! With `protocol = "h2"` (or `"auto"` and a server that picks `h2` by
//! ALPN) requests go as HTTP/2 streams, many at once on a few connections
//! per server (`h2pool`); a stream the server refused unprocessed
//! (`REFUSED_STREAM`, or above a `GOAWAY`'s last stream) is retried once on
//! another connection, and the rest is the same as HTTP/1.1: timeouts,
//! health, failover. Upgrades always go over HTTP/1.1.
//!
//! The group and its server choice are here; the exchange is in `send`,
//! connecting in `connect`, HTTP/2 connections in `h2pool` (what their
//! servers say in `h2_watch`), upgrade requests in `upgrade`, the
//! response body in `body`.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod error;
pub mod failover;
pub mod health;
pub mod interim;
pub mod pool;
pub mod probe;
pub mod tls_failure;
pub use hoard_config::origin_tls as tls;

mod body;
mod connect;
mod h2_watch;
mod h2pool;
mod send;
mod upgrade;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Uri, Version};
use http_body_util::combinators::BoxBody;

use crate::error::{ErrorKind, ProxyError};
use hoard_config::UpstreamConfig;
use hoard_metrics::counters::Counters;
use hoard_metrics::metrics::UpstreamStats;
use pool::Pool;

pub use crate::error::BoxError;
pub use body::{OriginBody, OriginBodyError};

/// The body of a request to an origin.
pub type ReqBody = BoxBody<Bytes, BoxError>;

/// A request to an origin, in a form that can be rebuilt for a retry.
#[derive(Debug)]
pub struct OriginRequest {
    /// Method.
    pub method: Method,
    /// Origin-form target (path and query).
    pub uri: Uri,
    /// Header fields, hop-by-hop already removed, Host set.
    pub headers: HeaderMap,
    /// Body; `None` for an empty body (replayable).
    pub body: Option<ReqBody>,
    /// Where a `103 Early Hints` from the origin goes: the client waiting
    /// for this request, if it can take one.
    pub interim: Option<interim::Interim>,
    /// Where the number of servers tried goes (for the access log).
    pub tries: Option<Arc<failover::Tries>>,
}

impl OriginRequest {
    fn build(&self, body: ReqBody) -> Request<ReqBody> {
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = Version::HTTP_11;
        *req.headers_mut() = self.headers.clone();
        if let Some(interim) = &self.interim {
            let interim = interim.clone();
            hyper::ext::on_informational(&mut req, move |res| {
                if res.status() == http::StatusCode::EARLY_HINTS {
                    let mut fields = res.headers().clone();
                    hoard_policy::headers::strip_hop_by_hop(&mut fields);
                    interim.early_hints(&fields);
                }
            });
        }
        req
    }
}

fn empty() -> ReqBody {
    use http_body_util::BodyExt;
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

/// One server's state (see [`Upstream::server_states`]).
#[derive(Debug, Clone, Copy)]
pub struct ServerState<'a> {
    /// `host:port` as configured.
    pub address: &'a str,
    /// One of `backup`.
    pub backup: bool,
    /// `up`, `down` (out of service, or down after failed requests), or
    /// `drain`.
    pub state: &'static str,
    /// What an administrator set.
    pub admin: health::Admin,
    /// The probes' window, with a health check.
    pub probes: Option<health::ProbeWindow>,
    /// Idle HTTP/1.1 connections held for reuse.
    pub http1_idle: usize,
    /// HTTP/2 connections open, and the streams in flight over them.
    pub http2: (usize, u32),
}

/// One origin server group. See the module docs.
#[derive(Debug)]
pub struct Upstream {
    /// Its configuration.
    pub cfg: UpstreamConfig,
    next: AtomicUsize,
    pools: Vec<Arc<Pool>>,
    health: Vec<Arc<health::Health>>,
    counters: Arc<Counters>,
    clock: Arc<dyn hoard_policy::clock::Clock>,
    /// Results, timings and bytes, for metrics.
    pub stats: Arc<UpstreamStats>,
    /// 502-504 answers count as failures of the server (not for a cluster
    /// member, which passes on its origin's errors and is judged by its
    /// probes and connections).
    status_health: bool,
    /// Tells its probes' task to end (see [`probe`]).
    probe_stop: tokio::sync::watch::Sender<bool>,
    /// Its probes' task, while it runs.
    probe_task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The TLS client with the ALPN of `protocol` (`h2`, or `h2,
    /// http/1.1`); `None` for HTTP/1.1 (the configured client's).
    tls_alpn: Option<Arc<rustls::ClientConfig>>,
}

impl Upstream {
    /// An upstream with empty pools.
    pub fn new(
        cfg: UpstreamConfig,
        counters: Arc<Counters>,
        clock: Arc<dyn hoard_policy::clock::Clock>,
    ) -> Upstream {
        let n = cfg.servers.len() + cfg.backup.len();
        let pools = (0..n)
            .map(|_| {
                Arc::new(Pool::new(
                    cfg.max_idle,
                    cfg.idle_timeout,
                    cfg.h2_max_streams,
                ))
            })
            .collect();
        let health = (0..n)
            .map(|_| {
                let h = health::Health::new(cfg.down_after, cfg.down_backoff_max);
                Arc::new(match &cfg.health_check {
                    Some(hc) => h.with_probes(hc.window, hc.threshold),
                    None => h,
                })
            })
            .collect();
        let tls_alpn = cfg.tls.as_ref().and_then(|t| {
            let offer = match cfg.protocol {
                hoard_config::OriginProtocol::H1 => return None,
                hoard_config::OriginProtocol::H2 => connect::Offer::H2,
                hoard_config::OriginProtocol::Auto => connect::Offer::Either,
            };
            // A clone shares the session cache.
            let mut c = (*t.config).clone();
            c.alpn_protocols = connect::alpn(offer);
            Some(Arc::new(c))
        });
        Upstream {
            cfg,
            next: AtomicUsize::new(0),
            pools,
            health,
            counters,
            clock,
            stats: Arc::default(),
            status_health: true,
            probe_stop: tokio::sync::watch::Sender::new(false),
            probe_task: parking_lot::Mutex::new(None),
            tls_alpn,
        }
    }

    /// Tells its probes to end (a reload replaced it: the successor probes
    /// with the same health); does not wait.
    pub fn retire_probes(&self) {
        let _ = self.probe_stop.send(true);
    }

    /// Ends its probes and waits until none is in flight (a shutdown).
    pub async fn stop_probes(&self) {
        self.retire_probes();
        let task = self.probe_task.lock().take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    /// This upstream, with 502-504 answers not counted against its health.
    pub fn without_status_health(mut self) -> Upstream {
        self.status_health = false;
        self
    }

    /// The same upstream under a reloaded configuration: a server that was
    /// already there keeps its idle connections (when the pool settings are
    /// unchanged) and its health; new servers start empty; stats go on.
    pub fn renew(&self, mut cfg: UpstreamConfig) -> Upstream {
        // TLS settings and files unchanged: the same client, so sessions
        // and pooled connections carry over; changed (a new CA, a renewed
        // client certificate): connections are made afresh.
        let same_tls = match (&self.cfg.tls, &cfg.tls) {
            (None, None) => true,
            (Some(old), Some(new)) if old.fingerprint == new.fingerprint => {
                cfg.tls = Some(old.clone());
                true
            }
            _ => false,
        };
        let mut fresh = Upstream::new(cfg, self.counters.clone(), self.clock.clone());
        let same_pools = same_tls
            && fresh.cfg.max_idle == self.cfg.max_idle
            && fresh.cfg.idle_timeout == self.cfg.idle_timeout
            && fresh.cfg.protocol == self.cfg.protocol
            && fresh.cfg.h2_max_streams == self.cfg.h2_max_streams;
        let same_health = fresh.cfg.down_after == self.cfg.down_after
            && fresh.cfg.down_backoff_max == self.cfg.down_backoff_max
            && fresh.cfg.health_check == self.cfg.health_check;
        for i in 0..fresh.pools.len() {
            let server = fresh.server(i);
            let Some(old) = self.all().position(|s| s.authority == server.authority) else {
                continue;
            };
            if same_pools {
                fresh.pools[i] = self.pools[old].clone();
            }
            if same_health {
                // What the requests and probes found stays; what an
                // administrator set does not outlive the configuration.
                self.health[old].set_admin(health::Admin::Auto);
                fresh.health[i] = self.health[old].clone();
            }
        }
        fresh.stats = self.stats.clone();
        fresh
    }

    /// Every server: `servers`, then `backup`.
    fn all(&self) -> impl Iterator<Item = &hoard_config::ServerAddr> {
        self.cfg.servers.iter().chain(&self.cfg.backup)
    }

    /// Server `i` of [`Upstream::all`].
    fn server(&self, i: usize) -> &hoard_config::ServerAddr {
        let p = self.cfg.servers.len();
        if i < p {
            &self.cfg.servers[i]
        } else {
            &self.cfg.backup[i - p]
        }
    }

    /// Each server's address (backups last) and whether it is considered up now.
    pub fn servers_up(&self) -> Vec<(&str, bool)> {
        let now = self.clock.now();
        self.all()
            .zip(&self.health)
            .map(|(s, h): (_, &Arc<health::Health>)| (s.authority.as_str(), !h.is_down(now)))
            .collect()
    }

    /// Each server's state now (backups last), for `/status` and `/metrics`.
    pub fn server_states(&self) -> Vec<ServerState<'_>> {
        let now = self.clock.now();
        self.all()
            .zip(&self.health)
            .zip(&self.pools)
            .zip(0..)
            .map(|(((s, h), pool), i)| ServerState {
                address: s.authority.as_str(),
                backup: i >= self.cfg.servers.len(),
                state: match (h.admin(), h.is_down(now)) {
                    (health::Admin::Drain, _) => "drain",
                    (_, true) => "down",
                    (_, false) => "up",
                },
                admin: h.admin(),
                probes: h.probe_window(),
                http1_idle: pool.idle_len(),
                http2: (pool.h2_open(), pool.h2_streams()),
            })
            .collect()
    }

    /// Sets what an administrator wants for the server at `authority`
    /// (`host:port` as configured); false when there is no such server.
    pub fn set_admin(&self, authority: &str, a: health::Admin) -> bool {
        let Some(i) = self.all().position(|s| s.authority == authority) else {
            return false;
        };
        self.health[i].set_admin(a);
        tracing::info!(upstream = %self.cfg.name, server = %authority, state = a.as_str(), "server state set by an administrator");
        true
    }

    /// True when every server of the upstream is considered down (see [`health`]).
    pub fn is_down(&self) -> bool {
        let now = self.clock.now();
        self.health.iter().all(|h| h.is_down(now))
    }

    /// Records the status of a response from server `i` in its health.
    fn record_status(&self, i: usize, status: http::StatusCode) {
        match status.as_u16() {
            502..=504 if self.status_health => self.health[i].failure(self.clock.now()),
            _ => self.health[i].success(),
        }
    }

    /// The first server to try and the round-robin position it came
    /// from (see [`failover`]).
    fn pick(&self) -> Result<(usize, usize), ProxyError> {
        if self.cfg.servers.is_empty() {
            // The stand-in upstream of a configuration whose routes all
            // redirect or respond: nothing is ever to be sent to it.
            return Err(ProxyError::origin(
                ErrorKind::ConnectRefused,
                format!("upstream {:?} has no servers", self.cfg.name),
            ));
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let (p, b) = (self.cfg.servers.len(), self.cfg.backup.len());
        if p == 1 && b == 0 && !self.health[0].is_out() {
            return Ok((0, start));
        }
        let now = self.clock.now();
        failover::first(p, b, start, |i| self.usable(i, now))
            .map(|first| (first, start))
            .ok_or_else(|| {
                ProxyError::origin(
                    ErrorKind::NoLiveServer,
                    format!(
                        "upstream {:?}: every server is out of service (set down, draining, or failing its health check)",
                        self.cfg.name
                    ),
                )
            })
    }

    /// Server `i`'s place in the order of tries at `now`.
    fn usable(&self, i: usize, now: std::time::SystemTime) -> failover::Usable {
        let h = &self.health[i];
        if h.is_out() {
            failover::Usable::Out
        } else if h.is_down(now) {
            failover::Usable::Down
        } else {
            failover::Usable::Up
        }
    }

    /// The servers to try after `first` failed, in order, within `tries`.
    fn rest(&self, start: usize, first: usize) -> std::vec::IntoIter<usize> {
        let (p, b) = (self.cfg.servers.len(), self.cfg.backup.len());
        let now = self.clock.now();
        let mut order = failover::order(p, b, start, |i| self.usable(i, now));
        order.retain(|&i| i != first);
        order.truncate(self.tries().saturating_sub(1));
        order.into_iter()
    }

    /// Most servers a request is tried on.
    fn tries(&self) -> usize {
        let n = self.health.len();
        self.cfg.tries.map_or(n, |t| n.min(t as usize))
    }

    /// Idle connections held across all servers (for tests and stats).
    pub fn idle_connections(&self) -> usize {
        self.pools.iter().map(|p| p.idle_len()).sum()
    }

    /// HTTP/2 connections open across all servers (for tests and stats).
    pub fn h2_connections(&self) -> usize {
        self.pools.iter().map(|p| p.h2_open()).sum()
    }
}
