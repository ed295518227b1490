//! `[upstream.NAME]`: groups of origin servers ([`UpstreamConfig`]) with
//! their connection settings and origin TLS. The servers' own strings and
//! the failover keys are checked in `servers`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawUpstream;
use super::{ConfigError, Resolver};

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

/// The HTTP version spoken to an upstream's servers (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OriginProtocol {
    /// HTTP/1.1 (default).
    #[default]
    H1,
    /// HTTP/2: ALPN `h2` only over TLS, prior knowledge (h2c) over plain
    /// TCP or a Unix socket.
    H2,
    /// Over TLS, ALPN `h2, http/1.1` and whatever the server picks; over
    /// plain TCP or a Unix socket, HTTP/1.1.
    Auto,
}

impl OriginProtocol {
    /// The configured word: `h1`, `h2` or `auto`.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginProtocol::H1 => "h1",
            OriginProtocol::H2 => "h2",
            OriginProtocol::Auto => "auto",
        }
    }

    /// The protocol a word names.
    pub fn parse(word: &str) -> Option<OriginProtocol> {
        match word {
            "h1" => Some(OriginProtocol::H1),
            "h2" => Some(OriginProtocol::H2),
            "auto" => Some(OriginProtocol::Auto),
            _ => None,
        }
    }
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
    pub retry_on: super::RetryOn,
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
    pub tls: Option<crate::origin_tls::OriginTls>,
    /// Active health checks (`health_check`); `None`: health comes from
    /// requests only.
    pub health_check: Option<crate::health_check::HealthCheck>,
    /// HTTP/1.1, HTTP/2 or either (`protocol`). Default: HTTP/1.1.
    pub protocol: OriginProtocol,
    /// Most HTTP/2 streams hoard opens at once on one connection (the
    /// server's `SETTINGS_MAX_CONCURRENT_STREAMS` when lower); a new
    /// connection opens when every one is full. Default: 100.
    pub h2_max_streams: u32,
}

/// The `tls` table of an upstream, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// A PEM bundle of CAs trusted beside the system's.
    pub ca: Option<PathBuf>,
    /// The name sent as SNI and verified (default: the server's host).
    pub server_name: Option<String>,
    /// Verify the origin's certificate (default: true).
    pub verify: bool,
    /// A client certificate chain (PEM) for origins that require one.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsSettings {
    /// Verification on, no extra CA, no client certificate.
    pub fn verified() -> TlsSettings {
        TlsSettings {
            verify: true,
            ..TlsSettings::default()
        }
    }
}

/// The TLS client of an upstream whose servers include `https://` ones
/// (`None` when none does and no `tls` table was given).
pub(super) fn origin_tls<'a>(
    mut servers: impl Iterator<Item = &'a ServerAddr>,
    settings: Option<TlsSettings>,
) -> Result<Option<crate::origin_tls::OriginTls>, String> {
    if settings.is_none() && !servers.any(|s| s.tls) {
        return Ok(None);
    }
    let settings = settings.unwrap_or_else(TlsSettings::verified);
    crate::origin_tls::build(&settings).map(Some)
}

impl Resolver<'_> {
    /// Every `[upstream.NAME]`, in name order.
    pub(super) fn upstreams(
        &self,
        raw: BTreeMap<String, RawUpstream>,
    ) -> Result<Vec<UpstreamConfig>, ConfigError> {
        let mut upstreams = Vec::new();
        for (name, u) in raw {
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
            if let Some(p) = &u.protocol {
                up.protocol = OriginProtocol::parse(p.get_ref()).ok_or_else(|| {
                    self.err(
                        Some(p.span()),
                        format!("upstream.{name}.protocol"),
                        format!(
                            "unknown protocol {:?}: \"h1\", \"h2\" or \"auto\"",
                            p.get_ref()
                        ),
                    )
                })?;
                if up.protocol == OriginProtocol::Auto
                    && !up.servers.iter().chain(&up.backup).any(|s| s.tls)
                {
                    tracing::info!(upstream = %name, "protocol = \"auto\" with no https:// server: HTTP/1.1 (HTTP/2 to a plain server needs protocol = \"h2\")");
                }
            }
            if let Some(n) = &u.h2_max_streams {
                if !(1..=1000).contains(n.get_ref()) {
                    return Err(self.err(
                        Some(n.span()),
                        format!("upstream.{name}.h2_max_streams"),
                        "must be from 1 to 1000".into(),
                    ));
                }
                up.h2_max_streams = *n.get_ref();
            }
            if let Some(hc) = u.health_check {
                up.health_check = Some(self.health_check(&name, hc)?);
            }
            if let Some(t) = &u.tls {
                if t.get_ref().verify == Some(false) {
                    tracing::warn!(upstream = %name, "origin TLS certificates are not verified (`verify = false`)");
                }
            }
            let settings = u.tls.as_ref().map(|t| {
                let t = t.get_ref();
                TlsSettings {
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
        Ok(upstreams)
    }
}
