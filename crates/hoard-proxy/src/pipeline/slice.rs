//! Slice mode: a large object cached as aligned slices, each fetched from
//! the origin with `Range` by a fill of its own (route `slice = "1MiB"`).
//!
//! ## Model
//!
//! Slice `i` of an object of `size`-byte slices holds bytes
//! `i*size .. min((i+1)*size, total)`. It is an ordinary cache object under
//! its own key (the whole object's key text plus ` slice=SIZE:i`), stored as
//! the origin's 206 and filled by an ordinary fill: coalesced, read while
//! written, placed, evicted and revalidated on its own. Nothing records
//! which slices exist; the first slice a request opens tells the object's
//! length and validator ([`Validator`]), and every other slice must agree.
//!
//! ## Request path
//!
//! ```text
//! lookup(whole key) ─hit─► as any stored object (an origin that ignored Range)
//!   └─miss─► open the slice holding the first wanted byte (hit, join its fill, or start it)
//!              ├─206─► head: the slice's fields, whole length ─► respond() ─► SliceBody
//!              ├─200─► the origin ignored Range: this is the whole object (stored whole)
//!              └─other (404, 5xx...)─► relayed as is
//! ```
//!
//! `respond()` answers preconditions, HEAD and `Range` against that head;
//! the [`SliceBody`](super::slice_body::SliceBody) then opens the slices its
//! ranges cover, one at a time, in order, and sends each slice's bytes as
//! they arrive. Opening slice `i` to send it through to its end (a full
//! GET, an open range, playback) also prefetches slices `i+1..=i+N` (route
//! `slice_prefetch`) in the background, at most `cache.max_prefetches` at
//! once over the whole process; a short range inside one slice (a seek
//! probe) prefetches nothing.
//!
//! ## Consistency
//!
//! A slice whose length, `ETag` or `Last-Modified` differs from the head
//! the response was built from is never sent: its head is checked before
//! any of its bytes. The response is aborted (the client sees a reset, not
//! a wrong body), every slice of the object is dropped and the mismatch is
//! counted, so the next request refetches a consistent object instead of
//! failing until the slices expire.

use std::sync::Arc;
use std::time::Duration;

use hoard_policy::cache_control::CacheControl;
use hoard_policy::cache_status::{ttl_secs, CacheStatus, Fwd};
use hoard_policy::conditional::add_validators;
use hoard_policy::key::{CacheKey, Digest};
use hoard_policy::range::{parse_content_range, ByteRange};
use hoard_policy::reuse::{reuse, stale_if_error, Reuse};
use hoard_store::object::StoredObject;
use hoard_store::Lookup;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Uri};

use super::slice_body::SliceBody;
use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::fill::coalesce::{Join, LeaderClaim, Outcome};
use crate::fill::{FillJob, SliceFill};
use crate::sendfile::SendQueue;
use hoard_config::RouteConfig;
use hoard_origin::error::{ErrorKind, ProxyError};
use hoard_origin::{OriginRequest, Upstream};

/// What a sliced response needs to open slices after the handler returned.
#[derive(Debug)]
pub(crate) struct SliceCtx {
    pipeline: Arc<Pipeline>,
    route: Arc<RouteConfig>,
    upstream: Arc<Upstream>,
    /// The whole object's key.
    whole: CacheKey,
    path: String,
    uri: Uri,
    /// The fill request's fields, without `Range`.
    fill_headers: HeaderMap,
    /// The client's fields (they select variants).
    headers: HeaderMap,
    req_cc: CacheControl,
    send: Option<Arc<SendQueue>>,
    /// Slice size in bytes.
    pub size: u64,
    /// See [`crate::fill::FillJob::cluster_tls`].
    cluster_tls: Option<bool>,
    /// See [`crate::fill::FillJob::tier_tls`].
    tier_tls: Option<bool>,
    /// Asked by another cluster member for one slice: it prefetches (and
    /// routes each slice to its owner) itself.
    from_peer: bool,
    /// The route's `cluster_key` for the whole object, if it sets one.
    route_key: Option<Arc<str>>,
}

/// An open slice (or, for the first one, whatever the origin answered).
#[derive(Debug)]
pub(crate) struct SliceSource {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: ProxyBody,
    /// The stored slice, when it came from the cache.
    pub stored: Option<Arc<StoredObject>>,
    /// It came from a fill another request started.
    pub collapsed: bool,
    /// Freshness left, in seconds (for `Cache-Status`).
    pub ttl: Option<i64>,
}

impl SliceSource {
    /// An answer streamed from the origin, not stored.
    fn origin(resp: http::Response<hoard_origin::OriginBody>) -> SliceSource {
        let (parts, body) = resp.into_parts();
        SliceSource {
            status: parts.status,
            headers: parts.headers,
            body: ProxyBody::Origin(body),
            stored: None,
            collapsed: false,
            ttl: None,
        }
    }

    fn stored(obj: Arc<StoredObject>, cx: &SliceCtx) -> SliceSource {
        SliceSource {
            status: obj.status,
            headers: obj.headers.clone(),
            body: ProxyBody::stored(obj.clone(), cx.send.as_ref()),
            ttl: Some(ttl_secs(obj.times.ttl_millis(cx.pipeline.clock.now()))),
            stored: Some(obj),
            collapsed: false,
        }
    }
}

/// What every slice of one object agrees on: the complete length and the
/// validators of the first slice opened.
#[derive(Debug, Clone)]
pub(crate) struct Validator {
    pub total: u64,
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
}

impl Validator {
    /// From a slice's 206 fields; `None` without a complete length.
    fn of(headers: &HeaderMap) -> Option<Validator> {
        let (_, total) = content_range(headers)?;
        Some(Validator {
            total,
            etag: headers.get(header::ETAG).cloned(),
            last_modified: headers.get(header::LAST_MODIFIED).cloned(),
        })
    }

    /// Whether a change of the object would show: a strong `ETag` or a
    /// `Last-Modified` (with the length). Without one, slices of two
    /// versions of the same length could not be told apart.
    fn can_tell_versions(&self) -> bool {
        let strong = self
            .etag
            .as_ref()
            .is_some_and(|e| !e.as_bytes().starts_with(b"W/"));
        strong || self.last_modified.is_some()
    }

    /// Whether `src` is exactly bytes `r` of this object (a direct fetch).
    pub fn matches_part(&self, r: ByteRange, src: &SliceSource) -> bool {
        src.status == StatusCode::PARTIAL_CONTENT
            && content_range(&src.headers) == Some((r, self.total))
            && src.headers.get(header::ETAG) == self.etag.as_ref()
            && src.headers.get(header::LAST_MODIFIED) == self.last_modified.as_ref()
    }

    /// Whether `src` is another version's slice `idx` (a 206 whose length
    /// or validators differ), rather than an error or an answer that is not
    /// a slice.
    pub fn changed(&self, idx: u64, size: u64, src: &SliceSource) -> bool {
        src.status == StatusCode::PARTIAL_CONTENT && !self.matches(idx, size, src)
    }

    /// The bytes slice `idx` must hold.
    pub fn slice_range(&self, idx: u64, size: u64) -> ByteRange {
        let start = idx.saturating_mul(size);
        ByteRange {
            start,
            end: start.saturating_add(size).min(self.total),
        }
    }

    /// Whether `src` is slice `idx` of this object: a 206 of exactly its
    /// bytes, of the same length, with the same validators.
    pub fn matches(&self, idx: u64, size: u64, src: &SliceSource) -> bool {
        src.status == StatusCode::PARTIAL_CONTENT
            && content_range(&src.headers) == Some((self.slice_range(idx, size), self.total))
            && src.headers.get(header::ETAG) == self.etag.as_ref()
            && src.headers.get(header::LAST_MODIFIED) == self.last_modified.as_ref()
    }
}

fn content_range(headers: &HeaderMap) -> Option<(ByteRange, u64)> {
    headers
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range)
}

/// The first byte a request wants, as far as the raw `Range` field tells
/// (0 for none, a suffix or anything unreadable): the slice to open first.
fn first_wanted(method: &Method, headers: &HeaderMap) -> u64 {
    if method != Method::GET {
        return 0;
    }
    headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().split_once('-'))
        .and_then(|(a, _)| a.trim().parse().ok())
        .unwrap_or(0)
}

impl SliceCtx {
    /// The key of slice `idx`.
    pub fn key(&self, idx: u64) -> CacheKey {
        let text = format!("{} slice={}:{idx}", self.whole.text, self.size);
        CacheKey {
            digest: Digest::of(text.as_bytes()),
            text,
        }
    }

    /// The fill of slice `idx`: a GET with `Range` for its bytes.
    fn job(
        &self,
        idx: u64,
        key: CacheKey,
        stale: Option<Arc<StoredObject>>,
        has_leader: bool,
    ) -> FillJob {
        // Saturating: a client may ask for a byte near u64::MAX.
        let start = idx.saturating_mul(self.size);
        let end = start.saturating_add(self.size);
        let mut headers = self.fill_headers.clone();
        headers.insert(
            header::RANGE,
            HeaderValue::from_str(&format!("bytes={start}-{}", end - 1))
                .expect("invariant: ASCII digits"),
        );
        if let Some(obj) = &stale {
            add_validators(&mut headers, &obj.headers);
        }
        FillJob {
            route: self.route.clone(),
            upstream: self.upstream.clone(),
            key,
            path: self.path.clone(),
            oreq: Some(OriginRequest {
                method: Method::GET,
                uri: self.uri.clone(),
                headers,
                body: None,
                interim: None,
                tries: None,
            }),
            request_headers: self.headers.clone(),
            req_cc: self.req_cc.clone(),
            stale,
            has_leader,
            slice: Some(SliceFill {
                start,
                end,
                whole: self.whole.clone(),
            }),
            hold: None,
            cluster_tls: self.cluster_tls,
            tier_tls: self.tier_tls,
            // Each slice of the object on an owner of its own.
            route_key: self
                .route_key
                .as_ref()
                .map(|r| Arc::from(format!("{r} slice={}:{idx}", self.size))),
            partial: None,
        }
    }

    /// The slice stored under `key`, if it may be served as it is now.
    async fn fresh(&self, key: &CacheKey) -> Option<Arc<StoredObject>> {
        let p = &self.pipeline;
        match p.store.lookup(key.digest, &key.text, &self.headers).await {
            Lookup::Hit(obj)
                if matches!(
                    reuse(&obj.times, &obj.rules, &self.req_cc, p.clock.now()),
                    Reuse::Fresh | Reuse::StaleAllowed
                ) =>
            {
                Some(obj)
            }
            _ => None,
        }
    }

    /// For an `only-if-cached` request: every slice its response needs
    /// (the span of its ranges, or the whole object; `first` is open
    /// already) is stored and usable, else the 504 error. The body then
    /// never has to fetch.
    async fn all_stored(
        &self,
        ctx: &Ctx<'_>,
        head: &HeaderMap,
        total: u64,
        first: u64,
    ) -> Result<(), ProxyError> {
        if ctx.method == Method::HEAD || total == 0 {
            return Ok(());
        }
        let (from, to) = match hoard_policy::range::decide(
            &ctx.method,
            &ctx.headers,
            StatusCode::OK,
            head,
            Some(total),
        ) {
            hoard_policy::range::RangeDecision::Partial(rs) => (
                rs.first().map_or(0, |r| r.start),
                rs.last().map_or(total, |r| r.end),
            ),
            hoard_policy::range::RangeDecision::Unsatisfiable => return Ok(()),
            hoard_policy::range::RangeDecision::Full => (0, total),
        };
        for idx in from / self.size..=(to - 1) / self.size {
            if idx != first && self.fresh(&self.key(idx)).await.is_none() {
                let p = &self.pipeline;
                p.counters.inc(&p.counters.only_if_cached_miss);
                return Err(ProxyError::client(
                    ErrorKind::OnlyIfCached,
                    format!("only-if-cached and slice {idx} not stored"),
                ));
            }
        }
        Ok(())
    }

    /// Slice `idx`: stored, from the fill in flight, or from a fill this
    /// starts. Errors when no fill could answer.
    pub async fn open(self: &Arc<Self>, idx: u64) -> Result<SliceSource, ProxyError> {
        let p = &self.pipeline;
        let key = self.key(idx);
        let mut alone = !self.route.coalesce;
        for _ in 0..3 {
            let mut stale = None;
            if let Lookup::Hit(obj) = p.store.lookup(key.digest, &key.text, &self.headers).await {
                match reuse(&obj.times, &obj.rules, &self.req_cc, p.clock.now()) {
                    Reuse::Fresh | Reuse::StaleAllowed => {
                        return Ok(SliceSource::stored(obj, self))
                    }
                    Reuse::StaleWhileRevalidate => {
                        let job = self.job(idx, key.clone(), Some(obj.clone()), false);
                        if p.fills.spawn_refresh(job, self.route.fill_max_age) {
                            p.counters.inc(&p.counters.slice_fills);
                        }
                        return Ok(SliceSource::stored(obj, self));
                    }
                    Reuse::Revalidate(_) => stale = Some(obj),
                }
            }
            if self.req_cc.only_if_cached {
                // RFC 9111 §5.2.1.7: stored slices only, never the origin.
                p.counters.inc(&p.counters.only_if_cached_miss);
                return Err(ProxyError::client(
                    ErrorKind::OnlyIfCached,
                    format!("only-if-cached and slice {idx} not stored"),
                ));
            }
            let join = if alone {
                Join::Leader(p.fills.coalescer.detached())
            } else {
                match p
                    .fills
                    .coalescer
                    .try_join(key.digest, &key.text, self.route.fill_max_age)
                {
                    Ok(join) => join,
                    Err(_) => {
                        p.counters.inc(&p.counters.fills_refused);
                        return Err(ProxyError::internal_busy(
                            "in-flight table full (cache.max_fills)",
                        ));
                    }
                }
            };
            let (slot, claim) = match join {
                Join::Leader(mut permit) => {
                    // A fill that ended between the lookup and the join.
                    if stale.is_none() {
                        if let Some(obj) = self.fresh(&key).await {
                            permit.publish(Outcome::Refreshed(obj.clone(), Arc::default()));
                            return Ok(SliceSource::stored(obj, self));
                        }
                    }
                    let slot = permit.slot().clone();
                    p.counters.inc(&p.counters.slice_fills);
                    p.fills
                        .start(self.job(idx, key.clone(), stale.clone(), true), permit);
                    (slot.clone(), Some(LeaderClaim(slot)))
                }
                Join::Follower(slot) => {
                    p.counters.inc(&p.counters.fill_waiters_total);
                    (slot, None)
                }
            };
            let cfg = &self.upstream.cfg;
            let timeout = if claim.is_some() {
                cfg.connect_timeout + cfg.read_timeout * 2 + Duration::from_secs(1)
            } else {
                self.route.coalesce_timeout
            };
            let Ok(outcome) = slot.wait(timeout).await else {
                p.counters.inc(&p.counters.fill_wait_timeouts);
                alone = true;
                continue;
            };
            let usable_stale = || {
                stale
                    .clone()
                    .filter(|o| stale_if_error(&o.times, &o.rules, &self.req_cc, p.clock.now()))
            };
            match outcome {
                Outcome::Streaming(head) => {
                    let taken = match &claim {
                        Some(c) => c.take_reader(&head),
                        // Another variant's bytes are not this request's.
                        None if head.vary.variant(&self.headers) != head.variant => None,
                        None => head.busy.reader().map(|r| (r, head.headers.clone())),
                    };
                    let Some((reader, headers)) = taken else {
                        alone = true;
                        continue;
                    };
                    return Ok(SliceSource {
                        status: head.status,
                        headers,
                        body: ProxyBody::Busy(reader),
                        stored: None,
                        collapsed: claim.is_none(),
                        ttl: Some(head.ttl),
                    });
                }
                Outcome::Refreshed(obj, _) if claim.is_some() => {
                    return Ok(SliceSource::stored(obj, self))
                }
                // Look up the refreshed slice.
                Outcome::Refreshed(..) => {}
                Outcome::Uncacheable(_, status) => {
                    if status.is_server_error() {
                        if let Some(obj) = usable_stale() {
                            p.counters.inc(&p.counters.stale_if_error_served);
                            return Ok(SliceSource::stored(obj, self));
                        }
                    }
                    let Some(c) = &claim else {
                        alone = true;
                        continue;
                    };
                    let resp = c.0.take_handoff().ok_or_else(|| {
                        ProxyError::origin(ErrorKind::BadResponse, "slice response already taken")
                    })?;
                    return Ok(SliceSource::origin(resp));
                }
                Outcome::OriginError(kind) => {
                    if let Some(obj) = usable_stale() {
                        p.counters.inc(&p.counters.stale_if_error_served);
                        return Ok(SliceSource::stored(obj, self));
                    }
                    return Err(ProxyError::origin(
                        kind,
                        format!("fill of {} failed", key.text),
                    ));
                }
                Outcome::Dangling => {
                    p.counters.inc(&p.counters.fill_dangling);
                    alone = true;
                }
            }
        }
        Err(ProxyError::origin(
            ErrorKind::BadResponse,
            format!("no fill of {} answered", key.text),
        ))
    }

    /// Bytes `r` of the object straight from the origin, not stored: for a
    /// short range far ahead of its slice's fill (see `SliceBody`).
    pub async fn direct(self: Arc<Self>, r: ByteRange) -> Result<SliceSource, ProxyError> {
        let p = &self.pipeline;
        p.counters.inc(&p.counters.slice_direct_fetches);
        let mut headers = self.fill_headers.clone();
        headers.insert(
            header::RANGE,
            HeaderValue::from_str(&format!("bytes={}-{}", r.start, r.end - 1))
                .expect("invariant: ASCII digits"),
        );
        let resp = self
            .upstream
            .send(OriginRequest {
                method: Method::GET,
                uri: self.uri.clone(),
                headers,
                body: None,
                interim: None,
                tries: None,
            })
            .await?;
        let (mut parts, body) = resp.into_parts();
        hoard_policy::headers::strip_hop_by_hop(&mut parts.headers);
        Ok(SliceSource::origin(http::Response::from_parts(parts, body)))
    }

    /// The longest piece fetched alone (route `slice_direct_max`).
    pub fn direct_max(&self) -> u64 {
        self.route.slice_direct_max
    }

    /// Starts fills of the `slice_prefetch` slices after `idx` that are
    /// neither stored fresh nor being filled, within the process-wide bound.
    pub fn prefetch(self: &Arc<Self>, idx: u64, total: u64) {
        if self.req_cc.only_if_cached || self.from_peer {
            return;
        }
        let p = &self.pipeline;
        let last = total.div_ceil(self.size).saturating_sub(1);
        let ahead = u64::from(self.route.slice_prefetch);
        for j in (idx + 1)..=idx.saturating_add(ahead).min(last) {
            let Ok(hold) = p.prefetches.clone().try_acquire_owned() else {
                return;
            };
            let cx = self.clone();
            tokio::spawn(async move {
                let p = &cx.pipeline;
                let key = cx.key(j);
                let stale = match p.store.lookup(key.digest, &key.text, &cx.headers).await {
                    Lookup::Hit(obj) => {
                        match reuse(&obj.times, &obj.rules, &cx.req_cc, p.clock.now()) {
                            Reuse::Revalidate(_) | Reuse::StaleWhileRevalidate => Some(obj),
                            Reuse::Fresh | Reuse::StaleAllowed => return,
                        }
                    }
                    _ => None,
                };
                let Some(mut permit) =
                    p.fills
                        .coalescer
                        .try_lead(key.digest, &key.text, cx.route.fill_max_age)
                else {
                    return;
                };
                // A fill that ended between the lookup and the lead.
                if stale.is_none() {
                    if let Some(obj) = cx.fresh(&key).await {
                        permit.publish(Outcome::Refreshed(obj, Arc::default()));
                        return;
                    }
                }
                let mut job = cx.job(j, key, stale, false);
                job.hold = Some(hold);
                p.counters.inc(&p.counters.slice_prefetches);
                p.counters.inc(&p.counters.slice_fills);
                p.fills.start(job, permit);
            });
        }
    }

    /// Drops every slice of an object of `total` bytes: one of them no
    /// longer matches the others.
    pub fn heal(&self, total: u64, idx: u64) {
        let p = &self.pipeline;
        p.counters.inc(&p.counters.slice_validator_mismatches);
        let mut dropped = 0;
        for j in 0..total.div_ceil(self.size) {
            dropped += p.store.remove_all(self.key(j).digest);
        }
        tracing::info!(
            key = %self.whole.text,
            slice = idx,
            dropped,
            "slice differs from the object's other slices (changed at the origin); all its slices dropped"
        );
    }
}

impl Pipeline {
    /// A cacheable request on a slicing route whose whole object is not
    /// stored. See the module docs. `None`: the object cannot be sliced
    /// (empty: the origin finds no byte to send; or no strong `ETag` nor
    /// `Last-Modified` to keep slices of one version): fetch it whole.
    pub(crate) async fn sliced(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        req_cc: &CacheControl,
        size: u64,
    ) -> Result<Option<Response<ProxyBody>>, ProxyError> {
        let fill = self.origin_request(ctx, true, None);
        let cx = Arc::new(SliceCtx {
            pipeline: self.clone(),
            route: ctx.route.clone(),
            upstream: ctx.upstream.clone(),
            whole: key.clone(),
            path: ctx.uri.path().to_string(),
            uri: fill.uri,
            fill_headers: fill.headers,
            headers: ctx.headers.clone(),
            req_cc: req_cc.clone(),
            send: ctx.send.clone(),
            size,
            cluster_tls: ctx.cluster_tls(),
            tier_tls: ctx.tier_tls(),
            from_peer: ctx.from_peer,
            route_key: ctx.route_key(),
        });
        let mut idx = first_wanted(&ctx.method, &ctx.headers) / size;
        let (src, validator) = loop {
            let src = cx.open(idx).await?;
            match src.status {
                StatusCode::PARTIAL_CONTENT => match Validator::of(&src.headers) {
                    Some(v) if v.matches(idx, size, &src) && v.can_tell_versions() => {
                        break (src, v)
                    }
                    // No strong validator: fetched and stored whole.
                    Some(v) if v.matches(idx, size, &src) => return Ok(None),
                    _ => {
                        return Err(ProxyError::origin(
                            ErrorKind::BadResponse,
                            format!("slice {idx} of {}: unexpected Content-Range", key.text),
                        ))
                    }
                },
                // Wanted bytes past the end: the first slice tells the length.
                StatusCode::RANGE_NOT_SATISFIABLE if idx > 0 => idx = 0,
                StatusCode::RANGE_NOT_SATISFIABLE => return Ok(None),
                // 200: the origin ignored Range (the whole object, stored
                // whole); else an error or redirect: relayed as is.
                _ => return Ok(Some(self.deliver_slice_source(ctx, key, src))),
            }
        };
        let mut headers = src.headers.clone();
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(validator.total));
        if req_cc.only_if_cached {
            cx.all_stored(ctx, &headers, validator.total, idx).await?;
        }
        let c = &self.counters;
        c.inc(if src.stored.is_some() {
            &c.cache_hit
        } else {
            &c.cache_miss
        });
        if src.stored.as_ref().is_some_and(|o| o.near) {
            c.inc(&c.cluster_near_hits);
        }
        let now = self.clock.now();
        let age = src.stored.as_ref().map(|o| o.times.current_age(now));
        let cs = self.slice_status(key, &src);
        let body = SliceBody::new(cx, validator, idx, src);
        let mut resp = self.respond(
            ctx,
            StatusCode::OK,
            headers,
            ProxyBody::Sliced(Box::new(body)),
        );
        if let Some(age) = age {
            resp.headers_mut()
                .insert(header::AGE, super::hit::age_value(age.as_secs()));
        }
        self.add_cache_status(&mut resp, &cs);
        Ok(Some(resp))
    }

    /// `Cache-Status` of a response whose head came from `src`.
    fn slice_status(&self, key: &CacheKey, src: &SliceSource) -> CacheStatus {
        let hit = src.stored.is_some();
        CacheStatus {
            hit,
            fwd: (!hit).then_some(Fwd::UriMiss),
            fwd_status: (!hit).then_some(src.status.as_u16()),
            stored: !hit && matches!(src.body, ProxyBody::Busy(_)),
            collapsed: src.collapsed,
            ttl: src.ttl,
            key: self
                .run()
                .cfg
                .server
                .debug_headers
                .then(|| key.text.clone()),
            detail: Some("slice"),
            rule: None,
        }
    }

    /// The first slice's answer when it is not a slice: the whole object
    /// (the origin ignored `Range`), or an error or redirect.
    fn deliver_slice_source(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        src: SliceSource,
    ) -> Response<ProxyBody> {
        let cs = self.slice_status(key, &src);
        let c = &self.counters;
        c.inc(if cs.hit { &c.cache_hit } else { &c.cache_miss });
        let age = src
            .stored
            .as_ref()
            .map(|o| o.times.current_age(self.clock.now()));
        let mut resp = self.respond(ctx, src.status, src.headers, src.body);
        if let Some(age) = age {
            resp.headers_mut()
                .insert(header::AGE, super::hit::age_value(age.as_secs()));
        }
        self.add_cache_status(&mut resp, &cs);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_wanted_byte_from_the_raw_range() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::RANGE, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(
            first_wanted(&Method::GET, &h("bytes=5000000-5000009")),
            5_000_000
        );
        assert_eq!(first_wanted(&Method::GET, &h("bytes=700-, 0-1")), 700);
        assert_eq!(first_wanted(&Method::GET, &h("bytes=-500")), 0);
        assert_eq!(first_wanted(&Method::GET, &h("items=5-")), 0);
        assert_eq!(first_wanted(&Method::HEAD, &h("bytes=5-")), 0);
        assert_eq!(first_wanted(&Method::GET, &HeaderMap::new()), 0);
    }
}
