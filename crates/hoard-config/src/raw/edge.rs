//! The raw mirror of a route's edge keys (`response_headers`,
//! `request_headers`, `redirect`, `basic_auth`, `limit`), as written; built
//! into edge rules by `crate::edge`.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

/// `response_headers` / `request_headers`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderEdits {
    #[serde(default)]
    pub set: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub add: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub remove: Vec<Spanned<String>>,
}

/// `redirect`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    pub to: Spanned<String>,
    pub status: Option<Spanned<u16>>,
}

/// `basic_auth`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBasicAuth {
    pub realm: Option<String>,
    pub users_file: Spanned<String>,
}

/// `limit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    pub rate: Spanned<String>,
    pub burst: Option<u32>,
    pub max_clients: Option<usize>,
}
