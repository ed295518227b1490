//! One object file: its name, and what every reader of it checks.
//!
//! ## Model
//!
//! A published object is the file `<id>-<serial>` (32 and 16 hex digits)
//! in the fan-out directory named by the first two digits of its id; a file
//! being written is the same name with `.tmp`. [`check_file`] is the check
//! every reader applies (lookup, probe, loader): a prefix of this format
//! version naming the expected id (and serial), an intact head slot written
//! by this file's own write, a head of the same key, the exact length.
//! [`open_object`] adds the block table and, for a body that came with the
//! first read, the body itself.
//!
//! Everything here is blocking and needs no zone state: call it on the
//! zone's pool. A failed check is a [`ReadError`], which the caller turns
//! into a miss, a removal or a directory taken out of service.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use crate::disk::index::object_id;
use crate::format::{
    check_block, decode_table, pick_slot, Head, Prefix, Reject, BLOCK, PREFIX_LEN,
};

/// Parses `<id>-<serial>` (32 and 16 hex digits).
pub(super) fn parse_name(name: &str) -> Option<(u128, u64)> {
    let (id, serial) = name.split_once('-')?;
    if id.len() != 32 || serial.len() != 16 {
        return None;
    }
    Some((
        u128::from_str_radix(id, 16).ok()?,
        u64::from_str_radix(serial, 16).ok()?,
    ))
}

/// Creates the fan-out directory of `path` if it is missing; with `sync`,
/// a new one is made durable in its parent (`durability = "power"`).
pub(super) fn make_parent(path: &Path, sync: bool) -> io::Result<()> {
    let Some(p) = path.parent() else {
        return Ok(());
    };
    match fs::create_dir(p) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Ok(()) if sync => p.parent().map_or(Ok(()), crate::disk::durability::sync_dir),
        r => r,
    }
}

/// Reads up to `buf.len()` bytes at `at`; returns how many (short at EOF).
fn read_up_to(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

pub(super) enum ReadError {
    Gone,
    /// The directory is out of service.
    Offline,
    Reject(Reject),
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::NotFound {
            ReadError::Gone
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadError::Reject(Reject::Truncated)
        } else {
            ReadError::Io(e)
        }
    }
}

impl From<Reject> for ReadError {
    fn from(r: Reject) -> Self {
        ReadError::Reject(r)
    }
}

/// The checked start of an object file: prefix, newest intact head slot,
/// exact length. `buf` holds at least the first `first` bytes (or the file).
pub(super) struct Checked {
    pub(super) file: File,
    pub(super) buf: Vec<u8>,
    pub(super) prefix: Prefix,
    pub(super) slot: u8,
    pub(super) generation: u64,
    pub(super) head: Head,
}

/// Opens `path` and checks what every reader and the loader check: a
/// prefix of this version naming `expect_id` (and `expect_serial`), an
/// intact head, the exact file length.
pub(super) fn check_file(
    path: &Path,
    expect_id: u128,
    expect_serial: Option<u64>,
    first: u64,
) -> Result<Checked, ReadError> {
    let file = File::open(path)?;
    let mut buf = vec![0u8; first.max(4096) as usize];
    let n = read_up_to(&file, &mut buf, 0)?;
    buf.truncate(n);
    let prefix = Prefix::decode(&buf)?;
    if object_id(prefix.primary, prefix.variant) != expect_id
        || expect_serial.is_some_and(|s| s != prefix.serial)
    {
        return Err(Reject::BadPrefix.into());
    }
    let data = prefix.data_offset() as usize;
    if buf.len() < data {
        let mut more = vec![0u8; data];
        file.read_exact_at(&mut more, 0)?;
        buf = more;
    }
    // Only a slot written by this file's own write counts (the serial is in
    // its checksum): a recycled file's slots of the previous object are dead.
    let slot = pick_slot(
        &buf[PREFIX_LEN as usize..data],
        prefix.slot_len,
        prefix.serial,
    )?;
    let head = Head::decode(slot.head)?;
    if hoard_policy::key::Digest::of(head.key.as_bytes()).0 != prefix.primary {
        // An intact head of another key (a planted or misplaced file):
        // served for neither key, and removed.
        return Err(Reject::ForeignHead.into());
    }
    if head.layout(prefix.body_len).is_none() {
        // Parts longer than the body: a head that cannot be this file's.
        return Err(Reject::BadHead.into());
    }
    let (index, generation) = (slot.index, slot.generation);
    if file.metadata()?.len() != prefix.file_len() {
        return Err(Reject::Truncated.into());
    }
    Ok(Checked {
        file,
        buf,
        prefix,
        slot: index,
        generation,
        head,
    })
}

/// A file opened by a lookup.
pub(super) struct Opened {
    pub(super) file: File,
    pub(super) prefix: Prefix,
    pub(super) slot: u8,
    pub(super) generation: u64,
    pub(super) head: Head,
    pub(super) sums: Vec<u64>,
    /// The whole body, checked, when it came with the first read.
    pub(super) inline: Option<Bytes>,
}

/// Opens and checks an object file: prefix, head, length, block table; a
/// body that fits the first read is checked and returned whole.
pub(super) fn open_object(path: &Path, expect_id: u128, first: u64) -> Result<Opened, ReadError> {
    let Checked {
        file,
        buf,
        prefix,
        slot: index,
        generation,
        head,
    } = check_file(path, expect_id, None, first)?;
    let file_len = prefix.file_len();
    let data = prefix.data_offset() as usize;
    let table_at = prefix.table_offset();
    let (sums, inline) = if buf.len() as u64 >= file_len {
        let sums = decode_table(&buf[table_at as usize..file_len as usize], prefix.blocks())?;
        let body = &buf[data..table_at as usize];
        for (i, block) in body.chunks(BLOCK as usize).enumerate() {
            check_block(block, sums[i])?;
        }
        // Copied out: the read buffer also holds the head and the table.
        (sums, Some(Bytes::copy_from_slice(body)))
    } else {
        let mut t = vec![0u8; (file_len - table_at) as usize];
        file.read_exact_at(&mut t, table_at)?;
        (decode_table(&t, prefix.blocks())?, None)
    };
    Ok(Opened {
        file,
        prefix,
        slot: index,
        generation,
        head,
        sums,
        inline,
    })
}
