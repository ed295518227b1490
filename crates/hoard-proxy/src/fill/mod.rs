//! The fill engine: one origin fetch per key, shared by every request that
//! wants it, owned by the cache rather than by any client.
//!
//! ## Model
//!
//! [`FillEngine`] sits below the pipeline. It owns the in-flight table
//! ([`coalesce`]), the hit-for-pass marks ([`hfp`]) and the fill tasks;
//! it stores through the [`hoard_store::Store`] and never reaches back
//! into the pipeline. A fill ([`FillJob`]) carries everything it needs,
//! owned: an `Arc` of its route and of its upstream, the key, the request
//! to send. It runs as a task of its own in steps (`run.rs`; each step in
//! a file of its own: `send`, `answer`, `decide`, `stream`, `keep`, `coded`):
//!
//! ```text
//! send ─► revalidated? ─(304)─► merge, update store, publish Refreshed
//!            │         └(5xx)─► keep the stored copy, publish Uncacheable
//!            ▼
//!         completed? ─(206 that completes a stored partial copy)─► a 200 whose body starts with the copy
//!            ▼
//!         decide ─(not storable)─► mark hit-for-pass, publish Uncacheable
//!            ▼
//!         publish Streaming (BusyBody) ─► open a disk writer (placement)
//!            ▼
//!         read body (busy body, disk, spill) ─► store, leave the table, end
//! ```
//!
//! ## Cancellation
//!
//! * A client that goes away (including the one whose request started the
//!   fill) only drops its own reader; the fill goes on for the others and for
//!   the cache.
//! * A fill task that is cancelled or panics drops its `FillPermit` (waiters
//!   see `Dangling` and go to the origin themselves), its `BusyWriter`
//!   (readers see an error, never a silent end) and its `DiskWriter` (the
//!   temporary file is removed, its reservation released).
//! * A source (origin server, cluster owner) dropping mid-body: the rest
//!   is asked of the next choice with `Range` and `If-Range` (`resume.rs`);
//!   when that cannot be had, the busy body is aborted: every reader's
//!   response is aborted (connection closed / h2 stream reset), nothing is
//!   stored.
//!
//! ## Background refresh
//!
//! Stale-while-revalidate starts a fill that nobody waits for
//! (`FillEngine::spawn_refresh`): the stale copy is served at once and the
//! refresh never delays any response, including later ones on the same
//! keep-alive connection.
//!
//! ## Shutdown
//!
//! Fill tasks are tracked. [`FillEngine::shutdown`] lets the running ones
//! finish (they belong to the cache: a completed fill is a stored object)
//! for up to the shutdown timeout, then cancels the rest as above.

pub mod coalesce;
pub mod hfp;

mod answer;
mod body;
mod coded;
mod decide;
mod filters;
mod keep;
mod resume;
mod revalidate;
mod run;
mod send;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use hoard_policy::cache_control::CacheControl;
use hoard_policy::clock::Clock;
use hoard_policy::key::CacheKey;
use hoard_store::object::StoredObject;
use hoard_store::Store;
use http::HeaderMap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::via::Via;
use coalesce::{Coalescer, FillPermit};
use hoard_config::{CacheConfig, RouteConfig};
use hoard_metrics::counters::Counters;
use hoard_origin::{OriginRequest, Upstream};

/// Everything a fill needs, owned: it outlives the request that started it.
#[derive(Debug)]
pub struct FillJob {
    /// The route the request matched (its policy, zone, hit-for-pass).
    pub route: Arc<RouteConfig>,
    /// The origin group to fetch from.
    pub upstream: Arc<Upstream>,
    /// The primary key.
    pub key: CacheKey,
    /// The request path (for placement rules).
    pub path: String,
    /// The request to send (GET; validators added when revalidating); taken when sent.
    pub oreq: Option<OriginRequest>,
    /// The leading request's fields (they select the stored variant).
    pub request_headers: HeaderMap,
    /// The leading request's directives.
    pub req_cc: CacheControl,
    /// The stored object being revalidated, if any.
    pub stale: Option<Arc<StoredObject>>,
    /// A request waits for this fill as its leader (false for background refreshes).
    pub has_leader: bool,
    /// For a slice fill: the bytes asked for, and the whole object's key.
    pub slice: Option<SliceFill>,
    /// Held while the fill runs (a prefetch's share of the prefetch bound).
    pub hold: Option<tokio::sync::OwnedSemaphorePermit>,
    /// How the fill relates to a stored partial copy, if it does.
    pub partial: Option<PartialFill>,
    /// In a cluster: `Some(the client's scheme is https)` when the fill
    /// may go to its key's owner; `None` for a request from a peer (one
    /// hop at most) or outside a cluster.
    pub cluster_tls: Option<bool>,
    /// In a cluster with a parent tier: `Some(https)` for a request from a
    /// peer, whose fill goes to the tier (not to another member).
    pub tier_tls: Option<bool>,
    /// In a cluster, what the owner is chosen by when the route sets
    /// `cluster_key` (else the cache key's text).
    pub route_key: Option<Arc<str>>,
}

/// A fill that stores or completes an object's partial copy: a 206 kept
/// under [`partial_key`] of the object's key (RFC 9111 §3.3, §3.4; see
/// `pipeline::partial`).
#[derive(Debug)]
pub enum PartialFill {
    /// The client's `Range` was forwarded (route `cold_range = "forward"`):
    /// a 206 is stored as the partial copy, a 200 as the whole object under
    /// `whole`.
    Forwarded {
        /// The whole object's key.
        whole: CacheKey,
    },
    /// The rest of a stored partial copy holding bytes `0..have` of `total`
    /// was asked for with `Range: bytes=have-`: a 206 for exactly that,
    /// of the same length and validator, is joined to the copy into the
    /// whole object (a 200). Any other 206 means another version: the copy
    /// is dropped and `plain` (the request without `Range`) is sent.
    Completing {
        /// The stored partial copy.
        stored: Arc<StoredObject>,
        /// Bytes it holds, from 0.
        have: u64,
        /// The object's length.
        total: u64,
        /// The request without `Range` and `If-Range`.
        plain: Box<OriginRequest>,
    },
}

/// The key of an object's partial copy.
pub fn partial_key(whole: &CacheKey) -> CacheKey {
    let text = format!("{}{}", whole.text, hoard_policy::key::PARTIAL_MARK);
    CacheKey {
        digest: hoard_policy::key::Digest::of(text.as_bytes()),
        text,
    }
}

/// The part of an object a slice fill asks for with `Range` (slice mode,
/// see `pipeline::slice`).
#[derive(Debug, Clone)]
pub struct SliceFill {
    /// First byte of the slice.
    pub start: u64,
    /// One past its last byte, if the object is that long.
    pub end: u64,
    /// The key of the whole object: an origin that ignores `Range` answers
    /// with it, and it is stored there.
    pub whole: CacheKey,
}

/// The fill engine. See the module docs.
#[derive(Debug)]
pub struct FillEngine {
    pub(crate) store: Arc<Store>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The in-flight table.
    pub(crate) coalescer: Arc<Coalescer>,
    /// Keys that recently proved uncacheable.
    pub(crate) hfp: hfp::HitForPass,
    /// Zones and placement rules.
    cache: CacheConfig,
    /// The cluster, if this node is in one: fills go to their key's owner.
    pub(crate) cluster: Option<Arc<hoard_cluster::Cluster>>,
    via: Via,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl FillEngine {
    /// An engine storing into `store`.
    pub fn new(
        store: Arc<Store>,
        counters: Arc<Counters>,
        clock: Arc<dyn Clock>,
        cache: CacheConfig,
        via: Via,
    ) -> FillEngine {
        FillEngine {
            store,
            counters,
            clock,
            coalescer: Arc::new(Coalescer::new(cache.max_fills)),
            hfp: hfp::HitForPass::default(),
            cache,
            via,
            cluster: None,
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
        }
    }

    /// Runs a fill as a tracked task of its own.
    pub(crate) fn start(self: &Arc<Self>, job: FillJob, permit: FillPermit) {
        let me = self.clone();
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            let counters = me.counters.clone();
            tokio::select! {
                biased;
                () = me.run(job, permit) => {}
                () = cancel.cancelled() => {
                    // Dropping the fill future dropped its permit, busy
                    // writer and disk writer: waiters and readers are told.
                    counters.inc(&counters.fills_cancelled);
                }
            }
        });
    }

    /// Starts a background refresh of a stale object unless a fill for its
    /// key is already in flight. Returns true when one was started.
    pub(crate) fn spawn_refresh(self: &Arc<Self>, job: FillJob, max_age: Duration) -> bool {
        let Some(permit) = self
            .coalescer
            .try_lead(job.key.digest, &job.key.text, max_age)
        else {
            return false;
        };
        self.counters.inc(&self.counters.background_refreshes);
        self.start(job, permit);
        true
    }

    /// Fills running now.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Lets running fills finish for up to `timeout`, then cancels the rest.
    pub async fn shutdown(&self, timeout: Duration) {
        self.tasks.close();
        if tokio::time::timeout(timeout, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                fills = self.tasks.len(),
                "fills still running after the shutdown timeout; cancelling them"
            );
            self.cancel.cancel();
            self.tasks.wait().await;
        }
    }
}
