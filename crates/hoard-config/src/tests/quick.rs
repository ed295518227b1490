//! The command-line quick start: `Config::quick` and its flags.

use super::*;

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
