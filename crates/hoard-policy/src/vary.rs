//! Vary: choosing among variants of one URL (RFC 9111 §4.1).
//!
//! A response's `Vary` names become a sorted, deduplicated [`VaryNames`]. The
//! variant of a request is the digest of the *normalized* values of those
//! fields in the request; two requests whose values normalize to the same text
//! share a variant. Normalization (§4.1 allows it) joins field lines with `,`,
//! trims list members and collapses white space; for `Accept-Encoding` it also
//! lowercases and sorts the members, so `gzip, br` and `br,gzip` match; for
//! `Accept-Language` it lowercases them (`en-US` = `en-us`).

use http::header::{HeaderMap, HeaderName, ACCEPT_ENCODING, ACCEPT_LANGUAGE, VARY};

use crate::key::Digest;

/// The field names a response varies on (never `*`: such responses are not stored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VaryNames(pub Vec<HeaderName>);

impl VaryNames {
    /// Reads `Vary` from response headers.
    pub fn from_response(headers: &HeaderMap) -> VaryNames {
        let mut names: Vec<HeaderName> = headers
            .get_all(VARY)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|s| s.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        VaryNames(names)
    }

    /// True when the response does not vary.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The variant digest of a request for these names. `Digest(0)` when empty.
    pub fn variant(&self, request: &HeaderMap) -> Digest {
        if self.0.is_empty() {
            return Digest(0);
        }
        let mut text = String::new();
        for name in &self.0 {
            text.push_str(name.as_str());
            match normalized(name, request) {
                Some(v) => {
                    text.push('=');
                    text.push_str(&v);
                }
                None => text.push('!'),
            }
            text.push('\n');
        }
        Digest::of(text.as_bytes())
    }
}

/// The normalized value of `name` in a request, `None` when absent.
pub fn normalized(name: &HeaderName, request: &HeaderMap) -> Option<String> {
    let mut lines = request.get_all(name).iter().peekable();
    lines.peek()?;
    let mut members: Vec<String> = lines
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .map(|m| m.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|m| !m.is_empty())
        .collect();
    if name == ACCEPT_LANGUAGE {
        for m in &mut members {
            *m = m.to_ascii_lowercase();
        }
    }
    if name == ACCEPT_ENCODING {
        for m in &mut members {
            *m = m.to_ascii_lowercase().replace(' ', "");
        }
        members.sort_unstable();
    }
    Some(members.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn names_and_variants() {
        let names = VaryNames::from_response(&h(&[
            ("vary", "Accept-Encoding, X-A"),
            ("vary", "accept-encoding"),
        ]));
        assert_eq!(names.0.len(), 2);
        let a = names.variant(&h(&[("accept-encoding", "gzip, br"), ("x-a", "1")]));
        let b = names.variant(&h(&[("accept-encoding", "br,GZIP"), ("x-a", " 1 ")]));
        let c = names.variant(&h(&[("accept-encoding", "gzip")]));
        let d = names.variant(&h(&[("accept-encoding", "gzip"), ("x-a", "")]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(c, d, "absent and empty differ");
        assert_eq!(VaryNames::default().variant(&h(&[])), Digest(0));
    }
}
