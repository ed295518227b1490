//! A new object's way into a zone: placed, reserved, its writer started,
//! published.
//!
//! ## Lifecycle
//!
//! [`DiskZone::writer`] (refused while the loader runs, or for a body known
//! to be too large) chooses a directory ([`super::dirs`]), reserves room
//! (evicting, possibly reusing a victim's file: [`super::space`]) and
//! creates `<id>-<serial>.tmp`, all in one pool operation that also builds
//! the [`DiskWriter`], so a caller that stops waiting drops a writer that
//! removes the file and gives the bytes back. The writer
//! ([`super::super::writer`]) renames the finished file to its final name
//! and calls [`DiskZone::publish`], which indexes it in place of any older
//! copy (and of the variants a new `Vary` set drops), whose files go.
//!
//! ## Locking
//!
//! The index lock is held for the publish's map updates; the replaced
//! files are unlinked after it is released.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use hoard_policy::vary::VaryNames;

use super::file::make_parent;
use super::space::Victims;
use super::DiskZone;
use crate::disk::index::{object_id, on_disk, Entry};
use crate::disk::writer::DiskWriter;
use crate::events::StoreEvent;
use crate::format::{BLOCK, PREFIX_LEN};
use crate::io::IoKind;

impl DiskZone {
    /// Starts writing a new object for `primary` / `variant`; `None` while
    /// the loader runs, when the body is known to be too large, or when no
    /// directory can take it (the fill goes on, uncached here).
    pub async fn writer(
        self: &Arc<Self>,
        primary: u128,
        variant: u128,
        expected_len: Option<u64>,
        head_hint: usize,
    ) -> Option<DiskWriter> {
        if expected_len.is_some_and(|l| l > self.cfg.max_object) {
            return None;
        }
        if self.loading() {
            // The byte account covers every file only once the loader is
            // done: until then new objects stay out of this zone.
            return None;
        }
        let id = object_id(primary, variant);
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let slot_len = crate::format::slot_len_for(head_hint);
        let zone = self.clone();
        self.io
            .run(IoKind::Write, move || {
                let Some(dir) = zone.choose_dir(id) else {
                    return Ok(None);
                };
                let data = PREFIX_LEN + 2 * u64::from(slot_len);
                let first = on_disk(
                    data + expected_len.map_or(256 << 10, |l| l + 8 * l.div_ceil(BLOCK) + 8),
                );
                let Some(placed) = zone.reserve(first, dir, Victims::Reuse { id, serial }) else {
                    zone.event(StoreEvent::WriteAbandoned);
                    return Ok(None);
                };
                let dir = placed.dir;
                let tmp = zone.path(dir, id, serial).with_extension("tmp");
                let recycled = placed.file.is_some();
                let created = match placed.file {
                    Some(f) => Ok(f),
                    None => make_parent(&tmp, zone.cfg.durability.syncs())
                        .and_then(|()| File::create_new(&tmp)),
                };
                let first = placed.reserved;
                match created {
                    // Built here: if the caller stopped waiting, dropping the
                    // writer removes the file and gives the bytes back.
                    Ok(f) => Ok(Some(DiskWriter::new(
                        zone.clone(),
                        primary,
                        variant,
                        id,
                        dir,
                        serial,
                        slot_len,
                        f,
                        tmp,
                        first,
                        recycled,
                    ))),
                    Err(e) => {
                        zone.index.lock().release(first);
                        zone.dir_failed(dir, &e);
                        Ok(None)
                    }
                }
            })
            .await
            .ok()
            .flatten()
    }

    /// Publishes a finished file (already renamed to its final name): the
    /// index entry replaces any older copy, whose file goes.
    pub(crate) fn publish(
        &self,
        primary: u128,
        id: u128,
        dir: u8,
        serial: u64,
        bytes: u64,
        vary: &VaryNames,
    ) {
        let now = self.now_secs();
        let mut gone = Vec::new();
        {
            let mut ix = self.index.lock();
            let entry = Entry {
                serial,
                blocks: (bytes / 4096) as u32,
                atime: now,
                dir,
                referenced: false,
                hits: 0,
            };
            if let Some(old) = ix.insert(id, entry) {
                self.open.remove(&id);
                self.account_dir(&old, false);
                gone.push((self.path(old.dir, id, old.serial), old.bytes()));
            }
            self.account_dir(&entry, true);
            let dropped = ix.add_variant(primary, vary, id);
            for v in dropped {
                if v != id {
                    gone.extend(self.take(&mut ix, v));
                }
            }
            if !vary.is_empty() {
                gone.extend(self.take(&mut ix, primary));
            }
        }
        self.event(StoreEvent::DiskStored);
        self.unlink_later(gone);
    }
}
