//! Certificates from files picked by the client's server name (SNI):
//! `[[listener]] tls = { certs = [{ cert = "a.pem", key = "a.key" }, ...] }`.
//!
//! ## Model
//!
//! A [`FileCerts`] is built from a listener's certificate files when the
//! listener opens and again at each reload (the files are read anew, so a
//! renewed certificate is presented from the next handshake, while
//! connections already open keep the one they shook hands with). Each
//! certificate answers for the DNS names in its leaf's subjectAltName. A
//! handshake's server name is looked up in this order:
//!
//! 1. an ACME certificate of the same listener (`tls.acme`) issued for
//!    exactly that name: a name listed under `acme` is meant to be served
//!    by ACME, a file certificate covering it too stands in only until
//!    ACME's is issued;
//! 2. a file certificate naming it exactly (the earlier one when two do);
//! 3. a file certificate with a wildcard for it, the earlier one when two
//!    have: `*.example.com` stands for one whole left-most label
//!    (RFC 6125 §6.4.3), so it covers `a.example.com`, never
//!    `example.com` nor `a.b.example.com`;
//! 4. the first file certificate: no server name, or one no certificate
//!    covers (as nginx's default server; the client's check then fails).
//!
//! A `FileCerts` never changes: a reload builds a new one and swaps the
//! listener's state (see `crate::Proxy::reload`). A TLS-ALPN-01 handshake
//! (`acme-tls/1`, RFC 8737) goes to the ACME resolver alone.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use hoard_acme::resolver::{ListenerCerts, ACME_TLS_ALPN};
use hoard_config::TlsConfig;

pub use hoard_config::cert_files::{load, LoadError, Loaded};

/// See the module docs.
pub struct FileCerts {
    /// Exact names to certificates (the earlier certificate kept).
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// For `*.parent`: `parent` to certificates.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The first certificate: for no server name or an unknown one.
    first: Arc<CertifiedKey>,
    /// The listener's ACME certificates, when it has `acme` names too.
    acme: Option<Arc<ListenerCerts>>,
}

impl fmt::Debug for FileCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileCerts")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field("wildcard", &self.wildcard.keys().collect::<Vec<_>>())
            .field("acme", &self.acme.is_some())
            .finish()
    }
}

impl FileCerts {
    /// The resolver over `certs` (in configuration order), with the
    /// listener's ACME certificates first for their names. `None` when
    /// `certs` is empty.
    pub fn new(certs: Vec<Loaded>, acme: Option<Arc<ListenerCerts>>) -> Option<FileCerts> {
        let first = certs.first()?.key.clone();
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for c in certs {
            for n in c.names {
                let (map, name) = match n.strip_prefix("*.") {
                    Some(parent) => (&mut wildcard, parent.to_string()),
                    // Other wildcard forms (`f*.example.com`) are not
                    // matched (RFC 6125 §6.4.3 allows clients to refuse
                    // them, and rustls does).
                    None if n.contains('*') => continue,
                    None => (&mut exact, n),
                };
                map.entry(name).or_insert_with(|| c.key.clone());
            }
        }
        Some(FileCerts {
            exact,
            wildcard,
            first,
            acme,
        })
    }

    /// Reads `files` (see [`load`]) into a resolver.
    ///
    /// # Errors
    /// The first file that cannot be used, named.
    pub fn load(
        files: &[TlsConfig],
        acme: Option<Arc<ListenerCerts>>,
    ) -> Result<Arc<FileCerts>, String> {
        let loaded = files
            .iter()
            .map(|f| load(&f.cert, &f.key).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        FileCerts::new(loaded, acme)
            .map(Arc::new)
            .ok_or_else(|| "no certificate".to_string())
    }

    /// True when the listener has ACME certificates too (it then offers
    /// the TLS-ALPN-01 protocol).
    pub fn with_acme(&self) -> bool {
        self.acme.is_some()
    }

    /// The certificate for server name `name` (`None`: the client sent
    /// none), by the order of the module docs.
    pub fn choose(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = name else {
            return self.first.clone();
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self.acme.as_ref().and_then(|a| a.issued_for(&name)) {
            return k;
        }
        if let Some(k) = self.exact.get(&name) {
            return k.clone();
        }
        match name.split_once('.') {
            Some((label, parent)) if !label.is_empty() => self.wildcard.get(parent),
            _ => None,
        }
        .unwrap_or(&self.first)
        .clone()
    }
}

impl ResolvesServerCert for FileCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello
            .alpn()
            .is_some_and(|mut p| p.any(|p| p == ACME_TLS_ALPN))
        {
            return self.acme.as_ref()?.resolve(hello);
        }
        Some(self.choose(hello.server_name()))
    }
}

#[cfg(test)]
pub(crate) mod tests;
