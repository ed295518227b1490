//! The on-disk object format, version 1 (documented in `docs/disk-format.md`).
//!
//! ```text
//! 0                 96            96+S          96+2S = D (a multiple of 4096)
//! ┌─────────────────┬─────────────┬─────────────┬──────────────┬──────────────┬────┐
//! │ prefix          │ head slot A │ head slot B │ body         │ block sums   │ T  │
//! └─────────────────┴─────────────┴─────────────┴──────────────┴──────────────┴────┘
//!                                                D .. D+len     8 bytes/block  8 bytes
//! ```
//!
//! * **prefix** (96 bytes): magic `HOARDOBJ`, format version, slot size `S`,
//!   body length, a serial (fresh for every file written; it is also in the
//!   file name, so a path names one write and never another), the primary
//!   and variant digests of the key, and an xxh3-64 of the 88 bytes before it.
//! * **head slots**: two copies of the stored response head (key text, status,
//!   fields, times, rules), each with a generation and its own xxh3-64. A
//!   304 rewrites the slot *not* in use with the next generation, so a torn
//!   head write leaves the other slot valid: the body is never rewritten.
//! * **body**, then one xxh3-64 per 64 KiB block, then `T`, the xxh3-64 of
//!   the block table. Readers verify each block before sending it.
//!
//! Every function here is pure: bytes in, bytes or errors out.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hoard_policy::encoding::Coding;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use xxhash_rust::xxh3::xxh3_64;

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"HOARDOBJ";
/// The format version this build writes and reads.
pub const VERSION: u16 = 2;
/// Length of the fixed prefix.
pub const PREFIX_LEN: u64 = 96;
/// Body bytes covered by one checksum.
pub const BLOCK: u64 = 64 * 1024;
/// Bytes of a head slot before the head itself: generation, length, checksum.
const SLOT_HEADER: usize = 24;
/// Largest head slot accepted when reading.
const MAX_SLOT: u32 = 1 << 20;
/// Largest body accepted when reading (1 PiB).
const MAX_BODY: u64 = 1 << 50;
/// Room left in a slot for a head that grows on a 304.
const SLOT_SLACK: usize = 1024;

/// Why bytes read from disk are not a servable object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Not a hoard object (bad magic) or a torn prefix (bad checksum).
    BadPrefix,
    /// Written by another format version.
    Version,
    /// Neither head slot is intact.
    BadHead,
    /// Shorter than its prefix says.
    Truncated,
    /// A body block or the block table fails its checksum.
    Checksum,
    /// A temporary file: a write that never completed.
    Temporary,
    /// An intact head whose key is not the one the prefix names (a planted
    /// or misplaced file): never served for either key.
    ForeignHead,
}

impl Reject {
    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::BadPrefix => "bad-prefix",
            Reject::Version => "version",
            Reject::BadHead => "bad-head",
            Reject::Truncated => "truncated",
            Reject::Checksum => "checksum",
            Reject::Temporary => "temporary",
            Reject::ForeignHead => "foreign-head",
        }
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stored object rejected: {}", self.as_str())
    }
}

impl std::error::Error for Reject {}

/// The fixed prefix of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Size of each head slot.
    pub slot_len: u32,
    /// Body length.
    pub body_len: u64,
    /// Fresh for every file written.
    pub serial: u64,
    /// Digest of the primary key text.
    pub primary: u128,
    /// Digest of the variant (0 without `Vary`).
    pub variant: u128,
}

impl Prefix {
    /// Where the body starts.
    pub fn data_offset(&self) -> u64 {
        PREFIX_LEN + 2 * u64::from(self.slot_len)
    }

    /// Number of checksummed blocks.
    pub fn blocks(&self) -> u64 {
        self.body_len.div_ceil(BLOCK)
    }

    /// Where the block table starts.
    pub fn table_offset(&self) -> u64 {
        self.data_offset() + self.body_len
    }

    /// The whole file's length.
    pub fn file_len(&self) -> u64 {
        self.table_offset() + 8 * self.blocks() + 8
    }

    /// Encodes the prefix.
    pub fn encode(&self) -> [u8; PREFIX_LEN as usize] {
        let mut b = [0u8; PREFIX_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.slot_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.body_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.serial.to_le_bytes());
        b[32..48].copy_from_slice(&self.primary.to_le_bytes());
        b[48..64].copy_from_slice(&self.variant.to_le_bytes());
        let sum = xxh3_64(&b[..88]);
        b[88..96].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and checks a prefix.
    pub fn decode(b: &[u8]) -> Result<Prefix, Reject> {
        if b.len() < PREFIX_LEN as usize {
            return Err(Reject::Truncated);
        }
        if b[0..8] != MAGIC {
            return Err(Reject::BadPrefix);
        }
        if u16::from_le_bytes([b[8], b[9]]) != VERSION {
            return Err(Reject::Version);
        }
        if xxh3_64(&b[..88]) != u64_at(b, 88) {
            return Err(Reject::BadPrefix);
        }
        let slot_len = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        let body_len = u64_at(b, 16);
        // Bounds, so no size computed from a damaged file can overflow or
        // make a reader allocate without limit.
        if (slot_len as usize) < SLOT_HEADER || slot_len > MAX_SLOT || body_len > MAX_BODY {
            return Err(Reject::BadPrefix);
        }
        Ok(Prefix {
            slot_len,
            body_len,
            serial: u64_at(b, 24),
            primary: u128::from_le_bytes(b[32..48].try_into().expect("16 bytes")),
            variant: u128::from_le_bytes(b[48..64].try_into().expect("16 bytes")),
        })
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The slot size for a head of `head_len` bytes: room to grow, and a body
/// that starts on a 4096-byte boundary.
pub fn slot_len_for(head_len: usize) -> u32 {
    let need = head_len + SLOT_HEADER + SLOT_SLACK;
    // 96 + 2 * slot = 4096 * k
    let k = (need * 2 + 96).div_ceil(4096);
    (k * 2048 - 48) as u32
}

/// One head slot's bytes: generation, length, checksum, head. The checksum
/// covers the file's `serial` too: a slot is valid only in the file write
/// that made it, so a slot left over from an earlier object in a recycled
/// file (or copied from another file) is never picked.
pub fn encode_slot(serial: u64, generation: u64, head: &[u8], slot_len: u32) -> Option<Vec<u8>> {
    if head.len() + SLOT_HEADER > slot_len as usize {
        return None;
    }
    let mut b = Vec::with_capacity(SLOT_HEADER + head.len());
    b.extend_from_slice(&generation.to_le_bytes());
    b.extend_from_slice(&(head.len() as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(head);
    let sum = slot_sum(serial, generation, head);
    b[16..24].copy_from_slice(&sum.to_le_bytes());
    Some(b)
}

fn slot_sum(serial: u64, generation: u64, head: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    h.update(&serial.to_le_bytes());
    h.update(&generation.to_le_bytes());
    h.update(&(head.len() as u32).to_le_bytes());
    h.update(head);
    h.digest()
}

/// A valid head slot: its generation, index (0 = A, 1 = B) and head bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot<'a> {
    /// Generation (higher wins).
    pub generation: u64,
    /// 0 for slot A, 1 for slot B.
    pub index: u8,
    /// The encoded head.
    pub head: &'a [u8],
}

/// Picks the newest intact slot of the file write `serial` from the two
/// slots' bytes (`b` starts at the prefix's end).
pub fn pick_slot(b: &[u8], slot_len: u32, serial: u64) -> Result<Slot<'_>, Reject> {
    let s = slot_len as usize;
    let mut best: Option<Slot<'_>> = None;
    for index in 0..2u8 {
        let start = index as usize * s;
        let Some(slot) = b.get(start..start + s) else {
            continue;
        };
        let generation = u64_at(slot, 0);
        let len = u32::from_le_bytes(slot[8..12].try_into().expect("4 bytes")) as usize;
        if SLOT_HEADER + len > s {
            continue;
        }
        let head = &slot[SLOT_HEADER..SLOT_HEADER + len];
        if slot_sum(serial, generation, head) != u64_at(slot, 16) {
            continue;
        }
        if best.as_ref().is_none_or(|b| generation > b.generation) {
            best = Some(Slot {
                generation,
                index,
                head,
            });
        }
    }
    best.ok_or(Reject::BadHead)
}

/// Checksums of a body's blocks, computed as the body streams in.
#[derive(Clone, Default)]
pub struct BlockSums {
    current: xxhash_rust::xxh3::Xxh3Default,
    in_block: u64,
    sums: Vec<u64>,
    len: u64,
}

impl BlockSums {
    /// Adds body bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        while !data.is_empty() {
            let take = (BLOCK - self.in_block).min(data.len() as u64) as usize;
            self.current.update(&data[..take]);
            self.in_block += take as u64;
            data = &data[take..];
            if self.in_block == BLOCK {
                self.sums.push(self.current.digest());
                self.current.reset();
                self.in_block = 0;
            }
        }
    }

    /// Bytes seen.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True before any byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block table and its trailing checksum.
    pub fn finish(mut self) -> Vec<u8> {
        if self.in_block > 0 {
            self.sums.push(self.current.digest());
        }
        let mut out = Vec::with_capacity(self.sums.len() * 8 + 8);
        for s in &self.sums {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let t = xxh3_64(&out);
        out.extend_from_slice(&t.to_le_bytes());
        out
    }
}

impl std::fmt::Debug for BlockSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSums")
            .field("len", &self.len)
            .field("blocks", &self.sums.len())
            .finish()
    }
}

/// Decodes and checks a block table (with its trailing checksum).
pub fn decode_table(b: &[u8], blocks: u64) -> Result<Vec<u64>, Reject> {
    let n = blocks as usize;
    if b.len() != n * 8 + 8 {
        return Err(Reject::Truncated);
    }
    if xxh3_64(&b[..n * 8]) != u64_at(b, n * 8) {
        return Err(Reject::Checksum);
    }
    Ok((0..n).map(|i| u64_at(b, i * 8)).collect())
}

/// Checks one body block against its sum.
pub fn check_block(data: &[u8], sum: u64) -> Result<(), Reject> {
    if xxh3_64(data) == sum {
        Ok(())
    } else {
        Err(Reject::Checksum)
    }
}

/// The stored response head: everything of a stored object but its body.
#[derive(Debug, Clone)]
pub struct Head {
    /// The primary key text.
    pub key: String,
    /// The `Vary` names.
    pub vary: VaryNames,
    /// Status.
    pub status: StatusCode,
    /// Stored fields.
    pub headers: HeaderMap,
    /// Age calculation instants.
    pub times: StoredTimes,
    /// Where the lifetime came from.
    pub lifetime_source: LifetimeSource,
    /// Reuse rules.
    pub rules: StoredRules,
    /// The body's parts in other content codings, in order after the
    /// identity bytes at the body's end: their codings and lengths (see
    /// [`Head::layout`]). Empty for most objects.
    pub parts: Vec<(Coding, u64)>,
}

/// Where the representations of a stored body lie within it: the stored
/// bytes first, then each part (see `hoard_proxy::encode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Offset in the body.
    pub start: u64,
    /// Length.
    pub len: u64,
}

fn coding_code(c: Coding) -> u8 {
    match c {
        Coding::Identity => 0,
        Coding::Br => 1,
        Coding::Zstd => 2,
        Coding::Gzip => 3,
    }
}

fn coding_of(b: u8) -> Result<Coding, Reject> {
    Ok(match b {
        0 => Coding::Identity,
        1 => Coding::Br,
        2 => Coding::Zstd,
        3 => Coding::Gzip,
        _ => return Err(Reject::BadHead),
    })
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

fn dur_nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

fn source_code(s: LifetimeSource) -> u8 {
    match s {
        LifetimeSource::SMaxAge => 0,
        LifetimeSource::MaxAge => 1,
        LifetimeSource::Expires => 2,
        LifetimeSource::Configured => 3,
        LifetimeSource::Heuristic => 4,
        LifetimeSource::Filter => 5,
    }
}

impl Head {
    /// Encodes the head (little-endian, length-prefixed fields).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Vec::with_capacity(256 + self.key.len());
        put_bytes(&mut e, self.key.as_bytes());
        e.extend_from_slice(&self.status.as_u16().to_le_bytes());
        e.extend_from_slice(&(self.vary.0.len() as u32).to_le_bytes());
        for n in &self.vary.0 {
            put_bytes(&mut e, n.as_str().as_bytes());
        }
        e.extend_from_slice(&(self.headers.len() as u32).to_le_bytes());
        for (n, v) in &self.headers {
            put_bytes(&mut e, n.as_str().as_bytes());
            put_bytes(&mut e, v.as_bytes());
        }
        let t = &self.times;
        for x in [
            nanos(t.request_time),
            nanos(t.response_time),
            nanos(t.date),
            dur_nanos(t.lifetime),
        ] {
            e.extend_from_slice(&x.to_le_bytes());
        }
        e.push(u8::from(t.age_value.is_some()));
        e.extend_from_slice(&t.age_value.unwrap_or(0).to_le_bytes());
        e.push(source_code(self.lifetime_source));
        let r = &self.rules;
        e.push(u8::from(r.no_cache) | (u8::from(r.no_stale) << 1));
        e.extend_from_slice(&dur_nanos(r.stale_while_revalidate).to_le_bytes());
        e.extend_from_slice(&dur_nanos(r.stale_if_error).to_le_bytes());
        // Parts: a trailing section, absent when there are none (so heads
        // written before parts existed read as heads without parts).
        if !self.parts.is_empty() {
            e.push(self.parts.len() as u8);
            for (c, len) in &self.parts {
                e.push(coding_code(*c));
                e.extend_from_slice(&len.to_le_bytes());
            }
        }
        e
    }

    /// The stored bytes' span and each part's, in a body of `body_len`
    /// bytes; `None` when the parts do not fit in it (a damaged head).
    pub fn layout(&self, body_len: u64) -> Option<(Span, Vec<(Coding, Span)>)> {
        let parts_len = self
            .parts
            .iter()
            .try_fold(0u64, |acc, (_, l)| acc.checked_add(*l))?;
        let stored = body_len.checked_sub(parts_len)?;
        let mut at = stored;
        let parts = self
            .parts
            .iter()
            .map(|(c, len)| {
                let s = Span {
                    start: at,
                    len: *len,
                };
                at += len;
                (*c, s)
            })
            .collect();
        Some((
            Span {
                start: 0,
                len: stored,
            },
            parts,
        ))
    }

    /// Decodes a head (its slot checksum already verified).
    pub fn decode(b: &[u8]) -> Result<Head, Reject> {
        let mut d = Dec { b, at: 0 };
        let key = String::from_utf8(d.bytes()?.to_vec()).map_err(|_| Reject::BadHead)?;
        let status = StatusCode::from_u16(d.u16()?).map_err(|_| Reject::BadHead)?;
        let mut vary = Vec::new();
        for _ in 0..d.u32()? {
            vary.push(HeaderName::from_bytes(d.bytes()?).map_err(|_| Reject::BadHead)?);
        }
        let n = d.u32()?;
        let mut headers = HeaderMap::with_capacity(n.min(256) as usize);
        for _ in 0..n {
            let name = HeaderName::from_bytes(d.bytes()?).map_err(|_| Reject::BadHead)?;
            let value = HeaderValue::from_bytes(d.bytes()?).map_err(|_| Reject::BadHead)?;
            headers.append(name, value);
        }
        let at = |n: u64| UNIX_EPOCH + Duration::from_nanos(n);
        let (request_time, response_time, date, lifetime) =
            (d.u64()?, d.u64()?, d.u64()?, d.u64()?);
        let has_age = d.u8()? == 1;
        let age = d.u64()?;
        let source = match d.u8()? {
            0 => LifetimeSource::SMaxAge,
            1 => LifetimeSource::MaxAge,
            2 => LifetimeSource::Expires,
            3 => LifetimeSource::Configured,
            5 => LifetimeSource::Filter,
            4 => LifetimeSource::Heuristic,
            _ => return Err(Reject::BadHead),
        };
        let flags = d.u8()?;
        let swr = d.u64()?;
        let sie = d.u64()?;
        let mut parts = Vec::new();
        if d.at < d.b.len() {
            for _ in 0..d.u8()? {
                parts.push((coding_of(d.u8()?)?, d.u64()?));
            }
        }
        if d.at != d.b.len() {
            return Err(Reject::BadHead);
        }
        Ok(Head {
            key,
            vary: VaryNames(vary),
            status,
            headers,
            times: StoredTimes {
                request_time: at(request_time),
                response_time: at(response_time),
                date: at(date),
                age_value: has_age.then_some(age),
                lifetime: Duration::from_nanos(lifetime),
            },
            lifetime_source: source,
            rules: StoredRules {
                no_cache: flags & 1 != 0,
                no_stale: flags & 2 != 0,
                stale_while_revalidate: Duration::from_nanos(swr),
                stale_if_error: Duration::from_nanos(sie),
            },
            parts,
        })
    }
}

fn put_bytes(e: &mut Vec<u8>, b: &[u8]) {
    e.extend_from_slice(&(b.len() as u32).to_le_bytes());
    e.extend_from_slice(b);
}

struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Reject> {
        let s = self
            .b
            .get(self.at..self.at.checked_add(n).ok_or(Reject::BadHead)?)
            .ok_or(Reject::BadHead)?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Reject> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Reject> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, Reject> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, Reject> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], Reject> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        let mut headers = HeaderMap::new();
        headers.insert("cache-control", HeaderValue::from_static("max-age=60"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        Head {
            key: "http://example.com/a?b".into(),
            vary: VaryNames(vec![HeaderName::from_static("accept-encoding")]),
            status: StatusCode::OK,
            headers,
            times: StoredTimes {
                request_time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                response_time: UNIX_EPOCH + Duration::from_millis(1_700_000_000_456),
                date: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                age_value: Some(7),
                lifetime: Duration::from_millis(1500),
            },
            lifetime_source: LifetimeSource::MaxAge,
            rules: StoredRules {
                no_cache: false,
                no_stale: true,
                stale_while_revalidate: Duration::from_secs(10),
                stale_if_error: Duration::ZERO,
            },
            parts: Vec::new(),
        }
    }

    #[test]
    fn head_round_trips() {
        let h = head();
        let d = Head::decode(&h.encode()).unwrap();
        assert_eq!(d.key, h.key);
        assert_eq!(d.vary, h.vary);
        assert_eq!(d.headers, h.headers);
        assert_eq!(d.times.request_time, h.times.request_time);
        assert_eq!(d.times.age_value, Some(7));
        assert_eq!(d.times.lifetime, h.times.lifetime);
        assert!(d.rules.no_stale && !d.rules.no_cache);
        assert_eq!(d.rules.stale_while_revalidate, Duration::from_secs(10));
        let enc = h.encode();
        for cut in [0, 1, 10, enc.len() - 1] {
            assert!(Head::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn parts_round_trip_and_lay_out_after_the_stored_bytes() {
        let mut h = head();
        let plain = h.encode();
        h.parts = vec![(Coding::Br, 10), (Coding::Gzip, 30)];
        let enc = h.encode();
        assert_eq!(Head::decode(&plain).unwrap().parts, vec![]);
        let d = Head::decode(&enc).unwrap();
        assert_eq!(d.parts, h.parts);
        let (stored, parts) = d.layout(100).unwrap();
        assert_eq!(stored, Span { start: 0, len: 60 });
        assert_eq!(parts[0], (Coding::Br, Span { start: 60, len: 10 }));
        assert_eq!(parts[1], (Coding::Gzip, Span { start: 70, len: 30 }));
        assert!(d.layout(39).is_none(), "parts longer than the body");
        for cut in [plain.len() + 1, enc.len() - 1] {
            assert!(Head::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = enc.clone();
        bad[plain.len() + 1] = 9;
        assert!(Head::decode(&bad).is_err(), "an unknown coding");
        let mut long = enc;
        long.push(0);
        assert!(Head::decode(&long).is_err(), "trailing bytes");
    }

    #[test]
    fn prefix_round_trips_and_rejects() {
        let p = Prefix {
            slot_len: slot_len_for(300),
            body_len: 200_000,
            serial: 42,
            primary: 0x1234_5678_9abc_def0_1122_3344_5566_7788,
            variant: 7,
        };
        assert_eq!(p.data_offset() % 4096, 0);
        let b = p.encode();
        assert_eq!(Prefix::decode(&b), Ok(p));
        let mut bad = b;
        bad[20] ^= 1;
        assert_eq!(Prefix::decode(&bad), Err(Reject::BadPrefix));
        let mut v2 = b;
        v2[8] = 3;
        assert_eq!(Prefix::decode(&v2), Err(Reject::Version));
        assert_eq!(Prefix::decode(&b[..10]), Err(Reject::Truncated));
        assert_eq!(p.file_len(), p.data_offset() + 200_000 + 4 * 8 + 8);
    }

    #[test]
    fn newest_intact_slot_wins() {
        let s = slot_len_for(100);
        let mut area = vec![0u8; 2 * s as usize];
        let a = encode_slot(9, 1, b"old head", s).unwrap();
        area[..a.len()].copy_from_slice(&a);
        assert_eq!(pick_slot(&area, s, 9).unwrap().head, b"old head");
        let b = encode_slot(9, 2, b"new head", s).unwrap();
        area[s as usize..s as usize + b.len()].copy_from_slice(&b);
        let got = pick_slot(&area, s, 9).unwrap();
        assert_eq!((got.head, got.index), (&b"new head"[..], 1));
        // A torn write of slot B leaves slot A.
        area[s as usize + 30] ^= 0xff;
        assert_eq!(pick_slot(&area, s, 9).unwrap().head, b"old head");
        area[30] ^= 0xff;
        assert_eq!(pick_slot(&area, s, 9), Err(Reject::BadHead));
        assert!(encode_slot(9, 1, &vec![0; s as usize], s).is_none());
    }

    #[test]
    fn a_slot_of_another_file_write_is_never_picked() {
        // A recycled file: slot B still holds the previous object's head,
        // refreshed by a 304 to generation 2; the new object (serial 8)
        // writes slot A with generation 1.
        let s = slot_len_for(100);
        let mut area = vec![0u8; 2 * s as usize];
        let old = encode_slot(7, 2, b"previous object", s).unwrap();
        area[s as usize..s as usize + old.len()].copy_from_slice(&old);
        let new = encode_slot(8, 1, b"new object", s).unwrap();
        area[..new.len()].copy_from_slice(&new);
        let got = pick_slot(&area, s, 8).unwrap();
        assert_eq!(
            (got.head, got.index, got.generation),
            (&b"new object"[..], 0, 1)
        );
        // Read as the previous write, only its own slot is valid.
        assert_eq!(pick_slot(&area, s, 7).unwrap().head, b"previous object");
        // A slot copied into a file of another write is no slot at all.
        let mut copied = vec![0u8; 2 * s as usize];
        copied[..old.len()].copy_from_slice(&old);
        assert_eq!(pick_slot(&copied, s, 8), Err(Reject::BadHead));
    }

    #[test]
    fn block_sums_do_not_depend_on_chunking() {
        let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut one = BlockSums::default();
        one.update(&body);
        let mut many = BlockSums::default();
        for c in body.chunks(7_777) {
            many.update(c);
        }
        let (t1, t2) = (one.finish(), many.finish());
        assert_eq!(t1, t2);
        let sums = decode_table(&t1, 4).unwrap();
        assert_eq!(sums.len(), 4);
        check_block(&body[..BLOCK as usize], sums[0]).unwrap();
        check_block(&body[3 * BLOCK as usize..], sums[3]).unwrap();
        assert_eq!(
            check_block(&body[1..=BLOCK as usize], sums[0]),
            Err(Reject::Checksum)
        );
        let mut bad = t1.clone();
        bad[3] ^= 1;
        assert_eq!(decode_table(&bad, 4), Err(Reject::Checksum));
        assert_eq!(decode_table(&t1[..8], 4), Err(Reject::Truncated));
    }
}
