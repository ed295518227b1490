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

    /// Appends this hop to `Via`.
    pub fn add(&self, headers: &mut HeaderMap, version: Version) {
        let v = if version == Version::HTTP_2 {
            self.h2.clone()
        } else {
            self.h1.clone()
        };
        headers.append(header::VIA, v);
    }
}
