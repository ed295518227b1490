//! The admin listener: a small HTTP/1.1 JSON API beside the proxy.
//!
//! | request | answer |
//! |---|---|
//! | `POST /purge` `{"url"|"prefix"|"host"|"tag"|"regex": "...", "soft": bool}` | `{"purged": N}` (a regex: a ban, `{"purged": 0, "pending_bans": N}`, swept in the background); 400 naming the field; 429 when `max_pending_bans` bans are pending |
//! | `GET /metrics` | Prometheus text format 0.0.4 ([`prometheus`]) |
//! | `GET /status` | the dashboard's figures as JSON ([`status`]) |
//! | `GET /` | the dashboard (one embedded page that polls `/status`) |
//!
//! ## Access
//!
//! Off unless `[admin] address` (or `--admin`) is set. With a token, every
//! request must carry `Authorization: Bearer TOKEN` (the dashboard and its
//! `status` calls may pass `?token=TOKEN` instead); the comparison takes the
//! same time wherever the first difference is. A non-loopback address
//! without a token is a configuration error. Purges are logged with the
//! caller's address.
//!
//! ## Lifecycle
//!
//! [`start`] binds the socket; its accept loop and the [`status::Sampler`]
//! (one sample per second for rates and charts) stop at the proxy's shutdown.

pub mod client;
pub mod process_memory;
pub mod prometheus;
mod servers;
pub mod status;
mod trace;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::time::Instant;

use bytes::Bytes;
use hoard_store::catalog::Selector;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use hoard_proxy::body::ProxyBody;
use hoard_proxy::pipeline::purge::json_response;
use hoard_proxy::pipeline::Pipeline;

/// The dashboard page (inline CSS, JS and SVG; nothing loaded from elsewhere).
const DASHBOARD: &str = include_str!("dashboard.html");

/// Largest purge request body.
const MAX_BODY: usize = 64 << 10;

/// The admin API's state.
#[derive(Debug)]
pub struct Admin {
    pipeline: Arc<Pipeline>,
    token: Option<String>,
    started: Instant,
    sampler: status::Sampler,
}

/// Starts the admin listener's accept loop (on its bound socket) and sampler.
///
/// # Errors
/// When the socket's address cannot be read.
pub fn start(
    listener: TcpListener,
    pipeline: Arc<Pipeline>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, Vec<tokio::task::JoinHandle<()>>)> {
    let local = listener.local_addr()?;
    Ok((local, serve(listener, pipeline, shutdown)))
}

/// Serves the API on a bound listener; returns its tasks.
pub fn serve(
    listener: TcpListener,
    pipeline: Arc<Pipeline>,
    shutdown: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let admin = Arc::new(Admin {
        token: pipeline.run().cfg.admin.token.clone(),
        pipeline,
        started: Instant::now(),
        sampler: status::Sampler::default(),
    });
    tracing::info!(addr = %local, token = admin.token.is_some(), "admin listening");
    let sampler = tokio::spawn(status::sample_loop(admin.clone(), shutdown.clone()));
    let accept = tokio::spawn(accept_loop(listener, admin, shutdown));
    vec![accept, sampler]
}

async fn accept_loop(
    listener: TcpListener,
    admin: Arc<Admin>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "admin: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let admin = admin.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(admin.handle(req, peer).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

fn error(status: StatusCode, field: Option<&str>, message: &str) -> Response<ProxyBody> {
    let body = match field {
        Some(f) => serde_json::json!({ "error": message, "field": f }),
        None => serde_json::json!({ "error": message }),
    };
    json_response(status, format!("{body}\n"))
}

impl Admin {
    fn authorized<B>(&self, req: &Request<B>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let bearer = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let query = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("token=")));
        bearer
            .or(query)
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    }

    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        if !self.authorized(&req) {
            let c = &self.pipeline.counters;
            c.inc(&c.admin_unauthorized);
            tracing::info!(%peer, path = req.uri().path(), "admin: refused, no valid token");
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                None,
                "missing or wrong bearer token",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        match (req.method(), req.uri().path()) {
            (&Method::GET | &Method::HEAD, "/") => {
                let mut r = Response::new(ProxyBody::Full(Some(Bytes::from_static(
                    DASHBOARD.as_bytes(),
                ))));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                r
            }
            (&Method::GET, "/status") => {
                let body = status::status(self).to_string();
                json_response(StatusCode::OK, body)
            }
            (&Method::GET, "/metrics") => {
                let mut r =
                    Response::new(ProxyBody::Full(Some(Bytes::from(prometheus::render(self)))));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            (&Method::POST, "/purge") => self.purge(req, peer).await,
            (&Method::GET, "/trace") => self.trace(req.uri().query(), peer),
            (&Method::GET, "/purges") => {
                json_response(StatusCode::OK, format!("{}\n", self.purges()))
            }
            (&Method::POST, "/reload") => self.reload(peer).await,
            (&Method::POST, path) if path.starts_with("/upstreams/") => {
                let rest = path["/upstreams/".len()..].to_owned();
                self.set_server(req, &rest, peer).await
            }
            (_, "/" | "/status" | "/metrics" | "/purge" | "/purges" | "/trace" | "/reload") => {
                error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    None,
                    "method not allowed here",
                )
            }
            _ => error(StatusCode::NOT_FOUND, None, "no such admin endpoint"),
        }
    }

    /// `GET /purges`: the recent purges, newest first (kind, pattern, time,
    /// who asked, objects purged; `null` while a ban's sweep runs), and the
    /// bans pending (Varnish's `ban.list`).
    fn purges(&self) -> serde_json::Value {
        let secs = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        let purges: Vec<serde_json::Value> = self
            .pipeline
            .purge_log
            .entries()
            .into_iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id,
                    "time": httpdate::fmt_http_date(e.at),
                    "unix": secs(e.at),
                    "kind": e.kind,
                    "pattern": e.pattern,
                    "soft": e.soft,
                    "source": e.source,
                    "purged": e.purged,
                })
            })
            .collect();
        let bans: Vec<serde_json::Value> = self
            .pipeline
            .store
            .bans()
            .list()
            .into_iter()
            .map(|b| {
                serde_json::json!({
                    "id": b.id,
                    "time": httpdate::fmt_http_date(b.at),
                    "pattern": b.selector.pattern(),
                    "soft": b.soft,
                })
            })
            .collect();
        serde_json::json!({ "purges": purges, "bans": bans })
    }

    /// `POST /reload`: the configuration file is re-read, as on SIGHUP; the
    /// answer says what changed, or why the file was refused (409).
    async fn reload(&self, peer: SocketAddr) -> Response<ProxyBody> {
        tracing::info!(%peer, "admin: reload asked");
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let asked = self.pipeline.reload_asks.as_ref().is_some_and(|tx| {
            tx.try_send(hoard_proxy::pipeline::running::ReloadAsk { reply })
                .is_ok()
        });
        if !asked {
            return error(StatusCode::CONFLICT, None, "a reload is already waiting");
        }
        match tokio::time::timeout(std::time::Duration::from_secs(60), outcome).await {
            Ok(Ok(Ok(r))) => json_response(
                StatusCode::OK,
                format!(
                    "{}\n",
                    serde_json::json!({
                        "result": "ok",
                        "generation": r.generation,
                        "opened": r.opened.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "closed": r.closed.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "restart_needed": r.restart_needed,
                    })
                ),
            ),
            Ok(Ok(Err(e))) => json_response(
                StatusCode::CONFLICT,
                format!(
                    "{}\n",
                    serde_json::json!({ "result": "refused", "error": e })
                ),
            ),
            Ok(Err(_)) | Err(_) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "no configuration file to re-read (started without --config)",
            ),
        }
    }

    async fn purge(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<ProxyBody> {
        let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    None,
                    "body unreadable or over 64 KiB",
                )
            }
        };
        let (selector, soft) = match self.parse_purge(&body) {
            Ok(x) => x,
            Err((field, msg)) => return error(StatusCode::BAD_REQUEST, field, &msg),
        };
        if matches!(selector, Selector::Regex(_)) && self.pipeline.bans_full() {
            let c = &self.pipeline.counters;
            c.inc(&c.bans_refused);
            let max = self.pipeline.store.bans().max();
            tracing::warn!(%peer, what = ?selector, max, "regex purge refused: the ban list is full");
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                Some("regex"),
                &format!("{max} bans are pending (admin.max_pending_bans); try again when their sweeps are done"),
            );
        }
        let answer = self
            .pipeline
            .purge_everywhere(&selector, soft, &format!("admin {peer}"))
            .await;
        json_response(StatusCode::OK, answer + "\n")
    }

    /// Reads `{"url"|"prefix"|"host"|"tag"|"regex": "...", "soft": bool}`.
    fn parse_purge(&self, body: &[u8]) -> Result<(Selector, bool), (Option<&'static str>, String)> {
        let v: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| (None, format!("the body is not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or((None, "the body must be a JSON object".to_string()))?;
        const KINDS: [&str; 5] = ["url", "prefix", "host", "tag", "regex"];
        for k in obj.keys() {
            if !KINDS.contains(&k.as_str()) && k != "soft" {
                return Err((
                    None,
                    format!(
                        "unknown field {k:?}: expected one of url, prefix, host, tag, regex, soft"
                    ),
                ));
            }
        }
        let soft = match obj.get("soft") {
            None => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => return Err((Some("soft"), "must be true or false".into())),
        };
        let given: Vec<&str> = KINDS
            .iter()
            .copied()
            .filter(|k| obj.contains_key(*k))
            .collect();
        let kind = match given.as_slice() {
            [one] => *one,
            [] => return Err((None, "give one of url, prefix, host, tag, regex".into())),
            [_, second, ..] => {
                return Err((
                    KINDS.iter().copied().find(|k| k == second),
                    "give only one of url, prefix, host, tag, regex".into(),
                ))
            }
        };
        let field = KINDS.iter().copied().find(|k| *k == kind);
        let text = obj[kind]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .ok_or((field, "must be a non-empty string".to_string()))?;
        // A regular expression is taken as written (spaces may matter).
        let text = if kind == "regex" { text } else { text.trim() };
        let selector = match kind {
            "regex" => Selector::Regex(
                hoard_store::catalog::PathRegex::new(text)
                    .map_err(|e| (field, format!("not a valid regular expression: {e}")))?,
            ),
            "url" => {
                let uri: http::Uri = text
                    .parse()
                    .map_err(|e| (field, format!("{text:?} is not a URL: {e}")))?;
                let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
                    return Err((
                        field,
                        format!("{text:?}: give an absolute URL, http://host/path"),
                    ));
                };
                if scheme != "http" && scheme != "https" {
                    return Err((field, format!("{text:?}: the scheme must be http or https")));
                }
                self.pipeline
                    .url_selector(scheme, authority.as_str(), uri.path(), uri.query())
            }
            "prefix" => {
                let rest = text
                    .strip_prefix("http://")
                    .or_else(|| text.strip_prefix("https://"))
                    .ok_or((field, format!("{text:?}: start with http:// or https://")))?;
                if rest.is_empty() {
                    return Err((field, "name at least a host".into()));
                }
                // The host part as keys hold it (lowercase).
                let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let scheme = &text[..text.len() - rest.len()];
                Selector::Prefix(format!("{scheme}{}{path}", host.to_ascii_lowercase()))
            }
            "host" => {
                if text.contains(['/', ' ', '?', '#']) {
                    return Err((
                        field,
                        format!("{text:?}: a host name, without scheme or path"),
                    ));
                }
                Selector::Host(text.trim_end_matches('.').to_ascii_lowercase())
            }
            _ => {
                if text.len() > hoard_policy::tags::MAX_TAG_LEN {
                    return Err((field, "longer than 256 bytes".into()));
                }
                Selector::Tag(text.to_string())
            }
        };
        Ok((selector, soft))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
