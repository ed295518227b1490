//! The exchange with an origin server group: a request sent and its
//! response head awaited, on a pooled or fresh connection, retried once on
//! a fresh one after a reused one failed, and tried on the next server as
//! [`super::failover`] says. See the module docs of [`super`].

use http::{Request, Response};
use hyper::body::Incoming;

use super::failover::Failure;
use super::pool::PoolReturn;
use super::{empty, OriginBody, OriginRequest, ReqBody, Upstream};
use crate::error::{ErrorKind, ProxyError};
use hoard_metrics::metrics::OriginResult;

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

impl Upstream {
    /// Sends a request and waits for the response head, trying the next
    /// server after a failure as `failover` says. See the module docs.
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
            self.counters.inc(&self.counters.origin_requests);
            // Boxed: connecting (TCP, TLS) and the exchange take kilobytes of
            // future, which would otherwise be room in every request's future,
            // hits included (see `pipeline::future_sizes`).
            let result = Box::pin(self.send_to(i, &mut req, replayable, true)).await;
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

    pub(super) fn note_tries(req: &OriginRequest, n: usize) {
        if let Some(t) = &req.tries {
            t.set(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// One try on server `i`. On failure, a request that never reached the
    /// server has its body back in `req`.
    pub(super) async fn send_to(
        &self,
        i: usize,
        req: &mut OriginRequest,
        replayable: bool,
        counted: bool,
    ) -> Result<Response<OriginBody>, (Failure, ProxyError)> {
        let pool = &self.pools[i];
        let authority = &self.server(i).authority;

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
        // A probe's bytes are not the upstream's traffic.
        let stats = if counted {
            self.stats.clone()
        } else {
            std::sync::Arc::default()
        };
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
            Err(_) => Err(Exchange::Failed(
                Failure::Timeout,
                self.head_timed_out(authority),
            )),
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

    /// No response head from `authority` within the read timeout: counted,
    /// and the error for it.
    pub(super) fn head_timed_out(&self, authority: &str) -> ProxyError {
        self.counters.inc(&self.counters.origin_timeouts);
        ProxyError::origin(
            ErrorKind::ReadTimeout,
            format!(
                "{authority}: no response head within {:?}",
                self.cfg.read_timeout
            ),
        )
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

    /// Gives a request without Host the one of server `i`: its `host:port`,
    /// or `localhost` for a Unix socket.
    pub(super) fn default_host(&self, i: usize, req: &mut OriginRequest) {
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

    /// Counts a failed exchange that TLS caused.
    pub(super) fn counted(&self, e: ProxyError) -> ProxyError {
        if matches!(e.kind, ErrorKind::Tls(_)) {
            self.counters.inc(&self.counters.origin_tls_errors);
        }
        e
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
pub(super) fn send_error(authority: &str, e: &hyper::Error) -> ProxyError {
    // A TLS 1.3 server refuses a client certificate (or its absence) after
    // the handshake: the alert comes with the first response read.
    if let Some(why) = crate::tls_failure::TlsFailure::of(e) {
        tracing::warn!(origin = %authority, reason = why.as_str(), error = %e, "origin TLS failed");
        return ProxyError::origin(ErrorKind::Tls(why), format!("{authority}: TLS: {e}"));
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return ProxyError::client(ErrorKind::BodyTooLarge, "request body over the limit");
        }
        if s.is::<crate::error::BodyTimeout>() {
            return ProxyError::client(ErrorKind::BodyTimeout, "request body stopped arriving");
        }
        source = s.source();
    }
    ProxyError::origin(ErrorKind::BadResponse, format!("{authority}: {e}"))
}
