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
