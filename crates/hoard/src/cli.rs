//! Command-line interface.
//!
//! ```text
//! hoard --upstream http://127.0.0.1:8080 [--listen ADDR] [--cache-size 256MiB] ...
//! hoard run --config hoard.toml
//! hoard check --config hoard.toml
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use hoard_proxy::config::units::{parse_duration, parse_size};
use hoard_proxy::{Config, ConfigError, QuickStart};

/// hoard: an HTTP caching reverse proxy.
#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    quick: QuickArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run with a configuration file.
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a configuration file and exit (non-zero on error).
    Check {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
}

/// Quick start: run in front of one origin with embedded defaults.
#[derive(Debug, clap::Args)]
struct QuickArgs {
    /// Origin server, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    upstream: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
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
}

/// Parses the command line (exits with usage on error).
pub fn parse() -> Cli {
    Cli::parse()
}

impl Cli {
    /// True for `hoard check`.
    pub fn check_only(&self) -> bool {
        matches!(self.command, Some(Command::Check { .. }))
    }

    /// The configuration the command line asks for.
    pub fn config(&self) -> Result<Config, ConfigError> {
        match &self.command {
            Some(Command::Run { config }) | Some(Command::Check { config }) => {
                Config::from_file(config)
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
                Config::quick(&QuickStart {
                    upstream: upstream.clone(),
                    listen: Some(q.listen),
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
                })
            }
        }
    }
}
