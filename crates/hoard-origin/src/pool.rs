//! Idle keep-alive connections to one origin server.
//!
//! ## Model
//!
//! A connection is either *in use* (its `SendRequest` travels with the
//! response body as a [`PoolReturn`]) or *idle* (in the pool's list). When a
//! response body reaches its end, the connection goes back to the pool,
//! unless the pool holds `max_idle` already or hyper reports it closed. A
//! body dropped before its end takes its connection down with it (hyper
//! cannot reuse a connection with unread response bytes).
//!
//! Idle connections older than `idle_timeout` are discarded when found; a
//! connection the origin closed while idle is detected by `ready()` failing,
//! or, in the race where it closes as the request is written, by the send
//! failing, after which the request is retried once on a new connection
//! (see `upstream::Upstream::send`).
//!
//! HTTP/2 connections, which carry many requests at once, are in
//! `h2pool` (the pool's `h2`).
//!
//! ## Locking
//!
//! One `parking_lot::Mutex` per server guards the idle list; it is held only
//! to push or pop.

use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::h2pool::{H2Conns, H2Stream};
use super::ReqBody;

/// Idle connections to one server, and its HTTP/2 connections.
#[derive(Debug)]
pub struct Pool {
    idle: Mutex<Vec<(SendRequest<ReqBody>, Instant)>>,
    max_idle: usize,
    idle_timeout: Duration,
    pub(crate) h2: Arc<H2Conns>,
}

impl Pool {
    /// An empty pool; at most `h2_max_streams` streams at once on one
    /// HTTP/2 connection.
    pub fn new(max_idle: usize, idle_timeout: Duration, h2_max_streams: u32) -> Pool {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_timeout,
            h2: H2Conns::new(h2_max_streams, max_idle, idle_timeout),
        }
    }

    /// The most recently used idle connection that is still open, if any.
    pub fn take(&self) -> Option<SendRequest<ReqBody>> {
        let mut idle = self.idle.lock();
        while let Some((sender, since)) = idle.pop() {
            if since.elapsed() < self.idle_timeout && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// Returns a connection after its response completed.
    pub fn put(&self, sender: SendRequest<ReqBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push((sender, Instant::now()));
        }
    }

    /// Idle connections held now.
    pub fn idle_len(&self) -> usize {
        self.idle.lock().len()
    }

    /// HTTP/2 connections open now.
    pub fn h2_open(&self) -> usize {
        self.h2.open()
    }

    /// HTTP/2 streams in flight now.
    pub fn h2_streams(&self) -> u32 {
        self.h2.streams()
    }
}

/// A connection in use, returned to its pool when the response body ends
/// (an HTTP/1.1 connection), or a stream given back when it is dropped
/// (HTTP/2).
#[derive(Debug)]
pub struct PoolReturn(pub(crate) Held);

/// What a [`PoolReturn`] holds.
#[derive(Debug)]
pub(crate) enum Held {
    /// An HTTP/1.1 connection and its pool.
    H1(SendRequest<ReqBody>, Arc<Pool>),
    /// A stream on an HTTP/2 connection.
    H2(H2Stream),
}

impl PoolReturn {
    /// The response completed: the connection may serve another request.
    pub fn release(self) {
        match self.0 {
            Held::H1(sender, pool) => pool.put(sender),
            Held::H2(stream) => drop(stream),
        }
    }
}
