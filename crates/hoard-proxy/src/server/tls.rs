//! TLS for listeners (rustls, ring provider): HTTP/2 and HTTP/1.1 by ALPN.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;

/// Builds an acceptor from PEM files. Errors name the file.
pub fn acceptor(cfg: &TlsConfig, http2: bool) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cfg.cert)
        .map_err(|e| format!("{}: {e}", cfg.cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cfg.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", cfg.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&cfg.key)
        .map_err(|e| format!("{}: {e}", cfg.key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", cfg.key.display()))?;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
