//! The memory tier: a byte-bounded S3-FIFO cache of objects and variant indexes.
//!
//! ## Model
//!
//! One `quick_cache` (S3-FIFO eviction, sharded) holds two kinds of entries:
//!
//! * `Slot::Object(primary, variant)` → an `Arc<StoredObject>`; a response
//!   without `Vary` lives at variant `Digest(0)`.
//! * `Slot::Index(primary)` → the `Vary` name sets and variant digests stored
//!   for a key that varies.
//!
//! Both count against the byte limit (their weight is the bytes they hold plus
//! a fixed overhead), and the limit is never exceeded: an insert evicts first,
//! and an object heavier than the largest admissible size is refused. The
//! number of shards is chosen so that a shard can hold the largest object.
//!
//! ## Locking
//!
//! Lookups take only the shard's read lock inside `quick_cache`. Index
//! read-modify-write cycles are serialised by one `parking_lot::Mutex`
//! (`index_lock`), never held across an await.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hoard_policy::key::Digest;
use parking_lot::Mutex;
use quick_cache::sync::Cache;
use quick_cache::{Lifecycle, Weighter};

use crate::object::{StoredObject, OBJECT_OVERHEAD};
use hoard_policy::vary::VaryNames;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Object(Digest, Digest),
    Index(Digest),
}

#[derive(Debug, Clone)]
enum Entry {
    /// An object and the epoch of the index it was stored under (0 without Vary).
    Object(Arc<StoredObject>, u64),
    Index(Arc<VariantIndex>),
}

/// Most variant digests remembered per key; older ones are forgotten (their
/// objects stay reachable through the name sets until evicted).
const MAX_VARIANTS: usize = 256;

/// The variants stored for one primary key that varies.
///
/// Each index has an *epoch*, fresh whenever the index is created. Objects
/// carry the epoch they were stored under and are found only under the same
/// epoch: if an index is evicted or removed (invalidation) before its
/// variants, a later index cannot bring those variants back.
#[derive(Debug, Clone, Default)]
struct VariantIndex {
    epoch: u64,
    names: Vec<VaryNames>,
    variants: Vec<Digest>,
}

impl VariantIndex {
    fn weight(&self) -> u64 {
        let names: usize = self
            .names
            .iter()
            .flat_map(|n| n.0.iter())
            .map(|n| n.as_str().len() + 16)
            .sum();
        OBJECT_OVERHEAD + names as u64 + 16 * self.variants.len() as u64
    }
}

#[derive(Debug, Clone)]
struct EntryWeighter;

impl Weighter<Slot, Entry> for EntryWeighter {
    fn weight(&self, _key: &Slot, val: &Entry) -> u64 {
        match val {
            Entry::Object(o, _) => o.weight(),
            Entry::Index(i) => i.weight(),
        }
    }
}

/// Counters kept by the memory tier.
#[derive(Debug, Default)]
pub struct MemoryStats {
    /// Objects inserted.
    pub inserted: AtomicU64,
    /// Entries evicted to make room.
    pub evicted: AtomicU64,
    /// Objects refused because they were too large.
    pub rejected_too_large: AtomicU64,
}

#[derive(Debug, Clone)]
struct Evictions(Arc<MemoryStats>);

impl Lifecycle<Slot, Entry> for Evictions {
    type RequestState = ();
    fn on_evict(&self, _state: &mut (), _key: Slot, _val: Entry) {
        self.0.evicted.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a lookup found.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// A stored variant matching the request.
    Hit(Arc<StoredObject>),
    /// Variants exist under the key, none matches the request; carries the
    /// `Vary` names of the most recent response, which select this request's
    /// variant.
    VaryMiss(VaryNames),
    /// Nothing is stored under the key.
    UriMiss,
}

/// Why an insert was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The object is larger than the largest admissible object.
    TooLarge,
    /// There is no memory tier (`memory_size = 0`).
    NoTier,
    /// A purge or an invalidation since the fill started selects the object.
    Purged,
}

/// The memory tier. See the module docs.
#[derive(Debug)]
pub struct MemoryStore {
    cache: Cache<Slot, Entry, EntryWeighter, quick_cache::DefaultHashBuilder, Evictions>,
    index_lock: Mutex<()>,
    next_epoch: std::sync::atomic::AtomicU64,
    max_object: u64,
    capacity: u64,
    stats: Arc<MemoryStats>,
}

impl MemoryStore {
    /// A store of at most `capacity` bytes that accepts objects up to `max_object` bytes.
    pub fn new(capacity: u64, max_object: u64) -> MemoryStore {
        let max_object = max_object.min(capacity);
        // Enough shards for concurrency, few enough that a shard's hot queue
        // (97% of a shard) holds the largest object.
        let mut shards = 16usize;
        while shards > 1 && (capacity / shards as u64) * 97 / 100 < max_object.saturating_add(4096)
        {
            shards /= 2;
        }
        let stats = Arc::new(MemoryStats::default());
        let mut opts = quick_cache::OptionsBuilder::new();
        opts.shards(shards)
            .weight_capacity(capacity)
            .estimated_items_capacity(((capacity / 16_384) as usize).clamp(64, 1 << 20));
        let cache = Cache::with_options(
            opts.build().expect("invariant: valid cache options"),
            EntryWeighter,
            quick_cache::DefaultHashBuilder::default(),
            Evictions(stats.clone()),
        );
        let shard_room = cache.shard_capacity() * 97 / 100;
        MemoryStore {
            cache,
            index_lock: Mutex::new(()),
            next_epoch: AtomicU64::new(1),
            max_object: max_object.min(shard_room),
            capacity,
            stats,
        }
    }

    /// Finds the variant of `primary` that matches a request.
    pub fn lookup(&self, primary: Digest, key_text: &str, request: &http::HeaderMap) -> Lookup {
        if let Some(Entry::Object(o, _)) = self.cache.get(&Slot::Object(primary, Digest(0))) {
            if o.key == key_text && o.vary.is_empty() {
                return Lookup::Hit(o);
            }
        }
        let Some(Entry::Index(index)) = self.cache.get(&Slot::Index(primary)) else {
            return Lookup::UriMiss;
        };
        // The most recently seen name set first (RFC 9111 §4.1: the most recent response).
        for names in index.names.iter().rev() {
            let variant = names.variant(request);
            if let Some(Entry::Object(o, epoch)) = self.cache.get(&Slot::Object(primary, variant)) {
                if o.key == key_text && &o.vary == names && epoch == index.epoch {
                    return Lookup::Hit(o);
                }
            }
        }
        Lookup::VaryMiss(index.names.last().cloned().unwrap_or_default())
    }

    /// Stores an object as the variant selected by `request` headers (the
    /// request that produced it), replacing any previous one.
    pub fn insert(
        &self,
        primary: Digest,
        request: &http::HeaderMap,
        obj: Arc<StoredObject>,
    ) -> Result<(), InsertError> {
        if obj.weight() > self.max_object {
            self.stats
                .rejected_too_large
                .fetch_add(1, Ordering::Relaxed);
            return Err(InsertError::TooLarge);
        }
        let variant = obj.vary.variant(request);
        let _guard = self.index_lock.lock();
        let epoch = if obj.vary.is_empty() {
            // A key that stops varying: forget the old variants.
            self.remove_index(primary);
            0
        } else {
            self.cache.remove(&Slot::Object(primary, Digest(0)));
            let mut index = match self.cache.get(&Slot::Index(primary)) {
                Some(Entry::Index(i)) => (*i).clone(),
                _ => VariantIndex {
                    epoch: self.next_epoch.fetch_add(1, Ordering::Relaxed),
                    ..VariantIndex::default()
                },
            };
            index.names.retain(|n| n != &obj.vary);
            index.names.push(obj.vary.clone());
            if !index.variants.contains(&variant) {
                if index.variants.len() >= MAX_VARIANTS {
                    index.variants.remove(0);
                }
                index.variants.push(variant);
            }
            let epoch = index.epoch;
            self.cache
                .insert(Slot::Index(primary), Entry::Index(Arc::new(index)));
            epoch
        };
        self.cache
            .insert(Slot::Object(primary, variant), Entry::Object(obj, epoch));
        self.stats.inserted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Replaces `old` with its updated copy (after a 304), only if `old` is
    /// still the stored variant: a newer response or an invalidation that
    /// came meanwhile wins.
    pub fn update(
        &self,
        primary: Digest,
        request: &http::HeaderMap,
        old: &Arc<StoredObject>,
        obj: Arc<StoredObject>,
    ) -> bool {
        let variant = obj.vary.variant(request);
        let slot = Slot::Object(primary, variant);
        let _guard = self.index_lock.lock();
        if let Some(Entry::Object(current, epoch)) = self.cache.get(&slot) {
            if Arc::ptr_eq(&current, old) && obj.weight() <= self.max_object {
                self.cache.insert(slot, Entry::Object(obj, epoch));
                return true;
            }
        }
        false
    }

    /// Removes every variant stored under `primary`. Returns how many objects went.
    pub fn remove_all(&self, primary: Digest) -> usize {
        let _guard = self.index_lock.lock();
        let mut n = usize::from(
            self.cache
                .remove(&Slot::Object(primary, Digest(0)))
                .is_some(),
        );
        n += self.remove_index(primary);
        n
    }

    /// True when an object or a variant index of `primary` is held.
    pub fn holds(&self, primary: Digest) -> bool {
        self.cache.contains_key(&Slot::Object(primary, Digest(0)))
            || self.cache.contains_key(&Slot::Index(primary))
    }

    /// Replaces every stored variant of `primary` with a copy made stale
    /// at `now` (a soft purge). Returns how many objects.
    pub fn mark_stale(&self, primary: Digest, now: std::time::SystemTime) -> usize {
        let _guard = self.index_lock.lock();
        let mut slots = vec![Slot::Object(primary, Digest(0))];
        if let Some(Entry::Index(index)) = self.cache.get(&Slot::Index(primary)) {
            slots.extend(index.variants.iter().map(|v| Slot::Object(primary, *v)));
        }
        let mut n = 0;
        for slot in slots {
            if let Some(Entry::Object(o, epoch)) = self.cache.get(&slot) {
                let stale = o.with_headers(
                    o.headers.clone(),
                    o.times.made_stale(now),
                    o.lifetime_source,
                    o.rules,
                );
                self.cache
                    .insert(slot, Entry::Object(Arc::new(stale), epoch));
                n += 1;
            }
        }
        n
    }

    /// Removes only the variant index of a key, as an eviction could.
    #[doc(hidden)]
    pub fn remove_index_for_tests(&self, primary: Digest) {
        self.cache.remove(&Slot::Index(primary));
    }

    fn remove_index(&self, primary: Digest) -> usize {
        let Some((_, Entry::Index(index))) = self.cache.remove(&Slot::Index(primary)) else {
            return 0;
        };
        index
            .variants
            .iter()
            .filter(|v| self.cache.remove(&Slot::Object(primary, **v)).is_some())
            .count()
    }

    /// Bytes currently held (never more than [`MemoryStore::capacity`]).
    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }

    /// The byte limit.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The largest object weight that will be admitted.
    pub fn max_object(&self) -> u64 {
        self.max_object
    }

    /// Number of entries (objects and indexes).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The tier's counters.
    pub fn stats(&self) -> &MemoryStats {
        &self.stats
    }
}
