//! Parking an idle HTTP/1.x connection: it holds no buffer while it waits
//! for the next request.
//!
//! ## Model
//!
//! hyper's HTTP/1 connection keeps a read buffer and a write buffer (8 KiB
//! each) for as long as it lives, and a keep-alive client may leave its
//! connection silent for a minute between two pages. So a connection that
//! has been quiet for a whole watchdog tick, with nothing in flight, no
//! head begun and at least one request answered (the watchdog's
//! [`Verdict::Park`](super::watch::Verdict::Park)), is parked:
//!
//! 1. The task marks the connection's [`Activity`] as parking and asks
//!    hyper for a graceful shutdown. hyper, idle between two requests,
//!    closes at once: it flushes what it holds and calls `poll_shutdown`,
//!    which [`Watched`] answers without touching the socket.
//! 2. The task takes the stream and the service back from hyper
//!    (`into_parts_with_buffers`) and drops the rest of hyper's state; its
//!    read and write buffers go to the thread's spares (below). Bytes
//!    hyper had read and not parsed (part of a head that arrived in the
//!    same instant) come back too and are handed to the next connection
//!    first, so nothing the client sent is lost.
//! 3. Parked, the connection is its socket, its TLS state and this task;
//!    [`wait`] returns when the socket turns readable (a new hyper
//!    connection serves it, with the same service and request count), when
//!    the keep-alive limit is reached (closed, as an idle connection), or
//!    when the server drains (closed).
//!
//! hyper's read and write buffers are not freed but kept spare by the
//! thread ([`spare`]: at most [`SPARES`] pairs of at most
//! [`SPARE_BYTES`], whatever the number of connections): the next
//! connection the thread serves, new or back from parking, takes a pair
//! ([`take_spare`]) instead of allocating two 8 KiB buffers, whose pages
//! the allocator may have handed back to the system meanwhile. A
//! connection that comes back still costs five allocations more than a
//! busy one's request (e2e x00007): the box of its serving state and
//! hyper's own per-connection state (among them the boxes it keeps for
//! the request's future and the response body, and its write queue),
//! typed by the service and freed with the rest; two more when the thread
//! it wakes on has no spare (more connections came back at once, or the
//! runtime moved the task to a worker that parked none).
//!
//! HTTP/2 connections are not parked: hyper cannot hand their state back
//! (stream ids, HPACK tables), so they keep it; their buffers are freed
//! where they are instead (`h2::release_idle`, see the module above).

use std::cell::RefCell;
use std::time::Duration;

use hyper::server::conn::http1::Buffers;

use tokio::net::TcpStream;
use tokio::sync::watch as signal;

use hoard_proxy::sendfile::SendfileStream;

#[cfg(doc)]
use super::watch::{Activity, Watched};

/// A client stream whose socket can be waited on while it is parked.
pub trait Socket {
    /// The TCP socket under the stream.
    fn socket(&self) -> &TcpStream;
}

impl Socket for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl Socket for SendfileStream {
    fn socket(&self) -> &TcpStream {
        self.tcp()
    }
}

// A TLS stream holds no plaintext when parked: hyper read until the stream
// had nothing left (tokio-rustls reports Pending only then), and nothing
// has read since. A record cut in half waits in rustls for its rest, whose
// arrival makes the socket readable.
impl Socket for tokio_rustls::server::TlsStream<TcpStream> {
    fn socket(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// How a parked connection's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The client sent something: serve it.
    Readable,
    /// Silent up to the keep-alive limit: close, as an idle connection.
    Idle,
    /// The server drains: close.
    Draining,
}

impl Woken {
    /// The name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Woken::Readable => "readable",
            Woken::Idle => "idle",
            Woken::Draining => "draining",
        }
    }
}

/// Waits, parked, for the socket to turn readable; `left` is what remains
/// of the keep-alive limit.
pub async fn wait<S: Socket>(
    stream: &S,
    left: Duration,
    shutdown: &mut signal::Receiver<bool>,
) -> Woken {
    tokio::select! {
        biased;
        r = stream.socket().readable() => match r {
            // An error (reset) is hyper's to find and report.
            Ok(()) | Err(_) => Woken::Readable,
        },
        _ = super::drained(shutdown) => Woken::Draining,
        _ = tokio::time::sleep(left) => Woken::Idle,
    }
}

/// Spare buffer pairs a thread keeps (about 16 KiB each): enough for the
/// connections that come back within one moment on a busy thread, a
/// fixed amount however many connections are parked.
pub const SPARES: usize = 8;

/// The most a spare pair may hold: a pair grown past hyper's first sizes
/// (8 KiB each) by a large head is freed, not kept.
pub const SPARE_BYTES: usize = 16 << 10;

thread_local! {
    /// The thread's spare buffers, taken from parked connections.
    static SPARE: RefCell<Vec<Buffers>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a parked connection's buffers for the next connection on this
/// thread; frees them when the thread has [`SPARES`] already or they grew
/// past [`SPARE_BYTES`].
pub fn spare(buffers: Buffers) {
    if buffers.capacity() == 0 || buffers.capacity() > SPARE_BYTES {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARES {
            s.push(buffers);
        }
    });
}

/// Buffers for a connection to serve: a spare pair when the thread has
/// one, else none (hyper allocates its own).
pub fn take_spare() -> Buffers {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_are_bounded_and_taken_back() {
        assert_eq!(take_spare().capacity(), 0, "none to begin with");
        spare(Buffers::default());
        assert_eq!(
            SPARE.with(|s| s.borrow().len()),
            0,
            "empty buffers are not kept"
        );
        for _ in 0..SPARES + 3 {
            spare(Buffers::with_capacity(8192, 8192));
        }
        assert_eq!(
            SPARE.with(|s| s.borrow().len()),
            SPARES,
            "at most SPARES kept"
        );
        for _ in 0..SPARES {
            assert_eq!(take_spare().capacity(), 16384);
        }
        assert_eq!(take_spare().capacity(), 0, "then none");
    }
}
