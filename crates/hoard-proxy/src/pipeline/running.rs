//! The running configuration: what a request is served with.
//!
//! ## Model
//!
//! A [`Running`] is an immutable snapshot: the configuration, its upstreams
//! (each with its connection pools and server health), the `Via` name and
//! each route's registered handlers (see [`super::phases`]).
//! The pipeline holds the current one in an `ArcSwap`; each request loads
//! it once in `recv` and keeps it to the end, so a reload never changes a
//! request in flight. Fills keep the `Arc`s of their route and upstream.
//!
//! ## Lifecycle (reload)
//!
//! [`Running::next`] builds the successor from a new configuration: an
//! upstream keeps its identity by *name*, and within it each server by
//! address, so idle connections and health survive a reload (see
//! `Upstream::renew`); added upstreams start empty, removed ones are
//! dropped when their last request ends. The routes' limits keep their
//! state the same way (see [`super::limits`]). The pipeline then swaps the
//! snapshot in one store: new requests see the new one.
//!
//! Each upstream with a `health_check` probes its servers from a task of
//! its own, which ends with the upstream (see `hoard_origin::probe`).
//!
//! What a snapshot does not carry needs a restart: the cache store
//! (`[cache]`), the thread count, the admin listener and the access log.
//! [`restart_needed`] names the keys that changed there.

use std::net::SocketAddr;
use std::sync::Arc;

use hoard_policy::clock::Clock;

use crate::via::Via;
use hoard_config::Config;
use hoard_metrics::counters::Counters;
use hoard_origin::Upstream;

/// See the module docs.
#[derive(Debug)]
pub struct Running {
    /// The configuration.
    pub cfg: Arc<Config>,
    /// One per `cfg.upstreams`, same order (routes index them).
    pub upstreams: Vec<Arc<Upstream>>,
    /// An upstream without servers, for the requests of a configuration
    /// that has none (every route redirects or responds: none is sent on).
    pub no_upstream: Arc<Upstream>,
    /// `Via` for this hop.
    pub via: Via,
    /// 1 for the configuration the proxy started with, +1 per reload.
    pub generation: u64,
    /// The state of each route's limits (kept across a reload, see
    /// [`super::limits`]).
    pub limits: super::limits::RouteLimits,
    /// Each route's registered handlers, by site and route (see
    /// [`super::phases`]).
    pub(crate) steps: Vec<Vec<super::phases::RouteSteps>>,
}

/// Every route's handlers (see [`super::phases::RouteSteps`]).
fn steps(cfg: &Config) -> Vec<Vec<super::phases::RouteSteps>> {
    cfg.sites
        .iter()
        .map(|site| {
            site.routes
                .iter()
                .map(|r| super::phases::RouteSteps::of(r.edge.as_deref()))
                .collect()
        })
        .collect()
}

/// See [`Running::no_upstream`].
fn no_upstream(counters: &Arc<Counters>, clock: &Arc<dyn Clock>) -> Arc<Upstream> {
    let cfg = hoard_config::UpstreamConfig::new("", Vec::new());
    Arc::new(Upstream::new(cfg, counters.clone(), clock.clone()))
}

/// Puts the configuration's filters to use: they read hoard's clock and
/// their ticks start (see `hoard_wasm::Plugin::start`); a replaced
/// configuration's stop with it.
fn start_filters(
    cfg: &Config,
    clock: &Arc<dyn Clock>,
    counters: &Arc<Counters>,
    upstreams: &[Arc<Upstream>],
) {
    if cfg.filters.is_empty() {
        return;
    }
    let services: Arc<dyn hoard_wasm::Services> = Arc::new(super::filters::FilterServices {
        counters: counters.clone(),
        upstreams: cfg
            .upstreams
            .iter()
            .zip(upstreams)
            .map(|(c, u)| (c.name.clone(), u.clone()))
            .collect(),
        runtime: tokio::runtime::Handle::try_current().ok(),
    });
    for f in &cfg.filters {
        f.plugin.start(clock.clone(), services.clone());
    }
}

impl Running {
    /// The first snapshot.
    pub fn first(cfg: Arc<Config>, counters: &Arc<Counters>, clock: &Arc<dyn Clock>) -> Running {
        let upstreams: Vec<Arc<Upstream>> = cfg
            .upstreams
            .iter()
            .map(|u| Arc::new(Upstream::new(u.clone(), counters.clone(), clock.clone())))
            .collect();
        upstreams.iter().for_each(hoard_origin::probe::start);
        start_filters(&cfg, clock, counters, &upstreams);
        Running {
            via: Via::new(&cfg.server.via),
            upstreams,
            no_upstream: no_upstream(counters, clock),
            limits: super::limits::RouteLimits::first(&cfg, clock),
            steps: steps(&cfg),
            cfg,
            generation: 1,
        }
    }

    /// The successor for `cfg`, keeping upstreams by name (see the module docs).
    pub fn next(
        &self,
        cfg: Arc<Config>,
        counters: &Arc<Counters>,
        clock: &Arc<dyn Clock>,
    ) -> Running {
        let upstreams: Vec<Arc<Upstream>> = cfg
            .upstreams
            .iter()
            .map(|u| {
                let old = self
                    .cfg
                    .upstreams
                    .iter()
                    .position(|o| o.name == u.name)
                    .map(|i| &self.upstreams[i]);
                Arc::new(match old {
                    Some(old) => old.renew(u.clone()),
                    None => Upstream::new(u.clone(), counters.clone(), clock.clone()),
                })
            })
            .collect();
        // The successors probe now (with the same health where the check
        // did not change).
        self.upstreams.iter().for_each(|u| u.retire_probes());
        upstreams.iter().for_each(hoard_origin::probe::start);
        start_filters(&cfg, clock, counters, &upstreams);
        Running {
            via: Via::new(&cfg.server.via),
            upstreams,
            no_upstream: no_upstream(counters, clock),
            limits: self.limits.next(&self.cfg, &cfg, clock),
            steps: steps(&cfg),
            cfg,
            generation: self.generation + 1,
        }
    }
}

/// What a reload changed.
#[derive(Debug, Clone, Default)]
pub struct Reloaded {
    /// The running configuration's generation now.
    pub generation: u64,
    /// Listeners opened.
    pub opened: Vec<SocketAddr>,
    /// Listeners closed (their connections drain).
    pub closed: Vec<SocketAddr>,
    /// Settings that changed but wait for a restart.
    pub restart_needed: Vec<&'static str>,
}

/// A reload asked for through the admin API (`POST /reload`), waiting for
/// whoever holds the configuration file to apply it.
#[derive(Debug)]
pub struct ReloadAsk {
    /// Where the outcome goes.
    pub reply: tokio::sync::oneshot::Sender<Result<Reloaded, String>>,
}

impl ReloadAsk {
    /// Answers the admin request with the reload's outcome.
    pub fn respond(self, outcome: Result<Reloaded, String>) {
        let _ = self.reply.send(outcome);
    }
}

/// What the last reload did (for logs and `/status`).
#[derive(Debug, Clone)]
pub struct ReloadRecord {
    /// Reloads tried since the start, this one included (`hoard reload`
    /// waits for it to grow).
    pub number: u64,
    /// When it happened.
    pub at: std::time::SystemTime,
    /// `Ok(generation)` or the error that refused it.
    pub result: Result<u64, String>,
}

/// The settings of `new` that differ from `old` and take effect only after
/// a restart (they are kept as they are until then).
pub fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if format!("{:?}", old.cache) != format!("{:?}", new.cache) {
        keys.push("cache");
    }
    if old.server.threads != new.server.threads {
        keys.push("server.threads");
    }
    if old.server.max_connections != new.server.max_connections {
        keys.push("server.max_connections");
    }
    if old.server.run_as != new.server.run_as {
        keys.push("server.user");
    }
    if old.admin.address != new.admin.address {
        keys.push("admin.address");
    }
    if old.admin.token != new.admin.token {
        keys.push("admin.token");
    }
    if format!("{:?}", old.access_log) != format!("{:?}", new.access_log) {
        keys.push("access_log");
    }
    keys
}
