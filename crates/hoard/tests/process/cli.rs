//! The command line: `hoard check` reports configuration errors with file, line and key.

use std::process::Command;

fn hoard(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(args)
        .output()
        .expect("run hoard");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn check_accepts_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.toml");
    std::fs::write(&path, "[upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\ndefault_ttl = { \"200\" = \"500ms\" }\n").unwrap();
    let (code, out, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    assert!(out.contains("valid"));
}

#[test]
fn check_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\nread_timeot = \"1s\"\n",
    )
    .unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.toml:3"), "{err}");
    assert!(err.contains("read_timeot"), "{err}");
    assert!(err.contains("unknown field"), "{err}");
}

#[test]
fn check_refuses_a_server_with_words_after_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.toml");
    std::fs::write(
        &path,
        "[upstream.app]\nservers = [\n  \"http://127.0.0.1:8080\",\n  \"http://127.0.0.1:1 backup\",\n]\n",
    )
    .unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hoard.toml:4: `upstream.app.servers[1]`"),
        "{err}"
    );
    assert!(err.contains("backup = [...]"), "{err}");
}

#[test]
fn quick_start_needs_an_upstream() {
    let (code, _, err) = hoard(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--upstream"), "{err}");
    let (code, _, err) = hoard(&["--upstream", "ftp://x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected http://host:port"), "{err}");
}

#[test]
fn disk_size_needs_a_cache_dir() {
    let (code, _, err) = hoard(&["--upstream", "http://127.0.0.1:9", "--disk-size", "1GiB"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--disk-size") && err.contains("--cache-dir"),
        "{err}"
    );
    let (code, _, err) = hoard(&["--upstream", "http://127.0.0.1:9", "--disk-size", "lots"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--disk-size"), "{err}");
}

#[test]
fn acme_flags_need_a_domain() {
    let (code, _, err) = hoard(&[
        "--upstream",
        "http://127.0.0.1:9",
        "--acme-email",
        "ops@example.com",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--domain"), "{err}");
    let (code, _, err) = hoard(&["--upstream", "http://127.0.0.1:9", "--help"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn check_names_a_bad_durability() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.toml");
    let file = |d: &str| {
        format!(
            "[cache]\ndir = \"{}\"\ndurability = \"{d}\"\n\
             [upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\n",
            dir.path().join("cache").display()
        )
    };
    std::fs::write(&path, file("fsync")).unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hoard.toml:3"), "{err}");
    assert!(err.contains("cache.durability"), "{err}");
    assert!(err.contains("\"fsync\""), "{err}");
    std::fs::write(&path, file("power")).unwrap();
    let (code, out, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
}

#[test]
fn check_says_how_to_write_several_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sni.toml");
    let up = "[upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\n";
    // One table where the list of certificates belongs.
    std::fs::write(
        &path,
        format!("[[listener]]\naddress = \"0.0.0.0:443\"\ntls = {{ certs = {{ cert = \"a.pem\", key = \"a.key\" }} }}\n{up}"),
    )
    .unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sni.toml:3"), "{err}");
    assert!(
        err.contains("certs = [{ cert = \"a.pem\", key = \"a.key\" }]"),
        "{err}"
    );
    assert!(!err.contains("invalid type"), "{err}");
    // A certificate file that is not there: the certificate and its line.
    std::fs::write(
        &path,
        format!(
            "[[listener]]\naddress = \"0.0.0.0:443\"\ntls = {{ certs = [\n  {{ cert = \"{0}/a.pem\", key = \"{0}/a.key\" }},\n] }}\n{up}",
            dir.path().display()
        ),
    )
    .unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sni.toml:4"), "{err}");
    assert!(err.contains("listener[0].tls.certs[0].cert"), "{err}");
    assert!(err.contains("a.pem"), "{err}");
}

#[test]
fn check_reads_respond_files_from_the_config_dir() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.toml");
    let text = "[[site]]\nmax_body_size = \"1MiB\"\n[[site.route]]\nprefix = \"/healthz\"\nrespond = { status = 200, body = \"ok\" }\n\
                [[site.route]]\nprefix = \"/\"\nclient_no_cache = \"ignore\"\nrespond = { status = 503, body_file = \"maintenance.html\" }\n";
    std::fs::write(&path, text).unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hoard.toml:9"), "{err}");
    assert!(err.contains("site[0].route[1].respond.body_file"), "{err}");
    assert!(err.contains("maintenance.html"), "{err}");
    std::fs::write(dir.path().join("maintenance.html"), "<p>soon</p>").unwrap();
    let (code, out, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
}

#[test]
fn check_refuses_a_route_an_earlier_catch_all_hides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.toml");
    std::fs::write(
        &path,
        "[upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\n[[site]]\n\
         [[site.route]]\nupstream = \"app\"\n\
         [[site.route]]\nprefix = \"/admin/\"\nallow = [\"10.0.0.0/8\"]\nupstream = \"app\"\n",
    )
    .unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hoard.toml:7: `site[0].route[1]`"), "{err}");
    assert!(
        err.contains("prefix \"/admin/\" (line 7) is never reached")
            && err.contains("`site[0].route[0]` (prefix \"/\", line 4)"),
        "{err}"
    );
}

/// `hoard check` on `text` written as `hoard.toml` in a new directory
/// (with `files` beside it): exit code and stderr.
fn check(text: &str, files: &[(&str, &str)]) -> (i32, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let path = dir.path().join("hoard.toml");
    std::fs::write(&path, text).unwrap();
    let (code, _, err) = hoard(&["check", "--config", path.to_str().unwrap()]);
    (code, err, dir)
}

const UP: &str = "[upstream.app]\nservers = [\"http://127.0.0.1:8080\"]\n";

#[test]
fn check_refuses_proxy_protocol_without_its_balancers() {
    let (code, err, _dir) = check(
        &format!("[[listener]]\naddress = \"0.0.0.0:80\"\nproxy_protocol = true\n{UP}"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hoard.toml:3: `listener[0].proxy_protocol_from`"),
        "{err}"
    );
}

#[test]
fn check_refuses_a_via_that_is_not_a_token() {
    for via in ["\"\"", "\"my proxy\""] {
        let (code, err, _dir) = check(&format!("{UP}[server]\nvia = {via}\n"), &[]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("hoard.toml:4: `server.via`"), "{err}");
        assert!(err.contains("a letter, then letters, digits"), "{err}");
    }
}

#[test]
fn check_refuses_two_listeners_on_one_address() {
    let (code, err, _dir) = check(
        &format!("[[listener]]\naddress = \"0.0.0.0:8080\"\n[[listener]]\naddress = \"0.0.0.0:8080\"\n{UP}"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hoard.toml:4: `listener[1].address`"), "{err}");
}

#[test]
fn check_reads_a_listener_certificate_from_the_config_dir() {
    let text = format!(
        "[[listener]]\naddress = \"0.0.0.0:443\"\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n{UP}"
    );
    let (code, err, dir) = check(&text, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hoard.toml:3: `listener[0].tls.cert`"),
        "{err}"
    );
    assert!(
        err.contains(&dir.path().join("site.pem").display().to_string()),
        "{err}"
    );
    // The key too, once the certificate is there.
    let (code, err, _dir) = check(&text, &[("site.pem", "")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("listener[0].tls"), "{err}");
}

#[test]
fn check_refuses_a_star_inside_a_query_name() {
    let (code, err, _dir) = check(
        &format!("{UP}[[site]]\n[[site.route]]\nprefix = \"/\"\nkey = {{ query_exclude = [\"utm*id\"] }}\n"),
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hoard.toml:6: `site[0].route[0].key.query_exclude`"),
        "{err}"
    );
}
