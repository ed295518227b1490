//! Listeners and client connections.
//!
//! Each listener has an accept loop task; each accepted connection gets a task
//! that serves it with hyper (HTTP/1.1, and HTTP/2 by prior knowledge on plain
//! sockets or by ALPN over TLS). A request is handed to the
//! [`hoard_proxy::pipeline::Pipeline`], and its response gets the
//! connection's fields on the way back (`answer`); limits (head size, header count) are
//! enforced by hyper, which answers 431/400 itself; the head read timeout by
//! the connection's watchdog (`watch`).
//!
//! HTTP/2 streams are first polled inside the connection's task
//! ([`inline_exec`]), and an HTTP/2 connection's writes are held back while
//! it is polled and sent in one write afterwards ([`cork`]): the hits
//! answered in one poll leave in one TLS record and one `writev`.
//!
//! ## Limits
//!
//! A connection takes one of `server.max_connections` permits for its whole
//! life; when none is left, a new connection is closed at once (never
//! queued), except that the oldest connection that has not sent a byte yet
//! is closed to make room for it. A plain connection that sends no byte within
//! `header_read_timeout` is closed; a TLS handshake gets as long.
//! Afterwards a watchdog (`watch`, which also times request heads: hyper
//! runs no head timer of its own) closes it when idle past
//! `keep_alive_timeout`, when the client stops reading for `send_timeout`,
//! or when it resets more than `max_resets` requests. An HTTP/1.x
//! connection quiet between two requests is parked: hyper hands the socket
//! back and its buffers and slots go to the thread's few spares until a
//! connection comes back (`park`). A quiet HTTP/2 connection stays with
//! hyper; it frees its write batching buffer (`cork`), and is polled once inside
//! `h2::release_idle` (a patch, vendor/README.md), where the `h2` crate
//! frees its frame and HPACK buffers and its emptied stream slots, to
//! allocate them again when the client next speaks; its watchdog stops
//! ticking until a byte moves (`ticks`), and its future is polled only
//! when something woke it (`gate`).
//!
//! ## Shutdown
//!
//! When the proxy's shutdown signal fires, each accept loop closes its
//! listener (new connections are refused, unless a new process shares the
//! socket after a binary upgrade) and drains: requests in flight complete;
//! an HTTP/1.x request that arrives from then on is answered with
//! `Connection: close`; a connection with nothing in flight is closed once
//! it has been quiet for [`DRAIN_QUIET`] (so a request already on its way,
//! or a keep-alive client's next one, is answered instead of cut off);
//! HTTP/2 connections get a GOAWAY. The loop ends when every connection is closed or after
//! `server.shutdown_timeout`, whichever comes first.

mod answer;
pub mod cork;
mod gate;
pub mod h3;
pub mod inherit;
pub mod inline_exec;
pub mod park;
pub mod proxy_protocol;
pub mod sni;
mod ticks;
pub mod tls;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch as signal;
use tokio_util::task::TaskTracker;

use hoard_config::ServerConfig;
use hoard_proxy::pipeline::Pipeline;
use hoard_proxy::sendfile::{SendQueue, SendfileStream};
use inline_exec::InlineExec;
use watch::{Activity, Limits, Verdict, Watched};

/// How long a draining connection with nothing in flight waits for a
/// request before it is closed (see the module docs).
pub const DRAIN_QUIET: Duration = Duration::from_millis(250);

/// Resolves once a shutdown has begun and `DRAIN_QUIET` has passed since.
async fn drained(shutdown: &mut signal::Receiver<bool>) {
    if !*shutdown.borrow_and_update() {
        let _ = shutdown.changed().await;
    }
    tokio::time::sleep(DRAIN_QUIET).await;
}

/// Binds a listener (SO_REUSEADDR, backlog 4096).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = if addr.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// Adopts `inherited` (a socket passed on by the previous process, see
/// [`inherit`]) or else binds `addr`.
pub fn bind_or_adopt(
    addr: SocketAddr,
    inherited: Option<std::net::TcpListener>,
) -> std::io::Result<TcpListener> {
    match inherited {
        Some(l) => TcpListener::from_std(l),
        None => bind(addr),
    }
}

/// How a listener's connections are served: HTTP/1.x by hyper's HTTP/1
/// connection (which hands the socket back when parked, see [`park`]),
/// HTTP/2 (prior knowledge or ALPN) by hyper-util's.
#[derive(Debug)]
pub struct Builders {
    h1: hyper::server::conn::http1::Builder,
    h2: Option<auto::Builder<InlineExec>>,
}

fn builder(server: &ServerConfig, http2: bool) -> Builders {
    let mut h1 = hyper::server::conn::http1::Builder::new();
    h1.timer(TokioTimer::new())
        // The connection's watchdog times heads (see `watch`): hyper's
        // timer would be a boxed sleep set and cancelled per request.
        .header_read_timeout(None)
        .max_buf_size(server.max_header_size.max(8192))
        // Queue body chunks, never copy them into one buffer: sendfile
        // placeholders must reach the stream as they are.
        .writev(true)
        .keep_alive(true)
        // Unless set, hyper reads while a request is being answered, to
        // notice a client that closes (into 64 bytes of its own since
        // hoard's patch, vendor/README.md, not a fresh 8 KiB buffer).
        .half_close(server.ignore_client_abort);
    if server.max_headers != 100 {
        h1.max_headers(server.max_headers);
    }
    let h2 = http2.then(|| {
        let mut b = auto::Builder::new(InlineExec).http2_only();
        b.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(server.http2_max_streams)
            // WebSockets over HTTP/2 (RFC 8441), see `pipeline::tunnel`.
            .enable_connect_protocol()
            .max_header_list_size(server.max_header_size as u32);
        b
    });
    Builders { h1, h2 }
}

/// What a listener serves with; replaced in place by a reload (TLS
/// material is read again), so the socket is kept.
pub struct ListenerState {
    /// HTTP/2 accepted (ALPN over TLS, prior knowledge on plain sockets).
    pub http2: bool,
    /// The TLS acceptor, for a TLS listener.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// PROXY protocol expected, from these peers (empty: any).
    pub proxy_protocol: Option<Arc<[hoard_config::ops::Cidr]>>,
    /// The QUIC configuration, when the listener serves HTTP/3 too.
    pub quic: Option<quinn::ServerConfig>,
    /// `Alt-Svc` for responses over TCP, once HTTP/3 listens.
    pub alt_svc: Option<http::HeaderValue>,
    /// Redirect every request (but ACME challenges) to HTTPS on this port.
    pub redirect_https: Option<u16>,
    /// The listener's index in the running configuration's listeners (a
    /// reload that moves it stores the new one), for sites' `listeners`.
    pub index: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for ListenerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerState")
            .field("http2", &self.http2)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Runs the accept loop of one listener until `shutdown` turns true (the
/// proxy stops, or a reload removed the listener); then drains it. Each
/// connection is served with the configuration running when it was
/// accepted (the server limits) and the listener's current state.
pub async fn accept_loop(
    listener: TcpListener,
    state: Arc<arc_swap::ArcSwap<ListenerState>>,
    pipeline: Arc<Pipeline>,
    mut shutdown: signal::Receiver<bool>,
) {
    let tracker = TaskTracker::new();
    let permits = pipeline.connections.clone();
    let counters = pipeline.counters.clone();
    // Rebuilt when the running configuration or the listener changes.
    let mut current: Option<(u64, Arc<ListenerState>, Arc<Builders>)> = None;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                // Full: the oldest connection that has not sent a byte
                // makes room (nginx likewise reuses idle connections),
                // so silent sockets cannot lock real clients out.
                // (Only when one is waiting: a stored notification would
                // close the next connection to arrive.)
                if pipeline.silent.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    pipeline.pressure.notify_one();
                    tokio::task::yield_now().await;
                }
                permits.clone().try_acquire_owned().ok()
            }
        };
        let Some(permit) = permit else {
            counters.inc(&counters.connections_refused);
            drop(stream);
            continue;
        };
        let run = pipeline.snapshot();
        let listener_state = state.load_full();
        let builder = match &current {
            Some((generation, at, b))
                if *generation == run.generation && Arc::ptr_eq(at, &listener_state) =>
            {
                b.clone()
            }
            _ => {
                let b = Arc::new(builder(&run.cfg.server, listener_state.http2));
                current = Some((run.generation, listener_state.clone(), b.clone()));
                b
            }
        };
        let server = &run.cfg.server;
        let tls = listener_state.tls.clone();
        let proxy_protocol = listener_state.proxy_protocol.clone();
        counters.inc(&counters.connections_accepted);
        let _ = stream.set_nodelay(true);
        let f = serve(
            permit,
            stream,
            peer,
            builder.clone(),
            pipeline.clone(),
            tls.clone(),
            proxy_protocol,
            shutdown.clone(),
            ConnSettings {
                alt_svc: listener_state.alt_svc.clone(),
                redirect_https: listener_state.redirect_https,
                listener: listener_state.index.clone(),
                handshake_timeout: server.header_read_timeout,
                sendfile: server.sendfile,
                limits: Limits {
                    keep_alive_timeout: server.keep_alive_timeout,
                    send_timeout: server.send_timeout,
                    max_resets: server.max_resets,
                    header_read_timeout: Some(server.header_read_timeout),
                },
            },
            tracker.clone(),
        );
        tracker.spawn(f);
    }
    drop(listener);
    let counters = pipeline.counters.clone();
    counters.inc(&counters.listeners_closed);
    tracker.close();
    let open = tracker.len();
    let timeout = pipeline.run().cfg.server.shutdown_timeout;
    if tokio::time::timeout(timeout, tracker.wait()).await.is_err() {
        tracing::warn!(
            open,
            ?timeout,
            "connections still open after the shutdown timeout"
        );
    }
}

/// What a connection task needs from the server settings.
#[derive(Debug, Clone)]
struct ConnSettings {
    /// `Alt-Svc` to add to every response (HTTP/3 on the same port).
    alt_svc: Option<http::HeaderValue>,
    /// See `ListenerState::redirect_https`.
    redirect_https: Option<u16>,
    /// See `ListenerState::index`.
    listener: Arc<std::sync::atomic::AtomicUsize>,
    /// A TLS handshake gets as long as a request head.
    handshake_timeout: Duration,
    /// Plain HTTP/1.1 connections send disk hits with sendfile.
    sendfile: bool,
    /// What the connection's watchdog enforces.
    limits: Limits,
}

/// Counts a connection as silent (no byte yet) while it lives.
struct Silent<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Silent<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Silent<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Silent(count)
    }
}

impl Drop for Silent<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A connection's permit; its end is counted.
struct Open {
    _permit: tokio::sync::OwnedSemaphorePermit,
    counters: Arc<hoard_metrics::counters::Counters>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.counters.inc(&self.counters.connections_closed);
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    permit: tokio::sync::OwnedSemaphorePermit,
    stream: TcpStream,
    peer: SocketAddr,
    builder: Arc<Builders>,
    pipeline: Arc<Pipeline>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    proxy_protocol: Option<Arc<[hoard_config::ops::Cidr]>>,
    mut shutdown: signal::Receiver<bool>,
    settings: ConnSettings,
    tracker: TaskTracker,
) {
    let ConnSettings {
        alt_svc,
        redirect_https,
        listener,
        handshake_timeout,
        sendfile,
        limits,
    } = settings;
    let open = Open {
        _permit: permit,
        counters: pipeline.counters.clone(),
    };
    let (mut stream, mut peer) = (stream, peer);
    if let Some(from) = proxy_protocol {
        // Only a balancer we trust may say who the client is (an empty
        // list trusts none).
        if !from.iter().any(|c| c.contains(peer.ip())) {
            pipeline
                .counters
                .inc(&pipeline.counters.proxy_protocol_refused);
            tracing::debug!(%peer, "PROXY protocol from a peer not in proxy_protocol_from; closed");
            return;
        }
        // (Boxed: its buffer would be room in every connection's task.)
        let read = tokio::select! {
            r = Box::pin(tokio::time::timeout(handshake_timeout, proxy_protocol::read_header(&mut stream))) => r,
            _ = drained(&mut shutdown) => return,
        };
        match read {
            Ok(Ok(Some(client))) => peer = client,
            Ok(Ok(None)) => {}
            Ok(Err(why)) => {
                pipeline
                    .counters
                    .inc(&pipeline.counters.proxy_protocol_refused);
                tracing::debug!(%peer, ?why, "no valid PROXY protocol header; closed");
                return;
            }
            Err(_) => {
                pipeline
                    .counters
                    .inc(&pipeline.counters.proxy_protocol_refused);
                tracing::debug!(%peer, "no PROXY protocol header within the head timeout; closed");
                return;
            }
        }
    }
    let is_tls = tls.is_some();
    // A plain connection that opened with the HTTP/2 preface.
    let mut h2c = false;
    if !is_tls {
        // A client that connects and says nothing is closed on the head
        // timeout, like one that stops in the middle of a head.
        // (`peek` waits for a byte; readiness alone can be spurious.)
        // A shutdown closes it once it has stayed silent for `DRAIN_QUIET`.
        // Three bytes tell an HTTP/2 preface (`PRI * HTTP/2.0`) from a request.
        let mut first = [0u8; 3];
        let silent = Silent::new(&pipeline.silent);
        let peeked = tokio::select! {
            r = tokio::time::timeout(handshake_timeout, stream.peek(&mut first)) => r,
            _ = drained(&mut shutdown) => return,
            _ = pipeline.pressure.notified() => {
                pipeline.counters.inc(&pipeline.counters.connections_reclaimed);
                tracing::debug!(%peer, "silent connection closed to make room");
                return;
            }
        };
        drop(silent);
        match peeked {
            Ok(Ok(n)) if n > 0 => h2c = n == 3 && &first == b"PRI",
            Ok(_) => return, // closed or failed before a byte
            Err(_) => {
                pipeline.counters.inc(&pipeline.counters.connections_silent);
                tracing::debug!(%peer, "client sent nothing within the head timeout; closed");
                return;
            }
        }
    }
    // The connection proper is a task of its own: what this one holds to
    // wait for the first byte (timers, room for a PROXY header) is given
    // back, and an idle connection costs only the smaller task. (Its
    // future is `serve_connection`'s own: an `async move` block around it
    // would keep a second copy of every argument for the connection's life.)
    let fut = serve_connection(
        open,
        stream,
        (alt_svc, redirect_https, listener),
        peer,
        builder,
        pipeline,
        tls,
        shutdown,
        handshake_timeout,
        sendfile,
        limits,
        h2c,
    );
    tracker.spawn(fut);
}

/// What a TLS client chose by ALPN, as far as serving it goes.
enum Alpn {
    H2,
    Http1,
}

/// The TLS handshake, within the head timeout: the stream and what ALPN
/// chose, or `None` when the handshake failed, timed out, or was a
/// TLS-ALPN-01 validation (RFC 8737 §3: the handshake was the answer, no
/// request follows).
async fn tls_handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    limit: Duration,
    peer: SocketAddr,
) -> Option<(tokio_rustls::server::TlsStream<TcpStream>, Alpn)> {
    let s = match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return None;
        }
    };
    let alpn = match s.get_ref().1.alpn_protocol() {
        Some(hoard_acme::resolver::ACME_TLS_ALPN) => return None,
        Some(b"h2") => Alpn::H2,
        _ => Alpn::Http1,
    };
    Some((s, alpn))
}

/// Serves a connection that has spoken (or a TLS one) until it ends.
#[allow(clippy::too_many_arguments)]
async fn serve_connection(
    _open: Open,
    stream: TcpStream,
    (alt_svc, redirect_https, listener): (
        Option<http::HeaderValue>,
        Option<u16>,
        Arc<std::sync::atomic::AtomicUsize>,
    ),
    peer: SocketAddr,
    builder: Arc<Builders>,
    pipeline: Arc<Pipeline>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut shutdown: signal::Receiver<bool>,
    handshake_timeout: Duration,
    sendfile: bool,
    limits: Limits,
    h2c: bool,
) {
    let is_tls = tls.is_some();
    let queue = (!is_tls && !h2c && sendfile).then(|| SendQueue::new(pipeline.counters.clone()));
    let q = queue.clone();
    let max_requests = pipeline.run().cfg.server.max_requests_per_connection;
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let activity = Activity::new(limits);
    let act = activity.clone();
    let counters = pipeline.counters.clone();
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let p = pipeline.clone();
        let alt_svc = alt_svc.clone();
        let token = act.request();
        let n = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // The last request a keep-alive connection may carry is answered
        // with `Connection: close` (HTTP/1.x; h2 clients open new streams).
        // So is a request that arrives while the server drains.
        let last = req.version() <= hyper::Version::HTTP_11
            && (n >= max_requests || act.draining.load(std::sync::atomic::Ordering::Relaxed));
        // Only HTTP/1.x writes chunks as they are (HTTP/2 copies them into frames).
        let send = q
            .as_ref()
            .filter(|_| req.version() <= hyper::Version::HTTP_11)
            .cloned();
        // Interim responses go to HTTP/1.1 clients only (never to HTTP/1.0,
        // RFC 9110 §15.2; hyper's HTTP/2 server cannot send them).
        let interim = (req.version() == hyper::Version::HTTP_11).then(|| act.interim(n));
        let finish_interim = interim.as_ref().map(|_| act.interim.clone());
        // Passed as an argument, not as request extensions (a map each
        // request would allocate).
        let conn = hoard_proxy::pipeline::Conn {
            peer,
            tls: is_tls,
            send,
            interim,
            redirect_https,
            listener: u16::try_from(listener.load(std::sync::atomic::Ordering::Relaxed))
                .unwrap_or(u16::MAX),
        };
        answer::Answer::new(
            p.serve(req.map(hoard_proxy::request_body::RequestBody::Hyper), conn),
            finish_interim,
            alt_svc,
            last,
            token,
        )
    });
    // Serves the connection until it ends, closing it gracefully on
    // shutdown or when the watchdog finds it idle or flooding resets, and
    // at once when the client stopped reading (see `watch`).
    macro_rules! drive {
        // The connection future, whether it is HTTP/1.x, its watchdog's
        // pinned `Ticks`, how to begin its graceful shutdown, and what to
        // release when it is quiet (HTTP/2; HTTP/1.x is parked, see `park`).
        ($conn:expr, $h1:expr, $ticks:expr, |$c:ident| $graceful:expr, |$q:ident| $quiet:expr, |$t:ident| $tls:expr) => {{
            let conn = $conn;
            tokio::pin!(conn);
            let mut ticks = $ticks;
            let mut dog = activity.watchdog($h1);
            // One waiter on the wake-up for as long as it does not fire
            // (a new one per poll would be queued and unqueued each time).
            let mut woken = std::pin::pin!(activity.wake().notified());
            let mut closing = false;
            // A shutdown that began while the connection was silent.
            let mut drain_tick = shutdown.borrow_and_update().then(|| tokio::time::interval(DRAIN_QUIET / 5));
            if drain_tick.is_some() {
                activity.draining.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            loop {
                let verdict = tokio::select! {
                    biased;
                    r = conn.as_mut() => break r,
                    _ = shutdown.changed(), if drain_tick.is_none() => {
                        // HTTP/1.x answers what comes (with `Connection:
                        // close`) and closes when quiet; HTTP/2 says GOAWAY.
                        activity.draining.store(true, std::sync::atomic::Ordering::Relaxed);
                        drain_tick = Some(tokio::time::interval(DRAIN_QUIET / 5));
                        if !$h1 && !closing {
                            closing = true;
                            let $c = conn.as_mut();
                            $graceful;
                        }
                        continue;
                    }
                    _ = async { drain_tick.as_mut().expect("invariant: guarded").tick().await }, if drain_tick.is_some() && !closing => {
                        if activity.quiet(&mut dog, DRAIN_QUIET) {
                            closing = true;
                            let $c = conn.as_mut();
                            $graceful;
                        }
                        continue;
                    }
                    // A reset flood, or an interim response to write (the
                    // loop polls hyper again, which flushes, which writes it).
                    _ = woken.as_mut() => {
                        woken.set(activity.wake().notified());
                        activity.verdict(&mut dog)
                    }
                    _ = std::future::poll_fn(|cx| ticks.as_mut().poll_tick(cx, activity.progress())) => {
                        activity.verdict(&mut dog)
                    }
                };
                match verdict {
                    Verdict::Fine => {}
                    // Either drops the connection, even after a park began
                    // (it is not taken back for parking).
                    Verdict::SendStalled => {
                        activity.parking.store(false, std::sync::atomic::Ordering::Relaxed);
                        counters.inc(&counters.connections_send_timeout);
                        tracing::debug!(%peer, "client stopped reading; connection dropped");
                        break Ok(());
                    }
                    Verdict::HeadTimeout => {
                        activity.parking.store(false, std::sync::atomic::Ordering::Relaxed);
                        counters.inc(&counters.connections_head_timeout);
                        tracing::debug!(%peer, "request head unfinished within the head timeout; connection dropped");
                        break Ok(());
                    }
                    _ if closing => {}
                    Verdict::Park if !$h1 => {
                        let $q = conn.as_mut();
                        $quiet;
                        // One poll with h2's leave to free its frame and
                        // HPACK buffers, which it allocates again when the
                        // client next speaks (see `h2::release_idle`).
                        let polled = std::future::poll_fn(|cx| {
                            std::task::Poll::Ready(h2::release_idle(|| {
                                std::future::Future::poll(conn.as_mut(), cx)
                            }))
                        })
                        .await;
                        if let std::task::Poll::Ready(r) = polled {
                            break r;
                        }
                        // After that poll, which read until nothing was
                        // left: the transport's read buffer (TLS).
                        let $t = conn.as_mut();
                        $tls;
                        // Nothing to watch until a byte moves (see `ticks`).
                        ticks.as_mut().park(activity.progress(), activity.idle_deadline(&dog));
                        counters.inc(&counters.connections_parked);
                        hoard_heap::gave_back();
                    }
                    Verdict::Park => {
                        // Only once hyper is between two requests (see
                        // `park`); never while draining.
                        if drain_tick.is_none() {
                            activity.parking.store(true, std::sync::atomic::Ordering::Relaxed);
                            closing = true;
                            let $c = conn.as_mut();
                            $graceful;
                        }
                    }
                    Verdict::Idle | Verdict::ResetFlood => {
                        counters.inc(if verdict == Verdict::Idle {
                            &counters.connections_idle_closed
                        } else {
                            &counters.connections_reset_flood
                        });
                        tracing::debug!(%peer, verdict = verdict.as_str(), "closing connection");
                        closing = true;
                        let $c = conn.as_mut();
                        $graceful;
                    }
                }
            }
        }};
    }
    // HTTP/1.x, parked whenever it is quiet between two requests. Each
    // serving phase (hyper's connection, the watchdog's state) is one box,
    // freed while the connection is parked.
    macro_rules! drive_h1 {
        ($io:expr) => {{
            let mut io = Watched::new($io, activity.clone());
            let mut svc = svc;
            loop {
                // A block of its own: what it binds is gone before the
                // parked wait (a binding's room stays in the loop's state
                // until its scope ends, moved out or not).
                let unread = {
                    let (r, back) = Box::pin(async {
                        let buffers = park::take_spare();
                        let mut conn = builder
                            .h1
                            .serve_connection_with_buffers(TokioIo::new(io), svc, buffers)
                            .with_upgrades();
                        // The timer in the serving phase's box: a connection
                        // back from parking allocates none.
                        let r = drive!(
                            &mut conn,
                            true,
                            std::pin::pin!(ticks::Ticks::new(limits.tick())),
                            |c| std::pin::Pin::new(&mut **c.get_mut()).graceful_shutdown(),
                            |_q| (),
                            |_t| ()
                        );
                        let r = r.map_err(|e| -> Box<dyn std::error::Error + Send + Sync> {
                            e.into()
                        });
                        let parked = activity
                            .parking
                            .swap(false, std::sync::atomic::Ordering::Relaxed);
                        if !parked || r.is_err() {
                            return (r, None);
                        }
                        // hyper ended because the watchdog parked it: take the
                        // socket and the service back; hyper's buffers and
                        // slots go to the thread's spares (see `park`).
                        let back = conn.into_parts_with_buffers().map(|(p, buffers)| {
                            park::spare(buffers);
                            let unread = (!p.read_buf.is_empty()).then_some(p.read_buf);
                            (p.io.into_inner(), p.service, unread)
                        });
                        (r, back)
                    })
                    .await;
                    let Some((back_io, back_svc, unread)) = back else {
                        break r;
                    };
                    (io, svc) = (back_io, back_svc);
                    unread
                };
                counters.inc(&counters.connections_parked);
                if unread.is_none() {
                    park::Socket::release_idle(&mut io);
                }
                hoard_heap::gave_back();
                if let Some(bytes) = unread {
                    io.unread(bytes);
                    continue;
                }
                let left = limits.keep_alive_timeout.saturating_sub(limits.tick());
                match park::wait(io.get_ref(), left, &mut shutdown).await {
                    park::Woken::Readable => {}
                    woken => {
                        if woken == park::Woken::Idle {
                            counters.inc(&counters.connections_idle_closed);
                        }
                        tracing::debug!(%peer, woken = woken.as_str(), "closing parked connection");
                        let _ = tokio::time::timeout(
                            limits.send_timeout,
                            tokio::io::AsyncWriteExt::shutdown(&mut io),
                        )
                        .await;
                        break Ok(());
                    }
                }
            }
        }};
    }
    // HTTP/2: the responses of one poll leave in one write (`cork`).
    macro_rules! drive_corked {
        ($io:expr) => {{
            let (io, handle) = cork::cork(Watched::new($io, activity.clone()));
            drive!(
                cork::Corked::new(
                    builder
                        .h2
                        .as_ref()
                        .expect("invariant: HTTP/2 is on")
                        .serve_connection_with_upgrades(TokioIo::new(io), svc),
                    handle
                ),
                false,
                // A box of its own: an HTTP/2 connection's state lives as
                // long as it does, and stays smaller without the timer.
                Box::pin(ticks::Ticks::new(limits.tick())),
                |c| c.inner().graceful_shutdown(),
                |q| q.release(),
                |t| t.release_transport()
            )
        }};
    }
    let result = match (tls, queue) {
        // (Each way is a box of its own: a union of all of them would be
        // the size of the largest, for every connection.)
        (None, _) if h2c && builder.h2.is_some() => Box::pin(async { drive_corked!(stream) }).await,
        (None, Some(queue)) => {
            Box::pin(async { drive_h1!(SendfileStream::new(stream, queue)) }).await
        }
        (None, None) => Box::pin(async { drive_h1!(stream) }).await,
        // The handshake's state is a box of its own too, freed once the
        // connection is served. (`s` is neither borrowed here nor held in
        // a temporary, or the task would keep room for it while served.)
        (Some(acceptor), _) => {
            let Some((s, alpn)) =
                Box::pin(tls_handshake(&acceptor, stream, handshake_timeout, peer)).await
            else {
                return;
            };
            if matches!(alpn, Alpn::H2) && builder.h2.is_some() {
                Box::pin(async { drive_corked!(s) }).await
            } else {
                Box::pin(async { drive_h1!(s) }).await
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "client connection ended with an error");
    }
}
