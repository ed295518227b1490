//! Automatic HTTPS: certificates obtained and renewed over ACME (RFC 8555)
//! for the names of listeners with `tls = { acme = [...] }`.
//!
//! ## Model
//!
//! One [`Acme`] per process keeps one certificate for all the names (one
//! SAN list), presented by every ACME listener through [`Certs`]. Its task
//! ([`Acme::start`]):
//!
//! 1. (at start, before the listeners open) loads the stored certificate
//!    (`cert.pem`, `key.pem` and `names` in the ACME directory, by default
//!    `acme` under the cache directory) if it is for the same names, and
//!    presents it from the first handshake on;
//! 2. orders a new one when there is none or a third of its lifetime is
//!    left (`renew_left`): the account is created once and its
//!    credentials kept (`account.json`, for one CA directory), every
//!    authorization is answered over HTTP-01 on the plain listeners when
//!    there is one, else over TLS-ALPN-01 on the TLS listener (RFC 8737),
//!    the key and CSR are made here (ECDSA P-256, rcgen), and the
//!    certificate is swapped into the running listeners and written
//!    (files replaced by rename; keys mode 0600);
//! 3. after a failure (the CA unreachable, an order refused) keeps
//!    presenting what it has, logs the CA's error, counts it, shows it on
//!    `/status`, and retries after `retry`, doubling up to an hour.
//!
//! Challenge answers never enter the cache and never reach the origin:
//! the pipeline answers `/.well-known/acme-challenge/` itself
//! ([`Challenges::http01`]), and a TLS-ALPN-01 handshake is closed after
//! it ([`resolver::ACME_TLS_ALPN`]).

pub mod http;
pub mod resolver;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use resolver::{Certs, Challenges};

use hoard_policy::clock::Clock;

use crate::config::acme::AcmeConfig;
use crate::config::Config;
use crate::counters::Counters;

/// Where HTTP-01 challenges are asked for (RFC 8555 §8.3).
pub const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// How often a waiting renewal looks at the clock.
const RECHECK: Duration = Duration::from_secs(1);

/// Longest wait between retries of a failed order.
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// What `/status` shows.
#[derive(Debug, Clone, Default)]
pub struct AcmeState {
    /// The names.
    pub names: Vec<String>,
    /// Expiry of the certificate presented.
    pub not_after: Option<SystemTime>,
    /// When the next order is due.
    pub next_order: Option<SystemTime>,
    /// The last failure, as the CA (or the network) said it.
    pub last_error: Option<String>,
}

/// See the module docs.
pub struct Acme {
    cfg: AcmeConfig,
    names: Vec<String>,
    dir: PathBuf,
    http01: bool,
    /// Presented by the ACME listeners.
    pub certs: Arc<Certs>,
    /// Answered by the pipeline (HTTP-01) and the listeners (TLS-ALPN-01).
    pub challenges: Arc<Challenges>,
    client: http::Client,
    counters: Arc<Counters>,
    clock: Arc<dyn Clock>,
    state: parking_lot::Mutex<AcmeState>,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme").field("names", &self.names).finish()
    }
}

/// A certificate and what it is good for.
struct Issued {
    key: Arc<CertifiedKey>,
    not_before: SystemTime,
    not_after: SystemTime,
    chain_pem: String,
    key_pem: String,
}

impl Acme {
    /// The manager for `cfg`'s ACME listeners; `None` when there are none.
    ///
    /// # Errors
    /// When `acme.ca_root` cannot be read (the message names the file).
    pub fn new(
        cfg: &Config,
        counters: Arc<Counters>,
        clock: Arc<dyn Clock>,
    ) -> Result<Option<Arc<Acme>>, String> {
        let mut names: Vec<String> = cfg
            .listeners
            .iter()
            .flat_map(|l| l.acme.iter().map(|n| n.to_ascii_lowercase()))
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Ok(None);
        }
        let dir = cfg
            .acme
            .dir
            .clone()
            .unwrap_or_else(|| cfg.cache.dir.join("acme"));
        let challenges = Arc::new(Challenges::default());
        let acme = Arc::new(Acme {
            http01: cfg
                .listeners
                .iter()
                .any(|l| l.tls.is_none() && l.acme.is_empty()),
            client: http::Client::new(cfg.acme.ca_root.as_deref())?,
            certs: Arc::new(Certs::new(challenges.clone())),
            challenges,
            state: parking_lot::Mutex::new(AcmeState {
                names: names.clone(),
                ..AcmeState::default()
            }),
            cfg: cfg.acme.clone(),
            names,
            dir,
            counters,
            clock,
        });
        // The stored certificate is presented from the first handshake on.
        let due = match acme.load() {
            Some(issued) => acme.present(&issued),
            None => acme.clock.now(),
        };
        acme.state.lock().next_order = Some(due);
        Ok(Some(acme))
    }

    /// What `/status` shows.
    pub fn state(&self) -> AcmeState {
        self.state.lock().clone()
    }

    /// Starts the task that keeps a certificate (see the module docs); it
    /// ends when `shutdown` turns true.
    pub fn start(
        self: &Arc<Self>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut due = me.state.lock().next_order.unwrap_or_else(|| me.clock.now());
            let mut retry = me.cfg.retry;
            loop {
                me.state.lock().next_order = Some(due);
                // Looked at again every second: the clock decides (a test
                // clock moved forward makes a renewal due).
                while let Ok(wait) = due.duration_since(me.clock.now()) {
                    if wait.is_zero() {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait.min(RECHECK)) => {}
                        _ = shutdown.changed() => return,
                    }
                }
                me.counters.inc(&me.counters.acme_orders);
                let result = tokio::select! {
                    r = me.order() => r,
                    _ = shutdown.changed() => return,
                };
                me.challenges.clear();
                match result {
                    Ok(issued) => {
                        me.counters.inc(&me.counters.acme_certificates_issued);
                        if let Err(e) = me.save(&issued) {
                            tracing::warn!(error = %e, dir = %me.dir.display(), "ACME: certificate not stored; it is presented until a restart");
                        }
                        due = me.present(&issued);
                        me.state.lock().last_error = None;
                        retry = me.cfg.retry;
                        tracing::info!(names = ?me.names, "ACME: certificate obtained");
                    }
                    Err(e) => {
                        me.counters.inc(&me.counters.acme_failures);
                        tracing::warn!(names = ?me.names, error = %e, retry_in = ?retry, "ACME: no certificate this time; serving with what there is");
                        me.state.lock().last_error = Some(e);
                        due = me.clock.now() + retry;
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                }
            }
        })
    }

    /// Presents `issued`; returns when it is due for renewal.
    fn present(&self, issued: &Issued) -> SystemTime {
        self.certs.install(issued.key.clone());
        self.state.lock().not_after = Some(issued.not_after);
        let life = issued
            .not_after
            .duration_since(issued.not_before)
            .unwrap_or_default();
        issued
            .not_after
            .checked_sub(life.mul_f64(self.cfg.renew_left))
            .unwrap_or(issued.not_after)
    }

    /// One order, from account to certificate.
    async fn order(&self) -> Result<Issued, String> {
        let account = self.account().await?;
        let ids: Vec<Identifier> = self.names.iter().cloned().map(Identifier::Dns).collect();
        let mut order = account
            .new_order(&NewOrder::new(&ids))
            .await
            .map_err(|e| format!("new order: {e}"))?;
        let kind = if self.http01 {
            ChallengeType::Http01
        } else {
            ChallengeType::TlsAlpn01
        };
        let mut authzs = order.authorizations();
        while let Some(a) = authzs.next().await {
            let mut a = a.map_err(|e| format!("authorization: {e}"))?;
            if a.status == AuthorizationStatus::Valid {
                continue;
            }
            let Identifier::Dns(name) = a.identifier().identifier.clone() else {
                return Err("an identifier that is not a DNS name".into());
            };
            let mut ch = a
                .challenge(kind.clone())
                .ok_or_else(|| format!("{name}: the CA offers no {kind:?} challenge"))?;
            let ka = ch.key_authorization();
            match kind {
                ChallengeType::Http01 => self
                    .challenges
                    .put_http01(ch.token.clone(), ka.as_str().to_string()),
                _ => self.challenges.put_alpn(&name, ka.digest().as_ref())?,
            }
            ch.set_ready()
                .await
                .map_err(|e| format!("{name}: challenge: {e}"))?;
        }
        let retries = RetryPolicy::new().timeout(Duration::from_secs(60));
        let status = order
            .poll_ready(&retries)
            .await
            .map_err(|e| format!("order: {e}"))?;
        if status != OrderStatus::Ready {
            let why = order
                .state()
                .error
                .as_ref()
                .map_or_else(|| format!("{status:?}"), |p| p.to_string());
            return Err(format!("order not ready: {why}"));
        }
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            rcgen::CertificateParams::new(self.names.clone()).map_err(|e| e.to_string())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key).map_err(|e| e.to_string())?;
        order
            .finalize_csr(csr.der())
            .await
            .map_err(|e| format!("finalize: {e}"))?;
        let chain = order
            .poll_certificate(&retries)
            .await
            .map_err(|e| format!("certificate: {e}"))?;
        certified(chain, key.serialize_pem())
    }

    /// The account: its stored credentials if they are for this CA, else
    /// a new one (stored).
    async fn account(&self) -> Result<Account, String> {
        let path = self.dir.join("account.json");
        let http = || Box::new(self.client.clone());
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(stored) = serde_json::from_str::<StoredAccount>(&text) {
                if stored.directory == self.cfg.directory {
                    if let Ok(a) = Account::builder_with_http(http())
                        .from_credentials(stored.credentials)
                        .await
                    {
                        return Ok(a);
                    }
                }
            }
        }
        let contact: Vec<&str> = self.cfg.contact.iter().map(String::as_str).collect();
        let (account, credentials) = Account::builder_with_http(http())
            .create(
                &NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.cfg.directory.clone(),
                None,
            )
            .await
            .map_err(|e| format!("account: {e}"))?;
        let stored = StoredAccount {
            directory: self.cfg.directory.clone(),
            credentials,
        };
        let text = serde_json::to_string(&stored).map_err(|e| e.to_string())?;
        write_file(&self.dir, "account.json", text.as_bytes(), true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(account)
    }

    /// The stored certificate, if it is for these names and still valid.
    fn load(&self) -> Option<Issued> {
        let names = std::fs::read_to_string(self.dir.join("names")).ok()?;
        if names.trim() != self.names.join(" ") {
            return None;
        }
        let chain = std::fs::read_to_string(self.dir.join("cert.pem")).ok()?;
        let key = std::fs::read_to_string(self.dir.join("key.pem")).ok()?;
        let issued = certified(chain, key)
            .map_err(|e| tracing::warn!(error = %e, dir = %self.dir.display(), "ACME: stored certificate not usable; ordering a new one"))
            .ok()?;
        (issued.not_after > self.clock.now()).then_some(issued)
    }

    /// Writes the certificate, its key and its names (each file replaced
    /// whole).
    fn save(&self, issued: &Issued) -> std::io::Result<()> {
        write_file(&self.dir, "key.pem", issued.key_pem.as_bytes(), true)?;
        write_file(&self.dir, "cert.pem", issued.chain_pem.as_bytes(), false)?;
        write_file(&self.dir, "names", self.names.join(" ").as_bytes(), false)
    }
}

/// An account's credentials, with the CA they are for.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredAccount {
    directory: String,
    credentials: AccountCredentials,
}

/// Writes `dir/name` by writing a temporary file and renaming it; a
/// `secret` file is readable by its owner only.
fn write_file(dir: &Path, name: &str, data: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
}

/// A certificate chain and its key (PEM) made ready to present, with the
/// leaf's validity.
fn certified(chain_pem: String, key_pem: String) -> Result<Issued, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate chain: {e}"))?;
    let leaf = chain.first().ok_or("an empty certificate chain")?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("certificate: {e}"))?;
    let at = |t: i64| UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
    let (not_before, not_after) = (
        at(x509.validity().not_before.timestamp()),
        at(x509.validity().not_after.timestamp()),
    );
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| format!("key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let key =
        CertifiedKey::from_der(chain, key, &provider).map_err(|e| format!("certificate: {e}"))?;
    Ok(Issued {
        key: Arc::new(key),
        not_before,
        not_after,
        chain_pem,
        key_pem,
    })
}
