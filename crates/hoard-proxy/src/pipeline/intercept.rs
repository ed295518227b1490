//! The `intercept` phase's handlers (see `super::phases::Intercept`): the
//! node's own answers before any site or route, never cached or forwarded.
//! ACME challenges, the HTTPS redirect and a member's probe are answered at
//! once, outside the metrics and the access log; purges (the `PURGE`
//! method, a member's purge or certificate) are counted and logged as
//! `purge`.

use http::header;
use http::{Request, Response, StatusCode};

use super::phases::{Counted, Immediate};
use super::{forwarding, Conn, Pipeline};
use crate::body::ProxyBody;
use crate::request_body::RequestBody;
use crate::tally::Tallied;

impl Pipeline {
    /// An intercept answered without waiting.
    pub(super) fn answer_now(
        &self,
        i: Immediate,
        req: &Request<RequestBody>,
        conn: &Conn,
    ) -> Response<Tallied> {
        let mut resp = Response::new(Tallied::new(ProxyBody::Empty, self.metrics.clone(), None));
        match i {
            Immediate::AcmeChallenge => {
                let token = req
                    .uri()
                    .path()
                    .strip_prefix(hoard_acme::CHALLENGE_PATH)
                    .unwrap_or_default();
                let answer = self.acme.as_ref().and_then(|a| a.challenges.http01(token));
                match answer {
                    Some(answer) => {
                        self.counters.inc(&self.counters.acme_challenges_answered);
                        resp.headers_mut().insert(
                            header::CONTENT_TYPE,
                            http::HeaderValue::from_static("application/octet-stream"),
                        );
                        *resp.body_mut() = Tallied::new(
                            ProxyBody::Full(Some(bytes::Bytes::from(answer))),
                            self.metrics.clone(),
                            None,
                        );
                    }
                    None => *resp.status_mut() = StatusCode::NOT_FOUND,
                }
            }
            // Plain HTTP on a site served over HTTPS: everything but the
            // ACME challenges is redirected (308 keeps the method).
            Immediate::HttpsRedirect => {
                match conn
                    .redirect_https
                    .and_then(|port| https_location(req, port))
                {
                    Some(location) => {
                        *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
                        resp.headers_mut().insert(header::LOCATION, location);
                    }
                    None => *resp.status_mut() = StatusCode::BAD_REQUEST,
                }
            }
            Immediate::ClusterProbe => {
                self.counters.inc(&self.counters.cluster_probes_answered);
                if let Some(c) = &self.cluster {
                    *resp.status_mut() = c.probe_answer(resp.headers_mut());
                }
            }
        }
        resp
    }

    /// A purge-like intercept: counted and logged as `purge`.
    pub(super) async fn intercept(
        &self,
        i: Counted,
        req: Request<RequestBody>,
        peer: std::net::SocketAddr,
        tls: bool,
    ) -> Response<ProxyBody> {
        match i {
            Counted::Purge => {
                let client = forwarding::client_addr(
                    peer.ip(),
                    req.headers(),
                    &self.run().cfg.server.trusted_proxies,
                );
                self.purge_method(req, client, tls).await
            }
            Counted::PeerAcme => self.peer_acme(req).await,
            Counted::PeerPurge => self.peer_purge(req).await,
        }
    }
}

/// `Location` for the HTTPS redirect: the request's host without the plain
/// listener's port, on `port`.
fn https_location<B>(req: &Request<B>, port: u16) -> Option<http::HeaderValue> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))?;
    // The name without the plain listener's port (`[v6]:80` keeps its brackets).
    let name = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    };
    if name.is_empty() {
        return None;
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = if port == 443 {
        format!("https://{name}{path}")
    } else {
        format!("https://{name}:{port}{path}")
    };
    http::HeaderValue::from_str(&location).ok()
}
