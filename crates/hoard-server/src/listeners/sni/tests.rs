use std::path::Path;

use hoard_config::cert_files::testing::write;

use super::*;

fn loaded(dir: &Path, name: &str, names: &[&str]) -> Loaded {
    let (c, k) = write(dir, name, names);
    load(&c, &k).unwrap()
}

fn same(a: &Arc<CertifiedKey>, b: &Loaded) -> bool {
    a.cert[0] == b.key.cert[0]
}

#[test]
fn exact_names_before_wildcards_first_for_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let a = loaded(dir.path(), "a", &["a.example", "www.a.example"]);
    let wild = loaded(dir.path(), "w", &["*.b.example", "b.example"]);
    let api = loaded(dir.path(), "api", &["api.b.example"]);
    assert_eq!(wild.names, ["*.b.example", "b.example"]);
    let r = FileCerts::new(vec![a.clone(), wild.clone(), api.clone()], None).unwrap();
    for (sni, want) in [
        (Some("a.example"), &a),
        (Some("WWW.A.Example."), &a),
        (Some("b.example"), &wild),
        (Some("x.b.example"), &wild),
        // Exact before wildcard, whatever the order of the files.
        (Some("api.b.example"), &api),
        // A wildcard stands for one label (RFC 6125 §6.4.3).
        (Some("x.y.b.example"), &a),
        (Some(".b.example"), &a),
        (Some("unknown.example"), &a),
        (None, &a),
    ] {
        assert!(same(&r.choose(sni), want), "{sni:?}");
    }
}

#[test]
fn the_earlier_certificate_keeps_a_shared_name() {
    let dir = tempfile::tempdir().unwrap();
    let one = loaded(dir.path(), "one", &["x.example", "*.x.example"]);
    let two = loaded(
        dir.path(),
        "two",
        &["x.example", "*.x.example", "y.example"],
    );
    let r = FileCerts::new(vec![one.clone(), two.clone()], None).unwrap();
    assert!(same(&r.choose(Some("x.example")), &one));
    assert!(same(&r.choose(Some("a.x.example")), &one));
    assert!(same(&r.choose(Some("y.example")), &two));
    assert!(FileCerts::new(Vec::new(), None).is_none());
}

#[test]
fn an_issued_acme_certificate_wins_for_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = loaded(dir.path(), "f", &["*.example.com", "shop.example.com"]);
    let issued = loaded(dir.path(), "acme", &["shop.example.com"]);
    let challenges = Arc::new(hoard_acme::Challenges::new(Arc::new(
        hoard_policy::clock::SystemClock,
    )));
    let all = Arc::new(hoard_acme::Certs::new(challenges));
    let names = vec![vec!["shop.example.com".to_string()]];
    all.set_sites(&names);
    let r = FileCerts::new(vec![file.clone()], Some(all.for_listener(&names))).unwrap();
    assert!(r.with_acme());
    // Not issued yet: the file certificate stands in.
    assert!(same(&r.choose(Some("shop.example.com")), &file));
    all.install(&names[0], issued.key.clone());
    assert!(same(&r.choose(Some("shop.example.com")), &issued));
    // Other names, and no name, stay with the files.
    assert!(same(&r.choose(Some("www.example.com")), &file));
    assert!(same(&r.choose(None), &file));
}
