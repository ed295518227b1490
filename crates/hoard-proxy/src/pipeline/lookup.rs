//! The `key` phase of a cacheable request: the cache key, the lookup and
//! what is done with what it finds (a hit, a revalidation, a miss, a
//! partial copy, a sliced route).

use std::sync::Arc;

use hoard_policy::cache_status::{CacheStatus, Fwd};
use hoard_policy::encoding::codings_accepted;
use hoard_policy::reuse::{request_cache_control_for, reuse_aged, Reuse};
use hoard_store::Lookup;
use http::header::{self};
use http::{Method, Response};

use super::{fetch, partial, Applied, Ctx, Pipeline};
use crate::body::ProxyBody;
use hoard_config::ColdRange;
use hoard_origin::error::{ErrorKind, ProxyError};

impl Pipeline {
    /// Cacheable method on a caching route: look up and decide.
    pub(super) async fn cacheable(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        applied: Applied<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        // A route with `client_no_cache = "ignore"` reads the client's
        // directives without those that would force a revalidation.
        let req_cc = request_cache_control_for(&ctx.headers, ctx.route.policy.client_no_cache);
        let key = ctx.key_for(ctx.route, ctx.uri.path(), ctx.uri.query());
        let now = self.clock.now();
        let mut variant = None;
        let behind = match (ctx.peer_log, &self.cluster) {
            // Boxed: a hit's future has no room for the wait.
            (Some(at), Some(c)) => !Box::pin(c.caught_up_to(at)).await,
            _ => false,
        };
        let lookup = match applied {
            // A bypass that stores: no lookup, a fill that replaces the object.
            Applied::BypassStore(_) => Lookup::UriMiss,
            // The sending member has applied purges this node has not read
            // yet: what is stored here may be what they removed.
            _ if behind => Lookup::UriMiss,
            _ => self.store.lookup(key.digest, &key.text, &ctx.headers).await,
        };
        let (stale, fwd) = match lookup {
            // A coding hoard cannot decode, varying on `Accept-Encoding`,
            // that this request does not accept: the origin's own answer.
            Lookup::Hit(obj)
                if ctx.accept.is_some()
                    && obj.coding_varies
                    && !codings_accepted(&obj.headers, ctx.accept_field.as_ref()) =>
            {
                self.counters.inc(&self.counters.cache_miss);
                return Box::pin(self.pass(ctx, None, None)).await;
            }
            Lookup::Hit(obj) => {
                // One age (§4.2.3) for the decision and the hit's `Age`.
                let age = obj.times.current_age(now);
                match self.reuse_here(&obj, &req_cc, age) {
                    Reuse::Fresh | Reuse::StaleAllowed => {
                        self.counters.inc(&self.counters.cache_hit);
                        let mut status = CacheStatus {
                            hit: true,
                            ..Default::default()
                        };
                        if obj.near {
                            // A copy of an object another member owns.
                            self.counters.inc(&self.counters.cluster_near_hits);
                            status.detail = Some("near");
                        }
                        return Ok(self.serve_stored_aged(ctx, &key, obj, status, age));
                    }
                    // A no-store request takes only what may be served as it is:
                    // a refresh in its name (with its cookies) must not be stored.
                    _ if matches!(applied, Applied::NoStore(_)) => (None, Fwd::Stale),
                    Reuse::StaleWhileRevalidate => {
                        // RFC 5861 §3: serve the stale copy now; one background refresh
                        // (a fill nobody waits for) runs unless one is in flight.
                        self.counters
                            .inc(&self.counters.stale_while_revalidate_served);
                        let job = self.fill_job(ctx, &key, &req_cc, Some(obj.clone()), false);
                        self.fills.spawn_refresh(job, ctx.route.fill_max_age);
                        let status = CacheStatus {
                            hit: true,
                            detail: Some("stale-while-revalidate"),
                            ..Default::default()
                        };
                        return Ok(self.serve_stored_aged(ctx, &key, obj, status, age));
                    }
                    Reuse::Revalidate(reason) => {
                        let fwd = match reason {
                            hoard_policy::reuse::RevalidateReason::RequestNoCache
                            | hoard_policy::reuse::RevalidateReason::RequestFreshness => {
                                Fwd::Request
                            }
                            _ => Fwd::Stale,
                        };
                        (Some(obj), fwd)
                    }
                }
            }
            Lookup::VaryMiss(names) => {
                // Fills of this variant share a slot of their own.
                variant = Some(names.variant(&ctx.headers));
                (None, Fwd::VaryMiss)
            }
            Lookup::UriMiss => (None, Fwd::UriMiss),
        };
        let fwd = match applied {
            Applied::BypassStore(_) => Fwd::Bypass,
            _ => fwd,
        };
        // The object is not stored whole: a partial copy may answer, or be
        // completed (not on slicing routes, whose slices are their own).
        let mut partial = None;
        if fwd == Fwd::UriMiss && ctx.method == Method::GET && ctx.route.slice.is_none() {
            // Boxed: only misses pay for this future's room.
            match Box::pin(self.partial_copy(ctx, &key, &req_cc, now)).await {
                partial::PartialUse::Served(resp) => return Ok(*resp),
                partial::PartialUse::Complete(want) => partial = Some(want),
                partial::PartialUse::No => {
                    if ctx.route.cold_range == ColdRange::Forward
                        && ctx.headers.contains_key(header::RANGE)
                    {
                        partial = Some(partial::PartialWant::Forward);
                    }
                }
            }
        }
        if req_cc.only_if_cached {
            if let (None, Some(size)) = (&stale, ctx.route.slice) {
                // Answered only if every slice it needs is stored (no slice
                // is fetched for it; see `slice`).
                if let Some(resp) = Box::pin(self.sliced(ctx, &key, &req_cc, size)).await? {
                    return Ok(resp);
                }
            }
            self.counters.inc(&self.counters.only_if_cached_miss);
            let e = ProxyError::client(
                ErrorKind::OnlyIfCached,
                "only-if-cached and nothing usable stored",
            );
            return Ok(self.error_response(&e, Some(fwd)));
        }
        if let Applied::NoStore(rule) = applied {
            self.counters.inc(&self.counters.cache_miss);
            return Box::pin(self.pass(ctx, None, Some((fwd, rule)))).await;
        }
        if let (None, Some(size)) = (&stale, ctx.route.slice) {
            if let Some(resp) = Box::pin(self.sliced(ctx, &key, &req_cc, size)).await? {
                return Ok(resp);
            }
        }
        if stale.is_some() {
            self.counters.inc(&self.counters.cache_revalidate);
        } else {
            self.counters.inc(&self.counters.cache_miss);
        }
        // Revalidated because this cluster node may have missed a purge (it
        // stood still, or is not caught up with the log): Cache-Status says so.
        let fenced = stale
            .as_ref()
            .filter(|o| {
                self.cluster
                    .as_ref()
                    .is_some_and(|c| c.fenced(o.times.response_time))
            })
            .map(|_| Arc::<str>::from("cluster-fenced"));
        // Boxed, as the other steps that go to the origin: a hit's future
        // has no room for them (see `future_sizes`).
        Box::pin(self.fetch(fetch::Want {
            ctx,
            key: &key,
            req_cc: &req_cc,
            fwd,
            stale,
            variant,
            hit_for_pass: false,
            rule: match applied {
                Applied::BypassStore(rule) => Some(rule.label.clone()),
                _ => fenced,
            },
            partial,
        }))
        .await
    }

    /// RFC 9111's reuse decision, except that in a cluster a response this
    /// node stored before it stood still is revalidated first (it may have
    /// missed a purge; see `cluster::probe`).
    pub(super) fn reuse_here(
        &self,
        obj: &hoard_store::object::StoredObject,
        req_cc: &hoard_policy::cache_control::CacheControl,
        age: std::time::Duration,
    ) -> Reuse {
        match &self.cluster {
            Some(c) if c.fenced(obj.times.response_time) => {
                Reuse::Revalidate(hoard_policy::reuse::RevalidateReason::Stale)
            }
            _ => reuse_aged(&obj.times, &obj.rules, req_cc, age),
        }
    }
}
