//! Upgrades (WebSocket and other `Upgrade` protocols) on HTTP/1.1, and
//! WebSockets over HTTP/2 (RFC 8441): the request goes to the origin with
//! its `Upgrade` and `Connection: upgrade` (the only hop-by-hop fields
//! forwarded), on a connection of its own (never pooled); a `101` turns
//! the client's connection (or HTTP/2 stream) and the origin's connection
//! into a byte tunnel both ways (`tokio::io::copy_bidirectional`: a
//! [`BUFFER`] per direction, nothing more). Never cached, never coalesced.
//! Any other answer is passed to the client as it came.
//!
//! A WebSocket over HTTP/2 arrives as an extended `CONNECT` (`:protocol =
//! websocket`, no key); the origin gets an HTTP/1.1 handshake with a key
//! made here, its `Sec-WebSocket-Accept` is checked here, and the client
//! gets a `200` on its stream. The WebSocket frames inside are the same on
//! both (RFC 8441 §5), so the tunnel copies bytes as for HTTP/1.1.
//!
//! ## Lifecycle
//!
//! request with `Upgrade` (or extended `CONNECT`) → origin exchange →
//! `101` → the client gets the origin's `101` (its fields, `Via`; a `200`
//! on HTTP/2) → both upgrades complete → bytes
//! flow until either side closes (close frames pass untouched), or no
//! byte moves either way for `server.tunnel_idle_timeout` → both sides
//! closed, counted, and the request's access log line written (status
//! 101, or 200 for an extended `CONNECT`: the status sent; bytes each way, the tunnel's whole life as its time): the
//! response carries a [`TunnelEnd`] that `Pipeline::serve` hands the line
//! to, instead of writing it when the (empty) body is sent. The request's
//! place in its route's `limit_connections` goes the same way: it is held
//! for the tunnel's life and given back when the tunnel closes, before
//! `tunnels_closed` counts it.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderValue, Response, StatusCode};
use hyper_util::rt::TokioIo;

use hoard_policy::cache_status::Outcome;

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::tally::Pending;
use hoard_edge::limit::ConnGuard;
use hoard_origin::error::{ErrorKind, ProxyError};

/// Where a tunnel's access log line and its `limit_connections` guard
/// wait for the tunnel to close: put in the `101`'s extensions by
/// [`Pipeline::tunnel`], filled by `Pipeline::serve` before the `101` is
/// sent, taken by the tunnel's task.
#[derive(Clone, Default)]
pub(crate) struct TunnelEnd(Arc<parking_lot::Mutex<Held>>);

/// What a [`TunnelEnd`] holds.
#[derive(Default)]
struct Held {
    line: Option<Box<Pending>>,
    guard: Option<Arc<ConnGuard>>,
}

impl TunnelEnd {
    /// Hands over the request's line (by `serve`, before the tunnel runs).
    pub(crate) fn put(&self, line: Box<Pending>) {
        self.0.lock().line = Some(line);
    }

    /// Keeps the request counted by its route's `limit_connections` until
    /// the tunnel closes (by `serve`, before the tunnel runs).
    pub(crate) fn hold(&self, guard: Arc<ConnGuard>) {
        self.0.lock().guard = Some(guard);
    }

    /// Gives the count back and writes the line, if the log is on: bytes
    /// each way.
    fn close(&self, to_client: u64, to_origin: u64) {
        let Held { line, guard } = std::mem::take(&mut *self.0.lock());
        drop(guard);
        if let Some(mut p) = line {
            p.record.tunnel_to_origin = Some(to_origin);
            p.write(to_client);
        }
    }
}

/// Each direction's buffer: a 16 KiB message moves in one read and one
/// write (the 8 KiB default took two of each, and 0.8x nginx's rate with
/// its `proxy_buffer_size 64k`). Pages of it that no read reached are
/// never touched, so an idle or small-message tunnel costs less.
const BUFFER: usize = 64 << 10;

/// The longest refusal (a non-`101` answer to an upgrade) passed on.
const REFUSAL_MAX: usize = 64 * 1024;

/// What a client asked to tunnel.
#[derive(Debug)]
pub(crate) enum Asked {
    /// An HTTP/1.1 `Upgrade` (WebSocket or another protocol): forwarded as
    /// it came, with this `Upgrade` value.
    Upgrade(HeaderValue),
    /// A WebSocket over HTTP/2 (extended `CONNECT` with `:protocol =
    /// websocket`, RFC 8441): forwarded to the origin as an HTTP/1.1
    /// WebSocket handshake (§5 of the RFC), answered `200` once the origin
    /// switched.
    WebSocketOverHttp2,
}

/// Whether a request asks for a tunnel (RFC 9110 §7.8: an `Upgrade` field
/// and `upgrade` among the `Connection` options; or an extended `CONNECT`
/// on HTTP/2, RFC 8441 §4) and may have one. `h2c` is not tunnelled: it
/// asks hoard itself, not the origin, for HTTP/2, and is dropped as before
/// (the request is served as HTTP/1.1).
///
/// # Errors
/// A 400 for `Connection: upgrade` without an `Upgrade` field, an
/// extended `CONNECT` for a protocol other than `websocket`, or a tunnel
/// on a route with `upgrade = false`; a 405 for a plain `CONNECT` (hoard
/// is no forward proxy).
pub(crate) fn check(
    parts: &http::request::Parts,
    allowed: bool,
) -> Result<Option<Asked>, ProxyError> {
    if parts.method == http::Method::CONNECT {
        let Some(protocol) = parts.extensions.get::<hyper::ext::Protocol>() else {
            return Err(not_a_forward_proxy());
        };
        if !protocol.as_str().eq_ignore_ascii_case("websocket") {
            return Err(ProxyError::client(
                ErrorKind::BadRequest,
                format!(
                    "extended CONNECT for {:?}: only websocket is tunnelled",
                    protocol.as_str()
                ),
            ));
        }
        return refused_unless(allowed).map(|()| Some(Asked::WebSocketOverHttp2));
    }
    let asks = hoard_policy::headers::has_any(&parts.headers, &[header::CONNECTION])
        && parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !asks {
        return Ok(None);
    }
    let Some(upgrade) = parts.headers.get(header::UPGRADE) else {
        return Err(ProxyError::client(
            ErrorKind::BadRequest,
            "Connection: upgrade without an Upgrade field",
        ));
    };
    let to_h2c = upgrade
        .to_str()
        .is_ok_and(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("h2c")));
    if parts.version != http::Version::HTTP_11 || to_h2c {
        return Ok(None);
    }
    refused_unless(allowed).map(|()| Some(Asked::Upgrade(upgrade.clone())))
}

/// A plain `CONNECT` (authority-form, no `:protocol`) asks for a forward
/// proxy: a 405, before its target is looked at.
///
/// # Errors
/// The 405.
pub(crate) fn refuse_connect(parts: &http::request::Parts) -> Result<(), ProxyError> {
    if parts.method == http::Method::CONNECT
        && parts.extensions.get::<hyper::ext::Protocol>().is_none()
    {
        return Err(not_a_forward_proxy());
    }
    Ok(())
}

fn not_a_forward_proxy() -> ProxyError {
    ProxyError::client(
        ErrorKind::MethodNotAllowed,
        "CONNECT: hoard is a reverse proxy",
    )
}

fn refused_unless(allowed: bool) -> Result<(), ProxyError> {
    if allowed {
        Ok(())
    } else {
        Err(ProxyError::client(
            ErrorKind::BadRequest,
            "upgrade requested on a route with upgrade = false",
        ))
    }
}

impl Pipeline {
    /// Forwards an upgrade request; on `101`, starts the tunnel.
    pub(crate) async fn tunnel(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        asked: Asked,
        client: hyper::upgrade::OnUpgrade,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let mut oreq = self.origin_request(ctx, false, None);
        // RFC 8441 §5: the HTTP/1.1 handshake made for the client; its key
        // is this hop's, and so is the check of the origin's answer.
        let key = match &asked {
            Asked::Upgrade(value) => {
                oreq.headers.insert(header::UPGRADE, value.clone());
                None
            }
            Asked::WebSocketOverHttp2 => {
                let key = tungstenite::handshake::client::generate_key();
                oreq.headers
                    .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
                oreq.headers.insert(
                    header::SEC_WEBSOCKET_KEY,
                    HeaderValue::from_str(&key).expect("base64 is a valid field value"),
                );
                Some(key)
            }
        };
        oreq.headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        let mut resp = ctx.upstream.send_upgrade(oreq).await?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            return self.refusal(ctx, resp).await;
        }
        let origin = hyper::upgrade::on(&mut resp);
        let mut out = Response::new(ProxyBody::Empty);
        let over_http2 = key.is_some();
        if let Some(key) = key {
            let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
            if resp
                .headers()
                .get(header::SEC_WEBSOCKET_ACCEPT)
                .map(HeaderValue::as_bytes)
                != Some(accept.as_bytes())
            {
                return Err(ProxyError::origin(
                    ErrorKind::BadResponse,
                    "101 to a WebSocket handshake without the right Sec-WebSocket-Accept",
                ));
            }
            // The switch is this hop's: the client gets a 200 and the
            // fields that describe the WebSocket (protocol, extensions).
            *out.status_mut() = StatusCode::OK;
            let mut fields = resp.headers().clone();
            hoard_policy::headers::strip_hop_by_hop(&mut fields);
            fields.remove(header::SEC_WEBSOCKET_ACCEPT);
            fields.remove(header::CONTENT_LENGTH);
            *out.headers_mut() = fields;
        } else {
            *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            // The origin's fields (Sec-WebSocket-Accept, the protocol
            // chosen), Upgrade and Connection included: they are this
            // hop's answer.
            *out.headers_mut() = resp.headers().clone();
        }
        self.add_via(out.headers_mut(), http::Version::HTTP_11);
        let end = TunnelEnd::default();
        super::note_outcome(Outcome::Pass);
        out.extensions_mut().insert(end.clone());
        let counters = self.counters.clone();
        counters.inc(&counters.tunnels_opened);
        if over_http2 {
            counters.inc(&counters.tunnels_opened_http2);
        }
        let idle = ctx.run.cfg.server.tunnel_idle_timeout;
        tokio::spawn(async move {
            let (up, down) = match tokio::join!(client, origin) {
                (Ok(c), Ok(o)) => carry(c, o, idle).await,
                _ => (0, 0),
            };
            end.close(down, up);
            counters.add(&counters.tunnel_bytes_to_origin, up);
            counters.add(&counters.tunnel_bytes_to_client, down);
            counters.inc(&counters.tunnels_closed);
        });
        Ok(out)
    }

    /// An origin's refusal of an upgrade (e.g. 426, 400), passed as it came
    /// (such answers are short; at most `REFUSAL_MAX` is kept).
    async fn refusal(
        &self,
        ctx: &Ctx<'_>,
        resp: Response<hyper::body::Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        use http_body_util::BodyExt;
        let (mut parts, body) = resp.into_parts();
        let limited = http_body_util::Limited::new(body, REFUSAL_MAX);
        let read = tokio::time::timeout(ctx.upstream.cfg.read_timeout, limited.collect());
        let Ok(Ok(bytes)) = read.await else {
            return Err(ProxyError::origin(
                ErrorKind::BadResponse,
                "the answer to an upgrade request failed or was too long",
            ));
        };
        let bytes = bytes.to_bytes();
        hoard_policy::headers::strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::TRANSFER_ENCODING);
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        self.add_via(&mut parts.headers, http::Version::HTTP_11);
        parts.extensions = http::Extensions::new();
        super::note_outcome(Outcome::Pass);
        Ok(Response::from_parts(parts, ProxyBody::Full(Some(bytes))))
    }
}

/// Carries bytes both ways until either side closes or nothing moves for
/// `idle`; returns the bytes (to the origin, to the client).
async fn carry(
    client: hyper::upgrade::Upgraded,
    origin: hyper::upgrade::Upgraded,
    idle: std::time::Duration,
) -> (u64, u64) {
    let (up, down) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut c = Counting::new(TokioIo::new(client), up.clone());
    let mut o = Counting::new(TokioIo::new(origin), down.clone());
    {
        let copy = tokio::io::copy_bidirectional_with_sizes(&mut c, &mut o, BUFFER, BUFFER);
        tokio::pin!(copy);
        let mut seen = 0;
        loop {
            tokio::select! {
                _ = &mut copy => break,
                () = tokio::time::sleep(idle) => {
                    let now = up.load(Ordering::Relaxed) + down.load(Ordering::Relaxed);
                    if now == seen {
                        tracing::debug!("tunnel idle past tunnel_idle_timeout; closed");
                        break;
                    }
                    seen = now;
                }
            }
        }
    }
    (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed))
}

/// A stream that counts the bytes read from it (one direction of a tunnel).
struct Counting<T> {
    inner: T,
    read: Arc<AtomicU64>,
}

impl<T> Counting<T> {
    fn new(inner: T, read: Arc<AtomicU64>) -> Self {
        Counting { inner, read }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counting<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counting<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
