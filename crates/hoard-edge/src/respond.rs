//! A route that answers by itself, without an upstream (nginx `return 200
//! "ok"` in a `location`): `respond = { status = 200, body = "ok" }` or
//! `respond = { status = 503, body_file = "maintenance.html" }`, for health
//! checks, `robots.txt` and maintenance pages.
//!
//! Built once when the configuration is read (the body's bytes and the
//! fields are shared by every answer). It answers after the route's
//! redirect, limits, `allow`/`deny` and `basic_auth` (so they protect it),
//! and before any lookup: the answer is never stored and never reaches an
//! origin. The route's `response_headers` apply to it as to any answer.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH};
use http::StatusCode;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Respond {
    /// The status, 200 to 599.
    pub status: StatusCode,
    /// The body (empty for none).
    pub body: Bytes,
    /// `Content-Type`, `Content-Length` and the configured `headers`.
    pub headers: HeaderMap,
}

impl Respond {
    /// A fixed answer; `Content-Length` is set from `body` (RFC 9110
    /// §8.6), except for a 204 or 304, which have no body to measure.
    pub fn new(status: StatusCode, body: Bytes, mut headers: HeaderMap) -> Respond {
        if !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        Respond {
            status,
            body,
            headers,
        }
    }
}
