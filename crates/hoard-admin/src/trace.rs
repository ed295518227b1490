//! `GET /trace`: requests as they happen, one JSON line each (see
//! `hoard_proxy::pipeline::trace`), streamed until the client goes or
//! `limit` lines were sent: varnishlog's answer to "why was this a miss".
//! Filters, all optional: `url` (the target starts with it), `status`,
//! `outcome` (`hit`, `miss`, `pass`...), `limit`.
//!
//! Each watcher has a task that reads the broadcast and forwards the
//! lines that pass its filters; it ends when its client goes. A watcher
//! that falls more than `TRACE_BACKLOG` requests behind gets a line
//! `{"lagged": N}` saying how many it missed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::{Response, StatusCode};

use super::{error, Admin};
use hoard_origin::error::BoxError;
use hoard_proxy::body::ProxyBody;
use hoard_proxy::pipeline::trace::Traced;

/// What a watcher asked for.
#[derive(Debug, Default)]
struct Filter {
    url: Option<String>,
    status: Option<u16>,
    outcome: Option<String>,
    limit: Option<u64>,
}

impl Filter {
    fn parse(query: Option<&str>) -> Result<Filter, String> {
        let mut f = Filter::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent(v);
            match k {
                "url" => f.url = Some(v),
                "status" => {
                    f.status = Some(
                        v.parse()
                            .map_err(|_| format!("status={v:?}: not a status"))?,
                    )
                }
                "outcome" => f.outcome = Some(v),
                "limit" => {
                    f.limit = Some(
                        v.parse()
                            .map_err(|_| format!("limit={v:?}: not a number"))?,
                    )
                }
                "token" => {}
                other => {
                    return Err(format!(
                        "{other:?}: filters are url, status, outcome and limit"
                    ))
                }
            }
        }
        Ok(f)
    }

    fn passes(&self, t: &Traced) -> bool {
        self.url
            .as_ref()
            .is_none_or(|u| t.target.starts_with(u.as_str()))
            && self.status.is_none_or(|s| s == t.status)
            && self.outcome.as_ref().is_none_or(|o| o == t.outcome)
    }
}

/// `%XX` decoded (a query's value).
fn percent(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1..i + 3)) {
            (b'%', Some(h))
                if std::str::from_utf8(h).is_ok_and(|h| u8::from_str_radix(h, 16).is_ok()) =>
            {
                out.push(
                    u8::from_str_radix(std::str::from_utf8(h).unwrap_or("0"), 16).unwrap_or(0),
                );
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The streamed body: lines from the watcher's task.
#[derive(Debug)]
struct Lines(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for Lines {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Admin {
    /// See the module docs.
    pub(super) fn trace(
        &self,
        query: Option<&str>,
        peer: std::net::SocketAddr,
    ) -> Response<ProxyBody> {
        let filter = match Filter::parse(query) {
            Ok(f) => f,
            Err(m) => return error(StatusCode::BAD_REQUEST, None, &m),
        };
        tracing::info!(%peer, ?filter, "admin: a trace is watched");
        let mut rx = self.pipeline.trace.subscribe();
        let c = &self.pipeline.counters;
        c.inc(&c.trace_watchers);
        let (tx, lines) = tokio::sync::mpsc::channel::<Bytes>(256);
        tokio::spawn(async move {
            let mut sent = 0u64;
            loop {
                let got = tokio::select! {
                    got = rx.recv() => got,
                    () = tx.closed() => return,
                };
                let line = match got {
                    Ok(t) if filter.passes(&t) => t.to_json(),
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        format!("{{\"lagged\":{n}}}\n")
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if tx.send(Bytes::from(line)).await.is_err() {
                    return;
                }
                sent += 1;
                if filter.limit.is_some_and(|l| sent >= l) {
                    return;
                }
            }
        });
        let mut r = Response::new(ProxyBody::Wrapped(Box::new(Lines(lines))));
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-ndjson"),
        );
        r.headers_mut().insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-store"),
        );
        r
    }
}
