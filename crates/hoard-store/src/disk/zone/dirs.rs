//! A zone's directories: which are in service, and which one takes a new
//! object.
//!
//! ## Model
//!
//! Each directory has a weight and a state, online or offline. A new
//! object's directory is chosen by weighted rendezvous hashing over the
//! directories in service ([`DiskZone::choose_dir`]): the built-in
//! `split_clients`, where removing a directory moves only its own objects.
//!
//! ## Lifecycle of a directory
//!
//! | state | objects | next |
//! |---|---|---|
//! | online | looked up, written | an I/O error ([`DiskZone::dir_failed`]): offline until now + [`DIR_RETRY`] |
//! | offline | misses; no new objects | retry time reached: the next read or placement probes it ([`DiskZone::dir_usable`]); a probe file written and removed: online; else offline for another [`DIR_RETRY`] |
//!
//! Objects of an offline directory stay indexed: they are served again once
//! it is back.
//!
//! ## Locking
//!
//! Directory state and counters are atomics: no lock. A probe writes a file,
//! so [`DiskZone::dir_usable`] and [`DiskZone::choose_dir`] block: call them
//! on the zone's pool.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::DiskZone;
use crate::disk::index::Entry;
use crate::events::StoreEvent;

/// How long a directory taken out of service waits before it is tried again.
pub const DIR_RETRY: Duration = Duration::from_secs(10);

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
    pub(super) retry_at: AtomicU64,
    objects: AtomicU64,
    bytes: AtomicU64,
}

impl Dir {
    /// A directory in service.
    pub(super) fn new(cfg: &DirConfig) -> Dir {
        Dir {
            path: cfg.path.clone(),
            weight: cfg.weight.max(1),
            online: AtomicBool::new(true),
            retry_at: AtomicU64::new(0),
            objects: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

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

impl DiskZone {
    pub(super) fn account_dir(&self, e: &Entry, add: bool) {
        let d = &self.dirs[e.dir as usize];
        if add {
            d.objects.fetch_add(1, Ordering::Relaxed);
            d.bytes.fetch_add(e.bytes(), Ordering::Relaxed);
        } else {
            d.objects.fetch_sub(1, Ordering::Relaxed);
            d.bytes.fetch_sub(e.bytes(), Ordering::Relaxed);
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
    pub(super) fn dir_usable(&self, dir: usize) -> bool {
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
    pub(super) fn choose_dir(&self, id: u128) -> Option<u8> {
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
}
