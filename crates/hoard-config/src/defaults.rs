//! Every default of the configuration, in one place: the values a key
//! takes when the file (or the command line) does not set it. The README's
//! configuration reference documents the same values.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use hoard_policy::config::CachePolicy;
use hoard_policy::key::KeyTemplate;

use super::{
    CacheConfig, HostHeader, ListenerConfig, PathMatch, RouteConfig, ServerAddr, ServerConfig,
    UpstreamConfig,
};

/// The default name in `Via` and `Cache-Status`.
pub const VIA: &str = "hoard";

/// The listener when none is configured (`--listen`).
pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 8000));
/// Listeners accept HTTP/2 unless told otherwise.
pub const LISTENER_HTTP2: bool = true;
/// A disk zone's limit when `--cache-dir` gives no `--disk-size`.
pub const DISK_SIZE: u64 = 1 << 30;
/// Access log lines held for the writer before new ones are dropped.
pub const ACCESS_LOG_BUFFER: usize = 65536;

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            name: None,
            address: LISTEN,
            tls: None,
            certs: Vec::new(),
            http2: LISTENER_HTTP2,
            http3: false,
            proxy_protocol: None,
            acme: Vec::new(),
            redirect_https: None,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            threads: 0,
            header_read_timeout: Duration::from_secs(10),
            max_header_size: 16 << 10,
            max_headers: 100,
            max_uri_length: 8 << 10,
            max_body_size: 64 << 20,
            via: VIA.into(),
            debug_headers: false,
            sendfile: true,
            shutdown_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_requests_per_connection: 10_000,
            http2_max_streams: 256,
            http3_max_streams: 100,
            keep_alive_timeout: Duration::from_secs(75),
            send_timeout: Duration::from_secs(60),
            ignore_client_abort: false,
            tunnel_idle_timeout: Duration::from_secs(3600),
            body_read_timeout: Duration::from_secs(60),
            max_resets: 200,
            trusted_proxies: Vec::new(),
            run_as: None,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            memory_size: 256 << 20,
            max_object_size: 8 << 20,
            dir: PathBuf::from("hoard-cache"),
            zones: Vec::new(),
            placement: Vec::new(),
            max_prefetches: 8,
            max_fills: 10_000,
        }
    }
}

impl UpstreamConfig {
    /// An upstream with default settings.
    pub fn new(name: &str, servers: Vec<ServerAddr>) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            servers,
            backup: Vec::new(),
            retry_on: super::RetryOn::DEFAULT,
            tries: None,
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(30),
            max_idle: 64,
            idle_timeout: Duration::from_secs(60),
            host: HostHeader::Preserve,
            down_after: 3,
            down_backoff_max: Duration::from_secs(30),
            health_check: None,
            tls: None,
            protocol: super::OriginProtocol::H1,
            h2_max_streams: 100,
        }
    }
}

impl RouteConfig {
    /// A catch-all caching route to upstream 0 with default policy.
    pub fn catch_all() -> RouteConfig {
        RouteConfig {
            path: PathMatch::Prefix("/".into()),
            upstream: 0,
            cache: true,
            policy: CachePolicy::default(),
            key: KeyTemplate::default(),
            cluster_key: None,
            coalesce: true,
            upgrade: true,
            coalesce_timeout: Duration::from_secs(30),
            fill_max_age: Duration::from_secs(30),
            hit_for_pass: Duration::from_secs(120),
            zone: None,
            slice: None,
            slice_prefetch: 1,
            slice_direct_max: 64 << 10,
            cold_range: super::ColdRange::Fill,
            encodings: vec![
                hoard_policy::encoding::Coding::Br,
                hoard_policy::encoding::Coding::Zstd,
                hoard_policy::encoding::Coding::Gzip,
            ],
            compress_types: hoard_policy::encoding::DEFAULT_TYPES
                .iter()
                .map(|s| (*s).to_string())
                .collect(),
            compress_min_size: 1024,
            fill_accept_encoding: http::HeaderValue::from_static("identity"),
            forward_headers: Vec::new(),
            bypass: Vec::new(),
            no_store: Vec::new(),
            forward_unkeyed: false,
            edge: None,
            max_body_size: None,
            filters: Vec::new(),
            origin_filters: Vec::new(),
            when: Vec::new(),
            rewrite_query: None,
            esi: None,
            store: Vec::new(),
            count_hits: false,
            normalise: Vec::new(),
        }
    }
}
