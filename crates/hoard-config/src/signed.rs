//! A route's `signed_urls` as written, and how it becomes the edge rule
//! [`SignedUrls`] (docs/signed-urls.md):
//!
//! ```toml
//! signed_urls = { secret = "s3cr3t", scheme = "nginx-md5", expires_param = "expires", signature_param = "md5", leeway = "30s" }
//! signed_urls = { secrets = ["new", "old"], scheme = "hmac-sha256" }   # rotation: the first signs
//! ```

use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::units::Dur;
use super::{ConfigError, Resolver};
use hoard_edge::signed::{Scheme, SignedUrls, DEFAULT_EXPIRES_PARAM};

/// `signed_urls` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignedUrls {
    pub secret: Option<Spanned<String>>,
    pub secrets: Option<Spanned<Vec<Spanned<String>>>>,
    pub scheme: Option<Spanned<String>>,
    pub expires_param: Option<Spanned<String>>,
    pub signature_param: Option<Spanned<String>>,
    pub leeway: Option<Spanned<Dur>>,
}

impl Resolver<'_> {
    /// `at.signed_urls`, checked: one of `secret` and `secrets`, no secret
    /// empty, a known scheme (default `nginx-md5`), two distinct parameter
    /// names.
    pub(super) fn signed_urls(
        &self,
        at: &str,
        raw: Spanned<RawSignedUrls>,
    ) -> Result<Arc<SignedUrls>, ConfigError> {
        let span = raw.span();
        let r = raw.into_inner();
        let key = |k: &str| format!("{at}.signed_urls.{k}");
        let scheme = match &r.scheme {
            None => Scheme::NginxMd5,
            Some(s) => Scheme::parse(s.get_ref()).ok_or_else(|| {
                self.err(
                    Some(s.span()),
                    key("scheme"),
                    format!(
                        "{:?}: expected {}",
                        s.get_ref(),
                        Scheme::NAMES.map(|n| format!("{n:?}")).join(" or ")
                    ),
                )
            })?,
        };
        let secrets: Vec<Spanned<String>> = match (r.secret, r.secrets) {
            (Some(one), None) => vec![one],
            (None, Some(list)) => {
                let list_span = list.span();
                let list = list.into_inner();
                if list.is_empty() {
                    return Err(self.err(
                        Some(list_span),
                        key("secrets"),
                        "empty: at least one secret (the first signs, any verifies)".into(),
                    ));
                }
                list
            }
            (Some(one), Some(_)) => {
                return Err(self.err(
                    Some(one.span()),
                    key("secret"),
                    "both secret and secrets: one of them (secrets = [\"new\", \"old\"] for a rotation)"
                        .into(),
                ))
            }
            (None, None) => {
                return Err(self.err(
                    Some(span),
                    format!("{at}.signed_urls"),
                    "no secret: secret = \"...\" or secrets = [\"new\", \"old\"]".into(),
                ))
            }
        };
        let which = if secrets.len() == 1 {
            "secret"
        } else {
            "secrets"
        };
        if let Some(empty) = secrets.iter().find(|s| s.get_ref().is_empty()) {
            return Err(self.err(
                Some(empty.span()),
                key(which),
                "empty: an empty secret lets anyone sign links".into(),
            ));
        }
        let param = |p: &Option<Spanned<String>>, name: &str, default: &'static str| {
            let Some(p) = p else {
                return Ok(default.to_string());
            };
            let v = p.get_ref();
            if v.is_empty()
                || v.chars()
                    .any(|c| matches!(c, '&' | '=' | '#' | '?' | '%') || !c.is_ascii_graphic())
            {
                return Err(self.err(
                    Some(p.span()),
                    key(name),
                    format!("{v:?} is not a query parameter name"),
                ));
            }
            Ok(v.clone())
        };
        let expires_param = param(&r.expires_param, "expires_param", DEFAULT_EXPIRES_PARAM)?;
        let signature_param = param(
            &r.signature_param,
            "signature_param",
            scheme.default_signature_param(),
        )?;
        if expires_param.eq_ignore_ascii_case(&signature_param) {
            let at_span = r
                .signature_param
                .as_ref()
                .or(r.expires_param.as_ref())
                .map_or(span.clone(), |p| p.span());
            return Err(self.err(
                Some(at_span),
                key("signature_param"),
                format!("{signature_param:?} is the expiry's name too: two names"),
            ));
        }
        let texts: Vec<&str> = secrets.iter().map(|s| s.get_ref().as_str()).collect();
        let leeway = r
            .leeway
            .map_or(std::time::Duration::ZERO, |l| l.into_inner().0);
        SignedUrls::new(scheme, &texts, &expires_param, &signature_param, leeway)
            .map(Arc::new)
            .map_err(|m| self.err(Some(span), format!("{at}.signed_urls"), m))
    }
}
