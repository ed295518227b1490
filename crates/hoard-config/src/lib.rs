//! Configuration: the resolved [`Config`] and how it is built.
//!
//! Two ways in, one type out:
//! * [`Config::from_toml`] reads a file (`raw` mirrors it and rejects unknown
//!   keys); errors name the file, line and key.
//! * [`Config::quick`] builds the same structure from the command-line quick
//!   start (`--upstream`, `--listen`, `--cache-size`, ...).
//!
//! Each section of the file has its module: the resolved type and how it
//! is read (`server`, `cache`, `listeners`, `upstreams`, [`sites`],
//! `route`, ...). Every default lives in [`defaults`], and is documented
//! in the README's configuration reference.

pub mod acme;
mod cache;
pub mod cert_files;
mod certs;
pub mod cluster;
pub mod defaults;
mod durability;
mod edge;
mod error;
pub mod esi;
pub mod filters;
pub mod health_check;
mod include;
mod key;
mod listeners;
pub mod log_template;
pub mod normalise;
pub mod ops;
pub mod origin_tls;
pub mod privileges;
mod query_names;
mod quick;
mod raw;
mod route;
mod route_keys;
pub mod rules;
mod run_as;
mod server;
mod servers;
mod signed;
pub mod sites;
pub mod store_rules;
pub mod units;
mod upstreams;
mod via;
pub mod zones;

pub use cache::CacheConfig;
pub use cluster::{ClusterConfig, Member};
pub use error::ConfigError;
pub use listeners::{ListenerConfig, TlsConfig};
pub use ops::{AccessLogConfig, AdminConfig, Cidr, LogFormat, LogTarget};
pub use quick::QuickStart;
pub use route::{ColdRange, PathMatch, RouteConfig, MIN_SLICE};
pub use server::ServerConfig;
pub use servers::RetryOn;
pub use sites::{HostMatch, SiteConfig};
pub use upstreams::{HostHeader, OriginProtocol, ServerAddr, TlsSettings, UpstreamConfig};

use error::{key_at, line_of};
use raw::RawConfig;

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
    /// Proxy-Wasm filters (`[filter.NAME]`), compiled; routes list theirs.
    pub filters: Vec<filters::FilterConfig>,
}

impl Config {
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

/// Turns the file as written into a [`Config`]; each section's module adds
/// its part (`impl Resolver`), and every error is made by [`Resolver::err`].
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

    /// The whole file: each section by its module, then the checks across
    /// sections.
    fn resolve(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let server = self.server(raw.server)?;
        let cache = self.cache(raw.cache)?;
        let listeners = self.listeners(raw.listeners)?;
        let upstreams = self.upstreams(raw.upstreams)?;
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
        let filters = self.filters(raw.filters)?;
        let sites = self.sites(raw.sites, &listeners, &upstreams, &cache, &filters)?;
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
            filters,
        })
    }
}

#[cfg(test)]
mod tests;
