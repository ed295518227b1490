//! Disk zones: objects in files, an index in memory, hard byte limits, a
//! loader for warm restarts, and every disk operation off the serving
//! threads.
//!
//! * [`format`](mod@format): the versioned, checksummed file format (pure).
//! * [`durability`]: what a committed object survives (`fsync` or not).
//! * [`index`]: the in-memory index and the byte account.
//! * [`io`]: the bounded blocking pool every disk operation runs on.
//! * [`zone`]: a zone: its type and invariants, with one file per concept
//!   below it (object files, directory health and placement, the loader,
//!   reservation and eviction, new objects, lookup, head rewrites, purges).
//! * [`writer`]: writing one object while its fill streams it.
//! * [`lease`]: whether an evicted object's file may be overwritten in place.
//! * [`reader`]: reading a stored body block by block, checked.
//! * [`resident`]: whether a file range is in the page cache (for sendfile).
//!
//! ## Dependencies between these modules
//!
//! `durability`, `format`, `index`, `io`, `lease` and `resident` use none
//! of the others.
//! Two pairs use each other, on purpose:
//!
//! * `zone` and `writer`: the zone builds the [`writer::DiskWriter`] in the
//!   pool job that reserves room and creates its file, so that a caller
//!   that stops waiting drops a writer, whose `Drop` removes the file and
//!   gives the bytes back; the writer calls its zone to grow the
//!   reservation, to publish, or to discard.
//! * `zone` and `reader`: a lookup hands out [`reader::FileBody`]s; a body
//!   whose read fails or whose block fails its checksum tells its zone
//!   (through a `Weak`), which removes the object or takes the directory
//!   out of service.
//!
//! `crate::object` closes a loop through the second pair: an `ObjectBody`
//! may be a `FileBody`, and a lookup makes `StoredObject`s.
//!
//! `docs/disk-format.md` documents the file format and `docs/disk.md` the
//! design choices and their numbers.

pub mod durability;
pub mod format;
pub mod index;
pub mod io;
pub mod lease;
pub mod reader;
pub mod resident;
pub mod writer;
pub mod zone;

pub use durability::Durability;
pub use zone::{DirConfig, DiskZone, ZoneConfig, ZoneLookup};
