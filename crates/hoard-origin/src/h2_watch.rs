//! What an HTTP/2 origin says about its connection, read off the bytes as
//! hyper reads them: its `SETTINGS_MAX_CONCURRENT_STREAMS` (hyper's client
//! keeps it to itself) and whether it sent `GOAWAY`.
//!
//! [`WatchIo`] wraps the connection's stream (under TLS: the plaintext
//! side) and passes every byte on unchanged; a small parser follows the
//! server's frames (RFC 9113 §4.1: a 9-byte header, then the payload),
//! reads the payload of `SETTINGS` frames (§6.5) and skips every other.
//! What it finds goes to a [`Watched`] shared with the pool.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const FRAME_SETTINGS: u8 = 0x4;
const FRAME_GOAWAY: u8 = 0x7;
const FLAG_ACK: u8 = 0x1;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// The longest `SETTINGS` payload read (2,730 settings); a longer one is
/// skipped unread (the connection is then hyper's to refuse).
const SETTINGS_MAX: usize = 16_380;

/// What the server said, shared by the connection's stream and the pool.
#[derive(Debug)]
pub(crate) struct Watched {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; `u32::MAX` while unlimited
    /// (RFC 9113 §6.5.2: no limit until the server sets one).
    max_streams: AtomicU32,
    /// The server's first `SETTINGS` frame (its preface) arrived, or the
    /// connection ended.
    settings: tokio::sync::watch::Sender<bool>,
    /// The server's first `SETTINGS` frame arrived.
    has_settings: AtomicBool,
    /// The server sent `GOAWAY`: no new stream goes on this connection.
    goaway: AtomicBool,
}

impl Watched {
    pub(crate) fn new() -> Arc<Watched> {
        Arc::new(Watched {
            max_streams: AtomicU32::new(u32::MAX),
            settings: tokio::sync::watch::Sender::new(false),
            has_settings: AtomicBool::new(false),
            goaway: AtomicBool::new(false),
        })
    }

    /// The server's limit on streams at once.
    pub(crate) fn max_streams(&self) -> u32 {
        self.max_streams.load(Ordering::Relaxed)
    }

    /// Whether the server sent `GOAWAY`.
    pub(crate) fn goaway(&self) -> bool {
        self.goaway.load(Ordering::Relaxed)
    }

    /// Whether the server's first `SETTINGS` arrived.
    pub(crate) fn has_settings(&self) -> bool {
        self.has_settings.load(Ordering::Relaxed)
    }

    /// The connection ended: nothing more comes.
    pub(crate) fn end(&self) {
        self.settings.send_replace(true);
    }

    /// Until the server's first `SETTINGS` arrived or the connection ended.
    pub(crate) async fn settled(&self) {
        let mut rx = self.settings.subscribe();
        let _ = rx.wait_for(|seen| *seen).await;
    }
}

/// Where the parser is in the server's frames.
#[derive(Debug)]
enum State {
    /// Reading a frame header: `n` of its 9 bytes so far.
    Header { buf: [u8; 9], n: usize },
    /// Skipping the rest of a payload.
    Skip(usize),
    /// Reading a `SETTINGS` payload of `len` bytes.
    Settings { buf: Vec<u8>, len: usize },
}

/// Follows the frames a server sends (see the module docs).
#[derive(Debug)]
pub(crate) struct FrameWatch {
    state: State,
}

impl FrameWatch {
    pub(crate) fn new() -> FrameWatch {
        FrameWatch {
            state: State::Header { buf: [0; 9], n: 0 },
        }
    }

    /// Takes the next bytes the server sent.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], to: &Watched) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Header { buf, n } => {
                    let take = (9 - *n).min(bytes.len());
                    buf[*n..*n + take].copy_from_slice(&bytes[..take]);
                    *n += take;
                    bytes = &bytes[take..];
                    if *n < 9 {
                        return;
                    }
                    let len =
                        usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                    let (kind, flags) = (buf[3], buf[4]);
                    if kind == FRAME_GOAWAY {
                        to.goaway.store(true, Ordering::Relaxed);
                    }
                    self.state =
                        if kind == FRAME_SETTINGS && flags & FLAG_ACK == 0 && len <= SETTINGS_MAX {
                            State::Settings {
                                buf: Vec::with_capacity(len),
                                len,
                            }
                        } else {
                            State::Skip(len)
                        };
                    self.done_if_empty(to);
                }
                State::Skip(left) => {
                    let take = (*left).min(bytes.len());
                    *left -= take;
                    bytes = &bytes[take..];
                    self.done_if_empty(to);
                }
                State::Settings { buf, len } => {
                    let take = (*len - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.done_if_empty(to);
                }
            }
        }
    }

    /// A payload read whole: what it said taken, back to headers.
    fn done_if_empty(&mut self, to: &Watched) {
        match &self.state {
            State::Skip(0) => {}
            State::Settings { buf, len } if buf.len() == *len => {
                for s in buf.chunks_exact(6) {
                    if u16::from_be_bytes([s[0], s[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS {
                        let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                        to.max_streams.store(v, Ordering::Relaxed);
                    }
                }
                to.has_settings.store(true, Ordering::Relaxed);
                to.settings.send_replace(true);
            }
            _ => return,
        }
        self.state = State::Header { buf: [0; 9], n: 0 };
    }
}

/// A connection's stream with its server's frames watched (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct WatchIo<T> {
    inner: T,
    frames: FrameWatch,
    watched: Arc<Watched>,
}

impl<T> WatchIo<T> {
    pub(crate) fn new(inner: T, watched: Arc<Watched>) -> WatchIo<T> {
        WatchIo {
            inner,
            frames: FrameWatch::new(),
            watched,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.frames.feed(&buf.filled()[before..], &this.watched);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            0,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn settings_and_goaway_are_read_across_any_split() {
        // SETTINGS (initial window, max streams 4), a DATA frame, a
        // SETTINGS ACK, then GOAWAY.
        let mut wire = frame(4, 0, &[0, 4, 0, 1, 0, 0, 0, 3, 0, 0, 0, 4]);
        wire.extend(frame(0, 0, &[7; 300]));
        wire.extend(frame(4, 1, &[]));
        let before_goaway = wire.len();
        wire.extend(frame(7, 0, &[0, 0, 0, 5, 0, 0, 0, 0]));
        for step in [1, 2, 5, 9, 13, 64, wire.len()] {
            let w = Watched::new();
            let mut f = FrameWatch::new();
            assert_eq!(w.max_streams(), u32::MAX);
            for (k, chunk) in wire.chunks(step).enumerate() {
                f.feed(chunk, &w);
                if (k + 1) * step < before_goaway {
                    assert!(!w.goaway(), "step {step}");
                }
            }
            assert_eq!(w.max_streams(), 4, "step {step}");
            assert!(w.has_settings());
            assert!(w.goaway(), "step {step}");
        }
        // A later SETTINGS changes the limit; one without it keeps it.
        let w = Watched::new();
        let mut f = FrameWatch::new();
        f.feed(&frame(4, 0, &[]), &w);
        assert!(w.has_settings());
        assert_eq!(w.max_streams(), u32::MAX, "no limit set");
        f.feed(&frame(4, 0, &[0, 3, 0, 0, 0, 9]), &w);
        f.feed(&frame(4, 0, &[0, 4, 0, 1, 0, 0]), &w);
        assert_eq!(w.max_streams(), 9);
    }
}
