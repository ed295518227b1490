//! Configuration: the resolved [`Config`] and how it is built.
//!
//! Two ways in, one type out:
//! * [`Config::from_toml`] reads a file ([`raw`] mirrors it and rejects unknown
//!   keys); errors name the file, line and key.
//! * [`Config::quick`] builds the same structure from the command-line quick
//!   start (`--upstream`, `--listen`, `--cache-size`, ...).
//!
//! Every default lives in this file, next to the field it fills, and is
//! documented in the README's configuration reference.

pub mod acme;
mod certs;
pub mod cluster;
pub mod defaults;
mod durability;
mod edge;
mod include;
mod listeners;
pub mod ops;
mod query_names;
mod raw;
mod route_keys;
pub mod rules;
mod run_as;
mod servers;
pub mod sites;
pub mod units;
mod via;
pub mod zones;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hoard_policy::config::{CachePolicy, DefaultTtl, StatusMatch};
use hoard_policy::key::{KeyTemplate, QueryKey};
use http::HeaderName;
use regex::Regex;

pub use cluster::{ClusterConfig, Member};
pub use ops::{AccessLogConfig, AdminConfig, Cidr, LogFormat, LogTarget};
use raw::{RawConfig, RawKey, RawRoute};
use servers::parse_server_url;
use toml::Spanned;

/// An error in the configuration: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `command line`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key at fault, e.g. `site[0].route[1].upstream`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(
                f,
                "config error: {}:{}: `{}`: {}",
                self.file, l, self.key, self.message
            ),
            None => write!(
                f,
                "config error: {}: `{}`: {}",
                self.file, self.key, self.message
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Sockets to accept on.
    pub listeners: Vec<ListenerConfig>,
    /// Limits and server behaviour.
    pub server: ServerConfig,
    /// The cache store.
    pub cache: CacheConfig,
    /// Origin groups, referenced by routes by index.
    pub upstreams: Vec<UpstreamConfig>,
    /// Sites selected by Host (see `pipeline::select_site`).
    pub sites: Vec<SiteConfig>,
    /// The admin listener, `PURGE`, tag fields.
    pub admin: AdminConfig,
    /// The access log.
    pub access_log: AccessLogConfig,
    /// The cluster this node belongs to, if any (read at start; a reload
    /// keeps the one the process started with).
    pub cluster: Option<ClusterConfig>,
    /// Automatic HTTPS, for listeners with `acme` names (read at start).
    pub acme: acme::AcmeConfig,
}

/// A listening socket.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// `name`, for sites' `listeners`.
    pub name: Option<String>,
    /// Address; port 0 picks a free port.
    pub address: SocketAddr,
    /// TLS (HTTP/1.1 and h2 by ALPN); plain otherwise (HTTP/1.1 and h2c prior knowledge).
    pub tls: Option<TlsConfig>,
    /// Certificate files picked by SNI (`tls = { certs = [...] }`), each
    /// for the DNS names of its subjectAltName, the first for no or an
    /// unknown server name (see `crate::server::sni`). Empty unless given
    /// (then `tls` is `None`); may go with `acme`.
    pub certs: Vec<TlsConfig>,
    /// Accept HTTP/2. Default: true.
    pub http2: bool,
    /// Also serve HTTP/3 over QUIC on the same port (UDP), advertised with
    /// `Alt-Svc` (TLS listeners only). Default: false.
    pub http3: bool,
    /// PROXY protocol (v1 and v2) expected before every connection's
    /// first byte, from these peers (others are closed; the file needs at
    /// least one); `None`: off.
    pub proxy_protocol: Option<Vec<Cidr>>,
    /// Certificates obtained and renewed over ACME, each for its names
    /// (`tls = { acme = ["a.example", ["b.example", "www.b.example"]] }`:
    /// a name alone is a certificate of its own, a list one certificate
    /// for all its names; lower case, sorted; see `crate::acme`). The
    /// listener is a TLS one and picks a certificate by SNI.
    pub acme: Vec<Vec<String>>,
    /// A plain listener that answers every request (but ACME challenges)
    /// with a redirect to HTTPS on this port (`redirect_https = 443`).
    pub redirect_https: Option<u16>,
}

/// Certificate and key files (PEM).
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// Limits and server behaviour.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Runtime worker threads; 0 = one per core. Default: 0.
    pub threads: usize,
    /// Time allowed to receive a request head. Default: 10s.
    pub header_read_timeout: Duration,
    /// Largest request head (431 beyond). Default: 16 KiB.
    pub max_header_size: usize,
    /// Most request header fields (431 beyond). Default: 100.
    pub max_headers: usize,
    /// Longest request target (414 beyond). Default: 8 KiB.
    pub max_uri_length: usize,
    /// Largest request body (413 beyond). Default: 64 MiB.
    pub max_body_size: u64,
    /// Name in `Via` and `Cache-Status`. Default: `hoard`.
    pub via: String,
    /// Add the cache key to `Cache-Status`. Default: false.
    pub debug_headers: bool,
    /// Send disk hits with `sendfile` on plain HTTP/1.1 connections.
    /// Default: true.
    pub sendfile: bool,
    /// How long a shutdown waits for connections to drain. Default: 10s.
    pub shutdown_timeout: Duration,
    /// Client connections open at most; beyond, new ones are closed at
    /// once (counted as `connections_refused`). Default: 10000.
    pub max_connections: usize,
    /// Requests one keep-alive connection may carry; the last is answered
    /// with `Connection: close`. Default: 10000.
    pub max_requests_per_connection: u64,
    /// Concurrent HTTP/2 streams per connection. Default: 256.
    pub http2_max_streams: u32,
    /// A keep-alive connection with no request in flight and no byte either
    /// way for this long is closed (HTTP/2: GOAWAY). Default: 75s.
    pub keep_alive_timeout: Duration,
    /// A response write blocked this long (the client stopped reading)
    /// closes the connection. Default: 60s.
    pub send_timeout: Duration,
    /// An upgrade tunnel with no byte either way this long is closed.
    /// Default: 1h.
    pub tunnel_idle_timeout: Duration,
    /// A request body that stops arriving for this long gets 408. Default: 60s.
    pub body_read_timeout: Duration,
    /// Requests a client may reset (HTTP/2 `RST_STREAM`, or abandon) on one
    /// connection within 10 s before it gets GOAWAY. Default: 200.
    pub max_resets: u64,
    /// Peers whose forwarding chain (`X-Forwarded-For`, `Forwarded`,
    /// `X-Forwarded-Proto`, `X-Forwarded-Host`) is kept and extended. Default: none.
    pub trusted_proxies: Vec<Cidr>,
    /// Who serves: started as root, hoard binds and opens what needs root,
    /// then drops to this user and group (`user`, `group`). Default: none.
    pub run_as: Option<crate::privileges::RunAs>,
}

/// The cache store.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Byte limit of the memory tier (headers + body + bookkeeping). Default: 256 MiB.
    pub memory_size: u64,
    /// Largest object stored; larger responses are passed through. Default: 8 MiB.
    pub max_object_size: u64,
    /// Directory of the quick start's disk zone. Default: `hoard-cache`
    /// under the working directory (used only when `--cache-dir` is given).
    pub dir: PathBuf,
    /// Disk zones behind the memory tier (none: memory only).
    pub zones: Vec<hoard_store::disk::ZoneConfig>,
    /// Rules choosing a zone for new objects.
    pub placement: Vec<zones::PlacementRule>,
    /// Slice prefetches running at once, over all routes. Default: 8.
    pub max_prefetches: usize,
    /// Fills held in the in-flight table at most; a miss beyond it goes to
    /// the origin uncached (a slice gets 503), counted as `fills_refused`.
    /// Default: 10000.
    pub max_fills: usize,
}

impl CacheConfig {
    /// The zone a new object goes to (see [`zones`]).
    pub fn place(
        &self,
        route_zone: Option<usize>,
        path: &str,
        content_type: Option<&str>,
        len: Option<u64>,
    ) -> Option<usize> {
        zones::place(
            self.zones.len(),
            &self.placement,
            route_zone,
            path,
            content_type,
            len,
        )
    }
}

/// What `Host` to send to the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostHeader {
    /// The client's Host (default).
    Preserve,
    /// The origin server's `host:port`.
    Server,
    /// A fixed value.
    Fixed(String),
}

/// One origin server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddr {
    /// `host:port` to connect to, or `unix:/path` for a Unix socket.
    pub authority: String,
    /// `https://`: spoken over TLS (the upstream's `tls`).
    pub tls: bool,
    /// The host part (the default TLS server name; `localhost` for a
    /// Unix socket, as its `Host` when the request has none).
    pub host: String,
}

impl ServerAddr {
    /// A plain `http://` server at `host:port`.
    pub fn http(authority: impl Into<String>) -> ServerAddr {
        let authority = authority.into();
        let host = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(h, _)| h)
            .to_string();
        ServerAddr {
            authority,
            tls: false,
            host,
        }
    }
}

/// A group of origin servers with its connection settings.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Name used by routes.
    pub name: String,
    /// Servers, used round-robin.
    pub servers: Vec<ServerAddr>,
    /// Backup servers: used only while every one of `servers` is down or
    /// has failed for the request (see `upstream::failover`).
    pub backup: Vec<ServerAddr>,
    /// When a request that reached a server goes on to the next one.
    /// Default: `["error"]`.
    pub retry_on: crate::upstream::failover::RetryOn,
    /// Most servers a request is tried on. Default (`None`): every server
    /// once, backups included.
    pub tries: Option<u32>,
    /// Connect timeout (504 when exceeded). Default: 3s.
    pub connect_timeout: Duration,
    /// Time to wait for response headers and between body reads (504 / abort). Default: 30s.
    pub read_timeout: Duration,
    /// Idle keep-alive connections kept per server. Default: 64.
    pub max_idle: usize,
    /// How long an idle connection is kept. Default: 60s.
    pub idle_timeout: Duration,
    /// The Host sent. Default: preserve the client's.
    pub host: HostHeader,
    /// Consecutive failures after which a server counts as down; 0 never. Default: 3.
    pub down_after: u32,
    /// Longest backoff of a down server (it starts at 1 s and doubles). Default: 30s.
    pub down_backoff_max: Duration,
    /// TLS to its `https://` servers (built from the `tls` table, or the
    /// defaults: system roots, verified).
    pub tls: Option<crate::upstream::tls::OriginTls>,
}

/// How a site is selected by Host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// Exactly this host (lowercase, no port).
    Exact(String),
    /// `*.example.com`: any subdomain.
    Suffix(String),
}

/// A virtual host.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// Host patterns; empty: it answers Hosts no site lists (see
    /// `pipeline::select_site`).
    pub hosts: Vec<HostMatch>,
    /// Routes, tried in order (shared: a fill holds its route).
    pub routes: Vec<std::sync::Arc<RouteConfig>>,
    /// Pages for hoard's own errors (`error_pages`), routes inherit them.
    pub error_pages: Option<std::sync::Arc<crate::edge::error_pages::ErrorPages>>,
    /// `response_headers`: under each route's own (merged into its edge),
    /// and on the site's answer for a path no route takes.
    pub response_headers: crate::edge::headers::HeaderEdits,
    /// `scheme = "http"` (`Some(false)`) or `"https"` (`Some(true)`): the
    /// site serves only requests that arrived so. `None`: both.
    pub tls: Option<bool>,
    /// Its listeners, and whether it answers Hosts no site lists.
    pub bind: sites::Bind,
}

/// How a route matches the path.
#[derive(Debug, Clone)]
pub enum PathMatch {
    /// Path starts with this.
    Prefix(String),
    /// Path matches this regex.
    Regex(Regex),
}

/// The smallest slice size (`slice = "..."`): smaller slices cost more
/// origin requests and index entries than they save.
pub const MIN_SLICE: u64 = 4096;

/// A route: which upstream, and how to cache.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Path match.
    pub path: PathMatch,
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// Cache at all. Default: true.
    pub cache: bool,
    /// RFC 9111 knobs.
    pub policy: CachePolicy,
    /// Cache key.
    pub key: KeyTemplate,
    /// In a cluster: what a key's owner is chosen by, when not the cache
    /// key without its `Vary` part (`cluster_key`, the same table as `key`;
    /// e.g. `{ query = "none" }` gives every query of a path one owner).
    pub cluster_key: Option<KeyTemplate>,
    /// Coalesce concurrent misses into one fill. Default: true.
    pub coalesce: bool,
    /// Forward `Upgrade` requests (WebSockets) and tunnel a `101`.
    /// Default: true; false answers them 400.
    pub upgrade: bool,
    /// How long a request waits for another's fill before going to the
    /// origin on its own, uncached (like nginx `proxy_cache_lock_timeout`). Default: 30s.
    pub coalesce_timeout: Duration,
    /// A fill older than this is not joined; a new one may start. Default: 30s.
    pub fill_max_age: Duration,
    /// How long a key whose response was uncacheable goes straight to the origin. Default: 120s; 0 disables.
    pub hit_for_pass: Duration,
    /// The disk zone for this route's objects (index into the zones);
    /// `None`: the placement rules choose.
    pub zone: Option<usize>,
    /// Slice mode: objects are fetched and cached as aligned slices of this
    /// many bytes (see `pipeline::slice`). Default: off.
    pub slice: Option<u64>,
    /// Slices fetched ahead of the last one a request needs. Default: 1.
    pub slice_prefetch: u32,
    /// Forwarding fields the client may send to the origin (see
    /// `pipeline::forwarding`); each is part of the cache key unless
    /// `forward_unkeyed`. Default: none.
    pub forward_headers: Vec<HeaderName>,
    /// Requests that go to the origin without a lookup (first match wins).
    pub bypass: Vec<rules::Rule>,
    /// Requests that are looked up but whose responses are never stored.
    pub no_store: Vec<rules::Rule>,
    /// The `forward_headers` are not added to the key (logged at start).
    pub forward_unkeyed: bool,
    /// A range at most this long that starts far past what its slice's
    /// fill has received is fetched from the origin on its own. Default:
    /// 64 KiB; 0 disables.
    pub slice_direct_max: u64,
    /// What a range request for an object not in the cache fetches.
    /// Default: the whole object.
    pub cold_range: ColdRange,
    /// The content codings hoard makes of stored responses, in preference
    /// order (`encodings`; see `crate::encode`). Default: br, zstd, gzip;
    /// empty: hoard stores and serves what the origin sent, as it is.
    pub encodings: Vec<hoard_policy::encoding::Coding>,
    /// Media types worth compressing (`compress_types`; `text/*` matches
    /// every text type). Default: `hoard_policy::encoding::DEFAULT_TYPES`.
    pub compress_types: Vec<String>,
    /// Smallest body compressed (`compress_min_size`). Default: 1 KiB.
    pub compress_min_size: u64,
    /// The `Accept-Encoding` fills send on a route with `encodings`
    /// (`fill_accept_encoding`). Default: `identity` (every client accepts
    /// what the fill's first clients stream); a coded answer is decoded
    /// once when it is stored.
    pub fill_accept_encoding: http::HeaderValue,
    /// Redirect, limits, access, credentials, header edits, error pages
    /// (see `edge`); `None` when the route sets none of them.
    pub edge: Option<std::sync::Arc<crate::edge::Edge>>,
    /// Largest request body (413 beyond): the route's `max_body_size`,
    /// else its site's; `None`: `server.max_body_size`.
    pub max_body_size: Option<u64>,
}

/// What a range request for an object not in the cache fetches (route
/// `cold_range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdRange {
    /// `"fill"`: one fill of the whole object, shared by every request for
    /// it; each range is answered as soon as its bytes arrive.
    Fill,
    /// `"forward"`: the client's `Range` goes to the origin and a 206 is
    /// kept as the object's partial copy (RFC 9111 §3.3), reused for the
    /// ranges it holds and completed when the whole object is asked for.
    Forward,
}

impl SiteConfig {
    /// The index of the first route matching `path`.
    pub fn route_for(&self, path: &str) -> Option<usize> {
        self.routes.iter().position(|r| match &r.path {
            PathMatch::Prefix(p) => path.starts_with(p.as_str()),
            PathMatch::Regex(re) => re.is_match(path),
        })
    }
}

/// The command-line quick start.
#[derive(Debug, Clone, Default)]
pub struct QuickStart {
    /// `--upstream http://host:port` (required).
    pub upstream: String,
    /// `--listen`; default 127.0.0.1:8000.
    pub listen: Option<SocketAddr>,
    /// `--tls-cert` and `--tls-key`: the listener serves HTTPS.
    pub tls: Option<TlsConfig>,
    /// `--http3`: HTTP/3 on the same port too (needs `tls`).
    pub http3: bool,
    /// `--domain` (repeated): names whose certificate is obtained over
    /// ACME; hoard then serves HTTPS on `tls_listen` and redirects plain
    /// HTTP on `listen` to it.
    pub domains: Vec<String>,
    /// `--tls-listen`: the HTTPS address with `domains` (default 0.0.0.0:443).
    pub tls_listen: Option<SocketAddr>,
    /// `--acme-email`.
    pub acme_email: Option<String>,
    /// `--acme-directory`: another CA.
    pub acme_directory: Option<String>,
    /// `--acme-ca-root`: a root trusted for that CA's own HTTPS.
    pub acme_ca_root: Option<PathBuf>,
    /// `--cache-size`.
    pub cache_size: Option<u64>,
    /// `--max-object-size`.
    pub max_object_size: Option<u64>,
    /// `--default-ttl` for heuristically cacheable statuses without freshness information.
    pub default_ttl: Option<Duration>,
    /// `--stale-while-revalidate`.
    pub stale_while_revalidate: Option<Duration>,
    /// `--stale-if-error`.
    pub stale_if_error: Option<Duration>,
    /// `--slice`: slice mode for every request.
    pub slice: Option<u64>,
    /// `--cache-dir`: a disk zone in this directory.
    pub cache_dir: Option<PathBuf>,
    /// `--disk-size`: that zone's limit (default [`defaults::DISK_SIZE`]).
    pub disk_size: Option<u64>,
    /// `--threads`.
    pub threads: Option<usize>,
    /// `--debug-headers`.
    pub debug_headers: bool,
    /// `--admin ADDR`: the admin listener.
    pub admin: Option<SocketAddr>,
    /// `--admin-token-file`'s token.
    pub admin_token: Option<String>,
    /// `--access-log TARGET`.
    pub access_log: Option<LogTarget>,
    /// `--upstream-ca FILE`: a private CA for an `https://` upstream.
    pub upstream_ca: Option<PathBuf>,
    /// `--cluster-node NAME`.
    pub cluster_node: Option<String>,
    /// `--cluster-peers NAME=HOST:PORT,...`.
    pub cluster_peers: Option<String>,
    /// `--cluster-secret-file FILE`.
    pub cluster_secret_file: Option<PathBuf>,
    /// `--cluster-near-size SIZE`.
    pub cluster_near_size: Option<u64>,
    /// `--cluster-bus redis://HOST:PORT/DB`.
    pub cluster_bus: Option<String>,
    /// `--cluster-dns NAME:PORT` (or an SRV name): members from DNS.
    pub cluster_dns: Option<String>,
    /// `--cluster-advertise IP:PORT`: members from heartbeats on the bus,
    /// this node reached at that address.
    pub cluster_advertise: Option<std::net::SocketAddr>,
    /// `--cluster-rampup 60s`: see [`ClusterConfig::rampup`].
    pub cluster_rampup: Option<Duration>,
}

/// `--cluster-*` of the quick start.
fn quick_cluster(q: &QuickStart) -> Result<Option<ClusterConfig>, (&'static str, String)> {
    let dns = match &q.cluster_dns {
        Some(d) => Some(cluster::dns_target(d).map_err(|m| ("--cluster-dns", m))?),
        None => None,
    };
    let discovered = dns.is_some() || q.cluster_advertise.is_some();
    if dns.is_some() && q.cluster_advertise.is_some() {
        return Err((
            "--cluster-advertise",
            "members come from DNS (--cluster-dns) or from the bus (--cluster-advertise): give one"
                .into(),
        ));
    }
    if q.cluster_advertise.is_some() && q.cluster_bus.is_none() {
        return Err((
            "--cluster-advertise",
            "members from heartbeats need the bus (--cluster-bus)".into(),
        ));
    }
    let peers_or_dns = match (&q.cluster_peers, discovered) {
        (Some(_), true) => return Err((
            "--cluster-peers",
            "a discovered member list (--cluster-dns, --cluster-advertise) replaces it: give one"
                .into(),
        )),
        (Some(p), false) => Some(p.clone()),
        (None, true) => Some(String::new()),
        (None, false) => None,
    };
    let (node, peers) = match (&q.cluster_node, &peers_or_dns) {
        (None, None) => {
            if q.cluster_secret_file.is_some() {
                return Err((
                    "--cluster-secret-file",
                    "needs --cluster-node and --cluster-peers".into(),
                ));
            }
            if q.cluster_near_size.is_some() || q.cluster_bus.is_some() {
                return Err((
                    "--cluster-near-size",
                    "needs --cluster-node and --cluster-peers".into(),
                ));
            }
            return Ok(None);
        }
        (Some(n), Some(p)) => (n, p),
        (None, Some(_)) => {
            return Err((
                "--cluster-node",
                "--cluster-peers needs this node's name".into(),
            ))
        }
        (Some(_), None) => {
            return Err((
                "--cluster-peers",
                "--cluster-node needs the member list".into(),
            ))
        }
    };
    let members = peers
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(cluster::parse_member)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| ("--cluster-peers", m))?;
    let secret = match &q.cluster_secret_file {
        Some(f) => cluster::read_secret(f).map_err(|m| ("--cluster-secret-file", m))?,
        None => Vec::new(),
    };
    let discovery = match (dns, q.cluster_advertise) {
        (Some((name, port)), _) => cluster::Discovery::Dns {
            name,
            port,
            resolver: None,
            refresh: cluster::DNS_REFRESH,
        },
        (None, Some(advertise)) => cluster::Discovery::Redis {
            advertise,
            refresh: cluster::REDIS_REFRESH,
            ttl: cluster::REDIS_TTL,
        },
        (None, None) => cluster::Discovery::Static,
    };
    let discovery_static = discovery == cluster::Discovery::Static;
    if discovery_static {
        cluster::check(node, &members, &secret).map_err(|m| ("--cluster-peers", m))?;
    }
    Ok(Some(ClusterConfig {
        node: node.clone(),
        members,
        secret,
        owner_connect_timeout: cluster::OWNER_CONNECT_TIMEOUT,
        owner_read_timeout: cluster::OWNER_READ_TIMEOUT,
        purge_timeout: cluster::PURGE_TIMEOUT,
        near_cache_size: q.cluster_near_size.unwrap_or(cluster::NEAR_CACHE_SIZE),
        near_admit_after: cluster::NEAR_ADMIT_AFTER,
        grace: cluster::GRACE,
        bus: match &q.cluster_bus {
            Some(url) => Some(cluster::bus(url).map_err(|m| ("--cluster-bus", m))?),
            None => None,
        },
        discovery,
        rampup: q.cluster_rampup.unwrap_or(if discovery_static {
            Duration::ZERO
        } else {
            cluster::RAMPUP
        }),
        tiers: Vec::new(),
    }))
}

impl Config {
    /// The configuration of the command-line quick start.
    pub fn quick(q: &QuickStart) -> Result<Config, ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            file: "command line".into(),
            line: None,
            key: key.into(),
            message,
        };
        let server = parse_server_url(&q.upstream).map_err(|m| err("--upstream", m))?;
        let tls_settings = q
            .upstream_ca
            .as_ref()
            .map(|ca| crate::upstream::tls::TlsSettings {
                ca: Some(ca.clone()),
                ..crate::upstream::tls::TlsSettings::verified()
            });
        let tls = origin_tls(std::iter::once(&server), tls_settings).map_err(|m| {
            err(
                if q.upstream_ca.is_some() {
                    "--upstream-ca"
                } else {
                    "--upstream"
                },
                m,
            )
        })?;
        let mut route = RouteConfig::catch_all();
        if let Some(ttl) = q.default_ttl {
            route.policy.default_ttls.push(DefaultTtl {
                status: StatusMatch::Any,
                ttl,
            });
        }
        route.policy.stale_while_revalidate = q.stale_while_revalidate;
        route.policy.stale_if_error = q.stale_if_error;
        let mut cache = CacheConfig::default();
        if let Some(s) = q.cache_size {
            cache.memory_size = s;
        }
        if let Some(s) = q.max_object_size {
            cache.max_object_size = s;
        }
        if let Some(size) = q.slice {
            if !(MIN_SLICE..=cache.max_object_size).contains(&size) {
                return Err(err(
                    "--slice",
                    format!(
                        "{size} bytes: a slice must be at least {MIN_SLICE} bytes and at most \
                         the largest object stored ({} bytes)",
                        cache.max_object_size
                    ),
                ));
            }
            route.slice = Some(size);
        }
        if let Some(d) = &q.cache_dir {
            cache.dir = d.clone();
            cache.zones.push(zones::quick_zone(
                d.clone(),
                q.disk_size.unwrap_or(defaults::DISK_SIZE),
                cache.max_object_size,
            ));
        } else if q.disk_size.is_some() {
            return Err(err("--disk-size", "needs --cache-dir".into()));
        }
        if q.http3 && q.tls.is_none() && q.domains.is_empty() {
            return Err(err(
                "--http3",
                "needs --tls-cert and --tls-key, or --domain".into(),
            ));
        }
        let cluster = quick_cluster(q).map_err(|(key, m)| err(key, m))?;
        let server_cfg = ServerConfig {
            threads: q.threads.unwrap_or(0),
            debug_headers: q.debug_headers,
            via: cluster::via_name(cluster.as_ref(), defaults::VIA),
            ..ServerConfig::default()
        };
        let mut listeners = vec![ListenerConfig {
            address: q.listen.unwrap_or(if q.domains.is_empty() {
                defaults::LISTEN
            } else {
                SocketAddr::from(([0, 0, 0, 0], 80))
            }),
            tls: q.tls.clone(),
            http2: true,
            http3: q.http3,
            ..ListenerConfig::default()
        }];
        let mut acme_cfg = acme::AcmeConfig::default();
        if !q.domains.is_empty() {
            if q.tls.is_some() {
                return Err(err("--domain", "with --tls-cert: one or the other".into()));
            }
            let tls_at = q
                .tls_listen
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 443)));
            listeners[0].redirect_https = Some(tls_at.port());
            // HTTP/3 goes with HTTPS; the first listener is plain.
            listeners[0].http3 = false;
            // Each --domain is a certificate; commas join names in one.
            let certs = q
                .domains
                .iter()
                .map(|d| acme_names(d.split(',').map(str::trim)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| err("--domain", m))?;
            acme::check_distinct(&certs).map_err(|m| err("--domain", m))?;
            listeners.push(ListenerConfig {
                address: tls_at,
                acme: certs,
                http3: q.http3,
                ..ListenerConfig::default()
            });
            if let Some(d) = &q.acme_directory {
                acme_cfg.directory = d.clone();
            }
            acme_cfg.contact = q.acme_email.iter().map(|e| format!("mailto:{e}")).collect();
            acme_cfg.ca_root = q.acme_ca_root.clone();
        } else if q.tls_listen.is_some() || q.acme_email.is_some() || q.acme_directory.is_some() {
            return Err(err(
                "--domain",
                "the ACME flags need at least one --domain".into(),
            ));
        }
        Ok(Config {
            listeners,
            server: server_cfg,
            cache,
            upstreams: vec![UpstreamConfig {
                tls,
                ..UpstreamConfig::new("default", vec![server])
            }],
            sites: vec![SiteConfig {
                hosts: Vec::new(),
                routes: vec![std::sync::Arc::new(route)],
                error_pages: None,
                response_headers: Default::default(),
                tls: None,
                bind: sites::Bind::default(),
            }],
            admin: AdminConfig {
                address: q.admin,
                token: q.admin_token.clone(),
                ..AdminConfig::default()
            },
            access_log: AccessLogConfig {
                target: q.access_log.clone().unwrap_or_default(),
                buffer: defaults::ACCESS_LOG_BUFFER,
                ..AccessLogConfig::default()
            },
            cluster,
            acme: acme_cfg,
        })
        .and_then(|c| {
            ops::check_admin(&c.admin).map_err(|m| err("--admin", m))?;
            Ok(c)
        })
    }

    /// Reads and validates a configuration file's text. `file` names it in errors.
    /// Relative file names in it are taken from the working directory.
    pub fn from_toml(file: &str, text: &str) -> Result<Config, ConfigError> {
        Config::parse(file, text, None)
    }

    /// Reads a configuration file.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: name.clone(),
            line: None,
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&name, &text, path.parent())
    }

    fn parse(
        file: &str,
        text: &str,
        base: Option<&std::path::Path>,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            let msg = e.message().to_string();
            let key = e.span().map(|s| key_at(text, s.start)).unwrap_or_default();
            ConfigError {
                file: file.into(),
                line,
                key,
                message: msg,
            }
        })?;
        let (raw, sources) = include::merge(file, text, base, raw)?;
        Resolver {
            file,
            base,
            sources: &sources,
        }
        .resolve(raw)
    }
}

/// 1-based line of a byte offset.
/// One ACME certificate's names: lower case, sorted, each a DNS name
/// (no wildcard: those need DNS-01, which hoard does not answer).
fn acme_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for n in names {
        let n = n.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if n.starts_with("*.") {
            return Err(format!(
                "{n:?}: wildcard names need DNS-01 validation, which hoard does not do"
            ));
        }
        if n.len() > 253 || !n.contains('.') || !n.split('.').all(label_ok) {
            return Err(format!("{n:?}: not a DNS name"));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err("a certificate needs at least one name".into());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// The key written on the line holding `offset` (for parse errors).
fn key_at(text: &str, offset: usize) -> String {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    match line.split_once('=') {
        Some((k, _)) => k.trim().to_string(),
        None => line.trim().to_string(),
    }
}

/// The TLS client of an upstream whose servers include `https://` ones
/// (`None` when none does and no `tls` table was given).
fn origin_tls<'a>(
    mut servers: impl Iterator<Item = &'a ServerAddr>,
    settings: Option<crate::upstream::tls::TlsSettings>,
) -> Result<Option<crate::upstream::tls::OriginTls>, String> {
    if settings.is_none() && !servers.any(|s| s.tls) {
        return Ok(None);
    }
    let settings = settings.unwrap_or_else(crate::upstream::tls::TlsSettings::verified);
    crate::upstream::tls::build(&settings).map(Some)
}

struct Resolver<'a> {
    file: &'a str,
    /// The main file and those it includes (spans name one of them).
    sources: &'a include::Sources,
    /// The configuration file's directory (relative file names start there).
    base: Option<&'a std::path::Path>,
}

impl Resolver<'_> {
    fn err(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: String,
        message: String,
    ) -> ConfigError {
        let (file, line) = match span {
            Some(s) => {
                let (file, line) = self.sources.locate(s.start);
                (file, Some(line))
            }
            None => (self.file, None),
        };
        ConfigError {
            file: file.into(),
            line,
            key,
            message,
        }
    }

    fn resolve(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let d = ServerConfig::default();
        let s = raw.server;
        let server = ServerConfig {
            threads: s.threads.unwrap_or(d.threads),
            header_read_timeout: s.header_read_timeout.map_or(d.header_read_timeout, |x| x.0),
            max_header_size: s
                .max_header_size
                .map_or(d.max_header_size, |x| x.0 as usize)
                .max(8192),
            max_headers: s.max_headers.unwrap_or(d.max_headers),
            max_uri_length: s.max_uri_length.map_or(d.max_uri_length, |x| x.0 as usize),
            max_body_size: s.max_body_size.map_or(d.max_body_size, |x| x.0),
            via: self.via(s.via, d.via)?,
            debug_headers: s.debug_headers.unwrap_or(d.debug_headers),
            sendfile: s.sendfile.unwrap_or(d.sendfile),
            shutdown_timeout: s.shutdown_timeout.map_or(d.shutdown_timeout, |x| x.0),
            max_connections: s.max_connections.unwrap_or(d.max_connections).max(1),
            max_requests_per_connection: s
                .max_requests_per_connection
                .unwrap_or(d.max_requests_per_connection)
                .max(1),
            http2_max_streams: s.http2_max_streams.unwrap_or(d.http2_max_streams).max(1),
            keep_alive_timeout: s.keep_alive_timeout.map_or(d.keep_alive_timeout, |x| x.0),
            send_timeout: s.send_timeout.map_or(d.send_timeout, |x| x.0),
            tunnel_idle_timeout: s.tunnel_idle_timeout.map_or(d.tunnel_idle_timeout, |x| x.0),
            body_read_timeout: s.body_read_timeout.map_or(d.body_read_timeout, |x| x.0),
            max_resets: s.max_resets.unwrap_or(d.max_resets).max(1),
            trusted_proxies: s
                .trusted_proxies
                .iter()
                .map(|c| {
                    Cidr::parse(c.get_ref())
                        .map_err(|m| self.err(Some(c.span()), "server.trusted_proxies".into(), m))
                })
                .collect::<Result<_, _>>()?,
            run_as: self.run_as(s.user.as_ref(), s.group.as_ref())?,
        };
        let dc = CacheConfig::default();
        let max_object_size = raw
            .cache
            .max_object_size
            .map_or(dc.max_object_size, |x| x.0);
        let mut zones = self.zones(raw.cache.zones, max_object_size)?;
        if let (true, Some(dir)) = (zones.is_empty(), &raw.cache.dir) {
            zones.push(zones::quick_zone(
                PathBuf::from(dir),
                defaults::DISK_SIZE,
                max_object_size,
            ));
        }
        self.durability(raw.cache.durability, &mut zones)?;
        let placement = self.placement(raw.cache.placement, &zones)?;
        let cache = CacheConfig {
            memory_size: raw.cache.memory_size.map_or(dc.memory_size, |x| x.0),
            max_object_size,
            dir: raw.cache.dir.map_or(dc.dir, PathBuf::from),
            zones,
            placement,
            max_prefetches: raw.cache.max_prefetches.unwrap_or(dc.max_prefetches),
            max_fills: raw.cache.max_fills.unwrap_or(dc.max_fills).max(1),
        };
        let mut listeners = Vec::new();
        let name_spans: Vec<_> = raw
            .listeners
            .iter()
            .map(|l| l.name.as_ref().map(|n| n.span()))
            .collect();
        let address_spans: Vec<_> = raw.listeners.iter().map(|l| l.address.span()).collect();
        for (i, l) in raw.listeners.into_iter().enumerate() {
            let address = l.address.get_ref().parse::<SocketAddr>().map_err(|e| {
                self.err(
                    Some(l.address.span()),
                    format!("listener[{i}].address"),
                    format!("{:?}: {e}", l.address.get_ref()),
                )
            })?;
            if let Some(h3) = l.http3.as_ref().filter(|h| *h.get_ref()) {
                if l.tls.is_none() {
                    return Err(self.err(
                        Some(h3.span()),
                        format!("listener[{i}].http3"),
                        "needs `tls` (QUIC is always encrypted)".into(),
                    ));
                }
            }
            let (tls, files, acme_names) = match l.tls {
                None => (None, Vec::new(), Vec::new()),
                Some(t) => match (t.cert, t.key, t.acme, t.certs) {
                    (Some(cert), Some(key), None, None) => {
                        (Some(self.tls_files(i, cert, key)?), Vec::new(), Vec::new())
                    }
                    (Some(_), _, _, Some(files)) | (_, Some(_), _, Some(files)) => {
                        return Err(self.err(
                            Some(files.span()),
                            format!("listener[{i}].tls.certs"),
                            "with `cert` and `key`: one or the other (every certificate in `certs`)"
                                .into(),
                        ))
                    }
                    (None, None, None, Some(files)) => {
                        (None, self.listener_certs(i, files)?, Vec::new())
                    }
                    (None, None, Some(certs), files)
                        if !certs.get_ref().is_empty() || files.is_some() =>
                    {
                        let span = certs.span();
                        let certs = certs
                            .into_inner()
                            .iter()
                            .map(|c| match c {
                                raw::RawAcmeCert::Name(n) => acme_names([n.as_str()]),
                                raw::RawAcmeCert::Names(n) => {
                                    acme_names(n.iter().map(String::as_str))
                                }
                            })
                            .collect::<Result<Vec<_>, _>>()
                            .and_then(|certs| {
                                // A name has one certificate, whichever
                                // listener presents it.
                                let mut all: Vec<Vec<String>> = listeners
                                    .iter()
                                    .flat_map(|l: &ListenerConfig| l.acme.clone())
                                    .collect();
                                all.extend(certs.iter().cloned());
                                acme::check_distinct(&all).map(|()| certs)
                            })
                            .map_err(|m| {
                                self.err(Some(span), format!("listener[{i}].tls.acme"), m)
                            })?;
                        let files = match files {
                            Some(f) => self.listener_certs(i, f)?,
                            None => Vec::new(),
                        };
                        (None, files, certs)
                    }
                    (_, _, Some(names), _) => {
                        return Err(self.err(
                            Some(names.span()),
                            format!("listener[{i}].tls.acme"),
                            "names for ACME, without `cert` and `key`".into(),
                        ))
                    }
                    _ => {
                        return Err(self.err(
                            Some(l.address.span()),
                            format!("listener[{i}].tls"),
                            "needs `cert` and `key`, `certs`, or `acme` names".into(),
                        ))
                    }
                },
            };
            if let Some(r) = &l.redirect_https {
                if tls.is_some() || !files.is_empty() || !acme_names.is_empty() {
                    return Err(self.err(
                        Some(r.span()),
                        format!("listener[{i}].redirect_https"),
                        "for a plain listener (this one is TLS)".into(),
                    ));
                }
            }
            listeners.push(ListenerConfig {
                name: l.name.map(Spanned::into_inner),
                address,
                http3: l.http3.as_ref().is_some_and(|h| *h.get_ref()),
                acme: acme_names,
                redirect_https: l.redirect_https.map(|r| r.into_inner()),
                tls,
                certs: files,
                http2: l.http2.unwrap_or(defaults::LISTENER_HTTP2),
                proxy_protocol: self.proxy_protocol(i, l.proxy_protocol, l.proxy_protocol_from)?,
            });
        }
        sites::check_listener_names(self, &listeners, &name_spans)?;
        self.check_addresses(&listeners, &address_spans)?;
        if listeners.is_empty() {
            listeners.push(ListenerConfig::default());
        }
        let mut upstreams = Vec::new();
        for (name, u) in raw.upstreams {
            let servers = self.server_list(&name, "servers", &u.servers)?;
            if servers.is_empty() {
                return Err(self.err(
                    None,
                    format!("upstream.{name}.servers"),
                    "at least one server is required".into(),
                ));
            }
            let mut up = UpstreamConfig::new(&name, servers);
            self.failover(&name, &u, &mut up)?;
            if let Some(t) = u.connect_timeout {
                up.connect_timeout = t.0;
            }
            if let Some(t) = u.read_timeout {
                up.read_timeout = t.0;
            }
            if let Some(n) = u.max_idle {
                up.max_idle = n;
            }
            if let Some(t) = u.idle_timeout {
                up.idle_timeout = t.0;
            }
            if let Some(n) = u.down_after {
                up.down_after = n;
            }
            if let Some(t) = u.down_backoff_max {
                up.down_backoff_max = t.0;
            }
            if let Some(t) = &u.tls {
                if t.get_ref().verify == Some(false) {
                    tracing::warn!(upstream = %name, "origin TLS certificates are not verified (`verify = false`)");
                }
            }
            let settings = u.tls.as_ref().map(|t| {
                let t = t.get_ref();
                crate::upstream::tls::TlsSettings {
                    ca: t.ca.as_ref().map(PathBuf::from),
                    server_name: t.server_name.clone(),
                    verify: t.verify.unwrap_or(true),
                    cert: t.cert.as_ref().map(PathBuf::from),
                    key: t.key.as_ref().map(PathBuf::from),
                }
            });
            up.tls = origin_tls(up.servers.iter().chain(&up.backup), settings).map_err(|m| {
                self.err(
                    u.tls.as_ref().map(|t| t.span()),
                    format!("upstream.{name}.tls"),
                    m,
                )
            })?;
            up.host = match u.host.as_deref() {
                None | Some("preserve") => HostHeader::Preserve,
                Some("server") => HostHeader::Server,
                Some(v) => HostHeader::Fixed(v.to_string()),
            };
            upstreams.push(up);
        }
        // A configuration whose every route redirects or responds needs no origin.
        let only_redirects = !raw.sites.is_empty()
            && raw.sites.iter().all(|s| {
                !s.routes.is_empty()
                    && s.routes.iter().all(|r| {
                        let r = r.get_ref();
                        r.redirect.is_some() || r.respond.is_some()
                    })
            });
        if upstreams.is_empty() && !only_redirects {
            return Err(self.err(
                None,
                "upstream".into(),
                "at least one [upstream.NAME] with `servers` is required".into(),
            ));
        }
        let mut sites = Vec::new();
        let default_spans: Vec<_> = raw
            .sites
            .iter()
            .map(|s| s.default.as_ref().map(|d| d.span()))
            .collect();
        for (i, site) in raw.sites.into_iter().enumerate() {
            self.check_shadowed(i, &site.routes)?;
            let bind = self.bind(i, &site, &listeners)?;
            let hosts = site
                .hosts
                .iter()
                .map(|h| {
                    let h = h.to_ascii_lowercase();
                    match h.strip_prefix("*.") {
                        Some(s) => HostMatch::Suffix(format!(".{s}")),
                        None => HostMatch::Exact(h),
                    }
                })
                .collect();
            let error_pages = self.error_pages(&format!("site[{i}]"), site.error_pages, None)?;
            let response_headers = self.header_edits(
                &format!("site[{i}].response_headers"),
                site.response_headers,
            )?;
            let mut routes = Vec::new();
            let mut probes = Vec::new();
            for (j, r) in site.routes.into_iter().enumerate() {
                let (route, probe) = self.route(
                    &format!("site[{i}].route[{j}]"),
                    r.into_inner(),
                    &upstreams,
                    &cache,
                    error_pages.as_ref(),
                )?;
                let mut route = route;
                route.max_body_size = route.max_body_size.or(site.max_body_size.map(|s| s.0));
                routes.push(std::sync::Arc::new(route));
                probes.push(probe);
            }
            if routes.is_empty() {
                let mut route = RouteConfig::catch_all();
                route.max_body_size = site.max_body_size.map(|s| s.0);
                if let Some(pages) = &error_pages {
                    route.edge = Some(std::sync::Arc::new(crate::edge::Edge {
                        error_pages: Some(pages.clone()),
                        ..Default::default()
                    }));
                }
                routes.push(std::sync::Arc::new(route));
            }
            sites::under_site_headers(&mut routes, &response_headers);
            let tls = match site
                .scheme
                .as_ref()
                .map(|s| (s.get_ref().as_str(), s.span()))
            {
                None => None,
                Some(("http", _)) => Some(false),
                Some(("https", _)) => Some(true),
                Some((other, span)) => {
                    return Err(self.err(
                        Some(span),
                        format!("site[{i}].scheme"),
                        format!("{other:?}: expected \"http\" or \"https\""),
                    ))
                }
            };
            let site = SiteConfig {
                hosts,
                routes,
                error_pages,
                response_headers,
                tls,
                bind,
            };
            self.check_loops(&site, probes)?;
            sites.push(site);
        }
        self.check_defaults(&sites, &default_spans, listeners.len())?;
        if sites.is_empty() {
            sites.push(SiteConfig {
                hosts: Vec::new(),
                routes: vec![std::sync::Arc::new(RouteConfig::catch_all())],
                error_pages: None,
                response_headers: Default::default(),
                tls: None,
                bind: sites::Bind::default(),
            });
        }
        let admin =
            ops::admin(raw.admin).map_err(|(span, key, m)| self.err(span, key.into(), m))?;
        let access_log = ops::access_log(raw.access_log)
            .map_err(|(span, key, m)| self.err(span, key.into(), m))?;
        let cluster = cluster::from_raw(raw.cluster)
            .map_err(|(span, key, m)| self.err(span, key.into(), m))?;
        let acme =
            acme::from_raw(raw.acme).map_err(|(span, key, m)| self.err(span, key.into(), m))?;
        let mut server = server;
        server.via = cluster::via_name(cluster.as_ref(), &server.via);
        Ok(Config {
            listeners,
            server,
            cache,
            upstreams,
            sites,
            admin,
            access_log,
            cluster,
            acme,
        })
    }

    /// A key template (`key`, `cluster_key`) from its table at `at`.
    fn key_template(&self, k: RawKey, at: &str) -> Result<KeyTemplate, ConfigError> {
        let query = match (
            k.query.as_ref().map(|q| q.get_ref().as_str()),
            k.query_params,
            k.query_exclude,
        ) {
            (_, Some(p), _) => QueryKey::Only(self.query_names(&format!("{at}.query_params"), p)?),
            (_, None, Some(x)) => {
                QueryKey::Except(self.query_names(&format!("{at}.query_exclude"), x)?)
            }
            (None | Some("all"), None, None) => QueryKey::All,
            (Some("sorted"), None, None) => QueryKey::Sorted,
            (Some("none"), None, None) => QueryKey::None,
            (Some(other), None, None) => {
                let span = k.query.as_ref().map(|q| q.span());
                return Err(self.err(
                    span,
                    format!("{at}.query"),
                    format!("{other:?}: expected \"all\", \"sorted\" or \"none\""),
                ));
            }
        };
        let mut key = KeyTemplate {
            scheme: k.scheme.unwrap_or(true),
            host: k.host.unwrap_or(true),
            query,
            headers: Vec::new(),
            cookies: k.cookies.unwrap_or_default(),
        };
        for h in k.headers.unwrap_or_default() {
            key.headers
                .push(HeaderName::from_bytes(h.get_ref().as_bytes()).map_err(|_| {
                    self.err(
                        Some(h.span()),
                        format!("{at}.headers"),
                        format!("{:?} is not a header name", h.get_ref()),
                    )
                })?);
        }
        Ok(key)
    }

    fn route(
        &self,
        at: &str,
        r: RawRoute,
        upstreams: &[UpstreamConfig],
        cache: &CacheConfig,
        site_pages: Option<&std::sync::Arc<crate::edge::error_pages::ErrorPages>>,
    ) -> Result<(RouteConfig, Option<edge::LoopProbe>), ConfigError> {
        let zone = r
            .zone
            .as_ref()
            .map(|z| self.zone_named(&cache.zones, z, format!("{at}.zone")))
            .transpose()?;
        let slice = match r.slice {
            None => None,
            Some(s) if (MIN_SLICE..=cache.max_object_size).contains(&s.get_ref().0) => {
                Some(s.get_ref().0)
            }
            Some(s) => {
                return Err(self.err(
                    Some(s.span()),
                    format!("{at}.slice"),
                    format!(
                        "{} bytes: a slice must be at least {MIN_SLICE} bytes and at most \
                         max_object_size ({} bytes), or it could never be stored",
                        s.get_ref().0,
                        cache.max_object_size
                    ),
                ))
            }
        };
        let cold_range = match &r.cold_range {
            None => ColdRange::Fill,
            Some(v) => match v.get_ref().as_str() {
                "fill" => ColdRange::Fill,
                "forward" => ColdRange::Forward,
                other => {
                    return Err(self.err(
                        Some(v.span()),
                        format!("{at}.cold_range"),
                        format!("\"{other}\": expected \"fill\" or \"forward\""),
                    ))
                }
            },
        };
        let path = match (r.prefix, r.regex) {
            (Some(_), Some(re)) => {
                return Err(self.err(
                    Some(re.span()),
                    format!("{at}.regex"),
                    "set either `prefix` or `regex`, not both".into(),
                ))
            }
            (_, Some(re)) => PathMatch::Regex(Regex::new(re.get_ref()).map_err(|e| {
                self.err(
                    Some(re.span()),
                    format!("{at}.regex"),
                    format!("invalid regex: {e}"),
                )
            })?),
            (Some(p), None) => PathMatch::Prefix(p.into_inner()),
            (None, None) => PathMatch::Prefix("/".into()),
        };
        let upstream = match r.upstream {
            // A redirect or a fixed answer never reaches an origin.
            None if upstreams.len() == 1 || r.redirect.is_some() || r.respond.is_some() => 0,
            None => {
                return Err(self.err(
                    None,
                    format!("{at}.upstream"),
                    "required when several upstreams are defined".into(),
                ))
            }
            Some(name) => upstreams
                .iter()
                .position(|u| &u.name == name.get_ref())
                .ok_or_else(|| {
                    let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                    self.err(
                        Some(name.span()),
                        format!("{at}.upstream"),
                        format!(
                            "unknown upstream {:?} (defined: {})",
                            name.get_ref(),
                            known.join(", ")
                        ),
                    )
                })?,
        };
        let mut policy = CachePolicy::default();
        if let Some(ttls) = r.default_ttl {
            for (status, ttl) in ttls {
                let m = if status == "any" {
                    StatusMatch::Any
                } else {
                    match status.parse::<u16>() {
                        Ok(c) if (100..600).contains(&c) => StatusMatch::Code(c),
                        _ => {
                            return Err(self.err(
                                Some(ttl.span()),
                                format!("{at}.default_ttl.{status}"),
                                "expected a status code (100-599) or \"any\"".into(),
                            ))
                        }
                    }
                };
                policy.default_ttls.push(DefaultTtl {
                    status: m,
                    ttl: ttl.get_ref().0,
                });
            }
            // Exact codes take precedence over "any".
            policy
                .default_ttls
                .sort_by_key(|d| matches!(d.status, StatusMatch::Any));
        }
        for h in r.ignore_headers.unwrap_or_default() {
            match h.get_ref().to_ascii_lowercase().as_str() {
                "cache-control" => policy.ignore_cache_control = true,
                "cdn-cache-control" => policy.ignore_cdn_cache_control = true,
                "expires" => policy.ignore_expires = true,
                "set-cookie" => policy.ignore_set_cookie = true,
                "vary" => policy.ignore_vary = true,
                other => {
                    return Err(self.err(
                        Some(h.span()),
                        format!("{at}.ignore_headers"),
                        format!("cannot ignore {other:?}: use cache-control, cdn-cache-control, expires, set-cookie or vary"),
                    ))
                }
            }
        }
        policy.max_ttl = r.max_ttl.map(|d| d.0);
        if let Some(p) = r.heuristic_percent {
            policy.heuristic_percent = p;
        }
        policy.stale_while_revalidate = r.stale_while_revalidate.map(|d| d.0);
        policy.stale_if_error = r.stale_if_error.map(|d| d.0);
        policy.client_no_cache = self.client_no_cache(at, r.client_no_cache)?;
        let mut key = match r.key {
            Some(k) => self.key_template(k, &format!("{at}.key"))?,
            None => KeyTemplate::default(),
        };
        let cluster_key = match r.cluster_key {
            Some(k) => Some(self.key_template(k, &format!("{at}.cluster_key"))?),
            None => None,
        };
        let mut forward_headers = Vec::new();
        for h in r.forward_headers.unwrap_or_default() {
            let name = HeaderName::from_bytes(h.get_ref().as_bytes()).map_err(|_| {
                self.err(
                    Some(h.span()),
                    format!("{at}.forward_headers"),
                    format!("{:?} is not a header name", h.get_ref()),
                )
            })?;
            if !crate::pipeline::forwarding::OWNED.contains(&name.as_str()) {
                return Err(self.err(
                    Some(h.span()),
                    format!("{at}.forward_headers"),
                    format!(
                        "{:?} is forwarded anyway: only fields hoard owns (X-Forwarded-*, Forwarded, X-Original-URL, ...) need this",
                        h.get_ref()
                    ),
                ));
            }
            forward_headers.push(name);
        }
        let forward_unkeyed = r.forward_unkeyed.unwrap_or(false);
        if !forward_unkeyed {
            for h in &forward_headers {
                if !key.headers.contains(h) {
                    key.headers.push(h.clone());
                }
            }
        }
        let d = RouteConfig::catch_all();
        let (edge, probe) = self.edge(
            at,
            edge::RawEdge {
                response_headers: r.response_headers,
                request_headers: r.request_headers,
                redirect: r.redirect,
                allow: r.allow,
                deny: r.deny,
                basic_auth: r.basic_auth,
                limit: r.limit,
                limit_connections: r.limit_connections,
                error_pages: r.error_pages,
            },
            &path,
            site_pages,
        )?;
        let edge = self.with_respond(at, edge, r.respond)?;
        let encodings = match &r.encodings {
            None => d.encodings.clone(),
            Some(list) => {
                let mut out = Vec::new();
                for e in list {
                    match hoard_policy::encoding::Coding::parse(e.get_ref()) {
                        Some(c) if c != hoard_policy::encoding::Coding::Identity => {
                            if !out.contains(&c) {
                                out.push(c);
                            }
                        }
                        _ => {
                            return Err(self.err(
                                Some(e.span()),
                                format!("{at}.encodings"),
                                format!("{:?}: expected \"br\", \"zstd\" or \"gzip\"", e.get_ref()),
                            ))
                        }
                    }
                }
                out
            }
        };
        let fill_accept_encoding = match &r.fill_accept_encoding {
            None => d.fill_accept_encoding.clone(),
            Some(v) => http::HeaderValue::from_str(v.get_ref()).map_err(|_| {
                self.err(
                    Some(v.span()),
                    format!("{at}.fill_accept_encoding"),
                    format!("{:?}: not a header value", v.get_ref()),
                )
            })?,
        };
        let bypass = self.rules(r.bypass, at, rules::RuleKind::Bypass)?;
        let no_store = self.rules(r.no_store, at, rules::RuleKind::NoStore)?;
        Ok((
            RouteConfig {
                bypass,
                no_store,
                forward_headers,
                forward_unkeyed,
                path,
                upstream,
                cache: r.cache.unwrap_or(true),
                policy,
                key,
                cluster_key,
                coalesce: r.coalesce.unwrap_or(d.coalesce),
                upgrade: r.upgrade.unwrap_or(d.upgrade),
                coalesce_timeout: r.coalesce_timeout.map_or(d.coalesce_timeout, |x| x.0),
                fill_max_age: r.fill_max_age.map_or(d.fill_max_age, |x| x.0),
                hit_for_pass: r.hit_for_pass.map_or(d.hit_for_pass, |x| x.0),
                zone,
                slice,
                slice_prefetch: r.slice_prefetch.unwrap_or(d.slice_prefetch),
                slice_direct_max: r.slice_direct_max.map_or(d.slice_direct_max, |x| x.0),
                cold_range,
                encodings,
                compress_types: r
                    .compress_types
                    .unwrap_or_else(|| d.compress_types.clone())
                    .into_iter()
                    .map(|t| t.to_ascii_lowercase())
                    .collect(),
                compress_min_size: r.compress_min_size.map_or(d.compress_min_size, |x| x.0),
                fill_accept_encoding,
                edge,
                max_body_size: r.max_body_size.map(|s| s.0),
            },
            probe,
        ))
    }
}

#[cfg(test)]
mod tests;
