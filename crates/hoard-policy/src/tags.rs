//! Purge tags (surrogate keys) that an origin attaches to a response.
//!
//! `Surrogate-Key` lists tags separated by spaces (Fastly, Varnish
//! xkey); `Cache-Tag` separates them with commas (Cloudflare). Both may
//! repeat. Tags are compared as sent (case-sensitive).

use http::header::{HeaderMap, HeaderName};

/// `Surrogate-Key`: space-separated tags.
pub const SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");
/// `Cache-Tag`: comma-separated tags.
pub const CACHE_TAG: HeaderName = HeaderName::from_static("cache-tag");

/// Longest tag kept; longer ones are ignored (they cannot be meant as names).
pub const MAX_TAG_LEN: usize = 256;

/// The tags of a response, deduplicated, in first-seen order.
pub fn tags(headers: &HeaderMap) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    let split = |name: &HeaderName, sep: fn(char) -> bool| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(move |v| v.split(sep))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= MAX_TAG_LEN)
            .collect::<Vec<&str>>()
    };
    for t in split(&SURROGATE_KEY, |c| c == ' ' || c == '\t')
        .into_iter()
        .chain(split(&CACHE_TAG, |c| c == ','))
    {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Removes the tag fields (before a response goes to a client).
pub fn strip(headers: &mut HeaderMap) {
    // Most responses carry neither: comparing the few names is cheaper than
    // two hashed removals on every hit.
    if headers
        .keys()
        .any(|name| name == SURROGATE_KEY || name == CACHE_TAG)
    {
        headers.remove(SURROGATE_KEY);
        headers.remove(CACHE_TAG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_fields_split_deduplicated() {
        let mut h = HeaderMap::new();
        h.append("surrogate-key", "product-42  home".parse().unwrap());
        h.append("surrogate-key", "cat-7".parse().unwrap());
        h.append("cache-tag", "home, news,,product-42".parse().unwrap());
        assert_eq!(tags(&h), ["product-42", "home", "cat-7", "news"]);
        strip(&mut h);
        assert!(h.is_empty());
        assert!(tags(&h).is_empty());
    }
}
