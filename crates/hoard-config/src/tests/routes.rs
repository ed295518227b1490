//! `[[site.route]]` keys: slices, forwarding, rules, `cold_range`, `encodings`.

use super::*;

#[test]
fn slice_mode_from_the_file_and_the_command_line() {
    let base = "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/video/\"\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{base}slice = \"1MiB\"\nslice_prefetch = 3\n[[site.route]]\nprefix = \"/\"\n"),
    )
    .unwrap();
    let routes = &c.sites[0].routes;
    assert_eq!(
        (routes[0].slice, routes[0].slice_prefetch),
        (Some(1 << 20), 3)
    );
    assert_eq!((routes[1].slice, routes[1].slice_prefetch), (None, 1));
    assert_eq!(c.cache.max_prefetches, 8);

    for bad in ["\"1KiB\"", "\"16MiB\""] {
        let e = error(&format!("{base}slice = {bad}\n"));
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(6), "site[0].route[0].slice"),
            "{e}"
        );
        assert!(e.message.contains("max_object_size"), "{e}");
    }

    let q = QuickStart {
        upstream: "http://127.0.0.1:8080".into(),
        slice: Some(1 << 20),
        ..Default::default()
    };
    assert_eq!(
        Config::quick(&q).unwrap().sites[0].routes[0].slice,
        Some(1 << 20)
    );
    let e = Config::quick(&QuickStart {
        slice: Some(100),
        ..q
    })
    .unwrap_err();
    assert_eq!(e.key, "--slice");
}

#[test]
fn forwarding_settings() {
    const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!(
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n{UP}[[site]]\n[[site.route]]\nprefix = \"/a\"\nforward_headers = [\"X-Forwarded-Host\"]\n\
             [[site.route]]\nprefix = \"/\"\nforward_headers = [\"x-original-url\"]\nforward_unkeyed = true\n"
        ),
    )
    .unwrap();
    assert_eq!(c.server.trusted_proxies.len(), 1);
    let keyed = &c.sites[0].routes[0];
    assert_eq!(keyed.forward_headers[0].as_str(), "x-forwarded-host");
    assert!(keyed.key.headers.iter().any(|h| h == "x-forwarded-host"));
    let unkeyed = &c.sites[0].routes[1];
    assert!(unkeyed.forward_unkeyed);
    assert!(unkeyed.key.headers.is_empty());

    let e = error(&format!(
        "[server]\ntrusted_proxies = [\"10.0.0.0/99\"]\n{UP}"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(2), "server.trusted_proxies"),
        "{e}"
    );
    let e = error(&format!(
        "{UP}[[site]]\n[[site.route]]\nprefix = \"/\"\nforward_headers = [\"accept\"]\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(6), "site[0].route[0].forward_headers"),
        "{e}"
    );
    assert!(e.message.contains("forwarded anyway"), "{e}");
}

#[test]
fn rules_resolve_and_bad_rules_name_key_and_line() {
    const BASE: &str =
        "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    let ok = format!(
        "{BASE}[[site.route.bypass]]\nname = \"logged-in\"\ncookie = \"wordpress_logged_in_*\"\n[[site.route.no_store]]\nname = \"dbg\"\nheader = \"X-Debug: 1\"\nclient = [\"10.0.0.0/8\"]\n"
    );
    let c = Config::from_toml("hoard.toml", &ok).unwrap();
    let r = &c.sites[0].routes[0];
    assert_eq!(&*r.bypass[0].label, "bypass-rule:logged-in");
    assert_eq!(r.no_store[0].conditions.len(), 2);
    let e = error(&format!("{BASE}[[site.route.bypass]]\nname = \"empty\"\n"));
    assert_eq!(e.line, Some(7), "{e}");
    assert!(
        e.key.ends_with(".bypass[0]") && e.message.contains("no condition"),
        "{e}"
    );
    let e = error(&format!(
        "{BASE}[[site.route.no_store]]\nname = \"x\"\nclient = [\"10.0.0.0/99\"]\n"
    ));
    assert_eq!(
        (e.line, e.key.ends_with(".no_store[0].client")),
        (Some(8), true),
        "{e}"
    );
    let e = error(&format!(
        "{BASE}[[site.route.bypass]]\nname = \"x\"\nheader = \"Bad Name\"\n"
    ));
    assert_eq!(
        (e.line, e.key.ends_with(".bypass[0].header")),
        (Some(8), true),
        "{e}"
    );
}

#[test]
fn cold_range_fill_or_forward() {
    let base =
        "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    let c = Config::from_toml("hoard.toml", base).unwrap();
    assert_eq!(c.sites[0].routes[0].cold_range, super::ColdRange::Fill);
    let c = Config::from_toml("hoard.toml", &format!("{base}cold_range = \"forward\"\n")).unwrap();
    assert_eq!(c.sites[0].routes[0].cold_range, super::ColdRange::Forward);
    let e = error(&format!("{base}cold_range = \"sometimes\"\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(6), "site[0].route[0].cold_range"),
        "{e}"
    );
    assert!(e.message.contains("\"fill\" or \"forward\""), "{e}");
}

#[test]
fn route_encodings() {
    use hoard_policy::encoding::Coding;
    let base = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\n";
    let c = Config::from_toml("hoard.toml", base).unwrap();
    let r = &c.sites[0].routes[0];
    assert_eq!(r.encodings, [Coding::Br, Coding::Zstd, Coding::Gzip]);
    assert_eq!(r.compress_min_size, 1024);
    assert_eq!(r.fill_accept_encoding, "identity");
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{base}encodings = [\"gzip\", \"br\"]\ncompress_types = [\"Text/HTML\"]\ncompress_min_size = \"4KiB\"\nfill_accept_encoding = \"gzip, br\"\n"),
    )
    .unwrap();
    let r = &c.sites[0].routes[0];
    assert_eq!(r.encodings, [Coding::Gzip, Coding::Br]);
    assert_eq!(r.compress_types, ["text/html"]);
    assert_eq!(r.compress_min_size, 4096);
    assert_eq!(r.fill_accept_encoding, "gzip, br");
    let off = Config::from_toml("hoard.toml", &format!("{base}encodings = []\n")).unwrap();
    assert!(off.sites[0].routes[0].encodings.is_empty());
    let e = error(&format!("{base}encodings = [\"br\", \"deflate\"]\n"));
    assert!(e.key.ends_with(".encodings"), "{e}");
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.message.contains("deflate"), "{e}");
}

#[test]
fn esi_settings_and_bad_ones_name_key_and_line() {
    use crate::esi::{EsiConfig, OnError};
    let base =
        "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    let c = Config::from_toml("hoard.toml", &format!("{base}esi = true\n")).unwrap();
    assert_eq!(c.sites[0].routes[0].esi, Some(EsiConfig::default()));
    let c = Config::from_toml("hoard.toml", &format!("{base}esi = false\n")).unwrap();
    assert_eq!(c.sites[0].routes[0].esi, None);
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{base}esi = {{ max_depth = 2, max_includes = 5, allow_hosts = [\"CDN.example\"], on_error = \"abort\" }}\n"),
    )
    .unwrap();
    assert_eq!(
        c.sites[0].routes[0].esi,
        Some(EsiConfig {
            max_depth: 2,
            max_includes: 5,
            allow_hosts: vec!["cdn.example".into()],
            on_error: OnError::Abort,
        })
    );
    for (bad, key) in [
        ("{ max_depth = 0 }", "site[0].route[0].esi.max_depth"),
        (
            "{ max_includes = 5000 }",
            "site[0].route[0].esi.max_includes",
        ),
        (
            "{ on_error = \"explode\" }",
            "site[0].route[0].esi.on_error",
        ),
        (
            "{ allow_hosts = [\"a/b\"] }",
            "site[0].route[0].esi.allow_hosts",
        ),
    ] {
        let e = error(&format!("{base}esi = {bad}\n"));
        assert_eq!((e.line, e.key.as_str()), (Some(6), key), "{e}");
    }
    let e = error(&format!("{base}esi = {{ depth = 2 }}\n"));
    assert_eq!(e.line, Some(6), "{e}");
}
