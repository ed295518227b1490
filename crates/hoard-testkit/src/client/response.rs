//! What the raw client got back: a [`Response`] with chainable assertions, or a
//! [`ClientError`] that tells a truncated body apart from a complete one.

use std::fmt;
use std::io;
use std::time::Duration;

use bytes::Bytes;

use crate::{check, wire};

/// A complete response. The `expect_*` methods panic with a readable message
/// that includes the request, the status line, all headers and the body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// Header fields in received order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The decoded body (empty for HEAD, 1xx, 204 and 304).
    pub body: Bytes,
    /// `client c1: GET /a`, for messages.
    ctx: String,
}

impl Response {
    pub(crate) fn new(
        ctx: String,
        status: u16,
        reason: String,
        headers: Vec<(String, String)>,
    ) -> Self {
        Self {
            status,
            reason,
            headers,
            body: Bytes::new(),
            ctx,
        }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        wire::find(&self.headers, name)
    }

    /// Every value of header `name` (case-insensitive), in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        wire::find_all(&self.headers, name).collect()
    }

    /// The `Cache-Status` header (RFC 9211), if any.
    pub fn cache_status(&self) -> Option<&str> {
        self.header("cache-status")
    }

    /// The parameters of hoard's entry in `Cache-Status` (RFC 9211): the
    /// last list member named `hoard`, split on `;` outside quoted strings,
    /// e.g. `["hit", "ttl=60", "key=\"http|h|/\""]`.
    pub fn cache_params(&self) -> Vec<String> {
        cache_status_params(&self.header_all("cache-status").join(", "))
    }

    /// Asserts hoard's `Cache-Status` entry has each of the `;`-separated
    /// parameters in `want`, exactly (`hit` does not match `hit-for-pass`,
    /// `ttl=6` does not match `ttl=60`). A leading `hoard` is the entry's
    /// name and is skipped.
    #[track_caller]
    pub fn expect_cache_status(&self, want: &str) -> &Self {
        let have = self.cache_params();
        for w in split_outside_quotes(want, ';') {
            let w = w.trim();
            if w.is_empty() || w == "hoard" {
                continue;
            }
            if !have.iter().any(|h| h == w) {
                self.fail(format_args!(
                    "expected Cache-Status parameter {w:?}, hoard's entry has {have:?}"
                ));
            }
        }
        self
    }

    /// The body as text (lossy UTF-8).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts the status code.
    #[track_caller]
    pub fn expect_status(&self, status: u16) -> &Self {
        if self.status != status {
            self.fail(format_args!(
                "expected status {status}, got {}",
                self.status
            ));
        }
        self
    }

    /// Asserts that the first `name` header equals `value`.
    #[track_caller]
    pub fn expect_header(&self, name: &str, value: &str) -> &Self {
        self.check(check::header_is(&self.headers, name, value))
    }

    /// Asserts that the first `name` header contains `part`.
    #[track_caller]
    pub fn expect_header_contains(&self, name: &str, part: &str) -> &Self {
        self.check(check::header_contains(&self.headers, name, part))
    }

    /// Asserts that there is no `name` header.
    #[track_caller]
    pub fn expect_no_header(&self, name: &str) -> &Self {
        self.check(check::no_header(&self.headers, name))
    }

    /// Asserts the body.
    #[track_caller]
    pub fn expect_body(&self, body: impl AsRef<[u8]>) -> &Self {
        self.check(check::body_is(&self.body, body.as_ref()))
    }

    /// Asserts the body length.
    #[track_caller]
    pub fn expect_body_len(&self, len: usize) -> &Self {
        if self.body.len() != len {
            self.fail(format_args!(
                "expected a body of {len} bytes, got {}",
                self.body.len()
            ));
        }
        self
    }

    #[track_caller]
    fn check(&self, result: Result<(), String>) -> &Self {
        if let Err(what) = result {
            self.fail(format_args!("{what}"));
        }
        self
    }

    #[track_caller]
    fn fail(&self, what: fmt::Arguments<'_>) -> ! {
        panic!("{}: {what}\nresponse:\n{}", self.ctx, self.dump())
    }

    /// Status line, headers and body, indented, for messages.
    pub fn dump(&self) -> String {
        let start = format!("  HTTP/1.1 {} {}", self.status, self.reason);
        let mut s = wire::fmt_head(&start, &self.headers).replace("\n  ", "\n    ");
        s.push_str(&format!(
            "\n    ({} body bytes) {}",
            self.body.len(),
            wire::show(&self.body)
        ));
        s
    }
}

/// Why no complete response was obtained.
#[derive(Debug)]
pub enum ClientError {
    /// The TCP connection could not be established.
    Connect(io::Error),
    /// The peer closed (or reset) before a complete response head arrived.
    ClosedBeforeResponse(String),
    /// The head could not be parsed, or its framing headers are invalid.
    BadResponse(String),
    /// The head arrived but the body did not: connection closed mid-body, fewer
    /// bytes than `Content-Length`, or broken chunked framing. `response.body`
    /// holds what did arrive.
    IncompleteBody {
        /// The response with the partial body.
        response: Box<Response>,
        /// What went wrong.
        reason: String,
    },
    /// Nothing (or not everything) arrived within the timeout.
    Timeout(Duration),
}

impl ClientError {
    /// Whether this is [`ClientError::IncompleteBody`].
    pub fn is_incomplete(&self) -> bool {
        matches!(self, ClientError::IncompleteBody { .. })
    }

    /// The partial response of an [`ClientError::IncompleteBody`].
    pub fn partial(&self) -> Option<&Response> {
        match self {
            ClientError::IncompleteBody { response, .. } => Some(response),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect(e) => write!(f, "connect failed: {e}"),
            ClientError::ClosedBeforeResponse(why) => write!(f, "closed before a response: {why}"),
            ClientError::BadResponse(why) => write!(f, "bad response: {why}"),
            ClientError::IncompleteBody { response, reason } => {
                write!(
                    f,
                    "incomplete body: {reason}\nresponse so far:\n{}",
                    response.dump()
                )
            }
            ClientError::Timeout(d) => write!(f, "no complete response within {d:?}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Splits `s` on `sep` where it is not inside a quoted string.
fn split_outside_quotes(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut quoted, mut escaped) = (false, false);
    for c in s.chars() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(String::new());
            continue;
        }
        out.last_mut().expect("invariant: never empty").push(c);
    }
    out
}

/// The parameters of hoard's entry in a `Cache-Status` field value (see
/// [`Response::cache_params`]).
pub fn cache_status_params(all: &str) -> Vec<String> {
    let members = split_outside_quotes(all, ',');
    let Some(ours) = members.iter().rev().find(|m| {
        split_outside_quotes(m, ';')
            .first()
            .is_some_and(|n| n.trim() == "hoard")
    }) else {
        return Vec::new();
    };
    split_outside_quotes(ours, ';')
        .into_iter()
        .skip(1)
        .map(|p| p.trim().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::cache_status_params;

    #[test]
    fn parameters_are_matched_whole() {
        let p = cache_status_params(
            "edge; hit, hoard; fwd=uri-miss; fwd-status=200; key=\"http|h|/a;b,c\"; detail=hit-for-pass",
        );
        assert_eq!(
            p,
            [
                "fwd=uri-miss",
                "fwd-status=200",
                "key=\"http|h|/a;b,c\"",
                "detail=hit-for-pass"
            ]
        );
        assert!(!p.iter().any(|x| x == "hit"));
        assert!(cache_status_params("other; hit").is_empty());
    }
}
