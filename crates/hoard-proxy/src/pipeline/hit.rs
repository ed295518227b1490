//! Delivering a stored object: preconditions, Age, Cache-Status.

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

/// Fields a 304 carries from the stored response (RFC 9110 §15.4.5).
const NOT_MODIFIED_FIELDS: [header::HeaderName; 7] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
    header::LAST_MODIFIED,
];

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
        if self.cfg.server.debug_headers {
            status.key = Some(key.text.clone());
        }
        let age = HeaderValue::from(obj.times.current_age(now).as_secs());
        // RFC 9110 §13.2.1: preconditions apply only to what would be a 2xx.
        let pre = if obj.status.is_success() {
            evaluate(&ctx.method, &ctx.headers, &obj.headers)
        } else {
            Precondition::Pass
        };
        let mut resp = match pre {
            Precondition::NotModified => {
                let mut h = HeaderMap::new();
                for name in &NOT_MODIFIED_FIELDS {
                    for v in obj.headers.get_all(name) {
                        h.append(name.clone(), v.clone());
                    }
                }
                for v in obj.headers.get_all(header::VIA) {
                    h.append(header::VIA, v.clone());
                }
                let mut r = self.status_only(StatusCode::NOT_MODIFIED);
                *r.headers_mut() = h;
                r
            }
            Precondition::Failed => self.status_only(StatusCode::PRECONDITION_FAILED),
            Precondition::Pass => {
                let body = if ctx.method == Method::HEAD {
                    ProxyBody::Empty
                } else {
                    ProxyBody::stored(obj.clone())
                };
                let mut r = Response::new(body);
                *r.status_mut() = obj.status;
                *r.headers_mut() = obj.headers.clone();
                r
            }
        };
        let h = resp.headers_mut();
        h.insert(header::AGE, age);
        self.add_cache_status(h, &status);
        resp
    }
}
