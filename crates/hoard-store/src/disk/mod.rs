//! Disk zones: objects in files, an index in memory, hard byte limits, a
//! loader for warm restarts, and every disk operation off the serving
//! threads.
//!
//! * [`format`](mod@format): the versioned, checksummed file format (pure).
//! * [`index`]: the in-memory index and the byte account.
//! * [`io`]: the bounded blocking pool every disk operation runs on.
//! * [`zone`]: a zone: lookup, placement over directories, eviction,
//!   loading, directory health.
//! * [`writer`]: writing one object while its fill streams it.
//! * [`lease`]: whether an evicted object's file may be overwritten in place.
//! * [`reader`]: reading a stored body block by block, checked.
//! * [`resident`]: whether a file range is in the page cache (for sendfile).
//!
//! `docs/disk-format.md` documents the file format and `docs/disk.md` the
//! design choices and their numbers.

pub mod format;
pub mod index;
pub mod io;
pub mod lease;
pub mod reader;
pub mod resident;
pub mod writer;
pub mod zone;

pub use zone::{DirConfig, DiskZone, ZoneConfig, ZoneLookup};
