//! Runs the loom models as part of the test command.
//!
//! ## Model
//!
//! The models are unit tests of `hoard-store` that exist only under
//! `--cfg hoard_loom` (the busy body's wake-up protocol in `busy.rs`, the
//! in-flight table's slot protocol in `inflight.rs`). This case builds
//! them and runs them in a child `cargo test`, so `cargo nextest run
//! --workspace` checks them without a flag of its own:
//!
//! ```sh
//! RUSTFLAGS="--cfg hoard_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p hoard-store --lib --release loom
//! ```
//!
//! (with the profile settings below). It fails with the child's output
//! when a model fails or the build does.
//!
//! ## Lifecycle
//!
//! The cfg flag changes every crate's build, so the child builds into a
//! directory of its own, `loom` under the workspace's target directory:
//! the normal builds are never invalidated. The first run there builds
//! `hoard-store` and its dependencies again (about 1m40s of CPU; the CI
//! case, given a slow-timeout override in `.config/nextest.toml`); later
//! runs only rebuild what changed. The release profile is used without
//! LTO and debug info, which would lengthen the build and not the checks
//! (the models run in about two seconds).
//!
//! ## Locking
//!
//! Cargo locks `target/loom` for the child; it shares no build lock with
//! the build that runs this case. Two runs at once wait for each other.
#![cfg(not(hoard_loom))]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn loom_models_pass() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest
        .ancestors()
        .nth(2)
        .expect("invariant: crates/hoard-store is two levels below the workspace");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("loom");
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    rustflags.push_str(" --cfg hoard_loom");
    let out = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["test", "-p", "hoard-store", "--lib", "--release"])
        .arg("loom")
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", rustflags.trim())
        // RUSTFLAGS gives way to these; the flag must reach every crate.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the loom models failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    // A filter that matched nothing would pass: each protocol's models must have run.
    let passed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... ok"))
        .collect();
    for module in ["busy::loom_tests::", "inflight::loom_tests::"] {
        assert!(
            passed.iter().any(|t| t.starts_with(module)),
            "no model of {module} ran:\n{stdout}"
        );
    }
    eprintln!("{} loom models passed", passed.len());
}
