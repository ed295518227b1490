//! The synchronisation primitives of stateful store code, swapped for loom's
//! under `--cfg hoard_loom` so the busy body's wake-up protocol and the
//! in-flight table's slot protocol can be model-checked. The test command
//! runs the models (`tests/loom_models.rs` builds them into `target/loom`);
//! alone:
//!
//! ```sh
//! cargo nextest run -p hoard-store --test loom_models
//! ```

// Reference counts are not what the models check: std's Arc serves both.
pub(crate) use std::sync::Arc;

#[cfg(hoard_loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(hoard_loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

/// A mutex whose `lock` cannot fail (parking_lot's API), over loom's under `--cfg hoard_loom`.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(
    #[cfg(not(hoard_loom))] parking_lot::Mutex<T>,
    #[cfg(hoard_loom)] loom::sync::Mutex<T>,
);

#[cfg(not(hoard_loom))]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex(parking_lot::Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }
}

#[cfg(hoard_loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex(loom::sync::Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("invariant: no panics while locked")
    }
}
