//! The steps of one fill: send, revalidated, decide, publish, read body,
//! store. See the module docs of [`super`].

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::key::CacheKey;

use hoard_policy::cache_status::ttl_secs;
use hoard_policy::facts::ResponseFacts;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::range::parse_content_range;
use hoard_policy::reuse::StoredRules;
use hoard_policy::storable::{storability, NotStorable, RequestFacts};
use hoard_policy::vary::VaryNames;
use hoard_store::busy::{BusyBody, BusyWriter};
use hoard_store::catalog::Raced;
use hoard_store::disk::writer::Abandoned;
use hoard_store::disk::writer::DiskWriter;
use hoard_store::object::{ObjectBody, StoredObject};
use hoard_store::InsertError;
use http::header::{self, HeaderMap, HeaderValue};
use http::response::Parts;
use http::{StatusCode, Version};

use super::body::{compact, read_body, BodyEnd};
use super::coalesce::{FillHead, FillPermit, Outcome};
use super::{partial_key, FillEngine, FillJob, PartialFill};
use crate::cluster::Source;
use crate::upstream::OriginBody;

type OriginResponse = http::Response<OriginBody>;

/// The origin's answer and when it came.
struct Sent {
    resp: OriginResponse,
    request_time: SystemTime,
    response_time: SystemTime,
    /// The origin, or the key's owner in a cluster.
    source: Source,
    /// The request again, to ask for the rest if the body breaks off.
    again: Option<super::resume::Again>,
}

/// What a fill stores besides the response: its status and the purge
/// epoch when it started.
#[derive(Debug, Clone, Copy)]
struct Stored {
    status: StatusCode,
    purge_epoch: u64,
    /// The purge epoch a cluster's purge window before the fill started:
    /// a copy of another member's object is not kept when a purge of it
    /// was applied here since (see `Cluster::purge_window`).
    near_epoch: u64,
    /// The fill's slot was taken out of the table (invalidation, purge).
    detached: bool,
    /// A partial copy joined to the origin's rest: the object's length,
    /// which the body must reach exactly to be stored.
    joined: Option<u64>,
    /// Where the response came from: an owner's answer is kept in the
    /// near tier, if at all.
    source: Source,
}

/// A stored partial copy that goes first in the body of a completion
/// (see [`PartialFill::Completing`]).
pub(super) struct Joined {
    /// The copy's body, read as the fill goes.
    pub prefix: crate::body::ProxyBody,
    /// Its length.
    pub have: u64,
    /// The whole object's length.
    pub total: u64,
    /// The request without `Range`, if the joined object may not be stored.
    pub plain: Option<Box<crate::upstream::OriginRequest>>,
}

/// What `decide` found for a storable response.
struct Storable {
    times: StoredTimes,
    source: LifetimeSource,
    rules: StoredRules,
    vary: VaryNames,
    /// The fields to store (never-stored fields removed; `Content-Length`
    /// set when the body is complete).
    headers: HeaderMap,
    content_length: Option<u64>,
}

impl Storable {
    fn object(&self, job: &FillJob, status: StatusCode, body: ObjectBody) -> StoredObject {
        StoredObject::new(
            job.key.text.clone(),
            self.vary.clone(),
            status,
            self.headers.clone(),
            self.times,
            self.source,
            self.rules,
            body,
        )
    }
}

impl FillEngine {
    /// Runs a fill to its end.
    pub(super) async fn run(self: Arc<Self>, job: FillJob, permit: FillPermit) {
        // `None`: an outcome was published on the way.
        let _ = self.run_steps(job, permit).await;
    }

    async fn run_steps(self: Arc<Self>, mut job: FillJob, mut permit: FillPermit) -> Option<()> {
        self.counters.inc(&self.counters.fills_started);
        // Purges from now on are newer than the response: see store_complete.
        let purge_epoch = self.store.catalog().epoch();
        let near_epoch = match &self.cluster {
            Some(c) => tokio::time::Instant::now()
                .checked_sub(c.purge_window())
                .map_or(0, |at| self.store.catalog().epoch_as_of(at)),
            None => purge_epoch,
        };
        let sent = self.send(&mut job, &mut permit).await?;
        let sent = self
            .revalidated(&job, sent, purge_epoch, &mut permit)
            .await?;
        let (mut sent, mut joined) = self.completed(&mut job, sent, &mut permit).await?;
        let (status, parts, body, storable) = loop {
            let status = sent.resp.status();
            let (mut parts, body) = sent.resp.into_parts();
            self.forwardable(&mut parts.headers, sent.response_time);
            let decided = self
                .slice_answer(&mut job, &parts)
                .and_then(|(judged_as, rekey)| {
                    let storable = self.decide(
                        &job,
                        judged_as,
                        &parts,
                        sent.request_time,
                        sent.response_time,
                    )?;
                    Ok((storable, rekey))
                });
            match decided {
                Ok((storable, rekey)) => {
                    if let Some(key) = rekey {
                        // A 206 kept as the partial copy; a stale copy being
                        // revalidated is the whole object, not this.
                        job.key = key;
                        job.stale = None;
                    }
                    break (status, parts, body, storable);
                }
                Err(_) if joined.as_ref().is_some_and(|j| j.plain.is_some()) => {
                    // The joined object may not be stored: the rest alone is
                    // not the answer. Ask for the whole object instead.
                    job.oreq = joined.take().and_then(|j| j.plain).map(|p| *p);
                    drop(body);
                    sent = self.send(&mut job, &mut permit).await?;
                }
                Err(reason) => {
                    self.uncacheable(&job, reason, sent.response_time);
                    permit.publish_uncacheable(reason, http::Response::from_parts(parts, body));
                    return None;
                }
            }
        };
        // A source that drops after the head: the rest from the next choice.
        let body = self.resumable(
            &job,
            sent.again.take(),
            &parts,
            joined.as_ref().map(|j| (j.have, j.total)),
            sent.source,
            body,
        );
        self.hfp.clear(job.key.digest);
        let kept = sent.source != (Source::Owner { keep: false });
        let writer = self.publish(
            &job,
            (status, kept),
            parts,
            &storable,
            sent.response_time,
            &mut permit,
        );
        // A copy of another member's object never goes to disk.
        let disk = match sent.source {
            Source::Origin | Source::Previous | Source::Parent => {
                self.open_disk(&job, status, &storable).await
            }
            Source::Owner { .. } => None,
        };
        let stored = Stored {
            status,
            purge_epoch,
            near_epoch,
            detached: false,
            joined: joined.as_ref().map(|j| j.total),
            source: sent.source,
        };
        self.read_and_store(job, stored, storable, joined, body, writer, disk, permit)
            .await;
        Some(())
    }

    /// Sends the request; an error is published as `OriginError`.
    async fn send(&self, job: &mut FillJob, permit: &mut FillPermit) -> Option<Sent> {
        let request_time = self.clock.now();
        let oreq = job.oreq.take().expect("invariant: a fill job is run once");
        let by = job.route_key.as_deref().unwrap_or(&job.key.text);
        let again = super::resume::Again::of(&oreq, by.as_bytes());
        let sent = match (&self.cluster, job.cluster_tls) {
            (Some(c), Some(tls)) => c.send(by.as_bytes(), tls, oreq, &job.upstream).await,
            (Some(c), None) if job.tier_tls.is_some() => {
                let tls = job.tier_tls.unwrap_or(false);
                c.beyond(by.as_bytes(), tls, oreq, &job.upstream).await
            }
            _ => job.upstream.send(oreq).await.map(|r| (r, Source::Origin)),
        };
        match sent {
            Ok((resp, source)) => {
                if self.cluster.is_some() && source == Source::Origin {
                    self.counters.inc(&self.counters.cluster_owner_fills);
                }
                Some(Sent {
                    resp,
                    request_time,
                    response_time: self.clock.now(),
                    source,
                    again,
                })
            }
            Err(e) => {
                if job.stale.is_some() {
                    self.counters.inc(&self.counters.revalidation_failed);
                }
                tracing::info!(key = %job.key.text, error = %e, "fill failed before a response");
                permit.publish(Outcome::OriginError(e.kind));
                None
            }
        }
    }

    /// The answer to a revalidation: a 304 refreshes the stored object, a
    /// 5xx leaves it alone (RFC 9111 §4.3.3: it may be treated as no
    /// answer; the stored copy stays for stale-if-error and the key is not
    /// marked hit-for-pass). Both publish and return `None`; any other
    /// response goes on as a new one.
    async fn revalidated(
        &self,
        job: &FillJob,
        sent: Sent,
        purge_epoch: u64,
        permit: &mut FillPermit,
    ) -> Option<Sent> {
        let Some(stale) = &job.stale else {
            return Some(sent);
        };
        let status = sent.resp.status();
        if status == StatusCode::NOT_MODIFIED {
            let fresh = self
                .refresh_from_304(
                    job,
                    stale,
                    sent.resp.headers(),
                    (sent.request_time, sent.response_time),
                    purge_epoch,
                )
                .await;
            let cookies = sent
                .resp
                .headers()
                .get_all(header::SET_COOKIE)
                .iter()
                .cloned()
                .collect();
            permit.publish(Outcome::Refreshed(fresh, Arc::new(cookies)));
            return None;
        }
        if status.is_server_error() {
            self.counters.inc(&self.counters.revalidation_failed);
            let (mut parts, body) = sent.resp.into_parts();
            self.forwardable(&mut parts.headers, sent.response_time);
            permit.publish_uncacheable(
                NotStorable::ServerError,
                http::Response::from_parts(parts, body),
            );
            return None;
        }
        Some(sent)
    }

    /// The answer to a completion (see [`PartialFill::Completing`]): a 206
    /// with exactly the missing bytes of the same object (a shared strong
    /// validator, RFC 9110 §15.3.7.3) becomes a 200 of the whole length,
    /// returned with the stored copy that goes first. A 206 of anything
    /// else, or a 416, means the copy is of another version: it is dropped
    /// and the request is sent again without `Range`. Any other answer (a
    /// 200, an error) is the answer. `None`: an outcome was published.
    async fn completed(
        &self,
        job: &mut FillJob,
        sent: Sent,
        permit: &mut FillPermit,
    ) -> Option<(Sent, Option<Joined>)> {
        let Some(PartialFill::Completing {
            stored,
            have,
            total,
            plain,
        }) = job.partial.take()
        else {
            return Some((sent, None));
        };
        let status = sent.resp.status();
        let copy = partial_key(&job.key);
        match status {
            StatusCode::PARTIAL_CONTENT
                if completes(&stored.headers, sent.resp.headers(), have, total) =>
            {
                let (mut parts, body) = sent.resp.into_parts();
                parts.status = StatusCode::OK;
                parts.headers.remove(header::CONTENT_RANGE);
                parts
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(total));
                let joined = Joined {
                    prefix: crate::body::ProxyBody::stored(stored, None),
                    have,
                    total,
                    plain: Some(plain),
                };
                let sent = Sent {
                    resp: http::Response::from_parts(parts, body),
                    ..sent
                };
                Some((sent, Some(joined)))
            }
            StatusCode::PARTIAL_CONTENT | StatusCode::RANGE_NOT_SATISFIABLE => {
                self.counters.inc(&self.counters.partial_mismatches);
                tracing::info!(key = %job.key.text, status = status.as_u16(), "partial copy does not match the origin's rest; fetching the whole object");
                self.store.remove_all(copy.digest);
                drop(sent);
                job.oreq = Some(*plain);
                let sent = self.send(job, permit).await?;
                Some((sent, None))
            }
            _ => {
                if status == StatusCode::OK {
                    // A new whole object: the copy is of the old one.
                    self.store.remove_all(copy.digest);
                }
                Some((sent, None))
            }
        }
    }

    /// How a fill that is not a slice's judges its answer. A 206 becomes
    /// the object's partial copy, stored under [`partial_key`] as the 200
    /// it is part of (RFC 9111 §3.3; only a single range of a known length
    /// is kept): the key to store under is returned, applied once the
    /// response proved storable (a mark of hit-for-pass stays on the
    /// object's key). A forwarded range answered with a 200 is the whole
    /// object; any other answer to it (416, errors) is relayed, never
    /// stored under the whole object's key.
    fn partial_answer(
        &self,
        job: &FillJob,
        parts: &Parts,
    ) -> Result<(StatusCode, Option<CacheKey>), NotStorable> {
        let forwarded = matches!(job.partial, Some(PartialFill::Forwarded { .. }));
        match parts.status {
            StatusCode::PARTIAL_CONTENT => {
                let single = parts
                    .headers
                    .get(header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_content_range)
                    .is_some_and(|(r, total)| r.start < r.end && r.end <= total);
                if !single {
                    return Err(NotStorable::UnexpectedRange);
                }
                Ok((StatusCode::OK, Some(partial_key(&job.key))))
            }
            StatusCode::OK => Ok((StatusCode::OK, None)),
            _ if forwarded => Err(NotStorable::UnexpectedRange),
            other => Ok((other, None)),
        }
    }

    /// The status a response is judged by for storing. A slice fill's 206
    /// with exactly the asked-for bytes is judged as the 200 it is part of
    /// (it is stored under the slice's key, as a 206); a 200 means the
    /// origin ignored `Range`: the fill becomes one of the whole object,
    /// under its key. A 206 with other bytes is never stored.
    fn slice_answer(
        &self,
        job: &mut FillJob,
        parts: &Parts,
    ) -> Result<(StatusCode, Option<CacheKey>), NotStorable> {
        let Some(slice) = &job.slice else {
            return self.partial_answer(job, parts);
        };
        match parts.status {
            StatusCode::PARTIAL_CONTENT => {
                let got = parts
                    .headers
                    .get(header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_content_range);
                match got {
                    Some((r, total)) if r.start == slice.start && r.end == slice.end.min(total) => {
                        Ok((StatusCode::OK, None))
                    }
                    _ => Err(NotStorable::UnexpectedRange),
                }
            }
            StatusCode::OK => {
                self.counters.inc(&self.counters.slice_range_ignored);
                job.key = slice.whole.clone();
                job.slice = None;
                // The stale copy was a slice: not the object this replaces.
                job.stale = None;
                Ok((StatusCode::OK, None))
            }
            other => Ok((other, None)),
        }
    }

    /// Whether and how the response is stored (RFC 9111 §3), from the
    /// route's policy and the request's directives; `status` is the one
    /// it is judged by (see [`Self::slice_answer`]).
    fn decide(
        &self,
        job: &FillJob,
        status: StatusCode,
        parts: &Parts,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Result<Storable, NotStorable> {
        let policy = &job.route.policy;
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
        let (lifetime, source) = storability(req_facts, &facts, policy, response_time)?;
        if content_length.is_some_and(|len| len > self.store.max_object()) {
            return Err(NotStorable::TooLarge);
        }
        let mut headers = parts.headers.clone();
        hoard_policy::headers::strip_never_stored(&mut headers);
        Ok(Storable {
            times: StoredTimes {
                request_time,
                response_time,
                date: facts.date.unwrap_or(response_time),
                age_value: facts.age,
                lifetime,
            },
            source,
            rules: StoredRules::new(
                &facts.cc,
                policy.stale_while_revalidate,
                policy.stale_if_error,
            ),
            vary: if policy.ignore_vary {
                VaryNames::default()
            } else {
                VaryNames::from_response(&parts.headers)
            },
            headers,
            content_length,
        })
    }

    /// A response that may not be stored: a reason of the response's own
    /// marks the key hit-for-pass and drops a stored copy it replaces.
    fn uncacheable(&self, job: &FillJob, reason: NotStorable, response_time: SystemTime) {
        self.counters.inc(&self.counters.not_storable);
        if reason.is_response_property() {
            if job.stale.is_some() {
                // Keeping the old copy would keep serving it. A reason of the
                // request's own (no-store, Authorization) leaves it alone: one
                // client cannot purge it for all.
                self.store.remove_all(job.key.digest);
            }
            if !job.route.hit_for_pass.is_zero() {
                self.hfp
                    .mark(job.key.digest, response_time + job.route.hit_for_pass);
                self.counters.inc(&self.counters.hit_for_pass_marks);
            }
        }
        tracing::debug!(key = %job.key.text, reason = reason.as_str(), "not storable");
    }

    /// Publishes `Streaming`: the head and a busy body every waiter reads
    /// from byte 0. Returns the body's writer.
    fn publish(
        &self,
        job: &FillJob,
        (status, kept): (StatusCode, bool),
        parts: Parts,
        storable: &Storable,
        response_time: SystemTime,
        permit: &mut FillPermit,
    ) -> BusyWriter {
        let (busy, writer) = BusyBody::new();
        // The leader's reader exists before any byte arrives, so it starts at
        // byte 0 even if history is released early (a body too large to store).
        let slot = permit.slot().clone();
        let leader_gone = slot.leader_gone.lock();
        let leader_reader = (job.has_leader && !*leader_gone).then(|| {
            busy.reader()
                .expect("invariant: a new busy body accepts readers")
        });
        let mut shared_headers = storable.headers.clone();
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
            variant: storable.vary.variant(&job.request_headers),
            vary: storable.vary.clone(),
            ttl: ttl_secs(storable.times.ttl_millis(response_time)),
            kept,
        });
        permit.publish(Outcome::Streaming(head));
        writer
    }

    /// A disk writer in the zone placement chooses (none without zones, or
    /// when the zone cannot take the object now).
    async fn open_disk(
        &self,
        job: &FillJob,
        status: StatusCode,
        storable: &Storable,
    ) -> Option<DiskWriter> {
        let content_type = storable
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        // A slice is placed by the size of the whole object.
        let whole_len = job
            .slice
            .as_ref()
            .and_then(|_| storable.headers.get(header::CONTENT_RANGE))
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range)
            .map(|(_, total)| total);
        let zone = self.cache.place(
            job.route.zone,
            &job.path,
            content_type,
            whole_len.or(storable.content_length),
        )?;
        let head = storable.object(job, status, ObjectBody::default());
        let hint = hoard_store::store::head_of(&head).encode().len();
        let variant = storable.vary.variant(&job.request_headers);
        let open =
            self.store
                .disk_writer(zone, job.key.digest, variant, storable.content_length, hint);
        // A stalled disk costs the disk copy, not the clients' bytes.
        tokio::time::timeout(job.upstream.cfg.read_timeout, open)
            .await
            .ok()
            .flatten()
    }

    /// Reads the body and stores the object; the slot leaves the table and
    /// only then do readers see the end.
    #[allow(clippy::too_many_arguments)]
    async fn read_and_store(
        &self,
        job: FillJob,
        stored: Stored,
        mut storable: Storable,
        joined: Option<Joined>,
        body: super::resume::Resuming,
        writer: BusyWriter,
        mut disk: Option<DiskWriter>,
        mut permit: FillPermit,
    ) {
        let outcome = read_body(
            joined.map(|j| (j.prefix, j.have)),
            body,
            &writer,
            &mut disk,
            storable.content_length,
            self.store.max_object(),
            job.upstream.cfg.read_timeout,
            &mut permit,
        )
        .await;
        match outcome {
            Ok(BodyEnd::Complete(held))
                if !range_complete(stored.status, &storable, writer.len(), held.as_ref()) =>
            {
                // A 206 whose body is not as long as its Content-Range says
                // is never stored. A slice's readers see an error (their
                // response is assembled from slices); a partial copy's get
                // what the origin sent, as a pass would.
                tracing::info!(key = %job.key.text, "206 body length differs from its Content-Range; not stored");
                permit.done();
                if job.slice.is_some() {
                    self.counters.inc(&self.counters.fills_aborted);
                    writer.abort(hoard_store::busy::FillError::OriginAborted);
                } else {
                    self.counters.inc(&self.counters.not_storable);
                    if let Some(h) = held {
                        writer.append(h);
                    }
                    writer.finish();
                }
            }
            Ok(BodyEnd::Complete(held))
                if stored.joined.is_some_and(|total| {
                    writer.len() + held.as_ref().map_or(0, |h| h.len() as u64) != total
                }) =>
            {
                // The origin's rest was not exactly the missing bytes.
                self.counters.inc(&self.counters.fills_aborted);
                tracing::info!(key = %job.key.text, "joined body is not the object's length; not stored");
                permit.done();
                writer.abort(hoard_store::busy::FillError::OriginAborted);
            }
            Ok(BodyEnd::Complete(held)) => {
                self.counters.inc(&self.counters.fills_completed);
                let len = writer.len() + held.as_ref().map_or(0, |h| h.len() as u64);
                storable
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                let stored = Stored {
                    detached: permit.slot().is_detached(),
                    ..stored
                };
                let kept = self
                    .store_complete(&job, stored, storable, &writer, held.as_ref(), disk)
                    .await;
                if kept && stored.joined.is_some() {
                    self.counters.inc(&self.counters.partial_completed);
                } else if kept
                    && stored.status == StatusCode::PARTIAL_CONTENT
                    && job.slice.is_none()
                {
                    self.counters.inc(&self.counters.partial_stored);
                }
                permit.done();
                if let Some(h) = held {
                    writer.append(h);
                }
                writer.finish();
            }
            Ok(BodyEnd::TooLarge) => {
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

    /// Publishes the disk copy, or (without one) inserts into the memory
    /// tier. True when stored.
    async fn store_complete(
        &self,
        job: &FillJob,
        stored: Stored,
        mut storable: Storable,
        writer: &BusyWriter,
        held: Option<&bytes::Bytes>,
        disk: Option<DiskWriter>,
    ) -> bool {
        let status = stored.status;
        if stored.detached {
            // Invalidated or purged while it ran (the slot left the table).
            self.counters.inc(&self.counters.purge_raced_fills);
            tracing::info!(key = %job.key.text, "fill detached by an invalidation or purge; not stored");
            return false;
        }
        let catalog = self.store.catalog();
        // Read before the check below: the store itself checks purges after
        // this epoch under the catalogue's admission gate, so a purge at any
        // point from here to the object's insertion is seen.
        let checked = catalog.epoch();
        match catalog.purged_since(
            stored.purge_epoch,
            &job.key.text,
            &storable.headers,
            Raced::Hard,
        ) {
            Raced::No => {}
            Raced::Soft => storable.times = storable.times.made_stale(self.clock.now()),
            Raced::Hard => {
                // Requested before a purge that selects it: the clients that
                // asked got it, the cache does not keep it.
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge; not stored");
                return false;
            }
        }
        let storable = &storable;
        let near = match stored.source {
            Source::Origin | Source::Previous | Source::Parent => false,
            Source::Owner { keep: true }
                if catalog.purged_since(
                    stored.near_epoch,
                    &job.key.text,
                    &storable.headers,
                    Raced::Hard,
                ) != Raced::No =>
            {
                // Purged here lately: the owner may have answered before it
                // applied the same purge. Served, not kept.
                self.counters.inc(&self.counters.cluster_near_declined);
                tracing::info!(key = %job.key.text, "near copy not kept: a purge of it was applied here within the purge window");
                return false;
            }
            Source::Owner { keep: true } => true,
            Source::Owner { keep: false } => {
                // Not forwarded often enough for a copy here.
                self.counters.inc(&self.counters.cluster_near_declined);
                return false;
            }
        };
        if let Some(w) = disk {
            return self
                .store_on_disk(job, w, status, storable, writer, held, checked)
                .await;
        }
        // Spilled to a file that was given up: not all in memory, not stored.
        let Some(mut chunks) = writer.chunks() else {
            return false;
        };
        chunks.extend(held.cloned());
        let chunks = compact(chunks);
        let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let plan = crate::encode::plan(
            &job.route,
            self.store.max_object(),
            status,
            &storable.headers,
            len,
        );
        // A coded body is decoded before it is stored (a corrupt one or a
        // bomb never is); an identity one is coded after, off the fill's
        // way: its clients see the end of the body at once.
        let (parts, later) = match plan {
            Some(p) if p.stored != hoard_policy::encoding::Coding::Identity => {
                match self.encode_parts(&chunks, p).await {
                    Ok(parts) => (parts, None),
                    Err(e) => {
                        self.counters.inc(&self.counters.encode_decode_failures);
                        tracing::warn!(key = %job.key.text, error = %e, "origin body not stored");
                        return false;
                    }
                }
            }
            p => (Vec::new(), p.filter(|_| !near)),
        };
        let mut obj = storable.object(job, status, ObjectBody::from_chunks(chunks.clone()));
        if !parts.is_empty() {
            obj = obj.with_parts(parts);
        }
        let inserted = if near {
            let obj = Arc::new(obj.into_near());
            self.store
                .insert_near(job.key.digest, &job.request_headers, obj, checked)
        } else {
            let obj = Arc::new(obj);
            let r = self
                .store
                .insert(job.key.digest, &job.request_headers, obj.clone(), checked);
            if let (Ok(()), Some(plan)) = (&r, later) {
                let target = Target::Memory {
                    primary: job.key.digest,
                    request: job.request_headers.clone(),
                    obj,
                };
                self.encode_later(target, chunks, plan);
            }
            r
        };
        match inserted {
            Ok(()) if near => {
                self.counters.inc(&self.counters.cluster_near_stored);
                true
            }
            Ok(()) => {
                self.counters.inc(&self.counters.objects_stored);
                true
            }
            Err(InsertError::TooLarge) => {
                self.counters.inc(&self.counters.objects_too_large);
                false
            }
            // No memory tier and no disk copy: not stored.
            Err(InsertError::NoTier) => false,
            Err(InsertError::Purged) => {
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge; not stored");
                false
            }
        }
    }

    /// Publishes the disk copy a fill wrote through. A body in a coding
    /// hoard knows is decoded first, and the object written again with
    /// its parts as one file (the copy written through is given up: a
    /// corrupt body or a bomb is never stored); an identity body that is
    /// worth coding is published at once and its parts added after (see
    /// [`Self::encode_later`]). True when stored.
    #[allow(clippy::too_many_arguments)]
    async fn store_on_disk(
        &self,
        job: &FillJob,
        w: DiskWriter,
        status: StatusCode,
        storable: &Storable,
        writer: &BusyWriter,
        held: Option<&bytes::Bytes>,
        checked: u64,
    ) -> bool {
        let head =
            hoard_store::store::head_of(&storable.object(job, status, ObjectBody::default()));
        // The body, when all of it is still in memory (not spilled).
        let chunks = writer.chunks().map(|mut c| {
            c.extend(held.cloned());
            compact(c)
        });
        let len = chunks
            .as_ref()
            .map_or(u64::MAX, |c| c.iter().map(|c| c.len() as u64).sum());
        let plan = crate::encode::plan(
            &job.route,
            self.store.max_object(),
            status,
            &storable.headers,
            len,
        );
        let zone = w.zone_number();
        let digests = (job.key.digest, storable.vary.variant(&job.request_headers));
        let (coded, later) = match plan {
            Some(p) if p.stored != hoard_policy::encoding::Coding::Identity => (Some(p), None),
            p => (None, p.zip(chunks.clone())),
        };
        let committed = match coded {
            Some(p) => {
                drop(w);
                let Some(chunks) = chunks else {
                    self.counters.inc(&self.counters.encode_skipped);
                    tracing::info!(key = %job.key.text, "coded body too large to decode in memory; not stored");
                    return false;
                };
                let parts = match self.encode_parts(&chunks, p).await {
                    Ok(parts) => parts,
                    Err(e) => {
                        self.counters.inc(&self.counters.encode_decode_failures);
                        tracing::warn!(key = %job.key.text, error = %e, "origin body not stored");
                        return false;
                    }
                };
                let store = self.store.clone();
                let head = head.clone();
                // Spawned: a client of the fill is never kept waiting by
                // the write (see the timeout below).
                let write = tokio::spawn(async move {
                    store
                        .store_with_parts(zone, digests, &head, &chunks, &parts, checked, None)
                        .await
                });
                tokio::time::timeout(job.upstream.cfg.read_timeout, write)
                    .await
                    .map(|r| r.unwrap_or(Err(Abandoned::Io)))
            }
            None => {
                let finish = self.store.finish_disk(w, job.key.digest, &head, checked);
                tokio::time::timeout(job.upstream.cfg.read_timeout, finish).await
            }
        };
        match committed {
            Ok(Ok(r)) => {
                self.counters.inc(&self.counters.objects_stored);
                if let Some((p, chunks)) = later {
                    let target = Target::Disk {
                        zone,
                        digests,
                        head: Box::new(head),
                        at: r,
                        checked,
                    };
                    self.encode_later(target, chunks, p);
                }
                true
            }
            Ok(Err(Abandoned::Purged)) => {
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge at its disk commit; not stored");
                false
            }
            Ok(Err(why)) => {
                tracing::info!(key = %job.key.text, why = why.as_str(), "disk copy given up");
                false
            }
            Err(_) => {
                // The commit goes on by itself and publishes the object
                // (or removes it): the clients are not kept waiting.
                tracing::warn!(key = %job.key.text, "disk stalled at the end of a fill; the copy completes in the background");
                false
            }
        }
    }

    /// Makes the parts of an object just stored from identity bytes, on a
    /// background thread, and puts them in if the object is still the one
    /// stored (a purge or a newer version meanwhile wins): in the memory
    /// tier by replacing the object (`MemoryStore::update`), in a zone by
    /// writing the object again with its parts (`Store::store_with_parts`).
    fn encode_later(&self, target: Target, chunks: Vec<bytes::Bytes>, plan: crate::encode::Plan) {
        let store = self.store.clone();
        let counters = self.counters.clone();
        tokio::spawn(async move {
            let body = chunks.clone();
            let made =
                crate::encode::in_background(move || crate::encode::make_parts(&body, &plan)).await;
            let made = match made {
                Some(Ok(made)) => made,
                Some(Err(_)) => return,
                None => {
                    counters.inc(&counters.encode_skipped);
                    return;
                }
            };
            count_made(&counters, &made);
            let put = match target {
                Target::Memory {
                    primary,
                    request,
                    obj,
                } => {
                    let same = obj.with_headers(
                        obj.headers.clone(),
                        obj.times,
                        obj.lifetime_source,
                        obj.rules,
                    );
                    let with = Arc::new(same.with_parts(made.parts));
                    store
                        .memory()
                        .is_some_and(|m| m.update(primary, &request, &obj, with))
                }
                Target::Disk {
                    zone,
                    digests,
                    head,
                    at,
                    checked,
                } => {
                    let r = store
                        .store_with_parts(
                            zone,
                            digests,
                            &head,
                            &chunks,
                            &made.parts,
                            checked,
                            Some(at),
                        )
                        .await;
                    if let Err(why) = r {
                        tracing::debug!(key = %head.key, why = why.as_str(), "parts not added to the disk copy");
                    }
                    r.is_ok()
                }
            };
            if put {
                counters.inc(&counters.encode_objects);
            }
        });
    }

    /// The parts of a coded body, made on a blocking thread before it is
    /// stored (see [`crate::encode`]).
    async fn encode_parts(
        &self,
        chunks: &[bytes::Bytes],
        plan: crate::encode::Plan,
    ) -> Result<Vec<hoard_store::object::Part>, crate::encode::EncodeError> {
        let chunks = chunks.to_vec();
        let made = tokio::task::spawn_blocking(move || crate::encode::make_parts(&chunks, &plan))
            .await
            .unwrap_or_else(|e| {
                Err(crate::encode::EncodeError::Corrupt(format!(
                    "encoding task failed: {e}"
                )))
            })?;
        count_made(&self.counters, &made);
        self.counters.inc(&self.counters.encode_objects);
        Ok(made.parts)
    }

    /// Makes an origin response's fields fit to forward and store:
    /// hop-by-hop fields removed, `Date` added when missing (RFC 9110
    /// §6.6.1: a recipient with a clock dates what it forwards), `Via` added.
    pub(super) fn forwardable(&self, headers: &mut HeaderMap, response_time: SystemTime) {
        hoard_policy::headers::strip_hop_by_hop(headers);
        if !headers.contains_key(header::DATE) {
            if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                headers.insert(header::DATE, v);
            }
        }
        self.via.add(headers, Version::HTTP_11);
    }
}

/// Whether a 206's body (`written` bytes plus the `held` last chunk) is as
/// long as its `Content-Range` says; true for other statuses.
fn range_complete(
    status: StatusCode,
    storable: &Storable,
    written: u64,
    held: Option<&bytes::Bytes>,
) -> bool {
    if status != StatusCode::PARTIAL_CONTENT {
        return true;
    }
    let len = written + held.map_or(0, |h| h.len() as u64);
    storable
        .headers
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range)
        .is_some_and(|(r, _)| r.len() == len)
}

/// Whether a 206 with `new` fields is the rest of a stored partial copy
/// with `old` fields holding bytes `0..have` of `total`: `Content-Range`
/// exactly `have..total` of `total`, and a strong validator shared with
/// the copy (RFC 9110 §15.3.7.3).
fn completes(old: &HeaderMap, new: &HeaderMap, have: u64, total: u64) -> bool {
    let range_ok = new
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range)
        .is_some_and(|(r, t)| r.start == have && r.end == total && t == total);
    range_ok && hoard_policy::range::share_strong_validator(old, new)
}

/// Where parts made after an object was stored go.
enum Target {
    /// The memory tier's object `obj`.
    Memory {
        primary: hoard_policy::key::Digest,
        request: HeaderMap,
        obj: Arc<hoard_store::object::StoredObject>,
    },
    /// The zone copy `at` (written by the fill with `head`, under the
    /// purge epoch `checked`), written again with its parts.
    Disk {
        zone: usize,
        digests: (hoard_policy::key::Digest, hoard_policy::key::Digest),
        head: Box<hoard_store::disk::format::Head>,
        at: hoard_store::object::DiskRef,
        checked: u64,
    },
}

/// Counts what making parts took.
fn count_made(c: &crate::counters::Counters, made: &crate::encode::Made) {
    use hoard_policy::encoding::Coding;
    if let Some((_, identity, _, _)) = made.stats.first() {
        c.add(&c.encode_identity_bytes, *identity);
    }
    for (coding, bytes_in, bytes_out, took) in &made.stats {
        c.add(&c.encode_bytes_in, *bytes_in);
        c.add(&c.encode_micros, took.as_micros() as u64);
        match coding {
            Coding::Br => c.add(&c.encode_bytes_br, *bytes_out),
            Coding::Zstd => c.add(&c.encode_bytes_zstd, *bytes_out),
            Coding::Gzip => c.add(&c.encode_bytes_gzip, *bytes_out),
            Coding::Identity => {}
        }
    }
}
