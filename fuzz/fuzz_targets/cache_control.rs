//! `Cache-Control` and `CDN-Cache-Control` (RFC 9111 §5.2, RFC 9213).
//!
//! Feeds one value to `CacheControl::parse`, the same bytes as field lines
//! to `from_headers`, `from_structured` and `request_cache_control`, and
//! checks, beyond not panicking:
//! - every delta-seconds is clamped to `DELTA_SECONDS_MAX`;
//! - `split_commas` partitions its input (the pieces join back to it);
//! - printing the parsed directives and parsing them again gives the same
//!   directives (for both the list and the structured form);
//! - a directive list repeated after itself parses the same (first wins);
//! - several lines of visible ASCII parse as their comma-joined value.
#![no_main]

use hoard_fuzz::field_lines;
use hoard_policy::cache_control::{
    delta_secs, split_commas, CacheControl, Delta, DELTA_SECONDS_MAX,
};
use hoard_policy::facts::CDN_CACHE_CONTROL;
use hoard_policy::reuse::request_cache_control;
use http::header::{HeaderMap, HeaderValue, CACHE_CONTROL};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        one_value(s);
    }
    let lines = field_lines(&CACHE_CONTROL, data);
    if let Some(cc) = CacheControl::from_headers(&lines, &CACHE_CONTROL) {
        bounded(&cc);
        let ascii: Option<Vec<&str>> = lines.iter().map(|(_, v)| v.to_str().ok()).collect();
        if let Some(ascii) = ascii {
            if !ascii.iter().any(|l| l.contains('"')) {
                assert_eq!(cc, CacheControl::parse(&ascii.join(", ")));
            }
        }
    }
    bounded(&request_cache_control(&lines));
    let cdn = field_lines(&CDN_CACHE_CONTROL, data);
    if let Some(cc) = CacheControl::from_structured(&cdn, &CDN_CACHE_CONTROL) {
        bounded(&cc);
        let mut again = HeaderMap::new();
        again.insert(
            CDN_CACHE_CONTROL.clone(),
            HeaderValue::from_str(&print(&cc)).expect("printed directives are ASCII"),
        );
        let reparsed = CacheControl::from_structured(&again, &CDN_CACHE_CONTROL);
        assert_eq!(reparsed.as_ref(), Some(&cc), "printed {:?}", print(&cc));
    }
});

fn one_value(s: &str) {
    let cc = CacheControl::parse(s);
    bounded(&cc);
    assert_eq!(split_commas(s).join(","), s);
    if let Some(d) = delta_secs(s) {
        assert!(d <= DELTA_SECONDS_MAX);
    }
    let printed = print(&cc);
    assert_eq!(CacheControl::parse(&printed), cc, "printed {printed:?}");
    if !s.contains(['"', '\\']) {
        assert_eq!(CacheControl::parse(&format!("{s}, {s}")), cc);
    }
}

fn bounded(cc: &CacheControl) {
    for d in [cc.max_age, cc.s_maxage].into_iter().flatten() {
        if let Delta::Secs(s) = d {
            assert!(s <= DELTA_SECONDS_MAX);
        }
    }
    let plain = [
        cc.max_stale.flatten(),
        cc.min_fresh,
        cc.stale_while_revalidate,
        cc.stale_if_error,
    ];
    for s in plain.into_iter().flatten() {
        assert!(s <= DELTA_SECONDS_MAX);
    }
}

/// The directives as a list that both parsers read back the same.
fn print(cc: &CacheControl) -> String {
    let mut out: Vec<String> = Vec::new();
    let delta = |name: &str, d: Delta| match d {
        Delta::Secs(s) => format!("{name}={s}"),
        Delta::Invalid => format!("{name}=x"),
    };
    if let Some(d) = cc.max_age {
        out.push(delta("max-age", d));
    }
    if let Some(d) = cc.s_maxage {
        out.push(delta("s-maxage", d));
    }
    match cc.max_stale {
        Some(Some(s)) => out.push(format!("max-stale={s}")),
        Some(None) => out.push("max-stale".into()),
        None => {}
    }
    if let Some(s) = cc.min_fresh {
        out.push(format!("min-fresh={s}"));
    }
    if let Some(s) = cc.stale_while_revalidate {
        out.push(format!("stale-while-revalidate={s}"));
    }
    if let Some(s) = cc.stale_if_error {
        out.push(format!("stale-if-error={s}"));
    }
    let flags = [
        (cc.no_cache, "no-cache"),
        (cc.no_store, "no-store"),
        (cc.only_if_cached, "only-if-cached"),
        (cc.must_revalidate, "must-revalidate"),
        (cc.proxy_revalidate, "proxy-revalidate"),
        (cc.must_understand, "must-understand"),
        (cc.private, "private"),
        (cc.public, "public"),
        (cc.no_transform, "no-transform"),
        (cc.immutable, "immutable"),
    ];
    out.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| n.to_string()),
    );
    out.join(", ")
}
