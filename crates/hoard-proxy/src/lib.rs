//! hoard: an HTTP caching reverse proxy, as a library.
//!
//! [`Proxy::start`] binds the configured listeners on the current tokio
//! runtime and serves until [`Proxy::shutdown`]. Tests start it in-process
//! with a test clock; the `hoard` binary is a thin wrapper around it. See
//! `docs/architecture.md` for the request path and the object lifecycle.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod access_log;
pub mod admin;
pub mod body;
pub mod build_info;
pub mod config;
pub mod counters;
pub mod error;
pub mod fill;
pub mod metrics;
pub mod pipeline;
pub mod server;
pub mod upstream;
pub mod via;

use std::net::SocketAddr;
use std::sync::Arc;

use hoard_policy::clock::Clock;
use hoard_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{Config, ConfigError, QuickStart};
pub use counters::Counters;
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
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            StartError::Tls(e) => write!(f, "TLS setup failed: {e}"),
            StartError::Storage(e) => write!(f, "cache storage: {e}"),
            StartError::Admin(a, e) => write!(f, "admin listener: cannot listen on {a}: {e}"),
            StartError::AccessLog(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    pipeline: Arc<pipeline::Pipeline>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Binds every listener and starts serving on the current runtime.
    ///
    /// # Errors
    /// When a listener cannot bind or TLS material cannot be loaded.
    pub async fn start(cfg: Config, clock: Arc<dyn Clock>) -> Result<Proxy, StartError> {
        let cfg = Arc::new(cfg);
        for site in &cfg.sites {
            for route in &site.routes {
                if route.forward_unkeyed && !route.forward_headers.is_empty() {
                    let names: Vec<&str> =
                        route.forward_headers.iter().map(|h| h.as_str()).collect();
                    tracing::warn!(fields = ?names, route = ?route.path, "forwarding client fields that are not part of the cache key (forward_unkeyed): responses that reflect them can be served to others");
                }
            }
        }
        let counters = Arc::new(Counters::default());
        let store = Store::new(
            cfg.cache.memory_size,
            cfg.cache.max_object_size,
            cfg.cache.zones.clone(),
            counters.clone(),
            clock.clone(),
        )
        .map_err(StartError::Storage)?;
        store.start();
        let store = Arc::new(store);
        let mut pipeline = pipeline::Pipeline::new(cfg.clone(), store, counters.clone(), clock);
        pipeline.access_log = access_log::AccessLog::start(&cfg.access_log, counters)
            .map_err(StartError::AccessLog)?
            .map(Arc::new);
        let pipeline = Arc::new(pipeline);
        let (tx, rx) = watch::channel(false);
        let mut addrs = Vec::new();
        let mut tasks = Vec::new();
        let admin_addr = match cfg.admin.address {
            Some(a) => {
                let (bound, t) = admin::start(a, pipeline.clone(), rx.clone())
                    .map_err(|e| StartError::Admin(a, e))?;
                tasks.extend(t);
                Some(bound)
            }
            None => None,
        };
        for l in &cfg.listeners {
            let tls = match &l.tls {
                Some(t) => Some(server::tls::acceptor(t, l.http2).map_err(StartError::Tls)?),
                None => None,
            };
            let listener = server::bind(l.address).map_err(|e| StartError::Bind(l.address, e))?;
            let addr = listener
                .local_addr()
                .map_err(|e| StartError::Bind(l.address, e))?;
            addrs.push(addr);
            tracing::info!(%addr, tls = tls.is_some(), "listening");
            tasks.push(tokio::spawn(server::accept_loop(
                listener,
                l.clone(),
                cfg.server.clone(),
                pipeline.clone(),
                tls,
                rx.clone(),
            )));
        }
        Ok(Proxy {
            addrs,
            admin_addr,
            pipeline,
            shutdown: tx,
            tasks,
        })
    }

    /// The address of the first listener.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// The addresses of all listeners, in configuration order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
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

    /// Starts a shutdown: listeners close, connections drain (see [`server`]).
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Shuts down and waits until every connection is closed or the
    /// shutdown timeout has passed; then lets fills still running (they
    /// belong to the cache) finish for up to the shutdown timeout, and
    /// cancels the rest cleanly.
    pub async fn shutdown(self) {
        self.begin_shutdown();
        for t in self.tasks {
            let _ = t.await;
        }
        let timeout = self.pipeline.cfg.server.shutdown_timeout;
        self.pipeline.fills.shutdown(timeout).await;
    }

    /// Fills running now (for tests and the status page).
    pub fn fills_in_flight(&self) -> usize {
        self.pipeline.fills.in_flight()
    }
}
