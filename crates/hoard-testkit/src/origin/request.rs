//! A request as the fake origin received it, with chainable assertions
//! (VTC `expect req.url == "/a"`).

use bytes::Bytes;

use crate::{check, wire};

/// A request received by the origin. The `expect_*` methods panic with the
/// whole request in the message, failing the script.
#[derive(Debug, Clone)]
pub struct Request {
    who: String,
    pub(crate) seq: u64,
    conn: usize,
    method: String,
    url: String,
    version: u8,
    headers: Vec<(String, String)>,
    body: Bytes,
}

impl Request {
    pub(crate) fn new(
        who: String,
        conn: usize,
        method: String,
        url: String,
        version: u8,
        headers: Vec<(String, String)>,
        body: Bytes,
    ) -> Self {
        Self {
            who,
            seq: 0,
            conn,
            method,
            url,
            version,
            headers,
            body,
        }
    }

    /// The method, e.g. `GET`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The request target as sent, e.g. `/a?b=1`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The minor HTTP version: 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Which accepted connection (1-based) carried the request.
    pub fn conn(&self) -> usize {
        self.conn
    }

    /// All header fields in received order, names as sent.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        wire::find(&self.headers, name).map(str::to_owned)
    }

    /// Every value of header `name` (case-insensitive), in order.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        wire::find_all(&self.headers, name)
            .map(str::to_owned)
            .collect()
    }

    /// The decoded body (Content-Length or chunked).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Asserts the method.
    #[track_caller]
    pub fn expect_method(&self, method: &str) -> &Self {
        if self.method != method {
            self.fail(format_args!(
                "expected method {method:?}, got {:?}",
                self.method
            ));
        }
        self
    }

    /// Asserts the request target.
    #[track_caller]
    pub fn expect_url(&self, url: &str) -> &Self {
        if self.url != url {
            self.fail(format_args!("expected url {url:?}, got {:?}", self.url));
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

    #[track_caller]
    fn check(&self, result: Result<(), String>) -> &Self {
        if let Err(what) = result {
            self.fail(format_args!("{what}"));
        }
        self
    }

    #[track_caller]
    fn fail(&self, what: std::fmt::Arguments<'_>) -> ! {
        panic!("{}: {what}\nrequest:\n{}", self.who, self.dump())
    }

    fn dump(&self) -> String {
        let start = format!(
            "  {} {} HTTP/1.{} (conn {})",
            self.method, self.url, self.version, self.conn
        );
        let mut s = wire::fmt_head(&start, &self.headers).replace("\n  ", "\n    ");
        s.push_str(&format!(
            "\n    ({} body bytes) {}",
            self.body.len(),
            wire::show(&self.body)
        ));
        s
    }
}
