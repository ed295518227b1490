//! Disk zones: objects in files, an index in memory, hard byte limits, a
//! loader for warm restarts, and every disk operation off the serving
//! threads.
//!
//! * [`durability`]: what a committed object survives (`fsync` or not).
//! * [`index`]: the in-memory index and the byte account.
//! * [`zone`]: a zone: its type and invariants, with one file per concept
//!   below it (object files, directory health and placement, the loader,
//!   reservation and eviction, new objects, lookup, head rewrites, purges).
//! * [`writer`]: writing one object while its fill streams it.
//! * [`lease`]: whether an evicted object's file may be overwritten in place.
//!
//! Below this module, and re-exported here under their old names (`format`,
//! `io`, `reader`, `resident`):
//!
//! * [`crate::format`]: the versioned, checksummed file format (pure).
//! * [`crate::io`]: the bounded blocking pool every disk operation runs on.
//! * [`crate::reader`]: reading a stored body block by block, checked, and
//!   whether a file range is in the page cache (for sendfile).
//!
//! ## Dependencies
//!
//! This module uses `format`, `io`, `reader`, `object` (a lookup makes
//! `StoredObject`s, whose body may be a `FileBody`), `catalog` and
//! `events`; none of them uses it.
//!
//! `durability`, `index` and `lease` use none of the others here.
//! One pair uses each other, on purpose: `zone` and `writer`. The zone
//! builds the [`writer::DiskWriter`] in the pool job that reserves room
//! and creates its file, so that a caller that stops waiting drops a
//! writer, whose `Drop` removes the file and gives the bytes back; the
//! writer calls its zone to grow the reservation, to publish, or to
//! discard.
//!
//! A lookup hands out [`crate::reader::FileBody`]s; a body whose read
//! fails or whose block fails its checksum tells its zone through a `Weak`
//! to the reader's `ReadFailed`, which the zone implements (it removes the
//! object or takes the directory out of service): the reader does not name
//! the zone.
//!
//! `docs/disk-format.md` documents the file format and `docs/disk.md` the
//! design choices and their numbers.

pub mod durability;
pub mod index;
pub mod lease;
pub mod writer;
pub mod zone;

pub use crate::format;
pub use crate::io;
pub use crate::reader;
pub use crate::reader::resident;

pub use durability::Durability;
pub use zone::{DirConfig, DiskZone, ZoneConfig, ZoneLookup};
