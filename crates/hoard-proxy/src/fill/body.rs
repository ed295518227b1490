//! Reading the origin body of a fill: into the busy body (readers stream
//! it), through to a disk writer (with spilling), and what a body that
//! outgrows the largest object does.

use bytes::Bytes;
use hoard_store::busy::{BusyWriter, FillError};
use hoard_store::disk::writer::DiskWriter;
use http_body_util::BodyExt;

use super::coalesce::FillPermit;
use hoard_origin::OriginBodyError;

/// How a body read ended.
#[derive(Debug)]
pub(super) enum BodyEnd {
    /// Complete and storable. With a declared length, the last chunk is
    /// held back from readers: it goes out once the object is stored, so no
    /// client can finish reading before a next request would find it.
    Complete(Option<Bytes>),
    /// Complete but too large to store (history released and the slot left
    /// the table as soon as that was known).
    TooLarge,
}

/// Reads the origin body into the busy body (and the disk writer), after
/// `prefix` (a stored partial copy and its length, when the origin's body
/// is its rest).
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_body(
    mut prefix: Option<(crate::body::ProxyBody, u64)>,
    mut body: impl http_body::Body<Data = Bytes, Error = OriginBodyError> + Unpin,
    writer: &BusyWriter,
    disk: &mut Option<DiskWriter>,
    content_length: Option<u64>,
    max_object: u64,
    stall_timeout: std::time::Duration,
    permit: &mut FillPermit,
) -> Result<BodyEnd, FillError> {
    /// Unread bytes a pass-through fill may get ahead of its fastest reader.
    const WINDOW: u64 = 1 << 20;
    /// How far behind a reader may fall before it is cut off.
    const LAG_LIMIT: u64 = 8 << 20;
    /// The tail of a disk-backed fill kept in memory for readers near the end.
    const SPILL_TAIL: u64 = 1 << 20;
    let mut keep = true;
    let mut held = None;
    loop {
        if !keep {
            match tokio::time::timeout(stall_timeout, writer.room(WINDOW)).await {
                Ok(true) => {}
                // Too large to store and nobody reading: stop fetching it.
                Ok(false) => return Ok(BodyEnd::TooLarge),
                Err(_) => return Err(FillError::ReadersStalled),
            }
        }
        let data = match &mut prefix {
            Some((copy, have)) => match copy.frame().await {
                Some(Ok(f)) => match f.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    _ => continue,
                },
                Some(Err(_)) => return Err(FillError::SpillRead),
                None if writer.len() != *have => return Err(FillError::SpillRead),
                None => {
                    prefix = None;
                    continue;
                }
            },
            None => {
                let Some(frame) = body.frame().await else {
                    break;
                };
                match frame {
                    Ok(f) => match f.into_data() {
                        Ok(data) if !data.is_empty() => data,
                        _ => continue,
                    },
                    Err(OriginBodyError::Timeout) => return Err(FillError::OriginTimeout),
                    Err(OriginBodyError::Aborted(_)) => return Err(FillError::OriginAborted),
                }
            }
        };
        // Once a chunk is held, every later one is past the declared length
        // too (a joined partial copy whose rest is longer than announced):
        // the one held before goes out first, so no byte is dropped or
        // reordered; the body is then longer than declared and the end of
        // the fill refuses to store it.
        let last = keep
            && (held.is_some()
                || content_length.is_some_and(|cl| writer.len() + data.len() as u64 >= cl));
        if last {
            if let Some(h) = held.replace(data.clone()) {
                writer.append(h);
            }
        } else {
            writer.append(data.clone());
        }
        if keep && writer.len() > max_object {
            keep = false;
            *disk = None;
            permit.done();
            writer.release_history(LAG_LIMIT);
        }
        if let Some(d) = disk {
            let before = d.durable();
            // A disk that stalls as long as the origin may costs the disk
            // copy, never the clients.
            match tokio::time::timeout(stall_timeout, d.write(data)).await {
                // Written bytes leave memory; late readers read them back.
                Ok(Ok(())) if d.durable() > before => {
                    writer.spill(&d.spill_source(), d.durable(), SPILL_TAIL);
                }
                Ok(Ok(())) => {}
                Ok(Err(why)) => {
                    tracing::info!(why = why.as_str(), "disk copy given up; the fill goes on");
                    *disk = None;
                }
                Err(_) => {
                    tracing::warn!("disk write stalled; the fill goes on without a disk copy");
                    *disk = None;
                }
            }
        }
    }
    Ok(if keep {
        BodyEnd::Complete(held)
    } else {
        if let Some(h) = held {
            writer.append(h);
        }
        BodyEnd::TooLarge
    })
}

/// Copies the body into buffers of its own, up to 1 MiB each: a hit then
/// writes few, large buffers, and the store's byte count is the memory held
/// (a chunk read from the network may be a slice of a larger buffer).
pub(super) fn compact(chunks: Vec<Bytes>) -> Vec<Bytes> {
    const TARGET: usize = 1 << 20;
    let mut remaining: usize = chunks.iter().map(Bytes::len).sum();
    let mut out = Vec::with_capacity(remaining.div_ceil(TARGET));
    let mut cur = bytes::BytesMut::with_capacity(remaining.min(TARGET));
    for c in chunks {
        let mut c = &c[..];
        while !c.is_empty() {
            let take = c.len().min(cur.capacity() - cur.len());
            cur.extend_from_slice(&c[..take]);
            c = &c[take..];
            remaining -= take;
            if cur.len() == cur.capacity() {
                out.push(
                    std::mem::replace(
                        &mut cur,
                        bytes::BytesMut::with_capacity(remaining.min(TARGET)),
                    )
                    .freeze(),
                );
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_makes_exact_buffers_of_at_most_one_mib() {
        let chunks: Vec<Bytes> = (0..300u32)
            .map(|i| Bytes::from(vec![(i % 251) as u8; 10_000]))
            .collect();
        let want: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let out = compact(chunks);
        assert_eq!(
            out.iter().map(Bytes::len).collect::<Vec<_>>(),
            vec![1 << 20, 1 << 20, 3_000_000 - 2 * (1 << 20)]
        );
        assert_eq!(out.concat(), want);
        assert!(compact(Vec::new()).is_empty());
        assert_eq!(
            compact(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"c")]),
            vec![Bytes::from_static(b"abc")]
        );
    }
}
