//! `POST /upstreams/NAME/servers/HOST:PORT` with `{"state": "up" | "down" |
//! "drain" | "auto"}`: an origin server taken out of service, put back, or
//! returned to its health (see `hoard_origin::health`), in the running
//! configuration, until a reload or restart. `hoard upstream set` sends
//! it.

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use super::{error, json_response, Admin};
use hoard_origin::health::Admin as State;
use hoard_proxy::body::ProxyBody;

impl Admin {
    /// See the module docs; `rest` is the path after `/upstreams/`.
    pub(super) async fn set_server(
        &self,
        req: Request<Incoming>,
        rest: &str,
        peer: std::net::SocketAddr,
    ) -> Response<ProxyBody> {
        use http_body_util::BodyExt;
        let Some((name, server)) = rest.split_once("/servers/") else {
            return error(
                StatusCode::NOT_FOUND,
                None,
                "no such admin endpoint (POST /upstreams/NAME/servers/HOST:PORT)",
            );
        };
        let body = match http_body_util::Limited::new(req.into_body(), super::MAX_BODY)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    None,
                    "body unreadable or over 64 KiB",
                )
            }
        };
        let state = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("state").and_then(|s| s.as_str()).map(str::to_owned));
        let Some(state) = state.as_deref().and_then(State::parse) else {
            return error(
                StatusCode::BAD_REQUEST,
                Some("state"),
                "the body is {\"state\": \"up\" | \"down\" | \"drain\" | \"auto\"}",
            );
        };
        let run = self.pipeline.run();
        let Some(up) = run.upstreams.iter().find(|u| u.cfg.name == name) else {
            let known: Vec<&str> = run.upstreams.iter().map(|u| u.cfg.name.as_str()).collect();
            return error(
                StatusCode::NOT_FOUND,
                None,
                &format!("no upstream {name:?} (configured: {})", known.join(", ")),
            );
        };
        if !up.set_admin(server, state) {
            let known: Vec<&str> = up.server_states().iter().map(|s| s.address).collect();
            return error(
                StatusCode::NOT_FOUND,
                None,
                &format!(
                    "upstream {name:?} has no server {server:?} (its servers: {})",
                    known.join(", ")
                ),
            );
        }
        tracing::info!(%peer, upstream = %name, server = %server, state = state.as_str(), "admin: server state set");
        let now = up
            .server_states()
            .into_iter()
            .find(|s| s.address == server)
            .map_or("unknown", |s| s.state);
        json_response(
            StatusCode::OK,
            format!(
                "{}\n",
                serde_json::json!({
                    "upstream": name,
                    "server": server,
                    "admin": state.as_str(),
                    "state": now,
                })
            ),
        )
    }
}
