//! Barriers for ordering the actors of a case (VTC `barrier b1 cond 2`).
//!
//! `let b1 = t.barrier(2);` then `b1.sync().await` in two places: each call
//! blocks until `n` parties have called `sync` in the current generation. A
//! barrier is reusable; the next `n` calls form the next generation. Use barriers
//! (or `Origin::wait_requests`) instead of sleeps to sequence events.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::transcript::Transcript;

/// How long one `sync` may wait before the case fails.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// A reusable rendezvous point for `n` parties. Clones are the same barrier.
#[derive(Clone)]
pub struct Barrier {
    inner: Arc<tokio::sync::Barrier>,
    n: usize,
    name: String,
    transcript: Option<Transcript>,
}

impl Barrier {
    /// A barrier for `n` parties that logs nowhere.
    pub fn new(n: usize) -> Self {
        Self::build(n, "barrier".to_owned(), None)
    }

    pub(crate) fn build(n: usize, name: String, transcript: Option<Transcript>) -> Self {
        assert!(n > 0, "a barrier needs at least one party");
        Self {
            inner: Arc::new(tokio::sync::Barrier::new(n)),
            n,
            name,
            transcript,
        }
    }

    /// Number of parties per generation.
    pub fn parties(&self) -> usize {
        self.n
    }

    /// Waits until `n` parties (this one included) have called `sync`.
    ///
    /// # Panics
    /// If the other parties do not arrive within [`BARRIER_TIMEOUT`].
    pub async fn sync(&self) {
        self.log("sync");
        match tokio::time::timeout(BARRIER_TIMEOUT, self.inner.wait()).await {
            Ok(_) => self.log("released"),
            Err(_) => panic!(
                "{}: sync timed out after {BARRIER_TIMEOUT:?} (needs {} parties)",
                self.name, self.n
            ),
        }
    }

    fn log(&self, what: &str) {
        if let Some(t) = &self.transcript {
            t.log(&self.name, what);
        }
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("name", &self.name)
            .field("n", &self.n)
            .finish()
    }
}
