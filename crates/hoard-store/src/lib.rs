//! Object storage for hoard.
//!
//! * [`store`]: the [`Store`] the proxy talks to: a memory tier in front
//!   of disk zones, one interface (lookup, disk writer, insert, update,
//!   remove).
//! * [`object`]: a complete stored response and its lifecycle.
//! * [`busy`]: the body of an object still being filled, read while written.
//! * [`inflight`]: the protocol of the proxy's in-flight table (one fill
//!   per key, one outcome per fill, a bound on fills).
//! * [`memory`]: the memory tier, bounded in bytes, S3-FIFO eviction.
//! * [`disk`]: disk zones (files, index, loader, limits).
//! * [`reader`]: a stored body read from its file, block by block, checked.
//! * [`format`](mod@format): the disk file format (pure).
//! * [`io`]: the bounded blocking pool every disk operation runs on.
//! * [`catalog`]: stored keys and their tags, for purges.
//! * [`events`]: what the tiers report to the proxy's counters.
#![deny(missing_docs, missing_debug_implementations)]

pub mod bans;
pub mod busy;
pub mod catalog;
pub mod disk;
pub mod events;
pub mod format;
pub mod inflight;
pub mod io;
pub mod memory;
pub mod object;
pub mod reader;
pub mod store;
mod sync;

pub use events::{NoEvents, StoreEvent, StoreEvents};
pub use memory::{InsertError, Lookup, MemoryStore};
pub use store::Store;
