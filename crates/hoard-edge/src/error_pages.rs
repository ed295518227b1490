//! Pages for hoard's own error answers (nginx `error_page`): a site's or a
//! route's `error_pages = { "502" = "FILE", ... }`. Read when the
//! configuration is (at start and at each reload); the body replaces the
//! short text of an answer hoard made itself (origin down, timeout, limit,
//! refused access, no route), with the status kept and `Content-Type` from
//! the file's extension. An origin's own error response passes untouched,
//! and a stale copy that stale-if-error allows is served before any page.

use bytes::Bytes;
use http::{HeaderValue, StatusCode};

/// One page.
#[derive(Debug, Clone)]
pub struct Page {
    /// The body.
    pub body: Bytes,
    /// From the extension.
    pub content_type: HeaderValue,
}

/// A site's or route's pages, by status.
#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    pages: Vec<(StatusCode, Page)>,
}

/// Marks a response hoard generated as an error (the only ones a page replaces).
#[derive(Debug, Clone, Copy)]
pub struct Generated;

impl ErrorPages {
    /// Adds (or replaces) the page of `status`.
    pub fn insert(&mut self, status: StatusCode, page: Page) {
        self.pages.retain(|(s, _)| *s != status);
        self.pages.push((status, page));
    }

    /// The page of `status`.
    pub fn get(&self, status: StatusCode) -> Option<&Page> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| p)
    }

    /// True when there is no page.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

/// The `Content-Type` of a page file, from its extension.
pub fn content_type(path: &std::path::Path) -> HeaderValue {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    HeaderValue::from_static(match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    })
}
