//! `[cluster]` and `--cluster-*`: the members of a hoard cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::units::Dur;

/// A cluster: this node and every member (see `hoard_proxy::cluster`).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's name; one of `members`.
    pub node: String,
    /// Every member, this node included, by its main listener address.
    pub members: Vec<Member>,
    /// The shared secret that signs peer requests (empty: loopback only).
    pub secret: Vec<u8>,
    /// How long a connection to a key's owner may take before its second
    /// choice is asked. Default: 200 ms.
    pub owner_connect_timeout: Duration,
    /// How long a forwarded request may wait for the owner's response head
    /// (the owner may be filling from a slow origin). Default: 60 s.
    pub owner_read_timeout: Duration,
    /// How long a purge waits for every member's acknowledgement. Default: 1 s.
    pub purge_timeout: Duration,
    /// Bytes of the near tier: copies of objects other members own
    /// (`hoard_proxy::cluster::near`). Default: 64 MiB; 0: none kept.
    pub near_cache_size: u64,
    /// Forwards of a key after which a near copy is kept (1: always).
    /// Default: 2.
    pub near_admit_after: u32,
    /// A stall of this node longer than this fences what it stored (see
    /// `hoard_proxy::cluster::probe`), and so does a bus lost for longer. Default: 5 s.
    pub grace: Duration,
    /// The invalidation log (`[cluster.bus]`, `--cluster-bus`), if any.
    pub bus: Option<BusConfig>,
    /// Where the member list comes from (`[cluster.members]`); `members`
    /// is the whole list only with [`Discovery::Static`].
    pub discovery: Discovery,
    /// How long after this node joins a running cluster its misses are
    /// first asked of their previous owners (`hoard_proxy::cluster::rampup`).
    /// Default: 60 s with a discovered member list, 0 with a static one.
    pub rampup: Duration,
    /// Parent tiers (`[[cluster.tier]]`): the misses this node owns go to
    /// the first one's member chosen for the key, not to the origin.
    pub tiers: Vec<Tier>,
}

impl ClusterConfig {
    /// A static cluster of `members` with every other setting at its default.
    pub fn new(node: &str, members: Vec<Member>, secret: Vec<u8>) -> ClusterConfig {
        ClusterConfig {
            node: node.to_string(),
            members,
            secret,
            owner_connect_timeout: OWNER_CONNECT_TIMEOUT,
            owner_read_timeout: OWNER_READ_TIMEOUT,
            purge_timeout: PURGE_TIMEOUT,
            near_cache_size: NEAR_CACHE_SIZE,
            near_admit_after: NEAR_ADMIT_AFTER,
            grace: GRACE,
            bus: None,
            discovery: Discovery::Static,
            rampup: Duration::ZERO,
            tiers: Vec::new(),
        }
    }
}

/// `[cluster.members]`: where the member list comes from (see
/// `hoard_proxy::cluster::discover`).
#[derive(Debug, Clone, PartialEq)]
pub enum Discovery {
    /// `peers`, as written.
    Static,
    /// DNS: the A/AAAA records of `name` with `port`, or its SRV records
    /// (targets and ports) when `name` starts with `_` (`_http._tcp.hoard...`).
    Dns {
        /// The name to resolve.
        name: String,
        /// The members' port (A/AAAA records).
        port: u16,
        /// The DNS server to ask (default: the system's, `/etc/resolv.conf`).
        resolver: Option<SocketAddr>,
        /// Time between resolutions. Default: 5 s.
        refresh: Duration,
    },
    /// Heartbeats in the bus's Redis: every node writes its name and
    /// address to `PREFIX:members`; members are those seen within `ttl`.
    Redis {
        /// This node's address as the others reach it.
        advertise: SocketAddr,
        /// Time between heartbeats and reads. Default: 1 s.
        refresh: Duration,
        /// A member not seen for this long is gone. Default: 5 s.
        ttl: Duration,
    },
    /// The EndpointSlices of a Service, read from the Kubernetes API:
    /// the ready endpoints' addresses, with the Service's port.
    Kubernetes(KubernetesSource),
}

/// `source = "kubernetes"` (see `hoard_proxy::cluster::discover`).
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesSource {
    /// The API server: `https://HOST:PORT` (default: from
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`).
    pub api: String,
    /// The Service's namespace (default: the pod's, from its service account).
    pub namespace: String,
    /// The Service whose endpoints are the members.
    pub service: String,
    /// The port's name or number in the EndpointSlices (default: the first).
    pub port: Option<String>,
    /// The bearer token (re-read every time: tokens are rotated).
    pub token_file: PathBuf,
    /// The CA that signs the API server's certificate.
    pub ca_file: PathBuf,
    /// Time between reads. Default: 5 s.
    pub refresh: Duration,
}

/// Where a pod's service account is mounted.
pub const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Default of [`Discovery::Dns`] `refresh`.
pub const DNS_REFRESH: Duration = Duration::from_secs(5);
/// Default of [`Discovery::Redis`] `refresh`.
pub const REDIS_REFRESH: Duration = Duration::from_secs(1);
/// Default of [`Discovery::Redis`] `ttl`.
pub const REDIS_TTL: Duration = Duration::from_secs(5);
/// Default of [`ClusterConfig::rampup`] with a discovered member list.
pub const RAMPUP: Duration = Duration::from_secs(60);

/// `[[cluster.tier]]`: a tier of parent nodes (a shield).
#[derive(Debug, Clone, PartialEq)]
pub struct Tier {
    /// Its name, in logs and `/status`.
    pub name: String,
    /// Its members (their own `[cluster]` names, so that an edge chooses
    /// the parent that owns the key among them).
    pub members: Vec<Member>,
}

/// `[cluster.members]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMembers {
    /// `source = "static" | "dns" | "kubernetes" | "redis"`.
    pub source: Option<Spanned<String>>,
    /// `dns = "hoard.default.svc.cluster.local:8080"` or `"_http._tcp.hoard..."`.
    pub dns: Option<Spanned<String>>,
    /// `resolver = "10.96.0.10:53"`.
    pub resolver: Option<Spanned<String>>,
    /// `refresh = "5s"`.
    pub refresh: Option<Dur>,
    /// `advertise = "10.0.0.5:8080"` (redis).
    pub advertise: Option<Spanned<String>>,
    /// `ttl = "5s"` (redis).
    pub ttl: Option<Dur>,
    /// `service = "hoard-peers"` (kubernetes).
    pub service: Option<Spanned<String>>,
    /// `namespace = "hoard"` (kubernetes).
    pub namespace: Option<String>,
    /// `port = "http"` (kubernetes).
    pub port: Option<String>,
    /// `api = "https://10.96.0.1:443"` (kubernetes).
    pub api: Option<Spanned<String>>,
    /// `token_file = ".../token"` (kubernetes).
    pub token_file: Option<PathBuf>,
    /// `ca_file = ".../ca.crt"` (kubernetes).
    pub ca_file: Option<PathBuf>,
}

/// `[[cluster.tier]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    /// `name = "shield"`.
    pub name: Option<String>,
    /// `peers = ["p1=10.0.1.1:80", ...]`.
    #[serde(default)]
    pub peers: Vec<Spanned<String>>,
}

/// Parses `NAME:PORT` (or `_SRV._tcp.NAME`) for DNS discovery.
pub fn dns_target(s: &str) -> Result<(String, u16), String> {
    if s.starts_with('_') {
        return Ok((s.to_string(), 0));
    }
    let (name, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected NAME:PORT, or an SRV name (_http._tcp.NAME)"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{s:?}: {port:?} is not a port"))?;
    if name.is_empty() {
        return Err(format!("{s:?}: the name is empty"));
    }
    Ok((name.to_string(), port))
}

/// `[cluster.bus]`: purges as a Redis/Valkey stream (see `hoard_proxy::cluster::bus`).
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// `redis://HOST:PORT/DB`.
    pub url: String,
    /// Key prefix of the streams. Default: `hoard`.
    pub prefix: String,
    /// Entries older than this are trimmed. Default: 24 h.
    pub max_age: Duration,
    /// What a node that lost the bus does with its stored objects.
    pub on_loss: OnBusLoss,
}

/// `on_bus_loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBusLoss {
    /// Revalidate every stored object before serving it (default): a
    /// purge this node missed may select it.
    Revalidate,
    /// Serve as usual (availability first).
    Serve,
}

/// Parses a bus URL (only `redis://`).
pub fn bus(url: &str) -> Result<BusConfig, String> {
    if !url.starts_with("redis://") {
        return Err(format!("{url:?}: expected redis://HOST:PORT/DB"));
    }
    redis::Client::open(url).map_err(|e| format!("{url:?}: {e}"))?;
    Ok(BusConfig {
        url: url.to_string(),
        prefix: "hoard".into(),
        max_age: Duration::from_secs(24 * 3600),
        on_loss: OnBusLoss::Revalidate,
    })
}

/// `[cluster.bus]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBus {
    /// `url = "redis://127.0.0.1:6379/0"`.
    pub url: Option<Spanned<String>>,
    /// `prefix = "hoard"`.
    pub prefix: Option<String>,
    /// `max_age = "24h"`.
    pub max_age: Option<Dur>,
    /// `on_bus_loss = "revalidate" | "serve"`.
    pub on_bus_loss: Option<Spanned<String>>,
}

/// One member.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Its name (`--cluster-node` on that machine).
    pub name: String,
    /// Its main listener.
    pub addr: SocketAddr,
    /// Its share of keys, relative to the others. Default: 1.
    pub weight: f64,
}

/// Defaults.
pub const OWNER_CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// Default of [`ClusterConfig::purge_timeout`].
pub const PURGE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default of [`ClusterConfig::owner_read_timeout`].
pub const OWNER_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`ClusterConfig::near_cache_size`].
pub const NEAR_CACHE_SIZE: u64 = 64 << 20;
/// Default of [`ClusterConfig::near_admit_after`].
pub const NEAR_ADMIT_AFTER: u32 = 2;
/// Default of [`ClusterConfig::grace`].
pub const GRACE: Duration = Duration::from_secs(5);

/// `[cluster]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// `node = "n1"`.
    pub node: Option<Spanned<String>>,
    /// `peers = ["n1=10.0.0.1:80", ...]`.
    #[serde(default)]
    pub peers: Vec<Spanned<String>>,
    /// `secret_file = "/etc/hoard/cluster.secret"`.
    pub secret_file: Option<Spanned<PathBuf>>,
    /// `owner_connect_timeout = "200ms"`.
    pub owner_connect_timeout: Option<Dur>,
    /// `owner_read_timeout = "60s"`.
    pub owner_read_timeout: Option<Dur>,
    /// `purge_timeout = "1s"`.
    pub purge_timeout: Option<Dur>,
    /// `near_cache_size = "64MiB"`.
    pub near_cache_size: Option<super::units::Size>,
    /// `near_admit_after = 2`.
    pub near_admit_after: Option<Spanned<u32>>,
    /// `grace = "5s"`.
    pub grace: Option<Dur>,
    /// `[cluster.bus]`.
    pub bus: Option<RawBus>,
    /// `rampup = "60s"`.
    pub rampup: Option<Dur>,
    /// `[cluster.members]`.
    pub members: Option<RawMembers>,
    /// `[[cluster.tier]]`.
    #[serde(default)]
    pub tier: Vec<RawTier>,
}

/// The name in `Via` and `Cache-Status`: in a cluster, the default `hoard`
/// becomes `hoard-NODE`, so that a response shows which node did what.
pub fn via_name(cluster: Option<&ClusterConfig>, via: &str) -> String {
    match cluster {
        Some(c) if via == super::defaults::VIA => format!("{}-{}", super::defaults::VIA, c.node),
        _ => via.to_string(),
    }
}

/// Parses `NAME=HOST:PORT` or `NAME=HOST:PORT*WEIGHT`.
pub fn parse_member(s: &str) -> Result<Member, String> {
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=HOST:PORT"))?;
    let (addr, weight) = match rest.split_once('*') {
        Some((a, w)) => (
            a,
            w.parse::<f64>()
                .ok()
                .filter(|w| *w > 0.0 && w.is_finite())
                .ok_or_else(|| format!("{s:?}: the weight must be a number above 0"))?,
        ),
        None => (rest, 1.0),
    };
    let name = name.trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "{s:?}: a member name is letters, digits, '-' and '_'"
        ));
    }
    let addr: SocketAddr = addr
        .trim()
        .parse()
        .map_err(|e| format!("{s:?}: {addr:?} is not HOST:PORT with an IP address ({e})"))?;
    Ok(Member {
        name: name.to_string(),
        addr,
        weight,
    })
}

/// This machine's hostname, as a node name (its first label): the default
/// of `[cluster] node`, so that the pods of a Kubernetes StatefulSet are
/// named by their hostnames.
pub fn hostname_node() -> Result<String, String> {
    let uts = rustix::system::uname();
    let host = uts.nodename().to_string_lossy();
    let name = host.split('.').next().unwrap_or("").to_string();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "this node's name is required: the hostname {host:?} is not one (letters, digits, '-', '_')"
        ));
    }
    Ok(name)
}

/// Checks a member list against this node's name and the secret; the
/// messages name what is wrong.
pub fn check(node: &str, members: &[Member], secret: &[u8]) -> Result<(), String> {
    if !members.iter().any(|m| m.name == node) {
        return Err(format!("this node ({node:?}) is not in the member list"));
    }
    for (i, m) in members.iter().enumerate() {
        if members[..i].iter().any(|o| o.name == m.name) {
            return Err(format!("member {:?} is listed twice", m.name));
        }
    }
    if secret.is_empty() && members.iter().any(|m| !m.addr.ip().is_loopback()) {
        return Err(
            "a member is not on loopback: a shared secret (--cluster-secret-file, \
             [cluster] secret_file) is required to authenticate peer requests"
                .into(),
        );
    }
    Ok(())
}

/// Reads a secret file (its content, surrounding whitespace removed).
pub fn read_secret(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let s = text.trim_ascii().to_vec();
    if s.len() < 16 {
        return Err(format!(
            "{}: the secret must be at least 16 bytes",
            path.display()
        ));
    }
    Ok(s)
}

/// `[cluster]` from the file: `None` when the section is absent.
pub fn from_raw(
    raw: Option<RawCluster>,
) -> Result<Option<ClusterConfig>, (Option<std::ops::Range<usize>>, &'static str, String)> {
    let Some(raw) = raw else { return Ok(None) };
    let node = match raw.node {
        Some(n) => n,
        None => Spanned::new(
            0..0,
            hostname_node().map_err(|m| (None, "cluster.node", m))?,
        ),
    };
    let mut members = Vec::new();
    for p in &raw.peers {
        members.push(parse_member(p.get_ref()).map_err(|m| (Some(p.span()), "cluster.peers", m))?);
    }
    let secret = match &raw.secret_file {
        Some(f) => {
            read_secret(f.get_ref()).map_err(|m| (Some(f.span()), "cluster.secret_file", m))?
        }
        None => Vec::new(),
    };
    let discovery = match raw.members {
        None => Discovery::Static,
        Some(m) => discovery_from_raw(m, raw.bus.is_some())?,
    };
    if discovery == Discovery::Static {
        check(node.get_ref(), &members, &secret).map_err(|m| (Some(node.span()), "cluster", m))?;
    } else if !members.is_empty() {
        return Err((
            raw.peers.first().map(Spanned::span),
            "cluster.peers",
            "a member list from [cluster.members] replaces peers: remove one".to_string(),
        ));
    }
    let mut tiers = Vec::new();
    for (i, t) in raw.tier.into_iter().enumerate() {
        let mut tm = Vec::new();
        for p in &t.peers {
            tm.push(
                parse_member(p.get_ref()).map_err(|m| (Some(p.span()), "cluster.tier.peers", m))?,
            );
        }
        if tm.is_empty() {
            return Err((
                None,
                "cluster.tier.peers",
                "a tier needs at least one member".to_string(),
            ));
        }
        if secret.is_empty() && tm.iter().any(|m| !m.addr.ip().is_loopback()) {
            return Err((
                t.peers.first().map(Spanned::span),
                "cluster.tier.peers",
                "a parent is not on loopback: [cluster] secret_file is required".to_string(),
            ));
        }
        tiers.push(Tier {
            name: t.name.unwrap_or_else(|| format!("tier{}", i + 1)),
            members: tm,
        });
    }
    if tiers.len() > 1 {
        return Err((
            None,
            "cluster.tier",
            "one parent tier is supported".to_string(),
        ));
    }
    let rampup = raw.rampup.map_or(
        if discovery == Discovery::Static {
            Duration::ZERO
        } else {
            RAMPUP
        },
        |d| d.0,
    );
    let near_admit_after = match raw.near_admit_after {
        Some(n) if !(1..=15).contains(n.get_ref()) => {
            return Err((
                Some(n.span()),
                "cluster.near_admit_after",
                "a count from 1 (keep every copy) to 15".to_string(),
            ))
        }
        Some(n) => n.into_inner(),
        None => NEAR_ADMIT_AFTER,
    };
    Ok(Some(ClusterConfig {
        node: node.into_inner(),
        members,
        secret,
        owner_connect_timeout: raw
            .owner_connect_timeout
            .map_or(OWNER_CONNECT_TIMEOUT, |d| d.0),
        owner_read_timeout: raw.owner_read_timeout.map_or(OWNER_READ_TIMEOUT, |d| d.0),
        purge_timeout: raw.purge_timeout.map_or(PURGE_TIMEOUT, |d| d.0),
        near_cache_size: raw.near_cache_size.map_or(NEAR_CACHE_SIZE, |s| s.0),
        near_admit_after,
        grace: raw.grace.map_or(GRACE, |d| d.0),
        bus: match raw.bus {
            None => None,
            Some(b) => Some(bus_from_raw(b)?),
        },
        discovery,
        rampup,
        tiers,
    }))
}

type RawError = (Option<std::ops::Range<usize>>, &'static str, String);

fn discovery_from_raw(m: RawMembers, has_bus: bool) -> Result<Discovery, RawError> {
    let source = m.source.ok_or((
        None,
        "cluster.members.source",
        "expected \"static\", \"dns\" or \"redis\"".to_string(),
    ))?;
    match source.get_ref().as_str() {
        "static" => Ok(Discovery::Static),
        "dns" => {
            let dns = m.dns.ok_or((
                Some(source.span()),
                "cluster.members.dns",
                "the name to resolve is required (NAME:PORT or _http._tcp.NAME)".to_string(),
            ))?;
            let (name, port) = dns_target(dns.get_ref())
                .map_err(|e| (Some(dns.span()), "cluster.members.dns", e))?;
            let resolver = match m.resolver {
                None => None,
                Some(r) => Some(r.get_ref().parse::<SocketAddr>().map_err(|e| {
                    (
                        Some(r.span()),
                        "cluster.members.resolver",
                        format!("{:?}: not IP:PORT ({e})", r.get_ref()),
                    )
                })?),
            };
            Ok(Discovery::Dns {
                name,
                port,
                resolver,
                refresh: m.refresh.map_or(DNS_REFRESH, |d| d.0),
            })
        }
        "redis" => {
            if !has_bus {
                return Err((
                    Some(source.span()),
                    "cluster.members.source",
                    "\"redis\" needs [cluster.bus] with a redis:// URL".to_string(),
                ));
            }
            let adv = m.advertise.ok_or((
                Some(source.span()),
                "cluster.members.advertise",
                "this node's address as the others reach it is required (IP:PORT)".to_string(),
            ))?;
            let advertise = adv.get_ref().parse::<SocketAddr>().map_err(|e| {
                (
                    Some(adv.span()),
                    "cluster.members.advertise",
                    format!("{:?}: not IP:PORT ({e})", adv.get_ref()),
                )
            })?;
            Ok(Discovery::Redis {
                advertise,
                refresh: m.refresh.map_or(REDIS_REFRESH, |d| d.0),
                ttl: m.ttl.map_or(REDIS_TTL, |d| d.0),
            })
        }
        "kubernetes" => {
            let service = m.service.ok_or((
                Some(source.span()),
                "cluster.members.service",
                "the Service whose endpoints are the members is required".to_string(),
            ))?;
            let sa = std::path::Path::new(SERVICE_ACCOUNT);
            let api =
                match m.api {
                    Some(a) => {
                        let v = a.get_ref().trim_end_matches('/').to_string();
                        if !(v.starts_with("https://") || v.starts_with("http://")) {
                            return Err((
                                Some(a.span()),
                                "cluster.members.api",
                                format!("{v:?}: expected https://HOST:PORT"),
                            ));
                        }
                        v
                    }
                    None => match (
                        std::env::var("KUBERNETES_SERVICE_HOST"),
                        std::env::var("KUBERNETES_SERVICE_PORT"),
                    ) {
                        (Ok(h), Ok(p)) if h.contains(':') => format!("https://[{h}]:{p}"),
                        (Ok(h), Ok(p)) => format!("https://{h}:{p}"),
                        _ => return Err((
                            Some(source.span()),
                            "cluster.members.api",
                            "not in a pod (no KUBERNETES_SERVICE_HOST): give the API server's URL"
                                .to_string(),
                        )),
                    },
                };
            let namespace = match m.namespace {
                Some(n) => n,
                None => std::fs::read_to_string(sa.join("namespace"))
                    .map(|n| n.trim().to_string())
                    .map_err(|e| {
                        (
                            Some(source.span()),
                            "cluster.members.namespace",
                            format!("not given, and the pod's is not readable ({e})"),
                        )
                    })?,
            };
            Ok(Discovery::Kubernetes(KubernetesSource {
                api,
                namespace,
                service: service.into_inner(),
                port: m.port,
                token_file: m.token_file.unwrap_or_else(|| sa.join("token")),
                ca_file: m.ca_file.unwrap_or_else(|| sa.join("ca.crt")),
                refresh: m.refresh.map_or(DNS_REFRESH, |d| d.0),
            }))
        }
        other => Err((
            Some(source.span()),
            "cluster.members.source",
            format!("{other:?}: expected \"static\", \"dns\", \"kubernetes\" or \"redis\""),
        )),
    }
}

fn bus_from_raw(
    b: RawBus,
) -> Result<BusConfig, (Option<std::ops::Range<usize>>, &'static str, String)> {
    let url = b.url.ok_or((
        None,
        "cluster.bus.url",
        "the bus's URL is required (redis://HOST:PORT/DB)".to_string(),
    ))?;
    let mut cfg = bus(url.get_ref()).map_err(|m| (Some(url.span()), "cluster.bus.url", m))?;
    if let Some(p) = b.prefix {
        cfg.prefix = p;
    }
    if let Some(d) = b.max_age {
        cfg.max_age = d.0;
    }
    if let Some(l) = b.on_bus_loss {
        cfg.on_loss = match l.get_ref().as_str() {
            "revalidate" => OnBusLoss::Revalidate,
            "serve" => OnBusLoss::Serve,
            other => {
                return Err((
                    Some(l.span()),
                    "cluster.bus.on_bus_loss",
                    format!("{other:?}: expected \"revalidate\" or \"serve\""),
                ))
            }
        };
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_and_are_checked() {
        let m = parse_member("n1=127.0.0.1:8081").unwrap();
        assert_eq!(
            (m.name.as_str(), m.addr.port(), m.weight),
            ("n1", 8081, 1.0)
        );
        assert_eq!(parse_member("big=10.0.0.2:80*2.5").unwrap().weight, 2.5);
        assert!(parse_member("n1:8081").is_err());
        assert!(parse_member("n 1=127.0.0.1:1").is_err());
        assert!(parse_member("n1=localhost:1").is_err());
        assert!(parse_member("n1=127.0.0.1:1*0").is_err());
        let local = vec![
            parse_member("a=127.0.0.1:1").unwrap(),
            parse_member("b=127.0.0.1:2").unwrap(),
        ];
        assert!(check("a", &local, b"").is_ok());
        assert!(check("c", &local, b"")
            .unwrap_err()
            .contains("not in the member list"));
        let remote = vec![
            parse_member("a=127.0.0.1:1").unwrap(),
            parse_member("b=10.0.0.2:2").unwrap(),
        ];
        assert!(check("a", &remote, b"").unwrap_err().contains("secret"));
        assert!(check("a", &remote, b"0123456789abcdef").is_ok());
        let twice = vec![
            parse_member("a=127.0.0.1:1").unwrap(),
            parse_member("a=127.0.0.1:2").unwrap(),
        ];
        assert!(check("a", &twice, b"").unwrap_err().contains("twice"));
    }
}
