//! One client connection's watchdog: idle, slow-read and reset limits.
//!
//! ## Model
//!
//! The connection's stream is wrapped in [`Watched`], which counts in an
//! [`Activity`] every read or write that moved bytes and notes whether a
//! write is blocked (the client stopped reading); the watchdog's tick
//! compares the count with the last tick's, so the request path never
//! reads a clock. Each request holds
//! an [`InFlight`] token from the moment hyper hands it over until its
//! response body ends or is dropped; a request dropped before it produced a
//! response (an HTTP/2 `RST_STREAM`, a closed connection) counts as a reset.
//!
//! The connection task asks [`Activity::verdict`] on every tick:
//!
//! | verdict | when | what the task does |
//! |---|---|---|
//! | `Idle` | no request in flight and no byte either way for `keep_alive_timeout` | graceful close (HTTP/2: GOAWAY) |
//! | `HeadTimeout` | (HTTP/1.x) bytes of a request head arrived, and no request started within `header_read_timeout` | drop the connection at once |
//! | `SendStalled` | a write has been blocked for `send_timeout` | drop the connection at once: its responses end, a fill it was reading goes on for others |
//! | `ResetFlood` | more than `http2_max_resets` requests reset within one window | graceful close (GOAWAY), then drop |
//! | `Park` | nothing in flight, no write blocked and no byte either way for a whole tick (HTTP/1.x: at least one request answered, no head begun); once per quiet spell | HTTP/1.x: park it, hyper's buffers released until the next byte (see `park`); HTTP/2: release the write batching buffer (see `cork`) and h2's frame and HPACK buffers (`h2::release_idle`); no ticks until a byte moves or the idle deadline (see `ticks`) |
//!
//! Reset floods are also signalled at once through `wake`, so a burst is
//! answered without waiting for the tick.
//!
//! The head timeout is the watchdog's too, not a timer per request: a read
//! that moves bytes while no request is in flight marks a head as begun
//! (a flag, no clock read), a request's start clears it, and the tick that
//! first sees the flag dates the head; the connection goes when a later
//! tick finds the same head still unfinished past the limit (so within one
//! tick over it). Bytes that arrive while a request is in flight (its body,
//! a pipelined head) start nothing: the idle limit covers them.
//!
//! ## Interim responses (HTTP/1.1)
//!
//! A `103 Early Hints` from the origin is written to the client ahead of
//! the final response: the request's [`Interim`] queues it on the
//! connection's [`InterimQueue`] and wakes the
//! connection task, and [`Watched`] writes it on hyper's next flush, when
//! hyper's own buffer is empty (hyper flushes only after writing what it
//! holds, and holds nothing while a request is being answered). Before the
//! final response goes to hyper, [`InterimQueue::finish`] waits until the queue
//! is written and closes it, so a late hint can never land after the
//! response or in front of the next one.
//!
//! ## Locking
//!
//! Atomics, plus one mutex over the interim queue held only to push or to
//! write from it (no await), taken only when a hint arrives.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use hoard_origin::interim::{Interim, InterimQueue};

/// Window over which resets are counted.
pub const RESET_WINDOW: Duration = Duration::from_secs(10);

/// What the watchdog decided. Names appear in logs and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to do.
    Fine,
    /// Idle past the keep-alive timeout.
    Idle,
    /// A request head begun and not finished within the head timeout.
    HeadTimeout,
    /// The client stopped reading past the send timeout.
    SendStalled,
    /// Too many requests reset within the window.
    ResetFlood,
    /// Quiet between two requests for a tick: release the buffers.
    Park,
}

impl Verdict {
    /// The name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fine => "fine",
            Verdict::Idle => "idle",
            Verdict::HeadTimeout => "head-timeout",
            Verdict::SendStalled => "send-stalled",
            Verdict::ResetFlood => "reset-flood",
            Verdict::Park => "park",
        }
    }
}

/// The limits the watchdog enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Idle time before a keep-alive connection is closed.
    pub keep_alive_timeout: Duration,
    /// Time a write may stay blocked.
    pub send_timeout: Duration,
    /// Resets allowed per window.
    pub max_resets: u64,
    /// Time a begun request head may take (HTTP/1.x; `None`: not watched).
    pub header_read_timeout: Option<Duration>,
}

impl Limits {
    /// How often the watchdog looks: often enough for the shortest limit.
    pub fn tick(&self) -> Duration {
        let shortest = self.keep_alive_timeout.min(self.send_timeout);
        (self
            .header_read_timeout
            .map_or(shortest, |h| h.min(shortest))
            / 4)
        .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// What one connection's stream and requests record. See the module docs.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// Bumped by every read or write that moved bytes and by every request
    /// start and end: the watchdog compares it between ticks (no clock
    /// read on the request path).
    progress: AtomicU64,
    /// A write is waiting for the client to read.
    blocked: std::sync::atomic::AtomicBool,
    /// The server drains: HTTP/1.x requests are answered with
    /// `Connection: close`.
    pub draining: std::sync::atomic::AtomicBool,
    in_flight: AtomicUsize,
    /// Requests started, so that the watchdog tells one head from the next.
    started: AtomicU64,
    /// Bytes arrived with no request in flight and no request has started
    /// since: a head is being read.
    head_begun: std::sync::atomic::AtomicBool,
    /// The task is parking the connection: [`Watched`] flushes on
    /// `poll_shutdown` and leaves the socket open (see `park`).
    pub parking: std::sync::atomic::AtomicBool,
    resets: AtomicU64,
    window_start: AtomicU64,
    limits: Limits,
    /// Interim responses to write; its `wake` wakes the connection task
    /// for them and for a reset flood.
    pub interim: Arc<InterimQueue>,
}

/// What the watchdog remembers between ticks (owned by the connection task).
#[derive(Debug)]
pub struct Watchdog {
    seen: u64,
    since: Instant,
    /// The head being read when a tick first saw it: requests started by
    /// then, and that tick's instant.
    head: Option<(u64, Instant)>,
    /// Heads are timed (HTTP/1.x; an HTTP/2 connection reads frames
    /// between requests).
    heads: bool,
    /// The progress count when the connection was last parked: one park
    /// per quiet spell.
    parked: Option<u64>,
}

impl Activity {
    /// The record of a connection opened now.
    pub fn new(limits: Limits) -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            progress: AtomicU64::new(0),
            blocked: std::sync::atomic::AtomicBool::new(false),
            draining: std::sync::atomic::AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            head_begun: std::sync::atomic::AtomicBool::new(false),
            parking: std::sync::atomic::AtomicBool::new(false),
            resets: AtomicU64::new(0),
            window_start: AtomicU64::new(0),
            limits,
            interim: Arc::default(),
        })
    }

    /// The progress count: bumped by every read or write that moved bytes
    /// and every request start and end.
    pub fn progress(&self) -> u64 {
        self.progress.load(Relaxed)
    }

    /// When the connection, quiet since `dog` last saw progress, reaches
    /// `keep_alive_timeout`.
    pub fn idle_deadline(&self, dog: &Watchdog) -> Instant {
        dog.since + self.limits.keep_alive_timeout
    }

    /// The watchdog's memory, starting now; `heads`: the connection speaks
    /// HTTP/1.x, whose request heads are timed.
    pub fn watchdog(&self, heads: bool) -> Watchdog {
        Watchdog {
            seen: self.progress.load(Relaxed),
            since: Instant::now(),
            head: None,
            heads,
            parked: None,
        }
    }

    /// Opens request `seq` (from 1) to interim responses.
    pub fn interim(&self, seq: u64) -> Interim {
        self.interim.open(seq)
    }

    /// Wakes the connection task: a reset flood, or an interim response
    /// to write.
    pub fn wake(&self) -> &Notify {
        &self.interim.wake
    }

    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn progressed(&self) {
        self.progress.fetch_add(1, Relaxed);
    }

    /// A request starts; the token ends it.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.started.fetch_add(1, Relaxed);
        self.head_begun.store(false, Relaxed);
        self.progressed();
        InFlight {
            activity: self.clone(),
            answered: false,
        }
    }

    fn reset(&self) {
        let now = self.now_ms();
        let start = self.window_start.load(Relaxed);
        if now.saturating_sub(start) > RESET_WINDOW.as_millis() as u64 {
            self.window_start.store(now, Relaxed);
            self.resets.store(0, Relaxed);
        }
        if self.resets.fetch_add(1, Relaxed) + 1 > self.limits.max_resets {
            self.wake().notify_one();
        }
    }

    /// True when nothing is in flight and nothing has moved for `d` (a
    /// draining connection may close); `dog` as for [`Activity::verdict`].
    pub fn quiet(&self, dog: &mut Watchdog, d: Duration) -> bool {
        let progress = self.progress.load(Relaxed);
        let now = Instant::now();
        if progress != dog.seen {
            dog.seen = progress;
            dog.since = now;
        }
        self.in_flight.load(Relaxed) == 0 && now.saturating_duration_since(dog.since) >= d
    }

    /// The watchdog's decision now; `dog` remembers when progress was last seen.
    pub fn verdict(&self, dog: &mut Watchdog) -> Verdict {
        let now = Instant::now();
        let progress = self.progress.load(Relaxed);
        if progress != dog.seen {
            dog.seen = progress;
            dog.since = now;
        }
        let still = now.saturating_duration_since(dog.since);
        if self.blocked.load(Relaxed) && still >= self.limits.send_timeout {
            return Verdict::SendStalled;
        }
        if self.resets.load(Relaxed) > self.limits.max_resets
            && self
                .now_ms()
                .saturating_sub(self.window_start.load(Relaxed))
                <= RESET_WINDOW.as_millis() as u64
        {
            return Verdict::ResetFlood;
        }
        let idle = self.in_flight.load(Relaxed) == 0;
        if let Some(limit) = self.limits.header_read_timeout.filter(|_| dog.heads) {
            if idle && self.head_begun.load(Relaxed) {
                let started = self.started.load(Relaxed);
                match dog.head {
                    Some((n, since)) if n == started => {
                        if now.saturating_duration_since(since) >= limit {
                            return Verdict::HeadTimeout;
                        }
                    }
                    _ => dog.head = Some((started, now)),
                }
            } else {
                dog.head = None;
            }
        }
        if idle && still >= self.limits.keep_alive_timeout {
            return Verdict::Idle;
        }
        // HTTP/1.x: between two requests (one answered, no head begun);
        // HTTP/2: no stream open. Never with a write blocked: a parked
        // connection is not ticked (see `ticks`), and `SendStalled` must
        // still come.
        let between =
            !dog.heads || (!self.head_begun.load(Relaxed) && self.started.load(Relaxed) > 0);
        if idle
            && between
            && !self.blocked.load(Relaxed)
            && still >= self.limits.tick()
            && dog.parked != Some(progress)
        {
            dog.parked = Some(progress);
            return Verdict::Park;
        }
        Verdict::Fine
    }
}

/// A request in flight on a connection; dropped when its response body ends
/// or is dropped. Dropped before [`InFlight::answered`]: a reset.
#[derive(Debug)]
pub struct InFlight {
    activity: Arc<Activity>,
    answered: bool,
}

impl InFlight {
    /// The request produced a response head.
    pub fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.activity.reset();
        }
        self.activity.in_flight.fetch_sub(1, Relaxed);
        self.activity.progressed();
    }
}

/// A response body that holds its request's [`InFlight`] until it ends.
#[derive(Debug)]
pub struct Tracked<B> {
    inner: B,
    token: Option<InFlight>,
}

impl<B> Tracked<B> {
    /// Wraps a response body of an answered request.
    pub fn new(inner: B, mut token: InFlight) -> Tracked<B> {
        token.answered();
        Tracked {
            inner,
            token: Some(token),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.token = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's stream, recording progress in its [`Activity`].
#[derive(Debug)]
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
    /// Bytes read before, handed out first (what hyper had read and not
    /// parsed when the connection was parked).
    unread: Bytes,
}

impl<S> Watched<S> {
    /// Wraps a stream.
    pub fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched {
            inner,
            activity,
            unread: Bytes::new(),
        }
    }

    /// The stream, to change.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Hands `bytes` out ahead of the stream's own.
    pub fn unread(&mut self, bytes: Bytes) {
        debug_assert!(self.unread.is_empty());
        self.unread = bytes;
    }

    fn wrote<T>(&self, r: &Poll<io::Result<T>>) {
        match r {
            Poll::Pending => self.activity.blocked.store(true, Relaxed),
            Poll::Ready(r) => {
                self.activity.blocked.store(false, Relaxed);
                if r.is_ok() {
                    self.activity.progressed();
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Writes queued interim responses; Ready when the queue is empty.
    fn write_interim(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let queue = self.activity.interim.clone();
        queue.write_with(|bytes| {
            let r = Pin::new(&mut self.inner).poll_write(cx, bytes);
            self.wrote(&r);
            r
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = if self.unread.is_empty() {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        } else {
            let n = self.unread.len().min(buf.remaining());
            buf.put_slice(&self.unread.split_to(n));
            Poll::Ready(Ok(()))
        };
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.progressed();
            if self.activity.in_flight.load(Relaxed) == 0 {
                self.activity.head_begun.store(true, Relaxed);
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.wrote(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.activity.interim.pending() {
            if let Poll::Ready(Err(e)) = self.write_interim(cx) {
                return Poll::Ready(Err(e));
            }
        }
        // A flush is asked for on every poll, with or without data: only
        // its blocking says something (the client is not reading).
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        match r {
            Poll::Pending => self.wrote(&r),
            Poll::Ready(_) => self.activity.blocked.store(false, Relaxed),
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.activity.parking.load(Relaxed) {
            // hyper is handing the connection back: everything written
            // leaves, the socket stays open.
            return Pin::new(&mut self.inner).poll_flush(cx);
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            keep_alive_timeout: Duration::from_secs(3600),
            send_timeout: Duration::from_secs(3600),
            max_resets: 3,
            header_read_timeout: None,
        }
    }

    #[tokio::test]
    async fn resets_past_the_limit_are_a_flood() {
        let a = Activity::new(limits());
        let mut dog = a.watchdog(true);
        for _ in 0..3 {
            drop(a.request());
        }
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        let mut answered = a.request();
        answered.answered();
        drop(answered);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        drop(a.request());
        assert_eq!(a.verdict(&mut dog), Verdict::ResetFlood);
    }

    #[tokio::test]
    async fn idle_only_without_requests() {
        let a = Activity::new(Limits {
            keep_alive_timeout: Duration::ZERO,
            ..limits()
        });
        let mut dog = a.watchdog(true);
        let r = a.request();
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        drop(r);
        assert_eq!(a.verdict(&mut dog), Verdict::Idle);
    }

    #[tokio::test]
    async fn an_unfinished_head_times_out_on_a_later_tick() {
        let a = Activity::new(Limits {
            header_read_timeout: Some(Duration::ZERO),
            ..limits()
        });
        let mut dog = a.watchdog(true);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "no byte yet");
        a.head_begun.store(true, Relaxed);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Fine,
            "the first tick dates it"
        );
        assert_eq!(a.verdict(&mut dog), Verdict::HeadTimeout);
        // A head that became a request, and the next head: dated anew.
        let mut dog = a.watchdog(true);
        a.head_begun.store(true, Relaxed);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        let mut r = a.request();
        r.answered();
        drop(r);
        a.head_begun.store(true, Relaxed);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "another head");
        assert_eq!(a.verdict(&mut dog), Verdict::HeadTimeout);
        // Bytes read while a request is in flight start no head.
        let a = Activity::new(Limits {
            header_read_timeout: Some(Duration::ZERO),
            ..limits()
        });
        let mut dog = a.watchdog(true);
        let r = a.request();
        a.head_begun.store(true, Relaxed);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        drop(r);
    }

    /// Time passes for the watchdog: its last sight of progress moves back.
    fn age(dog: &mut Watchdog, d: Duration) {
        dog.since = dog.since.checked_sub(d).expect("the clock is past d");
    }

    #[tokio::test]
    async fn an_http1_connection_parks_between_requests_once_per_quiet_spell() {
        let a = Activity::new(limits());
        let tick = a.limits.tick();
        let mut dog = a.watchdog(true);
        age(&mut dog, tick);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Fine,
            "no request answered yet"
        );
        let mut r = a.request();
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "a request in flight");
        r.answered();
        drop(r);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Fine,
            "quiet for less than a tick"
        );
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Park);
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "once per quiet spell");
        // The next head's first bytes: not between two requests.
        a.progressed();
        a.head_begun.store(true, Relaxed);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine);
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "a head begun");
        a.head_begun.store(false, Relaxed);
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Park, "a new quiet spell");
    }

    #[tokio::test]
    async fn an_http2_connection_parks_when_no_stream_is_open() {
        let a = Activity::new(limits());
        let tick = a.limits.tick();
        let mut dog = a.watchdog(false);
        age(&mut dog, tick);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Park,
            "preface and SETTINGS, then quiet"
        );
        let mut r = a.request();
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "a stream open");
        r.answered();
        drop(r);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Fine,
            "quiet for less than a tick"
        );
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Park);
        age(&mut dog, tick);
        assert_eq!(a.verdict(&mut dog), Verdict::Fine, "once per quiet spell");
    }

    #[tokio::test]
    async fn a_connection_with_a_blocked_write_does_not_park() {
        let a = Activity::new(limits());
        let tick = a.limits.tick();
        let mut dog = a.watchdog(false);
        a.blocked.store(true, Relaxed);
        age(&mut dog, tick);
        assert_eq!(
            a.verdict(&mut dog),
            Verdict::Fine,
            "a write waits for the client"
        );
        a.blocked.store(false, Relaxed);
        assert_eq!(a.verdict(&mut dog), Verdict::Park);
    }
}
