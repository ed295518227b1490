//! A route that answers with a redirect (nginx `return 301 ...`), before
//! any lookup and without an upstream: `redirect = { to = "...", status = 308 }`.
//! `to` may use the variables of [`super::template`] and, on a `regex`
//! route, its capture groups. The query string is kept when `to` has none
//! and does not use `$request_uri` (which carries it already).

use http::StatusCode;

use super::template::{Template, Vars};

/// The statuses a redirect may have.
pub const STATUSES: [u16; 5] = [301, 302, 303, 307, 308];

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Redirect {
    /// The target.
    pub to: Template,
    /// 301, 302, 303, 307 or 308.
    pub status: StatusCode,
}

impl Redirect {
    /// The `Location` for one request.
    pub fn location(&self, vars: &Vars<'_>, captures: Option<&regex::Captures<'_>>) -> String {
        let mut loc = self.to.expand(vars, captures);
        if !self.to.has_request_uri() && !loc.contains('?') {
            if let Some((_, q)) = vars.request_uri.split_once('?') {
                loc.push('?');
                loc.push_str(q);
            }
        }
        loc
    }
}
