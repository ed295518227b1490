//! The operator's caching policy for a route: the knobs of the RFC rules.

use std::time::Duration;

/// Which statuses a default TTL applies to (like nginx `proxy_cache_valid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatch {
    /// Exactly this status code.
    Code(u16),
    /// Any status defined as heuristically cacheable (RFC 9110 §15.1).
    Any,
}

/// A default freshness lifetime for responses that carry none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultTtl {
    /// The statuses it applies to.
    pub status: StatusMatch,
    /// The lifetime (sub-second values allowed).
    pub ttl: Duration,
}

/// How a route caches. Built by the proxy's configuration; pure data.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePolicy {
    /// Lifetimes for responses without explicit freshness; the first match wins.
    /// They take precedence over heuristic freshness. Default: none.
    pub default_ttls: Vec<DefaultTtl>,
    /// Ignore the origin's `Cache-Control` for caching decisions. Default: false.
    pub ignore_cache_control: bool,
    /// Ignore `CDN-Cache-Control`. Default: false.
    pub ignore_cdn_cache_control: bool,
    /// Ignore `Expires`. Default: false.
    pub ignore_expires: bool,
    /// Store responses that carry `Set-Cookie` (the cookie itself is never stored). Default: false.
    pub ignore_set_cookie: bool,
    /// Ignore `Vary` (one variant per key). Default: false.
    pub ignore_vary: bool,
    /// Heuristic freshness as a fraction of the time since `Last-Modified`
    /// (RFC 9111 §4.2.2), in percent. Default: 10.
    pub heuristic_percent: u32,
    /// Upper bound of a heuristic lifetime. Default: 1 day.
    pub heuristic_max: Duration,
    /// Upper bound of any lifetime. Default: none.
    pub max_ttl: Option<Duration>,
    /// Stale-while-revalidate window when the response gives none (RFC 5861). Default: none.
    pub stale_while_revalidate: Option<Duration>,
    /// Stale-if-error window when the response gives none (RFC 5861). Default: none.
    pub stale_if_error: Option<Duration>,
    /// What a client's `no-cache` (and `max-age`, `min-fresh`, `Pragma:
    /// no-cache`) does to the lookup. Default: [`ClientNoCache::Revalidate`].
    pub client_no_cache: ClientNoCache,
}

/// What a client's request directives that ask for a fresher response
/// than the stored one do (route `client_no_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientNoCache {
    /// RFC 9111 §5.2.1.4 (and §5.2.1.1, §5.2.1.3, §5.4): the stored
    /// response is validated with the origin first (a conditional request
    /// when it has a validator, else a full fetch).
    #[default]
    Revalidate,
    /// They are disregarded for the lookup: a stored response is served
    /// as if the client had not sent them, so clients cannot force origin
    /// traffic (as nginx and Varnish do by default). `only-if-cached`,
    /// `max-stale`, `stale-if-error` and `no-store` still apply.
    Ignore,
}

impl ClientNoCache {
    /// The name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientNoCache::Revalidate => "revalidate",
            ClientNoCache::Ignore => "ignore",
        }
    }

    /// From its name in the configuration.
    pub fn parse(s: &str) -> Option<ClientNoCache> {
        match s {
            "revalidate" => Some(ClientNoCache::Revalidate),
            "ignore" => Some(ClientNoCache::Ignore),
            _ => None,
        }
    }
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            default_ttls: Vec::new(),
            ignore_cache_control: false,
            ignore_cdn_cache_control: false,
            ignore_expires: false,
            ignore_set_cookie: false,
            ignore_vary: false,
            heuristic_percent: 10,
            heuristic_max: Duration::from_secs(86_400),
            max_ttl: None,
            stale_while_revalidate: None,
            stale_if_error: None,
            client_no_cache: ClientNoCache::Revalidate,
        }
    }
}

impl CachePolicy {
    /// The configured default lifetime for `status`, if any.
    pub fn default_ttl(&self, status: u16) -> Option<Duration> {
        self.default_ttls.iter().find_map(|d| match d.status {
            StatusMatch::Code(c) if c == status => Some(d.ttl),
            StatusMatch::Any if crate::status::heuristically_cacheable(status) => Some(d.ttl),
            _ => None,
        })
    }
}
