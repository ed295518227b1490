//! Reading a stored body from its file: block by block, each block checked
//! against its checksum before a byte of it is handed out, from any offset
//! (a byte range reads only the blocks it covers).
//!
//! A [`FileBody`] keeps its file open: an object evicted or replaced while
//! a client reads it is still read whole from the file it started with.
//! A read that fails, or a block that fails its checksum, is reported to
//! the zone the body came from (`ReadFailed`, through a `Weak`).
//!
//! ## Zero copy
//!
//! Once every block of a body has been read through an open file handle and
//! matched its checksum, the handle is marked verified ([`PoolFile`]): the
//! bytes in the page cache are the bytes that were checked. A reader over a
//! verified handle may then hand out [`FileSpan`]s instead of bytes, for the
//! connection to send with `sendfile` (plain HTTP/1.1 only), but only for
//! spans whose every page is resident ([`resident`]), so that the
//! send never waits for the device. Anything else is read and checked here.

use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;

use crate::format::{check_block, BLOCK};
use crate::io::PoolFile;
use crate::io::{IoKind, IoPool};

pub mod resident;

/// What a body tells the zone it was read from when a read fails: the zone
/// removes the object (a block that failed its checksum) or takes the
/// directory out of service (an I/O error). A disk zone implements it.
pub(crate) trait ReadFailed: Send + Sync {
    /// The read of object `id` (written by `serial`) failed with `e`.
    fn read_failed(&self, id: u128, serial: u64, e: &io::Error);
}

/// Most bytes one read hands out.
const READ_MAX: u64 = 4 * BLOCK;

/// An open stored body, or a span of one (the stored bytes of a body that
/// has parts after them, or one of the parts: see
/// [`crate::format::Head::layout`]).
#[derive(Debug)]
pub struct FileBody {
    pub(crate) file: Arc<PoolFile>,
    /// Where the body starts in the file.
    pub(crate) data: u64,
    /// Where this span starts in the body.
    pub(crate) base: u64,
    /// This span's length.
    pub(crate) len: u64,
    /// The whole body's length (blocks are counted from its start).
    pub(crate) total: u64,
    /// One checksum per block.
    pub(crate) sums: Arc<[u64]>,
    pub(crate) io: IoPool,
    /// To report a block that fails its checksum (the zone the body was
    /// read from).
    pub(crate) zone: Weak<dyn ReadFailed>,
    pub(crate) id: u128,
    pub(crate) serial: u64,
}

impl FileBody {
    /// Body length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty body.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when this span is the whole body: reading it all checks every
    /// block of the file.
    fn is_whole(&self) -> bool {
        self.base == 0 && self.len == self.total
    }

    /// A reader of bytes `start..end` (clamped to the span).
    pub fn reader(self: &Arc<Self>, start: u64, end: u64) -> FileReader {
        FileReader {
            body: self.clone(),
            pos: start.min(self.len),
            end: end.min(self.len),
            pending: None,
            whole: start == 0 && self.is_whole() && !self.file.is_verified(),
            untouched: true,
        }
    }

    /// Reads the whole span into memory, checked (for a memory promotion).
    pub async fn read_all(self: &Arc<Self>) -> io::Result<Vec<Bytes>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < self.len {
            let b = read_span(self.clone(), pos, self.len).await?;
            pos += b.len() as u64;
            out.push(b);
        }
        if self.is_whole() {
            self.file.mark_verified();
        }
        Ok(out)
    }

    /// The block-aligned body offsets covering span bytes `pos..end`,
    /// reading at most [`READ_MAX`] from the first.
    fn blocks_of(&self, pos: u64, end: u64, max: u64) -> (u64, u64) {
        let from = (self.base + pos) / BLOCK * BLOCK;
        let to = (from + max)
            .min(self.total)
            .min((self.base + end).div_ceil(BLOCK) * BLOCK);
        (from, to)
    }
}

/// Reads and checks the blocks covering `pos..`, up to [`READ_MAX`], and
/// returns the bytes from `pos` (at most up to `end`). Bytes in the page
/// cache are read at once on the calling thread with `RWF_NOWAIT` (which
/// never waits for the disk); anything else goes to the zone's I/O pool.
fn read_span(body: Arc<FileBody>, pos: u64, end: u64) -> impl Future<Output = io::Result<Bytes>> {
    let io = body.io.clone();
    async move {
        let (from, to) = body.blocks_of(pos, end, READ_MAX);
        let r = match body.read_now(from, to) {
            Some(r) => r,
            None => {
                let b = body.clone();
                io.run(IoKind::Read, move || b.read_blocking(from, to))
                    .await
            }
        };
        match r {
            Ok(buf) => {
                let start = (body.base + pos - from) as usize;
                let stop = ((body.base + end).min(to) - from) as usize;
                Ok(buf.slice(start..stop))
            }
            Err(e) => {
                if let Some(zone) = body.zone.upgrade() {
                    zone.read_failed(body.id, body.serial, &e);
                }
                Err(e)
            }
        }
    }
}

impl FileBody {
    /// Checks block-aligned bytes `from..to` against their sums.
    fn check(&self, from: u64, buf: &[u8]) -> io::Result<()> {
        let first = (from / BLOCK) as usize;
        for (i, block) in buf.chunks(BLOCK as usize).enumerate() {
            check_block(block, self.sums[first + i])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        Ok(())
    }

    /// Reads and checks `from..to` (block aligned) on a pool thread.
    fn read_blocking(&self, from: u64, to: u64) -> io::Result<Bytes> {
        let mut buf = vec![0u8; (to - from) as usize];
        self.file.read_exact_at(&mut buf, self.data + from)?;
        self.check(from, &buf)?;
        Ok(Bytes::from(buf))
    }

    /// Reads and checks `from..to` (block aligned) now, if every byte is in
    /// the page cache (`RWF_NOWAIT`); `None` when the disk would have to be
    /// read (or the test gate holds reads): use the pool.
    pub(crate) fn read_now(&self, from: u64, to: u64) -> Option<io::Result<Bytes>> {
        if self.io.gate().is_closed() {
            return None;
        }
        let mut buf = vec![0u8; (to - from) as usize];
        let mut done = 0;
        while done < buf.len() {
            let mut slices = [std::io::IoSliceMut::new(&mut buf[done..])];
            match rustix::io::preadv2(
                &**self.file,
                &mut slices,
                self.data + from + done as u64,
                rustix::io::ReadWriteFlags::NOWAIT,
            ) {
                Ok(0) => return Some(Err(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                // Not cached, or no RWF_NOWAIT here: the pool reads it.
                Err(_) => return None,
            }
        }
        Some(self.check(from, &buf).map(|()| Bytes::from(buf)))
    }

    /// Reads the whole span of a small object now or on the pool, checked.
    pub(crate) async fn read_small(self: &Arc<Self>) -> io::Result<Bytes> {
        let (from, to) = self.blocks_of(0, self.len, u64::MAX);
        let r = match self.read_now(from, to) {
            Some(r) => r,
            None => {
                let b = self.clone();
                self.io
                    .run(IoKind::Read, move || b.read_blocking(from, to))
                    .await
            }
        };
        if r.is_ok() && self.is_whole() {
            self.file.mark_verified();
        }
        let start = (self.base - from) as usize;
        r.map(|b| b.slice(start..start + self.len as usize))
    }
}

/// Streams `start..end` of a stored body.
pub struct FileReader {
    body: Arc<FileBody>,
    pos: u64,
    end: u64,
    pending: Option<Pin<Box<dyn Future<Output = io::Result<Bytes>> + Send>>>,
    /// Reading the whole body through user space from byte 0, on a handle
    /// not yet verified: reaching the end verifies it.
    whole: bool,
    /// Nothing handed out yet.
    untouched: bool,
}

/// Bytes of an open, verified file to send without copying them through
/// user space. Holds the file open.
#[derive(Debug)]
pub struct FileSpan {
    file: Arc<PoolFile>,
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl FileSpan {
    /// The file to send from.
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("pos", &self.pos)
            .field("end", &self.end)
            .field("reading", &self.pending.is_some())
            .finish()
    }
}

impl FileReader {
    /// Bytes left to hand out.
    pub fn remaining(&self) -> u64 {
        self.end - self.pos
    }

    /// True until the first byte is handed out.
    pub fn untouched(&self) -> bool {
        self.untouched
    }

    /// Length of the whole stored body.
    pub fn body_len(&self) -> u64 {
        self.body.len
    }

    /// A new reader of bytes `start..end` of the same body (the same open file).
    pub fn range(&self, start: u64, end: u64) -> FileReader {
        self.body.reader(start, end)
    }

    /// The next up to `max` bytes as a span of the file to send with
    /// `sendfile`, if the handle is verified and every page of the span is
    /// in the page cache; `None` otherwise (then use [`Self::poll_chunk`]).
    pub fn take_span(&mut self, max: u64) -> Option<FileSpan> {
        if self.pending.is_some() || self.pos >= self.end || !self.body.file.is_verified() {
            return None;
        }
        if self.body.io.gate().is_closed() {
            return None;
        }
        let len = (self.end - self.pos).min(max);
        let offset = self.body.data + self.body.base + self.pos;
        if !resident::resident(&self.body.file, offset, len) {
            return None;
        }
        self.pos += len;
        self.whole = false;
        self.untouched = false;
        Some(FileSpan {
            file: self.body.file.clone(),
            offset,
            len,
        })
    }

    /// The next up to `max` bytes, read on this thread, if the handle is
    /// verified and every page of them is in the page cache (see
    /// [`resident::read_resident`]); `None` otherwise (then use
    /// [`Self::take_span`] or [`Self::poll_chunk`]). A verified handle's
    /// resident pages are the bytes that were checked, as for a span.
    pub fn read_resident(&mut self, max: u64) -> Option<Bytes> {
        if self.pending.is_some() || self.pos >= self.end || !self.body.file.is_verified() {
            return None;
        }
        if self.body.io.gate().is_closed() {
            return None;
        }
        let len = (self.end - self.pos).min(max);
        let bytes = resident::read_resident(
            &self.body.file,
            self.body.data + self.body.base + self.pos,
            len as usize,
        )?;
        self.pos += len;
        self.whole = false;
        self.untouched = false;
        Some(Bytes::from(bytes))
    }

    /// The next chunk; `None` at the end; an error (I/O or a failed
    /// checksum) ends the body: the response must be aborted.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        if self.pos >= self.end {
            return Poll::Ready(None);
        }
        let fut = self
            .pending
            .get_or_insert_with(|| Box::pin(read_span(self.body.clone(), self.pos, self.end)));
        match fut.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.pending = None;
                match r {
                    Ok(b) => {
                        self.pos += b.len() as u64;
                        self.untouched = false;
                        if self.whole && self.pos >= self.body.len {
                            self.body.file.mark_verified();
                        }
                        Poll::Ready(Some(Ok(b)))
                    }
                    Err(e) => {
                        self.pos = self.end;
                        Poll::Ready(Some(Err(e)))
                    }
                }
            }
        }
    }
}
