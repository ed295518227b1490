//! Errors on the request path: where they came from and what happens next.
//!
//! Every failure becomes a [`ProxyError`] with an [`ErrorSource`] (client,
//! origin, storage, internal) and a [`ErrorKind`]. One function,
//! [`ProxyError::status`], maps it to the status the client gets, and
//! [`ProxyError::may_serve_stale`] says whether a stale copy may stand in
//! (RFC 5861 stale-if-error).

use std::fmt;

use http::StatusCode;

/// Boxed error for bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// The client sent something wrong.
    Client,
    /// The origin failed or misbehaved.
    Origin,
    /// The cache store failed.
    Storage,
    /// A bug or broken invariant in hoard.
    Internal,
    /// A Proxy-Wasm filter failed (trapped, ran out of fuel, would not start).
    Filter,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed request (400).
    BadRequest,
    /// Request target too long (414).
    UriTooLong,
    /// Request body too large (413).
    BodyTooLarge,
    /// The request body stopped arriving for `body_read_timeout` (408).
    BodyTimeout,
    /// An `Expect` other than `100-continue` (417).
    ExpectationFailed,
    /// No site or route for the request (404).
    NoRoute,
    /// A method hoard does not serve, e.g. `CONNECT` (405): it is a
    /// reverse proxy, not a forward one.
    MethodNotAllowed,
    /// Could not connect to any origin server (502).
    ConnectRefused,
    /// Every server of the upstream is out of service: set down or
    /// draining, or failing its health check (503, as Varnish answers
    /// for a sick backend).
    NoLiveServer,
    /// Connecting timed out (504).
    ConnectTimeout,
    /// No response headers within the read timeout (504).
    ReadTimeout,
    /// The origin closed or sent an invalid response (502).
    BadResponse,
    /// TLS to the origin failed, and why (502); never retried in plaintext.
    Tls(crate::tls_failure::TlsFailure),
    /// Nothing usable stored for an `only-if-cached` request (504, RFC 9111 §5.2.1.7).
    OnlyIfCached,
    /// A limit of hoard's own was reached (503), e.g. `cache.max_fills`.
    Busy,
    /// The client's address is not let in by the route's `allow`/`deny` (403).
    AccessDenied,
    /// No valid credentials for the route's `basic_auth` (401).
    AuthRequired,
    /// The client sent more than the route's `limit` rate (429).
    RateLimited,
    /// The client has `limit_connections` requests in progress already (429).
    ConnectionLimit,
    /// A link without a valid signature on a route with `signed_urls` (403).
    BadSignature,
    /// A signed link whose expiry passed (410).
    LinkExpired,
    /// A broken invariant in hoard (500); logged as an error.
    Internal,
    /// A route's filter failed the request (500); logged with its name.
    Filter,
}

/// A failure on the request path.
#[derive(Debug)]
pub struct ProxyError {
    /// Where it came from.
    pub source: ErrorSource,
    /// What went wrong.
    pub kind: ErrorKind,
    /// Detail for logs (never sent to clients).
    pub detail: String,
}

impl ProxyError {
    /// A client error.
    pub fn client(kind: ErrorKind, detail: impl Into<String>) -> ProxyError {
        ProxyError {
            source: ErrorSource::Client,
            kind,
            detail: detail.into(),
        }
    }

    /// An origin error.
    pub fn origin(kind: ErrorKind, detail: impl Into<String>) -> ProxyError {
        ProxyError {
            source: ErrorSource::Origin,
            kind,
            detail: detail.into(),
        }
    }

    /// A broken invariant (a bug): the client gets 500.
    pub fn internal(detail: impl Into<String>) -> ProxyError {
        ProxyError {
            source: ErrorSource::Internal,
            kind: ErrorKind::Internal,
            detail: detail.into(),
        }
    }

    /// A route's filter failed (see `hoard_wasm::FilterError`): the client gets 500.
    pub fn filter(detail: impl Into<String>) -> ProxyError {
        ProxyError {
            source: ErrorSource::Filter,
            kind: ErrorKind::Filter,
            detail: detail.into(),
        }
    }

    /// A limit of hoard's own was reached: the client gets 503.
    pub fn internal_busy(detail: impl Into<String>) -> ProxyError {
        ProxyError {
            source: ErrorSource::Internal,
            kind: ErrorKind::Busy,
            detail: detail.into(),
        }
    }

    /// The status code the client receives.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::UriTooLong => StatusCode::URI_TOO_LONG,
            ErrorKind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::ExpectationFailed => StatusCode::EXPECTATION_FAILED,
            ErrorKind::NoRoute => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::ConnectRefused | ErrorKind::BadResponse | ErrorKind::Tls(_) => {
                StatusCode::BAD_GATEWAY
            }
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout | ErrorKind::OnlyIfCached => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ErrorKind::Busy | ErrorKind::NoLiveServer => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::AccessDenied => StatusCode::FORBIDDEN,
            ErrorKind::AuthRequired => StatusCode::UNAUTHORIZED,
            ErrorKind::RateLimited | ErrorKind::ConnectionLimit => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::BadSignature => StatusCode::FORBIDDEN,
            ErrorKind::LinkExpired => StatusCode::GONE,
            ErrorKind::Internal | ErrorKind::Filter => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether a stale stored response may be served instead (RFC 5861 §4).
    pub fn may_serve_stale(&self) -> bool {
        self.source == ErrorSource::Origin
    }

    /// A short name for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self.kind {
            ErrorKind::BadRequest => "bad-request",
            ErrorKind::UriTooLong => "uri-too-long",
            ErrorKind::BodyTooLarge => "body-too-large",
            ErrorKind::BodyTimeout => "body-timeout",
            ErrorKind::ExpectationFailed => "expectation-failed",
            ErrorKind::NoRoute => "no-route",
            ErrorKind::MethodNotAllowed => "method-not-allowed",
            ErrorKind::ConnectRefused => "connect-refused",
            ErrorKind::NoLiveServer => "no-live-server",
            ErrorKind::ConnectTimeout => "connect-timeout",
            ErrorKind::ReadTimeout => "read-timeout",
            ErrorKind::BadResponse => "bad-response",
            ErrorKind::Tls(f) => f.as_str(),
            ErrorKind::OnlyIfCached => "only-if-cached",
            ErrorKind::Busy => "busy",
            ErrorKind::AccessDenied => "access-denied",
            ErrorKind::AuthRequired => "auth-required",
            ErrorKind::RateLimited => "rate-limited",
            ErrorKind::ConnectionLimit => "connection-limit",
            ErrorKind::BadSignature => "bad-signature",
            ErrorKind::LinkExpired => "link-expired",
            ErrorKind::Internal => "internal",
            ErrorKind::Filter => "filter",
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = match self.source {
            ErrorSource::Client => "client",
            ErrorSource::Origin => "origin",
            ErrorSource::Storage => "storage",
            ErrorSource::Internal => "internal",
            ErrorSource::Filter => "filter",
        };
        write!(
            f,
            "{src} error {}: {} (answered {})",
            self.as_str(),
            self.detail,
            self.status().as_u16()
        )
    }
}

impl std::error::Error for ProxyError {}

/// The client stopped sending its body.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body stopped arriving")
    }
}

impl std::error::Error for BodyTimeout {}
