//! The in-memory index of one disk zone: which objects exist, where, how
//! large, when last used; the variants of keys that vary; and the byte
//! account that keeps the zone under its limit.
//!
//! An object's address outside the zone (kept in its `StoredObject`, given
//! back for a head update) is a [`DiskRef`] (defined in `crate::object`).
//!
//! ## Size
//!
//! One object costs a 16-byte id and a 24-byte [`Entry`] in a hash map
//! (plus hashbrown's control byte and spare capacity), and 16 bytes in the
//! CLOCK queue: about 60 to 90 bytes per object, measured by
//! `bench/disk_index.sh` (nginx keeps about 125 bytes per key). The key text
//! and the response head stay on disk.
//!
//! ## The byte account
//!
//! `used` counts, in 4 KiB units rounded up, every file of the zone that may
//! exist on disk: published objects, reservations of files being written,
//! and evicted files not yet unlinked. A writer reserves before it writes;
//! eviction removes index entries first and their bytes leave the account
//! only after the unlink returned. So the zone's files never add up to more
//! than `max_size`, not even for a moment.
//!
//! ## Eviction
//!
//! CLOCK (second chance): a lookup sets the entry's `referenced` bit; the
//! evictor pops the queue's front, gives a referenced entry another round
//! and evicts the first one that was not used since its last round.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use hoard_policy::vary::VaryNames;

/// Defined with the object that holds it; re-exported here, where disk
/// zones make and use it.
pub use crate::object::DiskRef;

/// Most variants remembered per key.
const MAX_VARIANTS: usize = 256;

/// Rounds a file length up to the 4 KiB blocks it occupies.
pub fn on_disk(len: u64) -> u64 {
    len.div_ceil(4096) * 4096
}

/// The id of one object: the primary digest for a key without `Vary`, else
/// the primary mixed with the variant digest.
pub fn object_id(primary: u128, variant: u128) -> u128 {
    if variant == 0 {
        primary
    } else {
        primary ^ variant.rotate_left(64) ^ 0x9e37_79b9_7f4a_7c15
    }
}

/// Hashes ids, which are already uniformly distributed digests.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64 ^ (n >> 64) as u64;
    }
}

/// A map keyed by object id.
pub type IdMap<V> = HashMap<u128, V, BuildHasherDefault<IdHasher>>;

/// One object on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The write that made the file (also in its name).
    pub serial: u64,
    /// Bytes it occupies, in 4 KiB units.
    pub blocks: u32,
    /// Seconds since the zone started when it was last used.
    pub atime: u32,
    /// Index of its directory in the zone.
    pub dir: u8,
    /// Used since the evictor last passed.
    pub referenced: bool,
    /// Disk hits since it was stored (saturating): the memory tier admits
    /// an object on its second.
    pub hits: u8,
}

impl Entry {
    /// Bytes the file occupies.
    pub fn bytes(&self) -> u64 {
        u64::from(self.blocks) * 4096
    }
}

/// The variants stored for a key that varies.
#[derive(Debug, Clone, Default)]
pub struct Variants {
    /// `Vary` name sets seen, the most recent last.
    pub names: Vec<VaryNames>,
    /// Object ids of the variants.
    pub ids: Vec<u128>,
}

/// The index. Callers hold the zone's lock around every call.
#[derive(Debug, Default)]
pub struct Index {
    /// Objects by id.
    pub map: IdMap<Entry>,
    clock: VecDeque<u128>,
    /// Variants by primary digest, for keys that vary.
    pub varies: IdMap<Variants>,
    /// Accounted bytes (see the module docs).
    pub used: u64,
    /// Objects removed since the variant lists were last compacted.
    removed: usize,
}

impl Index {
    /// Publishes an object. Returns the entry it replaces (whose file the
    /// caller unlinks; its bytes stay accounted until then).
    pub fn insert(&mut self, id: u128, entry: Entry) -> Option<Entry> {
        let old = self.map.insert(id, entry);
        if old.is_none() {
            self.clock.push_back(id);
        }
        old
    }

    /// Removes an object; the caller unlinks its file, then calls [`Index::release`].
    pub fn remove(&mut self, id: u128) -> Option<Entry> {
        let e = self.map.remove(&id);
        self.compact();
        e
    }

    /// Drops CLOCK slots and variant lists of objects that are gone: the
    /// queue once it is twice the map, the lists after as many removals as
    /// there are lists (amortized constant work per removal).
    fn compact(&mut self) {
        let map = &self.map;
        if self.clock.len() > 2 * map.len() + 1024 {
            // Gone ids and duplicates (an id removed and inserted again).
            let mut seen = std::collections::HashSet::with_capacity(map.len());
            self.clock
                .retain(|id| map.contains_key(id) && seen.insert(*id));
        }
        self.removed += 1;
        if !self.varies.is_empty() && self.removed > self.varies.len() + 1024 {
            self.removed = 0;
            self.varies.retain(|_, v| {
                v.ids.retain(|id| map.contains_key(id));
                !v.ids.is_empty()
            });
        }
    }

    /// Records a variant of `primary` with these names; returns the object
    /// ids that must go (variants of a key that stops varying, or of
    /// variants forgotten past the limit).
    pub fn add_variant(&mut self, primary: u128, names: &VaryNames, id: u128) -> Vec<u128> {
        if names.is_empty() {
            return self
                .varies
                .remove(&primary)
                .map(|v| v.ids)
                .unwrap_or_default();
        }
        let v = self.varies.entry(primary).or_default();
        v.names.retain(|n| n != names);
        v.names.push(names.clone());
        let mut gone = Vec::new();
        if !v.ids.contains(&id) {
            if v.ids.len() >= MAX_VARIANTS {
                gone.push(v.ids.remove(0));
            }
            v.ids.push(id);
        }
        gone
    }

    /// Takes bytes into the account.
    pub fn reserve(&mut self, bytes: u64) {
        self.used += bytes;
    }

    /// Gives bytes back to the account.
    pub fn release(&mut self, bytes: u64) {
        debug_assert!(
            self.used >= bytes,
            "invariant: releasing bytes never reserved"
        );
        self.used = self.used.saturating_sub(bytes);
    }

    /// The next object to evict (CLOCK), removed from the index. Its bytes
    /// stay accounted until the caller has unlinked it.
    pub fn pop_victim(&mut self) -> Option<(u128, Entry)> {
        let mut rounds = self.clock.len() * 2 + 1;
        while let Some(id) = self.clock.pop_front() {
            rounds -= 1;
            match self.map.get_mut(&id) {
                None => {}
                Some(e) if e.referenced && rounds > 0 => {
                    e.referenced = false;
                    self.clock.push_back(id);
                }
                Some(_) => {
                    let e = self.map.remove(&id).expect("invariant: entry just seen");
                    self.compact();
                    return Some((id, e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(serial: u64, blocks: u32) -> Entry {
        Entry {
            serial,
            blocks,
            atime: 0,
            dir: 0,
            referenced: false,
            hits: 0,
        }
    }

    #[test]
    fn clock_gives_used_entries_a_second_chance() {
        let mut ix = Index::default();
        for id in 1..=3u128 {
            ix.insert(id, entry(id as u64, 1));
        }
        ix.map.get_mut(&1).unwrap().referenced = true;
        assert_eq!(ix.pop_victim().map(|v| v.0), Some(2));
        assert_eq!(ix.pop_victim().map(|v| v.0), Some(3));
        assert_eq!(ix.pop_victim().map(|v| v.0), Some(1));
        assert_eq!(ix.pop_victim(), None);
    }

    #[test]
    fn removed_entries_are_skipped_and_the_queue_stays_bounded() {
        let mut ix = Index::default();
        for round in 0..10u64 {
            for id in 0..1000u128 {
                ix.insert(id, entry(round, 1));
                ix.remove(id);
            }
        }
        assert!(ix.clock.len() <= 1024 + 1, "queue {}", ix.clock.len());
        assert_eq!(ix.pop_victim(), None);
    }

    #[test]
    fn ids_removed_and_inserted_again_do_not_pile_up() {
        let mut ix = Index::default();
        ix.insert(1, entry(0, 1));
        for round in 0..10_000u64 {
            ix.remove(1);
            ix.insert(1, entry(round, 1));
        }
        assert!(ix.clock.len() <= 1024 + 3, "queue {}", ix.clock.len());
        assert_eq!(ix.pop_victim().map(|v| v.0), Some(1));
        assert_eq!(ix.pop_victim(), None);
    }

    #[test]
    fn a_key_that_stops_varying_drops_its_variants() {
        let mut ix = Index::default();
        let names = VaryNames(vec![http::HeaderName::from_static("accept")]);
        assert!(ix.add_variant(9, &names, 91).is_empty());
        assert!(ix.add_variant(9, &names, 92).is_empty());
        assert_eq!(ix.varies[&9].ids, vec![91, 92]);
        assert_eq!(ix.add_variant(9, &VaryNames::default(), 9), vec![91, 92]);
        assert!(!ix.varies.contains_key(&9));
    }

    #[test]
    fn variant_lists_of_evicted_objects_are_dropped() {
        let mut ix = Index::default();
        let names = VaryNames(vec![http::HeaderName::from_static("accept")]);
        for p in 0..3000u128 {
            ix.add_variant(p, &names, p + 1_000_000);
            ix.insert(p + 1_000_000, entry(0, 1));
        }
        while ix.pop_victim().is_some() {}
        // Churn of objects without Vary: the stale lists go.
        for id in 0..5000u128 {
            ix.insert(id, entry(0, 1));
            ix.remove(id);
        }
        assert!(ix.varies.is_empty(), "variant lists {}", ix.varies.len());
    }

    #[test]
    fn ids_without_variant_are_the_primary() {
        assert_eq!(object_id(5, 0), 5);
        assert_ne!(object_id(5, 1), object_id(5, 2));
        assert_eq!(on_disk(1), 4096);
        assert_eq!(on_disk(8192), 8192);
    }
}
