//! The workspace reads bottom to top: no crate depends on one above it in
//! [`LAYERS`] (the crate map of `docs/architecture.md`), and no two
//! top-level modules of any crate import each other
//! (`.ci/import_cycles.py`, run on every crate).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates from the bottom up; a crate may depend on crates of lower
/// layers only (test-only dependencies aside).
const LAYERS: &[&[&str]] = &[
    &["hoard-policy", "hoard-heap"],
    &["hoard-store"],
    &["hoard-metrics", "hoard-edge", "hoard-wasm"],
    &["hoard-config"],
    &["hoard-origin"],
    &["hoard-cluster"],
    &["hoard-acme"],
    &["hoard-proxy"],
    &["hoard-admin"],
    &["hoard-server"],
    &["hoard", "hoard-testkit"],
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

/// The workspace crates a manifest's `[dependencies]` name.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section == "[dependencies]" && line.starts_with("hoard-") {
            let name: String = line
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            out.push(name);
        }
    }
    out
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let own = layer(&name).unwrap_or_else(|| panic!("{name} is in no layer of LAYERS"));
        for dep in dependencies(&manifest) {
            let theirs = layer(&dep).unwrap_or_else(|| panic!("{dep} is in no layer of LAYERS"));
            assert!(
                theirs < own,
                "{name} (layer {own}) depends on {dep} (layer {theirs}): a crate may use only lower layers"
            );
        }
        seen += 1;
    }
    assert_eq!(
        seen,
        LAYERS.iter().map(|l| l.len()).sum::<usize>(),
        "every crate has a layer"
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut checked = 0;
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let out = Command::new("python3")
            .arg(repo().join(".ci/import_cycles.py"))
            .arg(&src)
            .output()
            .expect("run python3 .ci/import_cycles.py");
        assert!(
            out.status.success(),
            "{}: top-level modules import each other:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        checked += 1;
    }
    assert!(checked >= LAYERS.len(), "checked {checked} crates");
}
