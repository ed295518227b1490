//! `[upstream.NAME] health_check = { ... }`: active health checks (see
//! `hoard_origin::probe`): a request to each server every `interval`,
//! whether or not clients come; a server is in service while at least
//! `threshold` of the last `window` probes passed (Varnish's `.window` and
//! `.threshold`).

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::error::ConfigError;
use crate::units::Dur;
use crate::Resolver;

/// An upstream's health check, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The path (and query) asked for, with GET.
    pub path: String,
    /// Time between two probes of a server. Default: 5s.
    pub interval: Duration,
    /// A probe with no complete answer by then failed. Default: 2s.
    pub timeout: Duration,
    /// Probes remembered. Default: 8 (at most 64).
    pub window: u8,
    /// Passed probes among them for the server to be in service. Default: 3.
    pub threshold: u8,
    /// The status a passing probe gets; `None`: any 2xx or 3xx.
    pub expect: Option<u16>,
    /// The Host sent; `None`: the upstream's `host` rule, else the server's.
    pub host: Option<String>,
}

impl HealthCheck {
    /// Whether a probe answered `status` passed.
    pub fn passes(&self, status: u16) -> bool {
        match self.expect {
            Some(want) => status == want,
            None => (200..400).contains(&status),
        }
    }
}

/// The table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    pub path: Spanned<String>,
    pub interval: Option<Spanned<Dur>>,
    pub timeout: Option<Spanned<Dur>>,
    pub window: Option<Spanned<u32>>,
    pub threshold: Option<Spanned<u32>>,
    pub expect: Option<Spanned<u32>>,
    pub host: Option<String>,
}

impl Resolver<'_> {
    /// `upstream.NAME.health_check`, checked.
    pub(super) fn health_check(
        &self,
        upstream: &str,
        raw: RawHealthCheck,
    ) -> Result<HealthCheck, ConfigError> {
        let at = |k: &str| format!("upstream.{upstream}.health_check.{k}");
        let path = raw.path.get_ref();
        if !path.starts_with('/') || http::Uri::try_from(path.as_str()).is_err() {
            return Err(self.err(
                Some(raw.path.span()),
                at("path"),
                format!("{path:?} is not a path (it starts with `/`)"),
            ));
        }
        let interval = raw
            .interval
            .as_ref()
            .map_or(Duration::from_secs(5), |d| d.get_ref().0);
        if interval < Duration::from_millis(10) {
            return Err(self.err(
                raw.interval.as_ref().map(|d| d.span()),
                at("interval"),
                "at least 10ms".into(),
            ));
        }
        let timeout = raw
            .timeout
            .as_ref()
            .map_or(Duration::from_secs(2), |d| d.get_ref().0);
        if timeout.is_zero() {
            return Err(self.err(
                raw.timeout.as_ref().map(|d| d.span()),
                at("timeout"),
                "more than 0".into(),
            ));
        }
        let window = raw.window.as_ref().map_or(8, |w| *w.get_ref());
        if !(1..=64).contains(&window) {
            return Err(self.err(
                raw.window.as_ref().map(|w| w.span()),
                at("window"),
                format!("{window}: from 1 to 64 probes"),
            ));
        }
        let threshold = raw
            .threshold
            .as_ref()
            .map_or(3.min(window), |t| *t.get_ref());
        if threshold == 0 || threshold > window {
            return Err(self.err(
                raw.threshold.as_ref().map(|t| t.span()),
                at("threshold"),
                format!("{threshold}: from 1 to the window ({window})"),
            ));
        }
        let expect = match &raw.expect {
            Some(e) if !(100..=599).contains(e.get_ref()) => {
                return Err(self.err(
                    Some(e.span()),
                    at("expect"),
                    format!("{}: not an HTTP status", e.get_ref()),
                ))
            }
            Some(e) => Some(*e.get_ref() as u16),
            None => None,
        };
        Ok(HealthCheck {
            path: path.clone(),
            interval,
            timeout,
            window: window as u8,
            threshold: threshold as u8,
            expect,
            host: raw.host,
        })
    }
}
