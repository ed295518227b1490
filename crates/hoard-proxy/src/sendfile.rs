//! Sending disk bodies with `sendfile` on plain HTTP/1.1 connections.
//!
//! hyper owns the socket and writes what a body yields, so a body cannot
//! call `sendfile` itself. Instead, for each [`FileSpan`] it sends, the body
//! pushes the span on its connection's [`SendQueue`] and yields a
//! *placeholder*: a `Bytes` of the same length that points into a static
//! region (`placeholder`) whose bytes are never sent. hyper queues it like
//! any chunk (the writer is set to vectored writes, so nothing is copied or
//! merged) and passes it to the connection's stream, [`SendfileStream`],
//! which recognises the address, and sends the front span of the queue with
//! `sendfile` instead. hyper advances the placeholder by what was sent, so
//! its address also tells how much of the span is done.
//!
//! ## Rules
//!
//! * Only plain connections have a queue, and only HTTP/1.x requests get it
//!   (an HTTP/2 connection copies chunks into frames).
//! * Spans are queued in the order their placeholders are yielded and sent
//!   in the order hyper writes them, which is the same order.
//! * A placeholder that does not match the front of the queue is an error
//!   that closes the connection: the placeholder bytes themselves are never
//!   written.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_store::disk::reader::FileSpan;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use hoard_metrics::counters::Counters;

/// Most bytes one placeholder (one span) stands for.
pub const SPAN_MAX: u64 = 1 << 20;

/// The placeholder region: never written to a socket.
static PLACEHOLDER: [u8; SPAN_MAX as usize] = [0; SPAN_MAX as usize];

/// A placeholder for `len` bytes (at most [`SPAN_MAX`]).
fn placeholder(len: u64) -> Bytes {
    Bytes::from_static(&PLACEHOLDER[..len as usize])
}

/// How far into the placeholder region `s` starts, if it does.
fn placeholder_offset(s: &[u8]) -> Option<usize> {
    let base = PLACEHOLDER.as_ptr() as usize;
    let p = s.as_ptr() as usize;
    (p >= base && p < base + PLACEHOLDER.len()).then(|| p - base)
}

/// The spans a connection's responses have queued, in order.
#[derive(Debug)]
pub struct SendQueue {
    spans: Mutex<VecDeque<FileSpan>>,
    counters: Arc<Counters>,
}

impl SendQueue {
    /// A queue for one connection.
    pub fn new(counters: Arc<Counters>) -> Arc<SendQueue> {
        Arc::new(SendQueue {
            spans: Mutex::new(VecDeque::new()),
            counters,
        })
    }

    /// Queues `span` and returns the placeholder for the body to yield.
    pub fn push(&self, span: FileSpan) -> Bytes {
        let len = span.len;
        debug_assert!(len > 0 && len <= SPAN_MAX);
        self.counters.add(&self.counters.disk_sendfile_bytes, len);
        self.spans.lock().push_back(span);
        placeholder(len)
    }
}

/// A client TCP stream that sends queued spans with `sendfile`.
#[derive(Debug)]
pub struct SendfileStream {
    tcp: TcpStream,
    queue: Arc<SendQueue>,
}

impl SendfileStream {
    /// Wraps `tcp`; `queue` is the one its requests get.
    pub fn new(tcp: TcpStream, queue: Arc<SendQueue>) -> SendfileStream {
        SendfileStream { tcp, queue }
    }

    /// The socket (a parked connection waits on it).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Sends the front span, `done` bytes of which are already sent;
    /// `rest` is what hyper still has of its placeholder.
    fn poll_send_span(
        &mut self,
        cx: &mut Context<'_>,
        done: usize,
        rest: usize,
    ) -> Poll<io::Result<usize>> {
        let mismatch = || io::Error::other("sendfile: placeholder does not match the queued span");
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            let mut spans = self.queue.spans.lock();
            let span = spans.front().ok_or_else(mismatch)?;
            if done as u64 + rest as u64 != span.len {
                return Poll::Ready(Err(mismatch()));
            }
            let mut offset = span.offset + done as u64;
            let file = span.file().as_fd();
            let r = self.tcp.try_io(Interest::WRITABLE, || {
                rustix::fs::sendfile(&self.tcp, file, Some(&mut offset), rest)
                    .map_err(io::Error::from)
            });
            match r {
                Ok(0) => {
                    // The file is shorter than its span: never pad.
                    return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(n) => {
                    if n == rest {
                        spans.pop_front();
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl SendfileStream {
    /// Writes `bufs` with `MSG_MORE` (more data follows at once).
    fn poll_send_more(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
        loop {
            ready!(self.tcp.poll_write_ready(cx))?;
            let r = self.tcp.try_io(Interest::WRITABLE, || {
                sendmsg(
                    &self.tcp,
                    bufs,
                    &mut SendAncillaryBuffer::default(),
                    SendFlags::MORE | SendFlags::NOSIGNAL,
                )
                .map_err(io::Error::from)
            });
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }
}

impl AsyncRead for SendfileStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendfileStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match placeholder_offset(buf) {
            Some(done) => self.poll_send_span(cx, done, buf.len()),
            None => Pin::new(&mut self.tcp).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs
            .iter()
            .position(|b| !b.is_empty() && placeholder_offset(b).is_some());
        match first {
            None => Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs),
            // The bytes before the placeholder first (the response head),
            // with MSG_MORE: the kernel sends them in one segment with the
            // start of the file instead of a small packet of their own.
            Some(i) if bufs[..i].iter().any(|b| !b.is_empty()) => {
                self.poll_send_more(cx, &bufs[..i])
            }
            Some(i) => {
                let done = placeholder_offset(&bufs[i]).expect("invariant: found above");
                self.poll_send_span(cx, done, bufs[i].len())
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_recognised_by_address_only() {
        let p = placeholder(10);
        assert_eq!(placeholder_offset(&p), Some(0));
        assert_eq!(placeholder_offset(&p[3..]), Some(3));
        let zeros = vec![0u8; 10];
        assert_eq!(placeholder_offset(&zeros), None);
    }
}
