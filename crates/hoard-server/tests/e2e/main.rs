//! End-to-end cases: the real proxy in-process, a strict fake origin, a raw
//! client. Naming follows varnishtest: b basic proxying, c RFC 9111
//! semantics, k keys and Vary, w fills, e store limits, f robustness, h HTTP/2,
//! d disk zones, r ranges, s slice mode, o operations (purge, metrics, logs),
//! i clusters of several proxies.

/// The binary's allocator, so that `/status` splits the heap as it does in
/// production (z10001).
#[global_allocator]
static GLOBAL: hoard_heap::Accounted = hoard_heap::Accounted;

mod b_basic;
mod b_origin_tls;
mod b_proxy_protocol;
mod b_routing;
mod b_rules;
mod b_upstream;
mod b_websocket;
mod c_freshness;
mod c_request;
mod c_storable;
mod c_validation;
mod d_disk;
mod d_faults;
mod d_fills;
mod d_sendfile;
mod e_store;
mod f_abuse;
mod f_interim;
mod f_limits;
mod f_origin;
mod f_poison;
mod f_target;
mod g_reload;
mod h_http2;
mod h_tls;
mod h_websocket;
mod i_cluster;
mod i_health;
mod i_purge;
mod j_bus;
mod j_members;
mod k_keys;
mod l_http3;
mod m_acme;
mod m_acme_cluster;
mod n_races;
mod n_store;
mod n_store_races;
mod o_access_log;
mod o_metrics;
mod o_purge;
mod q_edge;
mod r_failover;
mod r_keys;
mod r_logs;
mod r_partial;
mod r_purge;
mod r_range;
mod r_routes;
mod r_sni;
mod s_cluster;
mod s_coding;
mod s_ops;
mod s_resume;
mod s_site;
mod s_slice;
mod s_store;
mod s_trust;
mod u_filters;
mod v_esi;
mod v_signed;
mod w_coalesce;
mod w_fill;
mod w_h2_origin;
mod w_stale;
mod x_idle;
mod y_health;
mod z_encoding;
mod z_memory;

// Helpers shared by the case files.
mod acme;
mod admin;
mod cluster;
mod disk;

use std::time::Duration;

/// Seconds, for clock advances.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The test clock's start as an HTTP-date, shifted by `delta` seconds.
pub fn http_date(delta: i64) -> String {
    let base = hoard_testkit::TestClock::start();
    let t = if delta >= 0 {
        base + Duration::from_secs(delta as u64)
    } else {
        base - Duration::from_secs((-delta) as u64)
    };
    httpdate::fmt_http_date(t)
}
