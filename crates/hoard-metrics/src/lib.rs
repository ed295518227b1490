//! What hoard counts: plain counters ([`counters`], one relaxed atomic each)
//! and labelled metrics ([`metrics`]: outcomes, latency histograms,
//! per-upstream results). Every layer above updates them; the admin API
//! renders them (`/metrics`, `/status`).
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod counters;
pub mod metrics;
