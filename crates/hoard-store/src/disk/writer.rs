//! Writing one object to a zone while its fill streams it to clients.
//!
//! ## Lifecycle
//!
//! [`DiskZone::writer`] reserves room and creates `<id>-<serial>.tmp`, or
//! takes over an evicted object's file under that name (recycled: its
//! blocks and cached pages are overwritten in place).
//! [`DiskWriter::write`] buffers body chunks and writes them in batches on
//! the zone's pool, computing the block checksums as it goes; before the
//! file grows past its reservation it reserves more (evicting others if
//! needed). [`DiskWriter::finish`] writes the block table, the head and the
//! prefix, then renames the file to its final name (the commit point) and
//! publishes it in the index. Under `durability = "power"` the file is
//! synced before the rename and its directory after it, both before the
//! index learns of it ([`super::durability`]). A writer dropped before `finish` (a failed
//! or cancelled fill, a body that outgrew its room) unlinks its `.tmp` and
//! releases its reservation: nothing partial is ever published.

use std::fs::{self, File};
use std::mem;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::busy::{SpillFuture, SpillRead};
use crate::catalog::Raced;
use crate::io::IoPool;
use crate::io::PoolFile;

use super::durability::sync_dir;
use super::index::on_disk;
use super::zone::{DiskZone, Victims};
use crate::events::StoreEvent;
use crate::format::{encode_slot, BlockSums, Head, Prefix, BLOCK, PREFIX_LEN};
use crate::io::IoKind;
use crate::object::DiskRef;

/// Bytes buffered before a write is issued.
const BATCH: usize = 1024 * 1024;

/// Why a disk copy was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The body outgrew the zone's largest object.
    TooLarge,
    /// No room could be reserved.
    NoRoom,
    /// A disk operation failed.
    Io,
    /// The head outgrew its slot.
    HeadTooLarge,
    /// A purge or an invalidation since the fill started selects it.
    Purged,
    /// It was to replace a copy (with parts added) that is no longer the
    /// one stored, or whose head was rewritten meanwhile.
    Superseded,
}

impl Abandoned {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Abandoned::TooLarge => "too-large",
            Abandoned::NoRoom => "no-room",
            Abandoned::Io => "io-error",
            Abandoned::HeadTooLarge => "head-too-large",
            Abandoned::Purged => "purged",
            Abandoned::Superseded => "superseded",
        }
    }
}

/// The writer of one object file. See the module docs.
#[derive(Debug)]
pub struct DiskWriter {
    zone: Arc<DiskZone>,
    primary: u128,
    variant: u128,
    id: u128,
    dir: u8,
    serial: u64,
    slot_len: u32,
    file: Arc<PoolFile>,
    tmp: PathBuf,
    sums: Option<BlockSums>,
    pending: Vec<Bytes>,
    pending_len: usize,
    /// Body bytes written to the file.
    written: u64,
    /// Bytes held in the zone's account for this file (shared with the
    /// pool jobs that grow it, so a writer dropped while one runs loses
    /// nothing: see [`Held`]).
    held: Arc<Mutex<Held>>,
    /// The file was an evicted object's, overwritten in place: it may be
    /// longer than this object and is cut to length when finished.
    recycled: bool,
    done: bool,
}

/// The bytes a writer holds in its zone's account. A reservation made by a
/// pool job whose writer was dropped meanwhile (a cancelled `write`) finds
/// `closed` and gives its bytes back at once; otherwise they are added
/// here, and whoever closes the writer (its `Drop`, or `finish`) releases
/// exactly what is here.
#[derive(Debug, Default)]
struct Held {
    bytes: u64,
    closed: bool,
}

impl Held {
    /// Adds bytes just reserved; false (and the caller releases them) when
    /// the writer is already closed.
    fn add(&mut self, bytes: u64) -> bool {
        if self.closed {
            return false;
        }
        self.bytes += bytes;
        true
    }

    /// Closes the writer's account and returns what it holds.
    fn close(&mut self) -> u64 {
        self.closed = true;
        std::mem::take(&mut self.bytes)
    }
}

/// Reads a file being written back, for readers of its busy body.
#[derive(Debug)]
struct TmpRead {
    file: Arc<PoolFile>,
    data: u64,
    io: IoPool,
}

impl SpillRead for TmpRead {
    fn read(&self, offset: u64, len: u64) -> SpillFuture {
        let (file, at, io) = (self.file.clone(), self.data + offset, self.io.clone());
        Box::pin(async move {
            let buf = io
                .run(IoKind::Read, move || {
                    let mut buf = vec![0u8; len as usize];
                    file.read_exact_at(&mut buf, at)?;
                    Ok(buf)
                })
                .await?;
            Ok(Bytes::from(buf))
        })
    }
}

/// Writes `chunks` at `at` with as few `pwritev` calls as the kernel allows.
fn write_all_vectored_at(file: &File, chunks: &[Bytes], mut at: u64) -> std::io::Result<()> {
    // Where the next write starts: chunk index and offset in it.
    let (mut i, mut off) = (0, 0);
    loop {
        // Skip what is written (and empty chunks).
        while i < chunks.len() && off == chunks[i].len() {
            i += 1;
            off = 0;
        }
        if i == chunks.len() {
            return Ok(());
        }
        let slices: Vec<std::io::IoSlice<'_>> = std::iter::once(&chunks[i][off..])
            .chain(chunks[i + 1..].iter().map(|c| &c[..]))
            .take(1024)
            .map(std::io::IoSlice::new)
            .collect();
        let mut n = match rustix::io::pwritev(file, &slices, at) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        at += n as u64;
        while n > 0 && i < chunks.len() {
            let left = chunks[i].len() - off;
            if n >= left {
                n -= left;
                i += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
    }
}

impl DiskWriter {
    /// The number of the zone this writer writes to.
    pub fn zone_number(&self) -> usize {
        self.zone.number
    }

    /// Body bytes written to the file so far (readable through [`DiskWriter::spill_source`]).
    pub fn durable(&self) -> u64 {
        self.written
    }

    /// Reads back what this writer has written: a busy body spills to it.
    pub fn spill_source(&self) -> Arc<dyn SpillRead> {
        Arc::new(TmpRead {
            file: self.file.clone(),
            data: self.data_offset(),
            io: self.zone.io.clone(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        zone: Arc<DiskZone>,
        primary: u128,
        variant: u128,
        id: u128,
        dir: u8,
        serial: u64,
        slot_len: u32,
        file: File,
        tmp: PathBuf,
        reserved: u64,
        recycled: bool,
    ) -> DiskWriter {
        let io = zone.io.clone();
        DiskWriter {
            zone,
            primary,
            variant,
            id,
            dir,
            serial,
            slot_len,
            file: Arc::new(PoolFile::new(file, io)),
            tmp,
            sums: Some(BlockSums::default()),
            pending: Vec::new(),
            pending_len: 0,
            written: 0,
            held: Arc::new(Mutex::new(Held {
                bytes: reserved,
                closed: false,
            })),
            recycled,
            done: false,
        }
    }

    fn data_offset(&self) -> u64 {
        PREFIX_LEN + 2 * u64::from(self.slot_len)
    }

    /// The file length once `body` bytes are written and the table follows.
    fn file_len(&self, body: u64) -> u64 {
        self.data_offset() + body + 8 * body.div_ceil(BLOCK) + 8
    }

    /// Takes a body chunk; writes a batch when enough is buffered.
    ///
    /// # Errors
    /// When the copy must be given up; the caller drops the writer (which
    /// removes the file) and goes on serving the body.
    pub async fn write(&mut self, chunk: Bytes) -> Result<(), Abandoned> {
        self.pending_len += chunk.len();
        self.pending.push(chunk);
        if self.pending_len >= BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), Abandoned> {
        if self.pending_len == 0 {
            return Ok(());
        }
        let body = self.written + self.pending_len as u64;
        if body > self.zone.cfg.max_object {
            return Err(Abandoned::TooLarge);
        }
        let need = on_disk(self.file_len(body));
        let reserved = self.reserved();
        if need > reserved {
            self.grow(need - reserved).await?;
        }
        // Absent only after a write that was cancelled mid-way: the file's
        // contents are unknown, so the copy is given up.
        let mut sums = self.sums.take().ok_or(Abandoned::Io)?;
        let chunks = mem::take(&mut self.pending);
        self.pending_len = 0;
        let file = self.file.clone();
        let at = self.data_offset() + self.written;
        let gate = self.zone.io.gate_arc();
        let r = self
            .zone
            .io
            .run(IoKind::Write, move || {
                gate.write_fault()?;
                write_all_vectored_at(&file, &chunks, at)?;
                for c in &chunks {
                    sums.update(c);
                }
                Ok(sums)
            })
            .await;
        match r {
            Ok(s) => {
                self.sums = Some(s);
                self.written = body;
                Ok(())
            }
            Err(e) => {
                self.fail(&e);
                Err(Abandoned::Io)
            }
        }
    }

    /// Bytes held in the zone's account for this file.
    fn reserved(&self) -> u64 {
        self.held.lock().bytes
    }

    /// Reserves at least `exact` more bytes: an eighth of the file so far
    /// when that fits without evicting (reservations stay rare), else just
    /// what is needed, evicting others if it must. The bytes are added to
    /// [`Held`] by the job that reserves them, so cancelling this future at
    /// any point leaks nothing.
    async fn grow(&mut self, exact: u64) -> Result<(), Abandoned> {
        let generous = exact.max(self.reserved() / 8).max(BATCH as u64);
        if generous > exact && self.zone.try_reserve(generous) {
            if !self.held.lock().add(generous) {
                self.zone.index.lock().release(generous);
            }
            return Ok(());
        }
        let (zone, dir, held) = (self.zone.clone(), self.dir, self.held.clone());
        let ok = self
            .zone
            .io
            .run(IoKind::Write, move || {
                if held.lock().closed {
                    // The writer went while this waited: evict nothing for it.
                    return Ok(false);
                }
                if zone.reserve(exact, dir, Victims::Unlink).is_none() {
                    return Ok(false);
                }
                if held.lock().add(exact) {
                    Ok(true)
                } else {
                    // The writer was dropped while this ran.
                    zone.index.lock().release(exact);
                    Ok(false)
                }
            })
            .await
            .unwrap_or(false);
        if ok {
            Ok(())
        } else {
            Err(Abandoned::NoRoom)
        }
    }

    fn fail(&self, e: &std::io::Error) {
        tracing::warn!(zone = %self.zone.cfg.name, error = %e, "disk: write failed; the fill goes on uncached here");
        self.zone.dir_failed(self.dir, e);
    }

    /// Completes the file with `head` and publishes it, unless a purge
    /// since `purge_epoch` (the catalogue's epoch when the fill started)
    /// selects it. Once the final write is issued it runs to its end even
    /// if this future is dropped: the file is then published (indexed,
    /// accounted) or removed, never left renamed behind the index's back.
    ///
    /// # Errors
    /// When the copy had to be given up, or a purge selected it (nothing is
    /// published; the file and its bytes are gone).
    pub async fn finish(self, head: &Head, purge_epoch: u64) -> Result<DiskRef, Abandoned> {
        self.finish_replacing(head, purge_epoch, None).await
    }

    /// As [`DiskWriter::finish`], publishing only if the zone's copy of
    /// this object is still the write `replaces` names with its head
    /// unchanged (otherwise [`Abandoned::Superseded`]): a copy rewritten
    /// with its parts never takes the place of a newer copy, and never
    /// undoes a 304's head update.
    ///
    /// # Errors
    /// As [`DiskWriter::finish`].
    pub async fn finish_replacing(
        mut self,
        head: &Head,
        purge_epoch: u64,
        replaces: Option<DiskRef>,
    ) -> Result<DiskRef, Abandoned> {
        let slot = encode_slot(self.serial, 1, &head.encode(), self.slot_len)
            .ok_or(Abandoned::HeadTooLarge)?;
        let body_len = self.written + self.pending_len as u64;
        if body_len > self.zone.cfg.max_object {
            return Err(Abandoned::TooLarge);
        }
        let prefix = Prefix {
            slot_len: self.slot_len,
            body_len,
            serial: self.serial,
            primary: self.primary,
            variant: self.variant,
        };
        let bytes = on_disk(prefix.file_len());
        let reserved = self.reserved();
        if bytes > reserved {
            self.grow(bytes - reserved).await?;
        }
        let mut sums = self.sums.take().ok_or(Abandoned::Io)?;
        // From here the job below owns the file and the reservation.
        self.done = true;
        // One operation: the last batch, the block table, the head, the
        // prefix, and (under the catalogue's admission gate) the purge
        // check, the rename that publishes the file, and the index entry.
        let chunks = std::mem::take(&mut self.pending);
        let mut at = self.data_offset() + self.written;
        let (file, tmp, held) = (self.file.clone(), self.tmp.clone(), self.held.clone());
        let path = self.zone.path(self.dir, self.id, self.serial);
        let gate = self.zone.io.gate_arc();
        let recycled = self.recycled;
        let zone = self.zone.clone();
        let syncs = zone.cfg.durability.syncs();
        let (primary, id, dir, serial) = (self.primary, self.id, self.dir, self.serial);
        let (key, headers, vary) = (head.key.clone(), head.headers.clone(), head.vary.clone());
        let r = self
            .zone
            .io
            .run_to_end(IoKind::Write, move || {
                let reserved = held.lock().close();
                let written = (|| {
                    gate.write_fault()?;
                    if recycled {
                        // What is left of the previous object goes.
                        file.set_len(prefix.file_len())?;
                    }
                    for c in &chunks {
                        file.write_all_at(c, at)?;
                        sums.update(c);
                        at += c.len() as u64;
                    }
                    file.write_all_at(&sums.finish(), prefix.table_offset())?;
                    file.write_all_at(&slot, PREFIX_LEN)?;
                    file.write_all_at(&prefix.encode(), 0)?;
                    if syncs {
                        // Outside the admission gate: the slow part.
                        file.sync_all()?;
                        zone.events.event(&zone.cfg.name, StoreEvent::Synced);
                    }
                    Ok(())
                })();
                if let Err(e) = written {
                    zone.discard(&tmp, reserved);
                    return Err(e);
                }
                let catalog = zone.catalog.clone();
                let admitted = {
                    let _gate = catalog.admit();
                    let raced = catalog.purged_since(purge_epoch, &key, &headers, Raced::Hard);
                    // Every publish happens under the gate: what is current
                    // now stays current until this one is published.
                    let current = replaces.is_none_or(|r| zone.is_current_head(r));
                    if !current {
                        zone.discard(&tmp, reserved);
                        return Ok(Err(Abandoned::Superseded));
                    }
                    if raced == Raced::No {
                        if let Err(e) = fs::rename(&tmp, &path) {
                            zone.discard(&tmp, reserved);
                            return Err(e);
                        }
                        if syncs {
                            // The name is durable before the index has it.
                            let synced = path.parent().map_or(Ok(()), sync_dir);
                            if let Err(e) = synced {
                                zone.discard(&path, reserved);
                                return Err(e);
                            }
                            zone.events.event(&zone.cfg.name, StoreEvent::Synced);
                        }
                        // The file is final and no larger than `bytes`: the
                        // rest of the reservation goes back.
                        zone.index.lock().release(reserved - bytes);
                        zone.publish(primary, id, dir, serial, bytes, &vary);
                        catalog.add(primary, &key, &headers);
                    }
                    raced == Raced::No
                };
                if !admitted {
                    zone.discard(&tmp, reserved);
                }
                Ok(if admitted {
                    Ok(())
                } else {
                    Err(Abandoned::Purged)
                })
            })
            .await;
        match r {
            Ok(Err(why)) => Err(why),
            Ok(Ok(())) => Ok(DiskRef {
                zone: self.zone.number,
                id: self.id,
                serial: self.serial,
                slot: 0,
                generation: 1,
                slot_len: self.slot_len,
            }),
            Err(e) => {
                // The job removed the file and gave the bytes back.
                self.zone
                    .events
                    .event(&self.zone.cfg.name, StoreEvent::WriteAbandoned);
                self.fail(&e);
                Err(Abandoned::Io)
            }
        }
    }
}

impl Drop for DiskWriter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.zone
            .events
            .event(&self.zone.cfg.name, StoreEvent::WriteAbandoned);
        let (zone, tmp, held) = (self.zone.clone(), self.tmp.clone(), self.held.clone());
        self.zone.io.spawn(move || {
            // Closed first: a reservation still running gives its own bytes back.
            let reserved = held.lock().close();
            zone.discard(&tmp, reserved);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_writes_put_every_chunk_in_place() {
        let f = tempfile::tempfile().unwrap();
        let chunks: Vec<Bytes> = [0usize, 5, 0, 70_000, 1, 3000, 0]
            .iter()
            .enumerate()
            .map(|(i, n)| Bytes::from(vec![i as u8; *n]))
            .collect();
        write_all_vectored_at(&f, &chunks, 10).unwrap();
        let want: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let mut got = vec![0u8; want.len()];
        f.read_exact_at(&mut got, 10).unwrap();
        assert!(got == want);
        // Nothing to write is not an error.
        write_all_vectored_at(&f, &[Bytes::new()], 0).unwrap();
    }
}
