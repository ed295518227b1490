//! Parking an idle HTTP/1.x connection: its buffers go back to the
//! allocator while it waits for the next request.
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
//!    (`into_parts`) and drops the rest: hyper's buffers and state. Bytes
//!    hyper had read and not parsed (part of a head that arrived in the
//!    same instant) come back too and are handed to the next connection
//!    first, so nothing the client sent is lost.
//! 3. Parked, the connection is its socket, its TLS state and this task;
//!    [`wait`] returns when the socket turns readable (a new hyper
//!    connection serves it, with the same service and request count), when
//!    the keep-alive limit is reached (closed, as an idle connection), or
//!    when the server drains (closed).
//!
//! A connection that comes back costs hyper's two buffers and the box of
//! its state: what a busy connection never pays, since it is never quiet
//! for a tick.
//!
//! HTTP/2 connections are not parked: hyper cannot hand their state back
//! (stream ids, HPACK tables), so they keep it; their buffers are freed
//! where they are instead (`h2::release_idle`, see the module above).

use std::time::Duration;

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
