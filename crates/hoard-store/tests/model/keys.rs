//! The model test's keys and what is stored for them: each key's text,
//! digests, request, tag and variants, and each version's body, headers,
//! times and head, all derived from the key and version numbers.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::key::Digest;
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use hoard_store::disk::format::Head;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::{KEYS, VARYING};

// ---------------------------------------------------------------- keys

pub(crate) fn varies(key: u8) -> bool {
    key >= KEYS - VARYING
}

pub(crate) fn key_text(key: u8) -> String {
    format!("http|h{}|/d{}/k{key}", key % 2, key % 3)
}

pub(crate) fn primary(key: u8) -> Digest {
    Digest::of(key_text(key).as_bytes())
}

/// The request a lookup or fill of this variant sends.
pub(crate) fn request(key: u8, var: u8) -> HeaderMap {
    let mut h = HeaderMap::new();
    if varies(key) {
        h.insert(
            "accept-encoding",
            HeaderValue::from_static(if var == 0 { "gzip" } else { "br" }),
        );
    }
    h
}

/// A key's tag (every response of a key carries the same one).
pub(crate) fn tag(key: u8) -> Option<String> {
    (key % 3 != 2).then(|| format!("t{}", key % 3))
}

pub(crate) fn var_of(key: u8, var: u8) -> u8 {
    if varies(key) {
        var
    } else {
        0
    }
}

pub(crate) fn body(key: u8, version: u64, len: u32) -> Bytes {
    let seed = (u64::from(key) << 40) ^ version.wrapping_mul(0x100_0001);
    (0..len as u64)
        .map(|i| (seed.wrapping_add(i.wrapping_mul(0x9E37)) >> 3) as u8)
        .collect::<Vec<u8>>()
        .into()
}

pub(crate) fn headers(key: u8, head_version: u64, len: u32) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-version", HeaderValue::from(head_version));
    h.insert("content-length", HeaderValue::from(len));
    if varies(key) {
        h.insert("vary", HeaderValue::from_static("Accept-Encoding"));
    }
    if let Some(t) = tag(key) {
        h.insert("surrogate-key", t.parse().unwrap());
    }
    h
}

pub(crate) fn times(now: SystemTime) -> StoredTimes {
    StoredTimes {
        request_time: now,
        response_time: now,
        date: now,
        age_value: None,
        lifetime: Duration::from_secs(600),
    }
}

pub(crate) fn rules() -> StoredRules {
    StoredRules::new(&CacheControl::default(), None, None)
}

pub(crate) fn head(key: u8, head_version: u64, len: u32, now: SystemTime) -> Head {
    let h = headers(key, head_version, len);
    Head {
        key: key_text(key),
        vary: VaryNames::from_response(&h),
        status: StatusCode::OK,
        headers: h,
        times: times(now),
        lifetime_source: LifetimeSource::MaxAge,
        rules: rules(),
        parts: Vec::new(),
    }
}

pub(crate) fn variant_digest(key: u8, var: u8) -> Digest {
    VaryNames::from_response(&headers(key, 0, 0)).variant(&request(key, var))
}
