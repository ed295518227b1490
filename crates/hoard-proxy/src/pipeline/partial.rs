//! Partial copies: an origin's 206 kept as part of an object (RFC 9111
//! §3.3), reused for the ranges it holds and completed into the whole
//! object (§3.4).
//!
//! ## Model
//!
//! An object has at most one partial copy, stored like any object under
//! [`partial_key`] of its key: the 206 as the origin sent it (one range,
//! its `Content-Range` giving where the bytes sit and the whole length).
//! It comes from a fill that got a 206: a forwarded client range (route
//! `cold_range = "forward"`), or an origin that answered a whole-object
//! fetch with a 206 anyway. It is never served as the whole object.
//!
//! ## Request path (a GET whose object is not stored whole)
//!
//! ```text
//! partial copy fresh?
//!   ├─ every range it asks for is inside the copy ─► 206 from the copy (a hit)
//!   ├─ no satisfiable range at all ─► 416 with the copy's length
//!   ├─ no Range, the copy holds bytes 0..N and has a strong validator
//!   │   ─► fill with Range: bytes=N- and If-Range:
//!   │       a 206 of the rest, same validator ─► the copy's bytes, then the origin's: a 200, stored whole
//!   │         (if that 200 may not be stored: the whole object is fetched instead)
//!   │       another 206, or a 416 ─► copy dropped, whole object fetched
//!   │       a 200 ─► the new whole object (the copy dropped); other statuses ─► the answer
//!   └─ otherwise ─► as a miss: a whole fill, or with "forward" the client's Range goes to the origin
//! ```
//!
//! Requests with preconditions are not answered from a copy (they go on
//! as a miss and are answered from the origin's response).

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::cache_control::CacheControl;
use hoard_policy::cache_status::{ttl_secs, CacheStatus};
use hoard_policy::key::CacheKey;
use hoard_policy::range::{completion_validator, decide, parse_content_range, RangeDecision};
use hoard_policy::reuse::{reuse, Reuse};
use hoard_store::object::StoredObject;
use hoard_store::Lookup;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::range::partial;
use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::fill::{partial_key, FillJob, PartialFill};

/// Request fields that make a request conditional: such a request is not
/// answered from a partial copy.
const CONDITIONAL: [header::HeaderName; 4] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// What a miss asks of the origin about a partial copy.
#[derive(Debug, Clone)]
pub(crate) enum PartialWant {
    /// Forward the client's `Range`; keep a 206 as the partial copy.
    Forward,
    /// Ask for the rest of this copy, which holds bytes `0..have` of `total`.
    Complete {
        stored: Arc<StoredObject>,
        have: u64,
        total: u64,
    },
}

/// What the partial copy can do for a request.
pub(crate) enum PartialUse {
    /// Answered from the copy (boxed: the other answers are small).
    Served(Box<Response<ProxyBody>>),
    /// Fetch the rest of the copy.
    Complete(PartialWant),
    /// Nothing: a miss as usual.
    No,
}

impl Pipeline {
    /// Looks for the partial copy of `key` and says what it can do for
    /// `ctx` (a GET on a route without slices, whose whole object is not
    /// stored). See the module docs.
    pub(crate) async fn partial_copy(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        req_cc: &CacheControl,
        now: SystemTime,
    ) -> PartialUse {
        if CONDITIONAL.iter().any(|h| ctx.headers.contains_key(h)) {
            return PartialUse::No;
        }
        let pkey = partial_key(key);
        let Lookup::Hit(obj) = self
            .store
            .lookup(pkey.digest, &pkey.text, &ctx.headers)
            .await
        else {
            return PartialUse::No;
        };
        if !matches!(
            reuse(&obj.times, &obj.rules, req_cc, now),
            Reuse::Fresh | Reuse::StaleAllowed
        ) {
            return PartialUse::No;
        }
        let Some((held, total)) = obj
            .headers
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range)
        else {
            return PartialUse::No;
        };
        if held.len() != obj.body.len() {
            return PartialUse::No;
        }
        if !ctx.headers.contains_key(header::RANGE) {
            let joinable = held.start == 0
                && held.end < total
                // The rest can be asked for with If-Range and joined only
                // with a strong validator (RFC 9110 §13.1.5, §15.3.7.3).
                && completion_validator(&obj.headers).is_some()
                // A joined object that could not be stored would be
                // fetched twice: not for requests that keep nothing.
                && !req_cc.no_store
                && !ctx.headers.contains_key(header::AUTHORIZATION)
                && total <= self.store.max_object()
                && !self.fills.hfp.is_marked(key.digest, now);
            if joinable {
                return PartialUse::Complete(PartialWant::Complete {
                    stored: obj,
                    have: held.end,
                    total,
                });
            }
            return PartialUse::No;
        }
        // The fields of the whole object, as the copy's 206 tells them.
        let mut headers = obj.headers.clone();
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(total));
        let mut cs = CacheStatus {
            hit: true,
            ttl: Some(ttl_secs(obj.times.ttl_millis(now))),
            ..Default::default()
        };
        if ctx.run.cfg.server.debug_headers {
            cs.key = Some(pkey.text.clone());
        }
        let c = &self.counters;
        let mut resp = match decide(
            &ctx.method,
            &ctx.headers,
            StatusCode::OK,
            &headers,
            Some(total),
        ) {
            RangeDecision::Partial(ranges)
                if ranges
                    .iter()
                    .all(|r| r.start >= held.start && r.end <= held.end) =>
            {
                let body = ProxyBody::stored(obj.clone(), ctx.send.as_ref());
                let Ok(body) = partial(body, &ranges, total, held.start, &mut headers) else {
                    return PartialUse::No;
                };
                if !ctx.run.cfg.admin.forward_tags {
                    hoard_policy::tags::strip(&mut headers);
                }
                c.inc(&c.range_hits);
                c.inc(&c.partial_hits);
                let mut r = Response::new(body);
                *r.status_mut() = StatusCode::PARTIAL_CONTENT;
                *r.headers_mut() = headers;
                r
            }
            RangeDecision::Unsatisfiable => {
                c.inc(&c.range_not_satisfiable);
                let mut r = self.status_only(StatusCode::RANGE_NOT_SATISFIABLE);
                r.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{total}"))
                        .expect("invariant: ASCII digits"),
                );
                r
            }
            _ => return PartialUse::No,
        };
        c.inc(&c.cache_hit);
        resp.headers_mut().insert(
            header::AGE,
            super::hit::age_value(obj.times.current_age(now).as_secs()),
        );
        self.add_cache_status(&mut resp, &cs);
        PartialUse::Served(Box::new(resp))
    }

    /// Turns a fill job into one that stores (forwarded range) or completes
    /// a partial copy.
    pub(crate) fn with_partial(
        &self,
        mut job: FillJob,
        ctx: &Ctx<'_>,
        want: &PartialWant,
    ) -> FillJob {
        let Some(oreq) = job.oreq.as_mut() else {
            return job;
        };
        match want {
            PartialWant::Forward => {
                for h in [header::RANGE, header::IF_RANGE] {
                    if let Some(v) = ctx.headers.get(&h) {
                        oreq.headers.insert(h, v.clone());
                    }
                }
                job.partial = Some(PartialFill::Forwarded {
                    whole: job.key.clone(),
                });
            }
            PartialWant::Complete {
                stored,
                have,
                total,
            } => {
                let plain = self.origin_request(ctx, true, None);
                oreq.headers.insert(
                    header::RANGE,
                    HeaderValue::from_str(&format!("bytes={have}-"))
                        .expect("invariant: ASCII digits"),
                );
                if let Some(v) = completion_validator(&stored.headers) {
                    oreq.headers.insert(header::IF_RANGE, v.clone());
                }
                job.partial = Some(PartialFill::Completing {
                    stored: stored.clone(),
                    have: *have,
                    total: *total,
                    plain: Box::new(plain),
                });
            }
        }
        job
    }
}
