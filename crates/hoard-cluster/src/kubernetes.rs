//! Members from the Kubernetes API: the ready endpoints of a Service's
//! EndpointSlices (`discovery.k8s.io/v1`).
//!
//! Every refresh lists the slices labelled with the Service's name
//! (`GET /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices?
//! labelSelector=kubernetes.io/service-name=SVC`) with the pod's
//! service-account token (re-read each time: tokens are rotated) over TLS
//! verified with the service account's CA. An endpoint counts when its
//! `conditions.ready` is not false (RFC-free, but the API's own rule: an
//! absent condition means ready), with the slice's port of the configured
//! name or number (the first one by default). The service account needs
//! `list` on `endpointslices` in the namespace (a Role; see
//! `docs/cluster.md`). Listing, not watching: the refresh is the bound on
//! how late a change is seen, as with DNS, and no connection is held.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderValue, ACCEPT, AUTHORIZATION};
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::BodyExt;

use hoard_config::cluster::KubernetesSource;
use hoard_config::{HostHeader, ServerAddr, UpstreamConfig};
use hoard_metrics::counters::Counters;
use hoard_origin::{tls, OriginRequest, Upstream};

/// The most a listing may weigh.
const MAX_BODY: usize = 4 << 20;

/// The API client of one Service's slices.
#[derive(Debug)]
pub struct EndpointSlices {
    upstream: Upstream,
    path: String,
    port: Option<String>,
    token_file: std::path::PathBuf,
}

impl EndpointSlices {
    /// A client for `k` (nothing connected yet).
    ///
    /// # Errors
    /// A malformed API URL, or a CA file that cannot be read.
    pub fn new(k: &KubernetesSource) -> Result<EndpointSlices, String> {
        let (tls_on, rest) = match k.api.split_once("://") {
            Some(("https", r)) => (true, r),
            Some(("http", r)) => (false, r),
            _ => return Err(format!("{:?}: expected https://HOST:PORT", k.api)),
        };
        let authority = if rest
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            rest.to_string()
        } else {
            format!("{rest}:{}", if tls_on { 443 } else { 80 })
        };
        let mut server = ServerAddr::http(authority);
        server.host = server
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        server.tls = tls_on;
        let mut u = UpstreamConfig::new("kubernetes API", vec![server]);
        u.host = HostHeader::Server;
        if tls_on {
            let settings = tls::TlsSettings {
                ca: Some(k.ca_file.clone()),
                ..tls::TlsSettings::verified()
            };
            u.tls = Some(tls::build(&settings)?);
        }
        let path = format!(
            "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D{}",
            k.namespace, k.service
        );
        Ok(EndpointSlices {
            upstream: Upstream::new(
                u,
                std::sync::Arc::new(Counters::default()),
                std::sync::Arc::new(hoard_policy::clock::SystemClock),
            ),
            path,
            port: k.port.clone(),
            token_file: k.token_file.clone(),
        })
    }

    /// The ready endpoints' addresses now.
    ///
    /// # Errors
    /// The API unreachable, an answer other than 200, or one that is not a
    /// list of slices.
    pub async fn ready(&self) -> Result<HashSet<SocketAddr>, String> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if let Ok(token) = std::fs::read_to_string(&self.token_file) {
            if let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", token.trim())) {
                headers.insert(AUTHORIZATION, v);
            }
        }
        let req = OriginRequest {
            method: Method::GET,
            uri: Uri::try_from(self.path.as_str()).map_err(|e| e.to_string())?,
            headers,
            body: None,
            interim: None,
            tries: None,
        };
        let resp = self
            .upstream
            .send(req)
            .await
            .map_err(|e| format!("kubernetes API: {e}"))?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("kubernetes API: reading the answer: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).to_string();
            return Err(format!("kubernetes API answered {status}: {text}"));
        }
        let list: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("kubernetes API: not JSON: {e}"))?;
        ready_endpoints(&list, self.port.as_deref())
    }
}

/// The ready endpoints of an `EndpointSliceList`, with the port named (or
/// numbered) `port`, or each slice's first port. Pure.
///
/// # Errors
/// When `list` has no `items`.
pub fn ready_endpoints(
    list: &serde_json::Value,
    port: Option<&str>,
) -> Result<HashSet<SocketAddr>, String> {
    let items = list["items"]
        .as_array()
        .ok_or("kubernetes API: the answer has no items")?;
    let mut found = HashSet::new();
    for slice in items {
        let ports = slice["ports"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let chosen = ports.iter().find(|p| match port {
            None => true,
            Some(want) => {
                p["name"].as_str() == Some(want)
                    || p["port"].as_u64().map(|n| n.to_string()).as_deref() == Some(want)
            }
        });
        let Some(number) = chosen
            .and_then(|p| p["port"].as_u64())
            .and_then(|n| u16::try_from(n).ok())
        else {
            continue;
        };
        for e in slice["endpoints"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if e["conditions"]["ready"].as_bool() == Some(false) {
                continue;
            }
            for a in e["addresses"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                if let Some(ip) = a.as_str().and_then(|s| s.parse::<IpAddr>().ok()) {
                    found.insert(SocketAddr::new(ip, number));
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_endpoints_with_their_port() {
        let list = serde_json::json!({
            "kind": "EndpointSliceList",
            "items": [
                {
                    "ports": [{"name": "admin", "port": 8001}, {"name": "http", "port": 8080}],
                    "endpoints": [
                        {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                        {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                        {"addresses": ["10.0.0.3"]}
                    ]
                },
                {"ports": [{"name": "other", "port": 1}], "endpoints": [{"addresses": ["10.0.0.9"]}]}
            ]
        });
        let mut by_name: Vec<String> = ready_endpoints(&list, Some("http"))
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        by_name.sort();
        assert_eq!(by_name, ["10.0.0.1:8080", "10.0.0.3:8080"]);
        let by_number = ready_endpoints(&list, Some("8080")).unwrap();
        assert_eq!(by_number.len(), 2);
        // The first port of each slice by default.
        let first = ready_endpoints(&list, None).unwrap();
        assert!(first.contains(&"10.0.0.1:8001".parse().unwrap()));
        assert!(first.contains(&"10.0.0.9:1".parse().unwrap()));
        assert!(ready_endpoints(&serde_json::json!({}), None).is_err());
    }
}
