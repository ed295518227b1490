//! The client side of the admin API, for `hoard purge`.

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
    let body = serde_json::json!({ what.kind: what.value, "soft": what.soft }).to_string();
    let mut req = Request::post("/purge")
        .header(http::header::HOST, authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
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
    if !status.is_success() {
        let msg = v["error"].as_str().unwrap_or("no error text");
        let field = v["field"]
            .as_str()
            .map(|f| format!(" (field {f:?})"))
            .unwrap_or_default();
        return Err(format!("the admin API answered {status}: {msg}{field}"));
    }
    let purged = v["purged"].as_u64().ok_or_else(|| {
        format!(
            "unexpected answer from the admin API: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
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
