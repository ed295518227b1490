//! A disk zone: objects in files spread over one or more directories, an
//! index in memory, a hard byte limit.
//!
//! ## Model
//!
//! Each object is one file `DIR/xx/<id>-<serial>` in the format of
//! [`super::format`]; `id` names the object (key and variant), `serial` the
//! write that made it, so a path never names two different files over time
//! and an unlink can never hit a newer copy. A key's directory is chosen by
//! weighted rendezvous hashing over the directories in service (the built-in
//! `split_clients`: no RAID needed, and removing a directory moves only its
//! own objects).
//!
//! ## Lifecycle of a file
//!
//! | state | where | next |
//! |---|---|---|
//! | reserved | bytes in the index's account, no file yet | `<id>-<serial>.tmp` created |
//! | writing | the `.tmp` file, written by one [`super::writer::DiskWriter`] | complete: renamed; dropped: unlinked |
//! | published | `<id>-<serial>`, an index entry | evicted, replaced, purged, rejected |
//! | unlinking | removed from the index, bytes still accounted | unlinked, bytes released |
//! | reused | evicted for a new object and open nowhere: renamed to the new `.tmp`, its bytes now the new writer's | overwritten as the new object (writing) |
//!
//! A restart finds only whole files under their final names (the rename is
//! the commit point); `.tmp` files and files that fail their checks are
//! removed by the loader and counted.
//!
//! ## Locking
//!
//! One mutex around the [`Index`], held for map operations only: never
//! across an await and never during a disk operation. Disk operations run on
//! the zone's [`IoPool`].

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoard_policy::clock::Clock;
use hoard_policy::vary::VaryNames;
use http::HeaderMap;
use parking_lot::Mutex;

use super::format::{
    check_block, decode_table, encode_slot, pick_slot, Head, Prefix, Reject, BLOCK, PREFIX_LEN,
};
use super::index::{object_id, on_disk, Entry, Index};
use super::io::PoolFile;
use super::io::{IoKind, IoPool};
use super::reader::FileBody;
use super::writer::DiskWriter;
use crate::catalog::{Catalog, Raced};
use crate::events::{StoreEvent, StoreEvents};
use crate::object::{DiskRef, ObjectBody, StoredObject};

/// How long a directory taken out of service waits before it is tried again.
pub const DIR_RETRY: Duration = Duration::from_secs(10);
/// Largest first read of a lookup: a small object is read whole in one go.
const FIRST_READ: u64 = 128 * 1024;
/// Bodies up to this size are read and checked before the response starts.
const INLINE_MAX: u64 = BLOCK;
/// Object files kept open (with their heads) for repeat hits.
const OPEN_FILES: usize = 4096;
/// Disk operations of one zone running at once.
const CONCURRENCY: usize = 32;

/// A zone's configuration.
#[derive(Debug, Clone)]
pub struct ZoneConfig {
    /// The zone's name (in routes, placement rules, metrics).
    pub name: String,
    /// Directories and their weights.
    pub dirs: Vec<DirConfig>,
    /// The zone's files never add up to more than this.
    pub max_size: u64,
    /// Objects not used for this long are removed.
    pub inactive: Option<Duration>,
    /// Free space the file system keeps; the zone evicts rather than go below.
    pub min_free: u64,
    /// Largest body stored.
    pub max_object: u64,
}

/// One directory of a zone.
#[derive(Debug, Clone)]
pub struct DirConfig {
    /// Where.
    pub path: PathBuf,
    /// Share of the objects (relative to the other directories').
    pub weight: u32,
}

/// A directory's live state.
#[derive(Debug)]
pub struct Dir {
    /// Where.
    pub path: PathBuf,
    weight: u32,
    online: AtomicBool,
    /// Seconds since zone start after which an offline directory is probed.
    retry_at: AtomicU64,
    objects: AtomicU64,
    bytes: AtomicU64,
}

impl Dir {
    /// In service.
    pub fn online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }
    /// Objects indexed in this directory.
    pub fn objects(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }
    /// Bytes of those objects (4 KiB blocks).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

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

/// A disk zone. See the module docs.
#[derive(Debug)]
pub struct DiskZone {
    pub(crate) cfg: ZoneConfig,
    /// This zone's index in the store.
    pub(crate) number: usize,
    dirs: Vec<Dir>,
    pub(crate) index: Mutex<Index>,
    /// Recently hit objects' open files and heads (see [`OpenObject`]).
    open: quick_cache::sync::Cache<u128, Arc<OpenObject>>,
    /// Bumped by every head rewrite: a head read before one is not cached.
    head_epoch: AtomicU64,
    /// Primaries removed while the loader runs: their files, when the
    /// loader reaches them, are removed instead of indexed.
    tombstones: Mutex<std::collections::HashSet<u128>>,
    pub(crate) io: IoPool,
    loading: AtomicBool,
    pub(crate) events: Arc<dyn StoreEvents>,
    clock: Arc<dyn Clock>,
    start: SystemTime,
    serial: AtomicU64,
    me: Weak<DiskZone>,
    /// Where loaded and published objects are catalogued (for purges); its
    /// admission gate orders a publish against purges.
    pub(crate) catalog: Arc<Catalog>,
    /// The purge epoch when the zone opened: the loader drops files that a
    /// purge since then selects.
    load_epoch: u64,
}

/// A file opened by a lookup.
struct Opened {
    file: File,
    prefix: Prefix,
    slot: u8,
    generation: u64,
    head: Head,
    sums: Vec<u64>,
    /// The whole body, checked, when it came with the first read.
    inline: Option<Bytes>,
}

/// An object file kept open with its checked head and block sums, so a
/// repeat hit opens, stats and decodes nothing.
#[derive(Debug)]
struct OpenObject {
    serial: u64,
    file: Arc<PoolFile>,
    prefix: Prefix,
    slot: u8,
    generation: u64,
    head: Head,
    sums: Arc<[u64]>,
}

enum ReadError {
    Gone,
    /// The directory is out of service.
    Offline,
    Reject(Reject),
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::NotFound {
            ReadError::Gone
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadError::Reject(Reject::Truncated)
        } else {
            ReadError::Io(e)
        }
    }
}

impl From<Reject> for ReadError {
    fn from(r: Reject) -> Self {
        ReadError::Reject(r)
    }
}

/// Reads up to `buf.len()` bytes at `at`; returns how many (short at EOF).
fn read_up_to(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The checked start of an object file: prefix, newest intact head slot,
/// exact length. `buf` holds at least the first `first` bytes (or the file).
struct Checked {
    file: File,
    buf: Vec<u8>,
    prefix: Prefix,
    slot: u8,
    generation: u64,
    head: Head,
}

/// Opens `path` and checks what every reader and the loader check: a
/// prefix of this version naming `expect_id` (and `expect_serial`), an
/// intact head, the exact file length.
fn check_file(
    path: &Path,
    expect_id: u128,
    expect_serial: Option<u64>,
    first: u64,
) -> Result<Checked, ReadError> {
    let file = File::open(path)?;
    let mut buf = vec![0u8; first.max(4096) as usize];
    let n = read_up_to(&file, &mut buf, 0)?;
    buf.truncate(n);
    let prefix = Prefix::decode(&buf)?;
    if object_id(prefix.primary, prefix.variant) != expect_id
        || expect_serial.is_some_and(|s| s != prefix.serial)
    {
        return Err(Reject::BadPrefix.into());
    }
    let data = prefix.data_offset() as usize;
    if buf.len() < data {
        let mut more = vec![0u8; data];
        file.read_exact_at(&mut more, 0)?;
        buf = more;
    }
    // Only a slot written by this file's own write counts (the serial is in
    // its checksum): a recycled file's slots of the previous object are dead.
    let slot = pick_slot(
        &buf[PREFIX_LEN as usize..data],
        prefix.slot_len,
        prefix.serial,
    )?;
    let head = Head::decode(slot.head)?;
    if hoard_policy::key::Digest::of(head.key.as_bytes()).0 != prefix.primary {
        // An intact head of another key (a planted or misplaced file):
        // served for neither key, and removed.
        return Err(Reject::ForeignHead.into());
    }
    let (index, generation) = (slot.index, slot.generation);
    if file.metadata()?.len() != prefix.file_len() {
        return Err(Reject::Truncated.into());
    }
    Ok(Checked {
        file,
        buf,
        prefix,
        slot: index,
        generation,
        head,
    })
}

/// Opens and checks an object file: prefix, head, length, block table; a
/// body that fits the first read is checked and returned whole.
fn open_object(path: &Path, expect_id: u128, first: u64) -> Result<Opened, ReadError> {
    let Checked {
        file,
        buf,
        prefix,
        slot: index,
        generation,
        head,
    } = check_file(path, expect_id, None, first)?;
    let file_len = prefix.file_len();
    let data = prefix.data_offset() as usize;
    let table_at = prefix.table_offset();
    let (sums, inline) = if buf.len() as u64 >= file_len {
        let sums = decode_table(&buf[table_at as usize..file_len as usize], prefix.blocks())?;
        let body = &buf[data..table_at as usize];
        for (i, block) in body.chunks(BLOCK as usize).enumerate() {
            check_block(block, sums[i])?;
        }
        // Copied out: the read buffer also holds the head and the table.
        (sums, Some(Bytes::copy_from_slice(body)))
    } else {
        let mut t = vec![0u8; (file_len - table_at) as usize];
        file.read_exact_at(&mut t, table_at)?;
        (decode_table(&t, prefix.blocks())?, None)
    };
    Ok(Opened {
        file,
        prefix,
        slot: index,
        generation,
        head,
        sums,
        inline,
    })
}

/// Where a new object's file goes, and the bytes held for it.
struct Placed {
    dir: u8,
    reserved: u64,
    /// An evicted object's file, renamed to the new temporary name, to be
    /// overwritten in place; `None`: create a new file.
    file: Option<File>,
}

/// Creates the fan-out directory of `path` if it is missing.
fn make_parent(path: &Path) -> io::Result<()> {
    path.parent().map_or(Ok(()), |p| match fs::create_dir(p) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    })
}

/// Takes over an evicted object's file as `tmp`: renamed first (so no
/// reader can open it by its old name any more), then kept only if no
/// handle to it is open anywhere. `None`: use a new file.
fn reuse_file(old: &Path, tmp: &Path) -> Option<File> {
    make_parent(tmp).ok()?;
    fs::rename(old, tmp).ok()?;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tmp)
        .ok()?;
    super::lease::sole_handle(&f).then_some(f)
}

/// Parses `<id>-<serial>` (32 and 16 hex digits).
fn parse_name(name: &str) -> Option<(u128, u64)> {
    let (id, serial) = name.split_once('-')?;
    if id.len() != 32 || serial.len() != 16 {
        return None;
    }
    Some((
        u128::from_str_radix(id, 16).ok()?,
        u64::from_str_radix(serial, 16).ok()?,
    ))
}

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
    Ignored,
}

fn examine(path: &Path) -> io::Result<Examined> {
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
    /// Opens a zone: creates its directories if missing. The index is
    /// empty until the loader started by [`DiskZone::start`] has run (new
    /// disk copies skip the zone until then).
    ///
    /// # Errors
    /// When a directory cannot be created.
    pub fn open(
        cfg: ZoneConfig,
        number: usize,
        events: Arc<dyn StoreEvents>,
        clock: Arc<dyn Clock>,
        catalog: Arc<Catalog>,
    ) -> io::Result<Arc<DiskZone>> {
        let mut dirs = Vec::new();
        for d in &cfg.dirs {
            fs::create_dir_all(&d.path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", d.path.display())))?;
            dirs.push(Dir {
                path: d.path.clone(),
                weight: d.weight.max(1),
                online: AtomicBool::new(true),
                retry_at: AtomicU64::new(0),
                objects: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
            });
        }
        let start = clock.now();
        let seed = start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        // Wall time, not the (possibly test) clock: serials name files and
        // must grow across restarts. Not a cache-time decision.
        #[allow(clippy::disallowed_methods)]
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Ok(Arc::new_cyclic(|me| DiskZone {
            cfg,
            number,
            dirs,
            index: Mutex::new(Index::default()),
            open: quick_cache::sync::Cache::new(OPEN_FILES),
            head_epoch: AtomicU64::new(0),
            tombstones: Mutex::new(std::collections::HashSet::new()),
            io: IoPool::new(CONCURRENCY),
            loading: AtomicBool::new(true),
            events,
            clock,
            start,
            serial: AtomicU64::new(wall.max(seed)),
            me: me.clone(),
            load_epoch: catalog.epoch(),
            catalog,
        }))
    }

    /// The zone's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The zone's configuration.
    pub fn config(&self) -> &ZoneConfig {
        &self.cfg
    }

    /// The directories and their state.
    pub fn dirs(&self) -> &[Dir] {
        &self.dirs
    }

    /// Objects indexed.
    pub fn objects(&self) -> u64 {
        self.index.lock().map.len() as u64
    }

    /// Accounted bytes: published files, reservations, files being unlinked.
    pub fn used(&self) -> u64 {
        self.index.lock().used
    }

    /// True until the loader has indexed every directory.
    pub fn loading(&self) -> bool {
        self.loading.load(Ordering::Acquire)
    }

    /// The I/O pool (its gate is for tests).
    pub fn io(&self) -> &IoPool {
        &self.io
    }

    fn event(&self, e: StoreEvent) {
        self.events.event(&self.cfg.name, e);
    }

    fn now_secs(&self) -> u32 {
        self.clock
            .now()
            .duration_since(self.start)
            .map_or(0, |d| d.as_secs().min(u64::from(u32::MAX)) as u32)
    }

    fn inactive_expired(&self, e: &Entry, now: u32) -> bool {
        self.cfg
            .inactive
            .is_some_and(|i| u64::from(now.saturating_sub(e.atime)) >= i.as_secs().max(1))
    }

    pub(crate) fn path(&self, dir: u8, id: u128, serial: u64) -> PathBuf {
        let name = format!("{id:032x}-{serial:016x}");
        self.dirs[dir as usize].path.join(&name[..2]).join(name)
    }

    fn account_dir(&self, e: &Entry, add: bool) {
        let d = &self.dirs[e.dir as usize];
        if add {
            d.objects.fetch_add(1, Ordering::Relaxed);
            d.bytes.fetch_add(e.bytes(), Ordering::Relaxed);
        } else {
            d.objects.fetch_sub(1, Ordering::Relaxed);
            d.bytes.fetch_sub(e.bytes(), Ordering::Relaxed);
        }
    }

    /// Removes an entry from the index (lock held by the caller) and returns
    /// what to unlink.
    fn take(&self, ix: &mut Index, id: u128) -> Option<(PathBuf, u64)> {
        let e = ix.remove(id)?;
        // An open file would keep its blocks allocated after the unlink.
        self.open.remove(&id);
        self.account_dir(&e, false);
        Some((self.path(e.dir, id, e.serial), e.bytes()))
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
    fn unlink_later(&self, files: Vec<(PathBuf, u64)>) {
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
    fn unlink_now(&self, files: Vec<(PathBuf, u64)>) {
        let mut freed = 0;
        for (path, bytes) in files {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    // Still there: its bytes stay accounted.
                    tracing::warn!(zone = %self.cfg.name, path = %path.display(), error = %e, "disk: unlink failed");
                    self.event(StoreEvent::DiskError);
                    continue;
                }
            }
            freed += bytes;
        }
        self.index.lock().release(freed);
    }

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

    /// True when the index has an object or variants for `primary`.
    pub fn knows(&self, primary: u128) -> bool {
        let ix = self.index.lock();
        ix.map.contains_key(&primary) || ix.varies.contains_key(&primary)
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
        let body = Arc::new(FileBody {
            file: open.file.clone(),
            data: open.prefix.data_offset(),
            len: open.prefix.body_len,
            sums: open.sums.clone(),
            io: self.io.clone(),
            zone: self.me.clone(),
            id,
            serial: entry.serial,
        });
        // A small body is read and checked before the response starts (a
        // damaged one is a miss, fetched again); a larger one is checked
        // block by block as it is sent.
        // A body whose file handle has already been read whole and checked
        // is not checked again: it can be sent with sendfile.
        let body = match inline {
            Some(b) => ObjectBody::from_chunks(vec![b]),
            None if body.len() <= INLINE_MAX && !open.file.is_verified() => match body
                .read_small()
                .await
            {
                Ok(b) => ObjectBody::from_chunks(if b.is_empty() { Vec::new() } else { vec![b] }),
                // read_failed has counted and removed, or taken the directory out.
                Err(_) => return ZoneLookup::Miss,
            },
            None => ObjectBody::File(body),
        };
        let h = open.head.clone();
        let obj = StoredObject::new(
            h.key,
            h.vary,
            h.status,
            h.headers,
            h.times,
            h.lifetime_source,
            h.rules,
            body,
        )
        .with_disk(Some(self.disk_ref(id, entry.serial, &open)));
        self.event(StoreEvent::DiskHit);
        ZoneLookup::Hit(Arc::new(obj), promote)
    }

    /// Where an open object's file and current head are.
    fn disk_ref(&self, id: u128, serial: u64, open: &OpenObject) -> DiskRef {
        DiskRef {
            zone: self.number,
            id,
            serial,
            slot: open.slot,
            generation: open.generation,
            slot_len: open.prefix.slot_len,
        }
    }

    /// Opens an object not in the open-file cache (on the pool): checks its
    /// start, reads its block table (and a small body whole), and caches
    /// the open file and head. `None` (a miss) when it is gone, damaged
    /// (removed, counted), another key's, or its directory fails.
    async fn open_cold(&self, id: u128, entry: Entry) -> Option<(Arc<OpenObject>, Option<Bytes>)> {
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

    /// True while `id` is indexed as the write `serial`.
    pub(crate) fn is_current(&self, id: u128, serial: u64) -> bool {
        self.index
            .lock()
            .map
            .get(&id)
            .is_some_and(|e| e.serial == serial)
    }

    /// Drops the entry for `id` if it is still the write `serial`; `unlink`
    /// 1 removes its file too (rejected), 0 only forgets it (already gone).
    fn forget(&self, id: u128, serial: u64, unlink: u8) {
        let mut ix = self.index.lock();
        if ix.map.get(&id).is_none_or(|e| e.serial != serial) {
            return;
        }
        let gone = self.take(&mut ix, id);
        if unlink == 0 {
            if let Some((_, bytes)) = gone {
                ix.release(bytes);
            }
        } else {
            drop(ix);
            self.unlink_later(gone.into_iter().collect());
        }
    }

    /// A body read failed: a block that fails its checksum removes the
    /// object; an I/O error takes the directory out of service.
    pub(crate) fn read_failed(&self, id: u128, serial: u64, e: &io::Error) {
        if e.kind() == io::ErrorKind::InvalidData {
            tracing::warn!(zone = %self.cfg.name, id = %format!("{id:032x}"), "disk: body block failed its checksum; object removed");
            self.event(StoreEvent::Rejected(Reject::Checksum));
            self.forget(id, serial, 1);
        } else if let Some(dir) = self.index.lock().map.get(&id).map(|e| e.dir) {
            self.dir_failed(dir, e);
        }
    }

    /// Takes a directory out of service after an error.
    pub(crate) fn dir_failed(&self, dir: u8, e: &io::Error) {
        self.event(StoreEvent::DiskError);
        let d = &self.dirs[dir as usize];
        d.retry_at.store(
            u64::from(self.now_secs()) + DIR_RETRY.as_secs(),
            Ordering::Release,
        );
        if d.online.swap(false, Ordering::AcqRel) {
            tracing::warn!(zone = %self.cfg.name, dir = %d.path.display(), error = %e, "disk: directory taken out of service");
            self.event(StoreEvent::DirOffline);
        }
    }

    /// Whether a directory may take a new object; probes an offline one
    /// whose retry time has come (blocking: call on the pool).
    fn dir_usable(&self, dir: usize) -> bool {
        let d = &self.dirs[dir];
        if d.online() {
            return true;
        }
        if u64::from(self.now_secs()) < d.retry_at.load(Ordering::Acquire) {
            return false;
        }
        let probe = d.path.join(".hoard-probe");
        let ok = fs::write(&probe, b"probe").and_then(|()| fs::remove_file(&probe));
        match ok {
            Ok(()) => {
                if !d.online.swap(true, Ordering::AcqRel) {
                    tracing::info!(zone = %self.cfg.name, dir = %d.path.display(), "disk: directory back in service");
                    self.event(StoreEvent::DirOnline);
                }
                true
            }
            Err(_) => {
                d.retry_at.store(
                    u64::from(self.now_secs()) + DIR_RETRY.as_secs(),
                    Ordering::Release,
                );
                false
            }
        }
    }

    /// The directory for a new object: weighted rendezvous hashing over the
    /// directories in service (blocking: may probe).
    fn choose_dir(&self, id: u128) -> Option<u8> {
        let mut ranked: Vec<(f64, usize)> = self
            .dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut b = [0u8; 17];
                b[..16].copy_from_slice(&id.to_le_bytes());
                b[16] = i as u8;
                let h = xxhash_rust::xxh3::xxh3_64(&b);
                let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                (-f64::from(d.weight) / u.ln(), i)
            })
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranked
            .into_iter()
            .map(|(_, i)| i)
            .find(|&i| self.dir_usable(i))
            .map(|i| i as u8)
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

    /// Takes `bytes` into the account, evicting (and unlinking, on this
    /// pool thread) until they fit under `max_size` and `min_free`.
    /// False at once for more than `max_size`, or when even an emptied zone
    /// has no room.
    pub(crate) fn reserve_blocking(&self, bytes: u64, dir: u8) -> bool {
        if bytes > self.cfg.max_size {
            // Could never fit: evicting everything first would only empty the zone.
            return false;
        }
        loop {
            let free_ok = self.free_space_ok(&self.dirs[dir as usize].path, bytes);
            let victims = {
                let mut ix = self.index.lock();
                if free_ok && ix.used + bytes <= self.cfg.max_size {
                    ix.reserve(bytes);
                    return true;
                }
                let mut victims = Vec::new();
                let mut freed = 0;
                while victims.len() < 64
                    && (!free_ok || ix.used - freed + bytes > self.cfg.max_size)
                {
                    let Some((id, e)) = ix.pop_victim() else {
                        break;
                    };
                    self.open.remove(&id);
                    self.account_dir(&e, false);
                    freed += e.bytes();
                    victims.push((self.path(e.dir, id, e.serial), e.bytes()));
                    if !free_ok && victims.len() >= 8 {
                        break;
                    }
                }
                victims
            };
            if victims.is_empty() {
                return false;
            }
            for _ in &victims {
                self.event(StoreEvent::EvictedSize);
            }
            self.unlink_now(victims);
        }
    }

    /// Room for a new object's file: like [`DiskZone::reserve_blocking`],
    /// but when it must evict, the first victim in service (one in `dir` if
    /// the batch has one) is not unlinked: its file is renamed to the new
    /// object's temporary name and handed over to be overwritten in place.
    /// Rewriting allocated, cached pages costs a quarter of what a new file
    /// costs (block allocation, journal, page allocation; see
    /// `docs/disk.md`). The victim's bytes stay in the account and become
    /// part of the new reservation, so the limit holds throughout. A victim
    /// file that anybody still has open (a reader streaming it) is never
    /// reused: see [`super::lease`]. Blocking: call on the pool.
    fn reserve_new(&self, bytes: u64, dir: u8, id: u128, serial: u64) -> Option<Placed> {
        if bytes > self.cfg.max_size {
            return None;
        }
        // A reused victim file: where, its handle, the bytes it holds.
        let mut reused: Option<(u8, File, u64)> = None;
        loop {
            let held = reused.as_ref().map_or(0, |r| r.2);
            let need = bytes.saturating_sub(held);
            let at = reused.as_ref().map_or(dir, |r| r.0);
            let free_ok = self.free_space_ok(&self.dirs[at as usize].path, need);
            let (victims, candidate) = {
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
                let mut victims = Vec::new();
                let mut freed = 0;
                while victims.len() < 64 && (!free_ok || ix.used - freed + need > self.cfg.max_size)
                {
                    let Some((vid, e)) = ix.pop_victim() else {
                        break;
                    };
                    self.open.remove(&vid);
                    self.account_dir(&e, false);
                    freed += e.bytes();
                    // Only a file never served from disk may be reused: the
                    // pages of one sent with sendfile may still sit in a
                    // socket's send queue after its descriptor is closed.
                    victims.push((
                        e.dir,
                        self.path(e.dir, vid, e.serial),
                        e.bytes(),
                        e.hits == 0,
                    ));
                    if !free_ok && victims.len() >= 8 {
                        break;
                    }
                }
                // Reuse needs free space to be fine already: a reused file
                // frees nothing on the file system.
                // A served file is never a candidate (see above): `sendfile`
                // hands the socket references to the page-cache pages, not
                // copies, so overwriting them in place could change bytes a
                // client has not received yet; an unlinked file's pages stay
                // as they are until the last reference goes.
                let candidate = if reused.is_none() && free_ok {
                    victims
                        .iter()
                        .position(|v| v.3 && v.0 == dir)
                        .or_else(|| {
                            victims
                                .iter()
                                .position(|v| v.3 && self.dirs[v.0 as usize].online())
                        })
                        .map(|i| victims.swap_remove(i))
                } else {
                    None
                };
                (victims, candidate)
            };
            if victims.is_empty() && candidate.is_none() {
                if let Some((at, _, held)) = reused {
                    let tmp = self.path(at, id, serial).with_extension("tmp");
                    self.unlink_now(vec![(tmp, held)]);
                }
                return None;
            }
            for _ in 0..victims.len() + usize::from(candidate.is_some()) {
                self.event(StoreEvent::EvictedSize);
            }
            self.unlink_now(victims.into_iter().map(|(_, p, b, _)| (p, b)).collect());
            if let Some((at, old, held, _)) = candidate {
                let tmp = self.path(at, id, serial).with_extension("tmp");
                match reuse_file(&old, &tmp) {
                    Some(f) => {
                        self.event(StoreEvent::DiskRecycled);
                        reused = Some((at, f, held));
                    }
                    // Open elsewhere, or the rename failed: unlink it as
                    // any victim (whichever name it has now).
                    None => {
                        let gone = if tmp.exists() { tmp } else { old };
                        self.unlink_now(vec![(gone, held)]);
                    }
                }
            }
        }
    }

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
        let slot_len = super::format::slot_len_for(head_hint);
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
                let Some(placed) = zone.reserve_new(first, dir, id, serial) else {
                    zone.event(StoreEvent::WriteAbandoned);
                    return Ok(None);
                };
                let dir = placed.dir;
                let tmp = zone.path(dir, id, serial).with_extension("tmp");
                let recycled = placed.file.is_some();
                let created = match placed.file {
                    Some(f) => Ok(f),
                    None => make_parent(&tmp).and_then(|()| File::create_new(&tmp)),
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

    /// After a 304: writes the new head into the slot not in use, with the
    /// next generation (the body is not touched). The slot in use is read
    /// from the file itself, so an update never overwrites it whatever the
    /// caller's copy of the object says. A head that outgrew its slot
    /// removes the object instead. True when the new head is written.
    pub async fn update_head(&self, r: DiskRef, head: &Head) -> bool {
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
        let head = head.encode();
        let path = self.path(dir, r.id, r.serial);
        let (slot_len, serial) = (r.slot_len, r.serial);
        // Heads read from now on are not cached until the rewrite is done.
        self.head_epoch.fetch_add(1, Ordering::AcqRel);
        self.open.remove(&r.id);
        let written = self
            .io
            .run(IoKind::Write, move || {
                let f = fs::OpenOptions::new().read(true).write(true).open(&path)?;
                let mut area = vec![0u8; 2 * slot_len as usize];
                f.read_exact_at(&mut area, PREFIX_LEN)?;
                let current = pick_slot(&area, slot_len, serial)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                let Some(slot) = encode_slot(serial, current.generation + 1, &head, slot_len)
                else {
                    return Ok(false);
                };
                let spare = u64::from(1 - current.index.min(1));
                f.write_all_at(&slot, PREFIX_LEN + spare * u64::from(slot_len))?;
                Ok(true)
            })
            .await;
        self.head_epoch.fetch_add(1, Ordering::AcqRel);
        self.open.remove(&r.id);
        match written {
            Ok(true) => return true,
            Ok(false) => self.forget(r.id, r.serial, 1),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                self.event(StoreEvent::Rejected(Reject::BadHead));
                self.forget(r.id, r.serial, 1);
            }
            Err(e) => self.dir_failed(dir, &e),
        }
        false
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

    /// Starts the loader (and, with `inactive`, the periodic sweep) on the
    /// current runtime.
    pub fn start(self: &Arc<Self>) {
        tokio::spawn(self.clone().load());
        if let Some(inactive) = self.cfg.inactive {
            let me = self.me.clone();
            let every = (inactive / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(z) = me.upgrade() else { return };
                    z.sweep_inactive();
                }
            });
        }
    }

    /// The loader: indexes every file of every directory, one batch of
    /// files per pool operation (bounded I/O), removing and counting what
    /// may not be served. Writes wait until it is done, so the byte account
    /// always covers every file.
    async fn load(self: Arc<Self>) {
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
                    .unwrap_or_default();
                for batch in files.chunks(64) {
                    let batch = batch.to_vec();
                    let results = self
                        .io
                        .run(IoKind::Write, move || {
                            Ok(batch.iter().map(|p| examine(p)).collect::<Vec<_>>())
                        })
                        .await
                        .unwrap_or_default();
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
                            Ok(Examined::Ignored) => {}
                            Err(e) => self.dir_failed(dir as u8, &e),
                        }
                    }
                }
            }
        }
        // A smaller max_size than the files found: evict down to it.
        let me = self.clone();
        let _ = self
            .io
            .run(IoKind::Write, move || Ok(me.reserve_blocking(0, 0)))
            .await;
        self.loading.store(false, Ordering::Release);
        self.tombstones.lock().clear();
        tracing::info!(zone = %self.cfg.name, objects = self.objects(), ms = started.elapsed().as_millis() as u64, "disk: zone loaded");
        self.event(StoreEvent::LoadDone);
    }

    fn index_loaded(&self, dir: u8, id: u128, serial: u64, primary: u128, len: u64, head: &Head) {
        let vary = &head.vary;
        let now = self.now_secs();
        let bytes = on_disk(len);
        // Serials must grow past every file found (the wall clock may have
        // gone back since they were written).
        self.serial.fetch_max(serial + 1, Ordering::Relaxed);
        let purged =
            self.catalog
                .purged_since(self.load_epoch, &head.key, &head.headers, Raced::No);
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
