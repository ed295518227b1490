//! Finding the object for a request.
//!
//! ## Model
//!
//! A lookup finds the object's id in the index (for a key that varies, the
//! newest `Vary` name set whose variant is stored), marks the entry used
//! (CLOCK's `referenced`, `atime`, `hits`), then opens its file on the pool
//! ([`DiskZone::open_cold`]) unless the open-file cache has it. The cache
//! keeps recently hit objects' files open with their checked heads and
//! block sums, so a repeat hit opens, stats and decodes nothing.
//!
//! | found | result |
//! |---|---|
//! | an entry, its file intact, the same key text | [`ZoneLookup::Hit`]; a small body read and checked first, a larger one checked block by block as it is sent ([`crate::reader`]) |
//! | no variant of a varying key matches | [`ZoneLookup::VaryMiss`] |
//! | no entry; inactive too long (removed); directory offline; file gone (forgotten), damaged (removed, counted) or another key's | [`ZoneLookup::Miss`] |
//!
//! While the loader runs, a key the index does not know is probed for on
//! disk first (skipped when the pool is saturated).
//!
//! ## Locking
//!
//! The index lock is held to find and mark the entry, never across the
//! open. An opened file is cached only if, under the index lock, its entry
//! is still the same write and no head rewrite began since the open started
//! (`head_epoch`): a cached head is never older than the file's.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use hoard_policy::vary::VaryNames;
use http::HeaderMap;

use super::file::{check_file, open_object, parse_name, ReadError};
use super::{DiskZone, OpenObject};
use crate::disk::index::{object_id, Entry};
use crate::events::StoreEvent;
use crate::format::{Reject, Span, BLOCK};
use crate::io::{IoKind, PoolFile};
use crate::object::{ObjectBody, Part, StoredObject};
use crate::reader::{FileBody, ReadFailed};

/// Largest first read of a lookup: a small object is read whole in one go.
const FIRST_READ: u64 = 128 * 1024;

/// Bodies up to this size are read and checked before the response starts.
const INLINE_MAX: u64 = BLOCK;

/// What a zone found for a request.
#[derive(Debug)]
pub enum ZoneLookup {
    /// The object, and whether this was a repeat hit (memory admission).
    Hit(Arc<StoredObject>, bool),
    /// The key varies and no stored variant matches.
    VaryMiss(VaryNames),
    /// Nothing usable.
    Miss,
}

impl DiskZone {
    /// Finds the object for a request. See [`ZoneLookup`]. While the loader
    /// runs, a key the index does not know yet is looked for on disk
    /// directly, so a restarted cache serves hits at once.
    pub async fn lookup(&self, primary: u128, key_text: &str, req: &HeaderMap) -> ZoneLookup {
        // Optional work: skipped (a miss) when the pool is saturated, so a
        // burst of misses during a long load cannot queue up behind probes.
        if self.loading()
            && !self.io.saturated()
            && !self.knows(primary)
            && !self.tombstones.lock().contains(&primary)
        {
            self.probe(primary).await;
        }
        self.lookup_indexed(primary, key_text, req).await
    }

    /// Looks on disk (on the pool) for the object of `primary` without
    /// `Vary` and indexes it; true when found. Each directory's fan-out
    /// subdirectory for the id is listed: a small, bounded read.
    async fn probe(&self, primary: u128) -> bool {
        let prefix = format!("{primary:032x}-");
        let subs: Vec<PathBuf> = self
            .dirs
            .iter()
            .map(|d| d.path.join(&prefix[..2]))
            .collect();
        let found = self
            .io
            .run(IoKind::Read, move || {
                for (dir, sub) in subs.iter().enumerate() {
                    let Ok(rd) = fs::read_dir(sub) else { continue };
                    let newest = rd
                        .flatten()
                        .filter_map(|e| e.file_name().to_str().and_then(parse_name))
                        .filter(|(id, _)| *id == primary)
                        .map(|(_, serial)| serial)
                        .max();
                    let Some(serial) = newest else { continue };
                    let path = sub.join(format!("{prefix}{serial:016x}"));
                    if let Ok(c) = check_file(&path, primary, Some(serial), 8192) {
                        return Ok(Some((dir as u8, serial, c.prefix.file_len(), c.head)));
                    }
                }
                Ok(None)
            })
            .await
            .ok()
            .flatten();
        match found {
            Some((dir, serial, len, head)) => {
                self.index_loaded(dir, primary, serial, primary, len, &head);
                true
            }
            None => false,
        }
    }

    async fn lookup_indexed(&self, primary: u128, key_text: &str, req: &HeaderMap) -> ZoneLookup {
        let now = self.now_secs();
        let (id, entry, promote) = {
            let mut ix = self.index.lock();
            let id = if ix.map.contains_key(&primary) {
                primary
            } else if let Some(v) = ix.varies.get(&primary) {
                let found = v
                    .names
                    .iter()
                    .rev()
                    .map(|n| object_id(primary, n.variant(req).0))
                    .find(|id| ix.map.contains_key(id));
                match found {
                    Some(id) => id,
                    None => {
                        return ZoneLookup::VaryMiss(v.names.last().cloned().unwrap_or_default())
                    }
                }
            } else {
                return ZoneLookup::Miss;
            };
            let e = *ix.map.get(&id).expect("invariant: just found");
            if self.inactive_expired(&e, now) {
                let gone = self.take(&mut ix, id);
                drop(ix);
                self.event(StoreEvent::EvictedInactive);
                self.unlink_later(gone.into_iter().collect());
                return ZoneLookup::Miss;
            }
            let d = &self.dirs[e.dir as usize];
            // An offline directory's objects are misses, until its retry
            // time: then this read probes it first.
            if !d.online() && u64::from(now) < d.retry_at.load(Ordering::Acquire) {
                return ZoneLookup::Miss;
            }
            let e = ix.map.get_mut(&id).expect("invariant: just found");
            e.referenced = true;
            e.atime = now;
            let promote = e.hits >= 1;
            e.hits = e.hits.saturating_add(1);
            (id, *e, promote)
        };
        let cached = self.open.get(&id).filter(|o| o.serial == entry.serial);
        let (open, inline) = match cached {
            Some(o) => (o, None),
            None => match self.open_cold(id, entry).await {
                Some(r) => r,
                None => return ZoneLookup::Miss,
            },
        };
        if open.head.key != key_text {
            // A digest collision: another key's object. Not ours to serve.
            return ZoneLookup::Miss;
        }
        if inline.is_none() && open.file.is_verified() {
            let obj = open
                .hit
                .get_or_init(|| Arc::new(self.hit_object(id, entry.serial, &open, None)))
                .clone();
            self.event(StoreEvent::DiskHit);
            return ZoneLookup::Hit(obj, promote);
        }
        let inline = match inline {
            Some(b) => Some(b),
            // A small body (with its parts) is read and checked before the
            // response starts (a damaged one is a miss, fetched again); a
            // larger one is checked block by block as it is sent.
            None if open.prefix.body_len <= INLINE_MAX => {
                let whole = Span {
                    start: 0,
                    len: open.prefix.body_len,
                };
                match self
                    .file_body(id, entry.serial, &open, whole)
                    .read_small()
                    .await
                {
                    Ok(b) => Some(b),
                    // read_failed has counted and removed, or taken the directory out.
                    Err(_) => return ZoneLookup::Miss,
                }
            }
            None => None,
        };
        let obj = self.hit_object(id, entry.serial, &open, inline);
        self.event(StoreEvent::DiskHit);
        ZoneLookup::Hit(Arc::new(obj), promote)
    }

    /// A span of an open object's body.
    fn file_body(&self, id: u128, serial: u64, open: &OpenObject, span: Span) -> Arc<FileBody> {
        Arc::new(FileBody {
            file: open.file.clone(),
            data: open.prefix.data_offset(),
            base: span.start,
            len: span.len,
            total: open.prefix.body_len,
            sums: open.sums.clone(),
            io: self.io.clone(),
            zone: self.me.clone(),
            id,
            serial,
        })
    }

    /// The object a hit on an open file returns: its stored bytes and
    /// parts sliced from `inline` (the whole body, read and checked), or
    /// read from the file as they are sent.
    fn hit_object(
        &self,
        id: u128,
        serial: u64,
        open: &OpenObject,
        inline: Option<Bytes>,
    ) -> StoredObject {
        let h = open.head.clone();
        let (stored, parts) = h
            .layout(open.prefix.body_len)
            .expect("invariant: checked when the file was opened");
        let body_of = |span: Span| match &inline {
            Some(b) => {
                let c = b.slice(span.start as usize..(span.start + span.len) as usize);
                ObjectBody::from_chunks(if c.is_empty() { Vec::new() } else { vec![c] })
            }
            None => ObjectBody::File(self.file_body(id, serial, open, span)),
        };
        let parts: Vec<Part> = parts
            .into_iter()
            .map(|(coding, span)| Part {
                coding,
                body: body_of(span),
            })
            .collect();
        let mut obj = StoredObject::new(
            h.key,
            h.vary,
            h.status,
            h.headers,
            h.times,
            h.lifetime_source,
            h.rules,
            body_of(stored),
        )
        .with_disk(Some(self.disk_ref(id, serial, open)));
        if !parts.is_empty() {
            obj = obj.with_parts(parts);
        }
        obj
    }

    /// Opens an object not in the open-file cache (on the pool): checks its
    /// start, reads its block table (and a small body whole), and caches
    /// the open file and head. `None` (a miss) when it is gone, damaged
    /// (removed, counted), another key's, or its directory fails.
    pub(super) async fn open_cold(
        &self,
        id: u128,
        entry: Entry,
    ) -> Option<(Arc<OpenObject>, Option<Bytes>)> {
        let path = self.path(entry.dir, id, entry.serial);
        let first = entry.bytes().min(FIRST_READ);
        let epoch = self.head_epoch.load(Ordering::Acquire);
        let (me, dir, gate) = (self.me.clone(), entry.dir as usize, self.io.gate_arc());
        let opened = self
            .io
            .run(IoKind::Read, move || {
                if let Some(z) = me.upgrade() {
                    if !z.dirs[dir].online() && !z.dir_usable(dir) {
                        return Ok(Err(ReadError::Offline));
                    }
                }
                gate.read_fault()?;
                Ok(open_object(&path, id, first))
            })
            .await
            .unwrap_or_else(|e| Err(ReadError::Io(e)));
        let o = match opened {
            Ok(o) => o,
            Err(ReadError::Gone) => {
                self.forget(id, entry.serial, 0);
                return None;
            }
            Err(ReadError::Offline) => return None,
            Err(ReadError::Reject(r)) => {
                tracing::warn!(zone = %self.cfg.name, id = %format!("{id:032x}"), reason = r.as_str(), "disk: stored object rejected");
                self.event(StoreEvent::Rejected(r));
                self.forget(id, entry.serial, 1);
                return None;
            }
            Err(ReadError::Io(e)) => {
                self.dir_failed(entry.dir, &e);
                return None;
            }
        };
        let open = Arc::new(OpenObject {
            hit: std::sync::OnceLock::new(),
            serial: entry.serial,
            file: {
                let f = PoolFile::new(o.file, self.io.clone());
                if o.inline.is_some() {
                    // The whole body was read and checked with the head.
                    f.mark_verified();
                }
                Arc::new(f)
            },
            prefix: o.prefix,
            slot: o.slot,
            generation: o.generation,
            head: o.head,
            sums: o.sums.into(),
        });
        {
            // Cached only if the object is still this write and its head was
            // not rewritten meanwhile (lock order: index, then cache).
            let ix = self.index.lock();
            if ix.map.get(&id).is_some_and(|e| e.serial == entry.serial)
                && self.head_epoch.load(Ordering::Acquire) == epoch
            {
                self.open.insert(id, open.clone());
            }
        }
        Some((open, o.inline))
    }
}

impl ReadFailed for DiskZone {
    /// A body read failed: a block that fails its checksum removes the
    /// object; an I/O error takes the directory out of service.
    fn read_failed(&self, id: u128, serial: u64, e: &io::Error) {
        if e.kind() == io::ErrorKind::InvalidData {
            tracing::warn!(zone = %self.cfg.name, id = %format!("{id:032x}"), "disk: body block failed its checksum; object removed");
            self.event(StoreEvent::Rejected(Reject::Checksum));
            self.forget(id, serial, 1);
        } else if let Some(dir) = self.index.lock().map.get(&id).map(|e| e.dir) {
            self.dir_failed(dir, e);
        }
    }
}
