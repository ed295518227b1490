//! What an answer means before it is judged for storing: a revalidation's
//! 304 or 5xx, a completion's 206 joined to a stored partial copy, and the
//! range a slice fill or a forwarded `Range` got back.

use std::sync::Arc;

use hoard_policy::key::CacheKey;
use hoard_policy::range::parse_content_range;
use hoard_policy::storable::NotStorable;
use http::header::{self, HeaderMap, HeaderValue};
use http::response::Parts;
use http::StatusCode;

use super::coalesce::{FillPermit, Outcome};
use super::run::{Joined, Sent};
use super::{partial_key, FillEngine, FillJob, PartialFill};

impl FillEngine {
    /// The answer to a revalidation: a 304 refreshes the stored object, a
    /// 5xx leaves it alone (RFC 9111 §4.3.3: it may be treated as no
    /// answer; the stored copy stays for stale-if-error and the key is not
    /// marked hit-for-pass). Both publish and return `None`; any other
    /// response goes on as a new one.
    pub(super) async fn revalidated(
        &self,
        job: &FillJob,
        sent: Sent,
        decision: super::filters::FilterDecision,
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
                    decision.ttl,
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
            self.forwardable(&mut parts.headers, parts.version, sent.response_time);
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
    pub(super) async fn completed(
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
    pub(super) fn partial_answer(
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
    pub(super) fn slice_answer(
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
