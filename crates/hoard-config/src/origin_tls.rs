//! TLS to origins (rustls, ring provider).
//!
//! One [`rustls::ClientConfig`] per upstream, built when the configuration
//! is read (at start and on every reload): trust roots, an optional client
//! certificate, ALPN `http/1.1`. Its session cache (rustls' in-memory
//! store) is shared by every connection of the upstream, so a connection
//! opened after an idle close resumes the session instead of a full
//! handshake.
//!
//! **Roots**: the system's trust store (`rustls-native-certs`: on Debian
//! `/etc/ssl/certs/ca-certificates.crt`, or what `SSL_CERT_FILE` /
//! `SSL_CERT_DIR` name); where it holds no certificate at all (a minimal
//! container), the Mozilla roots compiled in (`webpki-roots`), with a
//! warning. `ca` adds a private bundle. `verify = false` accepts any
//! certificate (the handshake's signatures are still checked): an explicit
//! choice, logged once at start.
//!
//! A failed handshake is classified (`TlsFailure`) for the log, the
//! metrics and `Cache-Status` (`detail=tls-untrusted`, ...); a TLS server
//! is never reached over plaintext instead.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::pem::PemObject;

pub use crate::TlsSettings;

/// What an upstream's TLS connections use.
#[derive(Clone)]
pub struct OriginTls {
    /// The settings it was built from.
    pub settings: TlsSettings,
    /// The client configuration (with the shared session cache).
    pub config: Arc<rustls::ClientConfig>,
    /// The settings and the contents of the files they name: a reload
    /// that changes neither keeps this client (and its sessions and
    /// pooled connections); one that changes either starts afresh.
    pub fingerprint: u64,
}

impl std::fmt::Debug for OriginTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Reads a PEM certificate chain; errors name the file.
fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs)
}

/// The roots a TLS client of hoard trusts (to origins, and to an ACME
/// CA): the system's, or the compiled-in Mozilla roots where the system
/// has none, plus the PEM certificates in `extra` (a private CA).
/// Errors name the file.
pub fn roots(extra: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!(
            "TLS client: no trusted certificate in the system's store; using the compiled-in Mozilla roots"
        );
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(ca) = extra {
        let (added, _) = roots.add_parsable_certificates(certs(ca)?);
        if added == 0 {
            return Err(format!("{}: no usable CA certificate", ca.display()));
        }
    }
    Ok(roots)
}

/// The settings and the bytes of every file they name.
fn fingerprint(settings: &TlsSettings) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    settings.hash(&mut h);
    for path in [&settings.ca, &settings.cert, &settings.key]
        .into_iter()
        .flatten()
    {
        std::fs::read(path).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

/// Builds an upstream's TLS client. Errors name the file at fault.
pub fn build(settings: &TlsSettings) -> Result<OriginTls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if settings.verify {
        builder.with_root_certificates(roots(settings.ca.as_deref())?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    let mut config = match (&settings.cert, &settings.key) {
        (Some(cert), Some(key)) => {
            let chain = certs(cert)?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("`cert` and `key` go together".into()),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(OriginTls {
        settings: settings.clone(),
        config: Arc::new(config),
        fingerprint: fingerprint(settings),
    })
}

/// The name a connection to `host` sends and verifies.
pub fn server_name(tls: &OriginTls, host: &str) -> Result<ServerName<'static>, String> {
    let name = tls.settings.server_name.as_deref().unwrap_or(host);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_string()).map_err(|e| format!("{name:?}: {e}"))
}

/// `verify = false`: any certificate is accepted; the handshake's
/// signatures are still checked with the provider's algorithms.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
