//! The body of a storable answer: `Streaming` published to the waiters
//! (a busy body), a disk writer opened where placement says, the body read
//! through both, and how the fill ends (stored, relayed only, aborted).

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::cache_status::ttl_secs;
use hoard_policy::range::parse_content_range;
use hoard_store::busy::{BusyBody, BusyWriter};
use hoard_store::disk::writer::DiskWriter;
use hoard_store::object::ObjectBody;
use http::header::{self, HeaderValue};
use http::response::Parts;
use http::StatusCode;

use super::body::{read_body, BodyEnd};
use super::coalesce::{FillHead, FillPermit, Outcome};
use super::decide::Storable;
use super::run::{Joined, Stored};
use super::{FillEngine, FillJob};

impl FillEngine {
    /// Publishes `Streaming`: the head and a busy body every waiter reads
    /// from byte 0. Returns the body's writer.
    pub(super) fn publish(
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
    pub(super) async fn open_disk(
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
    pub(super) async fn read_and_store(
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
