//! Operations settings: the admin listener, `PURGE` on the main listeners,
//! tag fields, and the access log.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

/// The admin listener (`[admin]`, `--admin`): JSON API, metrics, dashboard.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Where it listens; `None` (default) turns it off.
    pub address: Option<SocketAddr>,
    /// Bearer token. Required on a non-loopback address, optional on loopback.
    pub token: Option<String>,
    /// Clients allowed to send `PURGE` to the main listeners; empty (default) turns the method off.
    pub purge_allow: Vec<Cidr>,
    /// Send `Surrogate-Key` and `Cache-Tag` on to clients. Default: false
    /// (they are for this cache and are removed).
    pub forward_tags: bool,
    /// Regex purges (bans) whose background sweep may be running at once;
    /// one more is refused with 429. Default: 64.
    pub max_pending_bans: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            address: None,
            token: None,
            purge_allow: Vec::new(),
            forward_tags: false,
            max_pending_bans: hoard_store::bans::DEFAULT_MAX_BANS,
        }
    }
}

pub use hoard_edge::cidr::Cidr;

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LogTarget {
    /// No access log (default).
    #[default]
    Off,
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A file, appended to, reopened on `SIGUSR1` (after logrotate moved it).
    File(PathBuf),
}

impl LogTarget {
    /// `off`, `stdout`, `stderr`, or a file path.
    pub fn parse(s: &str) -> LogTarget {
        match s {
            "off" | "" => LogTarget::Off,
            "stdout" | "-" => LogTarget::Stdout,
            "stderr" => LogTarget::Stderr,
            path => LogTarget::File(PathBuf::from(path)),
        }
    }
}

/// The access log line format.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One JSON object per line (default).
    #[default]
    Json,
    /// Exactly nginx's `combined` line, for the tools that read it.
    Combined,
    /// `combined` with the cache outcome, upstream and request times, the
    /// request id and the Host after it.
    Hoard,
    /// The `template` given (nginx's `log_format`).
    Custom(std::sync::Arc<crate::log_template::LogTemplate>),
}

/// The access log (`[access_log]`, `--access-log`).
#[derive(Debug, Clone, Default)]
pub struct AccessLogConfig {
    /// Where lines go.
    pub target: LogTarget,
    /// Line format.
    pub format: LogFormat,
    /// Lines queued for the writer at most; beyond, lines are dropped and
    /// counted (`access_log_dropped`). Default: 65536.
    pub buffer: usize,
}

/// `[admin]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub address: Option<Spanned<String>>,
    pub token: Option<String>,
    pub token_file: Option<Spanned<String>>,
    #[serde(default)]
    pub purge_allow: Vec<Spanned<String>>,
    pub forward_tags: Option<bool>,
    pub max_pending_bans: Option<Spanned<usize>>,
}

/// `[access_log]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessLog {
    pub target: Option<String>,
    pub format: Option<Spanned<String>>,
    pub template: Option<Spanned<String>>,
    pub buffer: Option<usize>,
}

use super::defaults::ACCESS_LOG_BUFFER;

/// Resolves `[admin]`; errors carry the key and the span.
pub(super) fn admin(
    raw: RawAdmin,
) -> Result<AdminConfig, (Option<std::ops::Range<usize>>, &'static str, String)> {
    let address = match &raw.address {
        Some(a) => Some(a.get_ref().parse::<SocketAddr>().map_err(|e| {
            (
                Some(a.span()),
                "admin.address",
                format!("{:?}: {e}", a.get_ref()),
            )
        })?),
        None => None,
    };
    let token = match (&raw.token, &raw.token_file) {
        (Some(_), Some(f)) => {
            return Err((
                Some(f.span()),
                "admin.token_file",
                "give `token` or `token_file`, not both".into(),
            ))
        }
        (Some(t), None) => Some(t.trim().to_string()),
        (None, Some(f)) => {
            Some(read_token(f.get_ref()).map_err(|m| (Some(f.span()), "admin.token_file", m))?)
        }
        (None, None) => None,
    };
    if token.as_deref() == Some("") {
        return Err((None, "admin.token", "the token is empty".into()));
    }
    let mut purge_allow = Vec::new();
    for c in &raw.purge_allow {
        purge_allow
            .push(Cidr::parse(c.get_ref()).map_err(|m| (Some(c.span()), "admin.purge_allow", m))?);
    }
    let max_pending_bans = match &raw.max_pending_bans {
        Some(m) if *m.get_ref() == 0 => {
            return Err((
                Some(m.span()),
                "admin.max_pending_bans",
                "must be at least 1".into(),
            ))
        }
        Some(m) => *m.get_ref(),
        None => hoard_store::bans::DEFAULT_MAX_BANS,
    };
    let cfg = AdminConfig {
        address,
        token,
        purge_allow,
        forward_tags: raw.forward_tags.unwrap_or(false),
        max_pending_bans,
    };
    check_admin(&cfg).map_err(|m| (raw.address.as_ref().map(|a| a.span()), "admin.token", m))?;
    Ok(cfg)
}

/// Reads a token file (surrounding whitespace removed).
///
/// # Errors
/// A message naming the file.
pub fn read_token(path: &str) -> Result<String, String> {
    let t = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(format!("{path}: the token file is empty"));
    }
    Ok(t)
}

/// A non-loopback admin address needs a token.
///
/// # Errors
/// The message for the operator.
pub fn check_admin(cfg: &AdminConfig) -> Result<(), String> {
    match cfg.address {
        Some(a) if !a.ip().is_loopback() && cfg.token.is_none() => Err(format!(
            "the admin listener on {a} is not on loopback: set `token` or `token_file`"
        )),
        _ => Ok(()),
    }
}

/// Resolves `[access_log]`.
pub(super) fn access_log(
    raw: RawAccessLog,
) -> Result<AccessLogConfig, (Option<std::ops::Range<usize>>, &'static str, String)> {
    let format = match &raw.format {
        None => LogFormat::Json,
        Some(f) => match f.get_ref().as_str() {
            "json" => LogFormat::Json,
            "combined" => LogFormat::Combined,
            "hoard" => LogFormat::Hoard,
            "custom" => {
                let Some(t) = &raw.template else {
                    return Err((
                        Some(f.span()),
                        "access_log.template",
                        "format = \"custom\" needs a template (e.g. \"$remote_addr $status $cache_status\")".into(),
                    ));
                };
                let parsed = crate::log_template::LogTemplate::parse(t.get_ref())
                    .map_err(|m| (Some(t.span()), "access_log.template", m))?;
                LogFormat::Custom(std::sync::Arc::new(parsed))
            }
            other => {
                return Err((
                    Some(f.span()),
                    "access_log.format",
                    format!("{other:?}: expected \"json\", \"combined\", \"hoard\" or \"custom\""),
                ))
            }
        },
    };
    if let (Some(t), false) = (&raw.template, matches!(format, LogFormat::Custom(_))) {
        return Err((
            Some(t.span()),
            "access_log.template",
            "a template is for format = \"custom\"".into(),
        ));
    }
    Ok(AccessLogConfig {
        target: raw
            .target
            .as_deref()
            .map_or(LogTarget::Off, LogTarget::parse),
        format,
        buffer: raw.buffer.unwrap_or(ACCESS_LOG_BUFFER).max(1),
    })
}
