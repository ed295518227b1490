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
//! was closed as idle; it closes when its last stream ends. A connection
//! with no stream is idle: after `idle_timeout` it is closed (its task
//! watches), and beyond `max_idle` idle connections of the server the one
//! that just became idle is.
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
                // Retired (GOAWAY, a failed stream): nothing more goes on
                // it, so it closes with its last stream.
                Some(_) if self.conn.retired.load(Ordering::Relaxed) => {
                    self.conn.close.notify_one();
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorKind, ProxyError};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    /// An HTTP/2 connection to an in-memory `h2` server that accepts
    /// streams and never answers them (the pool only counts streams).
    async fn conn() -> Arc<H2Conn> {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut srv = h2::server::handshake(server).await.unwrap();
            let mut held = Vec::new();
            while let Some(Ok(stream)) = srv.accept().await {
                held.push(stream);
            }
        });
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake::<_, crate::ReqBody>(TokioIo::new(client))
            .await
            .unwrap();
        tokio::spawn(conn);
        H2Conn::new(sender, Watched::new())
    }

    fn stream(r: Reserve) -> H2Stream {
        match r {
            Reserve::Stream(s) => s,
            other => panic!("expected a stream, got {other:?}"),
        }
    }

    fn ticket(r: Reserve) -> Ticket {
        match r {
            Reserve::Connect(t) => t,
            other => panic!("expected to connect, got {other:?}"),
        }
    }

    fn waiting(r: Reserve) -> watch::Receiver<Connected> {
        match r {
            Reserve::Wait(rx) => rx,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn streams_are_counted_up_to_the_cap_and_given_back() {
        let pool = H2Conns::new(2, 4, LONG);
        let c = conn().await;
        let opener = ticket(pool.reserve(None)).opened(c.clone());
        assert_eq!((pool.open(), pool.streams()), (1, 1));
        let second = stream(pool.reserve(None));
        assert!(Arc::ptr_eq(second.conn(), &c));
        assert_eq!(pool.streams(), 2);
        // Full at the cap: the next request opens another connection.
        let t = ticket(pool.reserve(None));
        drop(t);
        drop(opener);
        assert_eq!(pool.streams(), 1);
        let again = stream(pool.reserve(None));
        assert!(Arc::ptr_eq(again.conn(), &c));
        // `not` skips a connection (a stream refused on it is retried elsewhere).
        drop(second);
        let t = ticket(pool.reserve(Some(&c)));
        drop((t, again));
        assert_eq!((pool.open(), pool.streams()), (1, 0));
    }

    #[tokio::test]
    async fn one_request_connects_and_the_others_share_its_outcome() {
        let pool = H2Conns::new(1, 4, LONG);
        let t = ticket(pool.reserve(None));
        let mut rx = waiting(pool.reserve(None));
        let mut rx2 = waiting(pool.reserve(None));
        t.failed(&ProxyError::origin(ErrorKind::ConnectRefused, "refused"));
        for rx in [&mut rx, &mut rx2] {
            let got = rx
                .wait_for(|c| !matches!(c, Connected::Pending))
                .await
                .unwrap();
            assert!(
                matches!(&*got, Connected::Failed(ErrorKind::ConnectRefused, d) if d == "refused"),
                "{:?}",
                *got
            );
        }
        // Once failed, the next request tries again itself.
        let t = ticket(pool.reserve(None));
        let mut rx = waiting(pool.reserve(None));
        let s = t.opened(conn().await);
        rx.wait_for(|c| matches!(c, Connected::Done)).await.unwrap();
        // The waiter reserves again: the new connection is at its cap (1),
        // so it would open one more.
        drop(ticket(pool.reserve(None)));
        drop(s);
        let _s = stream(pool.reserve(None));
    }

    #[tokio::test]
    async fn a_ticket_dropped_unused_lets_the_waiters_try_again() {
        let pool = H2Conns::new(8, 4, LONG);
        let t = ticket(pool.reserve(None));
        let mut rx = waiting(pool.reserve(None));
        drop(t);
        let got = rx
            .wait_for(|c| !matches!(c, Connected::Pending))
            .await
            .unwrap();
        assert!(matches!(*got, Connected::Done));
        drop(got);
        drop(ticket(pool.reserve(None)));
    }

    #[tokio::test]
    async fn an_idle_connection_beyond_max_idle_is_closed() {
        let pool = H2Conns::new(8, 0, LONG);
        let c = conn().await;
        let s = ticket(pool.reserve(None)).opened(c.clone());
        assert_eq!(pool.open(), 1);
        drop(s);
        // Its last stream ended with max_idle = 0: out of the pool, and its
        // task told to close it.
        assert_eq!(pool.open(), 0);
        c.closing().await;
        assert!(!c.usable());
    }

    #[tokio::test]
    async fn a_retired_connection_takes_no_new_stream() {
        let pool = H2Conns::new(8, 4, LONG);
        let c = conn().await;
        let s = ticket(pool.reserve(None)).opened(c.clone());
        c.retire();
        drop(ticket(pool.reserve(None)));
        assert_eq!(pool.open(), 0, "dropped from the list at the next reserve");
        // Its stream in flight still gives back its count, and with it
        // the connection is closed (not left for the idle timeout).
        drop(s);
        assert_eq!(c.streams.load(Ordering::Relaxed), 0);
        c.closing().await;
    }

    #[tokio::test]
    async fn a_shut_connection_is_told_to_close() {
        let c = conn().await;
        c.shut();
        c.closing().await;
        assert!(!c.usable());
    }
}
