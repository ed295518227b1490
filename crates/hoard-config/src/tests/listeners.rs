//! `[[listener]]`: PROXY protocol, ACME names, HTTP/3.

use super::*;

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
    let (cert, key) = crate::cert_files::testing::write(dir.path(), "c", &["c.example"]);
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
