//! A listener's certificate files read and checked: the chain, its key,
//! and the DNS names the leaf answers for (what `hoard check` and each
//! listener's SNI table use).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate read from its files, with the names it answers for.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The chain and its signing key.
    pub key: Arc<CertifiedKey>,
    /// The leaf's DNS names (subjectAltName), lower case; wildcards as
    /// written (`*.example.com`).
    pub names: Vec<String>,
}

/// Why a certificate and key pair cannot be presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The certificate file: missing, unreadable, not PEM, no certificate.
    Cert(String),
    /// The key file: missing, unreadable, not PEM, no key, an unusable key.
    Key(String),
    /// The key is not the certificate's.
    Mismatch(String),
    /// The certificate has no DNS name to be picked by.
    NoNames(String),
}

impl LoadError {
    /// Which file of the pair is at fault: `"cert"`, `"key"`, or `None`
    /// for the pair as a whole.
    pub fn part(&self) -> Option<&'static str> {
        match self {
            LoadError::Cert(_) => Some("cert"),
            LoadError::Key(_) => Some("key"),
            LoadError::Mismatch(_) | LoadError::NoNames(_) => None,
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Cert(m)
            | LoadError::Key(m)
            | LoadError::Mismatch(m)
            | LoadError::NoNames(m) => f.write_str(m),
        }
    }
}

/// Reads a certificate chain and its key (PEM) and the leaf's DNS names.
///
/// # Errors
/// See [`LoadError`]; each message names the file.
pub fn load(cert: &Path, key: &Path) -> Result<Loaded, LoadError> {
    let c = cert.display();
    let text = std::fs::read(cert).map_err(|e| LoadError::Cert(format!("{c}: {e}")))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<_, _>>()
        .map_err(|e| LoadError::Cert(format!("{c}: not PEM: {e}")))?;
    let leaf = chain.first().ok_or_else(|| {
        LoadError::Cert(format!(
            "{c}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)"
        ))
    })?;
    let names = dns_names(leaf).map_err(|e| LoadError::Cert(format!("{c}: {e}")))?;
    let k = key.display();
    let text = std::fs::read(key).map_err(|e| LoadError::Key(format!("{k}: {e}")))?;
    let der = PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => LoadError::Key(format!(
            "{k}: no PEM private key in it (expected -----BEGIN PRIVATE KEY-----)"
        )),
        e => LoadError::Key(format!("{k}: not PEM: {e}")),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signer = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| LoadError::Key(format!("{k}: {e}")))?;
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(LoadError::Mismatch(format!(
            "{k} is not the key of {c} (a renewed certificate with the old key, or files swapped?)"
        )))
        }
        Err(e) => return Err(LoadError::Cert(format!("{c}: {e}"))),
    }
    if names.is_empty() {
        return Err(LoadError::NoNames(format!(
            "{c}: the certificate has no DNS name in its subjectAltName, so no server name (SNI) can pick it"
        )));
    }
    Ok(Loaded {
        key: Arc::new(certified),
        names,
    })
}

/// The DNS names of a certificate's subjectAltName, lower case, without
/// a trailing dot.
fn dns_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("not a certificate: {e}"))?;
    let san = x509
        .subject_alternative_name()
        .map_err(|e| format!("subjectAltName: {e}"))?;
    Ok(san
        .map(|s| {
            s.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(n) => {
                        Some(n.trim_end_matches('.').to_ascii_lowercase())
                    }
                    _ => None,
                })
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests {
    use super::testing::write;
    use super::*;

    #[test]
    fn bad_files_say_which_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a_cert, a_key) = write(d, "a", &["a.example"]);
        let (_, b_key) = write(d, "b", &["b.example"]);
        let missing = d.join("missing.pem");
        let e = load(&missing, &a_key).unwrap_err();
        assert_eq!(e.part(), Some("cert"), "{e}");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let text = d.join("text.pem");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let e = load(&text, &a_key).unwrap_err();
        assert!(
            e.part() == Some("cert") && e.to_string().contains("no PEM certificate"),
            "{e}"
        );
        // The key file given as the certificate, and the other way round.
        let e = load(&a_key, &a_key).unwrap_err();
        assert_eq!(e.part(), Some("cert"), "{e}");
        let e = load(&a_cert, &a_cert).unwrap_err();
        assert!(
            e.part() == Some("key") && e.to_string().contains("no PEM private key"),
            "{e}"
        );
        let e = load(&a_cert, &b_key).unwrap_err();
        assert!(
            matches!(e, LoadError::Mismatch(_)) && e.to_string().contains("is not the key of"),
            "{e}"
        );
        // An IP address only: nothing SNI can pick it by.
        let (ip_cert, ip_key) = write(d, "ip", &["127.0.0.1"]);
        let e = load(&ip_cert, &ip_key).unwrap_err();
        assert!(matches!(e, LoadError::NoNames(_)), "{e}");
    }
}
