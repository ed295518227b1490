use crate::cert_files::testing::write;
use crate::{Config, ConfigError};

const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml("hoard.toml", &format!("{text}{UP}"))
}

/// `{ cert = "...", key = "..." }` for a pair of files.
fn pair((cert, key): &(std::path::PathBuf, std::path::PathBuf)) -> String {
    format!(
        "{{ cert = {:?}, key = {:?} }}",
        cert.display().to_string(),
        key.display().to_string()
    )
}

fn listener(tls: &str) -> String {
    format!("[[listener]]\naddress = \"127.0.0.1:0\"\nhttp3 = true\ntls = {tls}\n")
}

#[test]
fn certs_resolve_in_order_alone_and_with_acme() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a", &["a.example"]);
    let b = write(dir.path(), "b", &["*.b.example"]);
    let c = parse(&listener(&format!(
        "{{ certs = [{}, {}] }}",
        pair(&a),
        pair(&b)
    )))
    .unwrap();
    let l = &c.listeners[0];
    assert!(l.tls.is_none() && l.acme.is_empty() && l.http3);
    assert_eq!(
        l.certs.iter().map(|t| t.cert.clone()).collect::<Vec<_>>(),
        [a.0.clone(), b.0.clone()]
    );
    assert_eq!(l.certs[1].key, b.1);
    // With ACME names on the same listener; a multi-line list.
    let c = parse(&listener(&format!(
        "{{ acme = [\"shop.a.example\"], certs = [\n  {},\n  {},\n] }}",
        pair(&a),
        pair(&b)
    )))
    .unwrap();
    assert_eq!(c.listeners[0].acme, [vec!["shop.a.example"]]);
    assert_eq!(c.listeners[0].certs.len(), 2);
}

#[test]
fn bad_certificate_files_name_the_certificate_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = write(d, "a", &["a.example"]);
    let b = write(d, "b", &["b.example"]);
    let ip = write(d, "ip", &["127.0.0.1"]);
    let text = d.join("text.pem");
    std::fs::write(&text, "hello\n").unwrap();
    let missing = (d.join("missing.pem"), a.1.clone());
    let not_pem = (text.clone(), a.1.clone());
    let no_key = (a.0.clone(), text.clone());
    let swapped = (a.0.clone(), b.1.clone());
    for (second, key, what) in [
        (&missing, "listener[0].tls.certs[1].cert", "missing.pem"),
        (
            &not_pem,
            "listener[0].tls.certs[1].cert",
            "no PEM certificate",
        ),
        (
            &no_key,
            "listener[0].tls.certs[1].key",
            "no PEM private key",
        ),
        (&swapped, "listener[0].tls.certs[1]", "is not the key of"),
        (&ip, "listener[0].tls.certs[1]", "no DNS name"),
    ] {
        // The second certificate on a line of its own (line 6).
        let e = parse(&listener(&format!(
            "{{ certs = [\n  {},\n  {},\n] }}",
            pair(&a),
            pair(second)
        )))
        .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(6), key), "{e}");
        assert!(e.message.contains(what), "{what}: {e}");
        assert!(
            e.to_string().starts_with("config error: hoard.toml:6:"),
            "{e}"
        );
    }
}

#[test]
fn certs_conflicts_and_empty_lists_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a", &["a.example"]);
    let with_cert = format!(
        "{{ cert = {:?}, key = {:?}, certs = [{}] }}",
        a.0.display().to_string(),
        a.1.display().to_string(),
        pair(&a)
    );
    for (tls, key, what) in [
        (
            with_cert.as_str(),
            "listener[0].tls.certs",
            "one or the other",
        ),
        ("{ certs = [] }", "listener[0].tls.certs", "at least one"),
    ] {
        let e = parse(&listener(tls)).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(4), key), "{e}");
        assert!(e.message.contains(what), "{e}");
    }
    let e = parse(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nredirect_https = 443\ntls = {{ certs = [{}] }}\n",
        pair(&a)
    ))
    .unwrap_err();
    assert_eq!(e.key, "listener[0].redirect_https", "{e}");
}

/// The slips between the one-certificate and the several-certificate
/// forms get a message that says what to write.
#[test]
fn a_table_or_list_in_the_wrong_place_says_what_to_write() {
    for (tls, what) in [
        (
            "{ certs = { cert = \"a.pem\", key = \"a.key\" } }",
            "`certs = [{ cert = \"a.pem\", key = \"a.key\" }]`",
        ),
        (
            "{ cert = { cert = \"a.pem\", key = \"a.key\" } }",
            "a table where a file name belongs",
        ),
        (
            "{ certs = [{ cert = { cert = \"a.pem\" }, key = \"a.key\" }] }",
            "a table where a file name belongs",
        ),
        (
            "[{ cert = \"a.pem\", key = \"a.key\" }, { cert = \"b.pem\", key = \"b.key\" }]",
            "`tls` is one table, not a list",
        ),
    ] {
        let e = parse(&listener(tls)).unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains(what), "{tls}: {e}");
        assert!(e.message.contains("certs = [{ cert"), "{tls}: {e}");
        assert!(!e.message.contains("invalid type"), "{tls}: {e}");
    }
    // Keys are still checked inside the list.
    let e = parse(&listener(
        "{ certs = [{ cert = \"a.pem\", key = \"a.key\", bogus = 1 }] }",
    ))
    .unwrap_err();
    assert!(e.message.contains("unknown field `bogus`"), "{e}");
    let e = parse(&listener("{ certs = [{ cert = \"a.pem\" }] }")).unwrap_err();
    assert!(e.message.contains("missing field `key`"), "{e}");
}

/// The one-certificate form is read at check time too: a missing or
/// broken file is named by `tls.cert` or `tls.key` and its line; a
/// certificate without DNS names is fine there (no SNI choice to make).
#[test]
fn one_certificate_is_read_at_check_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = write(d, "a", &["a.example"]);
    let b = write(d, "b", &["b.example"]);
    let ip = write(d, "ip", &["127.0.0.1"]);
    assert_eq!(
        parse(&listener(&pair(&a))).unwrap().listeners[0]
            .tls
            .as_ref()
            .unwrap()
            .cert,
        a.0
    );
    assert!(parse(&listener(&pair(&ip))).is_ok());
    let missing = (d.join("missing.pem"), a.1.clone());
    let no_key = (a.0.clone(), d.join("missing.key"));
    let swapped = (a.0.clone(), b.1.clone());
    for (files, key, what) in [
        (&missing, "listener[0].tls.cert", "missing.pem"),
        (&no_key, "listener[0].tls.key", "missing.key"),
        (&swapped, "listener[0].tls", "is not the key of"),
    ] {
        let e = parse(&listener(&pair(files))).unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(4), key), "{e}");
        assert!(e.message.contains(what), "{what}: {e}");
    }
    // A relative name is from the configuration's directory.
    let path = d.join("hoard.toml");
    std::fs::write(
        &path,
        format!("[[listener]]\naddress = \"127.0.0.1:0\"\ntls = {{ cert = \"a.pem\", key = \"a.key\" }}\n{UP}"),
    )
    .unwrap();
    let c = Config::from_file(&path).unwrap();
    assert_eq!(c.listeners[0].tls.as_ref().unwrap().cert, d.join("a.pem"));
}
