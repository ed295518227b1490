//! Room in a zone: the byte account, eviction, and the unlinks that give
//! bytes back.
//!
//! ## Model
//!
//! The index's account ([`crate::disk::index`]) counts every file that may
//! exist on disk. A writer reserves before it writes: without evicting when
//! the bytes fit ([`DiskZone::try_reserve`], no I/O), else with
//! [`DiskZone::reserve`], which evicts in CLOCK order until they fit under
//! `max_size` and `min_free`. Evicted and removed entries leave the index
//! at once; their bytes leave the account only when the unlink returned
//! ([`DiskZone::unlink_now`], [`DiskZone::unlink_later`]), or pass to the
//! new object that reuses the file. An object unused for `inactive` is
//! removed by [`DiskZone::sweep_inactive`].
//!
//! [`DiskZone::reserve`] is the one victim loop. Its callers differ only in
//! what its victims may become, the [`Victims`] argument:
//!
//! | caller | [`Victims`] | why |
//! |---|---|---|
//! | a writer starting ([`super::write`]) | `Reuse { id, serial }` | the bytes are a new file: a victim never served from disk and open nowhere may be overwritten in place as that file |
//! | a writer growing ([`crate::disk::writer`]) | `Unlink` | its file exists already |
//! | the loader, done ([`super::load`]) | `Unlink` | no new file: the zone is only evicted down to `max_size` |
//!
//! ## Locking
//!
//! The index lock is held to reserve or to pop victims, never during an
//! unlink, a rename or a `statvfs`. Everything that evicts blocks: call it
//! on the zone's pool.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::file::make_parent;
use super::DiskZone;
use crate::events::StoreEvent;

/// Where a new object's file goes, and the bytes held for it.
pub(crate) struct Placed {
    pub(super) dir: u8,
    pub(super) reserved: u64,
    /// An evicted object's file, renamed to the new temporary name, to be
    /// overwritten in place; `None`: create a new file.
    pub(super) file: Option<File>,
}

/// What a reservation may do with the objects it evicts: the one difference
/// between its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Victims {
    /// Unlink every one. For bytes that do not start a file: a writer
    /// growing the reservation of the file it already has, the loader
    /// evicting a zone down to its `max_size`.
    Unlink,
    /// One may become the file of the new object `id` / `serial` (a writer
    /// starting): renamed to its `.tmp` name and overwritten in place. Only
    /// a victim never served from disk (`hits == 0`) qualifies: the pages
    /// of a file sent with `sendfile` may still sit in a socket's send
    /// queue after its descriptor is closed. Only one open nowhere is kept
    /// ([`crate::disk::lease`]); any other is unlinked.
    Reuse {
        /// The new object's id.
        id: u128,
        /// The new object's write.
        serial: u64,
    },
}

/// An evicted object's file, before it is unlinked or reused.
struct Victim {
    dir: u8,
    path: PathBuf,
    bytes: u64,
    /// Never served from disk (`hits == 0`): may be reused.
    unserved: bool,
}

/// Takes over an evicted object's file as `tmp`: renamed first (so no
/// reader can open it by its old name any more), then kept only if no
/// handle to it is open anywhere. `None`: use a new file.
fn reuse_file(old: &Path, tmp: &Path, sync: bool) -> Option<File> {
    make_parent(tmp, sync).ok()?;
    fs::rename(old, tmp).ok()?;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp)
        .ok()?;
    crate::disk::lease::sole_handle(&f).then_some(f)
}

impl DiskZone {
    /// Takes `bytes` into the account only if they fit without evicting
    /// (no I/O: callable anywhere). Not used with `min_free`, which needs a
    /// `statvfs`.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        if self.cfg.min_free > 0 {
            return false;
        }
        let mut ix = self.index.lock();
        if ix.used + bytes <= self.cfg.max_size {
            ix.reserve(bytes);
            true
        } else {
            false
        }
    }

    fn free_space_ok(&self, dir: &Path, bytes: u64) -> bool {
        if self.cfg.min_free == 0 {
            return true;
        }
        match rustix::fs::statvfs(dir) {
            Ok(s) => s.f_bavail.saturating_mul(s.f_frsize) >= self.cfg.min_free + bytes,
            Err(_) => true,
        }
    }

    /// Takes `bytes` into the account, evicting until they fit under
    /// `max_size` and `min_free` (in `dir`'s file system). Victims are
    /// popped in CLOCK order, up to 64 per round (8 when free space is
    /// short, which only unlinks can fix) under the index lock, then
    /// unlinked on this pool thread after it is released.
    ///
    /// `victims` says whether one of them may become the new object's file
    /// ([`Victims::Reuse`]): then the first victim in service that was
    /// never served from disk (one in `dir` if the round has one) is not
    /// unlinked but renamed to the new object's temporary name and handed
    /// over to be overwritten in place, if nobody has it open
    /// ([`crate::disk::lease`]). Rewriting allocated, cached pages costs a
    /// quarter of what a new file costs (block allocation, journal, page
    /// allocation; see `docs/disk.md`). Its bytes stay in the account and
    /// become part of the new reservation, so the limit holds throughout;
    /// the object then lives in the victim's directory ([`Placed::dir`]).
    ///
    /// `None` at once for more than `max_size`, or when even an emptied
    /// zone has no room (a file taken over is then unlinked). Blocking:
    /// call on the pool.
    pub(crate) fn reserve(&self, bytes: u64, dir: u8, victims: Victims) -> Option<Placed> {
        if bytes > self.cfg.max_size {
            // Could never fit: evicting everything first would only empty the zone.
            return None;
        }
        // A reused victim file: where, its handle, the bytes it holds.
        let mut reused: Option<(u8, File, u64)> = None;
        loop {
            let held = reused.as_ref().map_or(0, |r| r.2);
            let need = bytes.saturating_sub(held);
            let at = reused.as_ref().map_or(dir, |r| r.0);
            let free_ok = self.free_space_ok(&self.dirs[at as usize].path, need);
            let (evicted, candidate) = {
                let mut ix = self.index.lock();
                if free_ok && ix.used + need <= self.cfg.max_size {
                    ix.reserve(need);
                    return Some(match reused {
                        Some((dir, file, held)) => Placed {
                            dir,
                            reserved: held + need,
                            file: Some(file),
                        },
                        None => Placed {
                            dir,
                            reserved: need,
                            file: None,
                        },
                    });
                }
                let mut evicted = Vec::new();
                let mut freed = 0;
                while evicted.len() < 64 && (!free_ok || ix.used - freed + need > self.cfg.max_size)
                {
                    let Some((vid, e)) = ix.pop_victim() else {
                        break;
                    };
                    self.open.remove(&vid);
                    self.account_dir(&e, false);
                    freed += e.bytes();
                    evicted.push(Victim {
                        dir: e.dir,
                        path: self.path(e.dir, vid, e.serial),
                        bytes: e.bytes(),
                        unserved: e.hits == 0,
                    });
                    if !free_ok && evicted.len() >= 8 {
                        break;
                    }
                }
                // Reuse needs free space to be fine already: a reused file
                // frees nothing on the file system.
                // A served file is never a candidate (see `Victims::Reuse`):
                // `sendfile` hands the socket references to the page-cache
                // pages, not copies, so overwriting them in place could
                // change bytes a client has not received yet; an unlinked
                // file's pages stay as they are until the last reference goes.
                let candidate = match victims {
                    Victims::Reuse { .. } if reused.is_none() && free_ok => evicted
                        .iter()
                        .position(|v| v.unserved && v.dir == dir)
                        .or_else(|| {
                            evicted
                                .iter()
                                .position(|v| v.unserved && self.dirs[v.dir as usize].online())
                        })
                        .map(|i| evicted.swap_remove(i)),
                    _ => None,
                };
                (evicted, candidate)
            };
            if evicted.is_empty() && candidate.is_none() {
                if let (Some((at, _, held)), Victims::Reuse { id, serial }) = (&reused, victims) {
                    let tmp = self.path(*at, id, serial).with_extension("tmp");
                    self.unlink_now(vec![(tmp, *held)]);
                }
                return None;
            }
            for _ in 0..evicted.len() + usize::from(candidate.is_some()) {
                self.event(StoreEvent::EvictedSize);
            }
            self.unlink_now(evicted.into_iter().map(|v| (v.path, v.bytes)).collect());
            if let (Some(v), Victims::Reuse { id, serial }) = (candidate, victims) {
                let tmp = self.path(v.dir, id, serial).with_extension("tmp");
                match reuse_file(&v.path, &tmp, self.cfg.durability.syncs()) {
                    Some(f) => {
                        self.event(StoreEvent::DiskRecycled);
                        reused = Some((v.dir, f, v.bytes));
                    }
                    // Open elsewhere, or the rename failed: unlink it as
                    // any victim (whichever name it has now).
                    None => {
                        let gone = if tmp.exists() { tmp } else { v.path };
                        self.unlink_now(vec![(gone, v.bytes)]);
                    }
                }
            }
        }
    }

    /// Removes a writer's temporary file, then gives its reservation back
    /// (blocking: call on the pool). A file that cannot be removed (its
    /// directory failed) keeps its bytes accounted; the loader removes it
    /// at the next start.
    pub(crate) fn discard(&self, tmp: &Path, reserved: u64) {
        match fs::remove_file(tmp) {
            Ok(()) => self.index.lock().release(reserved),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.index.lock().release(reserved),
            Err(e) => {
                tracing::warn!(zone = %self.cfg.name, path = %tmp.display(), error = %e, "disk: temporary file not removed; its bytes stay accounted");
            }
        }
    }

    /// Unlinks files (on the pool), then releases their bytes.
    pub(super) fn unlink_later(&self, files: Vec<(PathBuf, u64)>) {
        if files.is_empty() {
            return;
        }
        let me = self.me.clone();
        self.io.spawn(move || match me.upgrade() {
            Some(z) => z.unlink_now(files),
            // The zone is gone (shut down): the files still go, or a
            // restart would bring back what was removed.
            None => {
                for (path, _) in files {
                    let _ = fs::remove_file(path);
                }
            }
        });
    }

    /// Unlinks files on this (pool) thread, then releases their bytes.
    pub(super) fn unlink_now(&self, files: Vec<(PathBuf, u64)>) {
        let mut freed = 0;
        let gate = self.io.gate_arc();
        // Under `durability = "power"`, the directories of removed files are
        // synced before this returns: a purge stays done after a power loss.
        let mut unlinked_in: Vec<PathBuf> = Vec::new();
        for (path, bytes) in files {
            match gate.unlink_fault().and_then(|()| fs::remove_file(&path)) {
                Ok(()) => {
                    if self.cfg.durability.syncs() {
                        if let Some(dir) = path.parent() {
                            if !unlinked_in.iter().any(|d| d == dir) {
                                unlinked_in.push(dir.to_path_buf());
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    // Still there: its bytes stay accounted, and a tombstone
                    // keeps it out of the index at the next start.
                    tracing::warn!(zone = %self.cfg.name, path = %path.display(), error = %e, "disk: unlink failed");
                    self.event(StoreEvent::DiskError);
                    self.bury(&path);
                    continue;
                }
            }
            freed += bytes;
        }
        for dir in unlinked_in {
            match crate::disk::durability::sync_dir(&dir) {
                Ok(()) => self.event(StoreEvent::Synced),
                Err(e) => {
                    tracing::warn!(zone = %self.cfg.name, dir = %dir.display(), error = %e, "disk: directory not synced after unlinks");
                }
            }
        }
        self.index.lock().release(freed);
    }

    /// Removes objects unused for `inactive`. Returns how many went.
    pub fn sweep_inactive(&self) -> usize {
        let now = self.now_secs();
        let gone: Vec<(PathBuf, u64)> = {
            let mut ix = self.index.lock();
            let old: Vec<u128> = ix
                .map
                .iter()
                .filter(|(_, e)| self.inactive_expired(e, now))
                .map(|(id, _)| *id)
                .collect();
            old.into_iter()
                .filter_map(|id| self.take(&mut ix, id))
                .collect()
        };
        for _ in &gone {
            self.event(StoreEvent::EvictedInactive);
        }
        let n = gone.len();
        self.unlink_later(gone);
        n
    }
}
