//! Who owns a key: weighted rendezvous hashing (highest random weight).
//!
//! Every member gets a score for a key, `-weight / ln(u)` with `u` in
//! (0, 1) drawn from a hash of the key and the member's name; the members
//! in falling score order are the key's choices. The order of the others
//! does not depend on any one member, so when a member leaves (or is down)
//! only its keys move, each to its second choice, and a member that joins
//! takes keys from every other in proportion to its weight (Thaler and
//! Ravishankar; Squid's CARP uses the same idea). Pure: no I/O, no clock.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// One member as the ring sees it.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Its name's hash: the seed of its per-key draw.
    seed: u64,
    /// Relative share of keys (1.0 for equal members).
    weight: f64,
}

impl Slot {
    /// A member named `name` with `weight` (> 0).
    pub fn new(name: &str, weight: f64) -> Slot {
        Slot {
            seed: xxh3_64(name.as_bytes()),
            weight,
        }
    }

    /// Its relative share of keys.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// This member's score for the key whose hash is `key`.
    fn score(&self, key: &[u8]) -> f64 {
        let h = xxh3_64_with_seed(key, self.seed);
        // u in (0, 1): the top 53 bits, never 0 or 1.
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -self.weight / u.ln()
    }
}

/// The members of `slots` for which `up(i)` is true, best first for `key`
/// (indexes into `slots`). If none is up, all of them, best first: a
/// guess beats no answer.
pub fn choices(slots: &[Slot], key: &[u8], up: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut scored: Vec<(f64, usize)> = slots
        .iter()
        .enumerate()
        .filter(|(i, _)| up(*i))
        .map(|(i, s)| (s.score(key), i))
        .collect();
    if scored.is_empty() {
        scored = slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.score(key), i))
            .collect();
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The best member for `key` among those up.
pub fn owner(slots: &[Slot], key: &[u8], up: impl Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for (i, s) in slots.iter().enumerate().filter(|(i, _)| up(*i)) {
        let sc = s.score(key);
        if best.is_none_or(|(b, _)| sc > b) {
            best = Some((sc, i));
        }
    }
    best.map(|(_, i)| i)
        .or_else(|| choices(slots, key, |_| true).first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(names: &[&str]) -> Vec<Slot> {
        names.iter().map(|n| Slot::new(n, 1.0)).collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("http|example.com|/obj/{i}"))
            .collect()
    }

    #[test]
    fn equal_weights_share_keys_within_a_few_percent() {
        let slots = ring(&["n1", "n2", "n3", "n4", "n5"]);
        let mut count = [0usize; 5];
        for k in keys(100_000) {
            count[owner(&slots, k.as_bytes(), |_| true).unwrap()] += 1;
        }
        for c in count {
            let share = c as f64 / 100_000.0;
            assert!((share - 0.2).abs() < 0.01, "share {share} of {count:?}");
        }
    }

    #[test]
    fn weights_set_the_share() {
        let slots = vec![Slot::new("a", 1.0), Slot::new("b", 3.0)];
        let b = keys(100_000)
            .iter()
            .filter(|k| owner(&slots, k.as_bytes(), |_| true) == Some(1))
            .count();
        let share = b as f64 / 100_000.0;
        assert!((share - 0.75).abs() < 0.01, "share {share}");
    }

    #[test]
    fn only_a_leaving_members_keys_move_each_to_its_second_choice() {
        let slots = ring(&["n1", "n2", "n3", "n4"]);
        for k in keys(20_000) {
            let all = choices(&slots, k.as_bytes(), |_| true);
            let without_n3 = owner(&slots, k.as_bytes(), |i| i != 2).unwrap();
            if all[0] == 2 {
                assert_eq!(without_n3, all[1], "{k}");
            } else {
                assert_eq!(without_n3, all[0], "{k}: moved although its owner stayed");
            }
        }
    }

    #[test]
    fn a_joining_member_takes_its_share_from_every_other() {
        let before = ring(&["n1", "n2", "n3"]);
        let after = ring(&["n1", "n2", "n3", "n4"]);
        let (mut moved, mut to_new) = (0, 0);
        for k in keys(40_000) {
            let a = owner(&before, k.as_bytes(), |_| true).unwrap();
            let b = owner(&after, k.as_bytes(), |_| true).unwrap();
            if a != b {
                moved += 1;
                if b == 3 {
                    to_new += 1;
                }
            }
        }
        assert_eq!(moved, to_new, "keys moved between old members");
        let share = moved as f64 / 40_000.0;
        assert!((share - 0.25).abs() < 0.015, "share {share}");
    }

    #[test]
    fn with_every_member_down_the_ranking_is_still_given() {
        let slots = ring(&["n1", "n2"]);
        assert_eq!(choices(&slots, b"k", |_| false).len(), 2);
        assert!(owner(&slots, b"k", |_| false).is_some());
    }
}
