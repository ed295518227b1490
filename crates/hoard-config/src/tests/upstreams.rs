//! `[upstream.NAME]`: `https://` and Unix socket servers, origin TLS.

use super::*;

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
fn protocol_and_h2_max_streams() {
    let c = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"http://b:8080\"]\n",
    )
    .unwrap();
    let u = &c.upstreams[0];
    assert_eq!((u.protocol, u.h2_max_streams), (OriginProtocol::H1, 100));
    for (word, p) in [
        ("h1", OriginProtocol::H1),
        ("h2", OriginProtocol::H2),
        ("auto", OriginProtocol::Auto),
    ] {
        let c = Config::from_toml(
            "hoard.toml",
            &format!("[upstream.app]\nservers = [\"https://o\"]\nprotocol = \"{word}\"\nh2_max_streams = 8\n"),
        )
        .unwrap();
        assert_eq!(
            (c.upstreams[0].protocol, c.upstreams[0].h2_max_streams),
            (p, 8)
        );
        assert_eq!(p.as_str(), word);
    }
    // "auto" with plain servers only is accepted (it means HTTP/1.1 there).
    let c = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"http://b:8080\"]\nprotocol = \"auto\"\n",
    )
    .unwrap();
    assert_eq!(c.upstreams[0].protocol, OriginProtocol::Auto);

    let e = error("[upstream.app]\nservers = [\"http://b\"]\nprotocol = \"h3\"\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "upstream.app.protocol"),
        "{e}"
    );
    assert!(
        e.message.contains("\"h3\"") && e.message.contains("auto"),
        "{e}"
    );
    let e = error("[upstream.app]\nservers = [\"http://b\"]\nprotocol = 2\n");
    assert!(e.message.contains("string"), "{e}");
    let e = error("[upstream.app]\nservers = [\"http://b\"]\n\nh2_max_streams = 0\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "upstream.app.h2_max_streams"),
        "{e}"
    );
    let e = error("[upstream.app]\nservers = [\"http://b\"]\nh2_max_streams = 5000\n");
    assert!(e.message.contains("from 1 to 1000"), "{e}");
    // The quick start (`--upstream`) stays on HTTP/1.1.
    let c = Config::quick(&QuickStart {
        upstream: "https://origin.test:8443".into(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(c.upstreams[0].protocol, OriginProtocol::H1);
}
