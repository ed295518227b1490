//! The strict scripted fake origin (VTC `server s1 { ... } -start`).
//!
//! An [`Origin`] listens on `127.0.0.1:0` and speaks raw HTTP/1.1. It accepts
//! any number of connections; every request from every connection goes into one
//! queue that the script consumes in order with [`Script::rxreq`].
//!
//! Strictness: a request still queued when the script returns, or arriving after
//! it returned (normally or by panic), is an *unexpected request*: it is answered
//! `500` with body `unexpected request` and recorded as a failure, as is a script
//! panic. [`Origin::finish`] waits for the script and panics with the failures and
//! the transcript; dropping an `Origin` with recorded failures panics too.

mod conn;
mod fresh;
mod request;
mod script;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::clock::TestClock;
use crate::transcript::Transcript;
use crate::Endpoint;

pub use request::Request;
pub use script::{Resp, Script};

/// How long [`Script::rxreq`] and [`Origin::wait_requests`] wait before failing.
pub const ORIGIN_TIMEOUT: Duration = Duration::from_secs(10);

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type ScriptFn = Box<dyn FnOnce(Script) -> BoxFuture + Send>;

/// State shared by the listener, the connection tasks and the script.
pub(crate) struct Shared {
    /// Transcript source, e.g. `origin s1`.
    name: String,
    transcript: Transcript,
    clock: TestClock,
    failures: Mutex<Vec<String>>,
    requests: watch::Sender<usize>,
    connections: AtomicUsize,
    /// TLS connections that made a full handshake, and that resumed.
    tls_full: AtomicUsize,
    tls_resumed: AtomicUsize,
}

impl Shared {
    pub(crate) fn log(&self, event: impl fmt::Display) {
        self.transcript.log(&self.name, event);
    }

    /// Records a failure of the case.
    pub(crate) fn fail(&self, what: String) {
        self.log(format_args!("FAILURE: {what}"));
        self.failures.lock().push(what);
    }

    /// The `Date` header value for now.
    pub(crate) fn date(&self) -> String {
        httpdate::fmt_http_date(self.clock.now())
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub(crate) fn requests(&self) -> usize {
        *self.requests.borrow()
    }
}

/// Configures an origin; from [`Test::origin`](crate::Test::origin).
pub struct OriginBuilder {
    shared: Shared,
    script: Option<ScriptFn>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl OriginBuilder {
    pub(crate) fn new(name: String, transcript: Transcript, clock: TestClock) -> Self {
        let shared = Shared {
            name,
            transcript,
            clock,
            failures: Mutex::new(Vec::new()),
            requests: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
            tls_full: AtomicUsize::new(0),
            tls_resumed: AtomicUsize::new(0),
        };
        Self {
            shared,
            script: None,
            tls: None,
        }
    }

    /// Speaks TLS with this configuration (see [`crate::pki`]); a failed
    /// handshake is logged, not a test failure (the proxy's side is what
    /// a case checks).
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// Sets the script. Without one, every request is unexpected.
    pub fn script<F, Fut>(mut self, f: F) -> Self
    where
        F: FnOnce(Script) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.script = Some(Box::new(move |s: Script| -> BoxFuture { Box::pin(f(s)) }));
        self
    }

    /// Listens on a Unix socket at `path` instead of TCP (plain HTTP);
    /// the origin's [`Origin::addr`] is then `0.0.0.0:0`.
    pub async fn start_unix(self, path: &std::path::Path) -> Origin {
        let listener = tokio::net::UnixListener::bind(path).expect("origin: bind unix socket");
        let shared = Arc::new(self.shared);
        shared.log(format_args!("listening on unix:{}", path.display()));
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        let (acc_shared, queue) = (shared.clone(), queue_tx);
        let accept_task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let id = acc_shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
                acc_shared.log(format_args!("accept conn {id} (unix)"));
                let (rd, wr) = stream.into_split();
                conns.spawn(conn::serve(
                    (Box::new(rd), Box::new(wr)),
                    id,
                    acc_shared.clone(),
                    queue.clone(),
                ));
                while conns.try_join_next().is_some() {}
            }
        });
        Self::run(
            self.script,
            SocketAddr::from(([0, 0, 0, 0], 0)),
            shared,
            queue_rx,
            accept_task,
        )
    }

    fn run(
        script: Option<ScriptFn>,
        addr: SocketAddr,
        shared: Arc<Shared>,
        queue_rx: mpsc::UnboundedReceiver<conn::Pending>,
        accept_task: JoinHandle<()>,
    ) -> Origin {
        let f =
            script.unwrap_or_else(|| Box::new(|_s: Script| -> BoxFuture { Box::pin(async {}) }));
        let script = Script::new(shared.clone(), queue_rx);
        let script_task = tokio::spawn(run_script(shared.clone(), f(script)));
        Origin {
            addr,
            shared,
            script_task: Some(script_task),
            accept_task,
            finished: false,
        }
    }

    /// Binds `127.0.0.1:0` and starts accepting and running the script.
    pub async fn start(self) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("origin: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("origin: local_addr");
        let shared = Arc::new(self.shared);
        shared.log(format_args!("listening on {addr}"));
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        let accept_task = tokio::spawn(accept_loop(
            listener,
            self.tls.map(tokio_rustls::TlsAcceptor::from),
            shared.clone(),
            queue_tx,
        ));
        Self::run(self.script, addr, shared, queue_rx, accept_task)
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<conn::Pending>,
) {
    // Dropping this task (Origin::drop) drops the set, which aborts every connection.
    let mut conns = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let id = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
                shared.log(format_args!("accept conn {id} from {peer}"));
                let _ = stream.set_nodelay(true);
                let (shared, queue, tls) = (shared.clone(), queue.clone(), tls.clone());
                conns.spawn(async move {
                    let halves: (conn::ReadHalf, conn::WriteHalf) = match tls {
                        None => {
                            let (rd, wr) = stream.into_split();
                            (Box::new(rd), Box::new(wr))
                        }
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(s) => {
                                let resumed = s.get_ref().1.handshake_kind()
                                    == Some(rustls::HandshakeKind::Resumed);
                                let n = if resumed {
                                    &shared.tls_resumed
                                } else {
                                    &shared.tls_full
                                };
                                n.fetch_add(1, Ordering::SeqCst);
                                shared.log(format_args!(
                                    "conn {id}: TLS {}",
                                    if resumed { "resumed" } else { "full handshake" }
                                ));
                                let (rd, wr) = tokio::io::split(s);
                                (Box::new(rd), Box::new(wr))
                            }
                            Err(e) => {
                                shared.log(format_args!("conn {id}: TLS handshake failed: {e}"));
                                return;
                            }
                        },
                    };
                    conn::serve(halves, id, shared, queue).await;
                });
            }
            Err(e) => {
                shared.log(format_args!("accept failed: {e}"));
                tokio::task::yield_now().await;
            }
        }
        while conns.try_join_next().is_some() {}
    }
}

/// Runs the script, records a panic as a failure, then drops the script (which
/// turns every still-queued request into an unexpected one).
async fn run_script(shared: Arc<Shared>, script: BoxFuture) {
    let mut fut = CatchUnwind(script);
    match (&mut fut).await {
        Ok(()) => shared.log("script ended"),
        Err(panic) => shared.fail(format!("script panicked: {}", panic_message(&*panic))),
    }
    drop(fut);
}

/// Polls a future, turning a panic into an `Err` with the payload.
struct CatchUnwind(BoxFuture);

impl Future for CatchUnwind {
    type Output = Result<(), Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "(non-string panic payload)".to_owned(),
    }
}

/// A running fake origin. See the [module docs](self).
pub struct Origin {
    addr: SocketAddr,
    shared: Arc<Shared>,
    script_task: Option<JoinHandle<()>>,
    accept_task: JoinHandle<()>,
    finished: bool,
}

impl Origin {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests received so far (expected or not, fully read including the body).
    pub fn requests(&self) -> usize {
        self.shared.requests()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }

    /// TLS connections accepted with a full handshake, and resumed ones.
    pub fn tls_handshakes(&self) -> (usize, usize) {
        (
            self.shared.tls_full.load(Ordering::SeqCst),
            self.shared.tls_resumed.load(Ordering::SeqCst),
        )
    }

    /// Failures recorded so far (unexpected requests, script panic, bad requests).
    pub fn failures(&self) -> Vec<String> {
        self.shared.failures.lock().clone()
    }

    /// Waits until at least `n` requests were received (no polling).
    ///
    /// # Panics
    /// After [`ORIGIN_TIMEOUT`] without reaching `n`.
    pub async fn wait_requests(&self, n: usize) {
        let mut rx = self.shared.requests.subscribe();
        let reached = tokio::time::timeout(ORIGIN_TIMEOUT, rx.wait_for(|&got| got >= n)).await;
        if !matches!(reached, Ok(Ok(_))) {
            panic!(
                "{}: wait_requests({n}): only {} after {ORIGIN_TIMEOUT:?}",
                self.shared.name,
                self.requests()
            );
        }
    }

    /// Waits for the script to end, then panics with every recorded failure and
    /// the transcript if there is any.
    pub async fn finish(mut self) {
        if let Some(task) = self.script_task.take() {
            if let Err(e) = task.await {
                self.shared
                    .fail(format!("script task did not complete: {e}"));
            }
        }
        self.finished = true;
        let failures = self.failures();
        if !failures.is_empty() {
            panic!("{}", self.report(&failures));
        }
    }

    fn report(&self, failures: &[String]) -> String {
        let list: Vec<String> = failures.iter().map(|f| format!("  - {f}")).collect();
        format!(
            "{}: {} failure(s):\n{}\n{}",
            self.shared.name,
            failures.len(),
            list.join("\n"),
            self.shared.transcript.render_for_panic()
        )
    }
}

impl Endpoint for Origin {
    fn endpoint(&self) -> SocketAddr {
        self.addr
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Origin")
            .field("name", &self.shared.name)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Origin {
    /// Stops listening and closes every connection; panics if failures were
    /// recorded and neither `finish` ran nor the thread is already panicking.
    fn drop(&mut self) {
        self.accept_task.abort();
        if let Some(task) = &self.script_task {
            task.abort();
        }
        if self.finished || std::thread::panicking() {
            return;
        }
        let failures = self.failures();
        if !failures.is_empty() {
            panic!("{}", self.report(&failures));
        }
    }
}
