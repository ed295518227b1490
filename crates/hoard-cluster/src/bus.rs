//! The invalidation log: purges as entries of a Redis/Valkey stream that
//! every member reads from its own position, applies in order and
//! acknowledges.
//!
//! ## Model
//!
//! Two streams per cluster, named from `[cluster.bus] prefix`:
//! `PREFIX:purges` (one entry per purge: the selector as the taking node
//! resolved it, `soft`, the node) and `PREFIX:acks` (one entry per batch a
//! member applied: its name and the last entry id applied). The hash
//! `PREFIX:applied` keeps each member's position for `/status` after a
//! restart.
//! `PREFIX:value:KEY` holds values members share beside the log (the
//! ACME certificates, their private keys sealed: `acme::share`).
//!
//! * **Purging** ([`Bus::publish`]): the taking node applies the purge
//!   itself, `XADD`s it (trimming entries older than `max_age`), and waits
//!   until every other member's acknowledged position reaches the entry, or
//!   `purge_timeout`. If the bus is unreachable the purge goes over HTTP
//!   as without a bus (`cluster::purge`), and the answer says so.
//! * **Reading** (`run`): one task per node blocks on `XREAD` over both
//!   streams from its cursor: purge entries of other nodes are applied
//!   (`BusNode::purge`, the pipeline's purge), then the cursor is persisted (a file in the first
//!   disk zone's directory: a warm restart replays what it missed) and
//!   acknowledged; ack entries move the members' positions, which waiting
//!   purges watch.
//! * **Unsure** ([`Bus::unsure`]): until this node has read the log to its
//!   end (after a start, and after losing the bus for longer than `grace`),
//!   no stored object is served as fresh: each is revalidated, since a
//!   purge this node has not seen may select it (`on_bus_loss = "serve"`
//!   turns this off). A cursor the stream no longer reaches (trimmed past
//!   it, or the stream lost with its Redis) is a generation bump: what was
//!   stored before is fenced for good ([`Cluster::fence`]).
//!
//! ## Locking
//!
//! None held across awaits: positions are `watch` channels, flags atomics.
//! Blocking reads use a connection of their own (a blocking command holds
//! a multiplexed connection for everyone on it), with a response timeout
//! above the block time (the crate's default of 500 ms would cut them).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hoard_store::catalog::Selector;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::AsyncConnectionConfig;

use super::Cluster;
use hoard_config::cluster::{BusConfig, OnBusLoss};
use hoard_metrics::counters::Counters;

/// How long one `XREAD` blocks.
const BLOCK: Duration = Duration::from_secs(1);
/// Entries read at once.
const BATCH: usize = 256;
/// Pause between attempts to reach an unreachable bus.
const RETRY: Duration = Duration::from_millis(100);
/// Connecting and non-blocking commands.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Ack entries kept (approximately).
const ACKS_KEPT: usize = 10_000;
/// The cursor's file name in the first zone's directory.
const CURSOR_FILE: &str = "cluster-log-cursor";

/// A stream entry id, `MS-SEQ`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct EntryId(pub u64, pub u64);

impl EntryId {
    /// Parses `MS-SEQ` (or `MS`).
    pub fn parse(s: &str) -> Option<EntryId> {
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// The bus as this node sees it. See the module docs.
#[derive(Debug)]
pub struct Bus {
    client: redis::Client,
    purges: String,
    acks: String,
    applied_hash: String,
    /// Membership heartbeats (`[cluster.members] source = "redis"`).
    members_hash: String,
    max_age: Duration,
    on_loss: OnBusLoss,
    /// Keys of values members share beside the log ([`Bus::put_value`]).
    values_prefix: String,
    /// Where the cursor is persisted (none without disk zones).
    cursor_file: Option<PathBuf>,
    /// For commands that do not block (XADD, acks), once connected.
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    /// Each member's acknowledged position (this node's included).
    positions: tokio::sync::watch::Sender<HashMap<String, EntryId>>,
    /// Not caught up with the log (see the module docs).
    unsure: AtomicBool,
    /// The last `XREAD` (or connection) succeeded.
    connected: AtomicBool,
    /// Since when (Unix ms) this node has been unsure (0: it is not, or
    /// the time is not known yet); for `cluster_fenced_ms`.
    unsure_since_ms: std::sync::atomic::AtomicU64,
    /// The ids of the last [`RECENT`] purge entries read, oldest first:
    /// how many entries a member is behind ([`Bus::entries_after`]).
    recent: parking_lot::Mutex<std::collections::VecDeque<EntryId>>,
}

/// Purge entry ids kept to count members' lag in entries.
const RECENT: usize = 10_000;

/// What [`Bus::publish`] found: the entry, and each member's state.
#[derive(Debug)]
pub struct Published {
    /// The entry's id.
    pub id: EntryId,
    /// Members whose position reached the entry in time.
    pub acked: Vec<String>,
}

impl Bus {
    /// The bus of `cfg` (nothing connected yet); `zone_dir` holds the
    /// cursor file.
    ///
    /// # Errors
    /// When the URL is not a Redis URL.
    pub fn new(cfg: &BusConfig, zone_dir: Option<PathBuf>) -> Result<Bus, String> {
        let client = redis::Client::open(cfg.url.as_str()).map_err(|e| e.to_string())?;
        Ok(Bus {
            client,
            purges: format!("{}:purges", cfg.prefix),
            acks: format!("{}:acks", cfg.prefix),
            applied_hash: format!("{}:applied", cfg.prefix),
            members_hash: format!("{}:members", cfg.prefix),
            values_prefix: format!("{}:value:", cfg.prefix),
            max_age: cfg.max_age,
            on_loss: cfg.on_loss,
            cursor_file: zone_dir.map(|d| d.join(CURSOR_FILE)),
            conn: tokio::sync::Mutex::new(None),
            positions: tokio::sync::watch::Sender::new(HashMap::new()),
            unsure: AtomicBool::new(cfg.on_loss == OnBusLoss::Revalidate),
            connected: AtomicBool::new(false),
            unsure_since_ms: std::sync::atomic::AtomicU64::new(0),
            recent: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// True while stored objects must be revalidated before they are
    /// served as fresh (not caught up with the log).
    pub fn unsure(&self) -> bool {
        self.unsure.load(Ordering::Relaxed)
    }

    /// True when the last read of the log succeeded.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Member `node`'s acknowledged position.
    pub fn position(&self, node: &str) -> Option<EntryId> {
        self.positions.borrow().get(node).copied()
    }

    /// True once `node`'s position reaches `at`, waiting up to `wait`.
    pub async fn reached(&self, node: &str, at: EntryId, wait: Duration) -> bool {
        let mut rx = self.positions.subscribe();
        let reached = |m: &HashMap<String, EntryId>| m.get(node).is_some_and(|p| *p >= at);
        let ok = tokio::time::timeout(wait, rx.wait_for(reached))
            .await
            .is_ok_and(|r| r.is_ok());
        ok
    }

    /// How many of the purge entries this node has read come after `at`
    /// (among the last `RECENT`).
    pub fn entries_after(&self, at: EntryId) -> u64 {
        let recent = self.recent.lock();
        (recent.len() - recent.partition_point(|id| *id <= at)) as u64
    }

    /// Each member's acknowledged position.
    pub fn positions(&self) -> HashMap<String, EntryId> {
        self.positions.borrow().clone()
    }

    fn config(timeout: Duration) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(timeout))
    }

    /// The shared connection for commands that do not block.
    async fn conn(&self) -> redis::RedisResult<MultiplexedConnection> {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&Self::config(COMMAND_TIMEOUT))
            .await?;
        *held = Some(c.clone());
        Ok(c)
    }

    async fn forget_conn(&self) {
        *self.conn.lock().await = None;
    }

    /// Records that `node` at `addr` is alive at `now_ms`
    /// (membership by heartbeats, see `cluster::discover`).
    ///
    /// # Errors
    /// When the bus cannot be reached.
    pub async fn heartbeat(
        &self,
        node: &str,
        addr: std::net::SocketAddr,
        now_ms: u64,
    ) -> redis::RedisResult<()> {
        let mut c = match self.conn().await {
            Ok(c) => c,
            Err(e) => {
                self.forget_conn().await;
                return Err(e);
            }
        };
        redis::cmd("HSET")
            .arg(&self.members_hash)
            .arg(node)
            .arg(format!("{addr} {now_ms}"))
            .query_async::<()>(&mut c)
            .await
    }

    /// The members whose last heartbeat is within `ttl` of `now_ms`: name
    /// and address; and every name listed at all (a member whose entry is
    /// missing, not old, may be one the bus lost). Entries ten times older
    /// are removed.
    ///
    /// # Errors
    /// When the bus cannot be reached.
    pub async fn members(
        &self,
        now_ms: u64,
        ttl: Duration,
    ) -> redis::RedisResult<(Vec<(String, std::net::SocketAddr)>, HashSet<String>)> {
        let mut c = self.conn().await?;
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&self.members_hash)
            .query_async(&mut c)
            .await?;
        let ttl = ttl.as_millis() as u64;
        let listed: HashSet<String> = all.keys().cloned().collect();
        let mut alive = Vec::new();
        let mut dead = Vec::new();
        for (node, v) in all {
            let parsed = v.split_once(' ').and_then(|(a, ms)| {
                Some((
                    a.parse::<std::net::SocketAddr>().ok()?,
                    ms.parse::<u64>().ok()?,
                ))
            });
            match parsed {
                Some((addr, ms)) if now_ms.saturating_sub(ms) <= ttl => alive.push((node, addr)),
                Some((_, ms)) if now_ms.saturating_sub(ms) <= 10 * ttl => {}
                _ => dead.push(node),
            }
        }
        if !dead.is_empty() {
            redis::cmd("HDEL")
                .arg(&self.members_hash)
                .arg(&dead)
                .query_async::<()>(&mut c)
                .await?;
        }
        Ok((alive, listed))
    }

    /// Keeps `value` under `key` for every member (`PREFIX:value:KEY`):
    /// what one member made and the others take without asking it, such
    /// as an ACME certificate. The last write wins.
    ///
    /// # Errors
    /// When the bus cannot be reached.
    pub async fn put_value(&self, key: &str, value: &[u8]) -> redis::RedisResult<()> {
        let mut c = self.conn().await?;
        redis::cmd("SET")
            .arg(format!("{}{key}", self.values_prefix))
            .arg(value)
            .query_async::<()>(&mut c)
            .await
    }

    /// The value kept under `key`, if any (see [`Bus::put_value`]).
    ///
    /// # Errors
    /// When the bus cannot be reached.
    pub async fn value(&self, key: &str) -> redis::RedisResult<Option<Vec<u8>>> {
        let mut c = self.conn().await?;
        redis::cmd("GET")
            .arg(format!("{}{key}", self.values_prefix))
            .query_async(&mut c)
            .await
    }

    /// Appends a purge (already applied here) to the log and waits until
    /// every one of `others` has acknowledged it, or `timeout`.
    ///
    /// # Errors
    /// When the bus cannot be reached: the caller fans the purge out over
    /// HTTP instead.
    pub async fn publish(
        &self,
        node: &str,
        selector: &Selector,
        soft: bool,
        others: &[String],
        now_ms: u64,
        timeout: Duration,
    ) -> Result<Published, String> {
        let body = crate::purge_message::encode(selector, soft).to_string();
        let min_id = now_ms.saturating_sub(self.max_age.as_millis() as u64);
        let xadd = async {
            let mut c = self.conn().await?;
            redis::cmd("XADD")
                .arg(&self.purges)
                .arg("MINID")
                .arg("~")
                .arg(min_id)
                .arg("*")
                .arg("purge")
                .arg(&body)
                .arg("from")
                .arg(node)
                .query_async::<String>(&mut c)
                .await
        };
        let id = match tokio::time::timeout(COMMAND_TIMEOUT, xadd).await {
            Ok(Ok(id)) => EntryId::parse(&id).ok_or_else(|| format!("entry id {id:?}"))?,
            Ok(Err(e)) => {
                self.forget_conn().await;
                return Err(e.to_string());
            }
            Err(_) => {
                self.forget_conn().await;
                return Err("no answer from the bus".into());
            }
        };
        let mut rx = self.positions.subscribe();
        let all = |m: &HashMap<String, EntryId>| {
            others.iter().all(|o| m.get(o).is_some_and(|p| *p >= id))
        };
        let _ = tokio::time::timeout(timeout, rx.wait_for(all)).await;
        let positions = self.positions.borrow();
        let acked = others
            .iter()
            .filter(|o| positions.get(*o).is_some_and(|p| *p >= id))
            .cloned()
            .collect();
        Ok(Published { id, acked })
    }

    fn load_cursor(&self) -> Option<EntryId> {
        let f = self.cursor_file.as_ref()?;
        EntryId::parse(std::fs::read_to_string(f).ok()?.trim())
    }

    fn save_cursor(&self, id: EntryId) {
        let Some(f) = &self.cursor_file else { return };
        let tmp = f.with_extension("tmp");
        let written = std::fs::write(&tmp, id.to_string()).and_then(|()| std::fs::rename(&tmp, f));
        if let Err(e) = written {
            tracing::warn!(file = %f.display(), error = %e, "cluster log cursor not persisted");
        }
    }

    /// Where to read from after (re)connecting, and whether entries this
    /// node never read may be gone (a generation bump).
    async fn resume_point(
        &self,
        c: &mut MultiplexedConnection,
        cursor: Option<EntryId>,
        warm: bool,
    ) -> redis::RedisResult<(EntryId, bool)> {
        let info: redis::RedisResult<HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&self.purges)
            .query_async(c)
            .await;
        let id_of = |m: &HashMap<String, redis::Value>, k: &str| {
            m.get(k)
                .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
                .and_then(|s| EntryId::parse(&s))
        };
        let int_of = |m: &HashMap<String, redis::Value>, k: &str| {
            m.get(k)
                .and_then(|v| redis::from_redis_value_ref::<u64>(v).ok())
        };
        let (last, trimmed) = match info {
            Ok(m) => (
                id_of(&m, "last-generated-id"),
                // Entries ever added against those left (Redis 7): equal
                // when nothing was ever trimmed or deleted.
                int_of(&m, "entries-added") != int_of(&m, "length"),
            ),
            // No stream yet (or lost with its Redis).
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => (None, false),
            Err(e) => return Err(e),
        };
        let first = if trimmed {
            let head: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&self.purges)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async(c)
                .await?;
            head.ids.first().and_then(|e| EntryId::parse(&e.id))
        } else {
            None
        };
        Ok(match cursor {
            // Never read here: start at the end; what a warm store holds
            // predates any position, so it is fenced.
            None => (last.unwrap_or_default(), warm),
            Some(c) => {
                let lost = match last {
                    // The stream is behind this node: its history is gone.
                    None => c != EntryId::default(),
                    Some(l) if l < c => true,
                    Some(l) if l == c => false,
                    // Entries were added after the cursor; some were
                    // trimmed, and the head is past the cursor: what lay
                    // between may be gone unread (when the head is the
                    // very next entry this costs a revalidation, never a
                    // stale answer).
                    Some(l) => trimmed && first.map_or(l > c, |f| f > c),
                };
                (c, lost)
            }
        })
    }
}

/// What the reader applies the log to: the node's pipeline, named through
/// this trait so that the cluster imports nothing above it.
pub trait BusNode: Send + Sync + 'static {
    /// The node's cluster (`None`: not clustered, the reader ends).
    fn cluster(&self) -> Option<&Arc<Cluster>>;
    /// The node's counters.
    fn counters(&self) -> &Counters;
    /// The node keeps objects on disk across restarts (a lost position in
    /// the log then fences what it stored).
    fn warm(&self) -> bool;
    /// Applies a purge from the log (another node's), as this node's own.
    fn purge(
        &self,
        selector: &Selector,
        soft: bool,
        source: &'static str,
    ) -> impl std::future::Future<Output = usize> + Send;
}

/// Starts the reader (on the current runtime). It holds the node
/// weakly, and ends with it or when `shutdown` turns true.
pub fn start<N: BusNode>(pipeline: &Arc<N>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let reader = run(Arc::downgrade(pipeline));
    tokio::spawn(async move {
        tokio::select! {
            () = reader => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    });
}

/// The reader. See the module docs.
async fn run<N: BusNode>(pipeline: Weak<N>) {
    let mut cursor = {
        let Some(p) = pipeline.upgrade() else { return };
        let Some(bus) = p.cluster().and_then(|c| c.bus.as_ref()) else {
            return;
        };
        bus.load_cursor()
    };
    if let Some(c) = pipeline.upgrade().and_then(|p| p.cluster().cloned()) {
        if let Some(bus) = c.bus.as_ref().filter(|b| b.unsure()) {
            bus.unsure_since_ms.store(c.clock_ms(), Ordering::Relaxed);
        }
    }
    let mut acks_from = EntryId::default();
    let mut last_ok = None;
    loop {
        let Some(p) = pipeline.upgrade() else { return };
        let Some(cluster) = p.cluster().cloned() else {
            return;
        };
        let Some(bus) = cluster.bus.as_ref() else {
            return;
        };
        match read_some(&p, &cluster, bus, &mut cursor, &mut acks_from, &mut last_ok).await {
            Ok(()) => {}
            Err(e) => {
                bus.connected.store(false, Ordering::Relaxed);
                // The shared connection may be the broken one.
                bus.forget_conn().await;
                let now = cluster.clock.now();
                let since = *last_ok.get_or_insert(now);
                let lost_for = now.duration_since(since).unwrap_or_default();
                if bus.on_loss == OnBusLoss::Revalidate
                    && lost_for > cluster.grace
                    && !bus.unsure.swap(true, Ordering::Relaxed)
                {
                    p.counters().inc(&p.counters().cluster_bus_lost);
                    bus.unsure_since_ms
                        .store(cluster.clock_ms(), Ordering::Relaxed);
                    tracing::warn!(error = %e, lost_ms = lost_for.as_millis() as u64, "cluster bus lost past the grace period: stored objects are revalidated until the log is read again");
                }
                drop(p);
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// One connection's reads, until it fails.
async fn read_some<N: BusNode>(
    p: &Arc<N>,
    cluster: &Cluster,
    bus: &Bus,
    cursor: &mut Option<EntryId>,
    acks_from: &mut EntryId,
    last_ok: &mut Option<std::time::SystemTime>,
) -> redis::RedisResult<()> {
    let mut blocking = bus
        .client
        .get_multiplexed_async_connection_with_config(&Bus::config(BLOCK + COMMAND_TIMEOUT))
        .await?;
    let warm = p.warm();
    let (from, lost) = bus.resume_point(&mut blocking, *cursor, warm).await?;
    if lost {
        p.counters().inc(&p.counters().cluster_bus_generation_bumps);
        tracing::warn!(cursor = ?cursor, "this node's position in the cluster log is unknown or no longer in the log: what it stored before is revalidated before it is served");
        cluster.fence(cluster.clock.now());
    }
    if *cursor != Some(from) {
        // Recorded at once: a node that stops before it reads any entry
        // replays from here when it starts again.
        bus.save_cursor(from);
    }
    *cursor = Some(from);
    // Where this node starts: it has nothing older to apply.
    acknowledge(bus, cluster.node(), from).await?;
    if *acks_from == EntryId::default() {
        // Members' positions as last recorded, then the acks from now on.
        let mut c = bus.conn().await?;
        let known: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&bus.applied_hash)
            .query_async(&mut c)
            .await?;
        bus.positions.send_modify(|m| {
            for (node, id) in known {
                if let Some(id) = EntryId::parse(&id) {
                    m.insert(node, id);
                }
            }
        });
        *acks_from = EntryId(cluster.clock_ms().saturating_sub(1), 0);
    }
    loop {
        let mut xread = redis::cmd("XREAD");
        xread.arg("COUNT").arg(BATCH);
        // Catching up does not wait for new entries: it reads what is there.
        if !bus.unsure() {
            xread.arg("BLOCK").arg(BLOCK.as_millis() as u64);
        }
        let reply: Option<StreamReadReply> = xread
            .arg("STREAMS")
            .arg(&bus.purges)
            .arg(&bus.acks)
            .arg(cursor.unwrap_or_default().to_string())
            .arg(acks_from.to_string())
            .query_async(&mut blocking)
            .await?;
        bus.connected.store(true, Ordering::Relaxed);
        *last_ok = Some(cluster.clock.now());
        let mut applied = 0;
        for key in reply.map(|r| r.keys).unwrap_or_default() {
            if key.key == bus.purges {
                applied = key.ids.len();
                for entry in &key.ids {
                    let Some(id) = EntryId::parse(&entry.id) else {
                        continue;
                    };
                    let field = |k: &str| text_field(entry, k);
                    let from_me = field("from").as_deref() == Some(cluster.node());
                    if !from_me {
                        match field("purge")
                            .and_then(|b| crate::purge_message::decode(b.as_bytes()))
                        {
                            Some((selector, soft)) => {
                                p.purge(&selector, soft, "cluster log").await;
                            }
                            None => {
                                tracing::warn!(entry = %id, "cluster log entry is not a purge; skipped");
                            }
                        }
                    }
                    {
                        let mut recent = bus.recent.lock();
                        if recent.back().is_none_or(|last| *last < id) {
                            recent.push_back(id);
                        }
                        if recent.len() > RECENT {
                            recent.pop_front();
                        }
                    }
                    p.counters().inc(&p.counters().cluster_bus_applied);
                    if bus.unsure() {
                        p.counters().inc(&p.counters().cluster_bus_replayed);
                    }
                    *cursor = Some(id);
                }
            } else if key.key == bus.acks {
                bus.positions.send_modify(|m| {
                    for entry in &key.ids {
                        if let Some(id) = EntryId::parse(&entry.id) {
                            *acks_from = (*acks_from).max(id);
                        }
                        let field = |k: &str| text_field(entry, k);
                        if let (Some(node), Some(at)) =
                            (field("node"), field("at").and_then(|a| EntryId::parse(&a)))
                        {
                            let e = m.entry(node).or_default();
                            *e = (*e).max(at);
                        }
                    }
                });
            }
        }
        if applied > 0 {
            let at = cursor.unwrap_or_default();
            bus.save_cursor(at);
            acknowledge(bus, cluster.node(), at).await?;
        }
        if applied < BATCH && bus.unsure.swap(false, Ordering::Relaxed) {
            p.counters().inc(&p.counters().cluster_bus_caught_up);
            let since = bus.unsure_since_ms.swap(0, Ordering::Relaxed);
            if since != 0 {
                p.counters().add(
                    &p.counters().cluster_fenced_ms,
                    cluster.clock_ms().saturating_sub(since),
                );
            }
            tracing::info!(at = %cursor.unwrap_or_default(), "cluster log read to its end: stored objects are served again");
        }
    }
}

/// A stream entry's field as text.
fn text_field(entry: &redis::streams::StreamId, k: &str) -> Option<String> {
    entry
        .map
        .get(k)
        .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
}

/// Records that `node` has applied the log up to `at` (an ack entry, its
/// hash field, and the local map).
async fn acknowledge(bus: &Bus, node: &str, at: EntryId) -> redis::RedisResult<()> {
    let mut c = bus.conn().await?;
    redis::pipe()
        .cmd("XADD")
        .arg(&bus.acks)
        .arg("MAXLEN")
        .arg("~")
        .arg(ACKS_KEPT)
        .arg("*")
        .arg("node")
        .arg(node)
        .arg("at")
        .arg(at.to_string())
        .ignore()
        .cmd("HSET")
        .arg(&bus.applied_hash)
        .arg(node)
        .arg(at.to_string())
        .ignore()
        .query_async::<()>(&mut c)
        .await?;
    bus.positions.send_modify(|m| {
        let p = m.entry(node.to_string()).or_default();
        *p = (*p).max(at);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_parse_and_order() {
        assert_eq!(
            EntryId::parse("1700000000000-3"),
            Some(EntryId(1_700_000_000_000, 3))
        );
        assert_eq!(EntryId::parse("12"), Some(EntryId(12, 0)));
        assert_eq!(EntryId::parse("x-1"), None);
        assert!(EntryId(5, 0) > EntryId(4, 9));
        assert!(EntryId(5, 1) > EntryId(5, 0));
        assert_eq!(EntryId(7, 2).to_string(), "7-2");
    }
}
