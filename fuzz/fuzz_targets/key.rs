//! Cache keys: `KeyTemplate::key`, `KeyUrl::parse` and purge prefix matching.
//!
//! Builds a template (scheme, host, query mode, header and cookie names) and
//! a request from the input, and checks, beyond not panicking:
//! - the digest is the digest of the key text;
//! - `KeyUrl::parse` reads back the scheme, the normalised host and a target
//!   that starts with the path, and the key matches its own URL as a purge
//!   prefix and its own host;
//! - with a sorted query mode, the order of query parameters does not matter;
//! - `KeyUrl::parse`, `starts_with` and `on_host` take any text.
#![no_main]

use hoard_fuzz::header_map;
use hoard_policy::key::{normalize_host, Digest, KeyInput, KeyTemplate, KeyUrl, QueryKey};
use http::header::HeaderName;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    https: bool,
    key_scheme: bool,
    key_host: bool,
    query_mode: u8,
    query_names: Vec<&'a str>,
    header_names: Vec<&'a str>,
    cookies: Vec<&'a str>,
    host: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fields: &'a [u8],
    other_key: &'a str,
    prefix: &'a str,
}

fuzz_target!(|inp: Input<'_>| {
    let names = || inp.query_names.iter().map(|s| s.to_string()).collect();
    let template = KeyTemplate {
        scheme: inp.key_scheme,
        host: inp.key_host,
        query: match inp.query_mode % 5 {
            0 => QueryKey::All,
            1 => QueryKey::Sorted,
            2 => QueryKey::None,
            3 => QueryKey::Only(names()),
            _ => QueryKey::Except(names()),
        },
        headers: inp
            .header_names
            .iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect(),
        cookies: inp.cookies.iter().map(|s| s.to_string()).collect(),
    };
    let scheme = if inp.https { "https" } else { "http" };
    let headers = header_map(inp.fields);
    let input = KeyInput {
        scheme,
        host: inp.host,
        path: inp.path,
        query: inp.query,
        headers: &headers,
    };
    let key = template.key(input);
    assert_eq!(key.digest, Digest::of(key.text.as_bytes()));

    // A Host or path with a space may hold the slice mark (` slice=`) and cut
    // the key short; such a Host is refused before keying.
    let plain = |s: &str| !s.contains(['|', '#', ' ']);
    let url = KeyUrl::parse(&key.text);
    if plain(inp.host) && plain(inp.path) {
        assert!(url.is_some(), "{key:?}");
    }
    if let (Some(url), true) = (
        url,
        inp.key_scheme
            && inp.key_host
            && plain(inp.host)
            && plain(inp.path)
            && inp.path.starts_with('/'),
    ) {
        let host = normalize_host(inp.host, scheme);
        assert_eq!(url.scheme, scheme);
        assert_eq!(url.host, host);
        assert!(url.target.starts_with(inp.path), "{url:?}");
        assert!(
            url.starts_with(&format!("{scheme}://{host}{}", inp.path)),
            "{url:?}"
        );
        assert!(url.on_host(&host));
    }

    if let (QueryKey::Sorted | QueryKey::Only(_) | QueryKey::Except(_), Some(q)) =
        (&template.query, inp.query)
    {
        let reversed: Vec<&str> = q.split('&').rev().collect();
        let again = template.key(KeyInput {
            query: Some(&reversed.join("&")),
            ..input
        });
        assert_eq!(again, key, "query order must not matter");
    }

    if let Some(other) = KeyUrl::parse(inp.other_key) {
        let _ = other.starts_with(inp.prefix);
        let _ = other.on_host(inp.prefix);
    }
    let _ = normalize_host(inp.prefix, scheme);
});
