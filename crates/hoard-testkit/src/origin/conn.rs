//! One accepted connection of the fake origin: reads requests, hands each one
//! to the script queue and waits until the script is done with it before
//! reading the next (HTTP/1.1 answers in order).

use std::io;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncRead, AsyncWrite};

/// The read side of an origin connection (plain TCP or TLS).
pub(crate) type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The write side.
pub(crate) type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;
use tokio::sync::{mpsc, oneshot};

use super::request::Request;
use super::Shared;
use crate::wire::{self, Framing, HeadError, WireReader};

/// What the connection does once the script is done with a request.
#[derive(Debug)]
pub(crate) enum Done {
    /// Response complete: read the next request.
    Keep,
    /// Close the connection.
    Close,
    /// Nobody expected this request: answer 500 and close.
    Unexpected,
}

/// The write half of a connection, shared by the script and the connection task.
pub(crate) struct ConnIo {
    pub(crate) id: usize,
    writer: tokio::sync::Mutex<Option<WriteHalf>>,
}

impl ConnIo {
    pub(crate) async fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let mut guard = self.writer.lock().await;
        let w = guard
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "closed by the script"))?;
        w.write_all(bytes).await?;
        w.flush().await
    }

    /// Sends FIN; the connection task then drops the read half.
    pub(crate) async fn shutdown(&self) {
        if let Some(mut w) = self.writer.lock().await.take() {
            let _ = w.shutdown().await;
        }
    }
}

/// A received request waiting in the script queue. Dropping it unconsumed
/// (queued when the script ended, or sent after) makes it unexpected.
pub(crate) struct Pending {
    req: Option<Request>,
    conn: Arc<ConnIo>,
    done: Option<oneshot::Sender<Done>>,
    shared: Arc<Shared>,
}

impl Pending {
    /// Consumes the request for the script.
    pub(crate) fn take(mut self) -> (Request, Arc<ConnIo>, oneshot::Sender<Done>) {
        let req = self
            .req
            .take()
            .expect("origin: pending request taken twice");
        let done = self
            .done
            .take()
            .expect("origin: pending request taken twice");
        (req, self.conn.clone(), done)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let (Some(req), Some(done)) = (self.req.take(), self.done.take()) {
            self.shared.fail(format!(
                "unexpected request: {} {} (conn {})",
                req.method(),
                req.url(),
                self.conn.id
            ));
            let _ = done.send(Done::Unexpected);
        }
    }
}

/// Serves one connection until it closes.
pub(crate) async fn serve(
    (rd, wr): (ReadHalf, WriteHalf),
    id: usize,
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Pending>,
) {
    let conn = Arc::new(ConnIo {
        id,
        writer: tokio::sync::Mutex::new(Some(wr)),
    });
    let mut reader = WireReader::new(rd);
    loop {
        let req = match read_request(&mut reader, &shared, id).await {
            Ok(Some(req)) => req,
            Ok(None) => break,
            Err(bad) => {
                shared.fail(format!("conn {id}: malformed request: {bad}"));
                let _ = conn
                    .write(&error_response(&shared, 400, "bad request"))
                    .await;
                break;
            }
        };
        shared.requests.send_modify(|n| *n += 1);
        let (done_tx, done_rx) = oneshot::channel();
        let pending = Pending {
            req: Some(req),
            conn: conn.clone(),
            done: Some(done_tx),
            shared: shared.clone(),
        };
        // If the script has ended the send fails and dropping `pending` answers Unexpected.
        let _ = queue.send(pending);
        match done_rx.await {
            Ok(Done::Keep) => {}
            Ok(Done::Unexpected) => {
                let _ = conn
                    .write(&error_response(&shared, 500, "unexpected request"))
                    .await;
                break;
            }
            Ok(Done::Close) | Err(_) => break,
        }
    }
    conn.shutdown().await;
    shared.log(format_args!("conn {id}: closed"));
}

/// Reads one request with its body. `Ok(None)`: the peer closed (cleanly or
/// mid-request, which is logged); `Err`: the request is malformed.
async fn read_request(
    reader: &mut WireReader<ReadHalf>,
    shared: &Shared,
    conn: usize,
) -> Result<Option<Request>, String> {
    let head = match reader.head(parse_head).await {
        Ok(Some(head)) => head,
        Ok(None) => return Ok(None),
        Err(HeadError::Malformed(e)) => return Err(e),
        Err(HeadError::Eof { got }) => {
            shared.log(format_args!(
                "conn {conn}: peer closed after {got} bytes of a request head"
            ));
            return Ok(None);
        }
        Err(HeadError::Io(e)) => {
            shared.log(format_args!("conn {conn}: read error: {e}"));
            return Ok(None);
        }
    };
    let (method, url, version, headers) = head;
    let framing = wire::framing(&headers, Framing::Empty)?;
    let start = format!("rx {method} {url} HTTP/1.{version} (conn {conn})");
    let body = match reader.body(framing).await {
        Ok(body) => body,
        Err(e) => {
            let head = wire::fmt_head(&start, &headers);
            shared.log(format_args!(
                "{head}\nrequest body incomplete: {}",
                e.reason
            ));
            return Ok(None);
        }
    };
    let mut event = wire::fmt_head(&start, &headers);
    if !body.is_empty() {
        event.push_str(&format!(
            "\n  ({} body bytes) {}",
            body.len(),
            wire::show(&body)
        ));
    }
    shared.log(event);
    Ok(Some(Request::new(
        shared.name().to_owned(),
        conn,
        method,
        url,
        version,
        headers,
        body,
    )))
}

type Head = (String, String, u8, Vec<(String, String)>);

fn parse_head(buf: &[u8]) -> wire::ParseResult<Head> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let method = req.method.unwrap_or_default().to_owned();
            let url = req.path.unwrap_or_default().to_owned();
            let version = req.version.unwrap_or(1);
            Ok(Some((
                len,
                (method, url, version, wire::owned_headers(req.headers)),
            )))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// A complete response the origin sends on its own (500 unexpected, 400 bad).
fn error_response(shared: &Shared, status: u16, body: &str) -> Vec<u8> {
    shared.log(format_args!("tx {status} {body} (connection: close)"));
    format!(
        "HTTP/1.1 {status} {}\r\nDate: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        wire::reason(status),
        shared.date(),
        body.len()
    )
    .into_bytes()
}
