//! The protocol of the in-flight table: one fill per key, one outcome per
//! fill, a bounded number of fills.
//!
//! The proxy's coalescer (`hoard_proxy::fill::coalesce`) is this table with
//! its own slots (a `watch` channel to wake waiters, the response handed to
//! the leader); the loom models below check this same code with slots that
//! wake waiters through a loom `Condvar`.
//!
//! ## Model
//!
//! A [`Table`] maps a key's digest to the slot of the fill in flight for
//! it. [`Table::join`] gives a request one of:
//!
//! * [`Joined::Follow`]: the slot in the table (a fill for this key text is
//!   in flight and the caller still accepts it): wait for its outcome;
//! * [`Joined::Lead`]: a new slot, in the table, and the [`Permit`] to fill
//!   it (the key had no slot, or the caller found the one there too old: the
//!   new slot replaces it, the old fill goes on for its own waiters);
//! * [`Joined::Lead`] with a permit for a slot *not* in the table, when the
//!   slot there belongs to another key text with the same digest (the
//!   request fills alone and shares nothing);
//! * [`Joined::Full`]: the key had no slot and the table already holds its
//!   bound of slots: the request is not coalesced.
//!
//! A permit publishes exactly one outcome into its slot: the one given to
//! [`Permit::publish`] (a second one is a bug: debug builds panic, release
//! builds drop it) or, when the permit is dropped without one,
//! [`FillSlot::dangling`]. How an outcome reaches the waiters is the slot's
//! own business ([`FillSlot::publish`]).
//!
//! ## Lifecycle of a slot
//!
//! | step | the table | the slot |
//! |---|---|---|
//! | `join` leads | inserted (replacing a slot that was too old) | pending |
//! | `publish` | still there: late joiners read the outcome | published |
//! | `done` (after the object was stored) | removed, *if the table's slot for the key is still this one* | published |
//! | permit dropped | as `done` | published (`dangling` if it was not) |
//! | `detach` | removed | marked detached (its fill stores nothing) |
//!
//! `done` compares slots by identity: a fill whose slot was replaced (age
//! limit) or detached (purge) never removes the slot that took its place.
//! Because `done` comes after the object is stored, a request that looked
//! the key up before and joins after it finds the object if it looks again.
//!
//! ## Locking and the bound
//!
//! The table is sharded by digest; a shard's mutex is held only to look up,
//! insert or remove a slot (and to call [`FillSlot::mark_detached`]), never
//! across an await. The number of slots is one atomic counter for the whole
//! table: a slot for a new key is counted (a compare-and-swap below the
//! bound) under its shard's lock before it is inserted, and uncounted after
//! it is removed, so the counter never falls below the slots in the table
//! and the bound holds across shards. Replacing a slot that is too old
//! leaves the count as it is.
//!
//! The protocol is model-checked with loom (`sync.rs`; the models are the
//! `loom_tests` module below).

use std::collections::HashMap;
use std::fmt;

use hoard_policy::key::Digest;

use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};

const SHARDS: usize = 16;

/// What the table needs of a slot: its key text, and a way to publish one
/// outcome to whoever waits for it.
pub trait FillSlot: Send + Sync {
    /// What a fill tells its waiters.
    type Outcome;

    /// The key text: a slot is joined only by the same text (a digest
    /// collision never shares a fill).
    fn key_text(&self) -> &str;

    /// Publishes the outcome and wakes every waiter. Called once per slot.
    fn publish(&self, outcome: Self::Outcome);

    /// The outcome of a fill whose permit was dropped without publishing.
    fn dangling() -> Self::Outcome;

    /// The slot was taken out of the table by [`Table::detach`] (called
    /// under the shard's lock).
    fn mark_detached(&self);
}

/// What [`Table::join`] gives a request. See the module docs.
pub enum Joined<S: FillSlot> {
    /// This request fills the slot.
    Lead(Permit<S>),
    /// A fill is in flight: wait for its outcome.
    Follow(Arc<S>),
    /// The table holds its bound of slots: fill without coalescing.
    Full,
}

impl<S: FillSlot + fmt::Debug> fmt::Debug for Joined<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Joined::Lead(p) => f.debug_tuple("Lead").field(p).finish(),
            Joined::Follow(s) => f.debug_tuple("Follow").field(s).finish(),
            Joined::Full => f.write_str("Full"),
        }
    }
}

/// The in-flight table. See the module docs.
pub struct Table<S: FillSlot> {
    shards: Vec<Mutex<HashMap<Digest, Arc<S>>>>,
    /// Slots in the table (never fewer; see the module docs).
    len: AtomicUsize,
    /// The bound on `len`; 0: none.
    max: usize,
}

impl<S: FillSlot> fmt::Debug for Table<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("len", &self.len())
            .field("max", &self.max)
            .finish()
    }
}

impl<S: FillSlot> Table<S> {
    /// An empty table holding at most `max_fills` slots (0: no bound).
    pub fn new(max_fills: usize) -> Table<S> {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            len: AtomicUsize::new(0),
            max: max_fills,
        }
    }

    fn shard(&self, key: Digest) -> &Mutex<HashMap<Digest, Arc<S>>> {
        &self.shards[(key.0 % SHARDS as u128) as usize]
    }

    /// Joins the fill in flight for `key`, or starts one (see the module
    /// docs). `joinable` tells whether the slot in the table may still be
    /// joined (the proxy: younger than the fill age limit); `new` makes a
    /// slot when this request leads.
    pub fn join(
        self: &Arc<Self>,
        key: Digest,
        key_text: &str,
        joinable: impl Fn(&S) -> bool,
        new: impl FnOnce() -> S,
    ) -> Joined<S> {
        let mut shard = self.shard(key).lock();
        let replaces = match shard.get(&key) {
            Some(slot) if slot.key_text() != key_text => {
                // Another key with the same digest: fill alone, share nothing.
                return Joined::Lead(Permit::alone(Arc::new(new())));
            }
            Some(slot) if joinable(slot) => return Joined::Follow(slot.clone()),
            Some(_) => true,
            None => false,
        };
        if !replaces && !self.count_one() {
            return Joined::Full;
        }
        let slot = Arc::new(new());
        // A slot too old to join leaves the table here; its permit's `done`
        // finds this one and leaves it alone.
        shard.insert(key, slot.clone());
        Joined::Lead(Permit {
            slot,
            place: Some((self.clone(), key)),
            published: false,
        })
    }

    /// Counts one more slot, unless that would pass the bound.
    fn count_one(&self) -> bool {
        if self.max == 0 {
            self.len.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Removes `slot` from `key`'s place if it is still the one there.
    fn remove(&self, key: Digest, slot: &Arc<S>) {
        let mut shard = self.shard(key).lock();
        if shard.get(&key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            shard.remove(&key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Takes out of the table the slots `pick` selects (called under the
    /// shard's lock), marking each detached. Their fills go on for the
    /// requests that joined them; later requests lead fills of their own.
    /// Returns how many.
    pub fn detach(&self, mut pick: impl FnMut(&S) -> bool) -> usize {
        let mut n = 0;
        for shard in &self.shards {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|_, slot| {
                let keep = !pick(slot);
                if !keep {
                    slot.mark_detached();
                }
                keep
            });
            let taken = before - shard.len();
            if taken > 0 {
                self.len.fetch_sub(taken, Ordering::Relaxed);
                n += taken;
            }
        }
        n
    }

    /// Slots in the table.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when the table holds no slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on slots (0: none).
    pub fn max_fills(&self) -> usize {
        self.max
    }

    /// Slots in the shards, counted one by one (the models compare it
    /// with the counter).
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// The right, and the duty, to publish one fill's outcome; while it is in
/// the table, to take its slot out when the fill is over.
pub struct Permit<S: FillSlot> {
    slot: Arc<S>,
    /// Where the slot was inserted; `None` once `done`, or for a fill
    /// nobody can join.
    place: Option<(Arc<Table<S>>, Digest)>,
    published: bool,
}

impl<S: FillSlot + fmt::Debug> fmt::Debug for Permit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("slot", &self.slot)
            .field("in_table", &self.place.is_some())
            .field("published", &self.published)
            .finish()
    }
}

impl<S: FillSlot> Permit<S> {
    /// A permit for a slot that is not in any table: a fill nobody joins.
    pub fn alone(slot: Arc<S>) -> Permit<S> {
        Permit {
            slot,
            place: None,
            published: false,
        }
    }

    /// The slot this permit publishes into.
    pub fn slot(&self) -> &Arc<S> {
        &self.slot
    }

    /// Publishes the outcome (once: see the module docs).
    pub fn publish(&mut self, outcome: S::Outcome) {
        debug_assert!(!self.published, "invariant: one outcome per fill");
        if !self.published {
            self.published = true;
            self.slot.publish(outcome);
        }
    }

    /// The fill is over: new requests no longer join this slot. Call it
    /// after the object was stored.
    pub fn done(&mut self) {
        if let Some((table, key)) = self.place.take() {
            table.remove(key, &self.slot);
        }
    }
}

impl<S: FillSlot> Drop for Permit<S> {
    fn drop(&mut self) {
        if !self.published {
            self.published = true;
            self.slot.publish(S::dangling());
        }
        self.done();
    }
}

#[cfg(all(test, not(hoard_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[derive(Debug, Default)]
    struct Cell {
        text: &'static str,
        outcome: std::sync::Mutex<Vec<u32>>,
        detached: AtomicBool,
    }

    impl FillSlot for Cell {
        type Outcome = u32;
        fn key_text(&self) -> &str {
            self.text
        }
        fn publish(&self, outcome: u32) {
            self.outcome.lock().unwrap().push(outcome);
        }
        fn dangling() -> u32 {
            0
        }
        fn mark_detached(&self) {
            self.detached
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn cell(text: &'static str) -> impl FnOnce() -> Cell {
        move || Cell {
            text,
            ..Cell::default()
        }
    }

    #[test]
    fn a_collision_fills_alone_and_is_not_counted() {
        let t = Arc::new(Table::new(1));
        let Joined::Lead(_a) = t.join(Digest(1), "a", |_| true, cell("a")) else {
            panic!("leads")
        };
        let Joined::Lead(mut b) = t.join(Digest(1), "b", |_| true, cell("b")) else {
            panic!("a collision leads alone")
        };
        assert_eq!((t.len(), t.slots()), (1, 1));
        b.publish(7);
        b.done();
        assert_eq!(t.len(), 1, "the other text's slot stays");
    }

    #[test]
    fn a_dropped_permit_publishes_dangling_once_and_leaves() {
        let t = Arc::new(Table::new(0));
        let Joined::Lead(mut p) = t.join(Digest(2), "k", |_| true, cell("k")) else {
            panic!()
        };
        let slot = p.slot().clone();
        p.done();
        p.done();
        drop(p);
        assert_eq!(*slot.outcome.lock().unwrap(), vec![0]);
        assert_eq!((t.len(), t.slots()), (0, 0));
    }

    #[test]
    fn detach_marks_and_uncounts() {
        let t = Arc::new(Table::new(2));
        let Joined::Lead(p) = t.join(Digest(3), "k", |_| true, cell("k")) else {
            panic!()
        };
        assert_eq!(t.detach(|_| true), 1);
        assert!(p.slot().detached.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!((t.len(), t.slots()), (0, 0));
        drop(p);
        assert_eq!(t.len(), 0, "a detached permit's drop takes nothing");
    }
}

#[cfg(all(test, hoard_loom))]
mod loom_tests {
    //! Models of the slot protocol. Each runs every interleaving of two or
    //! three threads over the real table and permit (no preemption bound:
    //! the models are small enough, each takes well under a second); the
    //! slots wake waiters through a loom `Condvar`, so a waiter that is
    //! never woken is a deadlock loom reports.

    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Condvar, Mutex as LoomMutex};
    use loom::thread;

    const K: Digest = Digest(1);
    const DANGLING: u32 = 0;

    #[derive(Debug)]
    struct ModelSlot {
        text: &'static str,
        outcome: LoomMutex<Option<u32>>,
        published: Condvar,
        detached: std::sync::atomic::AtomicBool,
    }

    impl ModelSlot {
        fn new() -> ModelSlot {
            ModelSlot {
                text: "k",
                outcome: LoomMutex::new(None),
                published: Condvar::new(),
                detached: std::sync::atomic::AtomicBool::new(false),
            }
        }

        /// Blocks until the outcome is published.
        fn wait(&self) -> u32 {
            let mut o = self.outcome.lock().unwrap();
            loop {
                if let Some(v) = *o {
                    return v;
                }
                o = self.published.wait(o).unwrap();
            }
        }

        fn is_detached(&self) -> bool {
            self.detached.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl FillSlot for ModelSlot {
        type Outcome = u32;
        fn key_text(&self) -> &str {
            self.text
        }
        fn publish(&self, outcome: u32) {
            let mut o = self.outcome.lock().unwrap();
            assert!(o.is_none(), "a slot got two outcomes");
            *o = Some(outcome);
            drop(o);
            self.published.notify_all();
        }
        fn dangling() -> u32 {
            DANGLING
        }
        fn mark_detached(&self) {
            self.detached
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    type T = Table<ModelSlot>;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        // Every interleaving, whatever LOOM_MAX_PREEMPTIONS says.
        b.preemption_bound = None;
        b.check(f);
    }

    fn join(t: &Arc<T>, key: Digest) -> Joined<ModelSlot> {
        t.join(key, "k", |_| true, ModelSlot::new)
    }

    fn lead(t: &Arc<T>, key: Digest) -> Permit<ModelSlot> {
        match join(t, key) {
            Joined::Lead(p) => p,
            other => panic!("expected to lead, got {other:?}"),
        }
    }

    /// The counter and the shards agree, once every thread is done.
    fn settled(t: &T, slots: usize) {
        assert_eq!(t.slots(), slots);
        assert_eq!(t.len(), slots);
    }

    /// (a) Two requests join while the leader publishes and finishes: each
    /// one that followed reads exactly what its leader published (a request
    /// that came after `done` leads a fill of its own, which it drops, so
    /// whoever followed *that* one reads `Dangling`). Nobody hangs.
    #[test]
    fn loom_followers_read_what_their_leader_published() {
        model(|| {
            let t = Arc::new(T::new(0));
            let mut permit = lead(&t, K);
            let first = permit.slot().clone();
            let requests: Vec<_> = (0..2)
                .map(|_| {
                    let (t, first) = (t.clone(), first.clone());
                    thread::spawn(move || match join(&t, K) {
                        Joined::Follow(s) if Arc::ptr_eq(&s, &first) => assert_eq!(s.wait(), 7),
                        Joined::Follow(s) => assert_eq!(s.wait(), DANGLING),
                        Joined::Lead(p) => assert!(!Arc::ptr_eq(p.slot(), &first)),
                        Joined::Full => unreachable!("no bound"),
                    })
                })
                .collect();
            permit.publish(7);
            permit.done();
            drop(permit);
            for r in requests {
                r.join().unwrap();
            }
            settled(&t, 0);
        });
    }

    /// (a) A leader dropped without publishing (a cancelled or panicking
    /// fill task) wakes its followers with `Dangling`.
    #[test]
    fn loom_a_dropped_permit_wakes_followers_with_dangling() {
        model(|| {
            let t = Arc::new(T::new(0));
            let permit = lead(&t, K);
            let first = permit.slot().clone();
            let leader = thread::spawn(move || drop(permit));
            match join(&t, K) {
                Joined::Follow(s) => {
                    assert!(Arc::ptr_eq(&s, &first));
                    assert_eq!(s.wait(), DANGLING);
                }
                Joined::Lead(mut p) => {
                    assert!(!Arc::ptr_eq(p.slot(), &first));
                    p.publish(5);
                    p.done();
                }
                Joined::Full => unreachable!("no bound"),
            }
            leader.join().unwrap();
            settled(&t, 0);
        });
    }

    /// (b) The leader stores the object, then calls `done`. A request that
    /// saw `done` returned never follows that fill, and a request that leads
    /// a new fill finds the object stored: a request finds the slot or the
    /// object.
    #[test]
    fn loom_after_done_a_join_leads_and_the_object_is_there() {
        model(|| {
            let t = Arc::new(T::new(0));
            let stored = Arc::new(AtomicBool::new(false));
            let finished = Arc::new(AtomicBool::new(false));
            let mut permit = lead(&t, K);
            let first = permit.slot().clone();
            let leader = {
                let (stored, finished) = (stored.clone(), finished.clone());
                thread::spawn(move || {
                    permit.publish(7);
                    stored.store(true, loom::sync::atomic::Ordering::Release);
                    permit.done();
                    finished.store(true, loom::sync::atomic::Ordering::Release);
                })
            };
            let was_finished = finished.load(loom::sync::atomic::Ordering::Acquire);
            match join(&t, K) {
                Joined::Follow(s) => {
                    assert!(!was_finished, "followed a fill that was over");
                    assert!(Arc::ptr_eq(&s, &first));
                    assert_eq!(s.wait(), 7);
                }
                Joined::Lead(p) => {
                    assert!(!Arc::ptr_eq(p.slot(), &first));
                    assert!(
                        stored.load(loom::sync::atomic::Ordering::Acquire),
                        "led a new fill while the first one's object was not stored"
                    );
                }
                Joined::Full => unreachable!("no bound"),
            }
            leader.join().unwrap();
            settled(&t, 0);
        });
    }

    /// (c) A fill whose slot was replaced for its age finishes while the
    /// new one starts: its `done` never removes the new slot.
    #[test]
    fn loom_a_replaced_fill_never_removes_its_successor() {
        model(|| {
            let t = Arc::new(T::new(0));
            let mut old = lead(&t, K);
            let old_slot = old.slot().clone();
            let finisher = thread::spawn(move || {
                old.publish(1);
                old.done();
            });
            // Too old to join: replace it (or find the key free).
            let Joined::Lead(mut new) = t.join(K, "k", |_| false, ModelSlot::new) else {
                panic!("a fill too old to join is replaced")
            };
            finisher.join().unwrap();
            settled(&t, 1);
            match join(&t, K) {
                Joined::Follow(s) => assert!(Arc::ptr_eq(&s, new.slot())),
                other => panic!("the new fill left the table: {other:?}"),
            }
            assert_eq!(old_slot.wait(), 1);
            new.publish(2);
            new.done();
            settled(&t, 0);
        });
    }

    /// (c) A fill detached by a purge ends (its permit dropped) while the
    /// purge runs and a new request leads: the new slot stays, the count
    /// stays exact, and the old slot is marked detached exactly when the
    /// purge took it out.
    #[test]
    fn loom_a_detached_fill_never_removes_its_successor() {
        model(|| {
            let t = Arc::new(T::new(0));
            let old = lead(&t, K);
            let old_slot = old.slot().clone();
            let finisher = thread::spawn(move || drop(old));
            let n = t.detach(|_| true);
            let new = lead(&t, K);
            finisher.join().unwrap();
            assert_eq!(old_slot.is_detached(), n == 1);
            settled(&t, 1);
            match join(&t, K) {
                Joined::Follow(s) => assert!(Arc::ptr_eq(&s, new.slot())),
                other => panic!("the new fill left the table: {other:?}"),
            }
            drop(new);
            settled(&t, 0);
        });
    }

    /// (d) Two requests for a key with no fill: exactly one leads, the
    /// other follows its slot.
    #[test]
    fn loom_two_joins_make_one_leader() {
        model(|| {
            let t = Arc::new(T::new(0));
            let requests: Vec<_> = (0..2)
                .map(|_| {
                    let t = t.clone();
                    thread::spawn(move || join(&t, K))
                })
                .collect();
            let results: Vec<_> = requests.into_iter().map(|r| r.join().unwrap()).collect();
            let (mut permits, mut follows) = (Vec::new(), Vec::new());
            for r in results {
                match r {
                    Joined::Lead(p) => permits.push(p),
                    Joined::Follow(s) => follows.push(s),
                    Joined::Full => unreachable!("no bound"),
                }
            }
            assert_eq!((permits.len(), follows.len()), (1, 1));
            assert!(Arc::ptr_eq(permits[0].slot(), &follows[0]));
            settled(&t, 1);
            drop(permits);
            assert_eq!(follows[0].wait(), DANGLING);
            settled(&t, 0);
        });
    }

    /// The bound holds across shards: with room for one fill, two requests
    /// for keys in different shards make one leader and one refusal.
    #[test]
    fn loom_the_bound_holds_across_shards() {
        model(|| {
            let t = Arc::new(T::new(1));
            let requests: Vec<_> = [Digest(1), Digest(2)]
                .into_iter()
                .map(|k| {
                    let t = t.clone();
                    thread::spawn(move || join(&t, k))
                })
                .collect();
            let results: Vec<_> = requests.into_iter().map(|r| r.join().unwrap()).collect();
            let leads = results
                .iter()
                .filter(|r| matches!(r, Joined::Lead(_)))
                .count();
            let full = results.iter().filter(|r| matches!(r, Joined::Full)).count();
            assert_eq!((leads, full), (1, 1));
            settled(&t, 1);
            drop(results);
            settled(&t, 0);
        });
    }

    /// The bound frees room as fills end: a fill ends while another key
    /// joins; the join is refused only while the first slot is counted,
    /// and the table never holds more than one slot.
    #[test]
    fn loom_an_ending_fill_frees_its_room() {
        model(|| {
            let t = Arc::new(T::new(1));
            let first = lead(&t, Digest(1));
            let finisher = thread::spawn(move || drop(first));
            let second = join(&t, Digest(2));
            assert!(t.len() <= 1);
            finisher.join().unwrap();
            match second {
                Joined::Lead(p) => {
                    settled(&t, 1);
                    drop(p);
                }
                Joined::Full => {
                    settled(&t, 0);
                    assert!(matches!(join(&t, Digest(2)), Joined::Lead(_)));
                }
                Joined::Follow(_) => unreachable!("another key"),
            }
            settled(&t, 0);
        });
    }
}
