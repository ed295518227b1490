//! The certificates a TLS listener with `acme` names presents, and the
//! answers to ACME challenges.
//!
//! ## Model
//!
//! [`Certs`] is a rustls `ResolvesServerCert`: a handshake gets the
//! certificate issued for the names (swapped in place when a renewal
//! lands: the next handshake presents it, open connections go on), or,
//! when its ALPN is `acme-tls/1` (RFC 8737), the challenge certificate
//! made for its server name. HTTP-01 key authorizations (RFC 8555 §8.3)
//! are kept beside them for the plain listeners
//! ([`Challenges::http01`]). A challenge's answer stays until its
//! authorization is final: the CA may validate it several times.
//!
//! ## Locking
//!
//! The issued certificate is an `ArcSwap`; the challenge maps are small
//! mutex-guarded maps, read once per challenge request or handshake.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Pending challenge answers.
#[derive(Debug, Default)]
pub struct Challenges {
    http01: parking_lot::Mutex<HashMap<String, String>>,
    alpn: parking_lot::Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl Challenges {
    /// The key authorization for an HTTP-01 `token`, if one is pending.
    pub fn http01(&self, token: &str) -> Option<String> {
        self.http01.lock().get(token).cloned()
    }

    pub(crate) fn put_http01(&self, token: String, key_authorization: String) {
        self.http01.lock().insert(token, key_authorization);
    }

    /// A TLS-ALPN-01 answer for `name`: a self-signed certificate with
    /// the critical acmeIdentifier extension holding `digest` (the
    /// SHA-256 of the key authorization).
    pub(crate) fn put_alpn(&self, name: &str, digest: &[u8]) -> Result<(), String> {
        let mut params =
            rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        // `CertifiedKey::new`, not `from_der`: the key check parses the
        // certificate, which rejects the critical acmeIdentifier extension.
        let signer = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(der)
            .map_err(|e| e.to_string())?;
        self.alpn.lock().insert(
            name.to_ascii_lowercase(),
            Arc::new(CertifiedKey::new(vec![cert.der().clone()], signer)),
        );
        Ok(())
    }

    /// Forgets every answer (the order is final).
    pub(crate) fn clear(&self) {
        self.http01.lock().clear();
        self.alpn.lock().clear();
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Certs {
    issued: arc_swap::ArcSwapOption<CertifiedKey>,
    pub(crate) challenges: Arc<Challenges>,
}

impl Certs {
    /// No certificate yet.
    pub fn new(challenges: Arc<Challenges>) -> Certs {
        Certs {
            issued: arc_swap::ArcSwapOption::empty(),
            challenges,
        }
    }

    /// Presents `key` from the next handshake on.
    pub fn install(&self, key: Arc<CertifiedKey>) {
        self.issued.store(Some(key));
    }

    /// True once a certificate is installed.
    pub fn has_certificate(&self) -> bool {
        self.issued.load().is_some()
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello
            .alpn()
            .is_some_and(|mut p| p.any(|p| p == ACME_TLS_ALPN))
        {
            let name = hello.server_name()?.to_ascii_lowercase();
            return self.challenges.alpn.lock().get(&name).cloned();
        }
        self.issued.load_full()
    }
}
