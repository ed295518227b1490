//! HTTP/1.1 framing shared by the fake origin and the raw client: a buffered
//! reader for heads and bodies (Content-Length, chunked, read-to-close), and
//! small header helpers. Strict on purpose: broken framing is an error, never
//! a shorter body.

use std::fmt::Write as _;
use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest head accepted by either side.
const MAX_HEAD: usize = 64 * 1024;
/// Largest chunk-size or trailer line.
const MAX_LINE: usize = 8 * 1024;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the peer closes (responses only).
    Close,
}

/// Why a head could not be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The peer closed after sending `got` bytes of a head (0: nothing at all).
    Eof {
        got: usize,
    },
    Io(io::Error),
    Malformed(String),
}

/// A body that ended before its framing said it would.
#[derive(Debug)]
pub(crate) struct BodyError {
    pub partial: Bytes,
    pub reason: String,
}

/// A read half with a buffer.
pub(crate) struct WireReader<R> {
    io: R,
    buf: BytesMut,
}

/// A head parser: `Ok(None)` asks for more bytes, `Ok(Some((len, head)))` is done.
pub(crate) type ParseResult<T> = Result<Option<(usize, T)>, String>;

impl<R: AsyncRead + Unpin> WireReader<R> {
    pub(crate) fn new(io: R) -> Self {
        Self {
            io,
            buf: BytesMut::with_capacity(8192),
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        self.buf.reserve(8192);
        self.io.read_buf(&mut self.buf).await
    }

    /// Reads one head. `Ok(None)`: the peer closed cleanly before sending a byte.
    pub(crate) async fn head<T>(
        &mut self,
        mut parse: impl FnMut(&[u8]) -> ParseResult<T>,
    ) -> Result<Option<T>, HeadError> {
        loop {
            if !self.buf.is_empty() {
                if let Some((len, head)) = parse(&self.buf).map_err(HeadError::Malformed)? {
                    self.buf.advance(len);
                    return Ok(Some(head));
                }
                if self.buf.len() > MAX_HEAD {
                    return Err(HeadError::Malformed(format!(
                        "head larger than {MAX_HEAD} bytes"
                    )));
                }
            }
            match self.fill().await {
                Ok(0) if self.buf.is_empty() => return Ok(None),
                Ok(0) => {
                    return Err(HeadError::Eof {
                        got: self.buf.len(),
                    })
                }
                Ok(_) => {}
                Err(e) => return Err(HeadError::Io(e)),
            }
        }
    }

    /// Reads a body delimited by `framing`.
    pub(crate) async fn body(&mut self, framing: Framing) -> Result<Bytes, BodyError> {
        match framing {
            Framing::Empty => Ok(Bytes::new()),
            Framing::Length(n) => self.exact(n).await,
            Framing::Chunked => self.chunked().await,
            Framing::Close => self.until_close().await,
        }
    }

    async fn exact(&mut self, n: u64) -> Result<Bytes, BodyError> {
        let n = usize::try_from(n).map_err(|_| BodyError {
            partial: Bytes::new(),
            reason: format!("Content-Length {n} too large"),
        })?;
        while self.buf.len() < n {
            let got = self.buf.len();
            let reason = match self.fill().await {
                Ok(0) => format!("connection closed after {got} of {n} body bytes"),
                Ok(_) => continue,
                Err(e) => format!("{e} after {got} of {n} body bytes"),
            };
            return Err(BodyError {
                partial: self.buf.split().freeze(),
                reason,
            });
        }
        Ok(self.buf.split_to(n).freeze())
    }

    async fn chunked(&mut self) -> Result<Bytes, BodyError> {
        let mut out = BytesMut::new();
        match self.chunked_into(&mut out).await {
            Ok(()) => Ok(out.freeze()),
            Err(reason) => Err(BodyError {
                partial: out.freeze(),
                reason,
            }),
        }
    }

    async fn chunked_into(&mut self, out: &mut BytesMut) -> Result<(), String> {
        loop {
            let line = self.line().await?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size)
                .map_err(|_| bad_size(&line))?
                .trim_matches([' ', '\t']);
            let size = u64::from_str_radix(size, 16).map_err(|_| bad_size(&line))?;
            if size == 0 {
                // Trailer section: header lines until an empty line.
                while !self.line().await?.is_empty() {}
                return Ok(());
            }
            let data = self.exact(size).await.map_err(|e| {
                out.extend_from_slice(&e.partial);
                format!("chunked body: {}", e.reason)
            })?;
            out.extend_from_slice(&data);
            if !self.line().await?.is_empty() {
                return Err("chunked body: chunk data not followed by CRLF".to_owned());
            }
        }
    }

    /// One CRLF-terminated line, without the CRLF.
    async fn line(&mut self) -> Result<Bytes, String> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                if pos == 0 || self.buf[pos - 1] != b'\r' {
                    return Err("chunked body: line not terminated by CRLF".to_owned());
                }
                let line = self.buf.split_to(pos + 1).freeze();
                return Ok(line.slice(..pos - 1));
            }
            if self.buf.len() > MAX_LINE {
                return Err(format!("chunked body: line longer than {MAX_LINE} bytes"));
            }
            match self.fill().await {
                Ok(0) => {
                    return Err("chunked body: connection closed before the last chunk".to_owned())
                }
                Ok(_) => {}
                Err(e) => return Err(format!("chunked body: {e}")),
            }
        }
    }

    async fn until_close(&mut self) -> Result<Bytes, BodyError> {
        loop {
            match self.fill().await {
                Ok(0) => return Ok(self.buf.split().freeze()),
                Ok(_) => {}
                Err(e) => {
                    let partial = self.buf.split().freeze();
                    return Err(BodyError {
                        partial,
                        reason: format!("{e} before end of body"),
                    });
                }
            }
        }
    }

    /// Whether the peer has closed with nothing left to read.
    /// Raw bytes up to and including the first occurrence of `needle`.
    pub(crate) async fn until(&mut self, needle: &[u8]) -> io::Result<Bytes> {
        loop {
            if let Some(pos) = self.buf.windows(needle.len()).position(|w| w == needle) {
                return Ok(self.buf.split_to(pos + needle.len()).freeze());
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before the expected bytes",
                ));
            }
        }
    }

    pub(crate) async fn at_eof(&mut self) -> io::Result<bool> {
        if !self.buf.is_empty() {
            return Ok(false);
        }
        Ok(self.fill().await? == 0)
    }
}

fn bad_size(line: &[u8]) -> String {
    format!("chunked body: bad chunk size line {:?}", show(line))
}

/// Converts parsed httparse headers into owned pairs.
pub(crate) fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_owned(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// The first value of header `name` (case-insensitive).
pub(crate) fn find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    find_all(headers, name).next()
}

/// Every value of header `name` (case-insensitive), in order.
pub(crate) fn find_all<'a, 'n>(
    headers: &'a [(String, String)],
    name: &'n str,
) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
    headers
        .iter()
        .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Whether any `name` header lists `token` (comma-separated, case-insensitive).
pub(crate) fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    find_all(headers, name)
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Body framing from headers: chunked wins over Content-Length; `otherwise`
/// applies when neither is present.
pub(crate) fn framing(headers: &[(String, String)], otherwise: Framing) -> Result<Framing, String> {
    let te: Vec<&str> = find_all(headers, "transfer-encoding")
        .flat_map(|v| v.split(','))
        .collect();
    if let Some(last) = te.iter().map(|t| t.trim()).rfind(|t| !t.is_empty()) {
        if last.eq_ignore_ascii_case("chunked") {
            return Ok(Framing::Chunked);
        }
        return Err(format!("unsupported Transfer-Encoding {last:?}"));
    }
    let mut len = None;
    for v in find_all(headers, "content-length").flat_map(|v| v.split(',')) {
        let n: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("bad Content-Length {v:?}"))?;
        if len.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length values".to_owned());
        }
        len = Some(n);
    }
    Ok(len.map_or(otherwise, Framing::Length))
}

/// A start line and headers, one per line, for logs and panic messages.
pub(crate) fn fmt_head(start: &str, headers: &[(String, String)]) -> String {
    let mut s = start.to_owned();
    for (k, v) in headers {
        let _ = write!(s, "\n  {k}: {v}");
    }
    s
}

/// Bytes as escaped ASCII, shortened past 300 bytes.
pub(crate) fn show(bytes: &[u8]) -> String {
    const MAX: usize = 300;
    if bytes.len() <= MAX {
        format!("\"{}\"", bytes.escape_ascii())
    } else {
        format!(
            "\"{}\"... ({} bytes)",
            bytes[..MAX].escape_ascii(),
            bytes.len()
        )
    }
}

/// The default reason phrase for `status`.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Whether a response with this status never has a body.
pub(crate) fn bodiless_status(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(raw: &'static [u8], framing: Framing) -> Result<Bytes, BodyError> {
        WireReader::new(raw).body(framing).await
    }

    #[tokio::test]
    async fn chunked_complete_and_broken() {
        let ok = body(
            b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n",
            Framing::Chunked,
        )
        .await;
        assert_eq!(ok.expect("complete chunked body"), "abcde");
        let cut = body(b"3\r\nabc\r\n5\r\nde", Framing::Chunked)
            .await
            .expect_err("cut mid-chunk");
        assert_eq!(cut.partial, "abcde");
        let no_end = body(b"3\r\nabc\r\n", Framing::Chunked)
            .await
            .expect_err("no last chunk");
        assert_eq!(no_end.partial, "abc");
        body(b"3\r\nabcX\r\n0\r\n\r\n", Framing::Chunked)
            .await
            .expect_err("no CRLF after data");
        body(b"zz\r\n", Framing::Chunked)
            .await
            .expect_err("bad size");
    }

    #[tokio::test]
    async fn length_short_is_an_error() {
        assert_eq!(
            body(b"abcdef", Framing::Length(4)).await.expect("4 bytes"),
            "abcd"
        );
        let e = body(b"ab", Framing::Length(4))
            .await
            .expect_err("2 of 4 bytes");
        assert_eq!(e.partial, "ab");
    }

    #[test]
    fn framing_rules() {
        let h = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert_eq!(
            framing(&h("Content-Length", "5"), Framing::Empty),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            framing(&h("transfer-encoding", "gzip, chunked"), Framing::Empty),
            Ok(Framing::Chunked)
        );
        assert_eq!(framing(&[], Framing::Close), Ok(Framing::Close));
        assert!(framing(&h("content-length", "5, 6"), Framing::Empty).is_err());
    }
}
