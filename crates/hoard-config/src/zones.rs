//! Disk zones and placement rules: which zone a new object goes to.
//!
//! A route that names a zone sends its objects there. Otherwise the
//! placement rules are tried in order (the first whose conditions all hold
//! wins: path regex, response `Content-Type` regex, declared size), and
//! without a match the first zone takes the object.

use std::path::PathBuf;
use std::time::Duration;

use hoard_store::disk::{DirConfig, Durability, ZoneConfig};
use regex::Regex;

use super::raw::{RawDir, RawPlacement, RawZone};
use super::{ConfigError, Resolver};

/// One placement rule; every condition given must hold.
#[derive(Debug, Clone)]
pub struct PlacementRule {
    /// The zone chosen (index into the zones).
    pub zone: usize,
    /// The request path matches.
    pub path: Option<Regex>,
    /// The response's `Content-Type` matches.
    pub content_type: Option<Regex>,
    /// The response declares a `Content-Length` of at least this.
    pub min_size: Option<u64>,
}

impl PlacementRule {
    fn matches(&self, path: &str, content_type: Option<&str>, len: Option<u64>) -> bool {
        self.path.as_ref().is_none_or(|r| r.is_match(path))
            && self
                .content_type
                .as_ref()
                .is_none_or(|r| content_type.is_some_and(|c| r.is_match(c)))
            && self.min_size.is_none_or(|m| len.is_some_and(|l| l >= m))
    }
}

/// Chooses the zone of a new object; `None` when there are no zones.
pub fn place(
    zones: usize,
    rules: &[PlacementRule],
    route_zone: Option<usize>,
    path: &str,
    content_type: Option<&str>,
    len: Option<u64>,
) -> Option<usize> {
    if zones == 0 {
        return None;
    }
    route_zone
        .or_else(|| {
            rules
                .iter()
                .find(|r| r.matches(path, content_type, len))
                .map(|r| r.zone)
        })
        .or(Some(0))
}

/// The quick start's zone: one directory, `size` bytes.
pub fn quick_zone(dir: PathBuf, size: u64, max_object: u64) -> ZoneConfig {
    ZoneConfig {
        name: "disk".into(),
        dirs: vec![DirConfig {
            path: dir,
            weight: 1,
        }],
        max_size: size,
        inactive: None,
        min_free: 0,
        max_object,
        durability: Durability::Process,
    }
}

impl Resolver<'_> {
    pub(super) fn zones(
        &self,
        raw: Vec<RawZone>,
        max_object: u64,
    ) -> Result<Vec<ZoneConfig>, ConfigError> {
        let mut zones: Vec<ZoneConfig> = Vec::new();
        for (i, z) in raw.into_iter().enumerate() {
            let at = format!("cache.zone[{i}]");
            let name = z.name.get_ref().clone();
            if name.is_empty() || zones.iter().any(|o| o.name == name) {
                return Err(self.err(
                    Some(z.name.span()),
                    format!("{at}.name"),
                    format!("zone names must be unique and not empty: {name:?}"),
                ));
            }
            let span = z.dirs.span();
            let dirs: Vec<DirConfig> = z
                .dirs
                .into_inner()
                .into_iter()
                .map(|d| match d {
                    RawDir::Path(p) => DirConfig {
                        path: p.into(),
                        weight: 1,
                    },
                    RawDir::Weighted { path, weight } => DirConfig {
                        path: path.into(),
                        weight: weight.unwrap_or(1),
                    },
                })
                .collect();
            if dirs.is_empty() || dirs.len() > 255 || dirs.iter().any(|d| d.weight == 0) {
                return Err(self.err(
                    Some(span),
                    format!("{at}.dirs"),
                    "between 1 and 255 directories, each with a weight of at least 1".into(),
                ));
            }
            let max_size = z.max_size.get_ref().0;
            if max_size < 1 << 20 {
                return Err(self.err(
                    Some(z.max_size.span()),
                    format!("{at}.max_size"),
                    "at least 1MiB".into(),
                ));
            }
            zones.push(ZoneConfig {
                name,
                dirs,
                max_size,
                inactive: z.inactive.map(|d| d.0).filter(|d| *d > Duration::ZERO),
                min_free: z.min_free.map_or(0, |s| s.0),
                max_object,
                durability: Durability::Process,
            });
        }
        Ok(zones)
    }

    pub(super) fn zone_named(
        &self,
        zones: &[ZoneConfig],
        name: &toml::Spanned<String>,
        key: String,
    ) -> Result<usize, ConfigError> {
        zones
            .iter()
            .position(|z| &z.name == name.get_ref())
            .ok_or_else(|| {
                let known: Vec<&str> = zones.iter().map(|z| z.name.as_str()).collect();
                self.err(
                    Some(name.span()),
                    key,
                    format!(
                        "unknown zone {:?} (defined: {})",
                        name.get_ref(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
            })
    }

    pub(super) fn placement(
        &self,
        raw: Vec<RawPlacement>,
        zones: &[ZoneConfig],
    ) -> Result<Vec<PlacementRule>, ConfigError> {
        let mut rules = Vec::new();
        for (i, p) in raw.into_iter().enumerate() {
            let at = format!("cache.placement[{i}]");
            let zone = self.zone_named(zones, &p.zone, format!("{at}.zone"))?;
            let regex = |r: Option<toml::Spanned<String>>, field: &str| {
                r.map(|r| {
                    Regex::new(r.get_ref()).map_err(|e| {
                        self.err(
                            Some(r.span()),
                            format!("{at}.{field}"),
                            format!("invalid regex: {e}"),
                        )
                    })
                })
                .transpose()
            };
            rules.push(PlacementRule {
                zone,
                path: regex(p.path, "path")?,
                content_type: regex(p.content_type, "content_type")?,
                min_size: p.min_size.map(|s| s.0),
            });
        }
        Ok(rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_zone_then_rules_then_first_zone() {
        let rules = vec![
            PlacementRule {
                zone: 1,
                path: Some(Regex::new(r"\.(mp4|avi)$").unwrap()),
                content_type: None,
                min_size: None,
            },
            PlacementRule {
                zone: 1,
                path: None,
                content_type: None,
                min_size: Some(8 << 20),
            },
            PlacementRule {
                zone: 2,
                path: None,
                content_type: Some(Regex::new("^image/").unwrap()),
                min_size: None,
            },
        ];
        assert_eq!(place(3, &rules, None, "/v/a.mp4", None, None), Some(1));
        assert_eq!(place(3, &rules, None, "/big", None, Some(9 << 20)), Some(1));
        assert_eq!(place(3, &rules, None, "/big", None, None), Some(0));
        assert_eq!(
            place(3, &rules, None, "/i", Some("image/png"), Some(10)),
            Some(2)
        );
        assert_eq!(
            place(3, &rules, None, "/p", Some("text/html"), Some(10)),
            Some(0)
        );
        assert_eq!(place(3, &rules, Some(2), "/v/a.mp4", None, None), Some(2));
        assert_eq!(place(0, &rules, Some(2), "/v/a.mp4", None, None), None);
    }
}
