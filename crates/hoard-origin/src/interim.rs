//! Where an origin's interim responses go: a `103 Early Hints` the origin
//! sends ahead of its final response is handed to the client connection
//! waiting for the request, if it can take one (HTTP/1.1).
//!
//! ## Model
//!
//! Each HTTP/1.1 client connection has one [`InterimQueue`]; a request
//! carries an [`Interim`]: the queue and the request's number on the
//! connection. The queue accepts hints for one request at a time (the one
//! being answered), so a hint arriving after its request was answered is
//! dropped, never sent ahead of the next response. The connection writes
//! the queue on its next flush (`hoard_server::listeners::watch`), woken through
//! [`InterimQueue::wake`].
//!
//! ## Locking
//!
//! Atomics, plus one mutex over the queued bytes held only to push or to
//! write from them (no await), taken only when a hint arrives.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, Bytes};
use http::HeaderMap;
use tokio::sync::Notify;

/// One client connection's interim responses. See the module docs.
#[derive(Debug, Default)]
pub struct InterimQueue {
    queue: parking_lot::Mutex<VecDeque<Bytes>>,
    /// The request whose interim responses are accepted; 0 = none.
    answering: AtomicU64,
    /// Interim responses queued or being queued: a fast check for every
    /// flush, and what [`InterimQueue::finish`] waits on.
    queued: AtomicUsize,
    done: Notify,
    /// Wakes the connection's task: a hint to write (polling hyper makes
    /// it flush, which writes it). The connection's other alarms use it
    /// too.
    pub wake: Notify,
}

impl InterimQueue {
    /// Opens request `seq` (from 1) to interim responses.
    pub fn open(self: &Arc<Self>, seq: u64) -> Interim {
        self.answering.store(seq, SeqCst);
        Interim {
            queue: self.clone(),
            seq,
        }
    }

    /// Waits until every queued interim response is written, then closes
    /// the request to them. Call before handing the final response over.
    pub async fn finish(&self) {
        if self.close() {
            return;
        }
        while self.queued.load(SeqCst) > 0 {
            self.done.notified().await;
        }
    }

    /// Closes the request to interim responses; true when none is left to
    /// write (else [`InterimQueue::finish`] waits for them).
    pub fn close(&self) -> bool {
        self.answering.store(0, SeqCst);
        self.queued.load(SeqCst) == 0
    }

    /// True when something is queued (checked on every flush).
    pub fn pending(&self) -> bool {
        self.queued.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Writes what is queued with `write` (which writes some of the bytes
    /// it is given); Ready when the queue is empty.
    pub fn write_with(
        &self,
        mut write: impl FnMut(&[u8]) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<()>> {
        let mut g = self.queue.lock();
        while let Some(front) = g.front_mut() {
            match write(front) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    front.advance(n);
                    if front.is_empty() {
                        g.pop_front();
                        self.queued.fetch_sub(1, SeqCst);
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        drop(g);
        self.done.notify_one();
        Poll::Ready(Ok(()))
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queued.load(SeqCst) == 0 && self.queue.lock().is_empty()
    }
}

/// A request's way to send interim responses ahead of its final one.
#[derive(Debug, Clone)]
pub struct Interim {
    queue: Arc<InterimQueue>,
    seq: u64,
}

impl Interim {
    /// Queues a `103 Early Hints` with `fields` (hop-by-hop fields already
    /// removed), unless the request has been answered.
    pub fn early_hints(&self, fields: &HeaderMap) {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
        for (name, value) in fields {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let q = &self.queue;
        // Counted before the check, so that `finish` (which clears
        // `answering` first, then reads the count) either stops this hint
        // or waits for it (both sequentially consistent).
        q.queued.fetch_add(1, SeqCst);
        if q.answering.load(SeqCst) != self.seq {
            q.queued.fetch_sub(1, SeqCst);
            q.done.notify_one();
            return;
        }
        q.queue.lock().push_back(Bytes::from(head));
        q.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_says_whether_something_is_left_to_write() {
        let q = Arc::new(InterimQueue::default());
        q.open(1);
        assert!(q.close());
        let i = q.open(2);
        i.early_hints(&HeaderMap::new());
        assert!(!q.close());
        // Closed: a later hint is dropped, the queued one stays.
        i.early_hints(&HeaderMap::new());
        assert!(q.pending());
        let _ = q.write_with(|b| Poll::Ready(Ok(b.len())));
        assert!(q.close());
    }

    #[tokio::test]
    async fn interim_after_finish_is_dropped() {
        let q = Arc::new(InterimQueue::default());
        let i = q.open(1);
        q.finish().await;
        i.early_hints(&HeaderMap::new());
        assert!(q.is_empty());
    }
}
