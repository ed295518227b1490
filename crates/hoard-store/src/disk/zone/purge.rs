//! Removing a key's objects from a zone, or marking them stale.
//!
//! ## Model
//!
//! | operation | what goes | when the files go |
//! |---|---|---|
//! | [`DiskZone::purge`] | every variant of a primary key | unlinked before it returns (blocking: once answered, a crash cannot bring them back) |
//! | [`DiskZone::remove_all`] | every variant of a primary key (replaced in another zone, invalidated) | unlinked later on the pool |
//! | [`DiskZone::mark_stale`] | nothing: each head is rewritten with its lifetime ended ([`super::head`]); an object whose head cannot be rewritten is removed instead | — |
//!
//! While the loader runs, a removed primary is also remembered as a
//! tombstone, so that the loader removes its files when it reaches them
//! instead of indexing them.
//!
//! ## Locking
//!
//! Entries are taken out under the index lock; files are unlinked after it
//! is released.

use std::path::PathBuf;
use std::time::SystemTime;

use super::DiskZone;
use crate::disk::index::Entry;

impl DiskZone {
    /// Removes every variant of `primary` and unlinks their files on this
    /// thread before returning (a purge: once answered, a crash cannot bring
    /// them back). Call it off the serving threads. Returns how many objects.
    pub fn purge(&self, primary: u128) -> usize {
        let gone = self.take_all(primary);
        let n = gone.len();
        self.unlink_now(gone);
        n
    }

    /// Removes every variant of `primary`. Returns how many objects went.
    pub fn remove_all(&self, primary: u128) -> usize {
        let gone = self.take_all(primary);
        let n = gone.len();
        self.unlink_later(gone);
        n
    }

    /// Takes every variant of `primary` out of the index; returns their files.
    fn take_all(&self, primary: u128) -> Vec<(PathBuf, u64)> {
        if self.loading() {
            self.tombstones.lock().insert(primary);
        }
        let gone = {
            let mut ix = self.index.lock();
            let mut ids = vec![primary];
            if let Some(v) = ix.varies.remove(&primary) {
                ids.extend(v.ids);
            }
            ids.into_iter()
                .filter_map(|id| self.take(&mut ix, id))
                .collect()
        };
        gone
    }

    /// Makes every variant of `primary` stale at `now` (a soft purge): each
    /// head is rewritten with its lifetime ended. Returns how many objects.
    pub async fn mark_stale(&self, primary: u128, now: SystemTime) -> usize {
        let ids: Vec<(u128, Entry)> = {
            let ix = self.index.lock();
            let mut ids = vec![primary];
            if let Some(v) = ix.varies.get(&primary) {
                ids.extend(v.ids.iter().copied());
            }
            ids.into_iter()
                .filter_map(|id| ix.map.get(&id).map(|e| (id, *e)))
                .collect()
        };
        let mut n = 0;
        for (id, entry) in ids {
            let cached = self.open.get(&id).filter(|o| o.serial == entry.serial);
            let open = match cached {
                Some(o) => Some(o),
                None => self.open_cold(id, entry).await.map(|(o, _)| o),
            };
            let marked = match open {
                Some(open) => {
                    let mut head = open.head.clone();
                    head.times = head.times.made_stale(now);
                    self.update_head(self.disk_ref(id, entry.serial, &open), &head)
                        .await
                }
                None => false,
            };
            if !marked {
                // Its head could not be rewritten (its directory is out of
                // service, the file failed): it goes instead, so that it can
                // never be served fresh after the purge, here or after a
                // restart.
                self.forget(id, entry.serial, 1);
            }
            n += 1;
        }
        n
    }
}
