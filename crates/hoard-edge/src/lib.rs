//! The edge rules of a route: what an nginx operator configures around the
//! cache (see `docs/nginx.md`).
//!
//! ## Where they run
//! ```text
//!  recv ─ route chosen ─► redirect? ──► 30x
//!                         rate / in-progress limit ──► 429 + Retry-After
//!                         allow / deny ──► 403
//!                         basic_auth ──► 401 + WWW-Authenticate
//!                         signed_urls ──► 403 (signature), 410 (expired)
//!                         respond? ──► the fixed answer
//!                         request_headers edits
//!                           ▼
//!                    tunnel / lookup / pass (the pipeline)
//!                           ▼
//!               error page (hoard's own errors) ─► response_headers edits ─► client
//! ```
//! The order is nginx's: `return` (rewrite phase), then `limit_req` and
//! `limit_conn` (preaccess), then `allow`/`deny` and `auth_basic` (access).
//! Every refusal happens before any lookup, so nothing stored reaches a
//! request that should not have it. A route's fixed answer (`respond`)
//! comes after the access checks, so they protect it too (unlike nginx's
//! `return 200 "..."`, which runs in the rewrite phase, before them).
//!
//! ## Cost
//! Everything is built when the configuration is read (and again at a
//! reload): a route without edge rules has `RouteConfig::edge == None` and
//! its requests pay one pointer test. Fixed header values are ready
//! `HeaderValue`s. A site's `response_headers` are merged into each of its
//! routes' then (see [`headers::HeaderEdits::under`]), so they cost a
//! request nothing more. The limits' state is the running configuration's
//! ((`hoard_proxy::pipeline::limits`)), so that it outlives a reload.
//!
//! ## Client address
//! The address the rules see is the peer's (after the PROXY protocol); from
//! a peer in `server.trusted_proxies`, the last address of
//! `X-Forwarded-For` that is not itself a trusted proxy
//! (`hoard_proxy::pipeline::forwarding::client_addr`).

pub mod access;
pub mod basic_auth;
pub mod cidr;
pub mod error_pages;
pub mod headers;
pub mod htpasswd;
pub mod limit;
pub mod redirect;
pub mod respond;
pub mod signed;
pub mod template;

use std::sync::Arc;

use access::Access;
use basic_auth::BasicAuth;
use error_pages::ErrorPages;
use headers::HeaderEdits;
use limit::RateSpec;
use redirect::Redirect;

/// A route's edge rules. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Edge {
    /// Answer every request with this redirect.
    pub redirect: Option<Redirect>,
    /// Requests per client address.
    pub rate: Option<RateSpec>,
    /// Requests in progress per client address, at most (`limit_connections`;
    /// the counts are the running configuration's, see
    /// (`hoard_proxy::pipeline::limits`)).
    pub connections: Option<u32>,
    /// Client addresses let in.
    pub access: Access,
    /// Credentials asked for.
    pub auth: Option<Arc<BasicAuth>>,
    /// Edits of the request towards the origin.
    pub request_headers: HeaderEdits,
    /// Edits of every response of the route.
    pub response_headers: HeaderEdits,
    /// Pages for hoard's own errors (the site's, overridden by the route's).
    pub error_pages: Option<Arc<ErrorPages>>,
    /// Answer every admitted request with this (see [`respond`]).
    pub respond: Option<Arc<respond::Respond>>,
    /// Links checked for a signature and an expiry (see [`signed`]).
    pub signed: Option<Arc<signed::SignedUrls>>,
}

impl Edge {
    /// True when no rule is set (the route then carries no `Edge`).
    pub fn is_empty(&self) -> bool {
        self.redirect.is_none()
            && self.rate.is_none()
            && self.connections.is_none()
            && self.access.is_empty()
            && self.auth.is_none()
            && self.request_headers.is_empty()
            && self.response_headers.is_empty()
            && self.error_pages.is_none()
            && self.respond.is_none()
            && self.signed.is_none()
    }
}
