//! Upstreams: origin server groups, connections and the request/response
//! exchange with them.
//!
//! [`Upstream::send`] picks a server round-robin, takes an idle connection or
//! opens one (connect timeout), sends the request and waits for the response
//! head (read timeout). The response body is an [`OriginBody`], which enforces
//! the read timeout between chunks and returns the connection to its pool at
//! the end. A request that fails on a *reused* connection before any response
//! arrived is retried once on a fresh connection (the idle connection had been
//! closed by the origin). A request that fails on a server goes on to the
//! next one as [`failover`] says (backup servers included).

pub mod failover;
pub mod health;
pub mod pool;
pub mod tls;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::config::UpstreamConfig;
use crate::counters::Counters;
use crate::error::{ErrorKind, ProxyError};
use crate::metrics::{OriginResult, UpstreamStats};
use failover::Failure;
use pool::{Pool, PoolReturn};

pub use crate::error::BoxError;

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
    pub interim: Option<crate::server::watch::Interim>,
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

/// A response whose framing cannot be trusted (RFC 9112 §6.3): both
/// `Transfer-Encoding` and `Content-Length`, a 204 that declares a body, or
/// a `101` nobody asked for.
fn framing_fault<B>(resp: &Response<B>) -> Option<&'static str> {
    let h = resp.headers();
    let te = h.contains_key(http::header::TRANSFER_ENCODING);
    let cl = h.get_all(http::header::CONTENT_LENGTH).iter().next();
    if te && cl.is_some() {
        return Some("response with both Transfer-Encoding and Content-Length");
    }
    if resp.status() == http::StatusCode::NO_CONTENT
        && (te || cl.is_some_and(|v| v.as_bytes() != b"0"))
    {
        return Some("204 response that declares a body");
    }
    if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        // Only `send_upgrade` asks for a protocol switch; here the
        // connection now speaks something else (RFC 9110 §15.2.2).
        return Some("101 Switching Protocols to a request that asked for no upgrade");
    }
    None
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
            .map(|_| Arc::new(Pool::new(cfg.max_idle, cfg.idle_timeout)))
            .collect();
        let health = (0..n)
            .map(|_| Arc::new(health::Health::new(cfg.down_after, cfg.down_backoff_max)))
            .collect();
        Upstream {
            cfg,
            next: AtomicUsize::new(0),
            pools,
            health,
            counters,
            clock,
            stats: Arc::default(),
            status_health: true,
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
            && fresh.cfg.idle_timeout == self.cfg.idle_timeout;
        let same_health = fresh.cfg.down_after == self.cfg.down_after
            && fresh.cfg.down_backoff_max == self.cfg.down_backoff_max;
        for i in 0..fresh.pools.len() {
            let server = fresh.server(i);
            let Some(old) = self.all().position(|s| s.authority == server.authority) else {
                continue;
            };
            if same_pools {
                fresh.pools[i] = self.pools[old].clone();
            }
            if same_health {
                fresh.health[i] = self.health[old].clone();
            }
        }
        fresh.stats = self.stats.clone();
        fresh
    }

    /// Every server: `servers`, then `backup`.
    fn all(&self) -> impl Iterator<Item = &crate::config::ServerAddr> {
        self.cfg.servers.iter().chain(&self.cfg.backup)
    }

    /// Server `i` of [`Upstream::all`].
    fn server(&self, i: usize) -> &crate::config::ServerAddr {
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
        if p == 1 && b == 0 {
            return Ok((0, start));
        }
        let now = self.clock.now();
        let first = failover::first(p, b, start, |i| !self.health[i].is_down(now));
        Ok((first, start))
    }

    /// The servers to try after `first` failed, in order, within `tries`.
    fn rest(&self, start: usize, first: usize) -> std::vec::IntoIter<usize> {
        let (p, b) = (self.cfg.servers.len(), self.cfg.backup.len());
        let now = self.clock.now();
        let mut order = failover::order(p, b, start, |i| !self.health[i].is_down(now));
        order.retain(|&i| i != first);
        order.truncate(self.tries().saturating_sub(1));
        order.into_iter()
    }

    /// Most servers a request is tried on.
    fn tries(&self) -> usize {
        let n = self.health.len();
        self.cfg.tries.map_or(n, |t| n.min(t as usize))
    }

    /// Sends a request and waits for the response head, trying the next
    /// server after a failure as [`failover`] says. See the module docs.
    /// A request without Host (`host = "server"`, or an HTTP/1.0 client that
    /// sent none) gets the `host:port` of the server it goes to.
    pub async fn send(&self, mut req: OriginRequest) -> Result<Response<OriginBody>, ProxyError> {
        let (mut i, start) = self.pick()?;
        let own_host = !req.headers.contains_key(http::header::HOST);
        let replayable = req.body.is_none();
        let mut rest: Option<std::vec::IntoIter<usize>> = None;
        let mut tried = 1;
        loop {
            if own_host {
                req.headers.remove(http::header::HOST);
                self.default_host(i, &mut req);
            }
            let started = tokio::time::Instant::now();
            // Boxed: connecting (TCP, TLS) and the exchange take kilobytes of
            // future, which would otherwise be room in every request's future,
            // hits included (see `pipeline::future_sizes`).
            let result = Box::pin(self.send_to(i, &mut req, replayable)).await;
            let took = started.elapsed();
            let last = tried >= self.tries();
            let failure = match result {
                Ok(resp) => {
                    let status = resp.status();
                    self.record_status(i, status);
                    self.stats
                        .record(OriginResult::of_status(status.as_u16()), took);
                    let failure = Failure::Status(status.as_u16());
                    if last || !failure.goes_on(self.cfg.retry_on, &req.method, replayable) {
                        Self::note_tries(&req, tried);
                        return Ok(resp);
                    }
                    // Dropped unread: its connection closes with it.
                    drop(resp);
                    (failure, None)
                }
                Err((failure, e)) => {
                    self.health[i].failure(self.clock.now());
                    let r = match e.kind {
                        ErrorKind::ReadTimeout | ErrorKind::ConnectTimeout => OriginResult::Timeout,
                        _ => OriginResult::Error,
                    };
                    self.stats.record(r, took);
                    if last || !failure.goes_on(self.cfg.retry_on, &req.method, replayable) {
                        Self::note_tries(&req, tried);
                        return Err(e);
                    }
                    (failure, Some(e))
                }
            };
            let rest = rest.get_or_insert_with(|| self.rest(start, i));
            let Some(next) = rest.next() else {
                Self::note_tries(&req, tried);
                return Err(failure.1.unwrap_or_else(|| {
                    ProxyError::origin(ErrorKind::BadResponse, "no server left to try")
                }));
            };
            self.counters.inc(&self.counters.origin_failovers);
            tracing::info!(
                upstream = %self.cfg.name,
                from = %self.server(i).authority,
                to = %self.server(next).authority,
                reason = failure.0.as_str(),
                error = failure.1.as_ref().map(tracing::field::display),
                "origin server failed; trying the next one"
            );
            i = next;
            tried += 1;
        }
    }

    fn note_tries(req: &OriginRequest, n: usize) {
        if let Some(t) = &req.tries {
            t.set(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// One try on server `i`. On failure, a request that never reached the
    /// server has its body back in `req`.
    async fn send_to(
        &self,
        i: usize,
        req: &mut OriginRequest,
        replayable: bool,
    ) -> Result<Response<OriginBody>, (Failure, ProxyError)> {
        let pool = &self.pools[i];
        let authority = &self.server(i).authority;
        self.counters.inc(&self.counters.origin_requests);

        let mut reused = None;
        while let Some(mut s) = pool.take() {
            if s.ready().await.is_ok() {
                reused = Some(s);
                break;
            }
        }
        let (mut sender, was_reused) = match reused {
            Some(s) => {
                self.counters.inc(&self.counters.origin_connections_reused);
                (s, true)
            }
            None => (
                self.connect(i).await.map_err(|e| (Failure::Unsent, e))?,
                false,
            ),
        };
        let body = req.body.take().unwrap_or_else(empty);
        let resp = match self.exchange(authority, &mut sender, req.build(body)).await {
            Ok(resp) => resp,
            Err(failed) => {
                // A request hyper gave back was never written: always safe to
                // resend. One that was written may have been processed: resend
                // only idempotent methods (RFC 9110 §9.2.2).
                let retry = match failed {
                    Exchange::Back(r, _) if was_reused => *r,
                    Exchange::Failed(Failure::Error, _)
                        if was_reused && replayable && req.method.is_idempotent() =>
                    {
                        req.build(empty())
                    }
                    failed => return Err(self.failed(failed, req, replayable)),
                };
                self.counters.inc(&self.counters.origin_retries);
                sender = match self.connect(i).await {
                    Ok(s) => s,
                    Err(e) => {
                        if !replayable {
                            req.body = Some(retry.into_body());
                        }
                        return Err((Failure::Unsent, e));
                    }
                };
                match self.exchange(authority, &mut sender, retry).await {
                    Ok(resp) => resp,
                    Err(failed) => return Err(self.failed(failed, req, replayable)),
                }
            }
        };
        if let Some(why) = framing_fault(&resp) {
            // The connection is dropped, never reused: where this response
            // ends is not known for sure (a smuggling vector).
            self.counters.inc(&self.counters.origin_broken_responses);
            return Err((
                Failure::Final,
                ProxyError::origin(ErrorKind::BadResponse, format!("{authority}: {why}")),
            ));
        }
        let ret = PoolReturn {
            sender,
            pool: pool.clone(),
        };
        let stats = self.stats.clone();
        Ok(resp.map(|body| OriginBody::new(body, self.cfg.read_timeout, ret, stats)))
    }

    /// Writes a request on a connection and waits for the response head.
    async fn exchange(
        &self,
        authority: &str,
        sender: &mut hyper::client::conn::http1::SendRequest<ReqBody>,
        req: Request<ReqBody>,
    ) -> Result<Response<Incoming>, Exchange> {
        match tokio::time::timeout(self.cfg.read_timeout, sender.try_send_request(req)).await {
            Err(_) => {
                self.counters.inc(&self.counters.origin_timeouts);
                Err(Exchange::Failed(
                    Failure::Timeout,
                    ProxyError::origin(
                        ErrorKind::ReadTimeout,
                        format!(
                            "{authority}: no response head within {:?}",
                            self.cfg.read_timeout
                        ),
                    ),
                ))
            }
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(mut e)) => {
                let err = send_error(authority, e.error());
                match e.take_message() {
                    Some(r) => Err(Exchange::Back(Box::new(r), err)),
                    // The client's body failed: its fault, not the server's.
                    None if err.source == crate::error::ErrorSource::Client => {
                        Err(Exchange::Failed(Failure::Final, err))
                    }
                    None => Err(Exchange::Failed(Failure::Error, err)),
                }
            }
        }
    }

    /// A failed exchange as `send_to` returns it: a request given back has
    /// its body put back in `req` for the next server.
    fn failed(
        &self,
        failed: Exchange,
        req: &mut OriginRequest,
        replayable: bool,
    ) -> (Failure, ProxyError) {
        match failed {
            Exchange::Back(r, e) => {
                if !replayable {
                    req.body = Some(r.into_body());
                }
                (Failure::Unsent, self.counted(e))
            }
            Exchange::Failed(f, e) => (f, self.counted(e)),
        }
    }

    /// Opens a connection to server `i`: TCP, then TLS for an `https://`
    /// server (the whole within `connect_timeout`), then the HTTP/1.1
    /// handshake.
    async fn connect(
        &self,
        i: usize,
    ) -> Result<hyper::client::conn::http1::SendRequest<ReqBody>, ProxyError> {
        let server = self.server(i);
        let authority = server.authority.as_str();
        let deadline = tokio::time::Instant::now() + self.cfg.connect_timeout;
        let timed_out = || {
            self.counters.inc(&self.counters.origin_connect_errors);
            ProxyError::origin(
                ErrorKind::ConnectTimeout,
                format!(
                    "{authority}: connect timed out after {:?}",
                    self.cfg.connect_timeout
                ),
            )
        };
        if let Some(path) = authority.strip_prefix("unix:") {
            // A Unix-socket origin: no TLS, no Nagle; the same timeouts and errors.
            let stream = match tokio::time::timeout_at(
                deadline,
                tokio::net::UnixStream::connect(path),
            )
            .await
            {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => {
                    self.counters.inc(&self.counters.origin_connect_errors);
                    return Err(ProxyError::origin(
                        ErrorKind::ConnectRefused,
                        format!("{authority}: {e}"),
                    ));
                }
                Ok(Ok(s)) => s,
            };
            let sender = self.handshake(authority, TokioIo::new(stream)).await?;
            self.counters.inc(&self.counters.origin_connections_opened);
            return Ok(sender);
        }
        let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(authority)).await {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) => {
                self.counters.inc(&self.counters.origin_connect_errors);
                return Err(ProxyError::origin(
                    ErrorKind::ConnectRefused,
                    format!("{authority}: {e}"),
                ));
            }
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let sender = match (&self.cfg.tls, server.tls) {
            (Some(tls), true) => {
                let name = tls::server_name(tls, &server.host).map_err(|m| {
                    ProxyError::origin(
                        ErrorKind::Tls(tls::TlsFailure::Name),
                        format!("{authority}: server name {m}"),
                    )
                })?;
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = match tokio::time::timeout_at(
                    deadline,
                    connector.connect(name, stream),
                )
                .await
                {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(e)) => {
                        let why = tls::TlsFailure::of(&e).unwrap_or(tls::TlsFailure::Handshake);
                        self.counters.inc(&self.counters.origin_tls_errors);
                        tracing::warn!(origin = %authority, reason = why.as_str(), error = %e, "origin TLS failed");
                        return Err(ProxyError::origin(
                            ErrorKind::Tls(why),
                            format!("{authority}: TLS: {e}"),
                        ));
                    }
                    Ok(Ok(s)) => s,
                };
                let resumed =
                    stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                self.counters.inc(if resumed {
                    &self.counters.origin_tls_resumed
                } else {
                    &self.counters.origin_tls_handshakes
                });
                self.handshake(authority, TokioIo::new(stream)).await?
            }
            _ => self.handshake(authority, TokioIo::new(stream)).await?,
        };
        self.counters.inc(&self.counters.origin_connections_opened);
        Ok(sender)
    }

    /// The HTTP/1.1 handshake over an open stream; its connection task runs
    /// on its own.
    async fn handshake<T>(
        &self,
        authority: &str,
        io: T,
    ) -> Result<hyper::client::conn::http1::SendRequest<ReqBody>, ProxyError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| {
                ProxyError::origin(
                    ErrorKind::ConnectRefused,
                    format!("{authority}: handshake: {e}"),
                )
            })?;
        tokio::spawn(async move {
            // With upgrades: a `101` hands the connection to a tunnel.
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "origin connection ended");
            }
        });
        sender.ready().await.map_err(|e| {
            ProxyError::origin(ErrorKind::ConnectRefused, format!("{authority}: {e}"))
        })?;
        Ok(sender)
    }

    /// Gives a request without Host the one of server `i`: its `host:port`,
    /// or `localhost` for a Unix socket.
    fn default_host(&self, i: usize, req: &mut OriginRequest) {
        if req.headers.contains_key(http::header::HOST) {
            return;
        }
        let server = self.server(i);
        let host = if server.authority.starts_with("unix:") {
            &server.host
        } else {
            &server.authority
        };
        if let Ok(v) = http::HeaderValue::from_str(host) {
            req.headers.insert(http::header::HOST, v);
        }
    }

    /// Sends an upgrade request (see `pipeline::tunnel`) on a connection
    /// of its own, never pooled: after a `101` it belongs to the tunnel.
    pub async fn send_upgrade(
        &self,
        mut req: OriginRequest,
    ) -> Result<Response<Incoming>, ProxyError> {
        let (mut i, start) = self.pick()?;
        let own_host = !req.headers.contains_key(http::header::HOST);
        let mut rest: Option<std::vec::IntoIter<usize>> = None;
        let mut tried = 1;
        // A server that cannot be reached: the next one (the request has
        // not left, whatever its method).
        let mut sender = loop {
            if own_host {
                req.headers.remove(http::header::HOST);
                self.default_host(i, &mut req);
            }
            self.counters.inc(&self.counters.origin_requests);
            let e = match Box::pin(self.connect(i)).await {
                Ok(s) => break s,
                Err(e) => e,
            };
            self.health[i].failure(self.clock.now());
            let next = match tried < self.tries() {
                true => rest.get_or_insert_with(|| self.rest(start, i)).next(),
                false => None,
            };
            let Some(next) = next else {
                Self::note_tries(&req, tried);
                return Err(e);
            };
            self.counters.inc(&self.counters.origin_failovers);
            tracing::info!(
                upstream = %self.cfg.name,
                from = %self.server(i).authority,
                to = %self.server(next).authority,
                error = %e,
                "origin server unreachable; trying the next one"
            );
            i = next;
            tried += 1;
        };
        Self::note_tries(&req, tried);
        let authority = self.server(i).authority.clone();
        let body = req.body.take().unwrap_or_else(empty);
        let sent =
            tokio::time::timeout(self.cfg.read_timeout, sender.send_request(req.build(body)));
        match sent.await {
            Err(_) => {
                self.counters.inc(&self.counters.origin_timeouts);
                Err(ProxyError::origin(
                    ErrorKind::ReadTimeout,
                    format!(
                        "{authority}: no response head within {:?}",
                        self.cfg.read_timeout
                    ),
                ))
            }
            Ok(Err(e)) => Err(self.counted(send_error(&authority, &e))),
            Ok(Ok(resp)) => {
                self.record_status(i, resp.status());
                Ok(resp)
            }
        }
    }

    /// Counts a failed exchange that TLS caused.
    fn counted(&self, e: ProxyError) -> ProxyError {
        if matches!(e.kind, ErrorKind::Tls(_)) {
            self.counters.inc(&self.counters.origin_tls_errors);
        }
        e
    }

    /// Idle connections held across all servers (for tests and stats).
    pub fn idle_connections(&self) -> usize {
        self.pools.iter().map(|p| p.idle_len()).sum()
    }
}

/// How an exchange on a connection failed.
enum Exchange {
    /// hyper gave the request back: it was never written.
    Back(Box<Request<ReqBody>>, ProxyError),
    /// It was (maybe) written.
    Failed(Failure, ProxyError),
}

/// Maps a failed exchange: a request body over the size limit (413) or
/// that stopped arriving (408) is the client's fault; anything else is the
/// origin's (502).
fn send_error(authority: &str, e: &hyper::Error) -> ProxyError {
    // A TLS 1.3 server refuses a client certificate (or its absence) after
    // the handshake: the alert comes with the first response read.
    if let Some(why) = tls::TlsFailure::of(e) {
        tracing::warn!(origin = %authority, reason = why.as_str(), error = %e, "origin TLS failed");
        return ProxyError::origin(ErrorKind::Tls(why), format!("{authority}: TLS: {e}"));
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return ProxyError::client(ErrorKind::BodyTooLarge, "request body over the limit");
        }
        if s.is::<crate::pipeline::client_body::BodyTimeout>() {
            return ProxyError::client(ErrorKind::BodyTimeout, "request body stopped arriving");
        }
        source = s.source();
    }
    ProxyError::origin(ErrorKind::BadResponse, format!("{authority}: {e}"))
}

/// Why an origin body failed.
#[derive(Debug)]
pub enum OriginBodyError {
    /// No data within the read timeout.
    Timeout,
    /// The connection failed or the framing was broken.
    Aborted(hyper::Error),
}

impl std::fmt::Display for OriginBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OriginBodyError::Timeout => f.write_str("origin body read timed out"),
            OriginBodyError::Aborted(e) => write!(f, "origin body aborted: {e}"),
        }
    }
}

impl std::error::Error for OriginBodyError {}

/// A response body from an origin: read timeout between frames, connection
/// returned to the pool at the end.
#[derive(Debug)]
pub struct OriginBody {
    inner: Incoming,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    ret: Option<PoolReturn>,
    stats: Arc<UpstreamStats>,
}

impl OriginBody {
    fn new(
        inner: Incoming,
        timeout: Duration,
        ret: PoolReturn,
        stats: Arc<UpstreamStats>,
    ) -> OriginBody {
        let mut b = OriginBody {
            inner,
            timeout,
            sleep: None,
            ret: Some(ret),
            stats,
        };
        if b.inner.is_end_stream() {
            b.release();
        }
        b
    }

    fn release(&mut self) {
        if let Some(r) = self.ret.take() {
            r.release();
        }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = OriginBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginBodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                this.sleep = None;
                if let Some(d) = f.data_ref() {
                    this.stats
                        .bytes
                        .fetch_add(d.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                if this.inner.is_end_stream() {
                    this.release();
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.ret = None;
                Poll::Ready(Some(Err(OriginBodyError::Aborted(e))))
            }
            Poll::Ready(None) => {
                this.release();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let timeout = this.timeout;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                if sleep.as_mut().poll(cx).is_ready() {
                    this.ret = None;
                    return Poll::Ready(Some(Err(OriginBodyError::Timeout)));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
