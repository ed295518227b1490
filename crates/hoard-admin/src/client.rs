//! The client side of the admin API, for `hoard purge` and `hoard reload`.

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// What to purge, as `hoard purge` takes it.
#[derive(Debug, Clone)]
pub struct PurgeRequest {
    /// `url`, `prefix`, `host`, `tag` or `regex`.
    pub kind: &'static str,
    /// The URL, prefix, host, tag or regular expression.
    pub value: String,
    /// Mark stale instead of removing.
    pub soft: bool,
}

/// What the admin API answered to a purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeAnswer {
    /// Objects removed or made stale (0 for a regex purge: its sweep
    /// counts them later); in a cluster, the members' total.
    pub purged: u64,
    /// For a regex purge: bans pending, this one included.
    pub pending_bans: Option<u64>,
    /// In a cluster: each member's state and count, in member order.
    pub members: Vec<PurgeMember>,
}

/// How one cluster member took a purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeMember {
    /// Its name.
    pub node: String,
    /// `acked`, `timeout` or `unreachable`.
    pub state: String,
    /// What it removed or made stale, when it said.
    pub purged: Option<u64>,
}

/// Sends a purge to the admin API at `admin` (`http://host:port`) and
/// returns what it answered.
///
/// # Errors
/// A message for the operator: unreachable, refused (401), or the API's
/// own error text.
pub async fn purge(
    admin: &str,
    token: Option<&str>,
    what: &PurgeRequest,
) -> Result<PurgeAnswer, String> {
    let body = serde_json::json!({ what.kind: what.value, "soft": what.soft }).to_string();
    let (status, v, bytes) = call(admin, token, http::Method::POST, "/purge", Some(body)).await?;
    if !status.is_success() {
        return Err(api_error(status, &v));
    }
    let purged = v["purged"].as_u64().ok_or_else(|| unexpected(&bytes))?;
    let members = v["members"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|m| PurgeMember {
                    node: m["node"].as_str().unwrap_or_default().to_string(),
                    state: m["state"].as_str().unwrap_or_default().to_string(),
                    purged: m["purged"].as_u64(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(PurgeAnswer {
        purged,
        pending_bans: v["pending_bans"].as_u64(),
        members,
    })
}

/// `POST /upstreams/NAME/servers/SERVER` with `{"state": STATE}`: the
/// server's state afterwards (`up`, `down`, `drain`).
///
/// # Errors
/// Unreachable, 401, or the API's own error text (no such upstream or
/// server, a bad state).
pub async fn set_server(
    admin: &str,
    token: Option<&str>,
    upstream: &str,
    server: &str,
    state: &str,
) -> Result<String, String> {
    let path = format!("/upstreams/{upstream}/servers/{server}");
    let body = serde_json::json!({ "state": state }).to_string();
    let (status, v, bytes) = call(admin, token, http::Method::POST, &path, Some(body)).await?;
    if !status.is_success() {
        return Err(api_error(status, &v));
    }
    v["state"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| unexpected(&bytes))
}

/// `GET /trace?QUERY`: hands each line (one request, JSON) to `line` as it
/// comes, until the stream ends (its `limit`) or `line` returns false.
///
/// # Errors
/// Unreachable, 401, a bad filter (the API's text).
pub async fn trace(
    admin: &str,
    token: Option<&str>,
    query: &str,
    mut line: impl FnMut(&str) -> bool,
) -> Result<(), String> {
    let base: Uri = admin
        .parse()
        .map_err(|e| format!("--admin {admin:?}: {e}"))?;
    let authority = base
        .authority()
        .ok_or_else(|| format!("--admin {admin:?}: no host"))?
        .clone();
    let stream = tokio::net::TcpStream::connect(authority.as_str())
        .await
        .map_err(|e| format!("cannot reach the admin listener at {authority}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .uri(format!("/trace?{query}"))
        .header(http::header::HOST, authority.as_str());
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    let status = resp.status();
    let mut body = resp.into_body();
    if !status.is_success() {
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        return Err(api_error(status, &v));
    }
    let mut pending = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("admin listener at {authority}: {e}"))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        pending.extend_from_slice(data);
        while let Some(at) = pending.iter().position(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(&pending[..at]).into_owned();
            pending.drain(..=at);
            if !line(&text) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// How a reload ended, as the admin API tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new configuration is in effect: its generation.
    Applied {
        /// The running configuration's generation now.
        generation: u64,
        /// Settings that changed but wait for a restart (`POST /reload`
        /// only; `/status` does not keep them).
        restart_needed: Vec<String>,
    },
    /// Refused; the running configuration stays: why (the `hoard check`
    /// text).
    Refused(String),
}

/// `POST /reload`: the running hoard re-reads its file; waits for the
/// outcome.
///
/// # Errors
/// Unreachable, 401, or an answer that is not a reload's outcome (no
/// configuration file, a reload already waiting).
pub async fn reload(admin: &str, token: Option<&str>) -> Result<ReloadOutcome, String> {
    let (status, v, _) = call(admin, token, http::Method::POST, "/reload", None).await?;
    match v["result"].as_str() {
        Some("ok") if status.is_success() => Ok(ReloadOutcome::Applied {
            generation: v["generation"].as_u64().unwrap_or_default(),
            restart_needed: v["restart_needed"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        }),
        Some("refused") => Ok(ReloadOutcome::Refused(
            v["error"].as_str().unwrap_or("no error text").to_string(),
        )),
        _ => Err(api_error(status, &v)),
    }
}

/// The last reload `GET /status` reports: its number (reloads tried since
/// the start) and outcome; `None` before the first.
///
/// # Errors
/// Unreachable, 401, or not a `/status` document.
pub async fn last_reload(
    admin: &str,
    token: Option<&str>,
) -> Result<Option<(u64, ReloadOutcome)>, String> {
    let (status, v, bytes) = call(admin, token, http::Method::GET, "/status", None).await?;
    if !status.is_success() {
        return Err(api_error(status, &v));
    }
    let last = &v["config"]["last_reload"];
    if last.is_null() {
        return Ok(None);
    }
    let number = last["number"].as_u64().ok_or_else(|| unexpected(&bytes))?;
    let outcome = match last["result"].as_str() {
        Some("ok") => ReloadOutcome::Applied {
            generation: last["generation"].as_u64().unwrap_or_default(),
            restart_needed: Vec::new(),
        },
        Some("refused") => ReloadOutcome::Refused(
            last["error"]
                .as_str()
                .unwrap_or("no error text")
                .to_string(),
        ),
        _ => return Err(unexpected(&bytes)),
    };
    Ok(Some((number, outcome)))
}

/// One request to the admin API at `admin` (`http://host:port`): the
/// answer's status, its JSON (`null` when not JSON) and its bytes.
async fn call(
    admin: &str,
    token: Option<&str>,
    method: http::Method,
    path: &str,
    json: Option<String>,
) -> Result<(http::StatusCode, serde_json::Value, Bytes), String> {
    let base: Uri = admin
        .parse()
        .map_err(|e| format!("--admin {admin:?}: {e}"))?;
    if base.scheme_str() != Some("http") {
        return Err(format!("--admin {admin:?}: expected http://host:port"));
    }
    let authority = base
        .authority()
        .ok_or_else(|| format!("--admin {admin:?}: no host"))?
        .clone();
    let stream = tokio::net::TcpStream::connect(authority.as_str())
        .await
        .map_err(|e| format!("cannot reach the admin listener at {authority}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, authority.as_str());
    if json.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(json.unwrap_or_default())))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("admin listener at {authority}: {e}"))?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    Ok((status, v, bytes))
}

/// The admin API's error answer, for the operator.
fn api_error(status: http::StatusCode, v: &serde_json::Value) -> String {
    let msg = v["error"].as_str().unwrap_or("no error text");
    let field = v["field"]
        .as_str()
        .map(|f| format!(" (field {f:?})"))
        .unwrap_or_default();
    format!("the admin API answered {status}: {msg}{field}")
}

fn unexpected(bytes: &[u8]) -> String {
    format!(
        "unexpected answer from the admin API: {}",
        String::from_utf8_lossy(bytes)
    )
}
