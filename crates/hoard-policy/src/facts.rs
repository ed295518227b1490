//! What a response says about caching, read once from its header fields.
//!
//! [`ResponseFacts::read`] applies the operator's overrides (like nginx
//! `proxy_ignore_headers`) and RFC 9213: when `CDN-Cache-Control` is present it
//! is used *instead of* `Cache-Control` and `Expires` (RFC 9213 §2.1); the
//! original fields are still forwarded downstream unchanged.

use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderName};

use crate::cache_control::CacheControl;
use crate::config::CachePolicy;

/// `CDN-Cache-Control` (RFC 9213).
pub static CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// The `Expires` field (RFC 9111 §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expires {
    /// A valid HTTP-date.
    At(SystemTime),
    /// Present but not a valid HTTP-date: "a time in the past" (§5.3).
    Invalid,
}

/// Which field the caching directives came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectiveSource {
    /// `CDN-Cache-Control` (RFC 9213).
    CdnCacheControl,
    /// `Cache-Control` (RFC 9111 §5.2).
    CacheControl,
    /// Neither (absent or ignored by configuration).
    None,
}

/// The caching-relevant facts of a response.
#[derive(Debug, Clone)]
pub struct ResponseFacts {
    /// Status code.
    pub status: u16,
    /// Effective directives (see the module doc).
    pub cc: CacheControl,
    /// Where `cc` came from.
    pub source: DirectiveSource,
    /// `Date` (RFC 9110 §6.6.1), if valid.
    pub date: Option<SystemTime>,
    /// `Expires`, unless ignored or overridden by `CDN-Cache-Control`.
    pub expires: Option<Expires>,
    /// `Last-Modified` (RFC 9110 §8.8.2), if valid.
    pub last_modified: Option<SystemTime>,
    /// `Age` (RFC 9111 §5.1), `None` when absent or invalid.
    pub age: Option<u64>,
    /// True when the response carries `Set-Cookie` and the policy does not ignore it.
    pub set_cookie: bool,
    /// True for `Vary: *` (unless Vary is ignored).
    pub vary_star: bool,
    /// True when an `ETag` or `Last-Modified` allows revalidation (§4.3.1).
    pub has_validator: bool,
}

impl ResponseFacts {
    /// Reads the facts from a response's status and headers.
    pub fn read(status: u16, headers: &HeaderMap, policy: &CachePolicy) -> ResponseFacts {
        let cdn = if policy.ignore_cdn_cache_control {
            None
        } else {
            CacheControl::from_structured(headers, &CDN_CACHE_CONTROL)
        };
        let (cc, source) = match cdn {
            Some(cc) => (cc, DirectiveSource::CdnCacheControl),
            None if !policy.ignore_cache_control => {
                match CacheControl::from_headers(headers, &header::CACHE_CONTROL) {
                    Some(cc) => (cc, DirectiveSource::CacheControl),
                    None => (CacheControl::default(), DirectiveSource::None),
                }
            }
            None => (CacheControl::default(), DirectiveSource::None),
        };
        let expires = if policy.ignore_expires || source == DirectiveSource::CdnCacheControl {
            None
        } else {
            headers
                .get(header::EXPIRES)
                .map(|v| match v.to_str().ok().and_then(parse_date) {
                    Some(t) => Expires::At(t),
                    None => Expires::Invalid,
                })
        };
        // §5.1: a list is invalid; use the first member of the first line.
        let age = headers
            .get(header::AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.split(',').next())
            .and_then(crate::cache_control::delta_secs);
        let vary_star = !policy.ignore_vary
            && headers.get_all(header::VARY).iter().any(|v| {
                v.to_str()
                    .map(|s| s.split(',').any(|t| t.trim() == "*"))
                    .unwrap_or(false)
            });
        ResponseFacts {
            status,
            cc,
            source,
            date: date_header(headers, &header::DATE),
            expires,
            last_modified: date_header(headers, &header::LAST_MODIFIED),
            age,
            set_cookie: !policy.ignore_set_cookie && headers.contains_key(header::SET_COOKIE),
            vary_star,
            has_validator: headers.contains_key(header::ETAG)
                || headers.contains_key(header::LAST_MODIFIED),
        }
    }
}

/// Parses an HTTP-date in any of the three formats of RFC 9110 §5.6.7.
pub fn parse_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// The first `name` line parsed as an HTTP-date.
pub fn date_header(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_date)
}
