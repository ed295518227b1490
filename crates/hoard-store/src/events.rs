//! What the store reports to whoever counts: one enum, one name per event,
//! used as is in logs and metrics.

use crate::format::Reject;

/// Something that happened in a tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreEvent {
    /// A lookup was answered from a disk zone.
    DiskHit,
    /// An object read from disk was admitted to the memory tier.
    MemoryPromotion,
    /// An object was published in a disk zone.
    DiskStored,
    /// An object was evicted from a disk zone to make room.
    EvictedSize,
    /// An evicted object's file was taken over by a new object (overwritten
    /// in place instead of unlinked).
    DiskRecycled,
    /// An object was removed from a disk zone after `inactive` without use.
    EvictedInactive,
    /// The loader looked at a file.
    LoadScanned,
    /// The loader indexed an object.
    Loaded,
    /// A file was refused (by the loader, or when read) and removed.
    Rejected(Reject),
    /// The loader finished a zone.
    LoadDone,
    /// A disk operation failed (I/O error, no space).
    DiskError,
    /// A fill's disk copy was given up (no room, too large, error); the
    /// client still got the body.
    WriteAbandoned,
    /// A directory was taken out of service.
    DirOffline,
    /// A directory came back into service.
    DirOnline,
    /// A lookup found an object a pending ban selects (removed, or made
    /// stale by a soft ban).
    BannedAtLookup,
    /// A ban's sweep removed (or made stale) an object.
    BannedBySweep,
    /// A ban's sweep finished; the ban was dropped.
    BanSwept,
    /// A file that could not be unlinked was recorded as a tombstone (the
    /// loader will not index it).
    Tombstoned,
    /// The loader removed a file a tombstone named (or found it gone) and
    /// dropped the tombstone.
    TombstoneCleared,
    /// A file or directory was synced to the device (`durability = "power"`).
    Synced,
}

impl StoreEvent {
    /// The event's name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreEvent::DiskHit => "disk-hit",
            StoreEvent::MemoryPromotion => "memory-promotion",
            StoreEvent::DiskStored => "disk-stored",
            StoreEvent::EvictedSize => "evicted-size",
            StoreEvent::DiskRecycled => "disk-recycled",
            StoreEvent::EvictedInactive => "evicted-inactive",
            StoreEvent::LoadScanned => "load-scanned",
            StoreEvent::Loaded => "loaded",
            StoreEvent::Rejected(r) => r.as_str(),
            StoreEvent::LoadDone => "load-done",
            StoreEvent::DiskError => "disk-error",
            StoreEvent::WriteAbandoned => "write-abandoned",
            StoreEvent::DirOffline => "dir-offline",
            StoreEvent::DirOnline => "dir-online",
            StoreEvent::BannedAtLookup => "banned-at-lookup",
            StoreEvent::BannedBySweep => "banned-by-sweep",
            StoreEvent::BanSwept => "ban-swept",
            StoreEvent::Tombstoned => "tombstoned",
            StoreEvent::TombstoneCleared => "tombstone-cleared",
            StoreEvent::Synced => "synced",
        }
    }
}

/// Receives store events (the proxy's counters).
pub trait StoreEvents: Send + Sync + std::fmt::Debug {
    /// One event in zone `zone`.
    fn event(&self, zone: &str, event: StoreEvent);
}

/// Drops every event.
#[derive(Debug, Default)]
pub struct NoEvents;

impl StoreEvents for NoEvents {
    fn event(&self, _zone: &str, _event: StoreEvent) {}
}
