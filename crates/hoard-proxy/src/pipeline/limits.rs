//! The state of the routes' limits in a running configuration: each
//! route's rate cells (`limit`) and counts of requests in progress
//! (`limit_connections`), see [`hoard_edge::limit`].
//!
//! ## Across a reload
//! The state belongs to a route, not to the file it was read from: a
//! reload would otherwise give every client a fresh budget and forget the
//! requests in progress. [`RouteLimits::next`] finds each new route's
//! predecessor by what names it: its site's hosts and scheme, and its path
//! match (`prefix` or `regex`) as written, so routes added, removed or
//! moved around it do not matter. Of two routes with the same name, the
//! first is the first's successor, and so on. The successor then keeps:
//! - the rate cells, when its `limit` (rate, burst, `max_clients`) is the
//!   same; a changed `limit` starts with empty cells (a full burst each);
//! - the counts of requests in progress, always: they are facts, not
//!   settings; a changed `limit_connections` applies to them at once.
//!
//! A route that is new, or whose site or path changed, starts empty.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use hoard_policy::clock::Clock;

use hoard_config::{Config, PathMatch, RouteConfig, SiteConfig};
use hoard_edge::limit::{ConnLimit, RateLimiter};

/// The limits' state of one route (`None`: the route sets no such limit).
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// The rate cells (`limit`).
    pub rate: Option<Arc<RateLimiter>>,
    /// The requests in progress (`limit_connections`).
    pub connections: Option<Arc<ConnLimit>>,
}

/// Every route's [`Limits`], by site and route. See the module docs.
#[derive(Debug, Default)]
pub struct RouteLimits(Vec<Vec<Limits>>);

/// What names a route across a reload.
fn name(site: &SiteConfig, route: &RouteConfig) -> String {
    let path = match &route.path {
        PathMatch::Prefix(p) => format!("prefix {p}"),
        PathMatch::Regex(r) => format!("regex {}", r.as_str()),
    };
    format!("{:?} {:?} {path}", site.hosts, site.tls)
}

impl RouteLimits {
    /// Empty state for every limit of `cfg`.
    pub fn first(cfg: &Config, clock: &Arc<dyn Clock>) -> RouteLimits {
        RouteLimits::build(cfg, clock, HashMap::new())
    }

    /// The state for `cfg`, kept from `self` (the state of `old`) where
    /// the module docs say.
    pub fn next(&self, old: &Config, cfg: &Config, clock: &Arc<dyn Clock>) -> RouteLimits {
        let mut before: HashMap<String, VecDeque<&Limits>> = HashMap::new();
        for (site, limits) in old.sites.iter().zip(&self.0) {
            for (route, l) in site.routes.iter().zip(limits) {
                before.entry(name(site, route)).or_default().push_back(l);
            }
        }
        RouteLimits::build(cfg, clock, before)
    }

    /// The state for `cfg`, each route's taken from its namesake in `before`.
    fn build(
        cfg: &Config,
        clock: &Arc<dyn Clock>,
        mut before: HashMap<String, VecDeque<&Limits>>,
    ) -> RouteLimits {
        let sites = cfg.sites.iter().map(|site| {
            let routes = site.routes.iter().map(|route| {
                let was = before
                    .get_mut(&name(site, route))
                    .and_then(VecDeque::pop_front);
                let Some(edge) = route.edge.as_deref() else {
                    return Limits::default();
                };
                let rate = edge.rate.as_ref().map(|spec| {
                    let same = was
                        .and_then(|w| w.rate.as_ref())
                        .filter(|r| r.spec() == spec);
                    match same {
                        Some(r) => r.clone(),
                        None => Arc::new(RateLimiter::new(spec, clock.clone())),
                    }
                });
                let connections = edge.connections.map(|max| {
                    Arc::new(match was.and_then(|w| w.connections.as_ref()) {
                        Some(c) => c.renew(max),
                        None => ConnLimit::new(max),
                    })
                });
                Limits { rate, connections }
            });
            routes.collect()
        });
        RouteLimits(sites.collect())
    }

    /// The state of route `route` of site `site`.
    #[inline]
    pub fn get(&self, site: usize, route: usize) -> &Limits {
        &self.0[site][route]
    }
}
