//! Write batching for HTTP/2 connections: one socket write per poll of the
//! connection, not one per frame.
//!
//! The `h2` crate writes as it goes: after each stream it accepts, and for
//! each DATA frame it sends, it flushes its frame buffer to the transport.
//! Over TLS every such flush is a TLS record and a `writev`; ten 1 KiB
//! responses answered in one poll cost ten of each (nginx, with its event
//! loop, writes once per connection and loop iteration).
//!
//! ## Model
//!
//! [`Corked`] wraps the connection future and [`CorkIo`] its transport; both
//! share one `Shared` (the transport itself, a byte buffer, a flag). While
//! the connection is polled the flag is set and every write and flush lands
//! in the buffer. When the poll returns, [`Corked`] writes the buffer to the
//! transport in one call and flushes it. If the socket is full, the rest
//! stays buffered (the socket's readiness wakes the task) and is written
//! first at the next poll; writes made meanwhile are appended behind it, so
//! the byte order is kept. A write that would grow the buffer past
//! [`LIMIT`] first drains it and waits for the socket like any write.
//!
//! The buffer keeps the capacity of the largest poll's output; when the
//! connection's watchdog finds it quiet (`Verdict::Park`) it is given up
//! ([`Corked::release`]), so an idle connection holds none (unless the
//! `h2::release_idle` poll right after writes something, a PING's
//! answer, say: then it holds a buffer until its next quiet tick). A buffer of at
//! most [`SPARE_BYTES`] goes to the thread's spares (at most [`SPARES`] of
//! them), where the next connection to write after a quiet spell takes it
//! instead of allocating (and growing) one.
//!
//! [`Corked`] polls the connection only when something woke it (see
//! `gate`): a watchdog tick alone does not reach hyper.
//!
//! ## Locking
//!
//! The mutex is only ever taken by the connection's own task (the transport
//! is never split), so it is never contended; it is there because the
//! connection future must be `Send`.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::gate::Gate;

/// Most bytes held back before a write waits for the socket.
pub const LIMIT: usize = 256 * 1024;

/// Most spare buffers a thread keeps.
pub const SPARES: usize = 8;

/// Largest buffer kept spare: a poll's answers of a page's worth of small
/// responses. A larger one (a big body's poll) is freed.
pub const SPARE_BYTES: usize = 32 * 1024;

thread_local! {
    /// Buffers of quiet connections, emptied.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Keeps an emptied buffer for the thread's next connection, if it is not
/// grown past [`SPARE_BYTES`] and the thread has fewer than [`SPARES`].
fn spare(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > SPARE_BYTES {
        return;
    }
    buf.clear();
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARES {
            s.push(buf);
        }
    });
}

/// A spare buffer, or none (an empty `Vec`, which allocates as it grows).
fn take_spare() -> Vec<u8> {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// What [`Corked`] and [`CorkIo`] share.
struct Shared<S> {
    io: S,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    sent: usize,
    corked: bool,
}

impl<S: AsyncWrite + Unpin> Shared<S> {
    /// Writes the buffer out; Ready when it is empty and the transport
    /// flushed.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buf.clear();
        self.sent = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn pending(&self) -> bool {
        self.sent < self.buf.len()
    }
}

/// Makes the corked pair: the transport for hyper and the handle that
/// [`Corked::new`] takes.
pub fn cork<S>(io: S) -> (CorkIo<S>, Handle<S>) {
    let shared = Arc::new(Mutex::new(Shared {
        io,
        buf: Vec::new(),
        sent: 0,
        corked: false,
    }));
    (CorkIo(shared.clone()), Handle(shared))
}

/// The other end of a [`CorkIo`], for [`Corked`].
pub struct Handle<S>(Arc<Mutex<Shared<S>>>);

/// The transport as hyper sees it.
pub struct CorkIo<S>(Arc<Mutex<Shared<S>>>);

impl<S> std::fmt::Debug for Handle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cork::Handle")
    }
}

impl<S> std::fmt::Debug for CorkIo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.lock();
        f.debug_struct("CorkIo")
            .field("buffered", &(s.buf.len() - s.sent))
            .field("corked", &s.corked)
            .finish()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for CorkIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.lock().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CorkIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut s = self.0.lock();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if s.buf.len() + len > LIMIT && !s.buf.is_empty() {
            ready!(s.drain(cx))?;
        }
        if !s.corked && !s.pending() {
            // Outside a corked poll (shutdown, an upgrade): straight through.
            return Pin::new(&mut s.io).poll_write_vectored(cx, bufs);
        }
        if s.buf.capacity() == 0 {
            s.buf = take_spare();
        }
        for b in bufs {
            s.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.lock();
        if s.corked {
            // Written when the connection's poll ends.
            return Poll::Ready(Ok(()));
        }
        s.drain(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.lock();
        ready!(s.drain(cx))?;
        Pin::new(&mut s.io).poll_shutdown(cx)
    }
}

pin_project_lite::pin_project! {
    /// A connection future whose transport writes are held back while it is
    /// polled and written in one go after each poll. It is polled only when
    /// something woke it (see `gate`).
    pub struct Corked<F, S> {
        #[pin]
        inner: F,
        shared: Arc<Mutex<Shared<S>>>,
        gate: Gate,
    }
}

impl<F, S> std::fmt::Debug for Corked<F, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Corked")
    }
}

impl<F, S> Corked<F, S> {
    /// Wraps the connection served over the [`CorkIo`] that `handle` came with.
    pub fn new(inner: F, handle: Handle<S>) -> Self {
        Corked {
            inner,
            shared: handle.0,
            gate: Gate::new(),
        }
    }

    /// The connection (for a graceful shutdown); the next poll reaches it.
    pub fn inner(self: Pin<&mut Self>) -> Pin<&mut F> {
        let this = self.project();
        this.gate.open();
        this.inner
    }

    /// The connection is quiet: gives the buffer up (it keeps the capacity
    /// of its largest poll, up to [`LIMIT`], otherwise), to the thread's
    /// spares if it is small enough. The next poll that writes takes a
    /// spare or allocates. Nothing is released while bytes wait for the
    /// socket.
    pub fn release(&self) {
        // The poll that follows (inside `h2::release_idle`) must reach
        // the connection.
        self.gate.open();
        let mut s = self.shared.lock();
        if s.sent >= s.buf.len() {
            s.sent = 0;
            spare(std::mem::take(&mut s.buf));
        }
    }
}

impl<F, S: super::park::Socket> Corked<F, S> {
    /// After the quiet connection's last poll: gives up what the transport
    /// buffers for reading (TLS, see `park::Socket::release_idle`).
    pub fn release_transport(&self) {
        self.shared.lock().io.release_idle();
    }
}

impl<F, S, T, E> Future for Corked<F, S>
where
    F: Future<Output = Result<T, E>>,
    E: From<io::Error>,
    S: AsyncWrite + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if !this.gate.pass(cx) {
            return Poll::Pending;
        }
        let cx = &mut Context::from_waker(this.gate.waker());
        {
            let mut s = this.shared.lock();
            // What the last poll could not write goes first.
            if s.pending() {
                if let Poll::Ready(Err(e)) = s.drain(cx) {
                    return Poll::Ready(Err(e.into()));
                }
            }
            s.corked = true;
        }
        let r = this.inner.poll(cx);
        let mut s = this.shared.lock();
        s.corked = false;
        if !s.buf.is_empty() {
            match s.drain(cx) {
                Poll::Ready(Err(e)) if r.is_pending() => return Poll::Ready(Err(e.into())),
                // Pending: the socket's readiness polls us again.
                _ => {}
            }
        }
        r
    }
}
