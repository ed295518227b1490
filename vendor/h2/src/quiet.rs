//! Releasing an idle connection's buffers (a hoard patch, see the
//! `vendor/README.md` of the tree this copy lives in).
//!
//! A connection allocates a frame write buffer (16 KiB), a frame read
//! buffer (8 KiB) and an HPACK decoding buffer (4 KiB) when it starts and,
//! unpatched, keeps them for its whole life, whether it is busy or has
//! been silent for an hour. [`release_idle`] lets the caller say when a
//! connection is idle: a connection polled inside it that then has nothing
//! to write, no frame half read and nothing to decode gives up those three
//! buffers, its emptied stream slots and queues and its HPACK encoder's
//! table, to its thread's spares (`crate::spares`), and takes each back
//! from there (or allocates it, once, at its usual size) when it next
//! needs it. A connection never polled inside `release_idle` keeps its
//! buffers as before, so a busy connection never pays for it.
//!
//! The leave is a flag of the calling thread, set for the length of the
//! call: a poll is synchronous, so only the connection the caller polls
//! inside it can see it.

use std::cell::Cell;

std::thread_local! {
    static RELEASE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, typically one poll of a connection that its owner knows to be
/// idle, with leave for that connection to free its idle buffers (see the
/// module documentation). Returns what `f` returns.
pub fn release_idle<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            RELEASE.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(RELEASE.with(|r| r.replace(true)));
    f()
}

/// Whether the current poll runs inside [`release_idle`].
pub(crate) fn requested() -> bool {
    RELEASE.with(|r| r.get())
}
