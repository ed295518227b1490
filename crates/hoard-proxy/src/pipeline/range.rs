//! Answering `Range` requests from a full response: a stored object (memory
//! or disk) or a fill in progress (RFC 9110 §14).
//!
//! [`hoard_policy::range::decide`] says what to send; this turns the body
//! into those bytes without copying them: slices of stored chunks, readers
//! over only the blocks of a disk file that the ranges cover, or a reader of
//! the fill that skips to the range and sends its bytes as they arrive
//! (never waiting for the rest of the fill). Several ranges become
//! `multipart/byteranges` (§14.6); a fill in progress answers one range
//! only (several get the whole response, which §14.2 allows).

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;

use bytes::Bytes;
use hoard_policy::range::{decide, ByteRange, RangeDecision};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use super::{Ctx, Pipeline};
use crate::body::{Part, ProxyBody};

impl Pipeline {
    /// The response to a GET from a full `status` response with `headers`
    /// and `body`, honouring the request's `Range`: the whole response
    /// (with `Accept-Ranges: bytes` when ranges could be served), 206 or 416.
    pub(crate) fn ranged(
        &self,
        ctx: &Ctx<'_>,
        status: StatusCode,
        mut headers: HeaderMap,
        body: ProxyBody,
    ) -> Response<ProxyBody> {
        let len = full_len(&body, &headers);
        if status == StatusCode::OK && len.is_some() && !headers.contains_key(header::ACCEPT_RANGES)
        {
            headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        }
        // A 206 (a forwarded range, relayed) is already the answer to it.
        if !ctx.headers.contains_key(header::RANGE)
            || ctx.method != Method::GET
            || status == StatusCode::PARTIAL_CONTENT
        {
            return whole(status, headers, body);
        }
        let c = &self.counters;
        match decide(&ctx.method, &ctx.headers, status, &headers, len) {
            RangeDecision::Full => {
                c.inc(&c.range_ignored);
                whole(status, headers, body)
            }
            RangeDecision::Unsatisfiable => {
                c.inc(&c.range_not_satisfiable);
                let mut r = self.status_only(StatusCode::RANGE_NOT_SATISFIABLE);
                let total = len.expect("invariant: decide needs a length");
                r.headers_mut().insert(
                    header::CONTENT_RANGE,
                    HeaderValue::from_str(&format!("bytes */{total}"))
                        .expect("invariant: ASCII digits"),
                );
                r
            }
            RangeDecision::Partial(ranges) => {
                let total = len.expect("invariant: decide needs a length");
                let from_fill = match &body {
                    ProxyBody::Busy(_) => true,
                    ProxyBody::Sliced(b) => !b.first_hit(),
                    _ => false,
                };
                match partial(body, &ranges, total, 0, &mut headers) {
                    Ok(body) => {
                        c.inc(if from_fill {
                            &c.range_misses
                        } else {
                            &c.range_hits
                        });
                        let mut r = Response::new(body);
                        *r.status_mut() = StatusCode::PARTIAL_CONTENT;
                        *r.headers_mut() = headers;
                        r
                    }
                    Err(body) => {
                        c.inc(&c.range_ignored);
                        whole(status, headers, body)
                    }
                }
            }
        }
    }
}

fn whole(status: StatusCode, headers: HeaderMap, body: ProxyBody) -> Response<ProxyBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// The length of the whole body, if known now: stored bodies always, a
/// fill when the origin declared `Content-Length`.
fn full_len(body: &ProxyBody, headers: &HeaderMap) -> Option<u64> {
    match body {
        ProxyBody::Empty | ProxyBody::Full(None) => Some(0),
        ProxyBody::Full(Some(b)) => Some(b.len() as u64),
        ProxyBody::Stored { obj, .. } => Some(obj.body.len()),
        ProxyBody::File(r, _) => Some(r.remaining()),
        ProxyBody::Sliced(b) => Some(b.total()),
        ProxyBody::Busy(_) => headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
        ProxyBody::Origin(_)
        | ProxyBody::Parts { .. }
        | ProxyBody::BusyRange { .. }
        | ProxyBody::BusyParts(_)
        | ProxyBody::Decoded(_)
        | ProxyBody::Wrapped(_) => None,
    }
}

/// The 206 body for `ranges` of a `total`-byte object whose bytes from
/// `base` on are `body` (0 for a whole body; a stored partial copy starts
/// where its `Content-Range` does), and its fields in `headers`; gives the
/// body back when it cannot (a body streamed from the origin).
pub(crate) fn partial(
    body: ProxyBody,
    ranges: &[ByteRange],
    total: u64,
    base: u64,
    headers: &mut HeaderMap,
) -> Result<ProxyBody, ProxyBody> {
    let mut sliced = None;
    let mut fill = None;
    let (chunks, file, send) = match body {
        ProxyBody::Busy(mut reader) if ranges.len() == 1 => {
            let r = ranges[0];
            debug_assert_eq!(base, 0, "a fill is the whole body");
            reader.skip_to(r.start);
            single_fields(headers, r, total);
            return Ok(ProxyBody::BusyRange {
                reader,
                pos: 0,
                start: r.start,
                end: r.end,
            });
        }
        // Several ranges of a fill: multipart, each range as it arrives.
        ProxyBody::Busy(mut reader) => {
            reader.skip_to(ranges[0].start - base);
            fill = Some(reader);
            (Vec::new(), None, None)
        }
        ProxyBody::Empty | ProxyBody::Full(None) => (Vec::new(), None, None),
        ProxyBody::Full(Some(b)) => (vec![b], None, None),
        ProxyBody::Stored { obj, .. } => {
            (obj.body.chunks().unwrap_or_default().to_vec(), None, None)
        }
        ProxyBody::File(r, send) => (Vec::new(), Some(r), send),
        ProxyBody::Sliced(b) => {
            sliced = Some(b);
            (Vec::new(), None, None)
        }
        other => return Err(other),
    };
    let is_fill = fill.is_some();
    let data = |r: ByteRange, out: &mut VecDeque<Part>| {
        let r = ByteRange {
            start: r.start - base,
            end: r.end - base,
        };
        match (&file, &sliced) {
            (Some(f), _) => out.push_back(Part::File(f.range(r.start, r.end))),
            (None, Some(_)) => out.push_back(Part::Sliced(r.start, r.end)),
            (None, None) if is_fill => out.push_back(Part::Fill(r.start, r.end)),
            (None, None) => slices(&chunks, r, out),
        }
    };
    let mut parts = VecDeque::new();
    if let [r] = ranges {
        single_fields(headers, *r, total);
        data(*r, &mut parts);
    } else {
        let boundary = boundary();
        let part_type = headers.remove(header::CONTENT_TYPE);
        for r in ranges {
            let mut head = format!("\r\n--{boundary}\r\n");
            if let Some(t) = part_type.as_ref().and_then(|t| t.to_str().ok()) {
                head.push_str(&format!("Content-Type: {t}\r\n"));
            }
            head.push_str(&format!(
                "Content-Range: {}\r\n\r\n",
                r.content_range(total)
            ));
            parts.push_back(Part::Bytes(Bytes::from(head)));
            data(*r, &mut parts);
        }
        parts.push_back(Part::Bytes(Bytes::from(format!("\r\n--{boundary}--\r\n"))));
        let len: u64 = parts.iter().map(Part::remaining).sum();
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}"))
                .expect("invariant: ASCII"),
        );
    }
    Ok(match (sliced, fill) {
        (Some(mut b), _) => {
            b.set_parts(parts);
            ProxyBody::Sliced(b)
        }
        (None, Some(reader)) => ProxyBody::BusyParts(Box::new(crate::body::BusyParts {
            reader,
            parts,
            carry: None,
        })),
        (None, None) => ProxyBody::Parts { parts, send },
    })
}

/// `Content-Range` and `Content-Length` of a single-range 206.
fn single_fields(headers: &mut HeaderMap, r: ByteRange, total: u64) {
    headers.insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&r.content_range(total)).expect("invariant: ASCII digits"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(r.len()));
}

/// The slices of `chunks` (one body, in order) that `r` covers.
fn slices(chunks: &[Bytes], r: ByteRange, out: &mut VecDeque<Part>) {
    let mut at = 0u64;
    for c in chunks {
        let (from, to) = (at, at + c.len() as u64);
        at = to;
        if to <= r.start {
            continue;
        }
        if from >= r.end {
            break;
        }
        let a = r.start.saturating_sub(from) as usize;
        let b = (r.end.min(to) - from) as usize;
        out.push_back(Part::Bytes(c.slice(a..b)));
    }
}

/// A multipart boundary no body is likely to contain: 32 random hex digits.
fn boundary() -> String {
    let s = RandomState::new();
    format!("{:016x}{:016x}", s.hash_one(1u8), s.hash_one(2u8))
}
