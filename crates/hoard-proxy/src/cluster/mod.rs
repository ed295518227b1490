//! A hoard cluster: any node takes any request, and each object is fetched
//! from the origin by one node, its owner.
//!
//! ## Model
//!
//! The members are static (`[cluster]`, `--cluster-peers`), this node among
//! them. A key's owner is its first choice by weighted rendezvous hashing
//! ([`ring`]) over the members that are up, by the primary cache key (all
//! `Vary` variants of a URL have one owner; each slice of a sliced object
//! is a key of its own, so a large file spreads over the cluster).
//!
//! Routing happens where a fill would go to the origin ([`Cluster::send`]):
//! lookups, coalescing, hit-for-pass and storing stay as on one node. A
//! fill for a key this node does not own is sent to the owner, signed
//! ([`peer_auth`]); the owner serves it from its cache or fills it itself,
//! with its own coalescing, and the bytes stream back through the hop as
//! they arrive. A request from a peer is never forwarded again (one hop at
//! most: two nodes that disagree for a moment cost one extra fetch, never
//! a loop). Passes, bypass rules, hit-for-pass keys and unsafe methods go
//! to the origin directly, as they never reach a fill. An uncacheable
//! answer from the owner marks the key hit-for-pass here too, so this node
//! stops forwarding it. Whether this node keeps a copy of what the owner
//! sent is the near-cache's call ([`near`]): copies of keys forwarded
//! often enough, in a memory tier of their own size.
//!
//! ## Failures
//!
//! If the owner refuses the connection, does not accept it within
//! `owner_connect_timeout`, or drops the hop before its response head, the
//! same fill goes to the key's next choice (a fill is a GET or HEAD without
//! a body: it can be sent again), and to the origin when the next choice
//! is this node. Each member is an [`Upstream`] of one server, whose health
//! (down after consecutive failures, held down with backoff) takes a member
//! out of the ranking, so its keys go to their second choices, each of
//! which fetches that share once. If most members look down at once,
//! health is ignored rather than piling everything on the few left.
//!
//! ## Locking
//!
//! None of its own: the ring is immutable, each member's connections and
//! health are its `Upstream`'s.

pub mod bus;
pub mod near;
pub mod peer_auth;
pub mod probe;
pub mod purge;
pub mod ring;

use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Response, Uri};

use crate::config::{ClusterConfig, ServerAddr, UpstreamConfig};
use crate::counters::Counters;
use crate::error::{ErrorKind, ProxyError};
use crate::upstream::{OriginBody, OriginRequest, Upstream};
use peer_auth::{PeerHop, PeerKey};

/// The cluster as this node sees it. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    me: usize,
    /// Shared, so that an access log line can name a member without a copy.
    names: Vec<Arc<str>>,
    slots: Vec<ring::Slot>,
    /// One upstream per member (`None` for this node).
    peers: Vec<Option<Upstream>>,
    /// Per member: down by its probes ([`probe`]); never for this node.
    down: Vec<tokio::sync::watch::Sender<bool>>,
    key: PeerKey,
    /// Which owners' answers are kept here (see [`near`]).
    near: near::Admission,
    /// How long a purge waits for the members' acknowledgements.
    purge_timeout: std::time::Duration,
    /// A stall of this node longer than this fences what it stored.
    grace: std::time::Duration,
    /// The invalidation log, when the cluster has one ([`bus`]).
    pub bus: Option<bus::Bus>,
    /// Unix milliseconds: responses stored before are revalidated before
    /// they are served as fresh (0: none). See [`probe`].
    fence_ms: std::sync::atomic::AtomicU64,
    counters: Arc<Counters>,
    clock: Arc<dyn hoard_policy::clock::Clock>,
}

/// Counters per row of the near-cache sketch: 4 rows of 64 Ki, 256 KiB.
const NEAR_SKETCH_WIDTH: usize = 64 << 10;

/// One member as `/status` and `/metrics` show it.
#[derive(Debug, Clone, Copy)]
pub struct MemberView<'a> {
    /// Its name.
    pub name: &'a str,
    /// Up (probes answered, no recent failures); this node always is.
    pub up: bool,
    /// The share of keys it owns now (0 to 1; 0 when it is left out).
    pub share: f64,
}

/// Where a fill's answer came from ([`Cluster::send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The origin: this node owns the key (or every owner was unreachable).
    Origin,
    /// The key's owner, another member; `keep`: this node keeps a near
    /// copy (see [`near`]).
    Owner {
        /// The key was forwarded often enough to be kept.
        keep: bool,
    },
}

static FIELD: HeaderName = HeaderName::from_static(peer_auth::FIELD);
/// How far a forwarding member had applied the log (with a bus).
static LOG_FIELD: HeaderName = HeaderName::from_static("hoard-log");
/// How long an owner behind a forwarding member's log position waits for
/// its own reader before it answers as a miss.
const LOG_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

impl Cluster {
    /// The cluster of `cfg`, with no connection open yet.
    pub fn new(
        cfg: &ClusterConfig,
        zone_dir: Option<std::path::PathBuf>,
        counters: Arc<Counters>,
        clock: Arc<dyn hoard_policy::clock::Clock>,
    ) -> Cluster {
        let me = cfg
            .members
            .iter()
            .position(|m| m.name == cfg.node)
            .expect("invariant: the configuration checked that this node is a member");
        let peers = cfg
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (i != me).then(|| {
                    let mut u = UpstreamConfig::new(
                        &format!("cluster member {}", m.name),
                        vec![ServerAddr::http(m.addr.to_string())],
                    );
                    u.connect_timeout = cfg.owner_connect_timeout;
                    u.read_timeout = cfg.owner_read_timeout;
                    Upstream::new(u, counters.clone(), clock.clone())
                })
            })
            .collect();
        Cluster {
            me,
            names: cfg
                .members
                .iter()
                .map(|m| Arc::from(m.name.as_str()))
                .collect(),
            slots: cfg
                .members
                .iter()
                .map(|m| ring::Slot::new(&m.name, m.weight))
                .collect(),
            down: cfg
                .members
                .iter()
                .map(|_| tokio::sync::watch::Sender::new(false))
                .collect(),
            peers,
            key: PeerKey::new(&cfg.secret),
            near: near::Admission::new(NEAR_SKETCH_WIDTH, cfg.near_admit_after),
            purge_timeout: cfg.purge_timeout,
            grace: cfg.grace,
            bus: cfg
                .bus
                .as_ref()
                .and_then(|b| match bus::Bus::new(b, zone_dir) {
                    Ok(bus) => Some(bus),
                    Err(e) => {
                        tracing::error!(error = %e, "cluster bus not usable; purges go over HTTP");
                        None
                    }
                }),
            fence_ms: std::sync::atomic::AtomicU64::new(0),
            counters,
            clock,
        }
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.names[self.me]
    }

    /// Every member: its name, whether it is up (this node always is) and
    /// the share of keys it owns now.
    pub fn members(&self) -> Vec<MemberView<'_>> {
        let ranked = self.ranked();
        let total: f64 = (0..self.names.len())
            .filter(|&i| ranked(i))
            .map(|i| self.slots[i].weight())
            .sum();
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| MemberView {
                name: n,
                up: self.up(i),
                share: if ranked(i) && total > 0.0 {
                    self.slots[i].weight() / total
                } else {
                    0.0
                },
            })
            .collect()
    }

    fn up(&self, i: usize) -> bool {
        self.peers[i]
            .as_ref()
            .is_none_or(|p| !p.is_down() && !*self.down[i].borrow())
    }

    /// Which members take part in ranking keys: those up, unless most
    /// members look down at once. That is more likely this node's own
    /// trouble (a partition, a stall) than most of the cluster dying, and
    /// sending every key to the few that remain would bury them: health
    /// is then ignored, and a member that really is gone costs a failed
    /// connection and the next choice (see [`Cluster::send`]).
    fn ranked(&self) -> impl Fn(usize) -> bool + '_ {
        let down = (0..self.names.len()).filter(|&i| !self.up(i)).count();
        let ignore = down * 2 > self.names.len();
        move |i| ignore || self.up(i)
    }

    /// Fences what was stored before `at`: it is revalidated before it is
    /// served as fresh again (this node stood still and may have missed
    /// purges).
    pub fn fence(&self, at: std::time::SystemTime) {
        self.fence_ms
            .store(unix_ms(at), std::sync::atomic::Ordering::Relaxed);
        self.counters.inc(&self.counters.cluster_fenced);
    }

    /// True when a response received at `response_time` must be
    /// revalidated before it is served as fresh.
    pub fn fenced(&self, response_time: std::time::SystemTime) -> bool {
        let f = self.fence_ms.load(std::sync::atomic::Ordering::Relaxed);
        (f != 0 && unix_ms(response_time) < f) || self.bus.as_ref().is_some_and(bus::Bus::unsure)
    }

    /// The other members' names.
    pub fn others(&self) -> Vec<String> {
        self.names
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.me)
            .map(|(_, n)| n.to_string())
            .collect()
    }

    /// Removes the log-position field from a request's header fields (it
    /// counts only on a checked peer request); its value.
    pub fn take_log(&self, headers: &mut HeaderMap) -> Option<bus::EntryId> {
        let v = headers.remove(&LOG_FIELD)?;
        bus::EntryId::parse(v.to_str().ok()?)
    }

    /// True once this node has applied the log up to `at` (waiting up to
    /// [`LOG_WAIT`] for its reader); false when it is still behind, counted.
    pub async fn caught_up_to(&self, at: bus::EntryId) -> bool {
        let Some(bus) = &self.bus else { return true };
        if bus.reached(self.node(), at, LOG_WAIT).await {
            return true;
        }
        self.counters.inc(&self.counters.cluster_bus_behind_misses);
        false
    }

    /// Now, in Unix milliseconds (the proxy's clock).
    pub fn clock_ms(&self) -> u64 {
        unix_ms(self.clock.now())
    }

    /// Member `i`'s name (for the access log).
    pub fn name(&self, i: usize) -> Arc<str> {
        self.names[i].clone()
    }

    /// The member (index) that owns `key` now, if it is not this node.
    pub fn other_owner(&self, key: &[u8]) -> Option<u16> {
        let i = ring::owner(&self.slots, key, self.ranked())?;
        (i != self.me).then_some(i as u16)
    }

    /// The name of the member that owns `key` now.
    pub fn owner(&self, key: &[u8]) -> &str {
        let i = ring::owner(&self.slots, key, self.ranked()).unwrap_or(self.me);
        &self.names[i]
    }

    /// Removes the peer field from a request's header fields; the hop it
    /// names when the field checks out. A refused field is counted and
    /// logged: the request is then a client's like any other.
    pub fn take_hop(&self, headers: &mut HeaderMap, method: &Method, uri: &Uri) -> Option<PeerHop> {
        let value = headers.remove(&FIELD)?;
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let checked = value
            .to_str()
            .map_err(|_| peer_auth::Refused::Malformed)
            .and_then(|v| {
                self.key
                    .verify(v, self.clock.now(), method.as_str(), target, |n| {
                        n != self.node() && self.names.iter().any(|m| &**m == n)
                    })
            });
        match checked {
            Ok(hop) => {
                self.counters.inc(&self.counters.cluster_peer_requests);
                Some(hop)
            }
            Err(why) => {
                self.counters.inc(&self.counters.cluster_peer_refused);
                tracing::info!(
                    reason = why.as_str(),
                    "peer field refused and removed; routed as a client request"
                );
                None
            }
        }
    }

    /// Sends a fill's request for `key` (asked over TLS if `tls`): to the
    /// key's owner when that is another member, else to `origin`; on to
    /// the next choice when the owner cannot be reached. See the module docs.
    pub async fn send(
        &self,
        key: &[u8],
        tls: bool,
        req: OriginRequest,
        origin: &Upstream,
    ) -> Result<(Response<OriginBody>, Source), ProxyError> {
        let choices = ring::choices(&self.slots, key, self.ranked());
        let mut req = Some(req);
        for (n, &i) in choices.iter().enumerate() {
            let Some(peer) = &self.peers[i] else {
                let req = req
                    .take()
                    .expect("invariant: sent at most once to the origin");
                return Ok((origin.send(req).await?, Source::Origin));
            };
            let last = n + 1 == choices.len();
            let base = req
                .as_ref()
                .expect("invariant: kept until the origin gets it");
            let mut hop = OriginRequest {
                method: base.method.clone(),
                uri: base.uri.clone(),
                headers: base.headers.clone(),
                body: None,
                interim: base.interim.clone(),
            };
            let target = hop
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            let signed = self.key.sign(
                self.node(),
                self.clock.now(),
                tls,
                hop.method.as_str(),
                &target,
            );
            if let Ok(v) = HeaderValue::from_str(&signed) {
                hop.headers.insert(FIELD.clone(), v);
            }
            if let Some(at) = self.bus.as_ref().and_then(|b| b.position(self.node())) {
                if let Ok(v) = HeaderValue::from_str(&at.to_string()) {
                    hop.headers.insert(LOG_FIELD.clone(), v);
                }
            }
            self.counters.inc(&self.counters.cluster_forwarded);
            // A member found frozen by its probes while this waits for its
            // response head gives the request up to the next choice.
            let mut down = self.down[i].subscribe();
            let sent = tokio::select! {
                r = peer.send(hop) => r,
                _ = down.wait_for(|d| *d), if !last => Err(ProxyError::origin(
                    ErrorKind::ConnectTimeout,
                    format!("cluster member {}: does not answer probes", self.names[i]),
                )),
            };
            match sent {
                Ok(resp) => {
                    let keep = self.near.record(key);
                    return Ok((resp, Source::Owner { keep }));
                }
                Err(e) if !last && unreachable(&e) => {
                    self.counters.inc(&self.counters.cluster_forward_retries);
                    tracing::info!(owner = %self.names[i], error = %e, "owner unreachable; next choice");
                }
                Err(e) => return Err(e),
            }
        }
        // Only reached when every choice was an unreachable peer.
        let req = req.take().expect("invariant: not sent yet");
        Ok((origin.send(req).await?, Source::Origin))
    }
}

fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A failure that says the owner never took the request: worth asking the
/// next choice (a slow origin behind a live owner is not one).
fn unreachable(e: &ProxyError) -> bool {
    matches!(
        e.kind,
        ErrorKind::ConnectRefused | ErrorKind::ConnectTimeout | ErrorKind::BadResponse
    )
}
