//! `[filter.NAME]`: Proxy-Wasm filters (see `hoard_wasm` and
//! `docs/filters.md`), and a route's `filters` list naming them.
//!
//! A filter's module is read, compiled and started here, with its
//! configuration, so `hoard check`, a start and a reload all refuse a
//! missing file, an invalid module, a missing ABI version, an unknown
//! import or a configuration the filter rejects, naming the filter.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::units::Size;
use super::{ConfigError, Resolver};

/// `[filter.NAME]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// The module: a `.wasm` file, or the text format (`.wat`).
    pub wasm: Spanned<String>,
    /// The plugin configuration (`proxy_on_configure`), as a string.
    pub config: Option<Spanned<String>>,
    /// ...or the file that holds it.
    pub config_file: Option<Spanned<String>>,
    /// Fuel per callback (about one unit per WebAssembly instruction).
    pub fuel: Option<Spanned<u64>>,
    /// Largest memory of one VM.
    pub max_memory: Option<Spanned<Size>>,
    /// What the `plugin_root_id` property answers (Envoy's `root_id`).
    pub root_id: Option<String>,
}

/// A filter as built: its name and its compiled, started plugin.
#[derive(Debug, Clone)]
pub struct FilterConfig {
    /// `NAME` of `[filter.NAME]`.
    pub name: String,
    /// The module, compiled (see `hoard_wasm::Plugin`).
    pub plugin: Arc<hoard_wasm::Plugin>,
}

impl Resolver<'_> {
    /// Every `[filter.NAME]`, compiled.
    pub(super) fn filters(
        &self,
        raw: BTreeMap<String, Spanned<RawFilter>>,
    ) -> Result<Vec<FilterConfig>, ConfigError> {
        let mut out = Vec::new();
        for (name, f) in raw {
            let span = f.span();
            let f = f.into_inner();
            let at = format!("filter.{name}");
            let wasm_path = self.file_path(f.wasm.get_ref());
            let wasm = std::fs::read(&wasm_path).map_err(|e| {
                self.err(
                    Some(f.wasm.span()),
                    format!("{at}.wasm"),
                    format!("cannot read {}: {e}", wasm_path.display()),
                )
            })?;
            let config = match (f.config, f.config_file) {
                (Some(_), Some(file)) => {
                    return Err(self.err(
                        Some(file.span()),
                        format!("{at}.config_file"),
                        "set either `config` or `config_file`, not both".into(),
                    ))
                }
                (Some(c), None) => bytes::Bytes::from(c.into_inner()),
                (None, Some(file)) => {
                    let p = self.file_path(file.get_ref());
                    bytes::Bytes::from(std::fs::read(&p).map_err(|e| {
                        self.err(
                            Some(file.span()),
                            format!("{at}.config_file"),
                            format!("cannot read {}: {e}", p.display()),
                        )
                    })?)
                }
                (None, None) => bytes::Bytes::new(),
            };
            let mut limits = hoard_wasm::Limits::default();
            if let Some(fuel) = f.fuel {
                if *fuel.get_ref() < 1000 {
                    return Err(self.err(
                        Some(fuel.span()),
                        format!("{at}.fuel"),
                        "at least 1000: a filter needs some to run at all".into(),
                    ));
                }
                limits.fuel = *fuel.get_ref();
            }
            if let Some(m) = f.max_memory {
                let bytes = m.get_ref().0;
                if bytes < 65536 {
                    return Err(self.err(
                        Some(m.span()),
                        format!("{at}.max_memory"),
                        "at least 64KiB, one WebAssembly page".into(),
                    ));
                }
                limits.max_memory = usize::try_from(bytes).unwrap_or(usize::MAX);
            }
            let plugin = hoard_wasm::Plugin::compile(
                &name,
                f.root_id.as_deref().unwrap_or(""),
                &wasm,
                config,
                limits,
            )
            .map_err(|m| {
                self.err(
                    Some(span.clone()),
                    at.clone(),
                    format!("{}: {m}", wasm_path.display()),
                )
            })?;
            out.push(FilterConfig {
                name,
                plugin: Arc::new(plugin),
            });
        }
        Ok(out)
    }

    /// A route's `filters` or `origin_filters` (`key`): each name one of
    /// `filters`, none twice.
    pub(super) fn route_filters(
        &self,
        at: &str,
        key: &str,
        names: Option<Vec<Spanned<String>>>,
        filters: &[FilterConfig],
    ) -> Result<Vec<Arc<hoard_wasm::Plugin>>, ConfigError> {
        let mut out: Vec<Arc<hoard_wasm::Plugin>> = Vec::new();
        for n in names.unwrap_or_default() {
            let Some(f) = filters.iter().find(|f| &f.name == n.get_ref()) else {
                let known: Vec<&str> = filters.iter().map(|f| f.name.as_str()).collect();
                return Err(self.err(
                    Some(n.span()),
                    format!("{at}.{key}"),
                    format!(
                        "unknown filter {:?} (defined: {})",
                        n.get_ref(),
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            };
            if out.iter().any(|p| p.name() == f.name) {
                return Err(self.err(
                    Some(n.span()),
                    format!("{at}.{key}"),
                    format!("filter {:?} is listed twice", f.name),
                ));
            }
            out.push(f.plugin.clone());
        }
        Ok(out)
    }
}
