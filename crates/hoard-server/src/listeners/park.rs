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
//!    buffers and slots go to the thread's spares (below). Bytes
//!    hyper had read and not parsed (part of a head that arrived in the
//!    same instant) come back too and are handed to the next connection
//!    first, so nothing the client sent is lost.
//! 3. Parked, the connection is its socket, its TLS state and this task;
//!    [`wait`] returns when the socket turns readable (a new hyper
//!    connection serves it, with the same service and request count), when
//!    the keep-alive limit is reached (closed, as an idle connection), or
//!    when the server drains (closed). What a parked plain connection keeps
//!    on the heap is measured by e2e x00009 (2.5 KB: the task, the serving
//!    loop's box with the wait's state, the socket's registration, the
//!    shared state of its watchdog, interim responses and sendfile); the
//!    sizes of those futures are kept small by hand (see `wait` and the
//!    comments in `serve_connection`).
//!
//! hyper's buffers and slots are not freed but kept spare by the thread
//! ([`spare`]: at most [`SPARES`] sets of at most [`SPARE_BYTES`] of
//! buffers, whatever the number of connections): its read buffer, its
//! response head buffer, its queue of body buffers, and the two boxes it
//! keeps a request's future and a response's body in (`Buffers`, typed by
//! the service, so the thread keeps a list per service type). The next
//! connection the thread serves, new or back from parking, takes a set
//! ([`take_spare`]) instead of allocating them, often on pages the
//! allocator had handed back to the system meanwhile. A connection that
//! comes back costs one allocation more than a busy one's request (e2e
//! x00007): the box of its serving state (hyper's connection and the
//! watchdog's state, whose timer lives in it, `ticks`), freed while it is
//! parked; seven in all when the thread it wakes on has no spare (more
//! connections came back at once, or the runtime moved the task to a
//! worker that parked none).
//!
//! HTTP/2 connections are not parked: hyper cannot hand their state back
//! (stream ids, HPACK tables), so they keep it; their buffers are given up
//! where they are instead (`h2::release_idle`, see the module above), to
//! spares of the same kind: `h2`'s own (its `spares.rs`) and the batching
//! buffer's (`cork.rs`). A returning HTTP/2 connection's next stream makes
//! one allocation more than a busy one's (e2e x00008).

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1::Buffers;
use hyper::service::HttpService;

use tokio::net::TcpStream;
use tokio::sync::watch as signal;

use hoard_proxy::sendfile::SendfileStream;

#[cfg(doc)]
use super::watch::Activity;
use super::watch::Watched;

/// A client stream whose socket can be waited on while it is parked.
pub trait Socket {
    /// The TCP socket under the stream.
    fn socket(&self) -> &TcpStream;

    /// The connection is quiet: gives up what the stream buffers for
    /// reading (TLS: rustls's 4 KiB buffer of received bytes, when it holds
    /// none, to the thread's spares; the patched `vendor/rustls`). The next
    /// read takes one again.
    fn release_idle(&mut self) {}
}

impl Socket for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl<S: Socket> Socket for Watched<S> {
    fn socket(&self) -> &TcpStream {
        self.get_ref().socket()
    }

    fn release_idle(&mut self) {
        self.get_mut().release_idle();
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

    fn release_idle(&mut self) {
        self.get_mut().1.release_idle_buffers();
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
/// of the keep-alive limit. Once a shutdown has begun, the wait ends
/// [`DRAIN_QUIET`](super::DRAIN_QUIET) later (or at the keep-alive limit, if
/// that comes first).
///
/// Its state is what every parked connection keeps (its size is part of
/// the serving loop's box): one timer for both deadlines, the shutdown
/// signal's future, and no future for the socket (its readiness is polled
/// directly, the waker kept in the socket's registration).
pub async fn wait<S: Socket>(
    stream: &S,
    left: Duration,
    shutdown: &mut signal::Receiver<bool>,
) -> Woken {
    let mut timer = std::pin::pin!(tokio::time::sleep(left));
    let idle_at = timer.deadline();
    let mut drain_at = None;
    if *shutdown.borrow_and_update() {
        drain_at = Some(tokio::time::Instant::now() + super::DRAIN_QUIET);
    }
    let mut changed = std::pin::pin!(shutdown.changed());
    std::future::poll_fn(|cx| {
        // An error (reset) is hyper's to find and report.
        if stream.socket().poll_read_ready(cx).is_ready() {
            return Poll::Ready(Woken::Readable);
        }
        // The shutdown began (or its sender is gone): the drain's quiet
        // time starts now.
        if drain_at.is_none() && changed.as_mut().poll(cx).is_ready() {
            drain_at = Some(tokio::time::Instant::now() + super::DRAIN_QUIET);
        }
        if let Some(at) = drain_at.filter(|at| *at < timer.deadline()) {
            timer.as_mut().reset(at);
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(match drain_at {
                Some(at) if at <= idle_at => Woken::Draining,
                _ => Woken::Idle,
            });
        }
        Poll::Pending
    })
    .await
}

/// Spare sets a thread keeps (about 18 KiB each: 16 KiB of buffers and
/// the two slots, about 2 KiB for hoard's service): enough for the
/// connections that come back within one moment on a busy thread, a fixed
/// amount however many connections are parked.
pub const SPARES: usize = 8;

/// The most a spare set's buffers may hold: buffers grown past hyper's
/// first sizes (8 KiB each) by a large head are freed, not kept.
pub const SPARE_BYTES: usize = 16 << 10;

thread_local! {
    /// The thread's spares, taken from parked connections: a list for
    /// each service type (hyper's slots are typed by it; every HTTP/1.x
    /// listener serves the same one, so in practice one list), each of at
    /// most [`SPARES`].
    static SPARE: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's spares for the service type `S` (a list made
/// the first time, once per thread and type); `None` while the thread is
/// torn down.
fn with_spares<S, R>(f: impl FnOnce(&mut Vec<Buffers<S>>) -> R) -> Option<R>
where
    S: HttpService<Incoming> + 'static,
{
    SPARE
        .try_with(|lists| {
            let mut lists = lists.borrow_mut();
            let at = match lists.iter().position(|l| l.is::<Vec<Buffers<S>>>()) {
                Some(at) => at,
                None => {
                    lists.push(Box::new(Vec::<Buffers<S>>::with_capacity(SPARES)));
                    lists.len() - 1
                }
            };
            let list = lists[at]
                .downcast_mut::<Vec<Buffers<S>>>()
                .expect("invariant: found by its type");
            f(list)
        })
        .ok()
}

/// Keeps a parked connection's buffers and slots for the next connection
/// on this thread; frees them when the thread has [`SPARES`] already or
/// its buffers grew past [`SPARE_BYTES`].
pub fn spare<S: HttpService<Incoming> + 'static>(buffers: Buffers<S>) {
    if buffers.capacity() == 0 || buffers.capacity() > SPARE_BYTES {
        return;
    }
    with_spares(|list| {
        if list.len() < SPARES {
            list.push(buffers);
        }
    });
}

/// Buffers and slots for a connection to serve: a spare set when the
/// thread has one, else none (hyper allocates its own).
pub fn take_spare<S: HttpService<Incoming> + 'static>() -> Buffers<S> {
    with_spares(Vec::pop).flatten().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{ready, Ready};
    use std::marker::PhantomData;

    use hyper::service::Service;
    use hyper::{Request, Response};

    use super::*;

    /// A service answering with an empty body of type `B`.
    struct Empty<B>(PhantomData<B>);

    impl<B: Default> Service<Request<Incoming>> for Empty<B> {
        type Response = Response<B>;
        type Error = Infallible;
        type Future = Ready<Result<Response<B>, Infallible>>;
        fn call(&self, _: Request<Incoming>) -> Self::Future {
            ready(Ok(Response::new(B::default())))
        }
    }

    type Text = Empty<String>;
    type Bytes = Empty<http_body_util::Empty<bytes::Bytes>>;

    fn kept<S: HttpService<Incoming> + 'static>() -> usize {
        with_spares(|l: &mut Vec<Buffers<S>>| l.len()).unwrap()
    }

    #[test]
    fn spares_are_bounded_and_taken_back_by_service_type() {
        assert_eq!(take_spare::<Text>().capacity(), 0, "none to begin with");
        spare(Buffers::<Text>::default());
        assert_eq!(kept::<Text>(), 0, "empty buffers are not kept");
        spare(Buffers::<Text>::with_capacity(SPARE_BYTES, 1));
        assert_eq!(kept::<Text>(), 0, "grown buffers are not kept");
        for _ in 0..SPARES + 3 {
            spare(Buffers::<Text>::with_capacity(8192, 8192));
        }
        assert_eq!(kept::<Text>(), SPARES, "at most SPARES kept");
        spare(Buffers::<Bytes>::with_capacity(8192, 8192));
        assert_eq!(kept::<Bytes>(), 1, "another service's spares are its own");
        assert_eq!(kept::<Text>(), SPARES);
        for _ in 0..SPARES {
            assert_eq!(take_spare::<Text>().capacity(), 16384);
        }
        assert_eq!(take_spare::<Text>().capacity(), 0, "then none");
        assert_eq!(take_spare::<Bytes>().capacity(), 16384);
    }
}
