//! The exchange with an origin server group: a request sent and its
//! response head awaited, on a pooled or fresh connection, retried once on
//! a fresh one after a reused one failed, and tried on the next server as
//! [`super::failover`] says. See the module docs of [`super`].

use std::sync::Arc;

use http::{Request, Response, Uri};
use hyper::body::Incoming;

use super::connect::{Conn, Offer};
use super::failover::Failure;
use super::h2pool::{Connected, H2Conn, H2Stream, Learned, Reserve};
use super::pool::{Held, PoolReturn};
use super::{empty, OriginBody, OriginRequest, ReqBody, Upstream};
use crate::error::{ErrorKind, ProxyError};
use hoard_config::OriginProtocol;
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

        let (mut sender, was_reused) = self
            .sender(i, None)
            .await
            .map_err(|e| (Failure::Unsent, e))?;
        let body = req.body.take().unwrap_or_else(empty);
        let resp = match self.exchange(i, &mut sender, req.build(body)).await {
            Ok(resp) => resp,
            Err(failed) => {
                // A request hyper gave back was never written: always safe to
                // resend. One that was written may have been processed: resend
                // only idempotent methods (RFC 9110 §9.2.2). One an HTTP/2
                // server refused was not processed (RFC 9113 §8.7): resent
                // when its body can be.
                let retry = match failed {
                    Exchange::Back(r, _) if was_reused => req.build(r.into_body()),
                    Exchange::Refused(_) if replayable => req.build(empty()),
                    Exchange::Failed(Failure::Error, _)
                        if was_reused && replayable && req.method.is_idempotent() =>
                    {
                        req.build(empty())
                    }
                    failed => return Err(self.failed(failed, req, replayable)),
                };
                self.counters.inc(&self.counters.origin_retries);
                // HTTP/1.1: a fresh connection; HTTP/2: a stream on another
                // connection (a new one when the others are full).
                let next = match &sender {
                    Sender::H1(_) => self.connect(i, self.offer(i)).await.map(|c| {
                        (
                            match c {
                                Conn::H1(s) => Sender::H1(s),
                                Conn::H2(c) => Sender::H2(pool.h2.adopt(c)),
                            },
                            false,
                        )
                    }),
                    Sender::H2(s) => {
                        let not = s.conn().clone();
                        self.sender(i, Some(&not)).await
                    }
                };
                sender = match next {
                    Ok((s, _)) => s,
                    Err(e) => {
                        if !replayable {
                            req.body = Some(retry.into_body());
                        }
                        return Err((Failure::Unsent, e));
                    }
                };
                match self.exchange(i, &mut sender, retry).await {
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
        let ret = PoolReturn(match sender {
            Sender::H1(s) => Held::H1(s, pool.clone()),
            Sender::H2(s) => Held::H2(s),
        });
        // A probe's bytes are not the upstream's traffic.
        let stats = if counted {
            self.stats.clone()
        } else {
            std::sync::Arc::default()
        };
        Ok(resp.map(|body| OriginBody::new(body, self.cfg.read_timeout, ret, stats)))
    }

    /// What a new connection to server `i` offers (see [`Offer`]).
    fn offer(&self, i: usize) -> Offer {
        match self.cfg.protocol {
            OriginProtocol::H1 => Offer::H1,
            OriginProtocol::H2 => Offer::H2,
            OriginProtocol::Auto if self.server(i).tls => Offer::Either,
            OriginProtocol::Auto => Offer::H1,
        }
    }

    /// A connection for one request to server `i`, and whether it was
    /// open already: an idle HTTP/1.1 one or a new one; with HTTP/2, a
    /// stream on an open connection other than `not` with room, else on a
    /// new one (see `h2pool`).
    async fn sender(
        &self,
        i: usize,
        not: Option<&Arc<H2Conn>>,
    ) -> Result<(Sender, bool), ProxyError> {
        let pool = &self.pools[i];
        loop {
            let h2 = match self.offer(i) {
                Offer::H1 => false,
                Offer::H2 => true,
                Offer::Either => pool.h2.learned() != Learned::H1,
            };
            if !h2 {
                while let Some(mut s) = pool.take() {
                    if s.ready().await.is_ok() {
                        self.counters.inc(&self.counters.origin_connections_reused);
                        return Ok((Sender::H1(s), true));
                    }
                }
                return Ok(match self.connect(i, self.offer(i)).await? {
                    Conn::H1(s) => (Sender::H1(s), false),
                    Conn::H2(c) => (Sender::H2(pool.h2.adopt(c)), false),
                });
            }
            match pool.h2.reserve(not) {
                Reserve::Stream(s) => {
                    self.counters.inc(&self.counters.origin_connections_reused);
                    return Ok((Sender::H2(s), true));
                }
                Reserve::Wait(mut rx) => {
                    let _ = rx.wait_for(|c| !matches!(c, Connected::Pending)).await;
                    if let Connected::Failed(kind, detail) = &*rx.borrow() {
                        return Err(ProxyError::origin(*kind, detail.clone()));
                    }
                }
                Reserve::Connect(ticket) => {
                    return match self.connect(i, self.offer(i)).await {
                        Ok(Conn::H2(c)) => Ok((Sender::H2(ticket.opened(c)), false)),
                        Ok(Conn::H1(s)) => {
                            ticket.http1();
                            Ok((Sender::H1(s), false))
                        }
                        Err(e) => {
                            ticket.failed(&e);
                            Err(e)
                        }
                    };
                }
            }
        }
    }

    /// Writes a request on a connection and waits for the response head.
    async fn exchange(
        &self,
        i: usize,
        sender: &mut Sender,
        req: Request<ReqBody>,
    ) -> Result<Response<Incoming>, Exchange> {
        let server = self.server(i);
        let authority = server.authority.as_str();
        let sent = match sender {
            Sender::H1(s) => {
                tokio::time::timeout(self.cfg.read_timeout, s.try_send_request(req)).await
            }
            Sender::H2(s) => {
                let req = h2_form(req, server.tls);
                let mut h2 = s.conn().sender();
                tokio::time::timeout(self.cfg.read_timeout, h2.try_send_request(req)).await
            }
        };
        match sent {
            Err(_) => Err(Exchange::Failed(
                Failure::Timeout,
                self.head_timed_out(authority),
            )),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(mut e)) => {
                let err = send_error(authority, e.error());
                let refused = match sender {
                    Sender::H2(s) => {
                        let refused = h2_refused(e.error());
                        if e.message().is_some() || refused == Some(true) {
                            // Closed, or going away: no new stream on it.
                            s.conn().retire();
                        }
                        refused.is_some()
                    }
                    Sender::H1(_) => false,
                };
                match e.take_message() {
                    Some(r) => Err(Exchange::Back(Box::new(r), err)),
                    // The client's body failed: its fault, not the server's.
                    None if err.source == crate::error::ErrorSource::Client => {
                        Err(Exchange::Failed(Failure::Final, err))
                    }
                    None if refused => {
                        self.counters.inc(&self.counters.origin_streams_refused);
                        Err(Exchange::Refused(err))
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
            // Not processed, but its body (if any) is gone.
            Exchange::Refused(e) if replayable => (Failure::Unsent, e),
            Exchange::Refused(e) => (Failure::Error, e),
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

/// A connection for one request.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<ReqBody>),
    H2(H2Stream),
}

/// How an exchange on a connection failed.
enum Exchange {
    /// hyper gave the request back: it was never written.
    Back(Box<Request<ReqBody>>, ProxyError),
    /// An HTTP/2 server refused the stream before processing it.
    Refused(ProxyError),
    /// It was (maybe) written.
    Failed(Failure, ProxyError),
}

/// A request for an HTTP/2 connection (RFC 9113 §8.2.2, §8.3.1): the
/// target absolute (hyper sends its scheme and authority as `:scheme` and
/// `:authority`) and `Host` removed; no connection-specific field.
fn h2_form(req: Request<ReqBody>, tls: bool) -> Request<ReqBody> {
    use http::header;
    let (mut parts, body) = req.into_parts();
    if parts.uri.scheme().is_none() {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        if let Some(uri) = host.and_then(|h| {
            Uri::builder()
                .scheme(if tls { "https" } else { "http" })
                .authority(h)
                .path_and_query(target)
                .build()
                .ok()
        }) {
            parts.uri = uri;
            parts.headers.remove(header::HOST);
            parts.version = http::Version::HTTP_2;
        }
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ] {
        parts.headers.remove(name);
    }
    if parts
        .headers
        .get(header::TE)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        parts.headers.remove(header::TE);
    }
    Request::from_parts(parts, body)
}

/// Whether an HTTP/2 server refused a stream before processing it: reset
/// with `REFUSED_STREAM` (`Some(false)`), or above the last stream of a
/// graceful `GOAWAY` (`Some(true)`: the connection goes away) (RFC 9113
/// §8.7).
fn h2_refused(e: &hyper::Error) -> Option<bool> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<h2::Error>() {
            return match h.reason() {
                Some(h2::Reason::REFUSED_STREAM) if h.is_reset() && h.is_remote() => Some(false),
                Some(h2::Reason::NO_ERROR) if h.is_go_away() && h.is_remote() => Some(true),
                _ => None,
            };
        }
        source = s.source();
    }
    None
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
