//! The configuration file as written: serde mirrors of the TOML, rejecting
//! unknown keys. [`super::Config::from_toml`] turns it into the resolved
//! [`super::Config`], the only type the rest of the proxy sees.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub mod edge;
pub mod tls;

use super::units::{Dur, Size};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Other files holding sites, upstreams and listeners (see `include`).
    pub include: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub server: RawServer,
    #[serde(default, rename = "listener")]
    pub listeners: Vec<RawListener>,
    #[serde(default)]
    pub cache: RawCache,
    #[serde(default, rename = "upstream")]
    pub upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default, rename = "site")]
    pub sites: Vec<RawSite>,
    #[serde(default)]
    pub admin: super::ops::RawAdmin,
    #[serde(default)]
    pub access_log: super::ops::RawAccessLog,
    #[serde(default)]
    pub cluster: Option<super::cluster::RawCluster>,
    #[serde(default)]
    pub acme: Option<super::acme::RawAcme>,
    #[serde(default, rename = "filter")]
    pub filters: BTreeMap<String, Spanned<super::filters::RawFilter>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub threads: Option<usize>,
    pub header_read_timeout: Option<Dur>,
    pub max_header_size: Option<Size>,
    pub max_headers: Option<usize>,
    pub max_uri_length: Option<Size>,
    pub max_body_size: Option<Size>,
    pub via: Option<Spanned<String>>,
    pub debug_headers: Option<bool>,
    pub sendfile: Option<bool>,
    pub shutdown_timeout: Option<Dur>,
    pub max_connections: Option<usize>,
    pub max_requests_per_connection: Option<u64>,
    pub http2_max_streams: Option<u32>,
    pub http3_max_streams: Option<u32>,
    pub keep_alive_timeout: Option<Dur>,
    pub send_timeout: Option<Dur>,
    pub ignore_client_abort: Option<bool>,
    pub tunnel_idle_timeout: Option<Dur>,
    pub body_read_timeout: Option<Dur>,
    pub max_resets: Option<u64>,
    #[serde(default)]
    pub trusted_proxies: Vec<Spanned<String>>,
    pub user: Option<Spanned<String>>,
    pub group: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    pub name: Option<Spanned<String>>,
    pub address: Spanned<String>,
    #[serde(default, deserialize_with = "tls::tls_table")]
    pub tls: Option<RawTls>,
    pub http2: Option<bool>,
    pub http3: Option<Spanned<bool>>,
    pub redirect_https: Option<Spanned<u16>>,
    pub proxy_protocol: Option<Spanned<bool>>,
    pub proxy_protocol_from: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: Option<Spanned<tls::FileName>>,
    pub key: Option<Spanned<tls::FileName>>,
    pub acme: Option<Spanned<Vec<RawAcmeCert>>>,
    pub certs: Option<Spanned<tls::CertList>>,
}

/// One certificate of `tls.acme`: a name (a certificate of its own) or a
/// list of names (one certificate for all, a SAN list).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawAcmeCert {
    Name(String),
    Names(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    pub memory_size: Option<Size>,
    pub max_object_size: Option<Size>,
    pub dir: Option<String>,
    #[serde(default, rename = "zone")]
    pub zones: Vec<RawZone>,
    #[serde(default)]
    pub placement: Vec<RawPlacement>,
    pub max_prefetches: Option<usize>,
    pub max_fills: Option<usize>,
    pub durability: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawZone {
    pub name: Spanned<String>,
    pub dirs: Spanned<Vec<RawDir>>,
    pub max_size: Spanned<Size>,
    pub inactive: Option<Dur>,
    pub min_free: Option<Size>,
}

/// A zone directory: a path, or `{ path, weight }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawDir {
    Path(String),
    Weighted { path: String, weight: Option<u32> },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlacement {
    pub zone: Spanned<String>,
    pub path: Option<Spanned<String>>,
    pub content_type: Option<Spanned<String>>,
    pub min_size: Option<Size>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub servers: Vec<Spanned<String>>,
    pub connect_timeout: Option<Dur>,
    pub read_timeout: Option<Dur>,
    pub max_idle: Option<usize>,
    pub idle_timeout: Option<Dur>,
    pub host: Option<String>,
    pub down_after: Option<u32>,
    pub down_backoff_max: Option<Dur>,
    pub tls: Option<Spanned<RawUpstreamTls>>,
    #[serde(default)]
    pub backup: Vec<Spanned<String>>,
    pub retry_on: Option<Vec<Spanned<String>>>,
    pub tries: Option<Spanned<u32>>,
    pub health_check: Option<crate::health_check::RawHealthCheck>,
    pub protocol: Option<Spanned<String>>,
    pub h2_max_streams: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    pub ca: Option<String>,
    pub server_name: Option<String>,
    pub verify: Option<bool>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSite {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default, rename = "route")]
    pub routes: Vec<Spanned<RawRoute>>,
    pub error_pages: Option<BTreeMap<String, Spanned<String>>>,
    pub scheme: Option<Spanned<String>>,
    pub default: Option<Spanned<bool>>,
    pub listeners: Option<Spanned<Vec<Spanned<String>>>>,
    pub max_body_size: Option<Size>,
    pub response_headers: Option<Spanned<edge::RawHeaderEdits>>,
    pub request_cookie: Option<Spanned<String>>,
    #[serde(default)]
    pub bypass: Vec<super::rules::RawRule>,
}

/// Declares [`RawRoute`] and [`RawEdge`] from one list, so that the edge
/// keys are written once, as fields of both. (`#[serde(flatten)]` of a
/// `RawEdge` field would drop `deny_unknown_fields`, and with it the error
/// naming an unknown key, its file and line.) The route's keys keep the
/// order written, the order an unknown key's "expected one of" lists them.
macro_rules! route_with_edge {
    (
        $(#[$route_meta:meta])*
        pub struct RawRoute {
            $( $(#[$a_meta:meta])* pub $a:ident: $a_ty:ty, )*
            edge {
                $( $(#[$e_meta:meta])* pub $e:ident: $e_ty:ty, )*
            }
            $( $(#[$z_meta:meta])* pub $z:ident: $z_ty:ty, )*
        }
        $(#[$edge_meta:meta])*
        pub struct RawEdge;
    ) => {
        $(#[$route_meta])*
        pub struct RawRoute {
            $( $(#[$a_meta])* pub $a: $a_ty, )*
            $( $(#[$e_meta])* pub $e: $e_ty, )*
            $( $(#[$z_meta])* pub $z: $z_ty, )*
        }

        $(#[$edge_meta])*
        pub struct RawEdge {
            $( pub $e: $e_ty, )*
        }

        impl RawRoute {
            /// Takes the edge keys out of the route (leaving them unset).
            pub fn take_edge(&mut self) -> RawEdge {
                RawEdge {
                    $( $e: std::mem::take(&mut self.$e), )*
                }
            }
        }
    };
}

route_with_edge! {
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RawRoute {
        pub prefix: Option<Spanned<String>>,
        pub regex: Option<Spanned<String>>,
        pub upstream: Option<Spanned<String>>,
        pub cache: Option<bool>,
        pub default_ttl: Option<BTreeMap<String, Spanned<Dur>>>,
        pub ignore_headers: Option<Vec<Spanned<String>>>,
        pub max_ttl: Option<Dur>,
        pub heuristic_percent: Option<u32>,
        pub stale_while_revalidate: Option<Dur>,
        pub stale_if_error: Option<Dur>,
        pub key: Option<RawKey>,
        pub cluster_key: Option<RawKey>,
        pub coalesce: Option<bool>,
        pub upgrade: Option<bool>,
        pub coalesce_timeout: Option<Dur>,
        pub fill_max_age: Option<Dur>,
        pub hit_for_pass: Option<Dur>,
        pub zone: Option<Spanned<String>>,
        pub slice: Option<Spanned<Size>>,
        pub slice_prefetch: Option<u32>,
        pub slice_direct_max: Option<Size>,
        pub cold_range: Option<Spanned<String>>,
        pub encodings: Option<Vec<Spanned<String>>>,
        pub compress_types: Option<Vec<String>>,
        pub compress_min_size: Option<Size>,
        pub fill_accept_encoding: Option<Spanned<String>>,
        pub forward_headers: Option<Vec<Spanned<String>>>,
        pub forward_unkeyed: Option<bool>,
        pub when: Option<Spanned<super::rules::RawWhen>>,
        pub request_cookie: Option<Spanned<String>>,
        pub rewrite_query: Option<Spanned<super::normalise::RawQueryRewrite>>,
        pub esi: Option<Spanned<super::esi::RawEsi>>,
        pub normalise: Option<Spanned<BTreeMap<String, Vec<String>>>>,
        #[serde(default)]
        pub bypass: Vec<super::rules::RawRule>,
        #[serde(default)]
        pub no_store: Vec<super::rules::RawRule>,
        #[serde(default)]
        pub store: Vec<Spanned<super::store_rules::RawStoreRule>>,
        edge {
            pub response_headers: Option<Spanned<edge::RawHeaderEdits>>,
            pub request_headers: Option<Spanned<edge::RawHeaderEdits>>,
            pub redirect: Option<Spanned<edge::RawRedirect>>,
            pub allow: Option<Vec<Spanned<String>>>,
            pub deny: Option<Vec<Spanned<String>>>,
            pub basic_auth: Option<Spanned<edge::RawBasicAuth>>,
            pub limit: Option<Spanned<edge::RawLimit>>,
            pub limit_connections: Option<Spanned<u32>>,
            pub error_pages: Option<BTreeMap<String, Spanned<String>>>,
            pub signed_urls: Option<Spanned<super::signed::RawSignedUrls>>,
        }
        pub max_body_size: Option<Size>,
        pub respond: Option<Spanned<super::route_keys::RawRespond>>,
        pub client_no_cache: Option<Spanned<String>>,
        pub filters: Option<Vec<Spanned<String>>>,
        pub origin_filters: Option<Vec<Spanned<String>>>,
    }

    /// The edge keys of a route, gathered from [`RawRoute`] (see
    /// `edge`).
    #[derive(Debug, Default)]
    pub struct RawEdge;
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    pub scheme: Option<bool>,
    pub host: Option<bool>,
    pub query: Option<Spanned<String>>,
    pub query_params: Option<Vec<Spanned<String>>>,
    pub query_exclude: Option<Vec<Spanned<String>>>,
    pub headers: Option<Vec<Spanned<String>>>,
    pub cookies: Option<Vec<String>>,
}
