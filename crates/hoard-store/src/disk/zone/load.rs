//! The loader: at start, indexes every file of a zone's directories.
//!
//! ## Lifecycle
//!
//! [`DiskZone::start`] spawns [`DiskZone::load`]. It lists each directory's
//! fan-out subdirectories and examines their files in batches of 64, one
//! pool operation per batch (bounded I/O). Each file is
//!
//! * indexed (a whole object, checked as [`super::file::check_file`] does,
//!   with its block table), unless a purge since the zone opened selects it
//!   or it was removed while loading (a tombstone): then it is removed;
//! * removed and counted (a `.tmp` file, a file that fails its checks);
//! * removed, never indexed, when a tombstone names it (an unlink that
//!   failed before the restart, see [`super::tombstone`]); once the loader
//!   is through a directory, the tombstones of files gone are dropped;
//! * ignored (a name that is not an object's).
//!
//! Of two copies of one object (a crash between publishing a new one and
//! unlinking the old) the later write wins. When every directory is done,
//! a zone larger than its (possibly smaller) `max_size` is evicted down to
//! it, then `loading` goes false and writes may start.
//!
//! While the loader runs, a lookup of a key the index does not know yet
//! probes the disk for it and indexes it the same way
//! ([`DiskZone::index_loaded`]), so a restarted cache serves hits at once.
//!
//! ## Locking
//!
//! The index lock is taken per file indexed, never during the scan.

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::file::{check_file, parse_name, Checked, ReadError};
use super::space::Victims;
use super::tombstone::Buried;
use super::DiskZone;
use crate::catalog::Raced;
use crate::disk::index::{on_disk, Entry};
use crate::events::StoreEvent;
use crate::format::{decode_table, Head, Reject};
use crate::io::{IoGate, IoKind};

/// What the loader made of one file.
enum Examined {
    Object {
        id: u128,
        serial: u64,
        primary: u128,
        len: u64,
        head: Box<Head>,
    },
    Rejected(Reject),
    /// A tombstone names it: removed (`None`), or still there with its
    /// length (its bytes stay accounted).
    Buried(u128, u64, Option<u64>),
    Ignored,
}

fn examine(path: &Path, buried: &Buried, gate: &IoGate) -> io::Result<Examined> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    if name.ends_with(".tmp") {
        fs::remove_file(path)?;
        return Ok(Examined::Rejected(Reject::Temporary));
    }
    let Some((id, serial)) = parse_name(&name) else {
        return Ok(Examined::Ignored);
    };
    if buried.contains(&(id, serial)) {
        let standing = match gate.unlink_fault().and_then(|()| fs::remove_file(path)) {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(_) => Some(fs::metadata(path).map_or(0, |m| m.len())),
        };
        return Ok(Examined::Buried(id, serial, standing));
    }
    let checked = (|| -> Result<Examined, ReadError> {
        let Checked {
            file, prefix, head, ..
        } = check_file(path, id, Some(serial), 8192)?;
        let len = prefix.file_len();
        let mut t = vec![0u8; (len - prefix.table_offset()) as usize];
        file.read_exact_at(&mut t, prefix.table_offset())?;
        decode_table(&t, prefix.blocks())?;
        Ok(Examined::Object {
            id,
            serial,
            primary: prefix.primary,
            len,
            head: Box::new(head),
        })
    })();
    match checked {
        Ok(e) => Ok(e),
        Err(ReadError::Gone | ReadError::Offline) => Ok(Examined::Ignored),
        Err(ReadError::Reject(r)) => {
            tracing::warn!(path = %path.display(), reason = r.as_str(), "disk: loader removed a file that may not be served");
            fs::remove_file(path)?;
            Ok(Examined::Rejected(r))
        }
        Err(ReadError::Io(e)) => Err(e),
    }
}

impl DiskZone {
    /// The loader: indexes every file of every directory, one batch of
    /// files per pool operation (bounded I/O), removing and counting what
    /// may not be served. Writes wait until it is done, so the byte account
    /// always covers every file.
    pub(super) async fn load(self: Arc<Self>) {
        let started = tokio::time::Instant::now();
        for dir in 0..self.dirs.len() {
            let root = self.dirs[dir].path.clone();
            let subdirs = self
                .io
                .run(IoKind::Write, move || {
                    let mut out = Vec::new();
                    for e in fs::read_dir(&root)? {
                        let e = e?;
                        if e.file_type()?.is_dir() {
                            out.push(e.path());
                        }
                    }
                    Ok(out)
                })
                .await;
            let subdirs = match subdirs {
                Ok(s) => s,
                Err(e) => {
                    self.dir_failed(dir as u8, &e);
                    continue;
                }
            };
            let buried = Arc::new(self.buried_in(dir));
            let mut standing = Vec::new();
            // Every file of the directory looked at (else a tombstone whose
            // file was not seen is kept).
            let mut complete = true;
            for sub in subdirs {
                let files = self
                    .io
                    .run(IoKind::Write, move || {
                        let mut out = Vec::new();
                        for e in fs::read_dir(&sub)? {
                            out.push(e?.path());
                        }
                        Ok(out)
                    })
                    .await
                    .unwrap_or_else(|_| {
                        complete = false;
                        Vec::new()
                    });
                for batch in files.chunks(64) {
                    let batch = batch.to_vec();
                    let (buried, gate) = (buried.clone(), self.io.gate_arc());
                    let results = self
                        .io
                        .run(IoKind::Write, move || {
                            Ok(batch
                                .iter()
                                .map(|p| examine(p, &buried, &gate))
                                .collect::<Vec<_>>())
                        })
                        .await
                        .unwrap_or_else(|_| {
                            complete = false;
                            Vec::new()
                        });
                    for r in results {
                        self.event(StoreEvent::LoadScanned);
                        match r {
                            Ok(Examined::Object {
                                id,
                                serial,
                                primary,
                                len,
                                head,
                            }) => self.index_loaded(dir as u8, id, serial, primary, len, &head),
                            Ok(Examined::Rejected(r)) => {
                                self.event(StoreEvent::Rejected(r));
                            }
                            Ok(Examined::Buried(id, serial, left)) => {
                                if let Some(len) = left {
                                    self.index.lock().reserve(on_disk(len));
                                    standing.push((id, serial));
                                }
                            }
                            Ok(Examined::Ignored) => {}
                            Err(e) => self.dir_failed(dir as u8, &e),
                        }
                    }
                }
            }
            // The tombstones of files not left standing are done with.
            let gone: Vec<(u128, u64)> = buried
                .iter()
                .filter(|b| !standing.contains(b))
                .copied()
                .collect();
            if complete && !gone.is_empty() {
                let me = self.clone();
                let _ = self
                    .io
                    .run(IoKind::Write, move || {
                        me.unbury(dir, &gone);
                        Ok(())
                    })
                    .await;
            }
        }
        // A smaller max_size than the files found: evict down to it.
        let me = self.clone();
        let _ = self
            .io
            .run(IoKind::Write, move || {
                Ok(me.reserve(0, 0, Victims::Unlink).is_some())
            })
            .await;
        self.loading.store(false, Ordering::Release);
        self.tombstones.lock().clear();
        tracing::info!(zone = %self.cfg.name, objects = self.objects(), ms = started.elapsed().as_millis() as u64, "disk: zone loaded");
        self.event(StoreEvent::LoadDone);
    }

    pub(super) fn index_loaded(
        &self,
        dir: u8,
        id: u128,
        serial: u64,
        primary: u128,
        len: u64,
        head: &Head,
    ) {
        let vary = &head.vary;
        let now = self.now_secs();
        let bytes = on_disk(len);
        // Serials must grow past every file found (the wall clock may have
        // gone back since they were written).
        self.serial.fetch_max(serial + 1, Ordering::Relaxed);
        let purged =
            self.catalog
                .purged_since(self.load_epoch, &head.key, &head.headers, Raced::No);
        if self.is_buried(dir, id, serial) {
            // A file that could not be unlinked before: never indexed.
            self.unlink_later(vec![(self.path(dir, id, serial), 0)]);
            return;
        }
        if self.tombstones.lock().contains(&primary) || purged != Raced::No {
            // Purged while loading: not indexed, removed.
            self.index.lock().reserve(bytes);
            self.unlink_later(vec![(self.path(dir, id, serial), bytes)]);
            return;
        }
        let mut gone = Vec::new();
        {
            let mut ix = self.index.lock();
            if ix.map.get(&id).is_some_and(|e| e.serial == serial) {
                // Already indexed (a lookup found it first).
                return;
            }
            ix.reserve(bytes);
            let entry = Entry {
                serial,
                blocks: (bytes / 4096) as u32,
                atime: now,
                dir,
                referenced: false,
                hits: 0,
            };
            match ix.map.get(&id).copied() {
                // Two copies (a crash between publishing a new one and
                // unlinking the old): the later write wins.
                Some(cur) if cur.serial > serial => {
                    gone.push((self.path(dir, id, serial), bytes));
                }
                _ => {
                    if let Some(old) = ix.insert(id, entry) {
                        self.open.remove(&id);
                        self.account_dir(&old, false);
                        gone.push((self.path(old.dir, id, old.serial), old.bytes()));
                    }
                    self.account_dir(&entry, true);
                    if !vary.is_empty() {
                        ix.add_variant(primary, vary, id);
                    }
                }
            }
        }
        if self.catalog.add(primary, &head.key, &head.headers) {
            self.catalog.sweep(|p| self.knows(p));
        }
        self.event(StoreEvent::Loaded);
        self.unlink_later(gone);
    }
}
