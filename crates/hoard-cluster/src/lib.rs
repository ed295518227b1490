//! A hoard cluster: any node takes any request, and each object is fetched
//! from the origin by one node, its owner.
//!
//! ## Model
//!
//! The members are listed (`[cluster] peers`, `--cluster-peers`) or
//! discovered ([`discover`]: DNS, Redis heartbeats), this node among them;
//! the current set is a [`member::View`]. A key's owner is its first choice by weighted rendezvous hashing
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
//! health is ignored rather than piling everything on the few left. An
//! owner that drops after its response head: the fill asks the key's next
//! choice after it for the rest ([`Cluster::send_after`], `fill::resume`),
//! with `Range` and `If-Range`.
//!
//! ## Joining and tiers
//!
//! A node that joins a running cluster first asks a miss of the key's
//! previous owner, for `rampup` ([`rampup`]); with a parent tier
//! (`[[cluster.tier]]`) the misses a node owns go to the parent chosen for
//! the key by the same hashing, which fills from the origin.
//!
//! ## Locking
//!
//! The view is swapped whole (`ArcSwap`), never modified; each member's
//! connections and health are its `Upstream`'s.

pub mod bus;
pub mod discover;
pub mod kubernetes;
pub mod member;
pub mod near;
pub mod peer_auth;
pub mod probe;
pub mod purge;
pub mod purge_message;
pub mod rampup;
pub mod ring;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Response, Uri};

use hoard_config::cluster::{Discovery, Tier};
use hoard_config::{ClusterConfig, ServerAddr, UpstreamConfig};
use hoard_metrics::counters::Counters;
use hoard_origin::error::{ErrorKind, ProxyError};
use hoard_origin::{OriginBody, OriginRequest, Upstream};
use member::{Member, Names, View};
use peer_auth::{PeerHop, PeerKey};

/// Why a [`Cluster::call`] got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// None within the wait; the member may still act on it.
    Timeout,
    /// No connection, or the answer broke off.
    Failed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout => f.write_str("no answer in time"),
            CallError::Failed(e) => f.write_str(e),
        }
    }
}

/// The cluster as this node sees it. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    node: Arc<str>,
    /// The members now.
    view: ArcSwap<View>,
    /// Every member name ever seen, by id.
    names: Names,
    /// The parent tier, if any: its name and members.
    tier: Option<(String, View)>,
    /// Where the member list comes from.
    discovery: Discovery,
    /// Makes the connections to members.
    dialer: Dialer,
    /// Peer requests are signed with a secret (else: loopback only).
    has_secret: bool,
    /// Body signatures of the members' messages taken lately (replays are
    /// refused), with when.
    seen_bodies: parking_lot::Mutex<HashMap<String, SystemTime>>,
    key: PeerKey,
    /// Which owners' answers are kept here (see [`near`]).
    near: near::Admission,
    /// How long a purge waits for the members' acknowledgements.
    purge_timeout: Duration,
    /// A stall of this node longer than this fences what it stored.
    grace: Duration,
    /// The invalidation log, when the cluster has one ([`bus`]).
    pub bus: Option<bus::Bus>,
    /// Unix milliseconds: responses stored before are revalidated before
    /// they are served as fresh (0: none). See [`probe`].
    fence_ms: AtomicU64,
    /// Joining: see [`rampup`].
    rampup: rampup::Rampup,
    /// The member list has been read (always, for a static one).
    discovered: std::sync::atomic::AtomicBool,
    counters: Arc<Counters>,
    clock: Arc<dyn hoard_policy::clock::Clock>,
}

/// Counters per row of the near-cache sketch: 4 rows of 64 Ki, 256 KiB.
const NEAR_SKETCH_WIDTH: usize = 64 << 10;

/// One member as `/status` and `/metrics` show it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Its name.
    pub name: Arc<str>,
    /// Its main listener.
    pub addr: SocketAddr,
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
    /// The key's previous owner, while this node ramps up ([`rampup`]):
    /// stored as this node's own.
    Previous,
    /// A parent of the tier (`[[cluster.tier]]`): stored as this node's own.
    Parent,
}

/// The member whose answer this is (an owner's, in a response's
/// extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served(pub u16);

impl Source {
    /// True when this node stores the answer as an owner does (not a
    /// near copy).
    pub fn owned(self) -> bool {
        !matches!(self, Source::Owner { .. })
    }
}

static FIELD: HeaderName = HeaderName::from_static(peer_auth::FIELD);
static BODY_FIELD: HeaderName = HeaderName::from_static(peer_auth::BODY_FIELD);
/// How far a forwarding member had applied the log (with a bus).
static LOG_FIELD: HeaderName = HeaderName::from_static("hoard-log");
/// The name a member gives in its probe answers.
static NODE_FIELD: HeaderName = HeaderName::from_static("hoard-node");
/// How long an owner behind a forwarding member's log position waits for
/// its own reader before it answers as a miss.
const LOG_WAIT: Duration = Duration::from_millis(200);

impl Cluster {
    /// The cluster of `cfg`, with no connection open yet.
    pub fn new(
        cfg: &ClusterConfig,
        zone_dir: Option<std::path::PathBuf>,
        counters: Arc<Counters>,
        clock: Arc<dyn hoard_policy::clock::Clock>,
    ) -> Cluster {
        let names = Names::default();
        let dialer = Dialer {
            node: Arc::from(cfg.node.as_str()),
            connect_timeout: cfg.owner_connect_timeout,
            read_timeout: cfg.owner_read_timeout,
            counters: counters.clone(),
            clock: clock.clone(),
        };
        let mut members: Vec<Arc<Member>> = cfg
            .members
            .iter()
            .map(|m| Arc::new(dialer.member(&names, &m.name, m.addr, m.weight)))
            .collect();
        if !members.iter().any(|m| *m.name == *cfg.node) {
            let addr = match &cfg.discovery {
                Discovery::Redis { advertise, .. } => *advertise,
                _ => SocketAddr::from(([0, 0, 0, 0], 0)),
            };
            members.push(Arc::new(dialer.member(&names, &cfg.node, addr, 1.0)));
        }
        let tier = cfg.tiers.first().map(|t: &Tier| {
            let parents = t
                .members
                .iter()
                .map(|m| Arc::new(dialer.member(&names, &m.name, m.addr, m.weight)))
                .collect();
            (t.name.clone(), View::parents(parents))
        });
        Cluster {
            node: dialer.node.clone(),
            view: ArcSwap::from_pointee(View::new(members, &cfg.node)),
            names,
            tier,
            discovery: cfg.discovery.clone(),
            dialer,
            has_secret: !cfg.secret.is_empty(),
            seen_bodies: parking_lot::Mutex::new(HashMap::new()),
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
            fence_ms: AtomicU64::new(0),
            rampup: rampup::Rampup::new(cfg.rampup),
            discovered: std::sync::atomic::AtomicBool::new(cfg.discovery == Discovery::Static),
            counters,
            clock,
        }
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The members now.
    pub fn view(&self) -> Arc<View> {
        self.view.load_full()
    }

    /// Every member: its name, whether it is up (this node always is) and
    /// the share of keys it owns now.
    pub fn members(&self) -> Vec<MemberView> {
        let view = self.view.load();
        let ranked = view.ranked();
        let total: f64 = (0..view.members.len())
            .filter(|&i| ranked(i))
            .map(|i| view.members[i].slot.weight())
            .sum();
        view.members
            .iter()
            .enumerate()
            .map(|(i, m)| MemberView {
                name: m.name.clone(),
                addr: m.addr,
                up: m.up(),
                share: if ranked(i) && total > 0.0 {
                    m.slot.weight() / total
                } else {
                    0.0
                },
            })
            .collect()
    }

    /// Where the member list comes from: `static`, `dns` or `redis`.
    pub fn discovery_name(&self) -> &'static str {
        match self.discovery {
            Discovery::Static => "static",
            Discovery::Dns { .. } => "dns",
            Discovery::Redis { .. } => "redis",
            Discovery::Kubernetes(_) => "kubernetes",
        }
    }

    /// The parent tier's members (name, up), if there is a tier.
    pub fn parents(&self) -> Option<(&str, Vec<(Arc<str>, bool)>)> {
        let (name, v) = self.tier.as_ref()?;
        Some((
            name,
            v.members.iter().map(|m| (m.name.clone(), m.up())).collect(),
        ))
    }

    /// How long after a purge applied here a copy of another member's
    /// object that it selects is not kept in the near tier: a member that
    /// acknowledged the purge applied it within `purge_timeout` of it, so a
    /// request forwarded to the owner later than twice that gets the
    /// owner's purged state.
    pub fn purge_window(&self) -> Duration {
        2 * self.purge_timeout
    }

    /// Fences what was stored before `at`: it is revalidated before it is
    /// served as fresh again (this node stood still and may have missed
    /// purges).
    pub fn fence(&self, at: std::time::SystemTime) {
        self.fence_ms.store(unix_ms(at), Ordering::Relaxed);
        self.counters.inc(&self.counters.cluster_fenced);
    }

    /// True when a response received at `response_time` must be
    /// revalidated before it is served as fresh.
    pub fn fenced(&self, response_time: std::time::SystemTime) -> bool {
        let f = self.fence_ms.load(Ordering::Relaxed);
        (f != 0 && unix_ms(response_time) < f) || self.bus.as_ref().is_some_and(bus::Bus::unsure)
    }

    /// The other members' names, and the parents': who acknowledges purges.
    pub fn others(&self) -> Vec<String> {
        let view = self.view.load();
        view.members
            .iter()
            .chain(self.tier.iter().flat_map(|(_, t)| t.members.iter()))
            .filter(|m| *m.name != *self.node)
            .map(|m| m.name.to_string())
            .collect()
    }

    /// Removes the log-position field from a request's header fields (it
    /// counts only on a checked peer request); its value.
    pub fn take_log(&self, headers: &mut HeaderMap) -> Option<bus::EntryId> {
        let v = headers.remove(&LOG_FIELD)?;
        bus::EntryId::parse(v.to_str().ok()?)
    }

    /// The header fields of this node's probe answers: its name, and how
    /// far it has applied the log (a joining member is routed to only
    /// once it has caught up, see [`discover`]); and the status: 503 until
    /// a discovered member list has been read once (a node that does not
    /// know the other members yet could not find a key's previous owner).
    pub fn probe_answer(&self, headers: &mut HeaderMap) -> http::StatusCode {
        if let Ok(v) = HeaderValue::from_str(self.node()) {
            headers.insert(NODE_FIELD.clone(), v);
        }
        if let Some(at) = self.bus.as_ref().and_then(|b| b.position(self.node())) {
            if let Ok(v) = HeaderValue::from_str(&at.to_string()) {
                headers.insert(LOG_FIELD.clone(), v);
            }
        }
        if self.discovered.load(Ordering::Relaxed) {
            http::StatusCode::OK
        } else {
            http::StatusCode::SERVICE_UNAVAILABLE
        }
    }

    /// True once this node has applied the log up to `at` (waiting up to
    /// `LOG_WAIT` for its reader); false when it is still behind, counted.
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

    /// The name of the member with id `i` (for the access log).
    pub fn name(&self, i: u16) -> Option<Arc<str>> {
        self.names.name(i)
    }

    /// The member (id) that owns `key` now, if it is not this node.
    pub fn other_owner(&self, key: &[u8]) -> Option<u16> {
        let view = self.view.load();
        let i = ring::owner(&view.slots, key, view.ranked())?;
        (i != view.me).then(|| view.members[i].id)
    }

    /// The name of the member that owns `key` now.
    pub fn owner(&self, key: &[u8]) -> Arc<str> {
        let view = self.view.load();
        let i = ring::owner(&view.slots, key, view.ranked()).unwrap_or(view.me);
        view.members[i].name.clone()
    }

    /// Sends a signed request for `target` (a path, with its query) to
    /// member `m` over the peer channel (the purge fan-out, ACME's
    /// challenges and certificates): the answer's status and body (up to
    /// 1 MiB), within `wait`.
    ///
    /// # Errors
    /// [`CallError::Timeout`] when no whole answer came within `wait`;
    /// [`CallError::Failed`] when `m` is this node, or the connection or
    /// its answer failed.
    pub async fn call(
        &self,
        m: &Member,
        method: Method,
        target: &str,
        body: Option<bytes::Bytes>,
        wait: Duration,
    ) -> Result<(http::StatusCode, bytes::Bytes), CallError> {
        use http_body_util::BodyExt;
        let Some(peer) = &m.peer else {
            return Err(CallError::Failed("this node".into()));
        };
        let uri: Uri = target
            .parse()
            .map_err(|e| CallError::Failed(format!("{target}: {e}")))?;
        let mut headers = HeaderMap::new();
        let signed = self.key.sign(
            self.node(),
            self.clock.now(),
            false,
            method.as_str(),
            target,
        );
        if let Ok(v) = HeaderValue::from_str(&signed) {
            headers.insert(FIELD.clone(), v);
        }
        if let Some(b) = &body {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Ok(v) = HeaderValue::from_str(&self.key.sign_body(&signed, b)) {
                headers.insert(BODY_FIELD.clone(), v);
            }
        }
        let req = OriginRequest {
            method,
            uri,
            headers,
            body: body.map(|b| http_body_util::Full::new(b).map_err(|e| match e {}).boxed()),
            interim: None,
            tries: None,
        };
        tokio::time::timeout(wait, async {
            let resp = peer
                .send(req)
                .await
                .map_err(|e| CallError::Failed(e.to_string()))?;
            let status = resp.status();
            // Read to the end: the connection goes back to the pool.
            let body = http_body_util::Limited::new(resp.into_body(), 1 << 20)
                .collect()
                .await
                .map_err(|e| CallError::Failed(e.to_string()))?
                .to_bytes();
            Ok((status, body))
        })
        .await
        .map_err(|_| CallError::Timeout)?
    }

    /// True when peer requests are signed with a secret (false: a
    /// loopback cluster without one, whose signatures anyone can make).
    pub fn has_secret(&self) -> bool {
        self.has_secret
    }

    /// A key for sealing what travels between members (ACME's private
    /// keys): derived from the cluster's secret for `purpose`.
    pub fn sealing_key(&self, purpose: &str) -> [u8; 32] {
        self.key.derive(purpose)
    }

    /// Checks a member's message body: `field` (the `hoard-peer` value,
    /// already checked by [`Cluster::take_hop`]) and `body` must match the
    /// body field, and the message must not have been taken before (within
    /// the signature's [`peer_auth::SKEW`]).
    ///
    /// # Errors
    /// What is wrong, for the 403's answer and the log.
    pub fn check_body(
        &self,
        field: &str,
        body: &[u8],
        body_field: Option<&HeaderValue>,
    ) -> Result<(), &'static str> {
        let mac = body_field
            .and_then(|v| v.to_str().ok())
            .ok_or("the body's signature is missing")?;
        if !self.key.verify_body(field, body, mac) {
            self.counters.inc(&self.counters.cluster_peer_refused);
            return Err("the body's signature does not match");
        }
        let now = self.clock.now();
        let mut seen = self.seen_bodies.lock();
        seen.retain(|_, at| !matches!(now.duration_since(*at), Ok(d) if d > peer_auth::SKEW * 2));
        if seen.insert(mac.to_string(), now).is_some() {
            self.counters.inc(&self.counters.cluster_peer_refused);
            return Err("a message already taken");
        }
        Ok(())
    }

    /// Removes the peer field from a request's header fields; the hop it
    /// names when the field checks out. A refused field is counted and
    /// logged: the request is then a client's like any other.
    ///
    /// With a secret, any other signer is a peer: the signature proves it
    /// holds the secret, and a member this node has not discovered yet, or
    /// an edge node of a tier below, is one. Without (loopback clusters),
    /// the signer must be a member this node knows.
    pub fn take_hop(&self, headers: &mut HeaderMap, method: &Method, uri: &Uri) -> Option<PeerHop> {
        let value = headers.remove(&FIELD)?;
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let view = self.view.load();
        let checked = value
            .to_str()
            .map_err(|_| peer_auth::Refused::Malformed)
            .and_then(|v| {
                self.key
                    .verify(v, self.clock.now(), method.as_str(), target, |n| {
                        n != self.node() && (self.has_secret || view.find(n).is_some())
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

    /// A copy of a fill's request for another member or a parent: signed,
    /// with this node's log position.
    fn hop(&self, base: &OriginRequest, tls: bool) -> OriginRequest {
        let mut hop = OriginRequest {
            method: base.method.clone(),
            uri: base.uri.clone(),
            headers: base.headers.clone(),
            body: None,
            interim: base.interim.clone(),
            tries: base.tries.clone(),
        };
        let target = hop.uri.path_and_query().map_or("/", |p| p.as_str());
        let signed = self.key.sign(
            self.node(),
            self.clock.now(),
            tls,
            hop.method.as_str(),
            target,
        );
        if let Ok(v) = HeaderValue::from_str(&signed) {
            hop.headers.insert(FIELD.clone(), v);
        }
        if let Some(at) = self.bus.as_ref().and_then(|b| b.position(self.node())) {
            if let Ok(v) = HeaderValue::from_str(&at.to_string()) {
                hop.headers.insert(LOG_FIELD.clone(), v);
            }
        }
        hop
    }

    /// Sends `hop` to member `m`; a member found frozen by its probes
    /// while this waits for the response head gives the request up
    /// (unless it is the `last` choice).
    async fn ask(
        &self,
        m: &Member,
        hop: OriginRequest,
        last: bool,
    ) -> Result<Response<OriginBody>, ProxyError> {
        let peer = m
            .peer
            .as_ref()
            .expect("invariant: only other members are asked");
        let mut down = m.down.subscribe();
        tokio::select! {
            r = peer.send(hop) => r,
            _ = down.wait_for(|d| *d), if !last => Err(ProxyError::origin(
                ErrorKind::ConnectTimeout,
                format!("cluster member {}: does not answer probes", m.name),
            )),
        }
    }

    /// Sends a fill's request for `key` (asked over TLS if `tls`): to the
    /// key's owner when that is another member, else (this node owns it)
    /// to the previous owner while ramping up, to the parent tier, or to
    /// `origin`; on to the next choice when the owner cannot be reached.
    /// See the module docs.
    pub async fn send(
        &self,
        key: &[u8],
        tls: bool,
        req: OriginRequest,
        origin: &Upstream,
    ) -> Result<(Response<OriginBody>, Source), ProxyError> {
        self.send_after(key, tls, req, origin, None).await
    }

    /// [`Cluster::send`], passing over member `skip`: the one whose answer
    /// broke off when a fill asks for the rest (see `fill::resume`). An
    /// owner's answer carries [`Served`], the member that sent it.
    pub async fn send_after(
        &self,
        key: &[u8],
        tls: bool,
        req: OriginRequest,
        origin: &Upstream,
        skip: Option<u16>,
    ) -> Result<(Response<OriginBody>, Source), ProxyError> {
        let view = self.view.load_full();
        let choices = ring::choices(&view.slots, key, view.ranked());
        for (n, &i) in choices.iter().enumerate() {
            if skip == Some(view.members[i].id) {
                continue;
            }
            if i == view.me {
                if n == 0 {
                    if let Some(&prev) = choices.get(1) {
                        if let Some(resp) = self.ask_previous(&view.members[prev], tls, &req).await
                        {
                            return Ok((resp, Source::Previous));
                        }
                    }
                }
                return self.beyond(key, tls, req, origin).await;
            }
            let last = n + 1 == choices.len();
            let hop = self.hop(&req, tls);
            self.counters.inc(&self.counters.cluster_forwarded);
            match self.ask(&view.members[i], hop, last).await {
                Ok(mut resp) => {
                    resp.extensions_mut().insert(Served(view.members[i].id));
                    let keep = self.near.record(key);
                    return Ok((resp, Source::Owner { keep }));
                }
                Err(e) if !last && unreachable(&e) => {
                    self.counters.inc(&self.counters.cluster_forward_retries);
                    tracing::info!(owner = %view.members[i].name, error = %e, "owner unreachable; next choice");
                }
                Err(e) => return Err(e),
            }
        }
        // Only reached when every choice was an unreachable peer.
        self.beyond(key, tls, req, origin).await
    }

    /// A miss this node owns: to the parent tier's member for `key` (the
    /// next one when it cannot be reached), else to the origin.
    pub async fn beyond(
        &self,
        key: &[u8],
        tls: bool,
        req: OriginRequest,
        origin: &Upstream,
    ) -> Result<(Response<OriginBody>, Source), ProxyError> {
        if let Some((tier, parents)) = &self.tier {
            let choices = ring::choices(&parents.slots, key, parents.ranked());
            for &i in &choices {
                let hop = self.hop(&req, tls);
                let p = &parents.members[i];
                match self.ask(p, hop, true).await {
                    Ok(resp) => {
                        self.counters.inc(&self.counters.cluster_parent_fills);
                        return Ok((resp, Source::Parent));
                    }
                    Err(e) if unreachable(&e) => {
                        self.counters.inc(&self.counters.cluster_parent_retries);
                        tracing::info!(tier = %tier, parent = %p.name, error = %e, "parent unreachable; next parent or the origin");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((origin.send(req).await?, Source::Origin))
    }
}

/// Makes members: their connections, with the cluster's timeouts.
#[derive(Debug)]
struct Dialer {
    node: Arc<str>,
    connect_timeout: Duration,
    read_timeout: Duration,
    counters: Arc<Counters>,
    clock: Arc<dyn hoard_policy::clock::Clock>,
}

impl Dialer {
    /// A member named `name` at `addr` (connections to it, unless it is
    /// this node).
    fn member(&self, names: &Names, name: &str, addr: SocketAddr, weight: f64) -> Member {
        let (id, name) = names.id(name);
        let peer = (*name != *self.node).then(|| {
            let mut u = UpstreamConfig::new(
                &format!("cluster member {name}"),
                vec![ServerAddr::http(addr.to_string())],
            );
            u.connect_timeout = self.connect_timeout;
            u.read_timeout = self.read_timeout;
            // Judged by probes and connections: an owner passes its
            // origin's 502-504 on, and an only-if-cached miss is a 504.
            Upstream::new(u, self.counters.clone(), self.clock.clone()).without_status_health()
        });
        Member::new(id, name, addr, weight, peer)
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
