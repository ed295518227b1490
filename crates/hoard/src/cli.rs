//! Command-line interface.
//!
//! ```text
//! hoard --upstream http://127.0.0.1:8080 [--listen ADDR] [--cache-size 256MiB] ...
//! hoard run --config hoard.toml
//! hoard check --config hoard.toml
//! hoard purge --admin http://127.0.0.1:8001 (URL | --prefix P | --host H | --tag T | --regex R) [--soft]
//! hoard reload (--pid-file /run/hoard.pid | --admin http://127.0.0.1:8001) [--wait 10s]
//! hoard upgrade --pid-file /run/hoard.pid
//! hoard sign --config hoard.toml --url https://example.com/v/a.mp4 [--expires 1h | --expires-at UNIX]
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use hoard_config::units::{parse_duration, parse_size};
use hoard_server::{Config, ConfigError, QuickStart};

/// `hoard --version`: the version and the commit it was built from.
const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOARD_COMMIT"),
    ")"
);

/// hoard: an HTTP caching reverse proxy.
#[derive(Debug, Parser)]
#[command(version = VERSION_LINE, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    quick: QuickArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run with a configuration file (re-read on SIGHUP).
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Write the process id here while running.
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// Validate a configuration file and exit (non-zero on error).
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Purge cached objects through a running hoard's admin API; prints the count
    /// (in a cluster, the total, then `NODE STATE COUNT` for each member).
    Purge(PurgeArgs),
    /// Ask a running hoard to re-read its configuration and, with --admin,
    /// wait for the outcome: exits 0 once the new configuration is in
    /// effect, 1 with the reason when it is refused or no outcome came in
    /// time.
    Reload(ReloadArgs),
    /// Show a running hoard's requests as they happen, one JSON line each
    /// (its admin API's `GET /trace`): method, URL, status, outcome, the
    /// Cache-Status (why a miss, stored or not, for how long), times.
    Trace {
        /// The running hoard's admin listener, e.g. http://127.0.0.1:8001.
        #[arg(long)]
        admin: String,
        /// A file holding the admin token.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Only URLs (path and query) starting with this.
        #[arg(long)]
        url: Option<String>,
        /// Only this status.
        #[arg(long)]
        status: Option<u16>,
        /// Only this outcome: hit, miss, stale, revalidated, pass, hit_for_pass, error...
        #[arg(long)]
        outcome: Option<String>,
        /// Stop after this many requests.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Set an origin server's state in a running hoard (its admin API):
    /// `hoard upstream set NAME HOST:PORT up|down|drain|auto`.
    #[command(subcommand)]
    Upstream(UpstreamCommand),
    /// Ask a running hoard to hand its listening sockets to a new process of
    /// the binary now at its path, which then serves (sends SIGUSR2).
    Upgrade {
        /// The pid file the running hoard writes (`--pid-file`).
        #[arg(long)]
        pid_file: PathBuf,
    },
    /// Print a signed link (a route's `signed_urls`, or --secret and
    /// --scheme): the URL with its expiry and signature.
    Sign(crate::sign::SignArgs),
}

/// `hoard upstream ...`.
#[derive(Debug, Subcommand)]
pub enum UpstreamCommand {
    /// Take a server out of service (`down`), let it finish what it has and
    /// take no more (`drain`), keep it in service whatever its health check
    /// says (`up`), or return it to its health (`auto`); kept until a
    /// reload or restart. Prints the server's state.
    Set {
        /// The running hoard's admin listener, e.g. http://127.0.0.1:8001.
        #[arg(long)]
        admin: String,
        /// A file holding the admin token.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// The upstream's name (`[upstream.NAME]`).
        upstream: String,
        /// The server as configured, e.g. 10.0.0.7:8080.
        server: String,
        /// up, down, drain or auto.
        #[arg(value_parser = ["up", "down", "drain", "auto"])]
        state: String,
    },
}

/// `hoard purge`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["url", "prefix", "host", "tag", "regex"])))]
pub struct PurgeArgs {
    /// The admin listener, e.g. http://127.0.0.1:8001.
    #[arg(long)]
    pub admin: String,
    /// A file holding the admin token.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// One URL (every variant and slice), e.g. http://example.com/a.jpg.
    pub url: Option<String>,
    /// Every URL starting with this, e.g. http://example.com/images/.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Every URL of this host.
    #[arg(long)]
    pub host: Option<String>,
    /// Every response tagged with this (Surrogate-Key, Cache-Tag).
    #[arg(long)]
    pub tag: Option<String>,
    /// Every URL whose path (without the query) this regular expression
    /// matches, e.g. '^/img/.*\.png$' (a ban: effective at once, swept in the background).
    #[arg(long)]
    pub regex: Option<String>,
    /// Mark stale instead of removing (stale-while-revalidate and stale-if-error still serve them).
    #[arg(long)]
    pub soft: bool,
}

impl PurgeArgs {
    /// The request to send.
    pub fn request(&self) -> hoard_admin::client::PurgeRequest {
        let (kind, value) = if let Some(u) = &self.url {
            ("url", u)
        } else if let Some(p) = &self.prefix {
            ("prefix", p)
        } else if let Some(h) = &self.host {
            ("host", h)
        } else if let Some(r) = &self.regex {
            ("regex", r)
        } else {
            (
                "tag",
                self.tag.as_ref().expect("invariant: clap requires one"),
            )
        };
        hoard_admin::client::PurgeRequest {
            kind,
            value: value.clone(),
            soft: self.soft,
        }
    }
}

/// `hoard reload`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).multiple(true).args(["pid_file", "admin"])))]
pub struct ReloadArgs {
    /// The pid file the running hoard writes (`--pid-file`): the process is
    /// sent SIGHUP (without --admin, nothing tells this command the outcome).
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// The running hoard's admin listener, e.g. http://127.0.0.1:8001: the
    /// outcome is read there (`GET /status` after SIGHUP with --pid-file;
    /// else the reload is asked with `POST /reload`).
    #[arg(long)]
    pub admin: Option<String>,
    /// A file holding the admin token.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// How long to wait for the outcome, e.g. 10s or 500ms.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub wait: Duration,
}

/// Quick start: run in front of one origin with embedded defaults.
#[derive(Debug, clap::Args)]
struct QuickArgs {
    /// Origin server, e.g. http://127.0.0.1:8080 or https://origin.example.com.
    #[arg(long)]
    upstream: Option<String>,
    /// A private CA (PEM) trusted for an https:// upstream, beside the system's roots.
    #[arg(long)]
    upstream_ca: Option<std::path::PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8000; with --domain, 0.0.0.0:80].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Memory cache size, e.g. 256MiB (0 turns the memory tier off).
    #[arg(long, value_parser = parse_size)]
    cache_size: Option<u64>,
    /// Largest object stored, e.g. 8MiB.
    #[arg(long, value_parser = parse_size)]
    max_object_size: Option<u64>,
    /// Lifetime for cacheable responses that carry no freshness information, e.g. 1s or 500ms.
    #[arg(long, value_parser = parse_duration)]
    default_ttl: Option<Duration>,
    /// Serve stale content this long while refreshing (when the origin sends no stale-while-revalidate).
    #[arg(long, value_parser = parse_duration)]
    stale_while_revalidate: Option<Duration>,
    /// Serve stale content this long when the origin fails (when the origin sends no stale-if-error).
    #[arg(long, value_parser = parse_duration)]
    stale_if_error: Option<Duration>,
    /// Slice mode: fetch and cache objects as aligned slices of this size, e.g. 1MiB
    /// (for large files that do not change: video, downloads).
    #[arg(long, value_parser = parse_size)]
    slice: Option<u64>,
    /// Directory of a disk cache zone behind the memory tier.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Byte limit of the disk zone, e.g. 10GiB (default 1GiB; needs --cache-dir).
    #[arg(long, value_parser = parse_size)]
    disk_size: Option<u64>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Show the cache key in Cache-Status.
    #[arg(long)]
    debug_headers: bool,
    /// Serve HTTPS (HTTP/1.1 and HTTP/2) on --listen with this certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Also serve HTTP/3 over QUIC on the same port (UDP), advertised with Alt-Svc; needs --tls-cert or --domain.
    #[arg(long)]
    http3: bool,
    /// A certificate obtained and renewed over ACME: a name, or names sharing one certificate joined by commas (repeat for more certificates; SNI picks one); plain HTTP on --listen then redirects to HTTPS.
    #[arg(long = "domain")]
    domains: Vec<String>,
    /// The HTTPS address with --domain [default: 0.0.0.0:443].
    #[arg(long)]
    tls_listen: Option<SocketAddr>,
    /// Contact address of the ACME account.
    #[arg(long)]
    acme_email: Option<String>,
    /// Another ACME CA's directory URL (default: Let's Encrypt).
    #[arg(long)]
    acme_directory: Option<String>,
    /// A root (PEM) trusted for the ACME CA's own HTTPS (a private or test CA).
    #[arg(long)]
    acme_ca_root: Option<std::path::PathBuf>,
    /// Admin listener (purge API, /metrics, /status, dashboard), e.g. 127.0.0.1:8001.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// File holding the admin bearer token (required when --admin is not on loopback).
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Access log: stdout, stderr, or a file path (JSON lines; reopened on SIGUSR1).
    #[arg(long)]
    access_log: Option<String>,
    /// Write the process id here while running.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// This node's name in a cluster (one of --cluster-peers).
    #[arg(long)]
    cluster_node: Option<String>,
    /// Every cluster member, this node included: NAME=HOST:PORT,NAME=HOST:PORT,...
    /// (each member's main listener; NAME=HOST:PORT*WEIGHT for a larger share).
    #[arg(long)]
    cluster_peers: Option<String>,
    /// File holding the secret that authenticates peer requests (required when a member is not on loopback).
    #[arg(long)]
    cluster_secret_file: Option<PathBuf>,
    /// Bytes of the near tier: copies of hot objects other members own (default 64MiB; 0: none).
    #[arg(long, value_parser = parse_size)]
    cluster_near_size: Option<u64>,
    /// The invalidation log: redis://HOST:PORT/DB (Redis 7 or Valkey); purges are replayed to members that missed them.
    #[arg(long)]
    cluster_bus: Option<String>,
    /// Members from DNS instead of --cluster-peers: NAME:PORT (A/AAAA records, e.g. a Kubernetes headless Service) or _http._tcp.NAME (SRV records), re-resolved every 5 s.
    #[arg(long)]
    cluster_dns: Option<String>,
    /// Members from heartbeats on the bus instead of --cluster-peers: this node's address as the others reach it (IP:PORT); needs --cluster-bus.
    #[arg(long)]
    cluster_advertise: Option<std::net::SocketAddr>,
    /// How long after joining a running cluster a miss is first asked of the key's previous owner (default 60s with a discovered member list, 0 with --cluster-peers).
    #[arg(long, value_parser = parse_duration)]
    cluster_rampup: Option<std::time::Duration>,
}

/// Parses the command line (exits with usage on error).
pub fn parse() -> Cli {
    Cli::parse()
}

impl Cli {
    /// `hoard purge`'s arguments.
    pub fn purge(&self) -> Option<&PurgeArgs> {
        match &self.command {
            Some(Command::Purge(p)) => Some(p),
            _ => None,
        }
    }

    /// `hoard reload`'s arguments.
    pub fn reload(&self) -> Option<&ReloadArgs> {
        match &self.command {
            Some(Command::Reload(r)) => Some(r),
            _ => None,
        }
    }

    /// `hoard trace`.
    pub fn trace(&self) -> Option<&Command> {
        match &self.command {
            Some(c @ Command::Trace { .. }) => Some(c),
            _ => None,
        }
    }

    /// `hoard upstream`'s command.
    pub fn upstream(&self) -> Option<&UpstreamCommand> {
        match &self.command {
            Some(Command::Upstream(u)) => Some(u),
            _ => None,
        }
    }

    /// `hoard sign`'s arguments.
    pub fn sign(&self) -> Option<&crate::sign::SignArgs> {
        match &self.command {
            Some(Command::Sign(a)) => Some(a),
            _ => None,
        }
    }

    /// `hoard upgrade`'s pid file.
    pub fn upgrade(&self) -> Option<&Path> {
        match &self.command {
            Some(Command::Upgrade { pid_file }) => Some(pid_file),
            _ => None,
        }
    }

    /// Where to write the process id, if asked.
    pub fn pid_file(&self) -> Option<&Path> {
        match &self.command {
            Some(Command::Run { pid_file, .. }) => pid_file.as_deref(),
            None => self.quick.pid_file.as_deref(),
            _ => None,
        }
    }

    /// The configuration file a reload re-reads (none in quick-start mode).
    pub fn config_file(&self) -> Option<&Path> {
        match &self.command {
            Some(Command::Run { config, .. }) => Some(config),
            _ => None,
        }
    }

    /// True for `hoard check`.
    pub fn check_only(&self) -> bool {
        matches!(self.command, Some(Command::Check { .. }))
    }

    /// The configuration the command line asks for.
    pub fn config(&self) -> Result<Config, ConfigError> {
        match &self.command {
            Some(Command::Run { config, .. }) | Some(Command::Check { config }) => {
                Config::from_file(config)
            }
            Some(Command::Purge(_))
            | Some(Command::Reload(_))
            | Some(Command::Upgrade { .. })
            | Some(Command::Upstream(_))
            | Some(Command::Trace { .. })
            | Some(Command::Sign(_)) => {
                unreachable!(
                    "invariant: purge, reload, upgrade, upstream and sign have no configuration"
                )
            }
            None => {
                let q = &self.quick;
                let Some(upstream) = &q.upstream else {
                    return Err(ConfigError {
                        file: "command line".into(),
                        line: None,
                        key: "--upstream".into(),
                        message: "required (or use `hoard run --config FILE`); see --help".into(),
                    });
                };
                let admin_token = match &q.admin_token_file {
                    Some(f) => Some(
                        hoard_config::ops::read_token(&f.display().to_string()).map_err(|m| {
                            ConfigError {
                                file: "command line".into(),
                                line: None,
                                key: "--admin-token-file".into(),
                                message: m,
                            }
                        })?,
                    ),
                    None => None,
                };
                Config::quick(&QuickStart {
                    upstream: upstream.clone(),
                    listen: q.listen,
                    domains: q.domains.clone(),
                    tls_listen: q.tls_listen,
                    acme_email: q.acme_email.clone(),
                    acme_directory: q.acme_directory.clone(),
                    acme_ca_root: q.acme_ca_root.clone(),
                    tls: q
                        .tls_cert
                        .as_ref()
                        .zip(q.tls_key.as_ref())
                        .map(|(cert, key)| hoard_config::TlsConfig {
                            cert: cert.clone(),
                            key: key.clone(),
                        }),
                    http3: q.http3,
                    cache_size: q.cache_size,
                    max_object_size: q.max_object_size,
                    default_ttl: q.default_ttl,
                    stale_while_revalidate: q.stale_while_revalidate,
                    stale_if_error: q.stale_if_error,
                    slice: q.slice,
                    cache_dir: q.cache_dir.clone(),
                    disk_size: q.disk_size,
                    threads: q.threads,
                    debug_headers: q.debug_headers,
                    admin: q.admin,
                    admin_token,
                    access_log: q.access_log.as_deref().map(hoard_config::LogTarget::parse),
                    upstream_ca: q.upstream_ca.clone(),
                    cluster_node: q.cluster_node.clone(),
                    cluster_peers: q.cluster_peers.clone(),
                    cluster_secret_file: q.cluster_secret_file.clone(),
                    cluster_near_size: q.cluster_near_size,
                    cluster_bus: q.cluster_bus.clone(),
                    cluster_dns: q.cluster_dns.clone(),
                    cluster_advertise: q.cluster_advertise,
                    cluster_rampup: q.cluster_rampup,
                })
            }
        }
    }
}
