//! `[acme]`: automatic HTTPS (see `crate::acme`), read and checked.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::units::Dur;

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Automatic HTTPS.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The CA's directory URL. Default: Let's Encrypt.
    pub directory: String,
    /// Contact addresses for the account (`mailto:` added when missing).
    pub contact: Vec<String>,
    /// A root (PEM) trusted for the CA's own HTTPS, beside the system's
    /// (a private CA, or a test CA such as pebble).
    pub ca_root: Option<PathBuf>,
    /// Where the account and certificates are kept. Default: `acme` in
    /// the cache directory.
    pub dir: Option<PathBuf>,
    /// Renew when this share of a certificate's lifetime is left.
    /// Default: 1/3.
    pub renew_left: f64,
    /// First retry after a failed order; doubles up to an hour.
    /// Default: 1 minute.
    pub retry: Duration,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            directory: LETS_ENCRYPT.into(),
            contact: Vec::new(),
            ca_root: None,
            dir: None,
            renew_left: 1.0 / 3.0,
            retry: Duration::from_secs(60),
        }
    }
}

/// `[acme]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcme {
    directory: Option<Spanned<String>>,
    contact: Option<Vec<String>>,
    ca_root: Option<String>,
    dir: Option<String>,
    renew_left: Option<Spanned<f64>>,
    retry: Option<Dur>,
}

/// Checks `[acme]`; errors carry the span and key.
pub(crate) fn from_raw(
    raw: Option<RawAcme>,
) -> Result<AcmeConfig, (Option<std::ops::Range<usize>>, &'static str, String)> {
    let Some(raw) = raw else {
        return Ok(AcmeConfig::default());
    };
    let mut cfg = AcmeConfig::default();
    if let Some(d) = raw.directory {
        let url = d.get_ref();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err((
                Some(d.span()),
                "acme.directory",
                format!("{url:?}: expected an https:// URL"),
            ));
        }
        cfg.directory = url.clone();
    }
    cfg.contact = raw
        .contact
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            if c.contains(':') {
                c
            } else {
                format!("mailto:{c}")
            }
        })
        .collect();
    cfg.ca_root = raw.ca_root.map(PathBuf::from);
    cfg.dir = raw.dir.map(PathBuf::from);
    if let Some(r) = raw.renew_left {
        let v = *r.get_ref();
        if !(v > 0.0 && v < 1.0) {
            return Err((
                Some(r.span()),
                "acme.renew_left",
                format!("{v}: a share of the lifetime, between 0 and 1"),
            ));
        }
        cfg.renew_left = v;
    }
    if let Some(r) = raw.retry {
        cfg.retry = r.0;
    }
    Ok(cfg)
}
