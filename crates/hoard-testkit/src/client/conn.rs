//! A persistent client connection: sequential requests (keep-alive),
//! pipelining with `tx` + `read_response`, raw bytes, half-close.

use std::collections::VecDeque;
use std::fmt;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::{within, Client, ClientError, RequestBuilder, Response, Spec, CLIENT_TIMEOUT};
use crate::wire::{self, Framing, HeadError, WireReader};

impl RequestBuilder<&mut Conn> {
    /// Sends on the persistent connection and reads the response.
    ///
    /// # Panics
    /// On any [`ClientError`], or if pipelined responses are still unread.
    pub async fn send(self) -> Response {
        let ctx = self.spec.ctx(&self.target.client);
        self.try_send()
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}"))
    }

    /// Sends on the persistent connection and reads the response, reporting failures.
    pub async fn try_send(self) -> Result<Response, ClientError> {
        let conn = self.target;
        assert!(
            conn.inflight.is_empty(),
            "{}: send() with pipelined responses unread",
            conn.client.name
        );
        let result = within(self.spec.timeout, conn.exchange(self.spec, true)).await;
        if let Err(e) = &result {
            conn.client.log(format_args!("error: {e}"));
        }
        result
    }

    /// Only writes the request (pipelining); read the answer with
    /// [`Conn::read_response`].
    pub async fn tx(self) {
        let conn = self.target;
        conn.write_request(&self.spec).await;
        conn.inflight.push_back(self.spec);
    }
}

/// A persistent client connection.
pub struct Conn {
    pub(super) client: Client,
    reader: WireReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Requests sent with `tx` whose responses are not read yet.
    pub(super) inflight: VecDeque<Spec>,
}

impl Conn {
    pub(super) fn new(client: Client, rd: OwnedReadHalf, wr: OwnedWriteHalf) -> Self {
        Self {
            client,
            reader: WireReader::new(rd),
            writer: wr,
            inflight: VecDeque::new(),
        }
    }

    /// A GET on this connection.
    pub fn get(&mut self, path: &str) -> RequestBuilder<&mut Conn> {
        self.request("GET", path)
    }

    /// A HEAD on this connection.
    pub fn head(&mut self, path: &str) -> RequestBuilder<&mut Conn> {
        self.request("HEAD", path)
    }

    /// A POST on this connection.
    pub fn post(&mut self, path: &str) -> RequestBuilder<&mut Conn> {
        self.request("POST", path)
    }

    /// Any method on this connection.
    pub fn request(&mut self, method: &str, path: &str) -> RequestBuilder<&mut Conn> {
        RequestBuilder {
            target: self,
            spec: Spec::new(method, path),
        }
    }

    /// Writes raw bytes (malformed or pipelined requests). Write errors are
    /// logged, not fatal: the next read shows what the peer did.
    pub async fn send_raw(&mut self, bytes: impl AsRef<[u8]>) {
        let bytes = bytes.as_ref();
        self.client.log(format_args!(
            "tx raw ({} bytes) {}",
            bytes.len(),
            wire::show(bytes)
        ));
        self.write(bytes).await;
    }

    /// Reads raw bytes up to and including `needle` (to observe a response
    /// while it streams).
    ///
    /// # Panics
    /// If the connection closes first or nothing arrives within the client timeout.
    pub async fn read_until(&mut self, needle: impl AsRef<[u8]>) -> bytes::Bytes {
        let needle = needle.as_ref();
        let got = tokio::time::timeout(CLIENT_TIMEOUT, self.reader.until(needle))
            .await
            .unwrap_or_else(|_| panic!("{}: read_until: timed out", self.client.name))
            .unwrap_or_else(|e| panic!("{}: read_until: {e}", self.client.name));
        self.client.log(format_args!(
            "rx raw ({} bytes) {}",
            got.len(),
            wire::show(&got)
        ));
        got
    }

    /// Half-closes the connection (sends FIN); responses can still be read.
    pub async fn shutdown_write(&mut self) {
        self.client.log("shutdown write");
        let _ = self.writer.shutdown().await;
    }

    /// Reads the next response: to the oldest request sent with `tx`, or to
    /// raw bytes (then read as a response to a GET).
    ///
    /// # Panics
    /// On any [`ClientError`].
    pub async fn read_response(&mut self) -> Response {
        let name = self.client.name.clone();
        self.try_read_response()
            .await
            .unwrap_or_else(|e| panic!("{name}: read_response: {e}"))
    }

    /// Reads the next response, reporting failures.
    pub async fn try_read_response(&mut self) -> Result<Response, ClientError> {
        let spec = self
            .inflight
            .pop_front()
            .unwrap_or_else(|| Spec::new("GET", "(raw request)"));
        let result = within(spec.timeout, self.read(&spec)).await;
        if let Err(e) = &result {
            self.client.log(format_args!("error: {e}"));
        }
        result
    }

    /// Asserts that the peer closes the connection without sending anything more.
    ///
    /// # Panics
    /// If bytes arrive, or the connection stays open for [`CLIENT_TIMEOUT`].
    pub async fn expect_closed(&mut self) {
        let name = self.client.name.clone();
        match tokio::time::timeout(CLIENT_TIMEOUT, self.reader.at_eof()).await {
            Ok(Ok(true)) | Ok(Err(_)) => self.client.log("connection closed by peer, as expected"),
            Ok(Ok(false)) => panic!("{name}: expected the connection to close, but bytes arrived"),
            Err(_) => panic!("{name}: connection still open after {CLIENT_TIMEOUT:?}"),
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        let written = async {
            self.writer.write_all(bytes).await?;
            self.writer.flush().await
        };
        if let Err(e) = written.await {
            self.client.log(format_args!("write failed: {e}"));
        }
    }

    pub(super) async fn write_request(&mut self, spec: &Spec) {
        let (bytes, event) = spec.encode(true);
        self.client.log(event);
        self.write(&bytes).await;
    }

    /// Sends `spec` and reads its final response, skipping interim 1xx.
    pub(super) async fn exchange(
        &mut self,
        spec: Spec,
        persistent: bool,
    ) -> Result<Response, ClientError> {
        let (bytes, event) = spec.encode(persistent);
        self.client.log(event);
        // A write error is not final: the peer may have answered before closing.
        self.write(&bytes).await;
        loop {
            let resp = self.read(&spec).await?;
            if !(100..200).contains(&resp.status) || resp.status == 101 {
                return Ok(resp);
            }
        }
    }

    /// Reads one response to `spec`.
    async fn read(&mut self, spec: &Spec) -> Result<Response, ClientError> {
        let head = match self.reader.head(parse_head).await {
            Ok(Some(head)) => head,
            Ok(None) => {
                return Err(ClientError::ClosedBeforeResponse(
                    "connection closed".to_owned(),
                ))
            }
            Err(HeadError::Eof { got }) => {
                return Err(ClientError::ClosedBeforeResponse(format!(
                    "connection closed after {got} head bytes"
                )))
            }
            Err(HeadError::Io(e)) => return Err(ClientError::ClosedBeforeResponse(e.to_string())),
            Err(HeadError::Malformed(e)) => return Err(ClientError::BadResponse(e)),
        };
        let (status, reason, headers) = head;
        self.client.log(wire::fmt_head(
            &format!("rx HTTP/1.1 {status} {reason}"),
            &headers,
        ));
        let bodiless = spec.no_body || spec.method == "HEAD" || wire::bodiless_status(status);
        let framing = match bodiless {
            true => Framing::Empty,
            false => wire::framing(&headers, Framing::Close).map_err(ClientError::BadResponse)?,
        };
        let mut resp = Response::new(spec.ctx(&self.client), status, reason, headers);
        match self.reader.body(framing).await {
            Ok(body) => {
                self.client.log(format_args!(
                    "rx body ({} bytes) {}",
                    body.len(),
                    wire::show(&body)
                ));
                resp.body = body;
                Ok(resp)
            }
            Err(e) => {
                resp.body = e.partial;
                Err(ClientError::IncompleteBody {
                    response: Box::new(resp),
                    reason: e.reason,
                })
            }
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("client", &self.client)
            .field("inflight", &self.inflight.len())
            .finish()
    }
}

type Head = (u16, String, Vec<(String, String)>);

fn parse_head(buf: &[u8]) -> wire::ParseResult<Head> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let status = resp.code.unwrap_or_default();
            let reason = resp.reason.unwrap_or_default().to_owned();
            Ok(Some((
                len,
                (status, reason, wire::owned_headers(resp.headers)),
            )))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
