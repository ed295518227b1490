//! Near-cache admission: which copies of other members' objects this node
//! keeps.
//!
//! ## Model
//!
//! A node that forwards a miss to the key's owner streams the owner's
//! answer to its clients; whether it also keeps a copy (in the store's near
//! tier, a memory tier with a byte limit of its own) is decided here, by
//! how often the key was forwarded lately. One count-min sketch ([`DEPTH`]
//! rows of 4-bit counters, as TinyLFU) estimates each key's count; a copy
//! is kept once the key has been forwarded `admit_after` times (default 2:
//! a key asked for once is never copied, a key asked for again is). Every
//! `10 × width` forwards all counters are halved, so the counts follow
//! what is hot now, not what was hot an hour ago.
//!
//! So a hot key costs its owner about `admit_after` requests per near
//! copy's lifetime per node, instead of every request; a scan of one-hit
//! keys through a non-owner never displaces its near copies.
//!
//! ## Locking
//!
//! None: counters are relaxed atomics. Two forwards of one key racing may
//! both see the count before the other's increment; admission is an
//! estimate anyway.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use xxhash_rust::xxh3::xxh3_128;

/// Rows of the sketch.
pub const DEPTH: usize = 4;
/// Largest count a counter holds.
const MAX_COUNT: u8 = 15;

/// The admission sketch. See the module docs.
#[derive(Debug)]
pub struct Admission {
    counters: Box<[AtomicU8]>,
    /// `width - 1` (the width is a power of two).
    mask: usize,
    /// Forwards since the last halving.
    seen: AtomicU32,
    halve_after: u32,
    admit_after: u8,
}

impl Admission {
    /// A sketch `width` counters wide (rounded up to a power of two) that
    /// admits a key on its `admit_after`th forward (1: every time).
    pub fn new(width: usize, admit_after: u32) -> Admission {
        let width = width.next_power_of_two().max(64);
        Admission {
            counters: (0..DEPTH * width).map(|_| AtomicU8::new(0)).collect(),
            mask: width - 1,
            seen: AtomicU32::new(0),
            halve_after: (10 * width) as u32,
            admit_after: admit_after.clamp(1, MAX_COUNT as u32) as u8,
        }
    }

    /// Counts one forward of `key`; true when a copy of the answer should
    /// be kept.
    pub fn record(&self, key: &[u8]) -> bool {
        if self.admit_after == 1 {
            return true;
        }
        let estimate = self
            .cells(key)
            .map(|c| {
                c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    (v < MAX_COUNT).then_some(v + 1)
                })
                .map_or(MAX_COUNT, |v| v + 1)
            })
            .min()
            .unwrap_or(0);
        if self.seen.fetch_add(1, Ordering::Relaxed) + 1 >= self.halve_after {
            self.seen.store(0, Ordering::Relaxed);
            self.halve();
        }
        estimate >= self.admit_after
    }

    /// The estimated count of `key`.
    pub fn estimate(&self, key: &[u8]) -> u8 {
        self.cells(key)
            .map(|c| c.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// The counter of `key` in each row (double hashing from one 128-bit
    /// hash).
    fn cells<'a>(&'a self, key: &[u8]) -> impl Iterator<Item = &'a AtomicU8> + 'a {
        let h = xxh3_128(key);
        let (a, b) = (h as u64, (h >> 64) as u64 | 1);
        let width = self.mask + 1;
        (0..DEPTH).map(move |row| {
            let i = (a.wrapping_add(b.wrapping_mul(row as u64)) as usize) & self.mask;
            &self.counters[row * width + i]
        })
    }

    /// Halves every counter (aging).
    fn halve(&self) {
        for c in self.counters.iter() {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v / 2));
        }
    }

    /// Bytes the sketch takes.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_admitted_on_its_second_forward() {
        let a = Admission::new(4096, 2);
        assert!(!a.record(b"k1"));
        assert!(a.record(b"k1"));
        assert!(a.record(b"k1"));
        assert!(!a.record(b"k2"));
    }

    #[test]
    fn admit_after_one_admits_everything() {
        let a = Admission::new(64, 1);
        assert!(a.record(b"once"));
    }

    #[test]
    fn one_hit_keys_are_rarely_admitted() {
        // 20,000 distinct keys through a sketch of the size a node uses: a
        // key is admitted only if all four of its counters collide with
        // others'.
        let a = Admission::new(64 << 10, 2);
        let admitted = (0..20_000u32)
            .filter(|i| a.record(format!("/scan/{i}").as_bytes()))
            .count();
        assert!(admitted < 200, "{admitted} one-hit keys admitted");
    }

    #[test]
    fn counts_age() {
        let a = Admission::new(64, 4);
        for _ in 0..3 {
            a.record(b"hot");
        }
        assert_eq!(a.estimate(b"hot"), 3);
        a.halve();
        assert_eq!(a.estimate(b"hot"), 1);
        // The sketch halves by itself every 10 x width forwards.
        for i in 0..(a.halve_after - 4) {
            a.record(&i.to_le_bytes());
        }
        assert_eq!(a.seen.load(Ordering::Relaxed), a.halve_after - 1);
        a.record(b"one more");
        assert_eq!(a.seen.load(Ordering::Relaxed), 0);
    }
}
