//! Request targets in one normal form, so that what is keyed and what is
//! forwarded are the same text.
//!
//! Two requests that differ only in ways RFC 3986 §6.2.2 calls equivalent
//! (`%7E` and `~`, `%c3` and `%C3`, `/a/./b` and `/a/b`) share one key and
//! reach the origin in one form: the normalised target replaces the client's
//! before routing, keying and forwarding. What cannot be normalised safely is
//! refused (400): a malformed or NUL percent-encoding, dot segments that climb
//! above the root, a Host that is not a host, an absolute-form target whose
//! authority disagrees with Host (RFC 9112 §3.2.2, RFC 9113 §8.3.1).
//!
//! Encoded reserved characters (`%2F`, `%3F`, ...) keep their encoding: the
//! origin may give them a meaning of their own, so they stay distinct.

use std::borrow::Cow;
use std::fmt;

/// Why a request target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// `%` not followed by two hex digits.
    BadPercentEncoding,
    /// `%00`: a NUL byte is never a valid part of a path or query.
    EncodedNul,
    /// `..` segments climb above the root (`/../etc/passwd`).
    AboveRoot,
    /// The path does not start with `/` (nor is `*`).
    NotOriginForm,
    /// The host is empty where one is needed, or holds characters a host cannot.
    BadHost,
    /// The port is not a number from 0 to 65535.
    BadPort,
    /// Userinfo (`user@host`) in an authority (RFC 9110 §4.2.4).
    UserInfo,
    /// The absolute-form target's authority and the Host field name different hosts.
    HostMismatch,
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TargetError::BadPercentEncoding => "malformed percent-encoding in the request target",
            TargetError::EncodedNul => "encoded NUL (%00) in the request target",
            TargetError::AboveRoot => "dot segments climb above the root",
            TargetError::NotOriginForm => "request target is not a path",
            TargetError::BadHost => "invalid host",
            TargetError::BadPort => "invalid port",
            TargetError::UserInfo => "userinfo in the authority (RFC 9110 §4.2.4)",
            TargetError::HostMismatch => {
                "Host differs from the target's authority (RFC 9112 §3.2.2)"
            }
        })
    }
}

impl std::error::Error for TargetError {}

/// `path` and optional `query` in normal form (RFC 3986 §6.2.2): unreserved
/// characters decoded, other percent-encodings in upper-case hex, dot
/// segments of the path removed (§5.2.4). Borrows when nothing changes,
/// which is the common case.
pub fn normalise_path_and_query<'a>(
    path: &'a str,
    query: Option<&'a str>,
) -> Result<(Cow<'a, str>, Option<Cow<'a, str>>), TargetError> {
    if path == "*" {
        return Ok((Cow::Borrowed(path), query.map(Cow::Borrowed)));
    }
    if !path.starts_with('/') {
        return Err(TargetError::NotOriginForm);
    }
    let path = normalise_percent(path)?;
    let path = match remove_dot_segments(&path)? {
        Some(resolved) => Cow::Owned(resolved),
        None => path,
    };
    let query = query.map(normalise_percent).transpose()?;
    Ok((path, query))
}

/// RFC 3986 §6.2.2.1 and §6.2.2.2.
fn normalise_percent(s: &str) -> Result<Cow<'_, str>, TargetError> {
    let bytes = s.as_bytes();
    let Some(first) = bytes.iter().position(|&b| b == b'%') else {
        return Ok(Cow::Borrowed(s));
    };
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..first]);
    let mut i = first;
    let mut changed = false;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            // Plain bytes are copied up to the next `%` (keeps UTF-8 whole).
            let end = bytes[i..]
                .iter()
                .position(|&b| b == b'%')
                .map_or(bytes.len(), |p| i + p);
            out.push_str(&s[i..end]);
            i = end;
            continue;
        }
        let (Some(h), Some(l)) = (
            bytes.get(i + 1).and_then(|&c| hex(c)),
            bytes.get(i + 2).and_then(|&c| hex(c)),
        ) else {
            return Err(TargetError::BadPercentEncoding);
        };
        let decoded = h << 4 | l;
        if decoded == 0 {
            return Err(TargetError::EncodedNul);
        }
        if is_unreserved(decoded) {
            out.push(decoded as char);
            changed = true;
        } else {
            out.push('%');
            out.push(HEX[usize::from(h)] as char);
            out.push(HEX[usize::from(l)] as char);
            changed |= bytes[i + 1] != HEX[usize::from(h)] || bytes[i + 2] != HEX[usize::from(l)];
        }
        i += 3;
    }
    Ok(if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(s)
    })
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986 §2.3.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §5.2.4 on an absolute path; `None` when there is nothing to
/// remove. Unlike the RFC (which drops them), `..` segments above the root
/// are refused: an origin that resolves them itself would see another path.
fn remove_dot_segments(path: &str) -> Result<Option<String>, TargetError> {
    // A dot segment starts with "/."; most paths have none.
    let has_dots = path.as_bytes().windows(2).any(|w| w == b"/.")
        && path.split('/').any(|seg| seg == "." || seg == "..");
    if !has_dots {
        return Ok(None);
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.pop().is_none() {
                    return Err(TargetError::AboveRoot);
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut resolved = String::with_capacity(path.len());
    for seg in &out {
        resolved.push('/');
        resolved.push_str(seg);
    }
    if resolved.is_empty() {
        resolved.push('/');
    }
    Ok(Some(resolved))
}

/// An authority (`host[:port]`) in normal form: host lower-cased, a trailing
/// dot removed, the port dropped when it is the scheme's default (RFC 9110
/// §4.2.3) or empty. Refuses userinfo, bad characters and bad ports. An
/// empty authority stays empty (HTTP/1.0 without Host).
pub fn normalise_authority<'a>(
    authority: &'a str,
    scheme: &str,
) -> Result<Cow<'a, str>, TargetError> {
    if authority.is_empty() || already_normal(authority.as_bytes(), scheme) {
        return Ok(Cow::Borrowed(authority));
    }
    if authority.contains('@') {
        return Err(TargetError::UserInfo);
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (literal, after) = rest.split_once(']').ok_or(TargetError::BadHost)?;
        if literal.is_empty()
            || !literal
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(TargetError::BadHost);
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(TargetError::BadPort)?),
        };
        (&authority[..literal.len() + 2], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => {
            if p.len() > 5
                || !p.bytes().all(|b| b.is_ascii_digit())
                || p.parse::<u32>().map_or(true, |n| n > 65535)
            {
                return Err(TargetError::BadPort);
            }
            match (scheme, p) {
                ("http", "80") | ("https", "443") => None,
                _ => Some(p),
            }
        }
    };
    let host = if host.starts_with('[') {
        host
    } else {
        let trimmed = host.strip_suffix('.').unwrap_or(host);
        if trimmed.is_empty()
            || trimmed.starts_with('.')
            || trimmed.ends_with('.')
            || !trimmed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        {
            return Err(TargetError::BadHost);
        }
        trimmed
    };
    let unchanged = port.map_or(host.len(), |p| host.len() + 1 + p.len()) == authority.len()
        && !host.bytes().any(|b| b.is_ascii_uppercase());
    if unchanged {
        return Ok(Cow::Borrowed(authority));
    }
    let mut out = host.to_ascii_lowercase();
    if let Some(p) = port {
        out.push(':');
        out.push_str(p);
    }
    Ok(Cow::Owned(out))
}

/// One pass over the common case: a lower-case `host` or `host:port` with
/// a port that is not the scheme's default, in normal form already.
fn already_normal(b: &[u8], scheme: &str) -> bool {
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => {}
            b'.' if i > 0 && b[i - 1] != b'.' => {}
            b':' => break,
            _ => return false,
        }
        i += 1;
    }
    if i == 0 || b[i - 1] == b'.' {
        return false;
    }
    if i == b.len() {
        return true;
    }
    let port = &b[i + 1..];
    if port.is_empty() || port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let n = port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => 0,
    };
    n <= 65535 && n != default && port[0] != b'0'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pq(path: &str, query: Option<&str>) -> Result<(String, Option<String>), TargetError> {
        normalise_path_and_query(path, query).map(|(p, q)| (p.into_owned(), q.map(Cow::into_owned)))
    }

    #[test]
    fn unreserved_are_decoded_and_hex_upper_cased() {
        assert_eq!(pq("/%7Euser/%41b", None).unwrap().0, "/~user/Ab");
        assert_eq!(pq("/caf%c3%a9", None).unwrap().0, "/caf%C3%A9");
        assert_eq!(pq("/a", Some("q=%7e%2f")).unwrap().1.unwrap(), "q=~%2F");
    }

    #[test]
    fn reserved_encodings_stay_encoded() {
        assert_eq!(pq("/a%2Fb", None).unwrap().0, "/a%2Fb");
        assert_eq!(pq("/a%3fb", None).unwrap().0, "/a%3Fb");
    }

    #[test]
    fn unchanged_targets_borrow() {
        let (p, q) = normalise_path_and_query("/a/b.html", Some("x=1")).unwrap();
        assert!(matches!(p, Cow::Borrowed(_)));
        assert!(matches!(q, Some(Cow::Borrowed(_))));
        let (p, _) = normalise_path_and_query("/a%2Fb", None).unwrap();
        assert!(matches!(p, Cow::Borrowed(_)));
    }

    #[test]
    fn dot_segments_are_resolved() {
        assert_eq!(pq("/a/./b/../c", None).unwrap().0, "/a/c");
        assert_eq!(pq("/a/b/..", None).unwrap().0, "/a/");
        assert_eq!(pq("/a/.", None).unwrap().0, "/a/");
        assert_eq!(pq("/a/%2e%2E/b", None).unwrap().0, "/b");
        assert_eq!(pq("/..a/.b", None).unwrap().0, "/..a/.b");
        assert_eq!(pq("/.", None).unwrap().0, "/");
    }

    #[test]
    fn unsafe_targets_are_refused() {
        assert_eq!(pq("/../etc/passwd", None), Err(TargetError::AboveRoot));
        assert_eq!(pq("/a/%2e%2e/..", None), Err(TargetError::AboveRoot));
        assert_eq!(pq("/a%zz", None), Err(TargetError::BadPercentEncoding));
        assert_eq!(pq("/a%4", None), Err(TargetError::BadPercentEncoding));
        assert_eq!(pq("/a", Some("x=%")), Err(TargetError::BadPercentEncoding));
        assert_eq!(pq("/a%00b", None), Err(TargetError::EncodedNul));
        assert_eq!(pq("a/b", None), Err(TargetError::NotOriginForm));
        assert_eq!(pq("*", None).unwrap().0, "*");
    }

    #[test]
    fn authorities_are_normalised() {
        let n = |a: &str, s: &str| normalise_authority(a, s).map(Cow::into_owned);
        assert_eq!(n("Example.COM.:80", "http").unwrap(), "example.com");
        assert_eq!(n("example.com:443", "https").unwrap(), "example.com");
        assert_eq!(n("example.com:443", "http").unwrap(), "example.com:443");
        assert_eq!(n("example.com:", "http").unwrap(), "example.com");
        assert_eq!(n("[::1]:8080", "http").unwrap(), "[::1]:8080");
        assert_eq!(n("[::1]:80", "http").unwrap(), "[::1]");
        assert_eq!(n("", "http").unwrap(), "");
        assert!(matches!(
            normalise_authority("a.example:81", "http"),
            Ok(Cow::Borrowed(_))
        ));
        assert!(matches!(
            normalise_authority("a.example", "http"),
            Ok(Cow::Borrowed(_))
        ));
        for bad in [
            "a..b",
            ".a",
            "a.",
            "a:080",
            "a:",
            "a:80",
            "A.example",
            "a:99999",
            "a@b",
        ] {
            assert!(!already_normal(bad.as_bytes(), "http"), "{bad}");
        }
        assert_eq!(n("a:080", "http").unwrap(), "a:080");
        assert_eq!(n("u@example.com", "http"), Err(TargetError::UserInfo));
        assert_eq!(n("exa mple.com", "http"), Err(TargetError::BadHost));
        assert_eq!(n("example.com:99999", "http"), Err(TargetError::BadPort));
        assert_eq!(n("example.com:8x", "http"), Err(TargetError::BadPort));
        assert_eq!(n(":80", "http"), Err(TargetError::BadHost));
        assert_eq!(n("a..", "http"), Err(TargetError::BadHost));
        assert_eq!(n("[zz]", "http"), Err(TargetError::BadHost));
        assert_eq!(n("[::1]x", "http"), Err(TargetError::BadPort));
    }
}
