//! Edge Side Includes (ESI 1.0, <https://www.w3.org/TR/esi-lang/>): a page
//! stored once as a template and assembled per request from fragments,
//! each fetched through hoard's own pipeline (its own key, lifetime,
//! coalescing, stale serving and hit-for-pass).
//!
//! ## Model
//! - [`template`]: the body parsed once into nodes (text slices, includes,
//!   `vars`, `choose`, `try`); malformed markup is no template, and the page
//!   goes out as it is.
//! - [`vars`] and [`expr`]: the request's variables and `esi:when` tests.
//! - [`assemble`]: the plan for one request (every include started at once)
//!   and the task that streams the page in document order.
//! - [`compress`]: the page in the client's coding, as it streams.
//!
//! The pipeline's side (which responses are pages, the sub-requests, the
//! response's fields, nesting limits) is `pipeline::esi`.

pub mod assemble;
pub mod compress;
pub mod expr;
pub mod template;
pub mod vars;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, CONTENT_TYPE};

/// `Surrogate-Control` (W3C Edge Architecture 1.0).
pub static SURROGATE_CONTROL: HeaderName = HeaderName::from_static("surrogate-control");

/// What a page's body is, worked out once per stored object (kept in its
/// `derived` slot: set when the fill stores it, or at its first delivery
/// when it was loaded from disk).
#[derive(Debug)]
pub enum Parsed {
    /// ESI markup: assembled per request.
    Page(template::Template),
    /// No markup, or malformed markup: sent as it is.
    AsIs,
}

/// A body classified: `Err` when its markup is malformed (it then goes out
/// as it is).
pub fn classify(body: &Bytes) -> Result<Parsed, template::Malformed> {
    if !template::has_markup(body) {
        return Ok(Parsed::AsIs);
    }
    template::parse(body).map(Parsed::Page)
}

/// A response whose fields say it may be a page (its body says the rest):
/// `Surrogate-Control: content="ESI/1.0"`, or `text/html`.
pub fn is_page(headers: &HeaderMap) -> bool {
    // The type first: a standard field is the cheaper lookup.
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let t = v.as_bytes();
        t.len() >= 9
            && t[..9].eq_ignore_ascii_case(b"text/html")
            && matches!(t.get(9), None | Some(b';' | b' ' | b'\t'))
    }) || surrogate_esi(headers)
}

fn surrogate_esi(headers: &HeaderMap) -> bool {
    headers
        .get_all(&SURROGATE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("ESI/1.0"))
}
