//! Request targets and Host: `target::normalise_path_and_query` and
//! `target::normalise_authority`, then the key made from their result.
//!
//! Beyond not panicking, checks that:
//! - normalising is idempotent (the normal form is its own normal form, and
//!   is borrowed rather than copied);
//! - a normal path starts with `/` (or is `*`) and has no dot segments;
//! - a normal authority is lower case and holds only host and port
//!   characters, so it never carries the key's separators (`|`, `#`, space);
//! - a key made from a normal authority and path splits back into them.
#![no_main]

use std::borrow::Cow;

use hoard_policy::key::{normalize_host, KeyInput, KeyTemplate, KeyUrl};
use hoard_policy::target::{normalise_authority, normalise_path_and_query};
use http::HeaderMap;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    https: bool,
    authority: &'a str,
    path: &'a str,
    query: Option<&'a str>,
}

fuzz_target!(|inp: Input<'_>| {
    let scheme = if inp.https { "https" } else { "http" };
    let target = normalise_path_and_query(inp.path, inp.query);
    if let Ok((path, query)) = &target {
        let again = normalise_path_and_query(path, query.as_deref()).expect("normal form");
        assert_eq!(again.0, *path);
        assert_eq!(again.1, *query);
        assert!(
            matches!(again.0, Cow::Borrowed(_)),
            "{path:?} changed again"
        );
        assert!(path.as_ref() == "*" || path.starts_with('/'));
        if path.as_ref() != "*" {
            assert!(path.split('/').all(|s| s != "." && s != ".."), "{path:?}");
        }
    }
    let authority = normalise_authority(inp.authority, scheme);
    if let Ok(host) = &authority {
        let again = normalise_authority(host, scheme).expect("normal form");
        assert_eq!(again, *host);
        assert!(matches!(again, Cow::Borrowed(_)), "{host:?} changed again");
        assert!(
            host.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._:[]".contains(&b)),
            "{host:?}"
        );
    }
    if let (Ok((path, query)), Ok(host)) = (&target, &authority) {
        if !path.contains(['|', '#', ' ']) {
            let headers = HeaderMap::new();
            let key = KeyTemplate::default().key(KeyInput {
                scheme,
                host,
                path,
                query: query.as_deref(),
                headers: &headers,
            });
            let url = KeyUrl::parse(&key.text).expect("a normal key splits");
            assert_eq!(url.scheme, scheme);
            assert_eq!(url.host, normalize_host(host, scheme));
            assert!(url.target.starts_with(path.as_ref()), "{url:?}");
        }
    }
});
