//! Content codings made once per stored object, never per request.
//!
//! ## Model
//!
//! On a route with `encodings` (default br, zstd, gzip), a fill asks the
//! origin for `Accept-Encoding: identity` (the client's field is kept for
//! negotiation, see `pipeline::prepare`): every client is served from one
//! fetch, and the variant key no longer depends on what each browser sends.
//! When the response is complete and worth it ([`plan`]: 200, a
//! compressible type, at least `compress_min_size`, no `no-transform`, a
//! coding hoard knows), the fill task makes the other codings on a
//! blocking thread ([`make_parts`]) before it stores the object: the parts
//! are stored with it (one purge, one eviction, one byte account). The
//! clients of the fill meanwhile stream what the origin sent. An origin that
//! sends gzip anyway has its body decoded once (bounded: a decompression
//! bomb or a corrupt body is not stored) into the identity part.
//!
//! Hits choose with `hoard_policy::encoding::Accept::choose` among the
//! stored body and its parts ([`Chosen`]); a `Range` request gets the
//! identity bytes (RFC 9110 §14: ranges apply to the representation sent,
//! and the identity one is what partial copies and slices hold).
//!
//! ## Threads
//!
//! Parts of identity bodies are made by one background thread at a lower
//! scheduling priority (nice +10, [`in_background`]): compressing never
//! competes on equal terms with the threads that serve connections, and a
//! burst of new objects queues (at most [`QUEUE`] waiting; past that an
//! object is stored without parts and counted) instead of taking every
//! core. Decoding a coded body before it is stored runs on the runtime's
//! blocking pool (rare: the origin ignored `Accept-Encoding: identity`).
//!
//! ## Locking
//!
//! None: parts are put in by replacing the stored object when it is still
//! the same one (`MemoryStore::update`).

use std::io::{Read, Write};
use tokio::time::Instant;

use bytes::Bytes;
use hoard_policy::encoding::{compressible, content_coding, Coding};
use hoard_store::object::Part;
use http::header::{HeaderMap, HeaderValue, CACHE_CONTROL, ETAG, VARY};
use http::StatusCode;

use hoard_config::RouteConfig;

/// Bodies up to this size get the highest levels (compressed once, the
/// time is spent once); larger ones fast levels of nearly the same ratio
/// (docs/encodings.md has the measurements).
pub const HIGH_LEVEL_MAX: usize = 1 << 20;

/// The level of coding `c` for a body of `len` bytes: brotli 11 / 5,
/// zstd 19 / 3, gzip 9 / 6.
pub fn level(c: Coding, len: usize) -> i32 {
    let high = len <= HIGH_LEVEL_MAX;
    match (c, high) {
        (Coding::Br, true) => 11,
        (Coding::Br, false) => 5,
        (Coding::Zstd, true) => 19,
        (Coding::Zstd, false) => 3,
        (Coding::Gzip, true) => 9,
        (Coding::Gzip, false) => 6,
        (Coding::Identity, _) => 0,
    }
}
/// Decoding stops past this many times the route's object size limit.
pub const DECODE_BOUND: u64 = 4;

/// Objects waiting for the encoding thread, at most.
pub const QUEUE: usize = 256;

type Job = Box<dyn FnOnce() + Send>;

/// Runs `f` on the encoding thread (see the module docs); `None` when its
/// queue is full.
pub async fn in_background<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    static WORKER: std::sync::OnceLock<std::sync::mpsc::SyncSender<Job>> =
        std::sync::OnceLock::new();
    let tx = WORKER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("hoard-encode".into())
            .spawn(move || {
                // Best effort: without the right to, it runs at the default.
                let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10);
                for job in rx {
                    job();
                }
            })
            .expect("invariant: a thread can be started at start-up");
        tx
    });
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(f());
    });
    tx.try_send(job).ok()?;
    result.await.ok()
}

/// What to make of a response about to be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The coding of the body as the origin sent it.
    pub stored: Coding,
    /// The codings to make (never `stored`).
    pub make: Vec<Coding>,
    /// Most bytes a decoded body may have.
    pub decode_limit: u64,
}

/// The codings worth making for a response of `status` with `headers` and
/// a body of `len` bytes on `route`; `None` when it is left as it is.
pub fn plan(
    route: &RouteConfig,
    max_object: u64,
    status: StatusCode,
    headers: &HeaderMap,
    len: u64,
) -> Option<Plan> {
    if route.encodings.is_empty()
        || status != StatusCode::OK
        || no_transform(headers)
        || !compressible(headers, &route.compress_types)
    {
        return None;
    }
    let stored = content_coding(headers)?;
    // A coded body is decoded whatever its size: identity clients need it.
    if stored == Coding::Identity && len < route.compress_min_size {
        return None;
    }
    let mut make: Vec<Coding> = route
        .encodings
        .iter()
        .copied()
        .filter(|c| *c != stored)
        .collect();
    if stored != Coding::Identity {
        make.insert(0, Coding::Identity);
    }
    Some(Plan {
        stored,
        make,
        decode_limit: max_object.saturating_mul(DECODE_BOUND),
    })
}

/// True when `Cache-Control` says `no-transform` (RFC 9111 §5.2.2.6).
pub fn no_transform(headers: &HeaderMap) -> bool {
    headers
        .get_all(CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
}

/// Why parts could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The origin's coded body does not decode (corrupt or truncated).
    Corrupt(String),
    /// Decoding passed the limit (a decompression bomb).
    TooLarge(u64),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::Corrupt(e) => write!(f, "origin body does not decode: {e}"),
            EncodeError::TooLarge(n) => write!(f, "origin body decodes past {n} bytes"),
        }
    }
}

/// What making the parts took.
#[derive(Debug, Clone, Default)]
pub struct Made {
    /// The parts.
    pub parts: Vec<Part>,
    /// Per part: bytes in (identity) and out, and the time it took.
    pub stats: Vec<(Coding, u64, u64, std::time::Duration)>,
}

/// Makes the parts of `plan` from the stored body (`chunks`). Blocking:
/// run it on a blocking thread.
///
/// # Errors
/// When the stored body is coded and does not decode within the limit.
pub fn make_parts(chunks: &[Bytes], plan: &Plan) -> Result<Made, EncodeError> {
    let stored: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let identity = match plan.stored {
        Coding::Identity => Bytes::from(stored),
        c => Bytes::from(decode(c, &stored, plan.decode_limit)?),
    };
    let mut made = Made::default();
    for &c in &plan.make {
        let started = Instant::now();
        let body = if c == Coding::Identity {
            identity.clone()
        } else {
            Bytes::from(encode(c, &identity))
        };
        made.stats.push((
            c,
            identity.len() as u64,
            body.len() as u64,
            started.elapsed(),
        ));
        made.parts.push(Part::in_memory(c, body));
    }
    Ok(made)
}

/// `data` in coding `c`.
pub fn encode(c: Coding, data: &[u8]) -> Vec<u8> {
    match c {
        Coding::Identity => data.to_vec(),
        Coding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 3),
                flate2::Compression::new(level(c, data.len()) as u32),
            );
            e.write_all(data)
                .and_then(|()| e.finish())
                .expect("invariant: writing to a Vec does not fail")
        }
        Coding::Br => {
            let mut out = Vec::with_capacity(data.len() / 3);
            let params = brotli::enc::BrotliEncoderParams {
                quality: level(c, data.len()),
                lgwin: 22,
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &data[..], &mut out, &params)
                .expect("invariant: writing to a Vec does not fail");
            out
        }
        Coding::Zstd => zstd::bulk::compress(data, level(c, data.len()))
            .expect("invariant: compressing into a Vec does not fail"),
    }
}

/// `data` in coding `c`, decoded; at most `limit` bytes.
///
/// # Errors
/// Corrupt or truncated input, or more than `limit` bytes.
pub fn decode(c: Coding, data: &[u8], limit: u64) -> Result<Vec<u8>, EncodeError> {
    let reader: Box<dyn Read + '_> = match c {
        Coding::Identity => return Ok(data.to_vec()),
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(data)),
        Coding::Br => Box::new(brotli::Decompressor::new(data, 64 << 10)),
        Coding::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(data)
                .map_err(|e| EncodeError::Corrupt(e.to_string()))?,
        ),
    };
    let mut out = Vec::new();
    reader
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| EncodeError::Corrupt(e.to_string()))?;
    if out.len() as u64 > limit {
        return Err(EncodeError::TooLarge(limit));
    }
    Ok(out)
}

/// The representation a hit sends, when it is not the stored body.
#[derive(Debug)]
pub struct Chosen {
    /// Its coding.
    pub coding: Coding,
    /// Its bytes.
    pub body: hoard_store::object::ObjectBody,
}

/// The ETag of the representation in `coding`: the stored one with the
/// coding's name appended inside the quotes (`"abc"` → `"abc-br"`,
/// `W/"abc"` → `W/"abc-br"`), so that a conditional request or an
/// `If-Range` naming one representation never matches another.
pub fn coded_etag(etag: &HeaderValue, coding: Coding) -> Option<HeaderValue> {
    let s = etag.to_str().ok()?;
    let (weak, rest) = match s.strip_prefix("W/") {
        Some(r) => ("W/", r),
        None => ("", s),
    };
    let inner = rest.strip_prefix('"')?.strip_suffix('"')?;
    HeaderValue::from_str(&format!("{weak}\"{inner}-{}\"", coding.as_str())).ok()
}

/// Adds `Accept-Encoding` to `Vary` (once).
pub fn vary_on_accept_encoding(headers: &mut HeaderMap) {
    let has = headers
        .get_all(VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.eq_ignore_ascii_case("accept-encoding")
        });
    if !has {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// Rewrites a stored response's fields for the representation in
/// `coding` of `len` bytes (the stored body being in `stored`).
pub fn recode_headers(headers: &mut HeaderMap, stored: Coding, coding: Coding, len: u64) {
    use http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
    headers.remove(CONTENT_ENCODING);
    if coding != Coding::Identity {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.as_str()));
    }
    headers.insert(CONTENT_LENGTH, HeaderValue::from(len));
    if coding != stored {
        if let Some(e) = headers.get(ETAG).and_then(|e| coded_etag(e, coding)) {
            headers.insert(ETAG, e);
        }
    }
    vary_on_accept_encoding(headers);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coding_round_trips() {
        let text = "<p>hoard</p>\n".repeat(500);
        for c in [Coding::Br, Coding::Zstd, Coding::Gzip] {
            let coded = encode(c, text.as_bytes());
            assert!(coded.len() < text.len() / 10, "{c:?}: {}", coded.len());
            assert_eq!(decode(c, &coded, 1 << 20).unwrap(), text.as_bytes());
        }
    }

    #[test]
    fn bombs_and_corrupt_bodies_are_refused() {
        let zeros = vec![0u8; 1 << 20];
        let bomb = encode(Coding::Gzip, &zeros);
        assert_eq!(
            decode(Coding::Gzip, &bomb, 64 << 10),
            Err(EncodeError::TooLarge(64 << 10))
        );
        let mut cut = encode(Coding::Gzip, b"some text that is long enough to matter");
        cut.truncate(cut.len() / 2);
        assert!(matches!(
            decode(Coding::Gzip, &cut, 1 << 20),
            Err(EncodeError::Corrupt(_))
        ));
        assert!(matches!(
            decode(Coding::Br, b"not brotli at all", 1 << 20),
            Err(EncodeError::Corrupt(_))
        ));
    }

    #[test]
    fn etags_name_their_coding() {
        let strong = HeaderValue::from_static("\"v1\"");
        assert_eq!(coded_etag(&strong, Coding::Br).unwrap(), "\"v1-br\"");
        let weak = HeaderValue::from_static("W/\"v1\"");
        assert_eq!(coded_etag(&weak, Coding::Gzip).unwrap(), "W/\"v1-gzip\"");
        assert!(coded_etag(&HeaderValue::from_static("v1"), Coding::Br).is_none());
    }
}
