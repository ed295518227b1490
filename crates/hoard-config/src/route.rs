//! A route ([`RouteConfig`]): which paths it takes, which upstream it goes
//! to and how it caches, resolved from a `[[site.route]]` table.

use std::time::Duration;

use hoard_policy::config::{CachePolicy, DefaultTtl, StatusMatch};
use hoard_policy::key::KeyTemplate;
use http::HeaderName;
use regex::Regex;

use super::raw::RawRoute;
use super::{edge, rules, CacheConfig, ConfigError, Resolver, UpstreamConfig};

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
    /// Index into `Config::upstreams`.
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
    /// What the request must also have for the route to take it (`when`:
    /// cookie, header, query, method, client; all of them); empty: the
    /// path alone decides.
    pub when: Vec<rules::Condition>,
    /// Its `response_headers` use `$cache_hits`: hits of its stored objects
    /// are counted (a shared counter per object; no cost otherwise).
    pub count_hits: bool,
    /// Decisions on what the origin sent (`[[site.route.store]]`), first
    /// match wins (see `store_rules`).
    pub store: Vec<crate::store_rules::StoreRule>,
    /// The query rewritten before the key and the origin (`rewrite_query`).
    pub rewrite_query: Option<crate::normalise::QueryRewrite>,
    /// Pages assembled from fragments (`esi`; see `hoard_proxy::esi`).
    pub esi: Option<crate::esi::EsiConfig>,
    /// Headers mapped to one of a few values before the key, `Vary` and
    /// the origin (`normalise`).
    pub normalise: Vec<crate::normalise::Normalise>,
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
    /// order (`encodings`; see `hoard_proxy::encode`). Default: br, zstd, gzip;
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
    pub edge: Option<std::sync::Arc<hoard_edge::Edge>>,
    /// Largest request body (413 beyond): the route's `max_body_size`,
    /// else its site's; `None`: `server.max_body_size`.
    pub max_body_size: Option<u64>,
    /// Proxy-Wasm filters (`filters`), in request order; responses go
    /// through them in reverse.
    pub filters: Vec<std::sync::Arc<hoard_wasm::Plugin>>,
    /// Proxy-Wasm filters on the route's origin fetches
    /// (`origin_filters`): the request sent, then the response before it
    /// is judged for storing, once per fetch (not per client).
    pub origin_filters: Vec<std::sync::Arc<hoard_wasm::Plugin>>,
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

impl Resolver<'_> {
    pub(super) fn route(
        &self,
        at: &str,
        mut r: RawRoute,
        upstreams: &[UpstreamConfig],
        cache: &CacheConfig,
        site_pages: Option<&std::sync::Arc<hoard_edge::error_pages::ErrorPages>>,
    ) -> Result<(RouteConfig, Option<edge::LoopProbe>), ConfigError> {
        let edge_keys = r.take_edge();
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
            None if upstreams.len() == 1 || edge_keys.redirect.is_some() || r.respond.is_some() => {
                0
            }
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
            if !hoard_policy::headers::FORWARDING_OWNED.contains(&name.as_str()) {
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
        let (edge, probe) = self.edge(at, edge_keys, &path, site_pages)?;
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
        let when = match r.when {
            Some(w) => self.when(at, w)?,
            None => Vec::new(),
        };
        let rewrite_query = match r.rewrite_query {
            Some(q) => Some(self.rewrite_query(at, q)?),
            None => None,
        };
        let esi = match r.esi {
            Some(e) => self.esi(at, e)?,
            None => None,
        };
        let normalise = match r.normalise {
            Some(n) => self.normalise(at, n)?,
            None => Vec::new(),
        };
        let store = self.store_rules(at, r.store)?;
        Ok((
            RouteConfig {
                count_hits: false,
                when,
                store,
                rewrite_query,
                esi,
                normalise,
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
                filters: Vec::new(),
                origin_filters: Vec::new(),
            },
            probe,
        ))
    }
}
