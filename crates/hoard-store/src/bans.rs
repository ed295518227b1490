//! Bans: purges applied lazily, at lookup and by a background sweep.
//!
//! ## Model
//!
//! A ban is a selector (a regular expression over the path), `soft`, and
//! the time it was added. From the moment [`crate::store::Store::ban`]
//! adds it:
//!
//! * **Lookups**: a hit the ban selects whose request was sent before the
//!   ban's time is removed and answered as a miss (soft: served as stale,
//!   so it is revalidated) — [`Bans::check`].
//! * **Fills racing it**: a fill that started before the ban and stores
//!   after it stores nothing (soft: stores it stale), as for every purge:
//!   the ban is in the catalogue's purge log ([`crate::catalog`]).
//! * **The sweep**: the keys the catalogue selected when the ban was added
//!   are removed (or made stale) in the background, except keys stored
//!   again since (their new copies are not older than the ban; their older
//!   variants, if any, are caught at lookup). When it is done, no object
//!   older than the ban that the ban selects is left, so the ban is
//!   dropped: the list holds only bans whose sweep is still running.
//!
//! ## Bound
//!
//! At most [`Bans::max`] bans are pending; one more is refused
//! ([`BansFull`]) and the caller says so (429). A ban costs its selector
//! and the list of keys its sweep has yet to visit.
//!
//! ## Test gate
//!
//! [`Bans::hold_sweeps`] holds every sweep before it starts (tests only
//! use it: that is how they see the lazy check and the bound at work).
//!
//! ## Locking
//!
//! One `parking_lot::Mutex` around the list, never held across an await.
//! A lookup with no ban pending pays one relaxed load.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

use http::HeaderMap;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::catalog::Selector;

/// Pending bans allowed by default.
pub const DEFAULT_MAX_BANS: usize = 64;

/// One ban.
#[derive(Debug, Clone)]
pub struct Ban {
    /// Its number, from 1, for logs.
    pub id: u64,
    /// What it selects.
    pub selector: Selector,
    /// Make stale instead of removing.
    pub soft: bool,
    /// When it was added: objects whose request was sent before are banned.
    pub at: SystemTime,
}

/// What a lookup must do with a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Banned {
    /// A hard ban selects it: remove it, answer a miss.
    Remove,
    /// Only soft bans select it: treat it as stale from this time on.
    Stale(SystemTime),
}

/// The list is full: the ban was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BansFull {
    /// The bound it hit.
    pub max: usize,
}

impl std::fmt::Display for BansFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bans are pending (the most allowed); try again when their sweeps are done",
            self.max
        )
    }
}

/// The pending bans. See the module docs.
#[derive(Debug)]
pub struct Bans {
    max: AtomicUsize,
    pending: AtomicUsize,
    list: Mutex<Vec<Ban>>,
    next_id: AtomicU64,
    hold: watch::Sender<bool>,
}

impl Default for Bans {
    fn default() -> Self {
        Bans {
            max: AtomicUsize::new(DEFAULT_MAX_BANS),
            pending: AtomicUsize::new(0),
            list: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            hold: watch::Sender::new(false),
        }
    }
}

impl Bans {
    /// The pending bans, oldest first.
    pub fn list(&self) -> Vec<Ban> {
        self.list.lock().clone()
    }

    /// Sets how many bans may be pending (at least 1).
    pub fn set_max(&self, max: usize) {
        self.max.store(max.max(1), Ordering::Relaxed);
    }

    /// How many bans may be pending.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Bans pending now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Adds a ban, unless [`Bans::max`] are pending.
    ///
    /// # Errors
    /// [`BansFull`] when the list is full.
    pub fn add(&self, selector: Selector, soft: bool, at: SystemTime) -> Result<Ban, BansFull> {
        let mut list = self.list.lock();
        let max = self.max();
        if list.len() >= max {
            return Err(BansFull { max });
        }
        let ban = Ban {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            selector,
            soft,
            at,
        };
        list.push(ban.clone());
        self.pending.store(list.len(), Ordering::Relaxed);
        Ok(ban)
    }

    /// Drops ban `id` (its sweep is done).
    pub fn done(&self, id: u64) {
        let mut list = self.list.lock();
        list.retain(|b| b.id != id);
        self.pending.store(list.len(), Ordering::Relaxed);
    }

    /// What a lookup must do with a hit of key text `key` and response
    /// fields `headers` whose request was sent at `request_time`; `None`
    /// when no pending ban selects it.
    #[inline]
    pub fn check(
        &self,
        key: &str,
        headers: &HeaderMap,
        request_time: SystemTime,
    ) -> Option<Banned> {
        if self.pending.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let list = self.list.lock();
        let mut out = None;
        for b in list.iter().filter(|b| request_time < b.at) {
            if b.selector.selects(key, headers) {
                if !b.soft {
                    return Some(Banned::Remove);
                }
                out = Some(Banned::Stale(b.at));
            }
        }
        out
    }

    /// Holds every sweep before it starts (`true`), or lets them go.
    /// Tests only use it.
    pub fn hold_sweeps(&self, on: bool) {
        self.hold.send_replace(on);
    }

    /// Waits while sweeps are held.
    pub async fn sweep_allowed(&self) {
        let mut rx = self.hold.subscribe();
        let _ = rx.wait_for(|held| !*held).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::PathRegex;
    use std::time::Duration;

    fn regex(s: &str) -> Selector {
        Selector::Regex(PathRegex::new(s).unwrap())
    }

    #[test]
    fn bounded_and_checked_by_time() {
        let bans = Bans::default();
        bans.set_max(2);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let h = HeaderMap::new();
        assert_eq!(bans.check("http|a|/img/1.png", &h, t0), None);
        let b1 = bans.add(regex(r"^/img/.*\.png$"), false, t0).unwrap();
        bans.add(regex("^/soft/"), true, t0).unwrap();
        assert_eq!(
            bans.add(regex("^/x"), false, t0).unwrap_err(),
            BansFull { max: 2 }
        );
        let before = t0 - Duration::from_secs(1);
        assert_eq!(
            bans.check("http|a|/img/1.png?v=2", &h, before),
            Some(Banned::Remove)
        );
        // Fetched at or after the ban: not banned.
        assert_eq!(bans.check("http|a|/img/1.png", &h, t0), None);
        assert_eq!(bans.check("http|a|/img/1.jpg", &h, before), None);
        assert_eq!(
            bans.check("http|a|/soft/a", &h, before),
            Some(Banned::Stale(t0))
        );
        bans.done(b1.id);
        assert_eq!(bans.pending(), 1);
        assert_eq!(bans.check("http|a|/img/1.png", &h, before), None);
    }
}
