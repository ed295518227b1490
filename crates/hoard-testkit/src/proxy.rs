//! The real proxy, started in-process for a case.
//!
//! `t.proxy().origin(&origin).start().await` runs hoard on `127.0.0.1:0`
//! with the case's [`crate::TestClock`], a catch-all caching route to the
//! origin, the cache key in `Cache-Status` (debug headers on) and short
//! origin timeouts. `.route(|r| ...)`, `.upstream(|u| ...)` and
//! `.config(|c| ...)` adjust the configuration; `.toml(text)` starts from a
//! configuration file instead (`{origin}` in it is replaced by the origin's
//! address).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hoard_config::{Config, RouteConfig, ServerAddr, UpstreamConfig};
use hoard_server::{Counters, Proxy, QuickStart};

use crate::{Endpoint, Origin, Test, TestClock, Transcript};

/// Configures a proxy for a case.
#[derive(Debug)]
pub struct ProxyBuilder {
    cfg: Config,
    clock: TestClock,
    transcript: Transcript,
}

/// A running proxy in a case.
#[derive(Debug)]
pub struct TestProxy {
    proxy: Option<Proxy>,
    addr: SocketAddr,
}

impl Test {
    /// A proxy builder with the test defaults (see the module docs).
    pub fn proxy(&self) -> ProxyBuilder {
        let mut cfg = Config::quick(&QuickStart {
            upstream: "http://127.0.0.1:9".into(),
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            debug_headers: true,
            ..QuickStart::default()
        })
        .expect("test: quick-start config");
        // HOARD_TEST_STORE=disk runs every case over a disk zone with no
        // memory tier: every hit is read from disk.
        if std::env::var("HOARD_TEST_STORE").as_deref() == Ok("disk") {
            cfg.cache.memory_size = 0;
            cfg.cache.zones = vec![hoard_config::zones::quick_zone(
                self.dir().join("zone"),
                64 << 20,
                cfg.cache.max_object_size,
            )];
        }
        let u = &mut cfg.upstreams[0];
        u.connect_timeout = Duration::from_secs(2);
        u.read_timeout = Duration::from_secs(5);
        ProxyBuilder {
            cfg,
            clock: self.clock.clone(),
            transcript: self.transcript().clone(),
        }
    }
}

impl ProxyBuilder {
    /// Sends everything to this origin.
    pub fn origin(mut self, origin: &Origin) -> Self {
        self.cfg.upstreams[0].servers = vec![ServerAddr {
            authority: origin.addr().to_string(),
            tls: false,
            host: "127.0.0.1".into(),
        }];
        self
    }

    /// Sends everything to an origin on a Unix socket (`unix:/path`).
    pub fn unix_origin(mut self, path: &std::path::Path) -> Self {
        self.cfg.upstreams[0].servers = vec![ServerAddr {
            authority: format!("unix:{}", path.display()),
            tls: false,
            host: "localhost".into(),
        }];
        self
    }

    /// Sends everything to this origin over TLS (`https://127.0.0.1:PORT`)
    /// with these settings.
    ///
    /// # Panics
    /// When the settings do not build (a file missing).
    pub fn https_origin(
        mut self,
        origin: &Origin,
        settings: hoard_config::origin_tls::TlsSettings,
    ) -> Self {
        let u = &mut self.cfg.upstreams[0];
        u.servers = vec![ServerAddr {
            authority: origin.addr().to_string(),
            tls: true,
            host: "127.0.0.1".into(),
        }];
        u.tls = Some(hoard_config::origin_tls::build(&settings).expect("origin TLS settings"));
        self
    }

    /// Adjusts the first route of the default site.
    pub fn route(mut self, f: impl FnOnce(&mut RouteConfig)) -> Self {
        f(std::sync::Arc::make_mut(&mut self.cfg.sites[0].routes[0]));
        self
    }

    /// Adjusts the first upstream.
    pub fn upstream(mut self, f: impl FnOnce(&mut UpstreamConfig)) -> Self {
        f(&mut self.cfg.upstreams[0]);
        self
    }

    /// Adds a disk zone named `disk` of `max_size` bytes in the case's
    /// directory `cache` (kept across restarts of the case's proxies);
    /// `memory` sets the memory tier (0: off, every hit read from disk).
    pub fn disk(mut self, dir: &std::path::Path, max_size: u64, memory: u64) -> Self {
        self.cfg.cache.memory_size = memory;
        self.cfg.cache.zones = vec![hoard_config::zones::quick_zone(
            dir.to_path_buf(),
            max_size,
            self.cfg.cache.max_object_size,
        )];
        self
    }

    /// Adjusts anything.
    pub fn config(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// Replaces the configuration by a TOML text; `{origin}` becomes the
    /// origin's `host:port`. Listeners are forced to `127.0.0.1:0`.
    ///
    /// # Panics
    /// When the text is not a valid configuration.
    pub fn toml(mut self, origin: &Origin, text: &str) -> Self {
        let text = text.replace("{origin}", &origin.addr().to_string());
        let mut cfg = Config::from_toml("test.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        for l in &mut cfg.listeners {
            l.address = SocketAddr::from(([127, 0, 0, 1], 0));
        }
        self.cfg = cfg;
        self
    }

    /// Turns the admin listener on, on a free loopback port.
    pub fn admin(mut self) -> Self {
        self.cfg.admin.address = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        self
    }

    /// Starts the proxy.
    pub async fn start(self) -> TestProxy {
        let cfg_zones = self.cfg.cache.zones.len();
        let proxy = Proxy::start(self.cfg, self.clock.as_clock())
            .await
            .expect("test: proxy starts");
        let addr = proxy.addr();
        self.transcript
            .log("proxy", format_args!("listening on {addr}"));
        // Disk zones take new objects once their loader is done.
        let zones = cfg_zones as u64;
        if zones > 0 {
            let wait = proxy.counters().wait_for("disk_load_done", zones);
            tokio::time::timeout(Duration::from_secs(10), wait)
                .await
                .expect("test: disk zones loaded");
        }
        TestProxy {
            proxy: Some(proxy),
            addr,
        }
    }
}

impl TestProxy {
    fn inner(&self) -> &Proxy {
        self.proxy.as_ref().expect("invariant: proxy is running")
    }

    /// A shared handle on the counters (readable after [`TestProxy::stop`]).
    pub fn counters_arc(&self) -> Arc<Counters> {
        self.inner().counters_arc()
    }

    /// The proxy's counters.
    pub fn counters(&self) -> &Counters {
        self.inner().counters()
    }

    /// A counter's value by name.
    pub fn counter(&self, name: &str) -> u64 {
        self.counters().get(name)
    }

    /// Asserts a counter's value.
    ///
    /// # Panics
    /// When it differs, listing every counter.
    pub fn expect_counter(&self, name: &str, value: u64) -> &Self {
        let got = self.counter(name);
        assert_eq!(
            got,
            value,
            "counter {name}: got {got}, want {value}\nall counters: {:?}",
            self.counters().snapshot()
        );
        self
    }

    /// Waits (by event, with a 10 s safety limit) until a counter reaches `value`.
    pub async fn wait_counter(&self, name: &str, value: u64) {
        if tokio::time::timeout(
            Duration::from_secs(10),
            self.counters().wait_for(name, value),
        )
        .await
        .is_err()
        {
            panic!(
                "counter {name} did not reach {value} (now {})",
                self.counter(name)
            );
        }
    }

    /// The admin listener's address.
    ///
    /// # Panics
    /// When the admin listener is off (see [`ProxyBuilder::admin`]).
    pub fn admin(&self) -> SocketAddr {
        self.inner()
            .admin_addr()
            .expect("test: the admin listener is on")
    }

    /// The running proxy.
    pub fn proxy(&self) -> &Proxy {
        self.inner()
    }

    /// The cache store.
    pub fn store(&self) -> &hoard_proxy::pipeline::StoreHandle {
        self.inner().store()
    }

    /// Reloads the proxy with a TOML configuration (`{origin}` replaced by
    /// the origin's address), as SIGHUP does with the file: a text that
    /// does not parse is refused with the error `hoard check` prints.
    pub fn reload_toml(
        &self,
        origin: &Origin,
        text: &str,
    ) -> Result<hoard_server::Reloaded, String> {
        let text = text.replace("{origin}", &origin.addr().to_string());
        match Config::from_toml("test.toml", &text) {
            Err(e) => {
                self.inner().reload_refused(&e.to_string());
                Err(e.to_string())
            }
            Ok(cfg) => self.inner().reload(cfg).map_err(|e| e.to_string()),
        }
    }

    /// Starts a shutdown without waiting for it (listeners close, connections drain).
    pub fn begin_stop(&self) {
        self.inner().begin_shutdown();
    }

    /// Stops the proxy: waits until its connections have drained.
    pub async fn stop(mut self) {
        if let Some(p) = self.proxy.take() {
            p.shutdown().await;
        }
    }

    /// Keeps the Arc of the store alive for inspection after stop.
    pub fn store_arc(&self) -> Arc<hoard_proxy::pipeline::StoreHandle> {
        self.inner().store_arc()
    }
}

impl Endpoint for TestProxy {
    fn endpoint(&self) -> SocketAddr {
        self.addr
    }
}
