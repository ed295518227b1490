//! `[cache]`: disk zones and placement rules.

use super::*;

const ZONES: &str = r#"
[cache]
memory_size = 0

[[cache.zone]]
name = "ssd"
dirs = ["/tmp/a"]
max_size = "2GiB"
inactive = "1d"

[[cache.zone]]
name = "hdd"
dirs = [{ path = "/tmp/b", weight = 2 }, "/tmp/c"]
max_size = "1TiB"
min_free = "5GiB"

[[cache.placement]]
zone = "hdd"
min_size = "8MiB"

[upstream.app]
servers = ["http://127.0.0.1:9000"]

[[site]]
[[site.route]]
prefix = "/v/"
zone = "hdd"
[[site.route]]
prefix = "/"
"#;

#[test]
fn zones_and_placement_resolve() {
    let c = Config::from_toml("hoard.toml", ZONES).unwrap();
    assert_eq!(c.cache.memory_size, 0);
    let z = &c.cache.zones;
    assert_eq!((z[0].name.as_str(), z[1].name.as_str()), ("ssd", "hdd"));
    assert_eq!(z[1].dirs[0].weight, 2);
    assert_eq!(z[1].dirs[1].weight, 1);
    assert_eq!(z[1].min_free, 5 << 30);
    assert_eq!(z[0].inactive, Some(Duration::from_secs(86_400)));
    assert_eq!(c.sites[0].routes[0].zone, Some(1));
    assert_eq!(c.cache.place(None, "/x", None, Some(9 << 20)), Some(1));
    assert_eq!(c.cache.place(None, "/x", None, Some(10)), Some(0));
}

#[test]
fn unknown_zone_names_the_key_and_line() {
    let bad = ZONES.replace("zone = \"hdd\"\nmin_size", "zone = \"hd\"\nmin_size");
    let e = Config::from_toml("hoard.toml", &bad).unwrap_err();
    assert_eq!(e.key, "cache.placement[0].zone");
    assert_eq!(e.line, Some(18));
    assert!(
        e.message
            .contains("unknown zone \"hd\" (defined: ssd, hdd)"),
        "{e}"
    );
    let bad = ZONES.replace(
        "zone = \"hdd\"\n[[site.route]]",
        "zone = \"nvme\"\n[[site.route]]",
    );
    let e = Config::from_toml("hoard.toml", &bad).unwrap_err();
    assert_eq!(e.key, "site[0].route[0].zone");
    let bad = ZONES.replace("max_size = \"2GiB\"", "max_size = \"2GiB\"\nmax_sise = 1");
    let e = Config::from_toml("hoard.toml", &bad).unwrap_err();
    assert!(e.message.contains("max_sise"), "{e}");
    let bad = ZONES.replace("max_size = \"2GiB\"", "max_size = \"10KiB\"");
    let e = Config::from_toml("hoard.toml", &bad).unwrap_err();
    assert_eq!(e.key, "cache.zone[0].max_size");
}
