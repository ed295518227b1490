//! Certificates made in the test (rcgen): a CA, server certificates it
//! signs (any names, any validity), client certificates, and the rustls
//! server configurations a TLS origin uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate and its key, as PEM and as rustls takes them.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
    /// The public key's SubjectPublicKeyInfo, DER (what a browser's
    /// `--ignore-certificate-errors-spki-list` pins, hashed).
    pub spki: Vec<u8>,
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Issued {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &self.cert_pem).expect("pki: write certificate");
        std::fs::write(&key, &self.key_pem).expect("pki: write key");
        (cert, key)
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// A test certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestCa")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A new self-signed CA.
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("pki: CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "hoard test CA");
        let key = KeyPair::generate().expect("pki: CA key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("pki: CA certificate"),
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.pem()).expect("pki: write CA");
    }

    /// A certificate for `names`, valid from 2000 to 2100.
    pub fn issue(&self, names: &[&str]) -> Issued {
        self.issue_valid(names, (2000, 2100))
    }

    /// A certificate for `names`, valid from January 1st of `years.0` to
    /// January 1st of `years.1` (an expired one: both in the past).
    pub fn issue_valid(&self, names: &[&str], years: (i32, i32)) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("pki: params");
        params.not_before = date_time_ymd(years.0, 1, 1);
        params.not_after = date_time_ymd(years.1, 1, 1);
        let key = KeyPair::generate().expect("pki: key");
        let cert = params.signed_by(&key, &self.issuer).expect("pki: sign");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            spki: rcgen::PublicKeyData::subject_public_key_info(&key),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    /// A server configuration presenting `server`; with `client_auth`,
    /// it requires a client certificate signed by this CA.
    pub fn server_config(&self, server: &Issued, client_auth: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("pki: versions");
        let builder = if client_auth {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.issuer.der().clone()).expect("pki: CA root");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("pki: client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut cfg = builder
            .with_single_cert(vec![server.der.clone()], server.key())
            .expect("pki: server config");
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}
