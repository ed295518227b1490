//! [`ConfigError`]: where a configuration error is (file, line, key) and
//! what is wrong, and how a TOML parse error's offset is turned into a
//! line and a key.

use std::fmt;

/// An error in the configuration: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `command line`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key at fault, e.g. `site[0].route[1].upstream`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(
                f,
                "config error: {}:{}: `{}`: {}",
                self.file, l, self.key, self.message
            ),
            None => write!(
                f,
                "config error: {}: `{}`: {}",
                self.file, self.key, self.message
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// The key written on the line holding `offset` (for parse errors).
pub(super) fn key_at(text: &str, offset: usize) -> String {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    match line.split_once('=') {
        Some((k, _)) => k.trim().to_string(),
        None => line.trim().to_string(),
    }
}
