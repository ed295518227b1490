//! `[cache] durability`: what a committed disk object survives, for every
//! zone (see `hoard_store::disk::durability`).

use hoard_store::disk::{Durability, ZoneConfig};
use toml::Spanned;

use super::{ConfigError, Resolver};

impl Resolver<'_> {
    /// Sets every zone's durability from `[cache] durability` ("process"
    /// when absent).
    pub(super) fn durability(
        &self,
        raw: Option<Spanned<String>>,
        zones: &mut [ZoneConfig],
    ) -> Result<(), ConfigError> {
        let Some(raw) = raw else {
            return Ok(());
        };
        let Some(d) = Durability::parse(raw.get_ref()) else {
            return Err(self.err(
                Some(raw.span()),
                "cache.durability".into(),
                format!(
                    "{:?}: \"process\" (survives a crash of hoard) or \"power\" (fsync: survives a power loss)",
                    raw.get_ref()
                ),
            ));
        };
        for z in zones {
            z.durability = d;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hoard_store::disk::Durability;

    use crate::Config;

    const BASE: &str = "[cache]\nmemory_size = 0\ndir = \"/tmp/hoard-durability\"\n\
        [upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";

    fn with(line: &str) -> String {
        BASE.replace("memory_size = 0\n", &format!("memory_size = 0\n{line}\n"))
    }

    #[test]
    fn every_zone_takes_the_durability() {
        let c = Config::from_toml("hoard.toml", BASE).unwrap();
        assert_eq!(c.cache.zones[0].durability, Durability::Process);
        let c = Config::from_toml("hoard.toml", &with("durability = \"power\"")).unwrap();
        assert_eq!(c.cache.zones[0].durability, Durability::Power);
        let zones = "[cache]\ndurability = \"power\"\n[[cache.zone]]\nname = \"a\"\n\
            dirs = [\"/tmp/a\"]\nmax_size = \"1GiB\"\n[[cache.zone]]\nname = \"b\"\n\
            dirs = [\"/tmp/b\"]\nmax_size = \"1GiB\"\n\
            [upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";
        let c = Config::from_toml("hoard.toml", zones).unwrap();
        assert!(c
            .cache
            .zones
            .iter()
            .all(|z| z.durability == Durability::Power));
    }

    #[test]
    fn a_bad_durability_names_file_line_and_key() {
        let e = Config::from_toml("hoard.toml", &with("durability = \"disk\"")).unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(3), "cache.durability"),
            "{e}"
        );
        assert!(e.message.contains("\"disk\""), "{e}");
        assert!(
            e.to_string().starts_with("config error: hoard.toml:3:"),
            "{e}"
        );
        let e = Config::from_toml("hoard.toml", &with("durability = true")).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(3), "durability"), "{e}");
    }
}
