//! This hop's `Via` entry (RFC 9110 §7.6.3), built once per configuration.

use http::header::{self, HeaderMap, HeaderValue};
use http::Version;

/// The `Via` values of this proxy for HTTP/1.1 and HTTP/2 messages.
#[derive(Debug, Clone)]
pub struct Via {
    h1: HeaderValue,
    h2: HeaderValue,
}

impl Via {
    /// `1.1 NAME` and `2 NAME` (NAME from `server.via`).
    pub fn new(name: &str) -> Via {
        Via {
            h1: HeaderValue::from_str(&format!("1.1 {name}"))
                .unwrap_or(HeaderValue::from_static("1.1 hoard")),
            h2: HeaderValue::from_str(&format!("2 {name}"))
                .unwrap_or(HeaderValue::from_static("2 hoard")),
        }
    }

    /// Appends this hop to `Via`, as the last entry of one field line: the
    /// earlier hops' lines are joined first (RFC 9110 §5.3: a list field's
    /// lines combine with commas, in order; §7.6.3: each proxy appends), so
    /// a recipient that reads only one line of a field (many origins'
    /// frameworks do) still sees every hop, a cluster's forwarding member
    /// included.
    pub fn add(&self, headers: &mut HeaderMap, version: Version) {
        let v = if version == Version::HTTP_2 {
            &self.h2
        } else {
            &self.h1
        };
        let mut line = Vec::new();
        for earlier in headers.get_all(header::VIA) {
            line.extend_from_slice(earlier.as_bytes());
            line.extend_from_slice(b", ");
        }
        if line.is_empty() {
            headers.insert(header::VIA, v.clone());
            return;
        }
        line.extend_from_slice(v.as_bytes());
        match HeaderValue::from_bytes(&line) {
            Ok(joined) => {
                headers.insert(header::VIA, joined);
            }
            Err(_) => {
                headers.append(header::VIA, v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_earlier_hops_into_one_line() {
        let via = Via::new("hoard");
        let mut h = HeaderMap::new();
        via.add(&mut h, Version::HTTP_11);
        assert_eq!(
            h.get_all(header::VIA).iter().collect::<Vec<_>>(),
            ["1.1 hoard"]
        );
        let mut h = HeaderMap::new();
        h.append(header::VIA, HeaderValue::from_static("1.0 edge"));
        h.append(header::VIA, HeaderValue::from_static("1.1 n1, 2 n2"));
        via.add(&mut h, Version::HTTP_2);
        assert_eq!(
            h.get_all(header::VIA).iter().collect::<Vec<_>>(),
            ["1.0 edge, 1.1 n1, 2 n2, 2 hoard"]
        );
    }
}
