//! The raw-socket HTTP/1.1 client (VTC `client c1 { txreq; rxresp } -run`).
//!
//! `t.client(addr).get("/a").send().await` opens a connection, sends one
//! request with `Host: localhost` and `Connection: close` unless set, and reads
//! the response. `t.client(addr).connect().await` gives a persistent [`Conn`]
//! for keep-alive, pipelining ([`RequestBuilder::tx`] then
//! [`Conn::read_response`]) and malformed input ([`Conn::send_raw`]).
//! The body framing is checked strictly: a truncated body is a
//! [`ClientError::IncompleteBody`], never a shorter [`Response`].

mod conn;
mod response;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub use conn::Conn;
pub use response::{cache_status_params, ClientError, Response};

use crate::transcript::Transcript;
use crate::wire;

/// Default time allowed for one exchange (connect, send, whole response).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A named client for one address; from [`Test::client`](crate::Test::client).
#[derive(Clone)]
pub struct Client {
    addr: SocketAddr,
    pub(crate) name: String,
    transcript: Transcript,
}

impl Client {
    pub(crate) fn new(addr: SocketAddr, name: String, transcript: Transcript) -> Self {
        Self {
            addr,
            name: format!("client {name}"),
            transcript,
        }
    }

    /// The address requests go to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A GET on a new connection.
    pub fn get(&self, path: &str) -> RequestBuilder {
        self.request("GET", path)
    }

    /// A HEAD on a new connection.
    pub fn head(&self, path: &str) -> RequestBuilder {
        self.request("HEAD", path)
    }

    /// A POST on a new connection.
    pub fn post(&self, path: &str) -> RequestBuilder {
        self.request("POST", path)
    }

    /// Any method on a new connection.
    pub fn request(&self, method: &str, path: &str) -> RequestBuilder {
        RequestBuilder {
            target: OneShot(self.clone()),
            spec: Spec::new(method, path),
        }
    }

    /// Opens a persistent connection.
    ///
    /// # Panics
    /// If the connection cannot be established.
    pub async fn connect(&self) -> Conn {
        match self.try_connect().await {
            Ok(conn) => conn,
            Err(e) => panic!("{}: connect to {}: {e}", self.name, self.addr),
        }
    }

    /// Opens a persistent connection.
    pub async fn try_connect(&self) -> Result<Conn, ClientError> {
        let stream = TcpStream::connect(self.addr).await.map_err(|e| {
            self.log(format_args!("connect to {} failed: {e}", self.addr));
            ClientError::Connect(e)
        })?;
        let _ = stream.set_nodelay(true);
        self.log(format_args!("connected to {}", self.addr));
        let (rd, wr) = stream.into_split();
        Ok(Conn::new(self.clone(), rd, wr))
    }

    pub(crate) fn log(&self, event: impl fmt::Display) {
        self.transcript.log(&self.name, event);
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish()
    }
}

/// Target of a [`RequestBuilder`] that opens its own connection.
#[derive(Debug, Clone)]
pub struct OneShot(Client);

/// What to send, and how to read the answer.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Option<Bytes>,
    pub(crate) timeout: Duration,
    pub(crate) no_body: bool,
}

impl Spec {
    pub(crate) fn new(method: &str, path: &str) -> Self {
        let (method, path) = (method.to_owned(), path.to_owned());
        Self {
            method,
            path,
            headers: Vec::new(),
            body: None,
            timeout: CLIENT_TIMEOUT,
            no_body: false,
        }
    }

    pub(crate) fn ctx(&self, client: &Client) -> String {
        format!("{}: {} {}", client.name, self.method, self.path)
    }

    /// The request bytes and their transcript line.
    pub(crate) fn encode(&self, persistent: bool) -> (Vec<u8>, String) {
        let has = |name: &str| wire::find(&self.headers, name).is_some();
        let mut headers = self.headers.clone();
        if !has("host") {
            headers.insert(0, ("Host".to_owned(), "localhost".to_owned()));
        }
        if !persistent && !has("connection") {
            headers.push(("Connection".to_owned(), "close".to_owned()));
        }
        let wants_length =
            self.body.is_some() || matches!(self.method.as_str(), "POST" | "PUT" | "PATCH");
        if wants_length && !has("content-length") && !has("transfer-encoding") {
            let len = self.body.as_ref().map_or(0, Bytes::len);
            headers.push(("Content-Length".to_owned(), len.to_string()));
        }
        let start = format!("{} {} HTTP/1.1", self.method, self.path);
        let mut out = start.clone();
        for (k, v) in &headers {
            out.push_str(&format!("\r\n{k}: {v}"));
        }
        out.push_str("\r\n\r\n");
        let mut out = out.into_bytes();
        let mut event = wire::fmt_head(&format!("tx {start}"), &headers);
        if let Some(body) = &self.body {
            out.extend_from_slice(body);
            event.push_str(&format!(
                "\n  ({} body bytes) {}",
                body.len(),
                wire::show(body)
            ));
        }
        (out, event)
    }
}

/// A request being built; `T` is [`OneShot`] or `&mut Conn`.
#[must_use = "a request is only sent by .send(), .try_send(), .spawn() or .tx()"]
#[derive(Debug)]
pub struct RequestBuilder<T = OneShot> {
    pub(crate) target: T,
    pub(crate) spec: Spec,
}

impl<T> RequestBuilder<T> {
    /// Adds a header. Setting `Host`, `Connection`, `Content-Length` or
    /// `Transfer-Encoding` replaces the default (the body is then sent verbatim).
    pub fn hdr(mut self, name: &str, value: impl fmt::Display) -> Self {
        self.spec.headers.push((name.to_owned(), value.to_string()));
        self
    }

    /// Sets the body, sent with a `Content-Length` unless framing headers are set.
    pub fn body(mut self, body: impl AsRef<[u8]>) -> Self {
        self.spec.body = Some(Bytes::copy_from_slice(body.as_ref()));
        self
    }

    /// Time allowed for the exchange (default [`CLIENT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.spec.timeout = timeout;
        self
    }

    /// Reads the response as having no body whatever its headers say (VTC
    /// `rxresp -no_obj`); HEAD, 1xx, 204 and 304 need no such hint.
    pub fn no_response_body(mut self) -> Self {
        self.spec.no_body = true;
        self
    }
}

/// Runs `fut` within `timeout`, turning expiry into [`ClientError::Timeout`].
pub(crate) async fn within<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or(Err(ClientError::Timeout(timeout)))
}

impl RequestBuilder<OneShot> {
    /// Sends on a new connection and reads the response.
    ///
    /// # Panics
    /// On any [`ClientError`], with the transcript context.
    pub async fn send(self) -> Response {
        let ctx = self.spec.ctx(&self.target.0);
        self.try_send()
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}"))
    }

    /// Sends on a new connection and reads the response, reporting failures.
    pub async fn try_send(self) -> Result<Response, ClientError> {
        let timeout = self.spec.timeout;
        let result = within(timeout, async {
            let mut conn = self.target.0.try_connect().await?;
            conn.exchange(self.spec, false).await
        })
        .await;
        if let Err(e) = &result {
            self.target.0.log(format_args!("error: {e}"));
        }
        result
    }

    /// Sends in a new task; await the handle later (VTC `client -start`).
    pub fn spawn(self) -> JoinHandle<Response> {
        tokio::spawn(self.send())
    }
}
