//! Where disk operations run: never on the threads that serve connections.
//!
//! ## Model
//!
//! Every open, stat, write, rename, unlink and directory scan of a zone, and
//! every read that may have to wait for the device, is a closure handed to
//! [`IoPool::run`]. (A read the page cache answers whole is done at once
//! with `RWF_NOWAIT`, which returns `EAGAIN` instead of waiting: see
//! `reader.rs`.) It waits for one of the zone's
//! permits (a `tokio` semaphore: a slow disk can occupy at most that many
//! threads), then runs on tokio's blocking pool. The connection-serving
//! workers only await the result, so a disk that stalls delays the requests
//! that read it and nothing else: memory hits keep their speed.
//!
//! Why a blocking pool rather than io_uring: with page-cached reads done
//! inline, the pool only carries operations that wait for the device, where
//! its hand-off (about 12 µs) does not matter; io_uring would need its own
//! runtime (tokio-uring) beside hyper's. `docs/disk.md` has the numbers.
//!
//! ## Test gate
//!
//! [`IoGate`] lets a test hold every read at the moment it would start, see
//! that it is held, and let it go: how the tests show that a disk read that
//! never completes stops nothing else. It can also make object writes fail
//! as a full disk would (`ENOSPC`), object opens fail as a failing
//! disk would (`EIO`), and unlinks fail as in a directory that refuses them
//! (`EACCES`; tests may run as root, where permissions do not).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use tokio::sync::{Notify, Semaphore};

/// What an operation does, for the test gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// Reading an object (lookup or body).
    Read,
    /// Writing, renaming, removing, scanning.
    Write,
}

/// Holds reads at their start while closed (tests only use it).
#[derive(Debug, Default)]
pub struct IoGate {
    closed: Mutex<bool>,
    writes_closed: Mutex<bool>,
    open: Condvar,
    writes_open: Condvar,
    held: AtomicUsize,
    held_changed: Notify,
    fail_writes: std::sync::atomic::AtomicBool,
    fail_reads: std::sync::atomic::AtomicBool,
    fail_unlinks: std::sync::atomic::AtomicBool,
}

impl IoGate {
    /// Holds every read from now on.
    pub fn close(&self) {
        *self.closed.lock() = true;
    }

    /// Holds every write (and rename, unlink, scan) from now on, or lets them go.
    pub fn hold_writes(&self, on: bool) {
        *self.writes_closed.lock() = on;
        self.writes_open.notify_all();
    }

    /// True while reads are held.
    pub fn is_closed(&self) -> bool {
        *self.closed.lock()
    }

    /// Lets held reads go.
    pub fn open(&self) {
        *self.closed.lock() = false;
        self.open.notify_all();
    }

    /// Reads currently held.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Waits until at least `n` reads are held.
    pub async fn wait_held(&self, n: usize) {
        loop {
            let notified = self.held_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.held() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Makes every object write fail with `ENOSPC` (`true`) or work again.
    pub fn fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::Release);
    }

    /// Makes every object open for a lookup fail with `EIO` (`true`) or work again.
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::Release);
    }

    /// Makes every unlink of an object file fail with `EACCES` (`true`) or
    /// work again.
    pub fn fail_unlinks(&self, on: bool) {
        self.fail_unlinks.store(on, Ordering::Release);
    }

    /// The injected unlink failure, if any.
    pub(crate) fn unlink_fault(&self) -> io::Result<()> {
        if self.fail_unlinks.load(Ordering::Acquire) {
            Err(io::Error::from_raw_os_error(13))
        } else {
            Ok(())
        }
    }

    /// The injected read failure, if any.
    pub(crate) fn read_fault(&self) -> io::Result<()> {
        if self.fail_reads.load(Ordering::Acquire) {
            Err(io::Error::from_raw_os_error(5))
        } else {
            Ok(())
        }
    }

    /// The injected write failure, if any.
    pub(crate) fn write_fault(&self) -> io::Result<()> {
        if self.fail_writes.load(Ordering::Acquire) {
            Err(io::Error::from_raw_os_error(28))
        } else {
            Ok(())
        }
    }

    /// Waits here while `kind` is held (returns at once otherwise).
    pub(crate) fn pass(&self, kind: IoKind) {
        let (gate, opened) = match kind {
            IoKind::Read => (&self.closed, &self.open),
            IoKind::Write => (&self.writes_closed, &self.writes_open),
        };
        let mut closed = gate.lock();
        if !*closed {
            return;
        }
        self.held.fetch_add(1, Ordering::AcqRel);
        self.held_changed.notify_waiters();
        while *closed {
            opened.wait(&mut closed);
        }
        self.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A zone's disk operations: bounded concurrency on the blocking pool.
#[derive(Debug, Clone)]
pub struct IoPool {
    permits: Arc<Semaphore>,
    gate: Arc<IoGate>,
    pending: Arc<Pending>,
}

/// Operations submitted and not finished, for [`IoPool::settle`].
#[derive(Debug, Default)]
struct Pending {
    count: AtomicUsize,
    idle: Notify,
}

/// One operation counted in [`Pending`] from its submission to its end.
struct Ticket(Arc<Pending>);

impl Ticket {
    fn new(p: &Arc<Pending>) -> Ticket {
        p.count.fetch_add(1, Ordering::AcqRel);
        Ticket(p.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl IoPool {
    /// A pool running at most `concurrency` operations at once.
    pub fn new(concurrency: usize) -> IoPool {
        IoPool {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            gate: Arc::default(),
            pending: Arc::default(),
        }
    }

    /// The test gate.
    pub fn gate(&self) -> &IoGate {
        &self.gate
    }

    /// True when every permit is taken: optional work should not queue.
    pub fn saturated(&self) -> bool {
        self.permits.available_permits() == 0
    }

    pub(crate) fn gate_arc(&self) -> Arc<IoGate> {
        self.gate.clone()
    }

    /// Waits until no operation submitted to this pool is left (background
    /// unlinks and closes included): what a test or a shutdown waits for
    /// before it compares the account with the files.
    pub async fn settle(&self) {
        loop {
            let idle = self.pending.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.pending.count.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Like [`IoPool::run`], but `f` runs even if the caller stops waiting:
    /// for a commit that must not be cut in half (a file renamed into place
    /// and its index entry). Its result is then dropped.
    pub async fn run_to_end<T, F>(&self, kind: IoKind, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let pool = self.clone();
        let ticket = Ticket::new(&self.pending);
        tokio::spawn(async move {
            let r = pool.run(kind, f).await;
            drop(ticket);
            r
        })
        .await
        .map_err(|e| io::Error::other(format!("disk task failed: {e}")))?
    }

    /// Runs `f` off the serving threads and returns its result.
    pub async fn run<T, F>(&self, kind: IoKind, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        // Moved into the job: counted until `f` has run, even when the
        // caller stops waiting first.
        let ticket = Ticket::new(&self.pending);
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| io::Error::other("disk pool closed"))?;
        let gate = self.gate.clone();
        tokio::task::spawn_blocking(move || {
            gate.pass(kind);
            let r = f();
            drop(permit);
            drop(ticket);
            r
        })
        .await
        .map_err(|e| io::Error::other(format!("disk task failed: {e}")))?
    }

    /// Runs `f` in the background; its result is dropped.
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let pool = self.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let ticket = Ticket::new(&self.pending);
            rt.spawn(async move {
                let _ticket = ticket;
                let _ = pool
                    .run(IoKind::Write, move || {
                        f();
                        Ok(())
                    })
                    .await;
            });
        } else {
            // No runtime (a drop at exit): not a serving thread.
            f();
        }
    }
}

/// An open object file whose last close runs on the pool: closing a file
/// that was unlinked frees its blocks, which may wait for the device.
#[derive(Debug)]
pub struct PoolFile {
    file: Option<std::fs::File>,
    io: IoPool,
    /// Every block of the body has been read through this handle and
    /// matched its checksum: later sends may skip user space (sendfile).
    verified: std::sync::atomic::AtomicBool,
}

impl PoolFile {
    /// Wraps `file`; it will be closed on `io`.
    pub fn new(file: std::fs::File, io: IoPool) -> PoolFile {
        PoolFile {
            file: Some(file),
            io,
            verified: Default::default(),
        }
    }

    /// Records that the whole body was read through this handle and checked.
    pub(crate) fn mark_verified(&self) {
        self.verified.store(true, Ordering::Release);
    }

    /// True once the whole body was read through this handle and checked.
    pub fn is_verified(&self) -> bool {
        self.verified.load(Ordering::Acquire)
    }
}

impl std::ops::Deref for PoolFile {
    type Target = std::fs::File;
    fn deref(&self) -> &std::fs::File {
        self.file
            .as_ref()
            .expect("invariant: a PoolFile holds its file until dropped")
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            self.io.spawn(move || drop(f));
        }
    }
}
