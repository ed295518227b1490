//! A route's cache key (`key`) and the key choosing a key's owner in a
//! cluster (`cluster_key`): the same table, resolved to a [`KeyTemplate`].

use hoard_policy::key::{KeyTemplate, QueryKey};
use http::HeaderName;

use super::raw::RawKey;
use super::{ConfigError, Resolver};

impl Resolver<'_> {
    /// A key template (`key`, `cluster_key`) from its table at `at`.
    pub(super) fn key_template(&self, k: RawKey, at: &str) -> Result<KeyTemplate, ConfigError> {
        let query = match (
            k.query.as_ref().map(|q| q.get_ref().as_str()),
            k.query_params,
            k.query_exclude,
        ) {
            (_, Some(p), _) => QueryKey::Only(self.query_names(&format!("{at}.query_params"), p)?),
            (_, None, Some(x)) => {
                QueryKey::Except(self.query_names(&format!("{at}.query_exclude"), x)?)
            }
            (None | Some("all"), None, None) => QueryKey::All,
            (Some("sorted"), None, None) => QueryKey::Sorted,
            (Some("none"), None, None) => QueryKey::None,
            (Some(other), None, None) => {
                let span = k.query.as_ref().map(|q| q.span());
                return Err(self.err(
                    span,
                    format!("{at}.query"),
                    format!("{other:?}: expected \"all\", \"sorted\" or \"none\""),
                ));
            }
        };
        let mut key = KeyTemplate {
            scheme: k.scheme.unwrap_or(true),
            host: k.host.unwrap_or(true),
            query,
            headers: Vec::new(),
            cookies: k.cookies.unwrap_or_default(),
        };
        for h in k.headers.unwrap_or_default() {
            key.headers
                .push(HeaderName::from_bytes(h.get_ref().as_bytes()).map_err(|_| {
                    self.err(
                        Some(h.span()),
                        format!("{at}.headers"),
                        format!("{:?} is not a header name", h.get_ref()),
                    )
                })?);
        }
        Ok(key)
    }
}
