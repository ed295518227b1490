//! The body of a sliced response: the parts of the whole object its ranges
//! cover (and multipart framing), sent slice by slice (see `super::slice`).
//!
//! ## Lifecycle
//!
//! The body holds a queue of [`Part`]s: framing bytes and `Sliced(start,
//! end)` spans of the whole object. A span is cut at slice boundaries; for
//! each piece the body opens its slice (the one the handler already opened,
//! or `SliceCtx::open` as a future it polls), checks the slice's head
//! against the object's `Validator` before sending any of its bytes, and
//! sends the piece from it: stored chunks, disk blocks or the fill as it
//! arrives. A short piece (a seek probe) that starts far past what its
//! slice's fill has received is fetched from the origin on its own instead,
//! uncached, so it never waits for the fill to get there; the fill goes on
//! and serves the requests that come after. Opening a slice to send it through to its end starts the
//! prefetch of the next ones (a short range inside one slice does not). A body
//! that is dropped unpolled (HEAD, 304, 416) opens nothing.
//!
//! `ProxyBody::Sliced` holds a `SliceBody` as a `crate::body::SlicedBody`
//! (so `crate::body` names nothing of the pipeline); the `SliceBody` opens
//! each slice through the handler's `SliceCtx` and cuts that slice's
//! `ProxyBody` with `range::partial`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_policy::range::ByteRange;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::range::partial;
use super::slice::{SliceCtx, SliceSource, Validator};
use crate::body::{Part, ProxyBody, SlicedBody};
use hoard_origin::error::{BoxError, ProxyError};

type Opening = Pin<Box<dyn Future<Output = Result<SliceSource, ProxyError>> + Send>>;

/// A piece of one slice being sent: `skip` bytes of `body` are dropped,
/// then `left` are sent (a body that ends early, or sends more, is an error).
struct Piece {
    body: ProxyBody,
    skip: u64,
    left: u64,
}

/// How far ahead of a fill a piece may start and still wait for it.
fn ahead_limit(size: u64) -> u64 {
    (size / 4).min(64 << 10)
}

/// What a piece will be sent from once opened.
enum Next {
    Piece(Piece),
    /// Fetch these bytes of the object straight from the origin.
    Direct(ByteRange),
}

/// See the module docs.
pub struct SliceBody {
    cx: Arc<SliceCtx>,
    validator: Validator,
    parts: VecDeque<Part>,
    /// The slice the handler opened, until its piece is sent.
    ready: Option<(u64, SliceSource)>,
    /// The slice being opened (or, when `direct`, the piece being fetched
    /// alone), and the piece of it to send.
    opening: Option<(u64, ByteRange, Opening, bool)>,
    cur: Option<Piece>,
    /// Bytes left to send.
    remaining: u64,
    /// The first slice came from the cache.
    first_hit: bool,
}

impl std::fmt::Debug for SliceBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceBody")
            .field("total", &self.validator.total)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

impl SliceBody {
    /// The whole object, with slice `idx` already open.
    pub(crate) fn new(
        cx: Arc<SliceCtx>,
        validator: Validator,
        idx: u64,
        src: SliceSource,
    ) -> SliceBody {
        let total = validator.total;
        SliceBody {
            cx,
            validator,
            parts: VecDeque::from([Part::Sliced(0, total)]),
            first_hit: src.stored.is_some(),
            ready: Some((idx, src)),
            opening: None,
            cur: None,
            remaining: total,
        }
    }

    /// The piece `r` (within the slice) of slice `idx` from the direct
    /// fetch `src`.
    fn direct_piece(&self, idx: u64, r: ByteRange, src: SliceSource) -> Result<Piece, BoxError> {
        let slice = self.validator.slice_range(idx, self.cx.size);
        let abs = ByteRange {
            start: slice.start + r.start,
            end: slice.start + r.end,
        };
        if !self.validator.matches_part(abs, &src) {
            if src.status == http::StatusCode::PARTIAL_CONTENT {
                self.cx.heal(self.validator.total, idx);
            }
            return Err(format!(
                "bytes {}-{}: the origin answered {} with other fields than the first slice; \
                 response aborted",
                abs.start,
                abs.end - 1,
                src.status
            )
            .into());
        }
        Ok(Piece {
            body: src.body,
            skip: 0,
            left: r.len(),
        })
    }

    /// The piece `r` (within the slice) of slice `idx`, once its head
    /// matches the object's; or, for a short piece far ahead of the
    /// slice's fill, the bytes to fetch alone.
    fn piece(&self, idx: u64, r: ByteRange, src: SliceSource) -> Result<Next, BoxError> {
        let size = self.cx.size;
        if self.validator.changed(idx, size, &src) {
            self.cx.heal(self.validator.total, idx);
            return Err(format!(
                "slice {idx} changed at the origin (length or validators differ from the \
                 first slice); response aborted, slices dropped"
            )
            .into());
        }
        if !self.validator.matches(idx, size, &src) {
            // An error (5xx, 404) or an answer that is not this slice: the
            // stored slices stay.
            return Err(format!(
                "slice {idx}: the origin answered {} instead; response aborted",
                src.status
            )
            .into());
        }
        let slice = self.validator.slice_range(idx, size);
        if let ProxyBody::Busy(reader) = &src.body {
            // A piece at most `slice_direct_max` long that starts more than
            // `ahead_limit` past what the fill has received is fetched
            // alone: a seek probe does not wait for the fill to get there.
            if r.len() <= self.cx.direct_max() && reader.filled() + ahead_limit(size) < r.start {
                return Ok(Next::Direct(ByteRange {
                    start: slice.start + r.start,
                    end: slice.start + r.end,
                }));
            }
        }
        Ok(Next::Piece(
            match partial(src.body, &[r], slice.len(), 0, &mut HeaderMap::new()) {
                Ok(body) => Piece {
                    body,
                    skip: 0,
                    left: r.len(),
                },
                // Streamed from the origin (not stored): skip to the piece.
                Err(body) => Piece {
                    body,
                    skip: r.start,
                    left: r.len(),
                },
            },
        ))
    }

    /// Goes on with what [`Self::piece`] found.
    fn next(&mut self, idx: u64, r: ByteRange, next: Next) {
        match next {
            Next::Piece(p) => self.cur = Some(p),
            Next::Direct(abs) => {
                let c = self.cx.clone();
                self.opening = Some((idx, r, Box::pin(c.direct(abs)), true));
            }
        }
    }
}

impl SlicedBody for SliceBody {
    fn first_hit(&self) -> bool {
        self.first_hit
    }

    /// The whole object's length.
    fn total(&self) -> u64 {
        self.validator.total
    }

    /// Sends `parts` (framing and `Sliced` spans) instead of the whole object.
    fn set_parts(&mut self, parts: VecDeque<Part>) {
        self.remaining = parts.iter().map(Part::remaining).sum();
        self.parts = parts;
    }
}

impl Body for SliceBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let me = self.get_mut();
        loop {
            if let Some(p) = &mut me.cur {
                if p.left == 0 {
                    me.cur = None;
                    continue;
                }
                match ready!(Pin::new(&mut p.body).poll_frame(cx)) {
                    None => return Poll::Ready(Some(Err("slice ended before its bytes".into()))),
                    Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                    Some(Ok(frame)) => {
                        let Ok(mut data) = frame.into_data() else {
                            continue;
                        };
                        let skip = p.skip.min(data.len() as u64);
                        p.skip -= skip;
                        let _ = data.split_to(skip as usize);
                        if data.is_empty() {
                            continue;
                        }
                        // A body streamed from the origin goes on past the
                        // piece: cut it there.
                        if data.len() as u64 > p.left {
                            data.truncate(p.left as usize);
                        }
                        p.left -= data.len() as u64;
                        me.remaining -= data.len() as u64;
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            if let Some((idx, r, fut, direct)) = &mut me.opening {
                let opened = ready!(fut.as_mut().poll(cx));
                let (idx, r, direct) = (*idx, *r, *direct);
                me.opening = None;
                let next = opened.map_err(|e| Box::new(e) as BoxError).and_then(|src| {
                    if direct {
                        me.direct_piece(idx, r, src).map(Next::Piece)
                    } else {
                        me.piece(idx, r, src)
                    }
                });
                match next {
                    Ok(n) => me.next(idx, r, n),
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
                continue;
            }
            match me.parts.pop_front() {
                None => return Poll::Ready(None),
                Some(Part::Bytes(b)) => {
                    me.remaining -= b.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Some(Part::Sliced(start, end)) => {
                    if start >= end {
                        continue;
                    }
                    let size = me.cx.size;
                    let idx = start / size;
                    let slice = me.validator.slice_range(idx, size);
                    let to = end.min(slice.end);
                    if to < end {
                        me.parts.push_front(Part::Sliced(to, end));
                    }
                    let r = ByteRange {
                        start: start - slice.start,
                        end: to - slice.start,
                    };
                    // Read through to the slice's end (a full GET, an open
                    // range, playback): the next slices will be wanted.
                    if to == slice.end {
                        me.cx.prefetch(idx, me.validator.total);
                    }
                    match me.ready.take() {
                        Some((i, src)) if i == idx => match me.piece(idx, r, src) {
                            Ok(n) => me.next(idx, r, n),
                            Err(e) => return Poll::Ready(Some(Err(e))),
                        },
                        other => {
                            // Keep a slice opened for a later range.
                            me.ready = other.filter(|(i, _)| *i > idx);
                            let c = me.cx.clone();
                            me.opening =
                                Some((idx, r, Box::pin(async move { c.open(idx).await }), false));
                        }
                    }
                }
                Some(Part::File(_) | Part::Fill(..)) => {
                    return Poll::Ready(Some(Err(
                        "invariant: no file or fill parts in a sliced body".into(),
                    )))
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
