//! Hit-for-pass (Varnish's hit-for-miss): remembering keys whose responses
//! proved uncacheable, so requests for them go to the origin in parallel
//! instead of queueing behind a fill that will not help them.
//!
//! A mark lives for the route's `hit_for_pass` duration (default 120 s) on the
//! proxy clock. A request for a marked key fetches on its own; if its response
//! turns out storable after all, it is stored and the mark is cleared.
//!
//! The table is bounded (S3-FIFO over entry count, 64 Ki marks), so a flood of
//! uncacheable URLs cannot grow it without limit; losing a mark only costs one
//! coalesced fill.

use std::time::SystemTime;

use hoard_policy::key::Digest;
use quick_cache::sync::Cache;

/// The hit-for-pass marks. See the module docs.
#[derive(Debug)]
pub struct HitForPass {
    marks: Cache<Digest, SystemTime>,
}

impl Default for HitForPass {
    fn default() -> Self {
        HitForPass {
            marks: Cache::new(64 * 1024),
        }
    }
}

impl HitForPass {
    /// Marks `key` uncacheable until `until`.
    pub fn mark(&self, key: Digest, until: SystemTime) {
        self.marks.insert(key, until);
    }

    /// Clears the mark of `key` (a storable response arrived).
    pub fn clear(&self, key: Digest) {
        self.marks.remove(&key);
    }

    /// True while `key` is marked at `now`.
    pub fn is_marked(&self, key: Digest, now: SystemTime) -> bool {
        match self.marks.get(&key) {
            Some(until) if until > now => true,
            Some(_) => {
                self.marks.remove(&key);
                false
            }
            None => false,
        }
    }
}
