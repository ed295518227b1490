//! The script side of the fake origin: receive requests (`rxreq`) and answer
//! them (`txresp`, `chunk`, `end`, `send_raw`, `close`), as in a VTC server.
//!
//! Responses go to the *current* request, the one last received (or selected
//! with [`Script::switch_to`]). A response is complete after `send()`, after
//! `end()` of a streamed one, or when the script moves on to the next request
//! after writing something; the connection is then kept alive unless the
//! request or the response said `Connection: close`. When the script ends, a
//! request it received but did not answer completely has its connection closed.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::conn::{ConnIo, Done, Pending};
use super::request::Request;
use super::{Shared, ORIGIN_TIMEOUT};
use crate::wire;

/// How a streamed body (after `send_head`) is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Chunked,
    Raw,
}

/// One received request and the state of its answer.
struct Exchange {
    seq: u64,
    conn: Arc<ConnIo>,
    head_request: bool,
    close_after: bool,
    wrote: bool,
    stream: Option<Stream>,
    /// `None` once the connection was told the response is complete.
    done: Option<oneshot::Sender<Done>>,
}

impl Exchange {
    /// Tells the connection the response is complete.
    fn complete(&mut self) {
        self.stream = None;
        if let Some(done) = self.done.take() {
            let _ = done.send(if self.close_after {
                Done::Close
            } else {
                Done::Keep
            });
        }
    }
}

/// The handle a script uses; passed to the closure given to
/// [`OriginBuilder::script`](super::OriginBuilder::script).
pub struct Script {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedReceiver<Pending>,
    open: Vec<Exchange>,
    current: Option<u64>,
    next_seq: u64,
}

impl Script {
    pub(crate) fn new(shared: Arc<Shared>, queue: mpsc::UnboundedReceiver<Pending>) -> Self {
        Self {
            shared,
            queue,
            open: Vec::new(),
            current: None,
            next_seq: 1,
        }
    }

    /// Receives the next request from any connection and makes it current.
    /// Cancel-safe (usable in `tokio::select!`).
    ///
    /// # Panics
    /// If no request arrives within [`ORIGIN_TIMEOUT`].
    pub async fn rxreq(&mut self) -> Request {
        self.settle();
        self.receive().await
    }

    /// Receives the next request while the current response is still being
    /// streamed (after `send_head`): it stays open, to go on with after
    /// [`Script::switch_to`], so two responses are in progress at once.
    pub async fn rxreq_concurrent(&mut self) -> Request {
        self.open.retain(|ex| ex.done.is_some());
        self.receive().await
    }

    async fn receive(&mut self) -> Request {
        let pending = match tokio::time::timeout(ORIGIN_TIMEOUT, self.queue.recv()).await {
            Ok(Some(p)) => p,
            Ok(None) => panic!(
                "{}: rxreq: the origin stopped accepting",
                self.shared.name()
            ),
            Err(_) => panic!(
                "{}: rxreq: no request arrived within {ORIGIN_TIMEOUT:?}",
                self.shared.name()
            ),
        };
        let (mut req, conn, done) = pending.take();
        req.seq = self.next_seq;
        self.next_seq += 1;
        let close = wire::has_token(req.headers(), "connection", "close") || req.version() == 0;
        self.open.push(Exchange {
            seq: req.seq,
            conn,
            head_request: req.method() == "HEAD",
            close_after: close,
            wrote: false,
            stream: None,
            done: Some(done),
        });
        self.current = Some(req.seq);
        req
    }

    /// Completes the current exchange if it has been written to, and forgets
    /// completed exchanges. Unanswered ones stay open for `switch_to`.
    fn settle(&mut self) {
        let current = self.current;
        if let Some(ex) = self.open.iter_mut().find(|ex| Some(ex.seq) == current) {
            if ex.wrote {
                ex.complete();
            }
        }
        self.open.retain(|ex| ex.done.is_some());
    }

    /// Makes an earlier, still unanswered request current again, to answer
    /// requests in another order than they arrived.
    #[track_caller]
    pub fn switch_to(&mut self, req: &Request) {
        self.settle();
        if !self.open.iter().any(|ex| ex.seq == req.seq) {
            panic!(
                "{}: switch_to {} {}: already answered",
                self.shared.name(),
                req.method(),
                req.url()
            );
        }
        self.current = Some(req.seq);
    }

    #[track_caller]
    fn ex(&mut self) -> &mut Exchange {
        let current = self.current;
        match self.open.iter_mut().find(|ex| Some(ex.seq) == current) {
            Some(ex) => ex,
            None => panic!(
                "{}: no current request (call rxreq first)",
                self.shared.name()
            ),
        }
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }

    /// Requests received so far, including ones not yet consumed.
    pub fn requests(&self) -> usize {
        self.shared.requests()
    }

    /// The test clock's current time (what `Date` will say).
    pub fn now(&self) -> SystemTime {
        self.shared.clock.now()
    }

    /// Adds a line to the transcript.
    pub fn log(&self, event: impl fmt::Display) {
        self.shared.log(event);
    }

    /// Closes the current connection after the response (sends `Connection: close`).
    #[track_caller]
    pub fn drop_connection_after_response(&mut self) {
        self.ex().close_after = true;
    }

    /// Starts a response to the current request.
    pub fn txresp(&mut self, status: u16) -> Resp<'_> {
        Resp {
            script: self,
            status,
            reason: None,
            headers: Vec::new(),
            body: None,
            chunked: false,
            no_body: false,
            no_date: false,
        }
    }

    /// Writes the next piece of a body started with `send_head`: a chunk if the
    /// response is chunked, raw bytes otherwise. Empty data is skipped.
    pub async fn chunk(&mut self, data: impl AsRef<[u8]>) {
        let data = data.as_ref();
        let name = self.shared.name.clone();
        let ex = self.ex();
        let Some(stream) = ex.stream else {
            panic!("{name}: chunk() without a streamed response (use .send_head())");
        };
        if data.is_empty() || ex.head_request {
            return;
        }
        let mut out = Vec::with_capacity(data.len() + 12);
        if stream == Stream::Chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        out.extend_from_slice(data);
        if stream == Stream::Chunked {
            out.extend_from_slice(b"\r\n");
        }
        let what = format!("tx body piece ({} bytes) {}", data.len(), wire::show(data));
        self.write(&out, &what).await;
    }

    /// Ends a streamed response (the last chunk for chunked) and completes it.
    pub async fn end(&mut self) {
        let ex = self.ex();
        let chunked = ex.stream == Some(Stream::Chunked) && !ex.head_request;
        if chunked {
            self.write(b"0\r\n\r\n", "tx last chunk").await;
        }
        self.ex().complete();
    }

    /// Ends a chunked response with trailer fields (RFC 9112 §7.1.2) and
    /// completes it.
    pub async fn end_with_trailers(&mut self, trailers: &[(&str, &str)]) {
        let name = self.shared.name.clone();
        if self.ex().stream != Some(Stream::Chunked) {
            panic!("{name}: end_with_trailers() needs a chunked response");
        }
        let mut out = b"0\r\n".to_vec();
        for (n, v) in trailers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        self.write(&out, "tx last chunk with trailers").await;
        self.ex().complete();
    }

    /// Writes raw bytes on the current connection.
    pub async fn send_raw(&mut self, bytes: impl AsRef<[u8]>) {
        let bytes = bytes.as_ref();
        self.write(
            bytes,
            &format!("tx raw ({} bytes) {}", bytes.len(), wire::show(bytes)),
        )
        .await;
    }

    /// Closes the current connection now, whatever was sent.
    pub async fn close(&mut self) {
        let ex = self.ex();
        let conn = ex.conn.clone();
        ex.close_after = true;
        ex.stream = None;
        self.shared.log(format_args!("close conn {}", conn.id));
        conn.shutdown().await;
        if let Some(done) = self.ex().done.take() {
            let _ = done.send(Done::Close);
        }
    }

    /// Writes to the current connection; a write error is logged, not fatal
    /// (the proxy may legitimately have gone away).
    async fn write(&mut self, bytes: &[u8], what: &str) {
        let ex = self.ex();
        ex.wrote = true;
        let conn = ex.conn.clone();
        let (first, rest) = what.split_once('\n').map_or((what, ""), |(f, r)| (f, r));
        let sep = if rest.is_empty() { "" } else { "\n" };
        self.shared
            .log(format_args!("{first} (conn {}){sep}{rest}", conn.id));
        if let Err(e) = conn.write(bytes).await {
            self.shared
                .log(format_args!("write failed on conn {}: {e}", conn.id));
        }
    }
}

/// A response being built; from [`Script::txresp`].
#[must_use = "a response is only sent by .send(), .send_head() or .send_truncated()"]
pub struct Resp<'s> {
    script: &'s mut Script,
    status: u16,
    reason: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<Bytes>,
    chunked: bool,
    no_body: bool,
    no_date: bool,
}

impl Resp<'_> {
    /// Adds a header. Setting `Date`, `Content-Length`, `Transfer-Encoding` or
    /// `Connection` replaces what the origin would add.
    pub fn hdr(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.headers.push((name.to_owned(), value.to_string()));
        self
    }

    /// Sets the reason phrase (default: the standard one).
    pub fn reason(mut self, reason: &str) -> Self {
        self.reason = Some(reason.to_owned());
        self
    }

    /// Sets the body, sent with a `Content-Length` (omitted for HEAD requests).
    pub fn body(mut self, body: impl AsRef<[u8]>) -> Self {
        self.body = Some(Bytes::copy_from_slice(body.as_ref()));
        self
    }

    /// No body and no `Content-Length` (for 304, 204 and the like; those
    /// statuses get no `Content-Length` by default anyway).
    pub fn no_body(mut self) -> Self {
        self.no_body = true;
        self
    }

    /// Uses `Transfer-Encoding: chunked`; send with `send_head`, then `chunk`, `end`.
    pub fn chunked(mut self) -> Self {
        self.chunked = true;
        self
    }

    /// Omits the `Date` header.
    pub fn no_date(mut self) -> Self {
        self.no_date = true;
        self
    }

    fn has(&self, name: &str) -> bool {
        wire::find(&self.headers, name).is_some()
    }

    /// Serializes the head, adding Date, framing and Connection headers.
    fn head(&mut self, body_len: Option<usize>) -> (Vec<u8>, String) {
        let mut headers = self.headers.clone();
        if !self.no_date && !self.has("date") {
            headers.insert(0, ("Date".to_owned(), self.script.shared.date()));
        }
        let framed = self.has("content-length") || self.has("transfer-encoding");
        if self.chunked && !self.has("transfer-encoding") {
            headers.push(("Transfer-Encoding".to_owned(), "chunked".to_owned()));
        } else if let (false, false, Some(len)) = (framed, self.no_body, body_len) {
            headers.push(("Content-Length".to_owned(), len.to_string()));
        }
        let ex = self.script.ex();
        if wire::has_token(&self.headers, "connection", "close") {
            ex.close_after = true;
        }
        if ex.close_after && !self.has("connection") {
            headers.push(("Connection".to_owned(), "close".to_owned()));
        }
        let reason = self
            .reason
            .clone()
            .unwrap_or_else(|| wire::reason(self.status).to_owned());
        let start = format!("HTTP/1.1 {} {reason}", self.status);
        let mut out = start.clone();
        for (k, v) in &headers {
            out.push_str(&format!("\r\n{k}: {v}"));
        }
        out.push_str("\r\n\r\n");
        (
            out.into_bytes(),
            wire::fmt_head(&format!("tx {} {reason}", self.status), &headers),
        )
    }

    /// The body length to announce: the body's, else 0 unless the status has no body.
    fn body_len(&self) -> Option<usize> {
        match &self.body {
            Some(b) => Some(b.len()),
            None if wire::bodiless_status(self.status) => None,
            None => Some(0),
        }
    }

    /// Sends the whole response and completes it (interim 1xx responses other
    /// than 101 do not complete the exchange).
    pub async fn send(mut self) {
        assert!(
            !self.chunked,
            "a chunked response is sent with .send_head(), then chunk()/end()"
        );
        let (mut out, mut event) = self.head(self.body_len());
        let body = self.body.take().unwrap_or_default();
        if !self.no_body && !self.script.ex().head_request && !body.is_empty() {
            out.extend_from_slice(&body);
            event.push_str(&format!(
                "\n  ({} body bytes) {}",
                body.len(),
                wire::show(&body)
            ));
        }
        self.script.write(&out, &event).await;
        if !(100..200).contains(&self.status) || self.status == 101 {
            let ex = self.script.ex();
            let close = ex.close_after;
            if close {
                ex.conn.clone().shutdown().await;
            }
            self.script.ex().complete();
        }
    }

    /// Sends only the head; the body follows with [`Script::chunk`] and
    /// [`Script::end`]. Without `.chunked()` or a `Content-Length` set with
    /// `.hdr`, the body is delimited by closing the connection.
    pub async fn send_head(mut self) {
        assert!(
            self.body.is_none(),
            "with .send_head() the body is sent with chunk()"
        );
        let stream = if self.chunked {
            Stream::Chunked
        } else {
            Stream::Raw
        };
        if !self.chunked && !self.has("content-length") && !self.has("transfer-encoding") {
            self.script.ex().close_after = true;
        }
        let (out, event) = self.head(None);
        self.script.write(&out, &event).await;
        self.script.ex().stream = Some(stream);
    }

    /// Sends the head with the full `Content-Length`, only the first `keep`
    /// body bytes, then closes the connection: an origin failing mid-body.
    pub async fn send_truncated(mut self, keep: usize) {
        let body = self.body.take().unwrap_or_default();
        let (mut out, mut event) = self.head(Some(body.len()));
        let part = &body[..keep.min(body.len())];
        out.extend_from_slice(part);
        event.push_str(&format!(
            "\n  (truncated: {} of {} body bytes) {}",
            part.len(),
            body.len(),
            wire::show(part)
        ));
        self.script.write(&out, &event).await;
        self.script.close().await;
    }
}
