//! Tombstones: object files that had to go but could not be unlinked.
//!
//! ## Model
//!
//! An unlink that fails (a directory that refuses it, an I/O error) leaves
//! a file behind that the index no longer holds. Without a record, the
//! loader would index it again at the next start, and a purged (or
//! invalidated, replaced, evicted) object would come back. So the file's
//! name is appended to `DIR/tombstones` (one line `<id>-<serial>` per file,
//! in the zone directory that holds it) and kept in memory:
//!
//! * the loader, and a lookup that probes the disk while it runs, never
//!   index a file a tombstone names: they unlink it again;
//! * once the loader has been through a directory, the tombstones of the
//!   files it removed (or found gone) are dropped: the log is rewritten
//!   without them (`tombstones.tmp`, renamed), or removed when none is left.
//!
//! A name never names two files over time (serials grow across restarts),
//! so a tombstone can never hide a newer copy. A log line cut by a crash
//! does not parse and is ignored; its file is then the one case left (as
//! when the log itself cannot be written, a file system that refuses every
//! write): the failure is logged and counted as a disk error, the object
//! stays out of the index while the process runs and may come back after
//! a restart.
//!
//! Under `durability = "power"` the log is synced before the unlink's
//! caller (a purge) returns.
//!
//! ## Locking
//!
//! `buried` is held across a log append or rewrite (blocking: on the pool),
//! so that a rewrite never loses an append; no other lock is taken under it.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::file::parse_name;
use super::DiskZone;
use crate::disk::durability::sync_dir;
use crate::events::StoreEvent;

/// The log's name in a zone directory.
pub const LOG: &str = "tombstones";

/// The files of one directory that tombstones name: `(id, serial)`.
pub(super) type Buried = HashSet<(u128, u64)>;

fn log_path(root: &Path) -> PathBuf {
    root.join(LOG)
}

fn line(id: u128, serial: u64) -> String {
    format!("{id:032x}-{serial:016x}\n")
}

/// The tombstones of the zone directory `root` (none when there is no log).
pub(super) fn read(root: &Path) -> Buried {
    match fs::read_to_string(log_path(root)) {
        Ok(text) => text.lines().filter_map(parse_name).collect(),
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(dir = %root.display(), error = %e, "disk: tombstones not readable");
            }
            Buried::new()
        }
    }
}

impl DiskZone {
    /// The directory (index) and `(id, serial)` of an object file's path.
    fn named(&self, path: &Path) -> Option<(usize, u128, u64)> {
        let (id, serial) = parse_name(path.file_name()?.to_str()?)?;
        let dir = self.dirs.iter().position(|d| path.starts_with(&d.path))?;
        Some((dir, id, serial))
    }

    /// True when a tombstone names this file.
    pub(super) fn is_buried(&self, dir: u8, id: u128, serial: u64) -> bool {
        self.buried
            .lock()
            .get(dir as usize)
            .is_some_and(|b| b.contains(&(id, serial)))
    }

    /// The tombstones of directory `dir` now (the loader's starting point).
    pub(super) fn buried_in(&self, dir: usize) -> Buried {
        self.buried.lock().get(dir).cloned().unwrap_or_default()
    }

    /// Records that the object file `path` could not be unlinked, so that
    /// no restart indexes it (blocking: call on the pool).
    pub(super) fn bury(&self, path: &Path) {
        let Some((dir, id, serial)) = self.named(path) else {
            return;
        };
        let mut buried = self.buried.lock();
        if !buried[dir].insert((id, serial)) {
            return;
        }
        let root = &self.dirs[dir].path;
        let appended = (|| -> io::Result<()> {
            let log = log_path(root);
            let new = !log.exists();
            let mut f = OpenOptions::new().create(true).append(true).open(&log)?;
            // A line cut by a crash mid-append is ended first, so this one
            // is read whole.
            let torn =
                !new && std::fs::read(&log).is_ok_and(|b| b.last().is_some_and(|c| *c != b'\n'));
            if torn {
                f.write_all(b"\n")?;
            }
            f.write_all(line(id, serial).as_bytes())?;
            if self.cfg.durability.syncs() {
                f.sync_data()?;
                self.event(StoreEvent::Synced);
                if new {
                    sync_dir(root)?;
                    self.event(StoreEvent::Synced);
                }
            }
            Ok(())
        })();
        drop(buried);
        match appended {
            Ok(()) => {
                tracing::warn!(zone = %self.cfg.name, path = %path.display(), "disk: a file that could not be unlinked is kept out of the index by a tombstone");
                self.event(StoreEvent::Tombstoned);
            }
            Err(e) => {
                tracing::error!(zone = %self.cfg.name, path = %path.display(), error = %e, "disk: no tombstone written; the file may be served again after a restart");
                self.event(StoreEvent::DiskError);
            }
        }
    }

    /// Drops the tombstones of directory `dir` whose files are gone and
    /// rewrites its log (blocking: call on the pool).
    pub(super) fn unbury(&self, dir: usize, gone: &[(u128, u64)]) {
        if gone.is_empty() {
            return;
        }
        let mut buried = self.buried.lock();
        for g in gone {
            buried[dir].remove(g);
        }
        let root = &self.dirs[dir].path;
        let log = log_path(root);
        let rewritten = (|| -> io::Result<()> {
            if buried[dir].is_empty() {
                return match fs::remove_file(&log) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                };
            }
            let tmp = log.with_extension("tmp");
            let text: String = buried[dir].iter().map(|(i, s)| line(*i, *s)).collect();
            let mut f = fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            if self.cfg.durability.syncs() {
                f.sync_data()?;
            }
            fs::rename(&tmp, &log)
        })();
        drop(buried);
        for _ in gone {
            self.event(StoreEvent::TombstoneCleared);
        }
        if let Err(e) = rewritten {
            // The old log stays: its extra names only name files that are gone.
            tracing::warn!(zone = %self.cfg.name, dir = %root.display(), error = %e, "disk: tombstones not rewritten");
        }
    }
}
