//! Rewriting a stored object's head in place: after a 304, and for a soft
//! purge.
//!
//! ## Model
//!
//! A file has two head slots; the one in use has the higher generation
//! among those written by the file's own write ([`crate::format`]).
//! An update writes the new head into the *other* slot with the next
//! generation, so a torn write leaves the old head valid, and the body is
//! never touched. The slot in use is read from the file itself, never from
//! the caller's [`DiskRef`]. A head that outgrew its slot, or a slot area
//! that no longer checks, removes the object instead. Under `durability =
//! "power"` the file is synced before the rewrite counts.
//!
//! A 304's rewrite ([`DiskZone::refresh_head`]) is checked against the
//! purges since its request left, under the catalogue's admission gate
//! with the write: a soft purge that came between makes the rewrite not
//! happen (the purge's own stale head stays), and the purge's rewrite can
//! never be overwritten by a 304 that it did not see.
//!
//! ## Locking
//!
//! `head_epoch` is bumped before and after the write and the open-file
//! cache entry dropped both times: a lookup that opened the file meanwhile
//! does not cache a head that may be the old one ([`super::lookup`]).

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::{DiskZone, OpenObject};
use crate::catalog::Raced;
use crate::events::StoreEvent;
use crate::format::{encode_slot, pick_slot, Head, Reject, PREFIX_LEN};
use crate::io::IoKind;
use crate::object::DiskRef;

impl DiskZone {
    /// Where an open object's file and current head are.
    pub(super) fn disk_ref(&self, id: u128, serial: u64, open: &OpenObject) -> DiskRef {
        DiskRef {
            zone: self.number,
            id,
            serial,
            slot: open.slot,
            generation: open.generation,
            slot_len: open.prefix.slot_len,
        }
    }

    /// True when `r` is still the zone's copy of its object and its head
    /// is still the one `r` names (no 304 rewrote it). A blocking read of
    /// the head slots: call it on the pool. (A head rewrite that starts
    /// after this check writes to a file about to be replaced: its refresh
    /// is lost and the object revalidated sooner, never served wrong.)
    pub(crate) fn is_current_head(&self, r: DiskRef) -> bool {
        let Some(dir) = self
            .index
            .lock()
            .map
            .get(&r.id)
            .filter(|e| e.serial == r.serial)
            .map(|e| e.dir)
        else {
            return false;
        };
        let read = || -> io::Result<u64> {
            let f = fs::File::open(self.path(dir, r.id, r.serial))?;
            let mut area = vec![0u8; 2 * r.slot_len as usize];
            f.read_exact_at(&mut area, PREFIX_LEN)?;
            pick_slot(&area, r.slot_len, r.serial)
                .map(|s| s.generation)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        read().is_ok_and(|g| g == r.generation)
    }

    /// After a 304: writes the new head into the slot not in use, with the
    /// next generation (the body is not touched). The slot in use is read
    /// from the file itself, so an update never overwrites it whatever the
    /// caller's copy of the object says. A head that outgrew its slot
    /// removes the object instead. True when the new head is written.
    pub async fn update_head(&self, r: DiskRef, head: &Head) -> bool {
        self.rewrite_head(r, head, None).await == Rewrite::Written
    }

    /// After a 304 whose request left at purge epoch `since` (the
    /// catalogue's): as [`DiskZone::update_head`], unless a purge since
    /// then selects the object (its key, or the tags of `headers` or of
    /// `head`), checked under the admission gate with the write.
    pub async fn refresh_head(
        &self,
        r: DiskRef,
        head: &Head,
        since: u64,
        headers: &http::HeaderMap,
    ) -> Rewrite {
        self.rewrite_head(r, head, Some((since, headers.clone())))
            .await
    }

    async fn rewrite_head(
        &self,
        r: DiskRef,
        head: &Head,
        since: Option<(u64, http::HeaderMap)>,
    ) -> Rewrite {
        let Some(dir) = self
            .index
            .lock()
            .map
            .get(&r.id)
            .filter(|e| e.serial == r.serial)
            .map(|e| e.dir)
        else {
            return Rewrite::Gone;
        };
        let raced = since.map(|(epoch, old)| (epoch, old, head.key.clone(), head.headers.clone()));
        let (catalog, syncs) = (self.catalog.clone(), self.cfg.durability.syncs());
        let head = head.encode();
        let path = self.path(dir, r.id, r.serial);
        let (slot_len, serial) = (r.slot_len, r.serial);
        // Heads read from now on are not cached until the rewrite is done.
        self.head_epoch.fetch_add(1, Ordering::AcqRel);
        self.open.remove(&r.id);
        let written = self
            .io
            .run(IoKind::Write, move || {
                // Held from the purge check to the write: a purge's
                // selection (exclusive) comes wholly before or after both.
                let _gate = raced.is_some().then(|| catalog.admit());
                if let Some((epoch, old, key, new)) = &raced {
                    let purged =
                        |h: &http::HeaderMap| catalog.purged_since(*epoch, key, h, Raced::Hard);
                    if purged(old) != Raced::No || purged(new) != Raced::No {
                        return Ok(Rewrite::Purged);
                    }
                }
                let f = fs::OpenOptions::new().read(true).write(true).open(&path)?;
                let mut area = vec![0u8; 2 * slot_len as usize];
                f.read_exact_at(&mut area, PREFIX_LEN)?;
                let current = pick_slot(&area, slot_len, serial)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                let Some(slot) = encode_slot(serial, current.generation + 1, &head, slot_len)
                else {
                    return Ok(Rewrite::TooLarge);
                };
                let spare = u64::from(1 - current.index.min(1));
                f.write_all_at(&slot, PREFIX_LEN + spare * u64::from(slot_len))?;
                if syncs {
                    f.sync_data()?;
                }
                Ok(Rewrite::Written)
            })
            .await;
        self.head_epoch.fetch_add(1, Ordering::AcqRel);
        self.open.remove(&r.id);
        match written {
            Ok(Rewrite::TooLarge) => {
                self.forget(r.id, r.serial, 1);
                return Rewrite::TooLarge;
            }
            Ok(done) => {
                if done == Rewrite::Written && syncs {
                    self.event(StoreEvent::Synced);
                }
                return done;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                self.event(StoreEvent::Rejected(Reject::BadHead));
                self.forget(r.id, r.serial, 1);
            }
            Err(e) => self.dir_failed(dir, &e),
        }
        Rewrite::Gone
    }
}

/// What became of a head rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// The new head is in place.
    Written,
    /// A purge since the request left selects the object: nothing written.
    Purged,
    /// The new head outgrew its slot: the object was removed.
    TooLarge,
    /// The object is no longer stored (or its file failed): nothing written.
    Gone,
}

impl Rewrite {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Rewrite::Written => "written",
            Rewrite::Purged => "purged",
            Rewrite::TooLarge => "too-large",
            Rewrite::Gone => "gone",
        }
    }
}
