//! One request as the pipeline sees it after `recv`: its route, site,
//! upstream, client, normalised target and fields, and the running
//! configuration it is served with (held to the end).

use std::sync::Arc;

use hoard_policy::key::{CacheKey, KeyInput};
use http::header::{HeaderMap, HeaderValue};
use http::{Method, Uri, Version};

use std::net::SocketAddr;

use super::running;
use crate::request_id::RequestId;
use crate::sendfile::SendQueue;
use hoard_config::rules::Rule;
use hoard_config::{RouteConfig, SiteConfig};
use hoard_origin::Upstream;

/// The route rule that matched a cacheable request, if any.
#[derive(Debug, Clone, Copy)]
pub(super) enum Applied<'r> {
    None,
    /// A bypass rule with `store = true`: no lookup, the response is stored.
    BypassStore(&'r Rule),
    /// A no-store rule: look up, serve only what is usable as it is, never store.
    NoStore(&'r Rule),
}

/// One request as the pipeline sees it after recv.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub route: &'a Arc<RouteConfig>,
    pub site: &'a SiteConfig,
    pub upstream: &'a Arc<Upstream>,
    pub peer: SocketAddr,
    /// The client's address as the access log, the edge rules, the cache
    /// rules and `$remote_addr` see it: the peer's (the PROXY protocol's),
    /// or from `X-Forwarded-For` when the peer is a trusted proxy.
    pub client: std::net::IpAddr,
    /// With the access log on: the request's id in its line, which goes
    /// to the origin too (see [`crate::request_id`]).
    pub request_id: Option<&'a RequestId>,
    pub tls: bool,
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    /// Client header fields, hop-by-hop removed.
    pub headers: HeaderMap,
    /// Host as sent (with port).
    pub authority: String,
    /// The connection's sendfile queue (plain HTTP/1.x only).
    pub send: Option<Arc<SendQueue>>,
    /// Where interim responses to this request go (HTTP/1.1 only).
    pub interim: Option<hoard_origin::interim::Interim>,
    /// The running configuration the request is served with.
    pub run: &'a running::Running,
    /// Sent by another cluster member (a checked peer field): filled
    /// here, never forwarded again.
    pub from_peer: bool,
    /// How far the sending member had applied the invalidation log (a
    /// peer's request, with a bus): see [`hoard_cluster::bus`].
    pub peer_log: Option<hoard_cluster::bus::EntryId>,
    /// This node is in a cluster.
    pub clustered: bool,
    /// On a route with `encodings`, for GET and HEAD: the client's own
    /// `Accept-Encoding`, parsed (`headers` then carry `identity`, what
    /// fills ask the origin for; see [`crate::encode`]).
    pub accept: Option<hoard_policy::encoding::Accept>,
    /// With `accept`: the client's `Accept-Encoding` field as sent (its
    /// first line), for a stored coding hoard does not know (see
    /// `hoard_policy::encoding::served_as_stored`).
    pub accept_field: Option<HeaderValue>,
    /// The route's filters' streams and what they set (see `filters`);
    /// boxed, so an unfiltered request pays one pointer in its future.
    pub filtered: Option<Box<super::filters::Filtered>>,
    /// An ESI include's sub-request: its depth and its page's budget
    /// (see `esi`).
    pub esi: Option<Arc<super::esi::Level>>,
    /// The listener it came in on (its index; see [`super::Conn`]).
    pub listener: u16,
    /// An HTTP/1.x GET whose response's fields nothing changes or reads
    /// once the pipeline has made them (its route has no `deliver` steps,
    /// filters or ESI; not an ESI include; nobody watches `GET /trace`): a
    /// hit may send the stored fields as encoded once, and its own with
    /// them (see `hit`).
    pub fields_final: bool,
}

impl Ctx<'_> {
    /// See [`crate::fill::FillJob::cluster_tls`].
    pub fn cluster_tls(&self) -> Option<bool> {
        (self.clustered && !self.from_peer).then_some(self.tls)
    }

    /// See [`crate::fill::FillJob::tier_tls`].
    pub fn tier_tls(&self) -> Option<bool> {
        (self.clustered && self.from_peer).then_some(self.tls)
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// In a cluster, the key's owner is chosen by this when the route sets
    /// `cluster_key` (else by the cache key's text).
    pub fn route_key(&self) -> Option<Arc<str>> {
        let t = self.route.cluster_key.as_ref().filter(|_| self.clustered)?;
        let k = t.key(KeyInput {
            scheme: self.scheme(),
            host: &self.authority,
            path: self.uri.path(),
            query: self.uri.query(),
            headers: &self.headers,
        });
        Some(Arc::from(k.text))
    }

    pub fn key_for(&self, route: &RouteConfig, path: &str, query: Option<&str>) -> CacheKey {
        let mut key = route.key.key(KeyInput {
            scheme: self.scheme(),
            host: &self.authority,
            path,
            query,
            headers: &self.headers,
        });
        if let Some(extra) = self.filtered.as_ref().and_then(|f| f.key_extra.as_ref()) {
            key.text.push_str("|filter=");
            key.text.push_str(extra);
            key.digest = hoard_policy::key::Digest::of(key.text.as_bytes());
        }
        key
    }
}
