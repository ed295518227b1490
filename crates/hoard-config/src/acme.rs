//! `[acme]`: automatic HTTPS (see `hoard_proxy::acme`), read and checked.

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
    /// `[cache] dir` (`--cache-dir`; `hoard-cache` in the working
    /// directory when neither is set).
    pub dir: Option<PathBuf>,
    /// The account's credentials (its private key and URL, JSON). Default:
    /// `account.json` in `dir`.
    pub account: Option<PathBuf>,
    /// Renew when this share of a certificate's lifetime is left.
    /// Default: 1/3.
    pub renew_left: f64,
    /// First retry after a failed order; doubles up to an hour.
    /// Default: 1 minute.
    pub retry: Duration,
    /// The challenges hoard may answer. Default: both; HTTP-01 is used
    /// when there is a plain listener, else TLS-ALPN-01.
    pub challenges: Vec<ChallengeKind>,
}

/// An ACME challenge type hoard answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// `http-01` (RFC 8555 §8.3), on a plain listener.
    Http01,
    /// `tls-alpn-01` (RFC 8737), on the TLS listener.
    TlsAlpn01,
}

impl ChallengeKind {
    /// As ACME names it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            directory: LETS_ENCRYPT.into(),
            contact: Vec::new(),
            ca_root: None,
            dir: None,
            account: None,
            renew_left: 1.0 / 3.0,
            retry: Duration::from_secs(60),
            challenges: vec![ChallengeKind::Http01, ChallengeKind::TlsAlpn01],
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
    account: Option<String>,
    renew_left: Option<Spanned<f64>>,
    retry: Option<Spanned<Dur>>,
    challenges: Option<Spanned<Vec<String>>>,
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
    cfg.account = raw.account.map(PathBuf::from);
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
        let d = r.get_ref().0;
        if d < Duration::from_secs(1) {
            return Err((
                Some(r.span()),
                "acme.retry",
                format!("{d:?}: at least 1s (failed orders are retried after it, doubling)"),
            ));
        }
        cfg.retry = d;
    }
    if let Some(c) = raw.challenges {
        let span = c.span();
        let mut kinds = Vec::new();
        for name in c.into_inner() {
            let kind = [ChallengeKind::Http01, ChallengeKind::TlsAlpn01]
                .into_iter()
                .find(|k| k.as_str() == name)
                .ok_or_else(|| {
                    (
                        Some(span.clone()),
                        "acme.challenges",
                        format!("{name:?}: expected \"http-01\" or \"tls-alpn-01\""),
                    )
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err((
                Some(span),
                "acme.challenges",
                "at least one challenge".into(),
            ));
        }
        cfg.challenges = kinds;
    }
    Ok(cfg)
}

/// Checks that no name is in two different certificates (the same list
/// on two listeners is one certificate).
pub(crate) fn check_distinct(certs: &[Vec<String>]) -> Result<(), String> {
    for (i, a) in certs.iter().enumerate() {
        for b in &certs[..i] {
            if a != b {
                if let Some(n) = a.iter().find(|n| b.contains(n)) {
                    return Err(format!(
                        "{n:?} is in two certificates ({} and {})",
                        b.join(" "),
                        a.join(" ")
                    ));
                }
            }
        }
    }
    Ok(())
}

/// One ACME certificate's names: lower case, sorted, each a DNS name
/// (no wildcard: those need DNS-01, which hoard does not answer).
pub(crate) fn acme_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for n in names {
        let n = n.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if n.starts_with("*.") {
            return Err(format!(
                "{n:?}: wildcard names need DNS-01 validation, which hoard does not do"
            ));
        }
        if n.len() > 253 || !n.contains('.') || !n.split('.').all(label_ok) {
            return Err(format!("{n:?}: not a DNS name"));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err("a certificate needs at least one name".into());
    }
    out.sort();
    out.dedup();
    Ok(out)
}
