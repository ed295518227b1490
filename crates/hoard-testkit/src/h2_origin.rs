//! A fake origin that speaks HTTP/2: prior knowledge (h2c) over TCP, or
//! TLS with ALPN `h2` (the `h2` crate's server, so that a case can refuse
//! a stream, reset one mid-body, leave one unanswered or send `GOAWAY`).
//!
//! Streams run at once, so instead of a script a *handler* answers each
//! request ([`Reply`]); the origin counts what a case asserts: connections
//! accepted, requests (and over which HTTP version), the most streams in
//! flight on one connection, and the ALPN protocol of each TLS
//! connection. Every event goes to the case's transcript. Strictness is
//! by counts: a case asserts [`H2Origin::requests`] and
//! [`H2Origin::connections`] exactly.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use crate::transcript::Transcript;
use crate::Endpoint;

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct H2Request {
    /// Method.
    pub method: http::Method,
    /// The target as received (absolute: scheme and authority from the
    /// pseudo-header fields).
    pub uri: http::Uri,
    /// Header fields.
    pub headers: http::HeaderMap,
    /// The HTTP version (always HTTP/2 here).
    pub version: http::Version,
    /// The connection it came on (1, 2, ...).
    pub conn: usize,
    /// Its number among all requests (1, 2, ...).
    pub seq: usize,
    /// The request body.
    pub body: Bytes,
}

impl H2Request {
    /// The path and query.
    pub fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }
}

/// What the origin does with a request.
#[derive(Debug)]
pub enum Reply {
    /// This response, whole.
    Full(http::Response<Bytes>),
    /// `RST_STREAM` with `REFUSED_STREAM`: not processed.
    Refuse,
    /// The head and these first bytes, then, once the case notifies,
    /// `RST_STREAM` with `INTERNAL_ERROR` (a reset sent at once could
    /// overtake the head).
    ResetMidBody(http::Response<()>, Bytes, Arc<Notify>),
    /// No answer at all, until the client resets the stream.
    Hang,
    /// The whole connection dropped (TCP closed) without an answer.
    DropConnection,
    /// An interim (1xx) response head, then this response whole.
    Interim(http::Response<()>, http::Response<Bytes>),
}

impl Reply {
    /// A 200 with `body` and these header fields.
    pub fn ok(body: impl Into<Bytes>, fields: &[(&str, &str)]) -> Reply {
        let body = body.into();
        let mut b = http::Response::builder()
            .status(200)
            .header("content-length", body.len());
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        Reply::Full(b.body(body).expect("h2 origin: response"))
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;
type Handler = Arc<dyn Fn(H2Request) -> BoxFuture + Send + Sync>;

#[derive(Default)]
struct Stats {
    connections: AtomicUsize,
    closed: tokio::sync::watch::Sender<usize>,
    requests: AtomicUsize,
    interims: AtomicUsize,
    http2: AtomicUsize,
    most_streams: AtomicUsize,
    alpn: Mutex<Vec<Option<String>>>,
}

/// Configures an HTTP/2 origin; from [`crate::Test::h2_origin`].
pub struct H2OriginBuilder {
    name: String,
    transcript: Transcript,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_streams: Option<u32>,
    goaway_after: Option<usize>,
    handler: Option<Handler>,
}

impl H2OriginBuilder {
    pub(crate) fn new(name: String, transcript: Transcript) -> Self {
        Self {
            name,
            transcript,
            tls: None,
            max_streams: None,
            goaway_after: None,
            handler: None,
        }
    }

    /// Speaks TLS with this configuration, its ALPN set to `h2` alone.
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        let mut c = (*config).clone();
        c.alpn_protocols = vec![b"h2".to_vec()];
        self.tls = Some(Arc::new(c));
        self
    }

    /// Advertises `SETTINGS_MAX_CONCURRENT_STREAMS = n`.
    pub fn max_streams(mut self, n: u32) -> Self {
        self.max_streams = Some(n);
        self
    }

    /// Sends a graceful `GOAWAY` on each connection once it accepted `n`
    /// requests (streams in flight finish).
    pub fn goaway_after(mut self, n: usize) -> Self {
        self.goaway_after = Some(n);
        self
    }

    /// Answers every request with `f`.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(H2Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |r| -> BoxFuture { Box::pin(f(r)) }));
        self
    }

    /// Binds `127.0.0.1:0` and serves.
    pub async fn start(self) -> H2Origin {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("h2 origin: bind");
        let addr = listener.local_addr().expect("h2 origin: local_addr");
        self.transcript
            .log(&self.name, format_args!("listening on {addr} (HTTP/2)"));
        let stats = Arc::new(Stats::default());
        let handler = self
            .handler
            .unwrap_or_else(|| Arc::new(|_| -> BoxFuture { Box::pin(async { Reply::Refuse }) }));
        let srv = Arc::new(Server {
            name: self.name,
            transcript: self.transcript,
            stats: stats.clone(),
            handler,
            max_streams: self.max_streams,
            goaway_after: self.goaway_after,
        });
        let tls = self.tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let id = srv.stats.connections.fetch_add(1, Ordering::SeqCst) + 1;
                srv.log(format_args!("accept conn {id}"));
                let _ = stream.set_nodelay(true);
                let (srv, tls) = (srv.clone(), tls.clone());
                conns.spawn(async move {
                    match tls {
                        None => srv.serve_counted(stream, id).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(s) => {
                                let alpn = s
                                    .get_ref()
                                    .1
                                    .alpn_protocol()
                                    .map(|p| String::from_utf8_lossy(p).into_owned());
                                srv.log(format_args!("conn {id}: TLS, ALPN {alpn:?}"));
                                srv.stats.alpn.lock().push(alpn);
                                srv.serve_counted(s, id).await;
                            }
                            Err(e) => srv.log(format_args!("conn {id}: TLS failed: {e}")),
                        },
                    }
                });
                while conns.try_join_next().is_some() {}
            }
        });
        H2Origin { addr, stats, task }
    }
}

struct Server {
    name: String,
    transcript: Transcript,
    stats: Arc<Stats>,
    handler: Handler,
    max_streams: Option<u32>,
    goaway_after: Option<usize>,
}

impl Server {
    fn log(&self, event: impl std::fmt::Display) {
        self.transcript.log(&self.name, event);
    }

    async fn serve<T>(self: Arc<Self>, io: T, id: usize)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let mut b = h2::server::Builder::new();
        if let Some(n) = self.max_streams {
            b.max_concurrent_streams(n);
        }
        let mut conn = match b.handshake::<_, Bytes>(io).await {
            Ok(c) => c,
            Err(e) => {
                self.log(format_args!("conn {id}: HTTP/2 handshake failed: {e}"));
                return;
            }
        };
        let active = Arc::new(AtomicUsize::new(0));
        let drop_conn = Arc::new(Notify::new());
        let mut accepted = 0;
        let mut streams = JoinSet::new();
        loop {
            let next = tokio::select! {
                n = conn.accept() => n,
                () = drop_conn.notified() => {
                    self.log(format_args!("conn {id}: dropped"));
                    return;
                }
            };
            let Some(next) = next else { break };
            let (req, respond) = match next {
                Ok(r) => r,
                Err(e) => {
                    self.log(format_args!("conn {id}: {e}"));
                    break;
                }
            };
            accepted += 1;
            if Some(accepted) == self.goaway_after {
                self.log(format_args!("conn {id}: GOAWAY (graceful)"));
                conn.graceful_shutdown();
            }
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            self.stats.most_streams.fetch_max(now, Ordering::SeqCst);
            let (srv, active, drop_conn) = (self.clone(), active.clone(), drop_conn.clone());
            streams.spawn(async move {
                srv.stream(req, respond, id, &drop_conn).await;
                active.fetch_sub(1, Ordering::SeqCst);
            });
            while streams.try_join_next().is_some() {}
        }
        self.log(format_args!("conn {id}: closed"));
    }

    /// Serves a connection, then counts it closed.
    async fn serve_counted<T>(self: Arc<Self>, io: T, id: usize)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.clone().serve(io, id).await;
        self.stats.closed.send_modify(|n| *n += 1);
    }

    async fn stream(
        &self,
        req: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
        conn: usize,
        drop_conn: &Notify,
    ) {
        let (parts, mut body) = req.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let Ok(chunk) = chunk else { return };
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let seq = self.stats.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if parts.version == http::Version::HTTP_2 {
            self.stats.http2.fetch_add(1, Ordering::SeqCst);
        }
        self.log(format_args!(
            "rx {} {} {:?} (conn {conn}, request {seq})",
            parts.method, parts.uri, parts.version
        ));
        let req = H2Request {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            version: parts.version,
            conn,
            seq,
            body: Bytes::from(data),
        };
        let reply = match (self.handler)(req).await {
            Reply::Interim(interim, then) => {
                self.log(format_args!("tx {} (request {seq})", interim.status()));
                match respond.send_informational(interim) {
                    Ok(()) => {
                        self.stats.interims.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => self.log(format_args!("request {seq}: send failed: {e}")),
                }
                Reply::Full(then)
            }
            other => other,
        };
        match reply {
            Reply::Interim(..) => unreachable!("answered above"),
            Reply::Full(resp) => {
                let (head, body) = resp.into_parts();
                let end = body.is_empty();
                self.log(format_args!("tx {} (request {seq})", head.status));
                match respond.send_response(http::Response::from_parts(head, ()), end) {
                    Ok(mut s) if !end => {
                        let _ = s.send_data(body, true);
                    }
                    Ok(_) => {}
                    Err(e) => self.log(format_args!("request {seq}: send failed: {e}")),
                }
            }
            Reply::Refuse => {
                self.log(format_args!("RST_STREAM REFUSED_STREAM (request {seq})"));
                respond.send_reset(h2::Reason::REFUSED_STREAM);
            }
            Reply::ResetMidBody(head, first, go) => {
                self.log(format_args!(
                    "tx {} then RST_STREAM after {} bytes (request {seq})",
                    head.status(),
                    first.len()
                ));
                if let Ok(mut s) = respond.send_response(head, false) {
                    let _ = s.send_data(first, false);
                    go.notified().await;
                    s.send_reset(h2::Reason::INTERNAL_ERROR);
                }
            }
            Reply::Hang => {
                self.log(format_args!("no answer (request {seq})"));
                let reason = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
                self.log(format_args!(
                    "request {seq}: reset by the client: {reason:?}"
                ));
            }
            Reply::DropConnection => {
                self.log(format_args!("dropping the connection (request {seq})"));
                drop_conn.notify_one();
            }
        }
    }
}

/// A running HTTP/2 origin. See the [module docs](self).
pub struct H2Origin {
    addr: SocketAddr,
    stats: Arc<Stats>,
    task: JoinHandle<()>,
}

impl H2Origin {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// Waits until `n` connections have closed (either side).
    ///
    /// # Panics
    /// After 10 s without.
    pub async fn wait_closed(&self, n: usize) {
        let mut rx = self.stats.closed.subscribe();
        let done =
            tokio::time::timeout(std::time::Duration::from_secs(10), rx.wait_for(|&c| c >= n))
                .await;
        assert!(
            matches!(done, Ok(Ok(_))),
            "h2 origin: {} connections closed, not {n}",
            *self.stats.closed.borrow()
        );
    }

    /// Requests received so far (bodies read).
    pub fn requests(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }

    /// Interim (1xx) heads sent.
    pub fn interims_sent(&self) -> usize {
        self.stats.interims.load(Ordering::SeqCst)
    }

    /// Of those, requests that came over HTTP/2.
    pub fn http2_requests(&self) -> usize {
        self.stats.http2.load(Ordering::SeqCst)
    }

    /// The most streams in flight at once on one connection.
    pub fn most_streams(&self) -> usize {
        self.stats.most_streams.load(Ordering::SeqCst)
    }

    /// The ALPN protocol of each TLS connection, in order.
    pub fn alpn(&self) -> Vec<Option<String>> {
        self.stats.alpn.lock().clone()
    }
}

impl Endpoint for H2Origin {
    fn endpoint(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Debug for H2Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Origin")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for H2Origin {
    /// Stops listening and closes every connection.
    fn drop(&mut self) {
        self.task.abort();
    }
}
