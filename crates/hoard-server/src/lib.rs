//! hoard: an HTTP caching reverse proxy, as a library.
//!
//! [`Proxy::start`] binds the configured listeners on the current tokio
//! runtime and serves until [`Proxy::shutdown`]. Tests start it in-process
//! with a test clock; the `hoard` binary is a thin wrapper around it. See
//! `docs/architecture.md` for the request path and the object lifecycle.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod listeners;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use hoard_policy::clock::Clock;
use hoard_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use hoard_config::{Config, ConfigError, QuickStart};
pub use hoard_metrics::counters::Counters;
pub use hoard_policy::clock::SystemClock;

/// Why the proxy could not start.
#[derive(Debug)]
pub enum StartError {
    /// A listener could not bind.
    Bind(SocketAddr, std::io::Error),
    /// TLS certificate or key could not be loaded.
    Tls(String),
    /// A disk zone's directory could not be created.
    Storage(std::io::Error),
    /// The admin listener could not bind.
    Admin(SocketAddr, std::io::Error),
    /// The access log could not be opened.
    AccessLog(std::io::Error),
    /// The step between binding and serving failed (`server.user`).
    BeforeServing(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            StartError::Tls(e) => write!(f, "TLS setup failed: {e}"),
            StartError::Storage(e) => write!(f, "cache storage: {e}"),
            StartError::Admin(a, e) => write!(f, "admin listener: cannot listen on {a}: {e}"),
            StartError::AccessLog(e) => write!(f, "{e}"),
            StartError::BeforeServing(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Logs the routes that forward client fields without keying them.
fn warn_unkeyed(cfg: &Config) {
    for site in &cfg.sites {
        for route in &site.routes {
            if route.forward_unkeyed && !route.forward_headers.is_empty() {
                let names: Vec<&str> = route.forward_headers.iter().map(|h| h.as_str()).collect();
                tracing::warn!(fields = ?names, route = ?route.path, "forwarding client fields that are not part of the cache key (forward_unkeyed): responses that reflect them can be served to others");
            }
        }
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    admin_addr: Option<SocketAddr>,
    pipeline: Arc<hoard_proxy::pipeline::Pipeline>,
    /// Stops the admin listener and background tasks.
    shutdown: watch::Sender<bool>,
    /// The client listeners, changed by reloads.
    listeners: parking_lot::Mutex<Vec<Listening>>,
    tasks: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    clock: Arc<dyn Clock>,
    /// Reloads asked for through the admin API.
    reload_asks: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<ReloadAsk>>,
    /// A handle on the admin listener's socket, for a binary upgrade.
    admin_socket: parking_lot::Mutex<Option<(SocketAddr, OwnedFd)>>,
    /// Sockets from the previous process, while starting.
    inherited: parking_lot::Mutex<Option<listeners::inherit::Inherited>>,
}

/// One bound client listener.
#[derive(Debug)]
struct Listening {
    cfg: hoard_config::ListenerConfig,
    addr: SocketAddr,
    state: Arc<arc_swap::ArcSwap<listeners::ListenerState>>,
    /// Closes this listener; its connections drain.
    stop: watch::Sender<bool>,
    /// Its QUIC endpoint, when it serves HTTP/3 too.
    quic: Option<quinn::Endpoint>,
    /// Handles on its TCP and UDP sockets, for a binary upgrade (dropped
    /// when it closes, so a closed port refuses connections).
    sockets: Vec<(listeners::inherit::SocketKind, OwnedFd)>,
}

/// A listener bound and not served yet (see [`Proxy::start_with`]).
struct Bound {
    cfg: hoard_config::ListenerConfig,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    state: listeners::ListenerState,
    quic: Option<quinn::Endpoint>,
    /// Handles on its TCP and UDP sockets (see [`Listening`]).
    sockets: Vec<(listeners::inherit::SocketKind, OwnedFd)>,
}

pub use hoard_proxy::pipeline::running::ReloadRecord;

pub use hoard_proxy::pipeline::running::{ReloadAsk, Reloaded};

fn listener_state(
    (index, l): (usize, &hoard_config::ListenerConfig),
    acme: &hoard_acme::Acme,
) -> Result<listeners::ListenerState, StartError> {
    // Certificate files by SNI (read again at each reload), with the
    // listener's ACME certificates when it has both.
    let sni = if l.certs.is_empty() {
        None
    } else {
        let with_acme = (!l.acme.is_empty()).then(|| acme.certs.for_listener(&l.acme));
        Some(listeners::sni::FileCerts::load(&l.certs, with_acme).map_err(StartError::Tls)?)
    };
    Ok(listeners::ListenerState {
        http2: l.http2,
        proxy_protocol: l.proxy_protocol.clone().map(Arc::from),
        tls: match &l.tls {
            Some(t) => Some(listeners::tls::acceptor(t, l.http2).map_err(StartError::Tls)?),
            None if sni.is_some() => sni
                .clone()
                .map(|s| listeners::tls::sni_acceptor(s, l.http2))
                .transpose()
                .map_err(StartError::Tls)?,
            None if !l.acme.is_empty() => Some(
                listeners::tls::acme_acceptor(acme.certs.for_listener(&l.acme), l.http2)
                    .map_err(StartError::Tls)?,
            ),
            None => None,
        },
        quic: match &l.tls {
            Some(t) if l.http3 => Some(listeners::tls::quic(t).map_err(StartError::Tls)?),
            None if l.http3 && sni.is_some() => sni
                .map(listeners::tls::sni_quic)
                .transpose()
                .map_err(StartError::Tls)?,
            None if l.http3 && !l.acme.is_empty() => Some(
                listeners::tls::acme_quic(acme.certs.for_listener(&l.acme))
                    .map_err(StartError::Tls)?,
            ),
            _ => None,
        },
        alt_svc: None,
        redirect_https: l.redirect_https,
        index: Arc::new(std::sync::atomic::AtomicUsize::new(index)),
    })
}

/// `Alt-Svc` for a listener whose port also serves HTTP/3 (a day).
fn alt_svc(port: u16) -> Option<http::HeaderValue> {
    http::HeaderValue::from_str(&format!("h3=\":{port}\"; ma=86400")).ok()
}

impl Proxy {
    /// Binds every listener and starts serving on the current runtime.
    ///
    /// # Errors
    /// When a listener cannot bind or TLS material cannot be loaded.
    pub async fn start(cfg: Config, clock: Arc<dyn Clock>) -> Result<Proxy, StartError> {
        Proxy::start_with(cfg, clock, listeners::inherit::Inherited::default(), || {
            Ok(())
        })
        .await
    }

    /// As [`Proxy::start`], adopting the listening sockets of a previous
    /// process where a listener's address matches (a binary upgrade; see
    /// [`listeners::inherit`]; those no listener adopts are closed), and
    /// running `before_serving` once every socket is bound and the disk
    /// zones and the access log are open, before a connection is accepted
    /// (the binary drops root there, see `privileges`).
    ///
    /// # Errors
    /// As [`Proxy::start`], and `before_serving`'s error.
    pub async fn start_with(
        cfg: Config,
        clock: Arc<dyn Clock>,
        inherited: listeners::inherit::Inherited,
        before_serving: impl FnOnce() -> Result<(), String>,
    ) -> Result<Proxy, StartError> {
        let cfg = Arc::new(cfg);
        warn_unkeyed(&cfg);
        let counters = Arc::new(Counters::default());
        let store = Store::new(
            cfg.cache.memory_size,
            cfg.cache.max_object_size,
            cfg.cache.zones.clone(),
            counters.clone(),
            clock.clone(),
        )
        .map_err(StartError::Storage)?
        .with_near(cfg.cluster.as_ref().map_or(0, |c| c.near_cache_size));
        store.start();
        store.bans().set_max(cfg.admin.max_pending_bans);
        let store = Arc::new(store);
        let mut pipeline = hoard_proxy::pipeline::Pipeline::new(
            cfg.clone(),
            store,
            counters.clone(),
            clock.clone(),
        );
        let (ask_tx, ask_rx) = tokio::sync::mpsc::channel(4);
        pipeline.reload_asks = Some(ask_tx);
        pipeline.access_log =
            hoard_proxy::access_log::AccessLog::start(&cfg.access_log, counters.clone())
                .map_err(StartError::AccessLog)?
                .map(Arc::new);
        pipeline.acme = Some(
            hoard_acme::Acme::new(&cfg, counters, clock.clone(), pipeline.cluster.clone())
                .map_err(StartError::Tls)?,
        );
        let pipeline = Arc::new(pipeline);
        let (tx, rx) = watch::channel(false);
        if let Some(c) = &pipeline.cluster {
            hoard_cluster::probe::start(c);
            hoard_cluster::discover::start(c);
            if c.bus.is_some() {
                hoard_cluster::bus::start(&pipeline, rx.clone());
            }
        }
        let mut admin_socket = None;
        let admin_listener = match cfg.admin.address {
            Some(a) => {
                let admin_err = |e| StartError::Admin(a, e);
                let listener =
                    listeners::bind_or_adopt(a, inherited.admin(a)).map_err(admin_err)?;
                admin_socket = Some((a, listener.as_fd().try_clone_to_owned().map_err(admin_err)?));
                let bound = listener.local_addr().map_err(admin_err)?;
                Some((listener, bound))
            }
            None => None,
        };
        let admin_addr = admin_listener.as_ref().map(|(_, a)| *a);
        let proxy = Proxy {
            admin_addr,
            pipeline,
            shutdown: tx,
            listeners: parking_lot::Mutex::new(Vec::new()),
            tasks: parking_lot::Mutex::new(Vec::new()),
            clock,
            reload_asks: tokio::sync::Mutex::new(ask_rx),
            admin_socket: parking_lot::Mutex::new(admin_socket),
            inherited: parking_lot::Mutex::new(Some(inherited)),
        };
        let mut bound = Vec::new();
        for (i, l) in cfg.listeners.iter().enumerate() {
            bound.push(proxy.bind(l.clone(), listener_state((i, l), proxy.acme())?)?);
        }
        before_serving().map_err(StartError::BeforeServing)?;
        if let Some((l, _)) = admin_listener {
            let t = hoard_admin::serve(l, proxy.pipeline.clone(), rx.clone());
            proxy.tasks.lock().extend(t);
        }
        for b in bound {
            proxy.serve(b);
        }
        // Inherited sockets no listener took are closed.
        drop(proxy.inherited.lock().take());
        // After the listeners: a challenge needs them.
        proxy.acme().start(proxy.shutdown.subscribe());
        Ok(proxy)
    }

    fn acme(&self) -> &Arc<hoard_acme::Acme> {
        self.pipeline
            .acme
            .as_ref()
            .expect("invariant: the proxy made its ACME manager at start")
    }

    /// Binds and serves one listener.
    fn open(
        &self,
        cfg: hoard_config::ListenerConfig,
        state: listeners::ListenerState,
    ) -> Result<SocketAddr, StartError> {
        let bound = self.bind(cfg, state)?;
        Ok(self.serve(bound))
    }

    /// Binds one listener (and its QUIC endpoint), or adopts the sockets a
    /// previous process passed on for its address; serves nothing yet.
    fn bind(
        &self,
        cfg: hoard_config::ListenerConfig,
        mut state: listeners::ListenerState,
    ) -> Result<Bound, StartError> {
        use listeners::inherit::SocketKind;
        let bind_err = |e| StartError::Bind(cfg.address, e);
        let (tcp, udp) = match &*self.inherited.lock() {
            Some(i) => (
                i.tcp(cfg.address),
                state.quic.as_ref().and_then(|_| i.udp(cfg.address)),
            ),
            None => (None, None),
        };
        let listener = listeners::bind_or_adopt(cfg.address, tcp).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let mut sockets = vec![(
            SocketKind::Tcp,
            listener.as_fd().try_clone_to_owned().map_err(bind_err)?,
        )];
        // HTTP/3 on the same port, over UDP.
        let quic = match state.quic.clone() {
            Some(q) => {
                let server = &self.pipeline.run().cfg.server;
                let (e, socket) = listeners::h3::bind(addr, udp, q, server)
                    .map_err(|e| StartError::Bind(addr, e))?;
                sockets.push((SocketKind::Udp, socket));
                state.alt_svc = alt_svc(addr.port());
                Some(e)
            }
            None => None,
        };
        Ok(Bound {
            cfg,
            listener,
            addr,
            state,
            quic,
            sockets,
        })
    }

    /// Serves a bound listener.
    fn serve(&self, b: Bound) -> SocketAddr {
        let Bound {
            cfg,
            listener,
            addr,
            state,
            quic,
            sockets,
        } = b;
        tracing::info!(%addr, tls = state.tls.is_some(), http3 = quic.is_some(), "listening");
        let index = state.index.clone();
        let state = Arc::new(arc_swap::ArcSwap::from_pointee(state));
        let (stop, rx) = watch::channel(false);
        if let Some(e) = &quic {
            self.tasks
                .lock()
                .push(tokio::spawn(listeners::h3::accept_loop(
                    e.clone(),
                    self.pipeline.clone(),
                    rx.clone(),
                    index,
                )));
        }
        self.tasks.lock().push(tokio::spawn(listeners::accept_loop(
            listener,
            state.clone(),
            self.pipeline.clone(),
            rx,
        )));
        self.listeners.lock().push(Listening {
            cfg,
            addr,
            state,
            stop,
            quic,
            sockets,
        });
        addr
    }

    /// Applies a new configuration to new requests without closing a
    /// connection or failing a request in flight: routes, upstreams (their
    /// idle connections and health kept by name and server) and request
    /// limits change at once; listeners that stay keep their sockets (TLS
    /// material is read again), added ones open, removed ones drain. The
    /// cache survives; an object whose route's key template changed is
    /// simply not found under the new key and ages out. Settings that need
    /// a restart are kept and named in the result.
    ///
    /// # Errors
    /// When a new listener cannot bind or TLS material cannot be read:
    /// then nothing changes.
    pub fn reload(&self, cfg: Config) -> Result<Reloaded, StartError> {
        let result = self.apply(cfg);
        let mut last = self.pipeline.last_reload.lock();
        *last = Some(ReloadRecord {
            number: last.as_ref().map_or(0, |r| r.number) + 1,
            at: self.clock.now(),
            result: result
                .as_ref()
                .map(|r| r.generation)
                .map_err(ToString::to_string),
        });
        drop(last);
        result
    }

    /// Records a reload refused before it reached the proxy (a file that
    /// does not parse), for `/status`.
    pub fn reload_refused(&self, error: &str) {
        let mut last = self.pipeline.last_reload.lock();
        *last = Some(ReloadRecord {
            number: last.as_ref().map_or(0, |r| r.number) + 1,
            at: self.clock.now(),
            result: Err(error.to_string()),
        });
    }

    /// Waits for the next reload asked for through the admin API
    /// (`POST /reload`); whoever holds the configuration file applies it
    /// and answers with [`ReloadAsk::respond`].
    pub async fn reload_asked(&self) -> ReloadAsk {
        let mut rx = self.reload_asks.lock().await;
        match rx.recv().await {
            Some(ask) => ask,
            // The pipeline holds the sender as long as the proxy lives.
            None => std::future::pending().await,
        }
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.pipeline.snapshot().cfg.clone()
    }

    /// The last reload, if any.
    pub fn last_reload(&self) -> Option<ReloadRecord> {
        self.pipeline.last_reload.lock().clone()
    }

    fn apply(&self, cfg: Config) -> Result<Reloaded, StartError> {
        let cfg = Arc::new(cfg);
        let old = self.pipeline.snapshot();
        let restart_needed = hoard_proxy::pipeline::running::restart_needed(&old.cfg, &cfg);
        // Everything that can fail first: TLS material, then new sockets.
        let mut states = Vec::new();
        for (i, l) in cfg.listeners.iter().enumerate() {
            states.push(listener_state((i, l), self.acme())?);
        }
        let mut out = Reloaded {
            restart_needed,
            ..Reloaded::default()
        };
        let listening = |address: SocketAddr| {
            self.listeners
                .lock()
                .iter()
                .any(|x| x.cfg.address == address)
        };
        // New listeners first: a bind that fails undoes them, and nothing
        // else has changed yet.
        let mut kept = Vec::new();
        for (l, state) in cfg.listeners.iter().zip(states) {
            if listening(l.address) {
                kept.push((l, state));
                continue;
            }
            match self.open(l.clone(), state) {
                Ok(addr) => out.opened.push(addr),
                Err(e) => {
                    self.close(|x| out.opened.contains(&x.addr));
                    return Err(e);
                }
            }
        }
        for (l, state) in kept {
            if let Some(x) = self
                .listeners
                .lock()
                .iter_mut()
                .find(|x| x.cfg.address == l.address)
            {
                let mut state = state;
                // Its connections see the index it has now.
                let index = state.index.load(std::sync::atomic::Ordering::Relaxed);
                state.index = x.state.load().index.clone();
                state
                    .index
                    .store(index, std::sync::atomic::Ordering::Relaxed);
                // HTTP/3 keeps its endpoint and takes the new certificate
                // (turning it on or off needs a restart).
                match (&x.quic, state.quic.clone()) {
                    (Some(e), Some(q)) => {
                        let mut q = q;
                        q.transport_config(Arc::new(listeners::h3::transport(&cfg.server)));
                        e.set_server_config(Some(q));
                        state.alt_svc = alt_svc(x.addr.port());
                    }
                    (None, None) => {}
                    (Some(_), None) => {
                        // Still serving QUIC until a restart: still advertised.
                        state.alt_svc = alt_svc(x.addr.port());
                        out.restart_needed.push("listener.http3");
                    }
                    (None, Some(_)) => {
                        state.quic = None;
                        out.restart_needed.push("listener.http3");
                    }
                }
                x.state.store(Arc::new(state));
                x.cfg = l.clone();
            }
        }
        warn_unkeyed(&cfg);
        self.pipeline
            .store
            .bans()
            .set_max(cfg.admin.max_pending_bans);
        // Certificates added are ordered, removed ones no longer presented.
        self.acme().configure(&cfg);
        self.pipeline
            .install(old.next(cfg.clone(), &self.pipeline.counters, &self.clock));
        out.generation = old.generation + 1;
        out.closed = self.close(|x| !cfg.listeners.iter().any(|l| l.address == x.cfg.address));
        Ok(out)
    }

    /// Closes the listeners `which` selects; returns their addresses.
    fn close(&self, which: impl Fn(&Listening) -> bool) -> Vec<SocketAddr> {
        let mut listening = self.listeners.lock();
        let mut closed = Vec::new();
        listening.retain(|x| {
            if which(x) {
                let _ = x.stop.send(true);
                tracing::info!(addr = %x.addr, "listener closed; its connections drain");
                closed.push(x.addr);
                false
            } else {
                true
            }
        });
        closed
    }

    /// The address of the first listener.
    pub fn addr(&self) -> SocketAddr {
        self.listeners.lock()[0].addr
    }

    /// The addresses of all listeners, in configuration order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.listeners.lock().iter().map(|l| l.addr).collect()
    }

    /// The admin listener's address, when it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Makes the access log reopen its file (after logrotate; `SIGUSR1`).
    pub fn reopen_logs(&self) {
        if let Some(l) = &self.pipeline.access_log {
            l.reopen();
        }
    }

    /// Runs a purge, as the admin API would; returns the objects affected.
    pub async fn purge(&self, selector: &hoard_store::catalog::Selector, soft: bool) -> usize {
        self.pipeline.purge(selector, soft, "library").await
    }

    /// The proxy's counters.
    pub fn counters(&self) -> &Counters {
        &self.pipeline.counters
    }

    /// A shared handle on the proxy's counters.
    pub fn counters_arc(&self) -> Arc<Counters> {
        self.pipeline.counters.clone()
    }

    /// The cache store.
    pub fn store(&self) -> &Store {
        &self.pipeline.store
    }

    /// A shared handle on the cache store.
    pub fn store_arc(&self) -> Arc<Store> {
        self.pipeline.store.clone()
    }

    /// Starts a shutdown: listeners close, connections drain (see `server`).
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown.send(true);
        for l in self.listeners.lock().iter_mut() {
            let _ = l.stop.send(true);
            l.sockets.clear();
        }
        self.admin_socket.lock().take();
    }

    /// The listening sockets a new process takes over in a binary upgrade:
    /// each client listener's TCP socket (and UDP socket with HTTP/3) and
    /// the admin listener's, named by the address their configuration
    /// gives. The descriptors are new handles on the same sockets (closed
    /// on exec unless passed on on purpose).
    ///
    /// # Errors
    /// When a descriptor cannot be duplicated (out of descriptors).
    pub fn inheritable(
        &self,
    ) -> std::io::Result<Vec<(listeners::inherit::SocketKind, SocketAddr, OwnedFd)>> {
        let mut out = Vec::new();
        for l in self.listeners.lock().iter() {
            for (kind, fd) in &l.sockets {
                out.push((*kind, l.cfg.address, fd.try_clone()?));
            }
        }
        if let Some((a, fd)) = &*self.admin_socket.lock() {
            out.push((listeners::inherit::SocketKind::Admin, *a, fd.try_clone()?));
        }
        Ok(out)
    }

    /// Shuts down and waits until every connection is closed or the
    /// shutdown timeout has passed; then lets fills still running (they
    /// belong to the cache) finish for up to the shutdown timeout, and
    /// cancels the rest cleanly.
    pub async fn shutdown(self) {
        self.begin_shutdown();
        for u in &self.pipeline.run().upstreams {
            u.stop_probes().await;
        }
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
        let timeout = self.pipeline.run().cfg.server.shutdown_timeout;
        self.pipeline.fills.shutdown(timeout).await;
    }

    /// Fills running now (for tests and the status page).
    pub fn fills_in_flight(&self) -> usize {
        self.pipeline.fills.in_flight()
    }
}
