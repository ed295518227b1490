//! An assembled page in the coding its client accepts, compressed as it
//! streams (each chunk flushed, so nothing waits for the page's end).
//!
//! A stored page cannot carry its codings as other objects do (see
//! `crate::encode`): its bytes differ per request. Fast levels (brotli 4,
//! zstd 3, gzip 5) keep the cost per request low.

use std::io::Write;

use bytes::Bytes;
use hoard_origin::error::BoxError;
use hoard_policy::encoding::Coding;
use http_body::{Body, Frame, SizeHint};

use super::assemble::EsiBody;

enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    fn new(c: Coding) -> Option<Encoder> {
        Some(match c {
            Coding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(5),
            )),
            Coding::Br => Encoder::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                4,
                22,
            ))),
            Coding::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), 3).ok()?),
            Coding::Identity => return None,
        })
    }

    /// `data` in, flushed: the bytes that came out.
    fn push(&mut self, data: &[u8]) -> std::io::Result<Bytes> {
        let out = match self {
            Encoder::Gzip(e) => {
                e.write_all(data)?;
                e.flush()?;
                std::mem::take(e.get_mut())
            }
            Encoder::Br(e) => {
                e.write_all(data)?;
                e.flush()?;
                std::mem::take(e.get_mut())
            }
            Encoder::Zstd(e) => {
                e.write_all(data)?;
                e.flush()?;
                std::mem::take(e.get_mut())
            }
        };
        Ok(Bytes::from(out))
    }

    fn finish(self) -> std::io::Result<Bytes> {
        Ok(Bytes::from(match self {
            Encoder::Gzip(e) => e.finish()?,
            Encoder::Br(e) => e.into_inner(),
            Encoder::Zstd(e) => e.finish()?,
        }))
    }
}

/// See the module docs.
pub struct CompressedBody {
    inner: EsiBody,
    enc: Option<Encoder>,
}

impl std::fmt::Debug for CompressedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompressedBody").finish_non_exhaustive()
    }
}

impl CompressedBody {
    /// `inner` in coding `c`; `inner` back for identity (or a coder that
    /// would not start).
    pub fn new(inner: EsiBody, c: Coding) -> Result<CompressedBody, Box<EsiBody>> {
        match Encoder::new(c) {
            Some(enc) => Ok(CompressedBody {
                inner,
                enc: Some(enc),
            }),
            None => Err(Box::new(inner)),
        }
    }
}

impl Body for CompressedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        loop {
            if self.enc.is_none() {
                return Poll::Ready(None);
            }
            match std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let enc = self.enc.as_mut().expect("checked above");
                    let out = enc.push(&data)?;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Some(Err(e)) => {
                    self.enc = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    let enc = self.enc.take().expect("checked above");
                    let out = enc.finish()?;
                    return Poll::Ready((!out.is_empty()).then(|| Ok(Frame::data(out))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.enc.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
