//! Decoding a coded body as it streams, for the clients of a fill that do
//! not accept the coding the origin sent.
//!
//! ## Model
//!
//! Fills ask the origin for identity (see [`crate::encode`]); an origin
//! that sends gzip (or br, zstd) anyway has its body stored as sent and
//! decoded once, when stored, into an identity part that hits serve. The
//! clients that read the fill while it arrives (the one that started it and
//! the collapsed readers) get what a hit would give them: the origin's
//! bytes when they accept its coding, else the body decoded as it streams
//! ([`DecodedBody`]: a client that sent no `Accept-Encoding` gets identity,
//! as from a hit). The decoded response has no `Content-Length` (its
//! length is known only at the end) and the identity part's ETag.
//!
//! ## Bounds
//!
//! The input is fed in pieces of at most [`PIECE`] bytes, so one poll does
//! bounded work on the connection's thread, and the whole decoded body is
//! bounded as the stored copy's is (a decompression bomb ends the response
//! with an error, as a corrupt or truncated body does: never a body that
//! looks complete).

use std::io::Write;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_policy::encoding::{content_coding, Accept, Coding};
use http::header::{HeaderMap, CONTENT_ENCODING, CONTENT_LENGTH, ETAG};
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};

use crate::body::ProxyBody;
use crate::encode::EncodeError;
use hoard_config::RouteConfig;
use hoard_origin::error::BoxError;

/// Most coded bytes decoded in one poll.
pub const PIECE: usize = 16 << 10;

/// Where a decoder writes: the decoded bytes not yet sent, refusing to go
/// past the bound.
#[derive(Debug, Default)]
struct Sink {
    out: Vec<u8>,
    /// Decoded bytes still allowed.
    room: u64,
    /// The bound was passed.
    over: bool,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() as u64 > self.room {
            self.over = true;
            return Err(std::io::Error::other("decoded body past its bound"));
        }
        self.room -= data.len() as u64;
        self.out.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A push decoder of one coding.
enum Coder {
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    Br(Box<brotli::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
}

impl std::fmt::Debug for Coder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Coder::Gzip(_) => "Gzip",
            Coder::Br(_) => "Br",
            Coder::Zstd(_) => "Zstd",
        })
    }
}

/// Decodes one coded body, piece by piece.
#[derive(Debug)]
pub struct Decoder {
    coder: Coder,
    limit: u64,
}

impl Decoder {
    /// A decoder of `coding` whose output may not pass `limit` bytes;
    /// `None` for identity.
    pub fn new(coding: Coding, limit: u64) -> Option<Decoder> {
        let sink = Sink {
            room: limit,
            ..Sink::default()
        };
        let coder = match coding {
            Coding::Identity => return None,
            Coding::Gzip => Coder::Gzip(flate2::write::MultiGzDecoder::new(sink)),
            Coding::Br => Coder::Br(Box::new(brotli::DecompressorWriter::new(sink, 16 << 10))),
            Coding::Zstd => Coder::Zstd(zstd::stream::write::Decoder::new(sink).ok()?),
        };
        Some(Decoder { coder, limit })
    }

    fn sink(&mut self) -> &mut Sink {
        match &mut self.coder {
            Coder::Gzip(d) => d.get_mut(),
            Coder::Br(d) => d.get_mut(),
            Coder::Zstd(d) => d.get_mut(),
        }
    }

    /// The bytes decoded so far and not yet taken, or why decoding stopped.
    fn take(&mut self, r: std::io::Result<()>) -> Result<Bytes, EncodeError> {
        let limit = self.limit;
        let sink = self.sink();
        if sink.over {
            return Err(EncodeError::TooLarge(limit));
        }
        r.map_err(|e| EncodeError::Corrupt(e.to_string()))?;
        Ok(Bytes::from(std::mem::take(&mut sink.out)))
    }

    /// Decodes `input`; returns what it decoded to (maybe nothing yet).
    ///
    /// # Errors
    /// Corrupt input, or output past the limit.
    pub fn push(&mut self, input: &[u8]) -> Result<Bytes, EncodeError> {
        let r = match &mut self.coder {
            Coder::Gzip(d) => d.write_all(input).and_then(|()| d.flush()),
            Coder::Br(d) => d.write_all(input).and_then(|()| d.flush()),
            Coder::Zstd(d) => d.write_all(input).and_then(|()| d.flush()),
        };
        self.take(r)
    }

    /// The end of the coded body: the last decoded bytes.
    ///
    /// # Errors
    /// A truncated body (it stops inside a member or frame), or output past the limit.
    pub fn finish(&mut self) -> Result<Bytes, EncodeError> {
        let r = match &mut self.coder {
            Coder::Gzip(d) => d.try_finish(),
            Coder::Br(d) => d
                .close()
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Coder::Zstd(d) => d.do_finish(),
        };
        self.take(r)
    }
}

/// A body decoded as it streams. See the module docs.
#[derive(Debug)]
pub struct DecodedBody {
    inner: ProxyBody,
    decoder: Decoder,
    /// Coded bytes read and not yet decoded.
    pending: Bytes,
    done: bool,
}

impl DecodedBody {
    /// `inner`, decoded by `decoder`.
    pub fn new(inner: ProxyBody, decoder: Decoder) -> DecodedBody {
        DecodedBody {
            inner,
            decoder,
            pending: Bytes::new(),
            done: false,
        }
    }

    fn fail(&mut self, e: EncodeError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
        tracing::info!(error = %e, "decoding a fill for its client failed; response cut");
        Poll::Ready(Some(Err(e.to_string().into())))
    }
}

impl Body for DecodedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let me = self.get_mut();
        loop {
            if me.done {
                return Poll::Ready(None);
            }
            if !me.pending.is_empty() {
                let piece = me.pending.split_to(me.pending.len().min(PIECE));
                match me.decoder.push(&piece) {
                    Ok(out) if out.is_empty() => continue,
                    Ok(out) => return Poll::Ready(Some(Ok(Frame::data(out)))),
                    Err(e) => return me.fail(e),
                }
            }
            match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
                None => {
                    return match me.decoder.finish() {
                        Ok(out) => {
                            me.done = true;
                            Poll::Ready((!out.is_empty()).then(|| Ok(Frame::data(out))))
                        }
                        Err(e) => me.fail(e),
                    };
                }
                Some(Err(e)) => {
                    me.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        me.pending = data;
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// What a fill's streaming client gets of a response of `status` with
/// `headers` and `body` on `route` (see the module docs): decoded when the
/// origin sent a coding that the stored copy will be decoded from (a 200
/// `encode::plan` takes) and a hit would not give this request (`accept`),
/// and the request has no `Range` (ranges apply to the stored body, as for
/// hits); otherwise as it is.
pub fn for_client(
    route: &RouteConfig,
    accept: Option<Accept>,
    ranged: bool,
    max_object: u64,
    status: StatusCode,
    mut headers: HeaderMap,
    body: ProxyBody,
) -> (HeaderMap, ProxyBody, bool) {
    let Some(accept) = accept else {
        return (headers, body, false);
    };
    let coding = content_coding(&headers).unwrap_or(Coding::Identity);
    if coding == Coding::Identity || ranged {
        return (headers, body, false);
    }
    let Some(plan) = crate::encode::plan(route, max_object, status, &headers, u64::MAX) else {
        return (headers, body, false);
    };
    // The choice a hit makes between the origin's bytes and the identity part.
    let want = accept
        .choose(&[coding, Coding::Identity], &route.encodings)
        .unwrap_or(coding);
    let Some(decoder) = (want == Coding::Identity)
        .then(|| Decoder::new(coding, plan.decode_limit))
        .flatten()
    else {
        return (headers, body, false);
    };
    headers.remove(CONTENT_ENCODING);
    headers.remove(CONTENT_LENGTH);
    if let Some(e) = headers
        .get(ETAG)
        .and_then(|e| crate::encode::coded_etag(e, Coding::Identity))
    {
        headers.insert(ETAG, e);
    }
    crate::encode::vary_on_accept_encoding(&mut headers);
    let body = ProxyBody::Decoded(Box::new(DecodedBody::new(body, decoder)));
    (headers, body, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Part;
    use crate::encode::encode;
    use http::header::HeaderValue;
    use http_body_util::BodyExt;

    /// The fields of an identity body decoded from one whose ETag was `"e"`.
    fn is_identity(headers: &HeaderMap) -> bool {
        headers.get(CONTENT_ENCODING).is_none()
            && headers.get(CONTENT_LENGTH).is_none()
            && headers.get(ETAG) == Some(&HeaderValue::from_static("\"e-identity\""))
    }

    fn text() -> Vec<u8> {
        (0..3000u32)
            .flat_map(|i| format!("line {} of {}\n", i * 7919 % 1000, i).into_bytes())
            .collect()
    }

    /// Decodes `coded` read in chunks of `step` bytes, as a client would.
    async fn decode_in(
        c: Coding,
        coded: &[u8],
        step: usize,
        limit: u64,
    ) -> Result<Vec<u8>, String> {
        let parts = coded
            .chunks(step)
            .map(|c| Part::Bytes(Bytes::copy_from_slice(c)))
            .collect();
        let mut body = DecodedBody::new(
            ProxyBody::Parts { parts, send: None },
            Decoder::new(c, limit).expect("a coding"),
        );
        let mut out = Vec::new();
        while let Some(f) = body.frame().await {
            match f {
                Ok(f) => out.extend_from_slice(&f.into_data().expect("data")),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(out)
    }

    #[tokio::test]
    async fn every_coding_decodes_as_it_streams() {
        let text = text();
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let coded = encode(c, &text);
            let mut d = Decoder::new(c, 1 << 20).unwrap();
            let mut out = Vec::new();
            for piece in coded.chunks(777) {
                out.extend_from_slice(&d.push(piece).unwrap());
            }
            out.extend_from_slice(&d.finish().unwrap());
            assert_eq!(out, text, "{c:?}");
            assert_eq!(decode_in(c, &coded, 100, 1 << 20).await.unwrap(), text);
        }
    }

    #[tokio::test]
    async fn truncated_corrupt_and_bombs_end_in_an_error() {
        let text = text();
        for c in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let coded = encode(c, &text);
            let cut = &coded[..coded.len() / 2];
            assert!(
                decode_in(c, cut, 100, 1 << 20).await.is_err(),
                "{c:?} truncated"
            );
            assert!(
                decode_in(c, &coded, 100, 1000)
                    .await
                    .unwrap_err()
                    .contains("past"),
                "{c:?} bomb"
            );
        }
        assert!(decode_in(Coding::Gzip, b"not gzip at all", 4, 1 << 20)
            .await
            .is_err());
    }

    #[test]
    fn only_clients_that_do_not_accept_the_coding_get_it_decoded() {
        let route = RouteConfig::catch_all();
        let coded = || {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            h.insert(CONTENT_LENGTH, HeaderValue::from_static("10"));
            h.insert(ETAG, HeaderValue::from_static("\"e\""));
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/html"),
            );
            h
        };
        let accept = |v: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = v {
                h.insert(http::header::ACCEPT_ENCODING, HeaderValue::from_static(v));
            }
            Some(Accept::from_request(&h))
        };
        for (ae, ranged, decoded) in [
            (Some("identity"), false, true),
            (None, false, true),
            (Some("br"), false, true),
            (Some("gzip"), false, false),
            (Some("gzip;q=0.5, identity;q=0.1"), false, false),
            (Some("identity"), true, false),
        ] {
            let (h, _, did) = for_client(
                &route,
                accept(ae),
                ranged,
                1 << 20,
                StatusCode::OK,
                coded(),
                ProxyBody::Empty,
            );
            assert_eq!(did, decoded, "{ae:?} ranged={ranged}");
            assert_eq!(is_identity(&h), decoded, "{ae:?}");
        }
        // Not transformed: no-transform, or a route without encodings.
        let mut nt = coded();
        nt.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-transform"),
        );
        let (_, _, did) = for_client(
            &route,
            accept(None),
            false,
            1 << 20,
            StatusCode::OK,
            nt,
            ProxyBody::Empty,
        );
        assert!(!did);
        let (_, _, did) = for_client(
            &route,
            None,
            false,
            1 << 20,
            StatusCode::OK,
            coded(),
            ProxyBody::Empty,
        );
        assert!(!did);
    }
}
