//! Durations ("500ms", "1s", "2m") and sizes ("256MiB") as they appear in
//! configuration files and on the command line.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration read from configuration; sub-second values are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

/// A byte size read from configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

/// Parses `"500ms"`, `"1.5s"`, `"2m"`, `"1h"`, `"1d"`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected a number with a unit (ms, s, m, h, d), e.g. \"500ms\""))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        other => {
            return Err(format!(
                "invalid duration {s:?}: unknown unit {other:?} (use ms, s, m, h or d)"
            ))
        }
    };
    if !(0.0..=1e10).contains(&secs) {
        return Err(format!("invalid duration {s:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `"256MiB"`, `"64KiB"`, `"1GB"`, `"100k"`, or a bare number of bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("invalid size {s:?}: expected a number with a unit, e.g. \"256MiB\"")
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        other => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let v = n * mult;
    if !(0.0..=1.8e19).contains(&v) {
        return Err(format!("invalid size {s:?}: out of range"));
    }
    Ok(v as u64)
}

struct StrOrNum(&'static str);

impl Visitor<'_> for StrOrNum {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = d.deserialize_any(StrOrNum("a duration such as \"500ms\", \"1s\" or \"2m\""))?;
        parse_duration(&s).map(Dur).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = d.deserialize_any(StrOrNum("a size such as \"256MiB\""))?;
        parse_size(&s).map(Size).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert!(parse_size("12 bananas").is_err());
    }
}
