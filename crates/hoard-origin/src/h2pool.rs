//! HTTP/2 connections to one origin server, each carrying many requests
//! at once.
//!
//! ## Model
//!
//! [`H2Conns`] holds a server's open HTTP/2 connections. A request takes
//! a *stream* on the first connection with room: fewer streams in flight
//! than the server's `SETTINGS_MAX_CONCURRENT_STREAMS` (see
//! `h2_watch`) and the upstream's `h2_max_streams`. Streams are counted
//! here: [`H2Stream`] is taken under the lock and gives its stream back
//! when dropped (with the response body, at its end or when it is dropped).
//! When no connection has room, one request opens a new connection
//! ([`Reserve::Connect`]); the others that come meanwhile wait for it
//! ([`Reserve::Wait`]) and share its result, so a burst of misses opens
//! one connection, not one each.
//!
//! A connection takes no new stream once *retired*: the server sent
//! `GOAWAY` (its streams in flight finish), hyper reports it closed, or it
//! was closed as idle. A connection with no stream is idle: after
//! `idle_timeout` it is closed (its task watches), and beyond `max_idle`
//! idle connections of the server the one that just became idle is.
//!
//! ## Locking
//!
//! One `parking_lot::Mutex` per server around the list and the connect in
//! progress, held to pick, add or retire a connection, never across an
//! await. A stream count only grows under it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::client::conn::http2::SendRequest;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::h2_watch::Watched;
use super::ReqBody;

/// What a server turned out to speak over TLS with ALPN `h2, http/1.1`
/// (`protocol = "auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Learned {
    Unknown = 0,
    H1 = 1,
    H2 = 2,
}

/// One HTTP/2 connection.
#[derive(Debug)]
pub(crate) struct H2Conn {
    sender: SendRequest<ReqBody>,
    watched: Arc<Watched>,
    /// Streams in flight.
    streams: AtomicU32,
    /// When its last stream ended.
    idle_since: Mutex<Instant>,
    /// Takes no new stream.
    retired: AtomicBool,
    /// Tells its task to close it (idle).
    close: Notify,
}

impl H2Conn {
    pub(crate) fn new(sender: SendRequest<ReqBody>, watched: Arc<Watched>) -> Arc<H2Conn> {
        Arc::new(H2Conn {
            sender,
            watched,
            streams: AtomicU32::new(0),
            idle_since: Mutex::new(Instant::now()),
            retired: AtomicBool::new(false),
            close: Notify::new(),
        })
    }

    /// A sender for one request on it.
    pub(crate) fn sender(&self) -> SendRequest<ReqBody> {
        self.sender.clone()
    }

    /// No new stream goes on it (the server sent `GOAWAY`, or a stream
    /// failed as the connection went away); its streams in flight go on.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Retired and closed now (its task ends it): a connection no request
    /// will use.
    pub(crate) fn shut(&self) {
        self.retire();
        self.close.notify_one();
    }

    fn usable(&self) -> bool {
        !self.retired.load(Ordering::Relaxed) && !self.watched.goaway() && !self.sender.is_closed()
    }

    fn room(&self, cap: u32) -> bool {
        self.streams.load(Ordering::Relaxed) < cap.min(self.watched.max_streams())
    }

    fn idle_for(&self, d: Duration) -> bool {
        self.streams.load(Ordering::Relaxed) == 0 && self.idle_since.lock().elapsed() >= d
    }

    /// Until it is told to close.
    pub(crate) async fn closing(&self) {
        self.close.notified().await;
    }
}

/// The connection a request waits for, or what it found.
#[derive(Debug, Clone)]
pub(crate) enum Connected {
    /// Still connecting.
    Pending,
    /// Done (a connection was added, or the server speaks HTTP/1.1).
    Done,
    /// Failed: the error's kind and text.
    Failed(crate::error::ErrorKind, String),
}

#[derive(Debug, Default)]
struct Inner {
    conns: Vec<Arc<H2Conn>>,
    connecting: Option<watch::Receiver<Connected>>,
}

/// A server's HTTP/2 connections. See the module docs.
#[derive(Debug)]
pub(crate) struct H2Conns {
    inner: Mutex<Inner>,
    cap: u32,
    max_idle: usize,
    idle_timeout: Duration,
    learned: AtomicU8,
}

/// What [`H2Conns::reserve`] found.
#[derive(Debug)]
pub(crate) enum Reserve {
    /// A stream on an open connection.
    Stream(H2Stream),
    /// Another request is connecting: wait for it, then reserve again.
    Wait(watch::Receiver<Connected>),
    /// This request connects; the others wait for the ticket.
    Connect(Ticket),
}

impl H2Conns {
    pub(crate) fn new(cap: u32, max_idle: usize, idle_timeout: Duration) -> Arc<H2Conns> {
        Arc::new(H2Conns {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
            max_idle,
            idle_timeout,
            learned: AtomicU8::new(Learned::Unknown as u8),
        })
    }

    pub(crate) fn learned(&self) -> Learned {
        match self.learned.load(Ordering::Relaxed) {
            1 => Learned::H1,
            2 => Learned::H2,
            _ => Learned::Unknown,
        }
    }

    pub(crate) fn learn(&self, l: Learned) {
        self.learned.store(l as u8, Ordering::Relaxed);
    }

    /// A stream on a connection with room, other than `not` (see the
    /// module docs).
    pub(crate) fn reserve(self: &Arc<Self>, not: Option<&Arc<H2Conn>>) -> Reserve {
        let mut inner = self.inner.lock();
        let timeout = self.idle_timeout;
        inner.conns.retain(|c| {
            let keep = c.usable() && !c.idle_for(timeout);
            if !keep {
                c.retire();
                if c.streams.load(Ordering::Relaxed) == 0 {
                    c.close.notify_one();
                }
            }
            keep
        });
        let found = inner
            .conns
            .iter()
            .find(|c| c.room(self.cap) && not.is_none_or(|n| !Arc::ptr_eq(n, c)));
        if let Some(c) = found {
            c.streams.fetch_add(1, Ordering::Relaxed);
            return Reserve::Stream(H2Stream {
                conn: c.clone(),
                pool: Arc::downgrade(self),
            });
        }
        if let Some(rx) = &inner.connecting {
            if matches!(*rx.borrow(), Connected::Pending) {
                return Reserve::Wait(rx.clone());
            }
        }
        let (tx, rx) = watch::channel(Connected::Pending);
        inner.connecting = Some(rx);
        Reserve::Connect(Ticket {
            tx: Some(tx),
            pool: self.clone(),
        })
    }

    /// Adds a new connection with one stream taken for its opener.
    pub(crate) fn adopt(self: &Arc<Self>, conn: Arc<H2Conn>) -> H2Stream {
        self.learn(Learned::H2);
        conn.streams.store(1, Ordering::Relaxed);
        self.inner.lock().conns.push(conn.clone());
        H2Stream {
            conn,
            pool: Arc::downgrade(self),
        }
    }

    /// Connections open now (for tests and stats).
    pub(crate) fn open(&self) -> usize {
        self.inner.lock().conns.len()
    }

    /// Streams in flight now, over every connection open.
    pub(crate) fn streams(&self) -> u32 {
        let inner = self.inner.lock();
        inner
            .conns
            .iter()
            .map(|c| c.streams.load(Ordering::Relaxed))
            .sum()
    }

    /// `conn`'s last stream ended: beyond `max_idle` idle connections it
    /// is closed.
    fn became_idle(&self, conn: &Arc<H2Conn>) {
        let mut inner = self.inner.lock();
        let idle = inner
            .conns
            .iter()
            .filter(|c| c.streams.load(Ordering::Relaxed) == 0)
            .count();
        if idle > self.max_idle && conn.streams.load(Ordering::Relaxed) == 0 {
            inner.conns.retain(|c| !Arc::ptr_eq(c, conn));
            conn.retire();
            conn.close.notify_one();
        }
    }

    /// Whether `conn` has been idle for `idle_timeout`: then it is taken
    /// out and true (its task closes it).
    pub(crate) fn expire(&self, conn: &Arc<H2Conn>) -> bool {
        let mut inner = self.inner.lock();
        if !conn.idle_for(self.idle_timeout) {
            return false;
        }
        conn.retire();
        inner.conns.retain(|c| !Arc::ptr_eq(c, conn));
        true
    }

    pub(crate) fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }
}

/// The right and duty to open the connection others wait for.
#[derive(Debug)]
pub(crate) struct Ticket {
    tx: Option<watch::Sender<Connected>>,
    pool: Arc<H2Conns>,
}

impl Ticket {
    /// The connection opened: added, with a stream for the opener.
    pub(crate) fn opened(mut self, conn: Arc<H2Conn>) -> H2Stream {
        let s = self.pool.adopt(conn);
        self.end(Connected::Done);
        s
    }

    /// The server chose HTTP/1.1: the others go there too.
    pub(crate) fn http1(mut self) {
        self.pool.learn(Learned::H1);
        self.end(Connected::Done);
    }

    /// Connecting failed: the others fail with the same error.
    pub(crate) fn failed(mut self, e: &crate::error::ProxyError) {
        self.end(Connected::Failed(e.kind, e.detail.clone()));
    }

    fn end(&mut self, how: Connected) {
        if let Some(tx) = self.tx.take() {
            self.pool.inner.lock().connecting = None;
            tx.send_replace(how);
        }
    }
}

impl Drop for Ticket {
    /// Dropped unused (its request was cancelled): the others try again.
    fn drop(&mut self) {
        self.end(Connected::Done);
    }
}

/// A stream taken on a connection; given back when dropped.
#[derive(Debug)]
pub(crate) struct H2Stream {
    conn: Arc<H2Conn>,
    pool: Weak<H2Conns>,
}

impl H2Stream {
    pub(crate) fn conn(&self) -> &Arc<H2Conn> {
        &self.conn
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        if self.conn.streams.fetch_sub(1, Ordering::Relaxed) == 1 {
            *self.conn.idle_since.lock() = Instant::now();
            match self.pool.upgrade() {
                Some(pool) => pool.became_idle(&self.conn),
                None => self.conn.close.notify_one(),
            }
        }
    }
}

/// Watches an open connection until it is idle for `idle_timeout` (or
/// told to close), then returns: its task drops it.
pub(crate) async fn idle_watch(conn: Arc<H2Conn>, pool: Weak<H2Conns>, idle_timeout: Duration) {
    loop {
        let wait = if conn.streams.load(Ordering::Relaxed) > 0 {
            idle_timeout
        } else {
            idle_timeout.saturating_sub(conn.idle_since.lock().elapsed())
        };
        tokio::select! {
            () = conn.closing() => return,
            () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
        }
        let expired = match pool.upgrade() {
            Some(p) => p.expire(&conn),
            None => conn.idle_for(idle_timeout),
        };
        if expired {
            return;
        }
    }
}
