//! What the running binary is: its version, and the git commit it was built
//! from, which the binary records at start (`/status` reports both).

use std::sync::OnceLock;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

static COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Records the commit (once; later calls are ignored).
pub fn set_commit(commit: &'static str) {
    let _ = COMMIT.set(commit);
}

/// The recorded commit, or "unknown".
pub fn commit() -> &'static str {
    COMMIT.get().copied().unwrap_or("unknown")
}
