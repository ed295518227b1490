//! The request path as named phases, and the handlers registered for them.
//!
//! ## The phases, in order
//!
//! | phase | runs | handlers, in order | where |
//! |---|---|---|---|
//! | `accept` | per request, before anything | count by HTTP version; the access log's record started (client address, request id) | `Pipeline::serve` |
//! | `intercept` | per node, before any site or route | `Intercept`: `acme_challenge`, `https_redirect`, `cluster_probe`, `purge`, `peer_acme`, `peer_purge` | `Intercept::claims`, `Pipeline::intercept` |
//! | `recv` | per route, after site and route are chosen | limits on the target, Host, body size, upgrades, `Expect` (`prepare`), then the route's `RecvStep`s: `redirect`, `rate`, `connections`, `access`, `auth`, `signed`, `respond`, `request_headers` | `prepare`, `Pipeline::recv_steps` |
//! | `key` | cacheable methods on a caching route | the route's `bypass` and `no_store` rules, the cache key (route key, Vary) and the lookup | `route_request`, `cacheable` |
//! | `fetch` | towards the origin or a peer | the origin request's fields (`origin_request`), the cluster's owner or the upstream's servers with failover, coalescing into one fill | `fetch`, `fill` |
//! | `store` | what the origin sent, before storing | storable (RFC 9111 §3), TTL rules, encodings, the tiers | `fill::run` |
//! | `deliver` | every response, hits and hoard's own answers included | `Cache-Status`, `Via`, ranges; then the route's `DeliverStep`s: `error_page`, `response_headers` | `hit`, `fetch`, `Pipeline::deliver_steps` |
//! | `log` | when the body is sent | outcome and time to first byte to the metrics; the access log's line | `Pipeline::serve`, `crate::tally` |
//!
//! ## Registration
//!
//! Handlers are registered when the configuration is built, never looked
//! for per request: a node's intercepts when its pipeline is made (which
//! ones depend on whether it is in a cluster), a route's steps once per
//! running configuration (see [`super::running`]), from its edge rules and
//! limits. A route with no step in a phase pays one test of an empty list
//! for it. A new feature adds a variant here, registers it where its
//! configuration says so, and handles it in the phase's function.

use http::Request;

use super::{Conn, Pipeline};
use hoard_edge::Edge;

/// A phase of the request path (see the module docs), for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Per request, before anything.
    Accept,
    /// Per node, before any site or route.
    Intercept,
    /// Per route, before the cache.
    Recv,
    /// The cache key and the lookup.
    Key,
    /// Towards the origin or a peer.
    Fetch,
    /// What the origin sent, before storing.
    Store,
    /// Every response.
    Deliver,
    /// When the body is sent.
    Log,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 8] = [
        Phase::Accept,
        Phase::Intercept,
        Phase::Recv,
        Phase::Key,
        Phase::Fetch,
        Phase::Store,
        Phase::Deliver,
        Phase::Log,
    ];

    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Accept => "accept",
            Phase::Intercept => "intercept",
            Phase::Recv => "recv",
            Phase::Key => "key",
            Phase::Fetch => "fetch",
            Phase::Store => "store",
            Phase::Deliver => "deliver",
            Phase::Log => "log",
        }
    }
}

/// A node's answer to a request before any site or route: none of them
/// is cached or forwarded. Two kinds, by how they are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intercept {
    /// Answered at once, outside the metrics and the access log.
    Now(Immediate),
    /// Answered after reading the request, counted and logged as `purge`.
    Logged(Counted),
}

/// An intercept answered at once (`Pipeline::answer_now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Immediate {
    /// An ACME HTTP-01 challenge for one of hoard's names.
    AcmeChallenge,
    /// Plain HTTP on a listener that redirects to HTTPS (308).
    HttpsRedirect,
    /// A cluster member's probe.
    ClusterProbe,
}

/// An intercept counted and logged as a purge (`Pipeline::intercept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    /// A certificate shared by a cluster member.
    PeerAcme,
    /// A purge sent on by a cluster member.
    PeerPurge,
    /// The `PURGE` method.
    Purge,
}

impl Intercept {
    /// The intercepts of a node, in the order they are tried: the ACME
    /// challenges first (they pass the HTTPS redirect), the cluster's own
    /// requests only in a cluster, the `PURGE` method before a member's
    /// purge and certificate paths.
    pub(crate) fn registered(clustered: bool) -> Box<[Intercept]> {
        use Intercept::{Logged, Now};
        let mut all = vec![Now(Immediate::AcmeChallenge), Now(Immediate::HttpsRedirect)];
        if clustered {
            all.push(Now(Immediate::ClusterProbe));
        }
        all.push(Logged(Counted::Purge));
        if clustered {
            all.extend([Logged(Counted::PeerAcme), Logged(Counted::PeerPurge)]);
        }
        all.into_boxed_slice()
    }

    /// The intercept's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Intercept::Now(Immediate::AcmeChallenge) => "acme_challenge",
            Intercept::Now(Immediate::HttpsRedirect) => "https_redirect",
            Intercept::Now(Immediate::ClusterProbe) => "cluster_probe",
            Intercept::Logged(Counted::PeerAcme) => "peer_acme",
            Intercept::Logged(Counted::PeerPurge) => "peer_purge",
            Intercept::Logged(Counted::Purge) => "purge",
        }
    }

    /// True when this intercept answers `req`. Inlined into the
    /// `intercept` phase's loop: every request asks each intercept.
    #[inline(always)]
    pub(crate) fn claims<B>(self, p: &Pipeline, req: &Request<B>, conn: &Conn) -> bool {
        let path = || req.uri().path();
        match self {
            Intercept::Now(Immediate::AcmeChallenge) => p.acme.as_ref().is_some_and(|acme| {
                acme.active()
                    && path().starts_with(hoard_acme::CHALLENGE_PATH)
                    && req
                        .uri()
                        .host()
                        .or_else(|| req.headers().get(http::header::HOST)?.to_str().ok())
                        .is_some_and(|h| acme.serves_challenges_for(h))
            }),
            Intercept::Now(Immediate::HttpsRedirect) => conn.redirect_https.is_some(),
            Intercept::Now(Immediate::ClusterProbe) => path() == hoard_cluster::probe::PATH,
            Intercept::Logged(Counted::PeerAcme) => path() == hoard_acme::share::PATH,
            Intercept::Logged(Counted::PeerPurge) => path() == hoard_cluster::purge::PATH,
            Intercept::Logged(Counted::Purge) => req.method().as_str() == "PURGE",
        }
    }
}

/// A route's handler in the `recv` phase, after site and route are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvStep {
    /// Every request redirected (`redirect`).
    Redirect,
    /// Requests per client address (`limit`).
    Rate,
    /// Requests in progress per client address (`limit_connections`).
    Connections,
    /// Client addresses let in (`allow`, `deny`).
    Access,
    /// Credentials asked for (`auth_basic`); hoard's own, so they are not
    /// sent on.
    Auth,
    /// A signed link checked, its signature and expiry then removed from
    /// the target (`signed_urls`).
    Signed,
    /// Every admitted request answered (`respond`).
    Respond,
    /// Edits of the request towards the origin (`request_headers`).
    RequestHeaders,
}

/// A route's handler in the `deliver` phase: every response of the route,
/// hoard's own answers included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliverStep {
    /// A page in place of hoard's own error (`error_pages`).
    ErrorPage,
    /// Edits of the response (`response_headers`).
    ResponseHeaders,
}

/// A route's registered handlers (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RouteSteps {
    /// The `recv` phase's, in order.
    pub recv: Box<[RecvStep]>,
    /// The `deliver` phase's, in order.
    pub deliver: Box<[DeliverStep]>,
    /// Its `response_headers` use delivery variables (`$cache_status`...):
    /// `deliver` works them out.
    pub delivery_vars: bool,
}

impl RouteSteps {
    /// True when the route's `deliver` phase leaves a response as the
    /// pipeline made it: no `deliver` steps, no filters (their response
    /// callbacks), no ESI. One test for its two users: `recv` returns such
    /// a route's response as it is (unless a limit's guard rides on it),
    /// and a hit on it may send the stored fields as encoded once
    /// (`Ctx::fields_final`).
    pub(crate) fn deliver_is_empty(&self, route: &hoard_config::RouteConfig) -> bool {
        self.deliver.is_empty() && route.filters.is_empty() && route.esi.is_none()
    }

    /// The steps of a route with these edge rules, in nginx's order:
    /// redirect (`return`), limits, access, credentials, the link's
    /// signature, then the fixed answer and the request's edits.
    pub(crate) fn of(edge: Option<&Edge>) -> RouteSteps {
        let Some(e) = edge else {
            return RouteSteps::default();
        };
        let mut recv = Vec::new();
        let mut on = |yes: bool, step| {
            if yes {
                recv.push(step);
            }
        };
        on(e.redirect.is_some(), RecvStep::Redirect);
        on(e.rate.is_some(), RecvStep::Rate);
        on(e.connections.is_some(), RecvStep::Connections);
        on(!e.access.is_empty(), RecvStep::Access);
        on(e.auth.is_some(), RecvStep::Auth);
        on(e.signed.is_some(), RecvStep::Signed);
        on(e.respond.is_some(), RecvStep::Respond);
        on(!e.request_headers.is_empty(), RecvStep::RequestHeaders);
        let mut deliver = Vec::new();
        if e.error_pages.is_some() {
            deliver.push(DeliverStep::ErrorPage);
        }
        if !e.response_headers.is_empty() {
            deliver.push(DeliverStep::ResponseHeaders);
        }
        RouteSteps {
            delivery_vars: e.response_headers.uses_delivery(),
            recv: recv.into_boxed_slice(),
            deliver: deliver.into_boxed_slice(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_names_are_distinct_and_in_order() {
        let names: Vec<_> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(
            names,
            [
                "accept",
                "intercept",
                "recv",
                "key",
                "fetch",
                "store",
                "deliver",
                "log"
            ]
        );
    }

    #[test]
    fn cluster_intercepts_are_registered_only_in_a_cluster() {
        let alone: Vec<_> = Intercept::registered(false)
            .iter()
            .map(|i| i.as_str())
            .collect();
        assert_eq!(alone, ["acme_challenge", "https_redirect", "purge"]);
        let member = Intercept::registered(true);
        let member: Vec<_> = member.iter().map(|i| i.as_str()).collect();
        assert_eq!(
            member,
            [
                "acme_challenge",
                "https_redirect",
                "cluster_probe",
                "purge",
                "peer_acme",
                "peer_purge"
            ]
        );
    }

    #[test]
    fn a_route_without_edge_rules_has_no_steps() {
        assert_eq!(RouteSteps::of(None), RouteSteps::default());
    }
}
