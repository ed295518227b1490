//! The build script names only paths that exist in `rerun-if-changed`: cargo
//! reruns a script whose path is missing on every build, and the binary is
//! then relinked by every no-op `cargo build`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `rerun-if-changed` paths of one build script output, resolved against the
/// directory the script ran in.
fn watched(output: &str, dir: &Path) -> Vec<PathBuf> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("cargo:rerun-if-changed="))
        .map(|p| dir.join(p))
        .collect()
}

#[test]
fn this_builds_watched_paths_exist() {
    let out_dir = Path::new(env!("OUT_DIR"));
    let output = std::fs::read_to_string(out_dir.parent().unwrap().join("output")).unwrap();
    let paths = watched(&output, Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(!paths.is_empty(), "no rerun-if-changed in {output}");
    for p in paths {
        assert!(p.exists(), "{} is watched but missing", p.display());
    }
}

/// The newest compiled build script of this package.
fn script() -> PathBuf {
    let build = Path::new(env!("OUT_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap();
    std::fs::read_dir(build)
        .unwrap()
        .filter_map(|e| e.ok())
        // `<package>-<hash>`: this package's, not a dependency's.
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.rsplit_once('-'))
                .is_some_and(|(package, _)| package == "hoard")
        })
        .map(|e| e.path().join("build-script-build"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().unwrap().modified().unwrap())
        .expect("a compiled build script")
}

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// A fresh repository (no packed-refs) and a worktree of it (HEAD under
/// `.git/worktrees/`): every watched path exists in both, and a commit is
/// among them.
#[test]
fn in_a_repository_without_packed_refs_and_in_a_worktree_watched_paths_exist() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let pkg = repo.join("crates/hoard");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("build.rs"), "fn main() {}").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "one"]);
    assert!(!repo.join(".git/packed-refs").exists());
    git(&repo, &["worktree", "add", "-q", "-b", "side", "../wt"]);
    for dir in [pkg.clone(), tmp.path().join("wt/crates/hoard")] {
        let out = Command::new(script()).current_dir(&dir).output().unwrap();
        assert!(out.status.success());
        let output = String::from_utf8(out.stdout).unwrap();
        let paths = watched(&output, &dir);
        assert!(paths.len() >= 3, "HEAD, the branch and build.rs: {output}");
        for p in &paths {
            assert!(
                p.exists(),
                "{}: {} is watched but missing",
                dir.display(),
                p.display()
            );
        }
        assert!(output.contains("HOARD_COMMIT="), "{output}");
        assert!(!output.contains("HOARD_COMMIT=unknown"), "{output}");
    }
}
