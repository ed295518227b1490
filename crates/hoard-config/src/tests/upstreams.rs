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
