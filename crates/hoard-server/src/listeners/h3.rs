//! HTTP/3 (RFC 9114, QPACK RFC 9204) over QUIC on a TLS listener's port
//! (UDP), with `quinn` and `h3`: the same pipeline as HTTP/1.1 and HTTP/2.
//!
//! ## Lifecycle
//!
//! [`bind`] opens the endpoint with the listener's certificate
//! ([`super::tls::quic`]: TLS 1.3, ALPN `h3`, no 0-RTT); [`accept_loop`]
//! takes each new connection under the same `server.max_connections`
//! permits as TCP (refused when none is left), gives its handshake
//! `header_read_timeout`, and serves each request stream in a task of its
//! own: the request (its body a [`hoard_proxy::request_body::RequestBody::H3`])
//! goes to [`Pipeline::serve`], the response head, data and trailers go
//! back on the stream. QUIC's own limits: idle connections close after
//! `keep_alive_timeout` (the idle timeout both ends agree on), at most
//! `http3_max_streams` request streams at once per connection, flow
//! control windows that bound a connection's buffers (256 KiB per stream,
//! 2 MiB per connection, each way), the address validation and
//! anti-amplification limit of RFC 9000 §8 (quinn).
//! On shutdown (or when a reload removes the listener) the endpoint stops
//! accepting (new connection attempts are ignored, so that their
//! retransmissions may reach a new process sharing the socket after a
//! binary upgrade), each connection gets a GOAWAY and drains.
//!
//! ## What differs from HTTP/2
//!
//! No interim responses (103) and no sendfile; a reload renews the
//! certificate of the running endpoint (`Endpoint::set_server_config`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use tokio::sync::watch as signal;
use tokio_util::task::TaskTracker;

use hoard_config::ServerConfig;
use hoard_proxy::pipeline::{Conn, Pipeline};
use hoard_proxy::request_body::RequestBody;

/// Opens a QUIC endpoint on `addr` (UDP), or on `inherited` (the socket
/// the previous process passed on, see [`super::inherit`]), with the
/// listener's `quic` configuration and the server's limits. Returns it
/// with a second handle on its socket (what a binary upgrade passes on).
///
/// # Errors
/// When the UDP socket cannot be bound.
pub fn bind(
    addr: SocketAddr,
    inherited: Option<std::net::UdpSocket>,
    mut quic: quinn::ServerConfig,
    server: &ServerConfig,
) -> std::io::Result<(quinn::Endpoint, std::os::fd::OwnedFd)> {
    quic.transport_config(Arc::new(transport(server)));
    let socket = match inherited {
        Some(s) => s,
        None => std::net::UdpSocket::bind(addr)?,
    };
    let handle = socket.try_clone()?.into();
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(quic),
        socket,
        Arc::new(quinn::TokioRuntime),
    )?;
    Ok((endpoint, handle))
}

/// The transport limits of every connection.
pub fn transport(server: &ServerConfig) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let idle = server.keep_alive_timeout.max(Duration::from_millis(100));
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    // quinn keeps an entry per stream the client may open (two maps, sized
    // in powers of two): 256 would cost about 18 KB more per connection.
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(server.http3_max_streams));
    // The client's control and QPACK streams (RFC 9114 §6.2, RFC 9204 §4.2).
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(8));
    // Memory per connection: what a client may have in flight to hoard
    // (request bodies) and what hoard keeps unacknowledged for it.
    t.stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW));
    t.receive_window(quinn::VarInt::from_u32(CONN_WINDOW));
    t.send_window(u64::from(CONN_WINDOW));
    t
}

/// Bytes a client may send on one request stream before hoard reads them.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Bytes in flight on one connection, each way.
const CONN_WINDOW: u32 = 2 * 1024 * 1024;

/// Accepts connections until `shutdown` turns true, then drains them.
pub async fn accept_loop(
    endpoint: quinn::Endpoint,
    pipeline: Arc<Pipeline>,
    mut shutdown: signal::Receiver<bool>,
    listener: Arc<std::sync::atomic::AtomicUsize>,
) {
    let tracker = TaskTracker::new();
    let counters = pipeline.counters.clone();
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
            _ = shutdown.changed() => break,
        };
        let Ok(permit) = pipeline.connections.clone().try_acquire_owned() else {
            counters.inc(&counters.connections_refused);
            incoming.refuse();
            continue;
        };
        counters.inc(&counters.connections_accepted);
        counters.inc(&counters.quic_connections);
        tracker.spawn(connection(
            incoming,
            super::Open {
                _permit: permit,
                counters: counters.clone(),
            },
            pipeline.clone(),
            shutdown.clone(),
            listener.clone(),
        ));
    }
    tracker.close();
    let timeout = pipeline.run().cfg.server.shutdown_timeout;
    // A connection attempt that reaches this endpoint while it drains is
    // ignored, not refused: after a binary upgrade the new process shares
    // the UDP socket, and the client's next Initial packet may reach it.
    let ignore = async {
        while let Some(i) = endpoint.accept().await {
            i.ignore();
        }
    };
    let drained = async {
        tokio::select! {
            _ = tracker.wait() => {}
            _ = ignore => {}
        }
    };
    let _ = tokio::time::timeout(timeout, drained).await;
    endpoint.close(quinn::VarInt::from_u32(0), b"shutdown");
}

async fn connection(
    incoming: quinn::Incoming,
    _open: super::Open,
    pipeline: Arc<Pipeline>,
    mut shutdown: signal::Receiver<bool>,
    listener: Arc<std::sync::atomic::AtomicUsize>,
) {
    let peer = incoming.remote_address();
    let _closed = Closed(pipeline.counters.clone());
    let (handshake, max_head) = {
        let run = pipeline.run();
        (
            run.cfg.server.header_read_timeout,
            run.cfg.server.max_header_size as u64,
        )
    };
    let Ok(connecting) = incoming.accept() else {
        return;
    };
    let conn = match tokio::time::timeout(handshake, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "QUIC handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "QUIC handshake timed out");
            return;
        }
    };
    // No grease (RFC 9114 §7.2.8, §9: optional): h3 sends its reserved
    // frame as one more stream write on every response, not once per
    // connection; clients must ignore unknown frames either way.
    let built = h3::server::builder()
        .max_field_section_size(max_head)
        .send_grease(false)
        .build::<_, Bytes>(h3_quinn::Connection::new(conn))
        .await;
    let mut h3 = match built {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "HTTP/3 connection failed");
            return;
        }
    };
    let requests = TaskTracker::new();
    loop {
        let resolver = tokio::select! {
            r = h3.accept() => match r {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "HTTP/3 connection ended");
                    break;
                }
            },
            _ = shutdown.changed() => {
                // GOAWAY: requests in flight finish, no new ones.
                let _ = h3.shutdown(0).await;
                break;
            }
        };
        let p = pipeline.clone();
        let at = listener.load(std::sync::atomic::Ordering::Relaxed);
        // Polled once here, in the connection's task: a hit from memory
        // is answered in that poll and never becomes a task (as HTTP/2's
        // streams, see `inline_exec`); a request still waiting is spawned.
        // Boxed either way: the request's state (the whole pipeline's) is
        // kilobytes, and tokio moves a task's future by value when it
        // spawns it and when it finishes.
        let serve = async move {
            match resolver.resolve_request().await {
                Ok((req, stream)) => request(p, (peer, at), req, stream).await,
                Err(e) => tracing::debug!(%peer, error = %e, "HTTP/3 request refused"),
            }
        };
        super::inline_exec::run_inline(
            serve,
            |f| {
                requests.spawn(f);
            },
            "an HTTP/3 request stream",
        );
    }
    requests.close();
    requests.wait().await;
}

/// Counts a QUIC connection's end.
struct Closed(Arc<hoard_metrics::counters::Counters>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.inc(&self.0.quic_connections_closed);
    }
}

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Serves one request stream.
async fn request(
    p: Arc<Pipeline>,
    (peer, listener): (SocketAddr, usize),
    req: http::Request<()>,
    stream: Stream,
) {
    let (mut send, recv) = stream.split();
    // No body unless the client announced one (a GET's stream ends with
    // its head; a POST without Content-Length streams).
    let empty = match req.headers().get(http::header::CONTENT_LENGTH) {
        Some(v) => v.as_bytes() == b"0",
        None => matches!(
            *req.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS | http::Method::DELETE
        ),
    };
    let req = req.map(|()| RequestBody::h3(recv, empty));
    let conn = Conn {
        peer,
        tls: true,
        send: None,
        interim: None,
        redirect_https: None,
        listener: u16::try_from(listener).unwrap_or(u16::MAX),
    };
    let resp = p.serve(req, conn).await;
    let (mut parts, mut body) = resp.into_parts();
    // Connection-specific fields are not HTTP/3's (RFC 9114 §4.2).
    for h in [
        http::header::CONNECTION,
        http::header::TRANSFER_ENCODING,
        http::header::UPGRADE,
    ] {
        parts.headers.remove(h);
    }
    parts.headers.remove("keep-alive");
    if send
        .send_response(Response::from_parts(parts, ()))
        .await
        .is_err()
    {
        return;
    }
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let sent = match frame.into_data() {
                    Ok(data) => send.send_data(data).await,
                    Err(frame) => match frame.into_trailers() {
                        Ok(t) => send.send_trailers(t).await,
                        Err(_) => Ok(()),
                    },
                };
                if sent.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                tracing::debug!(%peer, error = %e, "HTTP/3 response body failed; stream reset");
                send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
            None => break,
        }
    }
    let _ = send.finish().await;
}
