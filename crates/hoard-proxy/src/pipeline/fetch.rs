//! Going to the origin for a cacheable request, through the fill engine
//! ([`crate::fill`]): join the fill in flight for the key or start one, wait
//! for its outcome (woken by an event), and answer from it.
//!
//! | outcome | leader (started the fill) | follower (joined it) |
//! |---|---|---|
//! | `Streaming` | reads the body from byte 0 | same, if its request selects the same variant; else fetches alone |
//! | `Refreshed` | serves the refreshed object | looks up again |
//! | `Uncacheable` | takes the origin's response | fetches alone at once (no queueing) |
//! | `OriginError` | stale if allowed, else 502/504 | same |
//! | `Dangling` | 500 (a bug: its own fill ended without an outcome) | fetches alone |
//! | wait timeout | (bounded by origin timeouts) | goes to the origin uncached |
//!
//! A 5xx during revalidation, or an origin known to be down, is answered with
//! the stale copy when stale-if-error allows it.

use std::sync::Arc;
use std::time::Duration;

use hoard_policy::cache_control::CacheControl;
use hoard_policy::cache_status::{CacheStatus, Fwd};
use hoard_policy::conditional::add_validators;
use hoard_policy::encoding::served_as_stored;
use hoard_policy::key::{CacheKey, Digest};
use hoard_policy::reuse::{reuse, stale_if_error, Reuse};
use hoard_store::object::StoredObject;
use hoard_store::Lookup;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::fill::coalesce::{Join, LeaderClaim, Outcome};
use crate::fill::FillJob;
use hoard_origin::error::ProxyError;

/// What a request wants from the origin: the key, its directives, why it
/// goes forward, and the stale copy it may fall back on.
#[derive(Debug)]
pub(crate) struct Want<'a> {
    pub ctx: &'a Ctx<'a>,
    pub key: &'a CacheKey,
    pub req_cc: &'a CacheControl,
    pub fwd: Fwd,
    pub stale: Option<Arc<StoredObject>>,
    /// The variant the request selects, when the key is known to vary.
    pub variant: Option<Digest>,
    /// The key is marked hit-for-pass (shown as `fwd=bypass; detail=hit-for-pass`).
    pub hit_for_pass: bool,
    /// The bypass rule that sent the request here (`Cache-Status` detail).
    pub rule: Option<Arc<str>>,
    /// A partial copy to store or complete (see `partial`).
    pub partial: Option<super::partial::PartialWant>,
}

/// Whether a fetch may share a fill with other requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Join the fill in flight for the key, or start one others can join.
    Coalesce,
    /// The fill for the key answered with a `Vary` that selects another
    /// variant for this request: join (or start) the fill for that variant.
    Variant(Digest, String),
    /// A fill of its own (hit-for-pass, `coalesce = false`, or after a fill
    /// that could not serve this request).
    Alone,
}

impl Mode {
    /// The slot of one variant of a key: every request that wants it, whether it
    /// learned the key varies from the store or from a fill's response, meets there.
    fn variant(key: &CacheKey, variant: Digest) -> Mode {
        Mode::Variant(
            Digest(key.digest.0 ^ variant.0.rotate_left(64)),
            format!("{}#{variant}", key.text),
        )
    }
}

impl Pipeline {
    /// Where a forwarded range request meets others for the same bytes of
    /// the same version (`Range` and `If-Range` alike).
    pub(crate) fn forward_slot(key: &CacheKey, ctx: &Ctx<'_>) -> Mode {
        let field = |h| {
            ctx.headers
                .get(h)
                .map(|v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default()
        };
        let text = format!(
            "{}{}{} if-range={}",
            key.text,
            hoard_policy::key::RANGE_MARK,
            field(header::RANGE),
            field(header::IF_RANGE)
        );
        Mode::Variant(Digest::of(text.as_bytes()), text)
    }

    /// The fill job for `ctx`: a GET to the origin, with the stale copy's validators.
    pub(crate) fn fill_job(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        req_cc: &CacheControl,
        stale: Option<Arc<StoredObject>>,
        has_leader: bool,
    ) -> FillJob {
        let mut oreq = self.origin_request(ctx, true, None);
        if ctx.accept.is_some() && self.fills.hfp.is_marked(key.digest, self.clock.now()) {
            // A hit-for-pass key (an unknown coding, say): each client's
            // own exchange with the origin.
            super::origin_request::client_accept_encoding(ctx, &mut oreq.headers);
        }
        if !has_leader {
            // Nobody waits for a background refresh: its hints go nowhere.
            oreq.interim = None;
        }
        if let Some(obj) = &stale {
            add_validators(&mut oreq.headers, &obj.headers);
        }
        FillJob {
            route: ctx.route.clone(),
            upstream: ctx.upstream.clone(),
            key: key.clone(),
            path: ctx.uri.path().to_string(),
            oreq: Some(oreq),
            request_headers: ctx.headers.clone(),
            req_cc: req_cc.clone(),
            stale,
            has_leader,
            slice: None,
            hold: None,
            partial: None,
            cluster_tls: ctx.cluster_tls(),
            tier_tls: ctx.tier_tls(),
            route_key: ctx.route_key(),
        }
    }

    /// Fetches for a cacheable request; `stale` is the stored object to revalidate, if any.
    pub(crate) async fn fetch(
        self: &Arc<Self>,
        mut want: Want<'_>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let Want { ctx, key, .. } = want;
        // A known-down origin: answer with the stale copy at once.
        if ctx.upstream.is_down() {
            if let Some(obj) = self.stale_for_error(&want) {
                return Ok(self.serve_stale_on_error(ctx, key, obj, None, "origin-down"));
            }
        }
        let now = self.clock.now();
        let mode = if !ctx.route.coalesce {
            Mode::Alone
        } else if self.fills.hfp.is_marked(key.digest, now) {
            self.counters.inc(&self.counters.hit_for_pass);
            want.fwd = Fwd::Bypass;
            want.hit_for_pass = true;
            Mode::Alone
        } else if let Some(variant) = want.variant {
            Mode::variant(key, variant)
        } else if let Some(super::partial::PartialWant::Forward) = want.partial {
            Self::forward_slot(key, ctx)
        } else {
            Mode::Coalesce
        };
        // A hit-for-pass key goes to the origin directly (see `cluster`).
        if let (Some(c), Some(_), false) = (&self.cluster, ctx.cluster_tls(), want.hit_for_pass) {
            let by = ctx.route_key();
            let by = by.as_deref().unwrap_or(&key.text);
            if let Some(owner) = c.other_owner(by.as_bytes()) {
                super::note_owner(owner);
            }
        }
        self.fill_and_deliver(&want, mode).await
    }

    async fn fill_and_deliver(
        self: &Arc<Self>,
        want: &Want<'_>,
        mode: Mode,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let Want {
            ctx,
            key,
            req_cc,
            fwd,
            ref stale,
            ..
        } = *want;
        let joined = match &mode {
            Mode::Alone => Ok(Join::Leader(self.fills.coalescer.detached())),
            Mode::Coalesce => {
                self.fills
                    .coalescer
                    .try_join(key.digest, &key.text, ctx.route.fill_max_age)
            }
            Mode::Variant(digest, text) => {
                self.fills
                    .coalescer
                    .try_join(*digest, text, ctx.route.fill_max_age)
            }
        };
        let Ok(join) = joined else {
            // The table holds `max_fills`: go to the origin without
            // buffering or storing (a pass streams, holding no fill memory).
            self.counters.inc(&self.counters.fills_refused);
            return self.pass(ctx, None, None).await;
        };
        let (slot, claim) = match join {
            Join::Leader(permit) => {
                let slot = permit.slot().clone();
                let mut job = self.fill_job(ctx, key, req_cc, stale.clone(), true);
                if want.hit_for_pass {
                    // Not through the owner: this node learned (from the
                    // owner's answer, or its own) that the key is a pass.
                    job.cluster_tls = None;
                    job.tier_tls = None;
                }
                if let Some(p) = &want.partial {
                    job = self.with_partial(job, ctx, p);
                }
                self.fills.start(job, permit);
                (slot.clone(), Some(LeaderClaim(slot)))
            }
            Join::Follower(slot) => {
                self.counters.inc(&self.counters.fill_waiters_total);
                (slot, None)
            }
        };
        let leader = claim.is_some();
        let timeout = if leader {
            // The fill itself gives up by then; this only guards against a bug.
            ctx.upstream.cfg.connect_timeout
                + ctx.upstream.cfg.read_timeout * 2
                + Duration::from_secs(1)
        } else {
            ctx.route.coalesce_timeout
        };
        let outcome = match slot.wait(timeout).await {
            Ok(o) => o,
            Err(_) => {
                self.counters.inc(&self.counters.fill_wait_timeouts);
                return self.pass(ctx, None, None).await;
            }
        };
        let mut cs = CacheStatus {
            fwd: Some(fwd),
            collapsed: !leader,
            rule: want.rule.clone(),
            ..Default::default()
        };
        let hfp_detail = want.hit_for_pass.then_some("hit-for-pass");
        if ctx.run.cfg.server.debug_headers {
            cs.key = Some(key.text.clone());
        }
        tracing::debug!(key = %key.text, outcome = outcome.as_str(), leader, "fill outcome");
        match outcome {
            Outcome::Streaming(head) => {
                if ctx.accept.is_some()
                    && !served_as_stored(&head.headers, ctx.accept_field.as_ref())
                {
                    // A coding hoard cannot decode, varying on
                    // `Accept-Encoding`, that this request does not
                    // accept: the origin's own answer to its field.
                    drop(claim);
                    return self.pass(ctx, None, None).await;
                }
                let variant = head.vary.variant(&ctx.headers);
                let forwarded = matches!(want.partial, Some(super::partial::PartialWant::Forward));
                let taken = match &claim {
                    Some(c) => c.take_reader(&head),
                    // A 206 answers the range its leader forwarded (or an
                    // origin sent it unasked): only requests for that range
                    // share it.
                    None if head.status == StatusCode::PARTIAL_CONTENT && !forwarded => None,
                    None if variant == head.variant => {
                        head.busy.reader().map(|r| (r, head.headers.clone()))
                    }
                    None if mode == Mode::Coalesce => {
                        // Another variant of the same key: share a fill with the
                        // requests that want this one.
                        return Box::pin(self.fill_and_deliver(want, Mode::variant(key, variant)))
                            .await;
                    }
                    None => None,
                };
                let Some((reader, headers)) = taken else {
                    return self.alone(want, leader).await;
                };
                cs.fwd_status = Some(head.status.as_u16());
                cs.stored = head.kept;
                cs.ttl = Some(head.ttl);
                cs.detail = hfp_detail;
                // What a hit would give this request: the origin's coding,
                // or the body decoded as it streams (see `crate::body::decode`).
                // A peer's fill gets the origin's bytes: it stores them and
                // decodes for its own clients.
                let (headers, body, decoded) = crate::body::decode::for_client(
                    ctx.route,
                    ctx.accept.filter(|_| !ctx.from_peer),
                    ctx.headers.contains_key(header::RANGE),
                    self.store.max_object(),
                    head.status,
                    headers,
                    ProxyBody::Busy(reader),
                );
                if decoded {
                    self.counters.inc(&self.counters.stream_decoded);
                }
                Ok(self.deliver_fetched(ctx, head.status, headers, body, &cs))
            }
            Outcome::Refreshed(obj, cookies) => {
                if leader {
                    cs.fwd_status = Some(304);
                    cs.stored = true;
                    let mut resp = self.serve_stored(ctx, key, obj, cs, self.clock.now());
                    // The 304 answered this client's request: its cookies are its own.
                    for c in cookies.iter() {
                        resp.headers_mut().append(header::SET_COOKIE, c.clone());
                    }
                    return Ok(resp);
                }
                let now = self.clock.now();
                // The fill this request joined validated the stored
                // response with the origin while the request waited: the
                // validation a client's `no-cache` or `max-age=0` asks for
                // (RFC 9111 §5.2.1.4, §5.2.1.1), so simultaneous ones
                // share one conditional request.
                let validated = CacheControl {
                    no_cache: false,
                    max_age: None,
                    ..req_cc.clone()
                };
                match self.store.lookup(key.digest, &key.text, &ctx.headers).await {
                    Lookup::Hit(o)
                        if matches!(
                            reuse(&o.times, &o.rules, &validated, now),
                            Reuse::Fresh | Reuse::StaleAllowed
                        ) =>
                    {
                        cs.fwd_status = Some(304);
                        Ok(self.serve_stored(ctx, key, o, cs, now))
                    }
                    _ => self.alone(want, leader).await,
                }
            }
            Outcome::Uncacheable(reason, status) => {
                if status.is_server_error() {
                    if let Some(obj) = self.stale_for_error(want) {
                        return Ok(self.serve_stale_on_error(
                            ctx,
                            key,
                            obj,
                            Some(status.as_u16()),
                            "stale-if-error",
                        ));
                    }
                }
                let Some(claim) = claim else {
                    // Released at once: this request goes to the origin itself.
                    return self.alone(want, leader).await;
                };
                let Some(resp) = claim.0.take_handoff() else {
                    return Err(ProxyError::internal("uncacheable response already taken"));
                };
                let (parts, body) = resp.into_parts();
                cs.fwd_status = Some(parts.status.as_u16());
                cs.detail = hfp_detail.or(Some(reason.as_str()));
                Ok(self.deliver_fetched(
                    ctx,
                    parts.status,
                    parts.headers,
                    ProxyBody::Origin(body),
                    &cs,
                ))
            }
            Outcome::OriginError(kind) => {
                if let Some(obj) = self.stale_for_error(want) {
                    return Ok(self.serve_stale_on_error(ctx, key, obj, None, "stale-if-error"));
                }
                Err(ProxyError::origin(
                    kind,
                    format!("fill for {} failed", key.text),
                ))
            }
            Outcome::Dangling => {
                self.counters.inc(&self.counters.fill_dangling);
                self.alone(want, leader).await
            }
        }
    }

    /// The stale copy, when stale-if-error lets it stand in for an origin failure now.
    fn stale_for_error(&self, want: &Want<'_>) -> Option<Arc<StoredObject>> {
        let now = self.clock.now();
        want.stale
            .clone()
            .filter(|o| stale_if_error(&o.times, &o.rules, want.req_cc, now))
    }

    /// A follower that the shared fill could not serve fetches on its own.
    async fn alone(
        self: &Arc<Self>,
        want: &Want<'_>,
        leader: bool,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if leader {
            // The leader's own fill ended without an outcome for it (its task
            // was cancelled or panicked): a bug, not the origin's fault.
            return Err(ProxyError::internal(format!(
                "fill for {} ended without a response for its leader",
                want.key.text
            )));
        }
        Box::pin(self.fill_and_deliver(want, Mode::Alone)).await
    }

    /// Answers the client from a response just fetched (its preconditions were
    /// not forwarded: they are answered here) with its `Cache-Status`.
    fn deliver_fetched(
        &self,
        ctx: &Ctx<'_>,
        status: StatusCode,
        mut headers: HeaderMap,
        body: ProxyBody,
        cs: &CacheStatus,
    ) -> Response<ProxyBody> {
        // What the hits of this object will choose by (see `crate::encode`).
        if ctx.accept.is_some() {
            let len = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX);
            if crate::encode::plan(ctx.route, u64::MAX, status, &headers, len).is_some() {
                crate::encode::vary_on_accept_encoding(&mut headers);
            }
        }
        let mut resp = self.respond(ctx, status, headers, body);
        self.add_cache_status(&mut resp, cs);
        resp
    }

    pub(crate) fn serve_stale_on_error(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        obj: Arc<StoredObject>,
        fwd_status: Option<u16>,
        detail: &'static str,
    ) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.stale_if_error_served);
        let status = CacheStatus {
            hit: true,
            fwd: Some(Fwd::Stale),
            fwd_status,
            detail: Some(detail),
            ..Default::default()
        };
        self.serve_stored(ctx, key, obj, status, self.clock.now())
    }
}
