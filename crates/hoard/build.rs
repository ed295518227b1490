//! Records the git commit the binary is built from (`hoard --version`,
//! `/status`); "unknown" outside a git checkout.
//!
//! Cargo reruns a build script whose `rerun-if-changed` path does not exist on
//! every build, which would relink the binary each time. So the script names
//! only the files git itself reports for this checkout (a worktree's HEAD
//! lives under `.git/worktrees/NAME/`, a branch may be loose or packed) and
//! only those that exist.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| !o.stdout.is_empty());
    let commit = if dirty {
        format!("{commit}-modified")
    } else {
        commit
    };
    println!("cargo:rustc-env=HOARD_COMMIT={commit}");
    // Rebuilt when HEAD moves: HEAD itself (a checkout), the branch it names
    // (a commit), and packed-refs (a branch that is packed).
    println!("cargo:rerun-if-changed=build.rs");
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        // A packed branch has no file of its own until its next commit
        // writes one: then the directory it will appear in is watched.
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            let loose = PathBuf::from(&p);
            watched.push(match loose.parent() {
                Some(dir) if !loose.exists() => Some(dir.display().to_string()),
                _ => Some(p),
            });
        }
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten().map(PathBuf::from) {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
