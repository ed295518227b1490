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
//! is replaced by a new one (the old fill goes on for its own waiters); a
//! fill's `done` only ever removes its own slot, never one that replaced it.
//!
//! ## The bound on fills
//!
//! [`Coalescer::new`] takes `max_fills` (0: no bound). While the table
//! holds that many slots, a request for a key with no fill in flight is
//! refused a slot: [`Coalescer::try_join`] returns [`Full`] (the caller goes
//! to the origin uncoalesced and stores nothing), [`Coalescer::try_lead`]
//! returns `None` (no background refresh), and [`Coalescer::join`] gives a
//! fill nobody can join (as for a digest collision). Requests for a key
//! whose fill is in flight still follow it. [`Coalescer::refused`] counts
//! the refusals.
//!
//! ## Locking
//!
//! The table, the permits and the bound are [`hoard_store::inflight`]: a
//! sharded table whose shard mutex is held only to look up, insert or
//! remove a slot, never across an await, and one atomic count of slots.
//! That protocol is model-checked with loom (see that module); this module
//! adds the slot's contents and its `watch` channel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hoard_policy::key::Digest;
use hoard_policy::storable::NotStorable;
use hoard_store::busy::BusyBody;
use hoard_store::inflight::{FillSlot, Joined, Permit, Table};
use hoard_store::object::StoredObject;
use http::{HeaderMap, Response, StatusCode};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use hoard_origin::error::ErrorKind;
use hoard_origin::OriginBody;

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
    /// The response is stored here once complete (false: an owner's answer
    /// this node keeps no copy of, see `cluster::near`).
    pub kept: bool,
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
    detached: AtomicBool,
}

impl Slot {
    fn new(key_text: &str) -> Slot {
        let (tx, _) = watch::channel(None);
        Slot {
            key_text: key_text.to_string(),
            tx,
            started: Instant::now(),
            handoff: Mutex::new(None),
            leader_gone: Mutex::new(false),
            detached: AtomicBool::new(false),
        }
    }

    /// True when a purge or an invalidation took this fill out of the
    /// table: its object must not be stored.
    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
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

impl FillSlot for Slot {
    type Outcome = Outcome;

    fn key_text(&self) -> &str {
        &self.key_text
    }

    fn publish(&self, outcome: Outcome) {
        self.tx.send_replace(Some(outcome));
    }

    fn dangling() -> Outcome {
        Outcome::Dangling
    }

    fn mark_detached(&self) {
        self.detached.store(true, Ordering::Release);
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

/// The right, and the duty, to publish a fill's outcome (dropped without
/// one, it publishes `Dangling`; see [`hoard_store::inflight::Permit`]).
#[derive(Debug)]
pub struct FillPermit(Permit<Slot>);

impl FillPermit {
    /// The slot this permit publishes into.
    pub fn slot(&self) -> &Arc<Slot> {
        self.0.slot()
    }

    /// Publishes the outcome and wakes every waiter.
    pub fn publish(&mut self, outcome: Outcome) {
        self.0.publish(outcome);
    }

    /// Publishes an uncacheable outcome, handing the response to the leader.
    pub fn publish_uncacheable(&mut self, reason: NotStorable, resp: Response<OriginBody>) {
        let status = resp.status();
        *self.0.slot().handoff.lock() = Some(resp);
        self.publish(Outcome::Uncacheable(reason, status));
    }

    /// The fill is over: new requests no longer join this slot.
    pub fn done(&mut self) {
        self.0.done();
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

/// Why [`Coalescer::try_join`] gave no slot: the table holds its bound of
/// fills. The request goes to the origin uncoalesced and stores nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The in-flight table. See the module docs.
#[derive(Debug)]
pub struct Coalescer {
    table: Arc<Table<Slot>>,
    /// Joins refused a slot by the bound.
    refused: AtomicU64,
}

impl Default for Coalescer {
    /// No bound on fills.
    fn default() -> Self {
        Coalescer::new(0)
    }
}

impl Coalescer {
    /// A table holding at most `max_fills` fills in flight (0: no bound).
    pub fn new(max_fills: usize) -> Coalescer {
        Coalescer {
            table: Arc::new(Table::new(max_fills)),
            refused: AtomicU64::new(0),
        }
    }

    /// Joins the fill for `key`, or starts one. A fill older than `max_age`
    /// is not joined: a new one replaces it. [`Full`] when the key has no
    /// fill to join and the table holds its bound of fills.
    pub fn try_join(&self, key: Digest, key_text: &str, max_age: Duration) -> Result<Join, Full> {
        let joined = self.table.join(
            key,
            key_text,
            |slot| slot.started.elapsed() < max_age,
            || Slot::new(key_text),
        );
        match joined {
            Joined::Lead(permit) => Ok(Join::Leader(FillPermit(permit))),
            Joined::Follow(slot) => Ok(Join::Follower(slot)),
            Joined::Full => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(Full)
            }
        }
    }

    /// As [`Self::try_join`], but over the bound this request leads a fill
    /// nobody can join (as with [`Self::detached`]) instead.
    pub fn join(&self, key: Digest, key_text: &str, max_age: Duration) -> Join {
        self.try_join(key, key_text, max_age)
            .unwrap_or_else(|Full| Join::Leader(self.detached()))
    }

    /// A fill that nobody else can join (a request going to the origin on its own).
    pub fn detached(&self) -> FillPermit {
        FillPermit(Permit::alone(Arc::new(Slot::new(""))))
    }

    /// Starts a fill only when none is in flight and the bound leaves room
    /// (background refresh).
    pub fn try_lead(&self, key: Digest, key_text: &str, max_age: Duration) -> Option<FillPermit> {
        match self.try_join(key, key_text, max_age) {
            Ok(Join::Leader(p)) => Some(p),
            Ok(Join::Follower(_)) | Err(Full) => None,
        }
    }

    /// Takes out of the table the fills `pick` selects by key text and
    /// response fields (empty while the head has not come): they go on for
    /// the requests that joined them, but store nothing, and later requests
    /// start fills of their own (after a purge or an invalidation, nobody
    /// joins a fetch made before it). Returns how many.
    pub fn detach(&self, pick: impl Fn(&str, &HeaderMap) -> bool) -> usize {
        let none = HeaderMap::new();
        self.table.detach(|slot| {
            let outcome = slot.outcome();
            let headers = match &outcome {
                Some(Outcome::Streaming(head)) => &head.headers,
                _ => &none,
            };
            pick(&slot.key_text, headers)
        })
    }

    /// Detaches the fills of one primary key: its own, its variants'
    /// (`KEY#variant`), its slices' (`KEY slice=...`) and its forwarded
    /// ranges' and partial copy's (`KEY range=...`, `KEY partial`).
    pub fn detach_key(&self, key_text: &str) -> usize {
        self.detach(|text, _| {
            text.strip_prefix(key_text).is_some_and(|rest| {
                rest.is_empty()
                    || rest.starts_with('#')
                    || rest.starts_with(hoard_policy::key::SLICE_MARK)
                    || rest.starts_with(hoard_policy::key::PARTIAL_MARK)
                    || rest.starts_with(hoard_policy::key::RANGE_MARK)
            })
        })
    }

    /// Fills in flight (in the table).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when no fill is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on fills in flight (0: none).
    pub fn max_fills(&self) -> usize {
        self.table.max_fills()
    }

    /// Joins refused a slot because the table held its bound of fills.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
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

    #[test]
    fn the_bound_refuses_new_fills_but_not_followers() {
        let table = Coalescer::new(1);
        let age = Duration::from_secs(10);
        let Ok(Join::Leader(mut first)) = table.try_join(key(4), "a", age) else {
            panic!("room for one")
        };
        assert!(
            matches!(table.try_join(key(4), "a", age), Ok(Join::Follower(_))),
            "a fill in flight is joined at the bound"
        );
        assert_eq!(table.try_join(key(5), "b", age).unwrap_err(), Full);
        assert!(
            table.try_lead(key(5), "b", age).is_none(),
            "no refresh over the bound"
        );
        let Join::Leader(alone) = table.join(key(5), "b", age) else {
            panic!("join over the bound leads alone")
        };
        assert!(
            matches!(table.try_join(key(5), "b", age), Err(Full)),
            "a fill over the bound is not in the table"
        );
        drop(alone);
        assert_eq!((table.len(), table.refused()), (1, 4));
        first.publish(Outcome::OriginError(ErrorKind::ConnectRefused));
        first.done();
        assert!(table.is_empty());
        assert!(matches!(
            table.try_join(key(5), "b", age),
            Ok(Join::Leader(_))
        ));
        assert!(table.is_empty(), "the dropped permit left");
    }

    #[test]
    fn replacing_an_old_fill_needs_no_room_and_keeps_the_new_one() {
        let table = Coalescer::new(1);
        let age = Duration::from_secs(10);
        let Ok(Join::Leader(mut old)) = table.try_join(key(6), "k", age) else {
            panic!()
        };
        let Ok(Join::Leader(new)) = table.try_join(key(6), "k", Duration::ZERO) else {
            panic!("a fill past its age limit is replaced, even at the bound")
        };
        assert_eq!(table.len(), 1);
        old.done();
        drop(old);
        let Ok(Join::Follower(slot)) = table.try_join(key(6), "k", age) else {
            panic!("the old fill's done left the new one in the table")
        };
        assert!(Arc::ptr_eq(&slot, new.slot()));
        drop(new);
        assert!(table.is_empty());
    }

    #[test]
    fn a_purge_frees_room_and_the_detached_fill_takes_none_back() {
        let table = Coalescer::new(1);
        let age = Duration::from_secs(10);
        let Ok(Join::Leader(old)) = table.try_join(key(7), "k", age) else {
            panic!()
        };
        assert_eq!(table.detach_key("k"), 1);
        assert!(old.slot().is_detached());
        assert!(table.is_empty());
        let Ok(Join::Leader(new)) = table.try_join(key(8), "other", age) else {
            panic!("room after the purge")
        };
        drop(old);
        assert_eq!(table.len(), 1, "the detached fill's end takes nothing");
        drop(new);
        assert!(table.is_empty());
    }

    #[test]
    fn zero_is_no_bound() {
        let table = Coalescer::default();
        assert_eq!(table.max_fills(), 0);
        let permits: Vec<_> = (0..100)
            .map(|n| table.try_join(key(n), &n.to_string(), Duration::from_secs(10)))
            .collect();
        assert!(permits.iter().all(|j| matches!(j, Ok(Join::Leader(_)))));
        assert_eq!((table.len(), table.refused()), (100, 0));
        drop(permits);
        assert!(table.is_empty());
    }
}
