//! Object storage for hoard.
//!
//! * [`object`]: a complete stored response and its lifecycle.
//! * [`busy`]: the body of an object still being filled, read while written.
//! * [`memory`]: the memory tier, bounded in bytes, S3-FIFO eviction.
//!
//! The proxy talks to [`Store`], which fronts the tiers. Today there is one
//! tier (memory); disk tiers slot in behind the same `lookup` / `insert` /
//! `remove_all` calls, with bodies read as chunk streams so an object never has
//! to be whole in memory before its first byte goes out.
#![deny(missing_docs, missing_debug_implementations)]

pub mod busy;
pub mod memory;
pub mod object;
mod sync;

pub use memory::{InsertError, Lookup, MemoryStore as Store};
