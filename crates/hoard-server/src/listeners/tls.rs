//! TLS for listeners (rustls, ring provider): HTTP/2 and HTTP/1.1 by ALPN.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use hoard_config::TlsConfig;

/// Builds an acceptor from PEM files. Errors name the file.
pub fn acceptor(cfg: &TlsConfig, http2: bool) -> Result<tokio_rustls::TlsAcceptor, String> {
    let mut config = server_config(cfg, rustls::DEFAULT_VERSIONS)?;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The QUIC (HTTP/3) configuration of a listener from the same PEM files:
/// TLS 1.3 only, ALPN `h3`, no 0-RTT (early data could replay unsafe
/// requests; see `docs/http3.md`).
pub fn quic(cfg: &TlsConfig) -> Result<quinn::ServerConfig, String> {
    quic_from(server_config(cfg, &[&rustls::version::TLS13])?)
        .map_err(|e| format!("{}: {e}", cfg.cert.display()))
}

fn quic_from(mut config: rustls::ServerConfig) -> Result<quinn::ServerConfig, String> {
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = 0;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(config).map_err(|e| e.to_string())?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
}

fn server_config(
    cfg: &TlsConfig,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<rustls::ServerConfig, String> {
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
    rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: {e}", cfg.key.display()))
}

/// An acceptor presenting the certificates ACME keeps (see `hoard_acme`),
/// offering `acme-tls/1` last so that TLS-ALPN-01 validation can connect.
pub fn acme_acceptor(
    certs: Arc<dyn rustls::server::ResolvesServerCert>,
    http2: bool,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    resolver_acceptor(certs, http2, true)
}

/// An acceptor presenting certificate files by SNI (see [`super::sni`]),
/// offering `acme-tls/1` too when the listener has ACME names as well.
pub fn sni_acceptor(
    certs: Arc<super::sni::FileCerts>,
    http2: bool,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let acme = certs.with_acme();
    resolver_acceptor(certs, http2, acme)
}

fn resolver_acceptor(
    certs: Arc<dyn rustls::server::ResolvesServerCert>,
    http2: bool,
    acme: bool,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let mut config = resolver_config(certs, rustls::DEFAULT_VERSIONS)?;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    if acme {
        config
            .alpn_protocols
            .push(hoard_acme::resolver::ACME_TLS_ALPN.to_vec());
    }
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The QUIC (HTTP/3) configuration of an ACME listener: the certificates
/// ACME keeps, by SNI (TLS-ALPN-01 is validated over TCP only).
pub fn acme_quic(
    certs: Arc<dyn rustls::server::ResolvesServerCert>,
) -> Result<quinn::ServerConfig, String> {
    quic_from(resolver_config(certs, &[&rustls::version::TLS13])?)
}

/// The QUIC (HTTP/3) configuration of a listener with certificate files
/// by SNI: the same resolver as its TCP side.
pub fn sni_quic(certs: Arc<super::sni::FileCerts>) -> Result<quinn::ServerConfig, String> {
    quic_from(resolver_config(certs, &[&rustls::version::TLS13])?)
}

fn resolver_config(
    certs: Arc<dyn rustls::server::ResolvesServerCert>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(certs))
}
