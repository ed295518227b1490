//! The `Cache-Status` response field (RFC 9211).
//!
//! Every response hoard sends carries one entry naming hoard, e.g.
//! `hoard; hit; ttl=42` or `hoard; fwd=uri-miss; fwd-status=200; stored; ttl=60`.

use std::fmt::Write;

/// Why the request went forward to the origin (RFC 9211 §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Nothing stored under the URI.
    UriMiss,
    /// Something stored under the URI, but no variant matched.
    VaryMiss,
    /// A stored response was stale.
    Stale,
    /// The request's directives required going forward.
    Request,
    /// hoard was configured not to use the cache (or the request is not cacheable).
    Bypass,
    /// The method is not cacheable.
    Method,
}

impl Fwd {
    /// The RFC 9211 token.
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Stale => "stale",
            Fwd::Request => "request",
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
        }
    }
}

/// One `Cache-Status` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Served from cache without going forward (possibly after a 304).
    pub hit: bool,
    /// Why the request went forward.
    pub fwd: Option<Fwd>,
    /// Status the origin answered with.
    pub fwd_status: Option<u16>,
    /// The response was stored.
    pub stored: bool,
    /// The request was collapsed onto another's fill.
    pub collapsed: bool,
    /// Freshness left in seconds (negative when stale).
    pub ttl: Option<i64>,
    /// The cache key, only with debugging on.
    pub key: Option<String>,
    /// Extra detail, e.g. why a response was not stored.
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// Serializes the entry as a structured-field list member, named `name`.
    pub fn to_header(&self, name: &str) -> String {
        let mut s = String::with_capacity(64);
        s.push_str(name);
        if self.hit {
            s.push_str("; hit");
        }
        if let Some(f) = self.fwd {
            let _ = write!(s, "; fwd={}", f.as_str());
        }
        if let Some(st) = self.fwd_status {
            let _ = write!(s, "; fwd-status={st}");
        }
        if self.stored {
            s.push_str("; stored");
        }
        if self.collapsed {
            s.push_str("; collapsed");
        }
        if let Some(ttl) = self.ttl {
            let _ = write!(s, "; ttl={ttl}");
        }
        if let Some(k) = &self.key {
            s.push_str("; key=\"");
            for c in k.chars() {
                match c {
                    '"' | '\\' => {
                        s.push('\\');
                        s.push(c);
                    }
                    ' '..='~' => s.push(c),
                    _ => s.push('?'),
                }
            }
            s.push('"');
        }
        if let Some(d) = self.detail {
            let _ = write!(s, "; detail={d}");
        }
        s
    }
}

/// RFC 9211 ttl in whole seconds from signed milliseconds (floored).
pub fn ttl_secs(millis: i64) -> i64 {
    millis.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format() {
        let hit = CacheStatus {
            hit: true,
            ttl: Some(5),
            ..Default::default()
        };
        assert_eq!(hit.to_header("hoard"), "hoard; hit; ttl=5");
        let miss = CacheStatus {
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(200),
            stored: true,
            ttl: Some(60),
            key: Some("http|h|/\"x\"".into()),
            ..Default::default()
        };
        assert_eq!(
            miss.to_header("hoard"),
            "hoard; fwd=uri-miss; fwd-status=200; stored; ttl=60; key=\"http|h|/\\\"x\\\"\""
        );
        let pass = CacheStatus {
            fwd: Some(Fwd::Bypass),
            fwd_status: Some(200),
            detail: Some("private"),
            ..Default::default()
        };
        assert_eq!(
            pass.to_header("hoard"),
            "hoard; fwd=bypass; fwd-status=200; detail=private"
        );
        assert_eq!(ttl_secs(-500), -1);
        assert_eq!(ttl_secs(1999), 1);
    }
}
