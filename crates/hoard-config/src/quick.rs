//! The command-line quick start ([`QuickStart`]: `--upstream`, `--listen`,
//! `--cache-size`, ...) and [`Config::quick`], which builds from it the
//! same [`Config`] a file gives.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hoard_policy::config::{DefaultTtl, StatusMatch};

use super::acme::acme_names;
use super::servers::parse_server_url;
use super::upstreams::origin_tls;
use super::{
    acme, cluster, defaults, ops, sites, zones, AccessLogConfig, AdminConfig, CacheConfig,
    ClusterConfig, Config, ConfigError, ListenerConfig, LogTarget, RouteConfig, ServerConfig,
    SiteConfig, TlsConfig, TlsSettings, UpstreamConfig, MIN_SLICE,
};

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
        let tls_settings = q.upstream_ca.as_ref().map(|ca| TlsSettings {
            ca: Some(ca.clone()),
            ..TlsSettings::verified()
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
            filters: Vec::new(),
        })
        .and_then(|c| {
            ops::check_admin(&c.admin).map_err(|m| err("--admin", m))?;
            Ok(c)
        })
    }
}
