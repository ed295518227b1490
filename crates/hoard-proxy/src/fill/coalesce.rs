//! The in-flight table: one fill per key, everyone else waits for it.
//!
//! ## Model
//!
//! A [`Slot`] is the meeting point of one fill and its waiters. The first
//! request that misses a key creates the slot and receives a [`FillPermit`]
//! (it *leads*); later requests for the same key receive the slot (they
//! *follow*). The fill publishes exactly one [`Outcome`] into the slot's
//! `watch` channel; every waiter is woken by that event (no timers, no
//! polling) and reads the outcome.
//!
//! ## Lifecycle of a slot
//!
//! | state | how it gets there | what waiters do |
//! |---|---|---|
//! | pending | `join` created it | wait (up to the route's wait timeout) |
//! | `Streaming` | the fill has a storable response head | read the body from byte 0 as it arrives |
//! | `Refreshed` | a revalidation got a 304 | serve the refreshed object |
//! | `Uncacheable` | the response may not be stored | the leader takes the response; followers go to the origin themselves |
//! | `OriginError` | the origin failed before a response head | stale if allowed, else 502/504 |
//! | `Dangling` | the permit was dropped without publishing (task cancelled or panicked) | go to the origin themselves |
//!
//! The slot leaves the table when the fill is over (`FillPermit::done`, or
//! the permit's `Drop`), after the object was stored, so a request either
//! finds the slot or finds the object. A slot older than the fill age limit
//! is replaced by a new one (the old fill goes on for its own waiters).
//!
//! ## Locking
//!
//! The table is sharded; a shard's `parking_lot::Mutex` is held only to look
//! up, insert or remove a slot, never across an await.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hoard_policy::key::Digest;
use hoard_policy::storable::NotStorable;
use hoard_store::busy::BusyBody;
use hoard_store::object::StoredObject;
use http::{HeaderMap, Response, StatusCode};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::ErrorKind;
use crate::upstream::OriginBody;

const SHARDS: usize = 16;

/// The head of a storable response being filled.
#[derive(Debug)]
pub struct FillHead {
    /// Status from the origin.
    pub status: StatusCode,
    /// Response fields for every reader but the leader: as stored (no
    /// `Set-Cookie`, no fields a cache must not keep), `Via` added.
    pub headers: HeaderMap,
    /// The origin's fields as they came (with `Set-Cookie`), for the leader only.
    pub leader_headers: Mutex<Option<HeaderMap>>,
    /// The body, read while written.
    pub busy: Arc<BusyBody>,
    /// The leader's reader, created before the first byte (see [`LeaderClaim`]).
    pub leader_reader: Mutex<Option<hoard_store::busy::BusyReader>>,
    /// The `Vary` names of the response and the variant of the request that led the fill.
    pub vary: hoard_policy::vary::VaryNames,
    /// The leader's variant digest.
    pub variant: Digest,
    /// Freshness left when the head arrived, in seconds (for `Cache-Status`).
    pub ttl: i64,
}

/// What a fill tells its waiters. Names appear in logs and metrics.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A storable response: read its body.
    Streaming(Arc<FillHead>),
    /// A revalidation refreshed the stored object.
    /// (With the 304's `Set-Cookie` fields, for the leader only: never stored.)
    Refreshed(Arc<StoredObject>, Arc<Vec<http::HeaderValue>>),
    /// The response may not be stored.
    Uncacheable(NotStorable, StatusCode),
    /// The origin failed before a response head.
    OriginError(ErrorKind),
    /// The fill ended without an outcome.
    Dangling,
}

impl Outcome {
    /// A short name for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Streaming(_) => "streaming",
            Outcome::Refreshed(..) => "refreshed",
            Outcome::Uncacheable(..) => "uncacheable",
            Outcome::OriginError(_) => "origin-error",
            Outcome::Dangling => "dangling",
        }
    }
}

/// Why waiting for a fill ended without an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeout;

/// The meeting point of one fill and its waiters. See the module docs.
#[derive(Debug)]
pub struct Slot {
    /// The key text, compared on join: a digest collision never shares a fill.
    key_text: String,
    tx: watch::Sender<Option<Outcome>>,
    started: Instant,
    /// An uncacheable response, for the leader to take.
    handoff: Mutex<Option<Response<OriginBody>>>,
    /// Set when the leading request went away; guards the creation of the
    /// leader's reader (see [`LeaderClaim`]).
    pub(crate) leader_gone: Mutex<bool>,
    /// Set when the slot was taken out of the table by a purge or an
    /// invalidation: what the fill fetched must not be stored.
    detached: std::sync::atomic::AtomicBool,
}

impl Slot {
    fn new(key_text: &str) -> Arc<Slot> {
        let (tx, _) = watch::channel(None);
        Arc::new(Slot {
            key_text: key_text.to_string(),
            tx,
            started: Instant::now(),
            handoff: Mutex::new(None),
            leader_gone: Mutex::new(false),
            detached: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// True when a purge or an invalidation took this fill out of the
    /// table: its object must not be stored.
    pub fn is_detached(&self) -> bool {
        self.detached.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits for the outcome, at most `timeout`.
    pub async fn wait(&self, timeout: Duration) -> Result<Outcome, WaitTimeout> {
        let mut rx = self.tx.subscribe();
        let result = match tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await {
            Ok(Ok(o)) => Ok(o.clone().expect("invariant: wait_for returned Some")),
            // The sender lives in the slot, which we hold: it cannot be closed.
            Ok(Err(_)) => Ok(Outcome::Dangling),
            Err(_) => Err(WaitTimeout),
        };
        result
    }

    /// The uncacheable response, once (the leader takes it).
    pub fn take_handoff(&self) -> Option<Response<OriginBody>> {
        self.handoff.lock().take()
    }

    /// The outcome, if published.
    pub fn outcome(&self) -> Option<Outcome> {
        self.tx.borrow().clone()
    }
}

/// Held by the leading request while it waits: if that request goes away
/// before taking its reader, the reader is dropped with the claim, so it
/// cannot hold the body's history for nobody.
#[derive(Debug)]
pub struct LeaderClaim(pub Arc<Slot>);

impl LeaderClaim {
    /// Takes the leader's reader and response fields of a streaming outcome.
    pub fn take_reader(
        &self,
        head: &FillHead,
    ) -> Option<(hoard_store::busy::BusyReader, HeaderMap)> {
        let reader = head.leader_reader.lock().take()?;
        let headers = head
            .leader_headers
            .lock()
            .take()
            .unwrap_or_else(|| head.headers.clone());
        Some((reader, headers))
    }
}

impl Drop for LeaderClaim {
    fn drop(&mut self) {
        // Under the same lock as the fill's publication: either the fill sees
        // `gone` and creates no reader, or we see its outcome and drop the reader.
        let mut gone = self.0.leader_gone.lock();
        *gone = true;
        if let Some(Outcome::Streaming(head)) = self.0.outcome() {
            head.leader_reader.lock().take();
        }
    }
}

/// The right, and the duty, to publish a fill's outcome.
#[derive(Debug)]
pub struct FillPermit {
    slot: Arc<Slot>,
    key: Digest,
    table: Arc<Coalescer>,
    published: bool,
    removed: bool,
}

impl FillPermit {
    /// The slot this permit publishes into.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    /// Publishes the outcome and wakes every waiter.
    pub fn publish(&mut self, outcome: Outcome) {
        debug_assert!(!self.published, "invariant: one outcome per fill");
        self.published = true;
        self.slot.tx.send_replace(Some(outcome));
    }

    /// Publishes an uncacheable outcome, handing the response to the leader.
    pub fn publish_uncacheable(&mut self, reason: NotStorable, resp: Response<OriginBody>) {
        let status = resp.status();
        *self.slot.handoff.lock() = Some(resp);
        self.publish(Outcome::Uncacheable(reason, status));
    }

    /// The fill is over: new requests no longer join this slot.
    pub fn done(&mut self) {
        if !self.removed {
            self.removed = true;
            self.table.remove(self.key, &self.slot);
        }
    }
}

impl Drop for FillPermit {
    fn drop(&mut self) {
        if !self.published {
            self.published = true;
            self.slot.tx.send_replace(Some(Outcome::Dangling));
        }
        self.done();
    }
}

/// What `join` gives a request.
#[derive(Debug)]
pub enum Join {
    /// No fill in flight: this request starts one.
    Leader(FillPermit),
    /// A fill is in flight: wait for it.
    Follower(Arc<Slot>),
}

/// The in-flight table. See the module docs.
#[derive(Debug)]
pub struct Coalescer {
    shards: Vec<Mutex<HashMap<Digest, Arc<Slot>>>>,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl Coalescer {
    fn shard(&self, key: Digest) -> &Mutex<HashMap<Digest, Arc<Slot>>> {
        &self.shards[(key.0 as usize) % SHARDS]
    }

    /// Joins the fill for `key`, or starts one. A fill older than `max_age`
    /// is not joined: a new one replaces it.
    pub fn join(self: &Arc<Self>, key: Digest, key_text: &str, max_age: Duration) -> Join {
        let mut shard = self.shard(key).lock();
        if let Some(slot) = shard.get(&key) {
            if slot.key_text != key_text {
                // Another key with the same digest: fill alone, share nothing.
                return Join::Leader(self.detached());
            }
            if slot.started.elapsed() < max_age {
                return Join::Follower(slot.clone());
            }
        }
        let slot = Slot::new(key_text);
        shard.insert(key, slot.clone());
        Join::Leader(FillPermit {
            slot,
            key,
            table: self.clone(),
            published: false,
            removed: false,
        })
    }

    /// A fill that nobody else can join (a request going to the origin on its own).
    pub fn detached(self: &Arc<Self>) -> FillPermit {
        FillPermit {
            slot: Slot::new(""),
            key: Digest(0),
            table: self.clone(),
            published: false,
            removed: true,
        }
    }

    /// Starts a fill only when none is in flight (background refresh).
    pub fn try_lead(
        self: &Arc<Self>,
        key: Digest,
        key_text: &str,
        max_age: Duration,
    ) -> Option<FillPermit> {
        match self.join(key, key_text, max_age) {
            Join::Leader(p) => Some(p),
            Join::Follower(_) => None,
        }
    }

    fn remove(&self, key: Digest, slot: &Arc<Slot>) {
        let mut shard = self.shard(key).lock();
        if shard.get(&key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            shard.remove(&key);
        }
    }

    /// Takes out of the table the fills `pick` selects by key text and
    /// response fields (empty while the head has not come): they go on for
    /// the requests that joined them, but store nothing, and later requests
    /// start fills of their own (after a purge or an invalidation, nobody
    /// joins a fetch made before it). Returns how many.
    pub fn detach(&self, pick: impl Fn(&str, &HeaderMap) -> bool) -> usize {
        let none = HeaderMap::new();
        let mut n = 0;
        for shard in &self.shards {
            shard.lock().retain(|_, slot| {
                let outcome = slot.outcome();
                let headers = match &outcome {
                    Some(Outcome::Streaming(head)) => &head.headers,
                    _ => &none,
                };
                let keep = !pick(&slot.key_text, headers);
                if !keep {
                    slot.detached
                        .store(true, std::sync::atomic::Ordering::Release);
                    n += 1;
                }
                keep
            });
        }
        n
    }

    /// Detaches the fills of one primary key: its own, its variants'
    /// (`KEY#variant`) and its slices' (`KEY slice=...`).
    pub fn detach_key(&self, key_text: &str) -> usize {
        self.detach(|text, _| {
            text.strip_prefix(key_text).is_some_and(|rest| {
                rest.is_empty()
                    || rest.starts_with('#')
                    || rest.starts_with(hoard_policy::key::SLICE_MARK)
            })
        })
    }

    /// Fills in flight.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True when no fill is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u128) -> Digest {
        Digest(n)
    }

    #[tokio::test]
    async fn one_leader_many_followers_woken_by_publish() {
        let table = Arc::new(Coalescer::default());
        let Join::Leader(mut permit) = table.join(key(1), "k", Duration::from_secs(10)) else {
            panic!("first is leader")
        };
        let Join::Follower(slot) = table.join(key(1), "k", Duration::from_secs(10)) else {
            panic!("second follows")
        };
        let waiter = tokio::spawn(async move { slot.wait(Duration::from_secs(10)).await });
        permit.publish(Outcome::OriginError(ErrorKind::ConnectRefused));
        assert!(matches!(
            waiter.await.unwrap(),
            Ok(Outcome::OriginError(ErrorKind::ConnectRefused))
        ));
        permit.done();
        assert!(table.is_empty());
    }

    #[tokio::test]
    async fn dropped_permit_is_dangling_not_a_hang() {
        let table = Arc::new(Coalescer::default());
        let Join::Leader(permit) = table.join(key(2), "k", Duration::from_secs(10)) else {
            panic!()
        };
        let Join::Follower(slot) = table.join(key(2), "k", Duration::from_secs(10)) else {
            panic!()
        };
        let task = tokio::spawn(async move {
            let _p = permit;
            panic!("fill task panics");
        });
        assert!(task.await.is_err());
        assert!(matches!(
            slot.wait(Duration::from_secs(10)).await,
            Ok(Outcome::Dangling)
        ));
        assert!(table.is_empty(), "a dropped permit leaves the table");
    }

    #[tokio::test]
    async fn wait_times_out_and_old_fills_are_replaced() {
        let table = Arc::new(Coalescer::default());
        let Join::Leader(_permit) = table.join(key(3), "k", Duration::from_secs(10)) else {
            panic!()
        };
        let Join::Follower(slot) = table.join(key(3), "k", Duration::from_secs(10)) else {
            panic!()
        };
        assert_eq!(
            slot.wait(Duration::from_millis(10)).await.unwrap_err(),
            WaitTimeout
        );
        assert!(
            matches!(table.join(key(3), "k", Duration::ZERO), Join::Leader(_)),
            "a fill past its age limit is not joined"
        );
    }
}
