//! What ships beside the binary: every configuration in `examples/` and the
//! packaged `dist/hoard.toml` pass `hoard check`, and the systemd unit
//! passes `systemd-analyze verify` where systemd is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run hoard");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_example_passes_check() {
    let mut n = 0;
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            check(&path);
            n += 1;
        }
    }
    assert!(n >= 6, "examples/ holds {n} configurations");
    check(&repo().join("dist/hoard.toml"));
}

#[test]
fn systemd_unit_verifies() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed (Debian package `systemd`)");
        return;
    }
    // The unit names /usr/bin/hoard; verify it against the binary just built.
    let unit = std::fs::read_to_string(repo().join("dist/hoard.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.service");
    std::fs::write(
        &path,
        unit.replace("/usr/bin/hoard", env!("CARGO_BIN_EXE_hoard")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys but reports them: any line about the unit fails.
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("hoard.service"))
        .collect();
    assert!(
        out.status.success() && about_unit.is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}
