//! Pure HTTP caching policy for hoard.
//!
//! Everything in this crate is a function of its inputs: request and response
//! headers, configuration, and `now`. There is no I/O and no global time; the
//! proxy passes `now` from a [`clock::Clock`]. Each rule cites the section of
//! RFC 9111 (HTTP Caching), RFC 9110 (HTTP Semantics), RFC 5861 (stale
//! extensions), RFC 9211 (Cache-Status) or RFC 9213 (CDN-Cache-Control) it
//! implements.
#![deny(missing_docs, missing_debug_implementations)]

pub mod cache_control;
pub mod cache_status;
pub mod clock;
pub mod conditional;
pub mod config;
pub mod encoding;
pub mod facts;
pub mod freshness;
pub mod headers;
pub mod key;
pub mod range;
pub mod reuse;
pub mod status;
pub mod storable;
pub mod structured;
pub mod tags;
pub mod target;
pub mod vary;
