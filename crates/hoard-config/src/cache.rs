//! `[cache]`: the cache store ([`CacheConfig`]): the memory tier's limits,
//! the disk zones and the rules placing new objects in them.

use std::path::PathBuf;

use super::raw::RawCache;
use super::{defaults, zones, ConfigError, Resolver};

/// The cache store.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Byte limit of the memory tier (headers + body + bookkeeping). Default: 256 MiB.
    pub memory_size: u64,
    /// Largest object stored; larger responses are passed through. Default: 8 MiB.
    pub max_object_size: u64,
    /// Directory of the quick start's disk zone. Default: `hoard-cache`
    /// under the working directory (used only when `--cache-dir` is given).
    pub dir: PathBuf,
    /// Disk zones behind the memory tier (none: memory only).
    pub zones: Vec<hoard_store::disk::ZoneConfig>,
    /// Rules choosing a zone for new objects.
    pub placement: Vec<zones::PlacementRule>,
    /// Slice prefetches running at once, over all routes. Default: 8.
    pub max_prefetches: usize,
    /// Fills held in the in-flight table at most; a miss beyond it goes to
    /// the origin uncached (a slice gets 503), counted as `fills_refused`.
    /// Default: 10000.
    pub max_fills: usize,
}

impl CacheConfig {
    /// The zone a new object goes to (see [`zones`]).
    pub fn place(
        &self,
        route_zone: Option<usize>,
        path: &str,
        content_type: Option<&str>,
        len: Option<u64>,
    ) -> Option<usize> {
        zones::place(
            self.zones.len(),
            &self.placement,
            route_zone,
            path,
            content_type,
            len,
        )
    }
}

impl Resolver<'_> {
    /// `[cache]`, its zones, durability and placement rules.
    pub(super) fn cache(&self, c: RawCache) -> Result<CacheConfig, ConfigError> {
        let dc = CacheConfig::default();
        let max_object_size = c.max_object_size.map_or(dc.max_object_size, |x| x.0);
        let mut zones = self.zones(c.zones, max_object_size)?;
        if let (true, Some(dir)) = (zones.is_empty(), &c.dir) {
            zones.push(zones::quick_zone(
                PathBuf::from(dir),
                defaults::DISK_SIZE,
                max_object_size,
            ));
        }
        self.durability(c.durability, &mut zones)?;
        let placement = self.placement(c.placement, &zones)?;
        Ok(CacheConfig {
            memory_size: c.memory_size.map_or(dc.memory_size, |x| x.0),
            max_object_size,
            dir: c.dir.map_or(dc.dir, PathBuf::from),
            zones,
            placement,
            max_prefetches: c.max_prefetches.unwrap_or(dc.max_prefetches),
            max_fills: c.max_fills.unwrap_or(dc.max_fills).max(1),
        })
    }
}
