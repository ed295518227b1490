//! Delivering a response: the client's preconditions, HEAD, and for stored
//! objects Age and Cache-Status.

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::cache_status::{ttl_secs, CacheStatus};
use hoard_policy::conditional::{evaluate, Precondition};
use hoard_policy::key::CacheKey;
use hoard_store::object::StoredObject;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;

/// Fields a 304 carries from the full response (RFC 9110 §15.4.5), and `Via`.
const NOT_MODIFIED_FIELDS: [header::HeaderName; 8] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
    header::LAST_MODIFIED,
    header::VIA,
];

/// Ages below this many seconds have a ready `Age` value.
const READY_AGES: u64 = 600;

/// The `Age` field's value: from a table made once for the first ten
/// minutes (a clone is a reference count, where formatting a number into
/// a new value costs two allocations per hit), formatted beyond.
pub(crate) fn age_value(secs: u64) -> HeaderValue {
    static READY: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    match READY
        .get_or_init(|| (0..READY_AGES).map(HeaderValue::from).collect())
        .get(secs as usize)
    {
        Some(v) => v.clone(),
        None => HeaderValue::from(secs),
    }
}

impl Pipeline {
    /// Serves a stored object to `ctx`, answering its preconditions
    /// (RFC 9110 §13.2) and adding `Age` (RFC 9111 §5.1) and `Cache-Status`.
    pub(crate) fn serve_stored(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        obj: Arc<StoredObject>,
        mut status: CacheStatus,
        now: SystemTime,
    ) -> Response<ProxyBody> {
        status.ttl = Some(ttl_secs(obj.times.ttl_millis(now)));
        if ctx.run.cfg.server.debug_headers {
            status.key = Some(key.text.clone());
        }
        let age = age_value(obj.times.current_age(now).as_secs());
        let mut resp = self.respond(
            ctx,
            obj.status,
            obj.headers.clone(),
            ProxyBody::stored(obj, ctx.send.as_ref()),
        );
        resp.headers_mut().insert(header::AGE, age);
        self.add_cache_status(&mut resp, &status);
        resp
    }

    /// The answer to `ctx` from a full response: 304 or 412 when the
    /// client's preconditions say so (RFC 9110 §13.2, only for a 2xx), no
    /// body for HEAD, else the response itself.
    pub(crate) fn respond(
        &self,
        ctx: &Ctx<'_>,
        status: StatusCode,
        mut headers: HeaderMap,
        body: ProxyBody,
    ) -> Response<ProxyBody> {
        // Purge tags are for this cache, not for clients.
        if !ctx.run.cfg.admin.forward_tags {
            hoard_policy::tags::strip(&mut headers);
        }
        let pre = if status.is_success() {
            evaluate(&ctx.method, &ctx.headers, &headers)
        } else {
            Precondition::Pass
        };
        match pre {
            Precondition::NotModified => {
                let mut r = self.status_only(StatusCode::NOT_MODIFIED);
                for name in &NOT_MODIFIED_FIELDS {
                    for v in headers.get_all(name) {
                        r.headers_mut().append(name.clone(), v.clone());
                    }
                }
                r
            }
            Precondition::Failed => self.status_only(StatusCode::PRECONDITION_FAILED),
            Precondition::Pass if ctx.method == Method::HEAD => {
                // The fields a GET would get (Accept-Ranges too), no body.
                let mut r = self.ranged(ctx, status, headers, body);
                *r.body_mut() = ProxyBody::Empty;
                r
            }
            // Range after the preconditions (RFC 9110 §13.2.2 step 6).
            Precondition::Pass => self.ranged(ctx, status, headers, body),
        }
    }
}
