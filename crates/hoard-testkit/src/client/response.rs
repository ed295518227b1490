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
