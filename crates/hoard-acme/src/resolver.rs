//! The certificates a TLS listener with `acme` names presents, and the
//! answers to ACME challenges.
//!
//! ## Model
//!
//! [`Certs`] holds every ACME certificate; each listener resolves through
//! a [`ListenerCerts`] (a rustls `ResolvesServerCert`) limited to its own
//! `acme` list: a handshake gets the certificate issued for its server
//! name (SNI), or the listener's first certificate when it names none or
//! another (as nginx's default server: the client's check then fails, as
//! it should); or, when its ALPN is `acme-tls/1` (RFC 8737), the challenge
//! certificate made for its server name. A renewal swaps a certificate
//! in place: the next handshake presents it, open connections go on.
//! HTTP-01 key authorizations (RFC 8555 §8.3) are kept beside them for
//! the plain listeners ([`Challenges::http01`]). A challenge's answer
//! stays until its order is final (the CA may validate it several
//! times), or, when another member of a cluster made the order and sent
//! it here, for [`PUSHED_FOR`] by hoard's clock (then it is no longer
//! given, and dropped when the next answer is kept).
//!
//! ## Locking
//!
//! What handshakes read is one `ArcSwap` map from name to certificate,
//! rebuilt whole (under a mutex) when a certificate is installed or a
//! site removed; the challenge maps are small mutex-guarded maps, read
//! once per challenge request or handshake.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hoard_policy::clock::Clock;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// How long an answer sent by the member that made the order is kept.
pub const PUSHED_FOR: Duration = Duration::from_secs(600);

/// Pending challenge answers, each with the site it is for and, when
/// another member sent it, until when it is kept (by hoard's clock).
pub struct Challenges {
    http01: parking_lot::Mutex<HashMap<String, Answer<String>>>,
    alpn: parking_lot::Mutex<HashMap<String, Answer<Arc<CertifiedKey>>>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Challenges")
            .field("http01", &self.http01.lock().len())
            .field("alpn", &self.alpn.lock().len())
            .finish()
    }
}

#[derive(Debug)]
struct Answer<T> {
    value: T,
    site: String,
    until: Option<SystemTime>,
}

impl<T> Answer<T> {
    /// Still to be given at `now`: an answer of this node's own order
    /// until it is final, one another member sent until its time is up.
    fn live(&self, now: SystemTime) -> bool {
        self.until.is_none_or(|u| u > now)
    }
}

impl Challenges {
    /// No answer yet; `clock` ends answers other members sent.
    pub fn new(clock: Arc<dyn Clock>) -> Challenges {
        Challenges {
            http01: parking_lot::Mutex::new(HashMap::new()),
            alpn: parking_lot::Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// The key authorization for an HTTP-01 `token`, if one is pending.
    pub fn http01(&self, token: &str) -> Option<String> {
        self.pending(&self.http01, token)
    }

    /// The TLS-ALPN-01 certificate for `name`, if one is pending.
    fn alpn(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.pending(&self.alpn, name)
    }

    fn pending<T: Clone>(
        &self,
        map: &parking_lot::Mutex<HashMap<String, Answer<T>>>,
        key: &str,
    ) -> Option<T> {
        let now = self.clock.now();
        map.lock()
            .get(key)
            .filter(|a| a.live(now))
            .map(|a| a.value.clone())
    }

    /// Keeps an HTTP-01 answer for `site`'s order; `until` for one
    /// another member sent.
    pub(crate) fn put_http01(
        &self,
        site: &str,
        token: String,
        key_authorization: String,
        until: Option<SystemTime>,
    ) {
        let mut map = self.http01.lock();
        if let Some(now) = until.and_then(|u| u.checked_sub(PUSHED_FOR)) {
            map.retain(|_, a| a.until.is_none_or(|u| u > now));
        }
        map.insert(
            token,
            Answer {
                value: key_authorization,
                site: site.to_string(),
                until,
            },
        );
    }

    /// A TLS-ALPN-01 answer for `name`: a self-signed certificate with
    /// the critical acmeIdentifier extension holding `digest` (the
    /// SHA-256 of the key authorization).
    pub(crate) fn put_alpn(
        &self,
        site: &str,
        name: &str,
        digest: &[u8],
        until: Option<SystemTime>,
    ) -> Result<(), String> {
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
        let mut map = self.alpn.lock();
        if let Some(now) = until.and_then(|u| u.checked_sub(PUSHED_FOR)) {
            map.retain(|_, a| a.until.is_none_or(|u| u > now));
        }
        map.insert(
            name.to_ascii_lowercase(),
            Answer {
                value: Arc::new(CertifiedKey::new(vec![cert.der().clone()], signer)),
                site: site.to_string(),
                until,
            },
        );
        Ok(())
    }

    /// Forgets the answers of this node's own order for `site` (it is
    /// final); answers another member sent stay for their time (its order
    /// may still be under validation).
    pub(crate) fn clear(&self, site: &str) {
        self.http01
            .lock()
            .retain(|_, a| a.site != site || a.until.is_some());
        self.alpn
            .lock()
            .retain(|_, a| a.site != site || a.until.is_some());
    }

    /// Forgets every answer for `site` (it was removed by a reload).
    pub(crate) fn forget(&self, site: &str) {
        self.http01.lock().retain(|_, a| a.site != site);
        self.alpn.lock().retain(|_, a| a.site != site);
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Certs {
    presented: arc_swap::ArcSwap<Presented>,
    /// Each site's certificate, in configuration order; what `presented`
    /// is built from.
    sites: parking_lot::Mutex<Vec<(Vec<String>, Option<Arc<CertifiedKey>>)>>,
    pub(crate) challenges: Arc<Challenges>,
}

/// What handshakes read.
#[derive(Debug, Default)]
struct Presented {
    by_name: HashMap<String, Arc<CertifiedKey>>,
}

impl Certs {
    /// No certificate yet.
    pub fn new(challenges: Arc<Challenges>) -> Certs {
        Certs {
            presented: arc_swap::ArcSwap::from_pointee(Presented::default()),
            sites: parking_lot::Mutex::new(Vec::new()),
            challenges,
        }
    }

    /// The sites, in configuration order: certificates of sites that stay
    /// are kept, those of sites no longer listed dropped. A new site that
    /// shares a name with a dropped one (a SAN list edited by a reload)
    /// presents the dropped one's certificate until its own is installed,
    /// so the names it had go on being served meanwhile.
    pub fn set_sites(&self, sites: &[Vec<String>]) {
        let mut current = self.sites.lock();
        let next = sites
            .iter()
            .map(|names| {
                let exact = current.iter().find(|(n, _)| n == names);
                let kept = match exact {
                    Some((_, k)) => k.clone(),
                    None => current
                        .iter()
                        .filter(|(n, _)| !sites.contains(n))
                        .find(|(n, k)| k.is_some() && n.iter().any(|x| names.contains(x)))
                        .and_then(|(_, k)| k.clone()),
                };
                (names.clone(), kept)
            })
            .collect();
        *current = next;
        self.publish(&current);
    }

    /// Presents `key` for `names` (a site) from the next handshake on.
    /// A site no longer configured (a late renewal, or a member's message,
    /// after a reload removed it) is not presented again.
    pub fn install(&self, names: &[String], key: Arc<CertifiedKey>) {
        let mut current = self.sites.lock();
        let Some(site) = current.iter_mut().find(|(n, _)| n == names) else {
            return;
        };
        site.1 = Some(key);
        self.publish(&current);
    }

    fn publish(&self, sites: &[(Vec<String>, Option<Arc<CertifiedKey>>)]) {
        let mut p = Presented::default();
        for (names, key) in sites {
            let Some(key) = key else { continue };
            for n in names {
                p.by_name.insert(n.clone(), key.clone());
            }
        }
        self.presented.store(Arc::new(p));
    }

    /// True once a certificate for `name` is installed.
    pub fn has_certificate(&self, name: &str) -> bool {
        self.presented.load().by_name.contains_key(name)
    }
}

/// What one listener presents: the certificates of its own `acme` list,
/// picked by SNI from [`Certs`]; a handshake naming none of them (or no
/// name) gets the listener's first certificate.
#[derive(Debug)]
pub struct ListenerCerts {
    all: Arc<Certs>,
    /// The listener's certificates, in its configuration order.
    sites: Vec<Vec<String>>,
}

impl Certs {
    /// The resolver of a listener whose `acme` list is `sites`.
    pub fn for_listener(self: &Arc<Self>, sites: &[Vec<String>]) -> Arc<ListenerCerts> {
        Arc::new(ListenerCerts {
            all: self.clone(),
            sites: sites.to_vec(),
        })
    }
}

impl ListenerCerts {
    fn has(&self, name: &str) -> bool {
        self.sites.iter().any(|s| s.iter().any(|n| n == name))
    }

    /// The certificate issued for exactly `name` (lower case), when it is
    /// one of this listener's names and its certificate is installed
    /// (no fallback: a listener with certificate files picks its own).
    pub fn issued_for(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if !self.has(name) {
            return None;
        }
        self.all.presented.load().by_name.get(name).cloned()
    }
}

impl ResolvesServerCert for ListenerCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello
            .alpn()
            .is_some_and(|mut p| p.any(|p| p == ACME_TLS_ALPN))
        {
            let name = hello.server_name()?.to_ascii_lowercase();
            return if self.has(&name) {
                self.all.challenges.alpn(&name)
            } else {
                None
            };
        }
        let presented = self.all.presented.load();
        hello
            .server_name()
            .map(str::to_ascii_lowercase)
            .filter(|n| self.has(n))
            .and_then(|n| presented.by_name.get(&n))
            .or_else(|| {
                self.sites
                    .iter()
                    .find_map(|s| s.first().and_then(|n| presented.by_name.get(n)))
            })
            .cloned()
    }
}
