//! `include = ["sites/*.toml"]`: sites, upstreams and listeners kept in
//! other files, merged into the main file's before anything is resolved.
//!
//! Each pattern is taken from the main file's directory; `*` and `?` may
//! stand in its file name (not in its directories). Matches are read in
//! name order, patterns in the order written; an included file's sites
//! and listeners come after the main file's. A file that cannot be read,
//! or a pattern that matches nothing, is an error, and an included file
//! cannot include others (there is one level, so no loop).
//!
//! Errors name the file a key is in: every file is parsed at its own
//! offset of one address space ([`Sources`]), so the span of any key of the
//! merged configuration says which file and line it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::raw::{RawConfig, RawListener, RawSite, RawUpstream};
use super::ConfigError;

/// What an included file may hold.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIncluded {
    /// Refused: one level of files.
    include: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default, rename = "listener")]
    listeners: Vec<RawListener>,
    #[serde(default, rename = "upstream")]
    upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default, rename = "site")]
    sites: Vec<RawSite>,
}

/// One file of the configuration.
#[derive(Debug)]
struct Source {
    /// Its name in errors.
    file: String,
    /// Its text.
    text: String,
    /// Where its first byte is in the shared address space.
    start: usize,
}

/// The files of a configuration, laid end to end (the main file first,
/// at 0), so that one byte offset names a file and a place in it.
#[derive(Debug)]
pub struct Sources {
    list: Vec<Source>,
}

impl Sources {
    /// Just the main file.
    pub fn one(file: &str, text: &str) -> Sources {
        Sources {
            list: vec![Source {
                file: file.into(),
                text: text.into(),
                start: 0,
            }],
        }
    }

    /// The file holding `offset`, and the 1-based line in it.
    pub fn locate(&self, offset: usize) -> (&str, usize) {
        let s = self
            .list
            .iter()
            .rev()
            .find(|s| s.start <= offset)
            .unwrap_or(&self.list[0]);
        (&s.file, super::line_of(&s.text, offset - s.start))
    }

    /// Where the next file starts: past the last one, on a fresh line.
    fn next_start(&self) -> usize {
        let last = self.list.last().expect("invariant: the main file is first");
        last.start + last.text.len() + 2
    }
}

/// Reads the files `raw.include` names and merges their tables into `raw`.
/// `base`: the main file's directory (`None`: the working directory).
pub(super) fn merge(
    file: &str,
    text: &str,
    base: Option<&Path>,
    mut raw: RawConfig,
) -> Result<(RawConfig, Sources), ConfigError> {
    let mut sources = Sources::one(file, text);
    let Some(patterns) = raw.include.take() else {
        return Ok((raw, sources));
    };
    let err_at = |sources: &Sources, span: std::ops::Range<usize>, key: &str, message: String| {
        let (file, line) = sources.locate(span.start);
        ConfigError {
            file: file.into(),
            line: Some(line),
            key: key.into(),
            message,
        }
    };
    // Which file defined each upstream, for a name defined twice.
    let mut upstream_files: BTreeMap<String, String> = raw
        .upstreams
        .keys()
        .map(|k| (k.clone(), file.to_string()))
        .collect();
    // The main file, so that a pattern matching it is refused by name.
    let main = std::fs::canonicalize(file).ok();
    let mut seen: Vec<PathBuf> = Vec::new();
    for pattern in &patterns {
        let paths = expand(pattern.get_ref(), base)
            .map_err(|m| err_at(&sources, pattern.span(), "include", m))?;
        for path in paths {
            if main.is_some() && std::fs::canonicalize(&path).ok() == main {
                return Err(err_at(
                    &sources,
                    pattern.span(),
                    "include",
                    format!(
                        "{} is the main file: it cannot include itself",
                        path.display()
                    ),
                ));
            }
            if seen.contains(&path) {
                return Err(err_at(
                    &sources,
                    pattern.span(),
                    "include",
                    format!("{} is included twice", path.display()),
                ));
            }
            let body = std::fs::read_to_string(&path).map_err(|e| {
                err_at(
                    &sources,
                    pattern.span(),
                    "include",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let name = path.display().to_string();
            let start = sources.next_start();
            // The padding is a comment: the parser sees the file at its
            // offset, so every span it gives lands in this file.
            let padded = format!("#{}\n{body}", " ".repeat(start - 2));
            sources.list.push(Source {
                file: name.clone(),
                text: body,
                start,
            });
            let inc: RawIncluded = toml::from_str(&padded).map_err(|e| {
                let at = e.span().map_or(start, |s| s.start.max(start));
                let (_, line) = sources.locate(at);
                ConfigError {
                    file: name.clone(),
                    line: e.span().map(|_| line),
                    key: e
                        .span()
                        .map(|s| super::key_at(&padded, s.start))
                        .unwrap_or_default(),
                    message: e.message().to_string(),
                }
            })?;
            if let Some(nested) = inc.include {
                return Err(err_at(
                    &sources,
                    nested.span(),
                    "include",
                    "an included file cannot include others (only the main file's `include` \
                     is read)"
                        .into(),
                ));
            }
            for (up, u) in inc.upstreams {
                if let Some(first) = upstream_files.get(&up) {
                    let span = u.servers.first().map_or(start..start, Spanned::span);
                    return Err(err_at(
                        &sources,
                        span,
                        &format!("upstream.{up}"),
                        format!("defined twice: {first} defines it too"),
                    ));
                }
                upstream_files.insert(up.clone(), name.clone());
                raw.upstreams.insert(up, u);
            }
            raw.listeners.extend(inc.listeners);
            raw.sites.extend(inc.sites);
            seen.push(path);
        }
    }
    Ok((raw, sources))
}

/// The files a pattern names, in name order.
fn expand(pattern: &str, base: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    let full = match base {
        Some(b) if Path::new(pattern).is_relative() => b.join(pattern),
        _ => PathBuf::from(pattern),
    };
    let wild = |s: &str| s.contains(['*', '?', '[']);
    let (dir, name) = match (full.parent(), full.file_name().and_then(|n| n.to_str())) {
        (Some(d), Some(n)) => (d.to_path_buf(), n.to_string()),
        _ => return Err(format!("{pattern:?}: not a file name")),
    };
    if wild(&dir.to_string_lossy()) {
        return Err(format!(
            "{pattern:?}: wildcards are allowed in the file name only"
        ));
    }
    if name.contains('[') {
        return Err(format!("{pattern:?}: only `*` and `?` are wildcards"));
    }
    if !wild(&name) {
        if !full.is_file() {
            return Err(format!("{}: no such file", full.display()));
        }
        return Ok(vec![full]);
    }
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            // As a shell does, `*` does not pick hidden files.
            !n.starts_with('.') && glob_match(name.as_bytes(), n.as_bytes())
        })
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    if out.is_empty() {
        return Err(format!(
            "{pattern:?} matches no file (in {})",
            dir.display()
        ));
    }
    out.sort();
    Ok(out)
}

/// `*` (any run) and `?` (one character) against a file name.
fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    match pat.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|k| glob_match(rest, &name[k..])),
        Some((b'?', rest)) => !name.is_empty() && glob_match(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && glob_match(rest, &name[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_file_names() {
        for (p, n, ok) in [
            ("*.toml", "a.toml", true),
            ("*.toml", "a.toml.bak", false),
            ("site-?.toml", "site-1.toml", true),
            ("site-?.toml", "site-12.toml", false),
            ("*", "x", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), n.as_bytes()), ok, "{p} {n}");
        }
    }
}
