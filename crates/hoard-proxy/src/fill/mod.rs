//! The fill engine: one origin fetch per key, shared by every request that
//! wants it, owned by the cache rather than by any client.
//!
//! ## Model
//!
//! A fill is a task of its own ([`Pipeline::run_fill`]). It sends the origin
//! request, publishes one [`coalesce::Outcome`] into its slot, and for a
//! storable response reads the body into a `BusyBody` that every waiter
//! streams from byte 0 at its own pace. When the body is complete the object
//! is stored, the slot leaves the in-flight table, and only then do readers
//! see the end of the body.
//!
//! ## Cancellation
//!
//! * A client that goes away (including the one whose request started the
//!   fill) only drops its own reader; the fill goes on for the others and for
//!   the cache.
//! * A fill task that is cancelled or panics drops its `FillPermit` (waiters
//!   see `Dangling` and go to the origin themselves) and its `BusyWriter`
//!   (readers see an error, never a silent end).
//! * The origin failing mid-body aborts the busy body: every reader's
//!   response is aborted (connection closed / h2 stream reset), nothing is
//!   stored.
//!
//! ## Background refresh
//!
//! Stale-while-revalidate starts a fill that nobody waits for
//! ([`Pipeline::spawn_refresh`]): the stale copy is served at once and the
//! refresh never delays any response, including later ones on the same
//! keep-alive connection.

pub mod coalesce;
pub mod hfp;

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::cache_status::ttl_secs;
use hoard_policy::conditional::merge_304;
use hoard_policy::facts::ResponseFacts;
use hoard_policy::freshness::{freshness_lifetime, StoredTimes};
use hoard_policy::key::CacheKey;
use hoard_policy::reuse::StoredRules;
use hoard_policy::storable::{storability, NotStorable, RequestFacts};
use hoard_policy::vary::VaryNames;
use hoard_store::busy::{BusyBody, BusyWriter, FillError};
use hoard_store::disk::writer::DiskWriter;
use hoard_store::object::{ObjectBody, StoredObject};
use hoard_store::InsertError;
use http::header::{self, HeaderMap, HeaderValue};
use http::{StatusCode, Version};
use http_body_util::BodyExt;

use crate::pipeline::Pipeline;
use crate::upstream::{OriginBody, OriginBodyError, OriginRequest};
use coalesce::{FillHead, FillPermit, Outcome};

/// Everything a fill needs, owned: it outlives the request that started it.
#[derive(Debug)]
pub struct FillJob {
    /// Site index in the configuration.
    pub site: usize,
    /// Route index in the site.
    pub route: usize,
    /// The primary key.
    pub key: CacheKey,
    /// The request path (for placement rules).
    pub path: String,
    /// The request to send (GET; validators added when revalidating); taken when sent.
    pub oreq: Option<OriginRequest>,
    /// The leading request's fields (they select the stored variant).
    pub request_headers: HeaderMap,
    /// The leading request's directives.
    pub req_cc: CacheControl,
    /// The stored object being revalidated, if any.
    pub stale: Option<Arc<StoredObject>>,
    /// A request waits for this fill as its leader (false for background refreshes).
    pub has_leader: bool,
}

impl Pipeline {
    /// Runs a fill to its end. See the module docs.
    pub(crate) async fn run_fill(self: Arc<Self>, mut job: FillJob, mut permit: FillPermit) {
        self.counters.inc(&self.counters.fills_started);
        let route = &self.cfg.sites[job.site].routes[job.route];
        let upstream = &self.upstreams[route.upstream];
        let request_time = self.clock.now();
        let oreq = job.oreq.take().expect("invariant: a fill job is run once");
        let resp = match upstream.send(oreq).await {
            Ok(r) => r,
            Err(e) => {
                if job.stale.is_some() {
                    self.counters.inc(&self.counters.revalidation_failed);
                }
                tracing::info!(key = %job.key.text, error = %e, "fill failed before a response");
                permit.publish(Outcome::OriginError(e.kind));
                return;
            }
        };
        let response_time = self.clock.now();
        let status = resp.status();
        if let Some(stale) = &job.stale {
            if status == StatusCode::NOT_MODIFIED {
                let fresh = self
                    .refresh_from_304(&job, stale, resp.headers(), request_time, response_time)
                    .await;
                let cookies = resp
                    .headers()
                    .get_all(header::SET_COOKIE)
                    .iter()
                    .cloned()
                    .collect();
                permit.publish(Outcome::Refreshed(fresh, Arc::new(cookies)));
                return;
            }
            // RFC 9111 §4.3.3: a 5xx to a revalidation may be treated as no
            // answer. The stored copy stays (for stale-if-error and later
            // refreshes) and the key is not marked hit-for-pass.
            if status.is_server_error() {
                self.counters.inc(&self.counters.revalidation_failed);
                let (mut parts, body) = resp.into_parts();
                self.forwardable(&mut parts.headers, response_time);
                permit.publish_uncacheable(
                    NotStorable::ServerError,
                    http::Response::from_parts(parts, body),
                );
                return;
            }
        }
        let (mut parts, body) = resp.into_parts();
        self.forwardable(&mut parts.headers, response_time);
        let policy = &route.policy;
        let facts = ResponseFacts::read(status.as_u16(), &parts.headers, policy);
        let req_facts = RequestFacts {
            cacheable_method: true,
            cc: &job.req_cc,
            authorization: job.request_headers.contains_key(header::AUTHORIZATION),
        };
        let content_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let max_object = self.store.max_object();
        let decision =
            storability(req_facts, &facts, policy, response_time).and_then(
                |ok| match content_length {
                    Some(len) if len > max_object => Err(NotStorable::TooLarge),
                    _ => Ok(ok),
                },
            );
        let (lifetime, source) = match decision {
            Ok(d) => d,
            Err(reason) => {
                self.counters.inc(&self.counters.not_storable);
                if reason.is_response_property() {
                    if job.stale.is_some() {
                        // The stored copy was replaced by a response that may not
                        // be stored: keeping the old one would keep serving it. A
                        // reason of the request's own (no-store, Authorization)
                        // leaves it alone: one client cannot purge it for all.
                        self.store.remove_all(job.key.digest);
                    }
                    if !route.hit_for_pass.is_zero() {
                        self.hfp
                            .mark(job.key.digest, response_time + route.hit_for_pass);
                        self.counters.inc(&self.counters.hit_for_pass_marks);
                    }
                }
                tracing::debug!(key = %job.key.text, reason = reason.as_str(), "not storable");
                permit.publish_uncacheable(reason, http::Response::from_parts(parts, body));
                return;
            }
        };
        self.hfp.clear(job.key.digest);
        let times = StoredTimes {
            request_time,
            response_time,
            date: facts.date.unwrap_or(response_time),
            age_value: facts.age,
            lifetime,
        };
        let rules = StoredRules::new(
            &facts.cc,
            policy.stale_while_revalidate,
            policy.stale_if_error,
        );
        let vary = if policy.ignore_vary {
            VaryNames::default()
        } else {
            VaryNames::from_response(&parts.headers)
        };
        let mut stored_headers = parts.headers.clone();
        hoard_policy::headers::strip_never_stored(&mut stored_headers);
        let (busy, writer) = BusyBody::new();
        // The leader's reader exists before any byte arrives, so it starts at
        // byte 0 even if history is released early (a body too large to store).
        {
            let slot = permit.slot().clone();
            let leader_gone = slot.leader_gone.lock();
            let leader_reader = (job.has_leader && !*leader_gone).then(|| {
                busy.reader()
                    .expect("invariant: a new busy body accepts readers")
            });
            let mut shared_headers = stored_headers.clone();
            // Until the body is complete its length is the origin's to say.
            shared_headers.remove(header::CONTENT_LENGTH);
            if let Some(len) = parts.headers.get(header::CONTENT_LENGTH) {
                shared_headers.insert(header::CONTENT_LENGTH, len.clone());
            }
            let head = Arc::new(FillHead {
                status,
                headers: shared_headers,
                leader_headers: parking_lot::Mutex::new(Some(parts.headers)),
                busy,
                leader_reader: parking_lot::Mutex::new(leader_reader),
                variant: vary.variant(&job.request_headers),
                vary: vary.clone(),
                ttl: ttl_secs(times.ttl_millis(response_time)),
            });
            permit.publish(Outcome::Streaming(head));
        }
        // With disk zones the body is written through to the zone its
        // placement chose while readers stream it.
        let mut disk = match self.cfg.cache.place(
            route.zone,
            &job.path,
            stored_headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            content_length,
        ) {
            Some(zone) => {
                let hint = hoard_store::store::head_of(&StoredObject::new(
                    job.key.text.clone(),
                    vary.clone(),
                    status,
                    stored_headers.clone(),
                    times,
                    source,
                    rules,
                    ObjectBody::default(),
                ))
                .encode()
                .len();
                let variant = vary.variant(&job.request_headers);
                self.store
                    .disk_writer(zone, job.key.digest, variant, content_length, hint)
                    .await
            }
            None => None,
        };
        let outcome = read_body(
            body,
            &writer,
            &mut disk,
            max_object,
            upstream.cfg.read_timeout,
            &mut permit,
        )
        .await;
        match outcome {
            Ok(true) => {
                self.counters.inc(&self.counters.fills_completed);
                stored_headers.insert(header::CONTENT_LENGTH, HeaderValue::from(writer.len()));
                let obj = |body| {
                    StoredObject::new(
                        job.key.text.clone(),
                        vary.clone(),
                        status,
                        stored_headers.clone(),
                        times,
                        source,
                        rules,
                        body,
                    )
                };
                // Store, leave the table, and only then let readers see the end.
                let on_disk = match disk.take() {
                    Some(w) => {
                        let head = hoard_store::store::head_of(&obj(ObjectBody::default()));
                        match self.store.finish_disk(w, job.key.digest, &head).await {
                            Ok(()) => true,
                            Err(why) => {
                                tracing::info!(key = %job.key.text, why = why.as_str(), "disk copy given up");
                                false
                            }
                        }
                    }
                    None => false,
                };
                if on_disk {
                    self.counters.inc(&self.counters.objects_stored);
                } else if let Some(chunks) = writer.chunks() {
                    let o = obj(ObjectBody::from_chunks(compact(chunks)));
                    match self
                        .store
                        .insert(job.key.digest, &job.request_headers, Arc::new(o))
                    {
                        Ok(()) => self.counters.inc(&self.counters.objects_stored),
                        Err(InsertError::TooLarge) => {
                            self.counters.inc(&self.counters.objects_too_large)
                        }
                        // No memory tier and no disk copy: not stored.
                        Err(InsertError::NoTier) => {}
                    }
                }
                permit.done();
                writer.finish();
            }
            Ok(false) => {
                self.counters.inc(&self.counters.fills_completed);
                self.counters.inc(&self.counters.objects_too_large);
                permit.done();
                writer.finish();
            }
            Err(e) => {
                self.counters.inc(&self.counters.fills_aborted);
                self.counters.inc(&self.counters.origin_body_errors);
                tracing::info!(key = %job.key.text, error = e.as_str(), "fill aborted; nothing stored");
                permit.done();
                writer.abort(e);
            }
        }
    }

    /// Makes an origin response's fields fit to forward and store:
    /// hop-by-hop fields removed, `Date` added when missing (RFC 9110
    /// §6.6.1: a recipient with a clock dates what it forwards), `Via` added.
    fn forwardable(&self, headers: &mut HeaderMap, response_time: SystemTime) {
        hoard_policy::headers::strip_hop_by_hop(headers);
        if !headers.contains_key(header::DATE) {
            if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                headers.insert(header::DATE, v);
            }
        }
        self.add_via(headers, Version::HTTP_11);
    }

    /// Starts a background refresh of a stale object unless a fill for its
    /// key is already in flight. Returns true when one was started.
    pub(crate) fn spawn_refresh(
        self: &Arc<Self>,
        job: FillJob,
        max_age: std::time::Duration,
    ) -> bool {
        let Some(permit) = self
            .coalescer
            .try_lead(job.key.digest, &job.key.text, max_age)
        else {
            return false;
        };
        self.counters.inc(&self.counters.background_refreshes);
        tokio::spawn(self.clone().run_fill(job, permit));
        true
    }

    /// A 304 answered a revalidation: merge its fields into the stored
    /// response (RFC 9111 §4.3.4) and store the refreshed copy.
    async fn refresh_from_304(
        &self,
        job: &FillJob,
        stale: &Arc<StoredObject>,
        not_modified: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Arc<StoredObject> {
        self.counters.inc(&self.counters.cache_revalidated_304);
        let mut headers = stale.headers.clone();
        let mut update = not_modified.clone();
        hoard_policy::headers::strip_hop_by_hop(&mut update);
        update.remove(header::VIA);
        hoard_policy::headers::strip_never_stored(&mut update);
        // The 304 is the new response: its Date (or its arrival) and its Age
        // (or none) replace the old ones, or the old age would count twice.
        if !update.contains_key(header::DATE) {
            if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                update.insert(header::DATE, v);
            }
        }
        if !update.contains_key(header::AGE) {
            headers.remove(header::AGE);
        }
        merge_304(&mut headers, &update);
        let policy = &self.cfg.sites[job.site].routes[job.route].policy;
        let facts = ResponseFacts::read(stale.status.as_u16(), &headers, policy);
        let (lifetime, source) = freshness_lifetime(&facts, policy, response_time)
            .unwrap_or((std::time::Duration::ZERO, stale.lifetime_source));
        let times = StoredTimes {
            request_time,
            response_time,
            date: facts.date.unwrap_or(response_time),
            age_value: facts.age,
            lifetime,
        };
        let rules = StoredRules::new(
            &facts.cc,
            policy.stale_while_revalidate,
            policy.stale_if_error,
        );
        let fresh = Arc::new(stale.with_headers(headers, times, source, rules));
        if facts.cc.no_store || facts.cc.private {
            self.store.remove_all(job.key.digest);
        } else {
            self.store
                .update(job.key.digest, &job.request_headers, stale, fresh.clone())
                .await;
        }
        fresh
    }
}

/// Reads the origin body into the busy body. `Ok(true)`: complete and
/// storable; `Ok(false)`: complete but too large to store (history released
/// and the slot left the table as soon as that was known).
async fn read_body(
    mut body: OriginBody,
    writer: &BusyWriter,
    disk: &mut Option<DiskWriter>,
    max_object: u64,
    stall_timeout: std::time::Duration,
    permit: &mut FillPermit,
) -> Result<bool, FillError> {
    /// Unread bytes a pass-through fill may get ahead of its fastest reader.
    const WINDOW: u64 = 1 << 20;
    /// How far behind a reader may fall before it is cut off.
    const LAG_LIMIT: u64 = 8 << 20;
    /// The tail of a disk-backed fill kept in memory for readers near the end.
    const SPILL_TAIL: u64 = 1 << 20;
    let mut keep = true;
    loop {
        if !keep {
            match tokio::time::timeout(stall_timeout, writer.room(WINDOW)).await {
                Ok(true) => {}
                // Too large to store and nobody reading: stop fetching it.
                Ok(false) => return Ok(false),
                Err(_) => return Err(FillError::ReadersStalled),
            }
        }
        let Some(frame) = body.frame().await else {
            break;
        };
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    writer.append(data.clone());
                    if keep && writer.len() > max_object {
                        keep = false;
                        *disk = None;
                        permit.done();
                        writer.release_history(LAG_LIMIT);
                    }
                    if let Some(d) = disk {
                        let before = d.durable();
                        match d.write(data).await {
                            // Written bytes leave memory; late readers read them back.
                            Ok(()) if d.durable() > before => {
                                writer.spill(&d.spill_source(), d.durable(), SPILL_TAIL);
                            }
                            Ok(()) => {}
                            Err(why) => {
                                tracing::info!(
                                    why = why.as_str(),
                                    "disk copy given up; the fill goes on"
                                );
                                *disk = None;
                            }
                        }
                    }
                }
            }
            Err(OriginBodyError::Timeout) => return Err(FillError::OriginTimeout),
            Err(OriginBodyError::Aborted(_)) => return Err(FillError::OriginAborted),
        }
    }
    Ok(keep)
}

/// Copies the body into buffers of its own, up to 1 MiB each: a hit then
/// writes few, large buffers, and the store's byte count is the memory held
/// (a chunk read from the network may be a slice of a larger buffer).
fn compact(chunks: Vec<Bytes>) -> Vec<Bytes> {
    const TARGET: usize = 1 << 20;
    let mut remaining: usize = chunks.iter().map(Bytes::len).sum();
    let mut out = Vec::with_capacity(remaining.div_ceil(TARGET));
    let mut cur = bytes::BytesMut::with_capacity(remaining.min(TARGET));
    for c in chunks {
        let mut c = &c[..];
        while !c.is_empty() {
            let take = c.len().min(cur.capacity() - cur.len());
            cur.extend_from_slice(&c[..take]);
            c = &c[take..];
            remaining -= take;
            if cur.len() == cur.capacity() {
                out.push(
                    std::mem::replace(
                        &mut cur,
                        bytes::BytesMut::with_capacity(remaining.min(TARGET)),
                    )
                    .freeze(),
                );
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_makes_exact_buffers_of_at_most_one_mib() {
        let chunks: Vec<Bytes> = (0..300u32)
            .map(|i| Bytes::from(vec![(i % 251) as u8; 10_000]))
            .collect();
        let want: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let out = compact(chunks);
        assert_eq!(
            out.iter().map(Bytes::len).collect::<Vec<_>>(),
            vec![1 << 20, 1 << 20, 3_000_000 - 2 * (1 << 20)]
        );
        assert_eq!(out.concat(), want);
        assert!(compact(Vec::new()).is_empty());
        assert_eq!(
            compact(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")]),
            vec![Bytes::from_static(b"abc")]
        );
    }
}
