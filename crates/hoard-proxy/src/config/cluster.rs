//! `[cluster]` and `--cluster-*`: the members of a hoard cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::units::Dur;

/// A cluster: this node and every member (see `crate::cluster`).
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
    /// (`crate::cluster::near`). Default: 64 MiB; 0: none kept.
    pub near_cache_size: u64,
    /// Forwards of a key after which a near copy is kept (1: always).
    /// Default: 2.
    pub near_admit_after: u32,
    /// A stall of this node longer than this fences what it stored (see
    /// `crate::cluster::probe`), and so does a bus lost for longer. Default: 5 s.
    pub grace: Duration,
    /// The invalidation log (`[cluster.bus]`, `--cluster-bus`), if any.
    pub bus: Option<BusConfig>,
}

/// `[cluster.bus]`: purges as a Redis/Valkey stream (see `crate::cluster::bus`).
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
    let node = raw.node.ok_or((
        None,
        "cluster.node",
        "this node's name is required".to_string(),
    ))?;
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
    check(node.get_ref(), &members, &secret).map_err(|m| (Some(node.span()), "cluster", m))?;
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
    }))
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
