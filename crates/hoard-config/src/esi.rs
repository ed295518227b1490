//! A route's `esi`: pages assembled at the edge from fragments (ESI 1.0,
//! see `hoard_proxy::esi`).
//!
//! ```toml
//! esi = true
//! # or, with its limits:
//! esi = { max_depth = 3, max_includes = 32, allow_hosts = ["static.example.com"], on_error = "drop" }
//! ```

use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::Resolver;

/// `esi`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsiConfig {
    /// Fragments inside fragments, at most this deep (the page is 0).
    /// Default: 3.
    pub max_depth: u8,
    /// Includes of one page, nested ones counted, at most. Default: 32.
    pub max_includes: u16,
    /// Hosts other than the page's own that `src` may name.
    pub allow_hosts: Vec<String>,
    /// What a failed include without `onerror="continue"` or `alt` does.
    pub on_error: OnError,
}

/// What a failed include does to its page when its element says nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// The include is dropped (and logged); the page goes on. The default.
    Drop,
    /// The page's response is cut where the include was (Varnish's
    /// `esi_include_onerror`): a client sees an incomplete body, never a
    /// page that looks whole.
    Abort,
}

impl Default for EsiConfig {
    fn default() -> Self {
        EsiConfig {
            max_depth: 3,
            max_includes: 32,
            allow_hosts: Vec::new(),
            on_error: OnError::Drop,
        }
    }
}

/// `esi` as written: `true`/`false` or a table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawEsi {
    /// `esi = true`.
    On(bool),
    /// `esi = { ... }`.
    Table(RawEsiTable),
}

/// `esi = { ... }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEsiTable {
    pub max_depth: Option<u8>,
    pub max_includes: Option<u16>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    pub on_error: Option<String>,
}

impl Resolver<'_> {
    /// `at.esi`, checked.
    pub(super) fn esi(
        &self,
        at: &str,
        raw: Spanned<RawEsi>,
    ) -> Result<Option<EsiConfig>, ConfigError> {
        let span = raw.span();
        let t = match raw.into_inner() {
            RawEsi::On(false) => return Ok(None),
            RawEsi::On(true) => return Ok(Some(EsiConfig::default())),
            RawEsi::Table(t) => t,
        };
        let d = EsiConfig::default();
        let max_depth = t.max_depth.unwrap_or(d.max_depth);
        if !(1..=10).contains(&max_depth) {
            return Err(self.err(
                Some(span),
                format!("{at}.esi.max_depth"),
                format!("{max_depth}: expected 1 to 10"),
            ));
        }
        let max_includes = t.max_includes.unwrap_or(d.max_includes);
        if !(1..=1000).contains(&max_includes) {
            return Err(self.err(
                Some(span),
                format!("{at}.esi.max_includes"),
                format!("{max_includes}: expected 1 to 1000"),
            ));
        }
        let on_error = match t.on_error.as_deref() {
            None | Some("drop") => OnError::Drop,
            Some("abort") => OnError::Abort,
            Some(other) => {
                return Err(self.err(
                    Some(span),
                    format!("{at}.esi.on_error"),
                    format!("{other:?}: expected \"drop\" or \"abort\""),
                ))
            }
        };
        if let Some(bad) = t
            .allow_hosts
            .iter()
            .find(|h| h.is_empty() || h.contains(['/', ' ', '?', '#']))
        {
            return Err(self.err(
                Some(span),
                format!("{at}.esi.allow_hosts"),
                format!("{bad:?} is not a host name"),
            ));
        }
        Ok(Some(EsiConfig {
            max_depth,
            max_includes,
            allow_hosts: t
                .allow_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            on_error,
        }))
    }
}
