use super::*;

const GOOD: &str = r#"
[server]
debug_headers = true

[[listener]]
address = "127.0.0.1:0"

[cache]
memory_size = "64MiB"

[upstream.app]
servers = ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
read_timeout = "500ms"
down_after = 5
down_backoff_max = "10s"

[[site]]
hosts = ["example.com", "*.example.org"]

[[site.route]]
prefix = "/api/"
upstream = "app"
cache = false

[[site.route]]
regex = "\\.(css|js)$"
upstream = "app"
default_ttl = { "200" = "10m", "any" = "1s" }
ignore_headers = ["set-cookie"]
key = { query = "sorted", headers = ["x-device"] }
"#;

#[test]
fn good_file_resolves() {
    let c = Config::from_toml("hoard.toml", GOOD).unwrap();
    assert_eq!(c.upstreams[0].servers.len(), 2);
    assert_eq!(c.upstreams[0].read_timeout, Duration::from_millis(500));
    assert_eq!(
        (c.upstreams[0].down_after, c.upstreams[0].down_backoff_max),
        (5, Duration::from_secs(10))
    );
    assert_eq!(c.cache.memory_size, 64 << 20);
    let r = &c.sites[0].routes[1];
    assert_eq!(r.policy.default_ttl(200), Some(Duration::from_secs(600)));
    assert_eq!(r.policy.default_ttl(404), Some(Duration::from_secs(1)));
    assert!(r.policy.ignore_set_cookie);
    assert_eq!(r.key.query, QueryKey::Sorted);
    assert!(!c.sites[0].routes[0].cache);
    assert_eq!(
        c.sites[0].hosts[1],
        HostMatch::Suffix(".example.org".into())
    );
}

fn error(text: &str) -> ConfigError {
    Config::from_toml("hoard.toml", text).unwrap_err()
}

#[test]
fn errors_name_file_line_and_key() {
    let e = error("[upstream.app]\nservers = [\"http://a:1\"]\nbogus = 1\n");
    assert_eq!((e.line, e.key.as_str()), (Some(3), "bogus"), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
    assert!(
        e.to_string().starts_with("config error: hoard.toml:3:"),
        "{e}"
    );

    let e = error("[upstream.app]\nservers = [\"http://a:1\"]\nread_timeout = \"5 parsecs\"\n");
    assert_eq!((e.line, e.key.as_str()), (Some(3), "read_timeout"), "{e}");
    assert!(e.message.contains("invalid duration"), "{e}");

    let e = error(
        "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nupstream = \"ap\"\n",
    );
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "site[0].route[0].upstream"),
        "{e}"
    );
    assert!(e.message.contains("unknown upstream \"ap\""), "{e}");

    let e = error("[upstream.app]\nservers = [\"ftp://a\"]\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(2), "upstream.app.servers[0]"),
        "{e}"
    );

    let e = error(
        "[cache]\nmemory_size = \"12 bananas\"\n[upstream.app]\nservers = [\"http://a:1\"]\n",
    );
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.message.contains("invalid size"), "{e}");

    let e = error("[server]\nthreads = 2\n");
    assert!(e.message.contains("upstream"), "{e}");
}

#[test]
fn quick_start_builds_a_catch_all() {
    let q = QuickStart {
        upstream: "http://127.0.0.1:8080".into(),
        default_ttl: Some(Duration::from_millis(1500)),
        ..Default::default()
    };
    let c = Config::quick(&q).unwrap();
    assert_eq!(c.upstreams[0].servers[0].authority, "127.0.0.1:8080");
    assert_eq!(
        c.sites[0].routes[0].policy.default_ttl(200),
        Some(Duration::from_millis(1500))
    );
    let e = Config::quick(&QuickStart {
        upstream: "127.0.0.1:8080".into(),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--upstream");
}

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
fn admin_and_access_log_from_the_file() {
    const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "  t0ken\n").unwrap();
    let text = format!(
        "{UP}[admin]\naddress = \"0.0.0.0:8001\"\ntoken_file = {:?}\npurge_allow = [\"127.0.0.1\", \"10.0.0.0/8\"]\n\
         [access_log]\ntarget = \"/var/log/hoard/access.log\"\nformat = \"combined\"\n",
        token.display().to_string()
    );
    let c = Config::from_toml("hoard.toml", &text).unwrap();
    assert_eq!(c.admin.address, Some("0.0.0.0:8001".parse().unwrap()));
    assert_eq!(c.admin.token.as_deref(), Some("t0ken"));
    assert_eq!(c.admin.purge_allow.len(), 2);
    assert!(!c.admin.forward_tags);
    assert_eq!(
        c.access_log.target,
        LogTarget::File("/var/log/hoard/access.log".into())
    );
    assert_eq!(c.access_log.format, LogFormat::Combined);

    // Off by default.
    let c = Config::from_toml("hoard.toml", UP).unwrap();
    assert_eq!(c.admin.address, None);
    assert!(c.admin.purge_allow.is_empty());
    assert_eq!(c.access_log.target, LogTarget::Off);

    let e = error(&format!("{UP}[admin]\naddress = \"10.1.2.3:8001\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "admin.token"), "{e}");
    assert!(e.message.contains("not on loopback"), "{e}");
    let e = error(&format!(
        "{UP}[admin]\naddress = \"127.0.0.1:8001\"\npurge_allow = [\"10.0.0.0/40\"]\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "admin.purge_allow"),
        "{e}"
    );
    // Regex purges pending at once: 64 by default, at least 1.
    assert_eq!(c.admin.max_pending_bans, 64);
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{UP}[admin]\nmax_pending_bans = 3\n"),
    )
    .unwrap();
    assert_eq!(c.admin.max_pending_bans, 3);
    let e = error(&format!("{UP}[admin]\nmax_pending_bans = 0\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "admin.max_pending_bans"),
        "{e}"
    );
    // `group` needs `user`; an unknown user is named with its line.
    let e = error(&format!("[server]\ngroup = \"nogroup\"\n{UP}"));
    assert_eq!((e.line, e.key.as_str()), (Some(2), "server.group"), "{e}");
    let e = error(&format!("[server]\nuser = \"no-such-user-x\"\n{UP}"));
    assert_eq!((e.line, e.key.as_str()), (Some(2), "server.user"), "{e}");
    let e = error(&format!("{UP}[admin]\naddress = \"localhost\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "admin.address"), "{e}");
    let e = error(&format!(
        "{UP}[admin]\ntoken_file = \"/nonexistent/token\"\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "admin.token_file"),
        "{e}"
    );
    let e = error(&format!("{UP}[access_log]\nformat = \"xml\"\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "access_log.format"),
        "{e}"
    );
    assert!(e.message.contains("\"hoard\""), "{e}");
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{UP}[access_log]\nformat = \"hoard\"\n"),
    )
    .unwrap();
    assert_eq!(c.access_log.format, LogFormat::Hoard);
    let e = error(&format!("{UP}[admin]\ntokn = \"x\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "tokn"), "{e}");
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
fn https_servers_and_their_tls_table() {
    let c = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"https://origin.test\", \"http://b:8080\"]\n",
    )
    .unwrap();
    let u = &c.upstreams[0];
    assert_eq!(u.servers[0].authority, "origin.test:443");
    assert!(u.servers[0].tls && !u.servers[1].tls);
    assert_eq!(u.servers[0].host, "origin.test");
    let tls = u.tls.as_ref().expect("a TLS client for https servers");
    assert!(tls.settings.verify, "verified by default");

    // A missing file names the key, the line and the file.
    let e = error(
        "[upstream.app]\nservers = [\"https://o:8443\"]\ntls = { ca = \"/nonexistent/ca.pem\" }\n",
    );
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "upstream.app.tls"),
        "{e}"
    );
    assert!(e.message.contains("/nonexistent/ca.pem"), "{e}");
    let e = error(
        "[upstream.app]\nservers = [\"https://o\"]\ntls = { cert = \"/nonexistent/c.pem\" }\n",
    );
    assert!(e.message.contains("go together"), "{e}");
    let e = error("[upstream.app]\nservers = [\"https://o\"]\ntls = { verfy = false }\n");
    assert!(e.message.contains("unknown field"), "{e}");
    let e = error("[upstream.app]\nservers = [\"ftp://o\"]\n");
    assert!(e.message.contains("https://host:port"), "{e}");

    let q = QuickStart {
        upstream: "https://origin.test:8443".into(),
        ..Default::default()
    };
    let c = Config::quick(&q).unwrap();
    assert!(c.upstreams[0].servers[0].tls && c.upstreams[0].tls.is_some());
    let e = Config::quick(&QuickStart {
        upstream: "https://origin.test".into(),
        upstream_ca: Some("/nonexistent/ca.pem".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--upstream-ca");
}

#[test]
fn unix_socket_servers() {
    let c = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"unix:/run/app.sock\"]\n",
    )
    .unwrap();
    let s = &c.upstreams[0].servers[0];
    assert_eq!((s.authority.as_str(), s.tls), ("unix:/run/app.sock", false));
    assert!(c.upstreams[0].tls.is_none());
    let e = error("[upstream.app]\nservers = [\"unix:app.sock\"]\n");
    assert_eq!(e.key, "upstream.app.servers[0]", "{e}");
    assert!(e.message.contains("absolute"), "{e}");
    let q = QuickStart {
        upstream: "unix:/run/app.sock".into(),
        ..Default::default()
    };
    assert_eq!(
        Config::quick(&q).unwrap().upstreams[0].servers[0].authority,
        "unix:/run/app.sock"
    );
}

#[test]
fn proxy_protocol_listener_keys() {
    let up = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!("[[listener]]\naddress = \"127.0.0.1:0\"\nproxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]\n{up}"),
    )
    .unwrap();
    assert_eq!(
        c.listeners[0].proxy_protocol.as_ref().map(Vec::len),
        Some(1)
    );
    let e = error(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nproxy_protocol_from = [\"10.0.0.0/8\"]\n{up}"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "listener[0].proxy_protocol_from"),
        "{e}"
    );
    let e = error(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nproxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/99\"]\n{up}"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "listener[0].proxy_protocol_from"),
        "{e}"
    );
}

#[test]
fn quick_http3_needs_tls() {
    let q = QuickStart {
        upstream: "http://127.0.0.1:9".into(),
        http3: true,
        ..Default::default()
    };
    let e = Config::quick(&q).unwrap_err();
    assert_eq!(e.key, "--http3", "{e}");
    let c = Config::quick(&QuickStart {
        tls: Some(TlsConfig {
            cert: "c.pem".into(),
            key: "k.pem".into(),
        }),
        ..q
    })
    .unwrap();
    assert!(c.listeners[0].http3 && c.listeners[0].tls.is_some());
}

#[test]
fn quick_domains_make_an_acme_listener_and_a_redirect() {
    let q = QuickStart {
        upstream: "http://127.0.0.1:9".into(),
        domains: vec![
            "Example.com, www.example.com".into(),
            "blog.example.org".into(),
        ],
        acme_email: Some("ops@example.com".into()),
        http3: true,
        ..Default::default()
    };
    let c = Config::quick(&q).unwrap();
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.listeners[0].address, "0.0.0.0:80".parse().unwrap());
    assert_eq!(c.listeners[0].redirect_https, Some(443));
    assert_eq!(c.listeners[1].address, "0.0.0.0:443".parse().unwrap());
    // Each --domain a certificate; commas join names in one.
    assert_eq!(
        c.listeners[1].acme,
        [
            vec!["example.com", "www.example.com"],
            vec!["blog.example.org"]
        ]
    );
    // HTTP/3 on the HTTPS listener.
    assert!(c.listeners[1].http3 && !c.listeners[0].http3);
    assert_eq!(c.acme.contact, ["mailto:ops@example.com"]);
    assert_eq!(c.acme.directory, acme::LETS_ENCRYPT);
    let e = Config::quick(&QuickStart {
        tls: Some(TlsConfig {
            cert: "c.pem".into(),
            key: "k.pem".into(),
        }),
        ..q.clone()
    })
    .unwrap_err();
    assert_eq!(e.key, "--domain", "{e}");
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9".into(),
        acme_email: Some("ops@example.com".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--domain", "{e}");
    for bad in ["*.example.com", "localhost", "a..example", "-a.example"] {
        let e = Config::quick(&QuickStart {
            domains: vec![bad.into()],
            ..q.clone()
        })
        .unwrap_err();
        assert_eq!(e.key, "--domain", "{bad}: {e}");
    }
    let e = Config::quick(&QuickStart {
        domains: vec!["a.example,b.example".into(), "b.example".into()],
        ..q.clone()
    })
    .unwrap_err();
    assert!(e.to_string().contains("two certificates"), "{e}");
}

#[test]
fn acme_keys_are_checked() {
    let up = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!("[[listener]]\naddress = \"127.0.0.1:0\"\nredirect_https = 8443\n[[listener]]\naddress = \"127.0.0.1:8443\"\ntls = {{ acme = [\"a.example\", [\"b.example\", \"WWW.b.example\"]] }}\nhttp3 = true\n[acme]\ndirectory = \"https://ca.test/dir\"\nrenew_left = 0.5\nchallenges = [\"tls-alpn-01\"]\naccount = \"/etc/hoard/acme-account.json\"\n{up}"),
    )
    .unwrap();
    assert_eq!(c.listeners[0].redirect_https, Some(8443));
    assert_eq!(
        c.listeners[1].acme,
        [vec!["a.example"], vec!["b.example", "www.b.example"]]
    );
    assert!(c.listeners[1].http3);
    assert_eq!(c.acme.renew_left, 0.5);
    assert_eq!(c.acme.challenges, [acme::ChallengeKind::TlsAlpn01]);
    assert_eq!(
        c.acme.account.as_deref(),
        Some(std::path::Path::new("/etc/hoard/acme-account.json"))
    );
    for (text, line, key) in [
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = { acme = [\"a\"], cert = \"c\" }\n", 3, "listener[0].tls.acme"),
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = {}\n", 2, "listener[0].tls"),
        ("[acme]\nrenew_left = 2.0\n", 2, "acme.renew_left"),
        ("[acme]\nretry = \"0s\"\n", 2, "acme.retry"),
        ("[acme]\ndirectory = \"ftp://x\"\n", 2, "acme.directory"),
        ("[acme]\nchallenges = [\"dns-01\"]\n", 2, "acme.challenges"),
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = { acme = [\"*.a.example\"] }\n", 3, "listener[0].tls.acme"),
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = { acme = [\"a.example\", [\"a.example\", \"b.example\"]] }\n", 3, "listener[0].tls.acme"),
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = { acme = [\"a.example\"] }\n[[listener]]\naddress = \"127.0.0.1:1\"\ntls = { acme = [[\"a.example\", \"b.example\"]] }\n", 6, "listener[1].tls.acme"),
        ("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = { acme = [\"a.example\"] }\nredirect_https = 443\n", 4, "listener[0].redirect_https"),
    ] {
        let e = error(&format!("{text}{up}"));
        assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{e}");
    }
}

#[test]
fn http3_needs_tls() {
    let up = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::server::sni::tests::write(dir.path(), "c", &["c.example"]);
    let c = Config::from_toml(
        "hoard.toml",
        &format!("[[listener]]\naddress = \"127.0.0.1:0\"\nhttp3 = true\ntls = {{ cert = {cert:?}, key = {key:?} }}\n{up}"),
    )
    .unwrap();
    assert!(c.listeners[0].http3);
    let e = error(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nhttp3 = true\n{up}"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "listener[0].http3"),
        "{e}"
    );
}

#[test]
fn a_cluster_is_read_and_checked() {
    let ok = Config::from_toml(
        "hoard.toml",
        r#"
[upstream.app]
servers = ["http://127.0.0.1:9000"]
[cluster]
node = "n2"
peers = ["n1=127.0.0.1:8081", "n2=127.0.0.1:8082", "n3=127.0.0.1:8083*2"]
owner_connect_timeout = "150ms"
"#,
    )
    .unwrap();
    let c = ok.cluster.as_ref().unwrap();
    assert_eq!(c.node, "n2");
    assert_eq!(c.members.len(), 3);
    assert_eq!(c.members[2].weight, 2.0);
    assert_eq!(c.owner_connect_timeout, Duration::from_millis(150));
    // The default name in Via and Cache-Status tells the nodes apart.
    assert_eq!(ok.server.via, "hoard-n2");

    let e = error(
        r#"[upstream.app]
servers = ["http://127.0.0.1:9000"]
[cluster]
node = "n1"
peers = ["n1=10.0.0.1:80", "n2=10.0.0.2:80"]
"#,
    );
    assert_eq!(e.key, "cluster");
    assert!(e.message.contains("secret"), "{e}");
    assert_eq!(e.line, Some(4));
    let e = error(
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1\"]\n",
    );
    assert_eq!(e.key, "cluster.peers");
    assert_eq!(e.line, Some(5));
    // The near tier: defaults, sizes, a bad count named with its line.
    assert_eq!(c.near_cache_size, 64 << 20);
    assert_eq!(c.near_admit_after, 2);
    let near = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\nnear_cache_size = \"1MiB\"\nnear_admit_after = 1\n",
    )
    .unwrap();
    let nc = near.cluster.as_ref().unwrap();
    assert_eq!((nc.near_cache_size, nc.near_admit_after), (1 << 20, 1));
    let e = error(
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\nnear_admit_after = 0\n",
    );
    assert_eq!(e.key, "cluster.near_admit_after");
    assert_eq!(e.line, Some(6));
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_near_size: Some(1 << 20),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-near-size");
    let q = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_peers: Some("n1=127.0.0.1:1".into()),
        cluster_near_size: Some(0),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(q.cluster.unwrap().near_cache_size, 0);
    // A route's routing key: the same table as `key`, checked the same way.
    let site = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{site}cluster_key = {{ query = \"none\" }}\n"),
    )
    .unwrap();
    let k = c.sites[0].routes[0].cluster_key.as_ref().unwrap();
    assert_eq!(k.query, QueryKey::None);
    assert!(
        Config::from_toml("hoard.toml", site).unwrap().sites[0].routes[0]
            .cluster_key
            .is_none()
    );
    let e = error(&format!("{site}cluster_key = {{ query = \"odd\" }}\n"));
    assert_eq!(e.key, "site[0].route[0].cluster_key.query");
    assert_eq!(e.line, Some(7));
}

#[test]
fn cluster_members_tiers_and_rampup() {
    use super::cluster::Discovery;
    let up = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";
    let ok = Config::from_toml(
        "hoard.toml",
        &format!(
            "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"dns\"\ndns = \"hoard-peers.default.svc:8080\"\nresolver = \"127.0.0.1:5353\"\nrefresh = \"2s\"\n[[cluster.tier]]\nname = \"shield\"\npeers = [\"p1=127.0.0.1:9001\"]\n"
        ),
    )
    .unwrap();
    let c = ok.cluster.unwrap();
    assert_eq!(
        c.discovery,
        Discovery::Dns {
            name: "hoard-peers.default.svc".into(),
            port: 8080,
            resolver: Some("127.0.0.1:5353".parse().unwrap()),
            refresh: Duration::from_secs(2),
        }
    );
    assert_eq!(
        c.rampup,
        Duration::from_secs(60),
        "the default with discovery"
    );
    assert_eq!(c.tiers[0].name, "shield");
    assert_eq!(c.tiers[0].members[0].name, "p1");
    // A static list ramps up only when told to.
    let st = Config::from_toml(
        "hoard.toml",
        &format!("{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n"),
    )
    .unwrap();
    assert_eq!(st.cluster.unwrap().rampup, Duration::ZERO);
    // SRV names need no port.
    let srv = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_dns: Some("_http._tcp.hoard.service.consul".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        srv.cluster.unwrap().discovery,
        Discovery::Dns { port: 0, .. }
    ));
    // Errors name the key and the line.
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"dns\"\ndns = \"hoard-peers\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.dns", Some(7)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"gossip\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.source", Some(6)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"redis\"\nadvertise = \"127.0.0.1:1\"\n"
    ));
    assert_eq!(e.key, "cluster.members.source");
    assert!(e.message.contains("[cluster.bus]"), "{e}");
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n[cluster.members]\nsource = \"dns\"\ndns = \"h:1\"\n"
    ));
    assert_eq!(e.key, "cluster.peers");
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n[[cluster.tier]]\npeers = [\"p1=10.0.0.1:80\"]\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.tier.peers", Some(7)),
        "{e}"
    );
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_peers: Some("n1=127.0.0.1:1".into()),
        cluster_dns: Some("h:1".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-peers");
    // Kubernetes: the Service is required, the API URL is checked.
    let k = Config::from_toml(
        "hoard.toml",
        &format!(
            "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nservice = \"hoard-peers\"\nnamespace = \"edge\"\napi = \"https://10.96.0.1:443\"\nport = \"http\"\n"
        ),
    )
    .unwrap();
    match k.cluster.unwrap().discovery {
        Discovery::Kubernetes(s) => {
            assert_eq!(
                (s.service.as_str(), s.namespace.as_str()),
                ("hoard-peers", "edge")
            );
            assert!(s.token_file.ends_with("serviceaccount/token"));
        }
        other => panic!("{other:?}"),
    }
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nnamespace = \"edge\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.service", Some(6)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nservice = \"s\"\nnamespace = \"edge\"\napi = \"10.96.0.1\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.api", Some(9)),
        "{e}"
    );
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_advertise: Some("127.0.0.1:1".parse().unwrap()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-advertise");
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
