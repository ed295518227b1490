//! Purges, invalidations and bans: what goes out of the store by a
//! selector rather than by a new version.
//!
//! A purge or an invalidation selects its keys in the catalogue (which
//! joins the purge log, so a fill that started before stores nothing, see
//! [`crate::catalog`]) and then removes them from every tier, or with
//! `soft` makes them stale. A ban (see [`crate::bans`]) is a purge applied
//! lazily: checked at each hit while it is pending (`Store::lookup`) and
//! swept here in the background, sparing keys stored again since it named
//! them. Selecting and unlinking run on the blocking pool, never on the
//! serving threads.

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::key::Digest;

use super::Store;
use crate::bans::{Ban, Bans, BansFull};
use crate::catalog::Selector;
use crate::events::StoreEvent;

impl Store {
    /// Invalidates one key (RFC 9111 §4.4, after an unsafe method): its
    /// objects go from every tier, and a fill of it that started before
    /// stores nothing (it is a purge of that exact key, see
    /// [`crate::catalog`]). Returns how many objects went. The selection
    /// waits for the admission gate: it runs on the blocking pool, as a
    /// purge's does, never on the serving threads.
    pub async fn invalidate(self: &Arc<Self>, primary: Digest, key_text: &str) -> usize {
        let me = self.clone();
        let key = Selector::Key(key_text.to_string());
        tokio::task::spawn_blocking(move || {
            me.catalog.select(&key, false);
            me.remove_all(primary)
        })
        .await
        .unwrap_or(0)
    }

    /// Purges what `selector` selects, in every tier: removes the objects,
    /// or with `soft` makes them stale at `now` (they stay usable under
    /// `stale-while-revalidate` and `stale-if-error`). Returns how many
    /// objects were affected. Removal runs off the serving threads, and
    /// the files are unlinked before it returns.
    pub async fn purge(
        self: &Arc<Self>,
        selector: &Selector,
        soft: bool,
        now: SystemTime,
    ) -> usize {
        // Selecting waits for stores under the admission gate (a disk
        // publish renames a file there): off the serving threads.
        let me = self.clone();
        let sel = selector.clone();
        let keys = tokio::task::spawn_blocking(move || me.catalog.select(&sel, soft))
            .await
            .unwrap_or_default();
        if keys.is_empty() {
            return 0;
        }
        if soft {
            let mut n = 0;
            for p in keys {
                n += self.mark_stale(Digest(p), now).await;
            }
            return n;
        }
        let me = self.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let n: usize = keys.iter().map(|p| me.purge_key(Digest(*p))).sum();
            me.catalog.forget(&keys);
            n
        })
        .await;
        removed.unwrap_or(0)
    }

    /// Removes every variant of `primary` from every tier, unlinking disk
    /// files before it returns (a blocking call). Returns how many objects.
    fn purge_key(&self, primary: Digest) -> usize {
        let in_memory = self.remove_in_memory(primary);
        let on_disk: usize = self.zones.iter().map(|z| z.purge(primary.0)).sum();
        in_memory.max(on_disk)
    }

    /// The pending bans.
    pub fn bans(&self) -> &Bans {
        &self.bans
    }

    /// Adds a ban (a purge applied lazily, see [`crate::bans`]) at `now`
    /// and starts its sweep in the background; `swept` is told how many
    /// objects the sweep removed (or made stale) when it is done.
    ///
    /// # Errors
    /// [`BansFull`] when [`Bans::max`] bans are pending (nothing changes).
    pub async fn ban(
        self: &Arc<Self>,
        selector: &Selector,
        soft: bool,
        now: SystemTime,
        swept: impl FnOnce(&Ban, usize) + Send + 'static,
    ) -> Result<Ban, BansFull> {
        let ban = self.bans.add(selector.clone(), soft, now)?;
        // Joins the purge log (fills racing it) and names the keys stored
        // now, each with its stamp: a key stored again later is left alone.
        let me = self.clone();
        let sel = selector.clone();
        let keys = tokio::task::spawn_blocking(move || {
            let keys = me.catalog.select(&sel, soft);
            keys.into_iter()
                .filter_map(|p| me.catalog.stamp(p).map(|s| (p, s)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let me = self.clone();
        let b = ban.clone();
        tokio::spawn(async move {
            me.bans.sweep_allowed().await;
            let n = me.sweep_ban(&b, keys).await;
            me.bans.done(b.id);
            me.events.event("", StoreEvent::BanSwept);
            swept(&b, n);
        });
        Ok(ban)
    }

    /// Removes (or makes stale) the objects of `keys` whose stamp has not
    /// changed since the ban named them. Returns how many objects.
    async fn sweep_ban(self: &Arc<Self>, ban: &Ban, keys: Vec<(u128, u64)>) -> usize {
        let unchanged = |p: u128, s: u64| self.catalog.stamp(p) == Some(s);
        let mut n = 0;
        if ban.soft {
            for (p, s) in keys {
                if unchanged(p, s) {
                    n += self.mark_stale(Digest(p), ban.at).await;
                }
            }
        } else {
            // In batches on the blocking pool (files are unlinked there).
            for batch in keys.chunks(1024) {
                let me = self.clone();
                let batch = batch.to_vec();
                n += tokio::task::spawn_blocking(move || {
                    let mut n = 0;
                    let mut gone = Vec::new();
                    for (p, s) in batch {
                        if me.catalog.stamp(p) == Some(s) {
                            n += me.purge_key(Digest(p));
                            gone.push(p);
                        }
                    }
                    me.catalog.forget(&gone);
                    n
                })
                .await
                .unwrap_or(0);
            }
        }
        for _ in 0..n {
            self.events.event("", StoreEvent::BannedBySweep);
        }
        n
    }

    /// Makes every stored variant of `primary` stale at `now`, in every
    /// tier. Returns how many objects (a variant in memory and on disk
    /// counts once).
    pub async fn mark_stale(&self, primary: Digest, now: SystemTime) -> usize {
        let in_memory = self
            .memory
            .as_ref()
            .map_or(0, |m| m.mark_stale(primary, now))
            + self.near.as_ref().map_or(0, |n| n.mark_stale(primary, now));
        let mut on_disk = 0;
        for z in &self.zones {
            on_disk += z.mark_stale(primary.0, now).await;
        }
        in_memory.max(on_disk)
    }
}
