//! A disk zone: objects in files spread over one or more directories, an
//! index in memory, a hard byte limit.
//!
//! ## Model
//!
//! Each object is one file `DIR/xx/<id>-<serial>` in the format of
//! [`crate::format`]; `id` names the object (key and variant), `serial` the
//! write that made it, so a path never names two different files over time
//! and an unlink can never hit a newer copy. A key's directory is chosen by
//! weighted rendezvous hashing over the directories in service (the built-in
//! `split_clients`: no RAID needed, and removing a directory moves only its
//! own objects).
//!
//! The zone is split by what is done to it. Besides `mod.rs`, each file
//! uses only the files above it in this table:
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | the [`DiskZone`] type, its state, the invariants below, start |
//! | `file.rs` | one object file: its name, the checks every reader applies |
//! | `dirs.rs` | directories: health (out of service, probed back) and placement |
//! | `space.rs` | the byte account: reservation, eviction (one victim loop), unlinks |
//! | `load.rs` | the loader: indexing a zone's files at start |
//! | `write.rs` | a new object: placed, its writer started, published |
//! | `head.rs` | rewriting a stored head in place (a 304, a soft purge) |
//! | `lookup.rs` | finding an object for a request, the open-file cache |
//! | `purge.rs` | removing a key's objects, marking them stale |
//! | `tombstone.rs` | files that could not be unlinked, kept out of the index across restarts |
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
//! ## Invariants
//!
//! * The index's `used` covers every file of the zone that may exist on
//!   disk (published, reserved, being unlinked), so the files never add up
//!   to more than `max_size`. Bytes enter the account before a file is
//!   written (`space.rs`) and leave it only after an unlink returned, or pass
//!   to the new object that reuses the file.
//! * An entry leaves the index only through `DiskZone::take`, which also
//!   drops its open file from the cache and its directory's counters; its
//!   file is then unlinked (or reused) by the caller.
//! * New objects stay out of the zone while the loader runs (the account
//!   does not cover every file until it is done); lookups probe the disk.
//!
//! ## Locking
//!
//! One mutex around the [`Index`], held for map operations only: never
//! across an await and never during a disk operation. Disk operations run on
//! the zone's [`IoPool`]. The open-file cache is taken after the index
//! lock, never before it. `tombstones` and `buried` (mutexes) are each
//! taken alone. Directory
//! state, serials and the head epoch are atomics.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use hoard_policy::clock::Clock;
use parking_lot::Mutex;

use super::index::{Entry, Index};
use crate::catalog::Catalog;
use crate::events::{StoreEvent, StoreEvents};
use crate::format::{Head, Prefix};
use crate::io::{IoPool, PoolFile};

mod dirs;
mod file;
mod head;
mod load;
mod lookup;
mod purge;
mod space;
mod tombstone;
mod write;

pub use dirs::{Dir, DirConfig, DIR_RETRY};
pub use head::Rewrite;
pub use lookup::ZoneLookup;
pub(crate) use space::Victims;

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
    /// What a committed object survives (see [`crate::disk::durability`]).
    pub durability: crate::disk::Durability,
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
    /// Per directory, the files that could not be unlinked (see
    /// [`tombstone`]): never indexed, removed by the loader.
    buried: Mutex<Vec<tombstone::Buried>>,
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

/// An object file kept open with its checked head and block sums, so a
/// repeat hit opens, stats and decodes nothing; once its file is verified,
/// also the object built from them (`hit`), so a repeat hit builds nothing
/// either (a head rewrite replaces the whole entry, see `lookup`).
#[derive(Debug)]
struct OpenObject {
    /// The object a hit returns, built at the first hit after the file
    /// was verified (its body then never needs reading before a response).
    hit: std::sync::OnceLock<Arc<crate::object::StoredObject>>,
    serial: u64,
    file: Arc<PoolFile>,
    prefix: Prefix,
    slot: u8,
    generation: u64,
    head: Head,
    sums: Arc<[u64]>,
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
        let mut buried = Vec::new();
        for d in &cfg.dirs {
            fs::create_dir_all(&d.path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", d.path.display())))?;
            dirs.push(Dir::new(d));
            buried.push(tombstone::read(&d.path));
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
            buried: Mutex::new(buried),
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

    /// True when the index has an object or variants for `primary`.
    pub fn knows(&self, primary: u128) -> bool {
        let ix = self.index.lock();
        ix.map.contains_key(&primary) || ix.varies.contains_key(&primary)
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

    /// Removes an entry from the index (lock held by the caller) and returns
    /// what to unlink.
    fn take(&self, ix: &mut Index, id: u128) -> Option<(PathBuf, u64)> {
        let e = ix.remove(id)?;
        // An open file would keep its blocks allocated after the unlink.
        self.open.remove(&id);
        self.account_dir(&e, false);
        Some((self.path(e.dir, id, e.serial), e.bytes()))
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
}
