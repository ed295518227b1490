//! Membership from what the site already runs: DNS records or heartbeats
//! in the bus's Redis, instead of a list in every node's configuration.
//!
//! ## Model
//!
//! A source gives addresses, not members: every `refresh`, the DNS name's
//! A/AAAA records (with the configured port) or SRV records (targets and
//! ports; a Kubernetes headless Service, Consul), the ready endpoints of a
//! Service's EndpointSlices from the Kubernetes API ([`super::kubernetes`]),
//! or the addresses the nodes wrote to `PREFIX:members` with their
//! heartbeats, recent ones only.
//! An address becomes a member once it answers a probe: the answer names
//! the node (`hoard-node`; the name is what the ring hashes, so keys stay
//! with a node across address changes) and, with a bus, how far it has
//! applied the log (`hoard-log`). A node behind this node's own position
//! is not routed to yet: it may still serve what a purge this node has
//! applied removed; it is asked again at the next refresh. The address
//! that answers with this node's own name is remembered, skipped, and shown as
//! this node's address (in `/status`; it has none before). An
//! address that the source no longer gives leaves the view at once (its
//! keys go to their second choices, as for a member that is down); a
//! failed resolution keeps the view as it is. With heartbeats, a member
//! whose entry is missing rather than old (Redis restarted empty) is kept
//! for one heartbeat `ttl`: it has not had the chance to write again.
//!
//! Until its first resolution has been tried, this node answers
//! probes with 503: others do not route to a node that does not know the
//! members yet (it could not ask a key's previous owner).
//!
//! The first time this node's view grows beyond itself, it has joined a
//! cluster: its ramp-up window begins ([`super::rampup`]).
//!
//! ## Lifecycle and locking
//!
//! One task per node, holding the cluster weakly; it alone replaces the
//! view ([`super::member`]), so changes never race. Each new member gets
//! its probe task ([`super::probe`]); a member that left is marked and its
//! task ends.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

use super::bus::EntryId;
use super::member::{Member, View};
use super::{probe, Cluster, LOG_FIELD, NODE_FIELD};
use hoard_config::cluster::Discovery;
use hoard_config::{ServerAddr, UpstreamConfig};
use hoard_origin::Upstream;

/// Starts the discovery task (with a discovered member list), or begins
/// the ramp-up window of a static one.
pub fn start(cluster: &Arc<Cluster>) {
    match &cluster.discovery {
        Discovery::Static => cluster.begin_rampup(),
        Discovery::Dns { .. } | Discovery::Redis { .. } | Discovery::Kubernetes(_) => {
            tokio::spawn(run(Arc::downgrade(cluster)));
        }
    }
}

/// Where addresses come from.
enum Finder {
    Dns {
        resolver: Box<TokioResolver>,
        name: String,
        port: u16,
    },
    Redis {
        advertise: SocketAddr,
        ttl: Duration,
        /// Members of the view whose heartbeat entry is missing (not old),
        /// since when (ms on the proxy's clock).
        missing: parking_lot::Mutex<HashMap<String, u64>>,
    },
    Kubernetes(Box<super::kubernetes::EndpointSlices>),
}

impl Finder {
    fn new(d: &Discovery) -> Result<(Finder, Duration), String> {
        match d {
            Discovery::Static => Err("a static member list is not discovered".into()),
            Discovery::Dns {
                name,
                port,
                resolver,
                refresh,
            } => {
                let config = match resolver {
                    Some(at) => {
                        let mut udp = ConnectionConfig::udp();
                        udp.port = at.port();
                        let mut tcp = ConnectionConfig::tcp();
                        tcp.port = at.port();
                        ResolverConfig::from_name_servers(vec![NameServerConfig::new(
                            at.ip(),
                            true,
                            vec![udp, tcp],
                        )])
                    }
                    None => {
                        let (config, _) = hickory_resolver::system_conf::read_system_conf()
                            .map_err(|e| format!("reading the system's DNS configuration: {e}"))?;
                        config
                    }
                };
                let mut b =
                    TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
                // Every refresh asks: membership changes faster than TTLs say.
                b.options_mut().cache_size = 0;
                b.options_mut().timeout = Duration::from_secs(2);
                b.options_mut().attempts = 1;
                let resolver = b.build().map_err(|e| format!("DNS resolver: {e}"))?;
                Ok((
                    Finder::Dns {
                        resolver: Box::new(resolver),
                        name: name.clone(),
                        port: *port,
                    },
                    *refresh,
                ))
            }
            Discovery::Redis {
                advertise,
                refresh,
                ttl,
            } => Ok((
                Finder::Redis {
                    advertise: *advertise,
                    ttl: *ttl,
                    missing: Default::default(),
                },
                *refresh,
            )),
            Discovery::Kubernetes(k) => Ok((
                Finder::Kubernetes(Box::new(super::kubernetes::EndpointSlices::new(k)?)),
                k.refresh,
            )),
        }
    }

    /// The addresses the source gives now.
    async fn find(&self, c: &Cluster) -> Result<HashSet<SocketAddr>, String> {
        match self {
            Finder::Dns {
                resolver,
                name,
                port,
            } => {
                let mut found = HashSet::new();
                if name.starts_with('_') {
                    let srv = resolver
                        .srv_lookup(name.as_str())
                        .await
                        .map_err(|e| format!("{name} SRV: {e}"))?;
                    for r in srv.answers() {
                        if let RData::SRV(s) = &r.data {
                            let ips = resolver
                                .lookup_ip(s.target.clone())
                                .await
                                .map_err(|e| format!("{}: {e}", s.target))?;
                            found.extend(ips.iter().map(|ip| SocketAddr::new(ip, s.port)));
                        }
                    }
                } else {
                    let ips = resolver
                        .lookup_ip(name.as_str())
                        .await
                        .map_err(|e| format!("{name}: {e}"))?;
                    found.extend(ips.iter().map(|ip: IpAddr| SocketAddr::new(ip, *port)));
                }
                if found.is_empty() {
                    // Not even this node: the records are not there (yet).
                    return Err(format!("{name}: no address"));
                }
                Ok(found)
            }
            Finder::Kubernetes(k) => k.ready().await,
            Finder::Redis {
                advertise,
                ttl,
                missing,
            } => {
                let bus = c.bus.as_ref().ok_or("redis membership without a bus")?;
                let now = c.clock_ms();
                bus.heartbeat(c.node(), *advertise, now)
                    .await
                    .map_err(|e| format!("heartbeat: {e}"))?;
                let (seen, listed) = bus
                    .members(now, *ttl)
                    .await
                    .map_err(|e| format!("reading members: {e}"))?;
                let mut found: HashSet<SocketAddr> = seen
                    .into_iter()
                    .filter(|(name, _)| name != c.node())
                    .map(|(_, a)| a)
                    .collect();
                // A member whose entry is missing rather than old (Redis
                // restarted empty, or a failover lost it) has had no chance
                // to write its next heartbeat: kept for one `ttl`, as if its
                // last one had been just before.
                let mut missing = missing.lock();
                let view = c.view();
                missing.retain(|name, _| view.members.iter().any(|m| *m.name == **name));
                for (i, m) in view.members.iter().enumerate() {
                    if i == view.me || listed.contains(&*m.name) {
                        missing.remove(&*m.name);
                        continue;
                    }
                    let since = *missing.entry(m.name.to_string()).or_insert(now);
                    if now.saturating_sub(since) < ttl.as_millis() as u64 {
                        found.insert(m.addr);
                    }
                }
                Ok(found)
            }
        }
    }
}

async fn run(cluster: Weak<Cluster>) {
    let (finder, refresh) = match cluster.upgrade().map(|c| Finder::new(&c.discovery)) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            tracing::error!(error = %e, "cluster members cannot be discovered: this node stays alone");
            return;
        }
        None => return,
    };
    let mut joins = Joins::default();
    loop {
        let Some(c) = cluster.upgrade() else { return };
        match finder.find(&c).await {
            Ok(found) => {
                c.counters.inc(&c.counters.cluster_discovery_reads);
                joins.reconcile(&c, found).await
            }
            Err(e) => {
                c.counters.inc(&c.counters.cluster_discovery_errors);
                tracing::warn!(error = %e, "cluster members not resolved; the member list is kept");
            }
        }
        // From now on this node answers probes: it knows the others, or
        // cannot learn them yet (a first failure must not keep it out for
        // good: a headless Service may list only ready pods).
        c.discovered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        drop(c);
        tokio::time::sleep(refresh).await;
    }
}

/// What a probe of a new address found.
enum Candidate {
    /// This node itself.
    Me,
    /// A member that may be routed to.
    Ready(String),
    /// A member behind this node's log position, or no answer: asked again.
    NotYet(&'static str),
}

/// The discovery task's state.
#[derive(Default)]
struct Joins {
    /// Addresses that turned out to be this node.
    me: HashSet<SocketAddr>,
    /// Connections to addresses not yet members (for their probes).
    probing: HashMap<SocketAddr, Upstream>,
    /// Addresses refused for good (not on loopback without a secret).
    refused: HashSet<SocketAddr>,
}

impl Joins {
    async fn reconcile(&mut self, c: &Arc<Cluster>, found: HashSet<SocketAddr>) {
        let view = c.view();
        let me = view.me;
        let mut keep: Vec<Arc<Member>> = Vec::new();
        let mut left = Vec::new();
        for (i, m) in view.members.iter().enumerate() {
            if i == me || found.contains(&m.addr) {
                keep.push(m.clone());
            } else {
                left.push(m.clone());
            }
        }
        let mut joined = Vec::new();
        let mut found_me = false;
        for addr in found {
            if self.me.contains(&addr)
                || self.refused.contains(&addr)
                || keep.iter().any(|m| m.addr == addr)
            {
                continue;
            }
            if !c.has_secret && !addr.ip().is_loopback() {
                tracing::error!(%addr, "a discovered member is not on loopback and the cluster has no secret ([cluster] secret_file): not a member");
                self.refused.insert(addr);
                continue;
            }
            match self.probe(c, addr).await {
                Candidate::Me => {
                    self.me.insert(addr);
                    // This node's own entry shows the address its members
                    // reach it at (it knew none before: `0.0.0.0:0`).
                    if let Some(p) = keep
                        .iter()
                        .position(|m| *m.name == *c.node() && m.addr.ip().is_unspecified())
                    {
                        let weight = keep[p].slot.weight();
                        keep[p] = Arc::new(c.dialer.member(&c.names, c.node(), addr, weight));
                        found_me = true;
                    }
                }
                Candidate::NotYet(why) => {
                    c.counters.inc(&c.counters.cluster_members_not_ready);
                    tracing::info!(%addr, why, "a discovered member is not routed to yet");
                }
                Candidate::Ready(name) => {
                    self.probing.remove(&addr);
                    // The same name at a new address replaces the old one.
                    if let Some(p) = keep.iter().position(|m| *m.name == *name) {
                        left.push(keep.remove(p));
                    }
                    let m = Arc::new(c.dialer.member(&c.names, &name, addr, 1.0));
                    keep.push(m.clone());
                    joined.push(m);
                }
            }
        }
        if joined.is_empty() && left.is_empty() && !found_me {
            return;
        }
        let grew = view.members.len() == 1 && keep.len() > 1;
        c.view.store(Arc::new(View::new(keep, c.node())));
        for m in &left {
            m.leave();
            c.counters.inc(&c.counters.cluster_members_left);
            tracing::warn!(member = %m.name, addr = %m.addr, "cluster member no longer discovered: left");
        }
        for m in joined {
            c.counters.inc(&c.counters.cluster_members_joined);
            tracing::info!(member = %m.name, addr = %m.addr, "cluster member discovered and caught up: joined");
            tokio::spawn(probe::run(Arc::downgrade(c), m));
        }
        if grew {
            c.begin_rampup();
        }
    }

    /// Probes `addr`: who it is, and whether it has caught up with the log.
    async fn probe(&mut self, c: &Cluster, addr: SocketAddr) -> Candidate {
        let up = self.probing.entry(addr).or_insert_with(|| {
            let mut u = UpstreamConfig::new(
                &format!("cluster candidate {addr}"),
                vec![ServerAddr::http(addr.to_string())],
            );
            u.connect_timeout = c.dialer.connect_timeout;
            Upstream::new(u, c.counters.clone(), c.clock.clone())
        });
        let resp = match tokio::time::timeout(probe::TIMEOUT, up.send(probe::request())).await {
            Ok(Ok(r)) if r.status().is_success() => r,
            _ => return Candidate::NotYet("does not answer probes"),
        };
        let field = |n| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let Some(name) = field(&NODE_FIELD) else {
            return Candidate::NotYet("its probe answer names no node");
        };
        if name == c.node() {
            return Candidate::Me;
        }
        if let Some(mine) = c.bus.as_ref().and_then(|b| b.position(c.node())) {
            let theirs = field(&LOG_FIELD).and_then(|v| EntryId::parse(&v));
            if theirs.is_none_or(|t| t < mine) {
                return Candidate::NotYet("behind this node in the invalidation log");
            }
        }
        Candidate::Ready(name)
    }
}
