//! hoard's request engine: the request path as named phases (the
//! pipeline), the fill engine that fetches, coalesces and stores, the
//! bodies clients get, encodings and the access log.
//!
//! It serves one request at a time through [`pipeline::Pipeline::serve`];
//! the listeners that accept connections and the running proxy that
//! builds it from a configuration are in `hoard-server`. See
//! `docs/architecture.md` for the crate map, the request path and the
//! object lifecycle.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod access_log;
pub mod body;
pub mod build_info;
pub mod encode;
pub mod esi;
pub mod fill;
pub mod pipeline;
pub mod request_body;
pub mod request_id;
pub mod sendfile;
pub mod tally;
pub mod via;
