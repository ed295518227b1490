//! The ACME client's HTTP: one HTTP/1.1 connection over TLS per request
//! (an order is a handful of requests), on rustls with the ring provider
//! hoard uses everywhere, trusting the system's roots and a configured
//! root (a private or test CA such as pebble or step-ca).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};
use rustls_pki_types::ServerName;

/// See the module docs.
#[derive(Clone)]
pub struct Client {
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("acme::http::Client")
    }
}

impl Client {
    /// A client trusting the system's roots and, if given, the PEM
    /// certificates in `extra_root` (as origin TLS does). Errors name the
    /// file.
    pub fn new(extra_root: Option<&std::path::Path>) -> Result<Client, String> {
        let roots = hoard_config::origin_tls::roots(extra_root)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client {
            tls: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        })
    }
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Other(Box::new(e))
}

impl HttpClient for Client {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            let uri = req.uri().clone();
            let host = uri.host().ok_or(Error::Str("ACME URL without a host"))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(other)?;
            let name = ServerName::try_from(host.clone()).map_err(other)?;
            let stream = tls.connect(name, tcp).await.map_err(other)?;
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .map_err(other)?;
            tokio::spawn(conn);
            let (mut parts, body) = req.into_parts();
            // Origin form on the wire, Host from the URL.
            if let Some(pq) = uri.path_and_query() {
                parts.uri = pq.as_str().parse().map_err(other)?;
            }
            let authority = uri.authority().map_or(host, |a| a.to_string());
            parts.headers.insert(
                http::header::HOST,
                http::HeaderValue::from_str(&authority).map_err(other)?,
            );
            let resp = send
                .send_request(Request::from_parts(parts, body))
                .await
                .map_err(other)?;
            Ok(BytesResponse::from(resp))
        })
    }
}
