//! Automatic HTTPS: certificates obtained and renewed over ACME (RFC 8555)
//! for the names of listeners with `tls = { acme = [...] }`.
//!
//! ## Model
//!
//! One [`Acme`] per process keeps one `site::Site` per certificate of
//! the configuration (a name alone, or a list of names sharing one
//! certificate), all presented by every ACME listener through [`Certs`],
//! which picks by SNI. Each site has a task ([`site`]):
//!
//! 1. (at start, before the listeners open; or when a reload adds the
//!    site) the stored certificate ([`files`]) is presented if it is for
//!    the same names and valid;
//! 2. a new one is ordered when there is none or `renew_left` of its
//!    lifetime is left (less a small jitter, so that sites renewed
//!    together spread out): the account is created once and its
//!    credentials kept, every authorization is answered over HTTP-01 on
//!    the plain listeners when there is one (and `challenges` allows it),
//!    else over TLS-ALPN-01 on the TLS listener (RFC 8737), the key and
//!    CSR are made here (ECDSA P-256, rcgen), and the certificate is
//!    swapped into the running listeners and written;
//! 3. after a failure (the CA unreachable, an order refused) the site
//!    keeps presenting what it has, logs the CA's error, counts it, shows
//!    it on `/status`, and retries after `retry`, doubling up to an hour.
//!
//! A reload that adds a certificate starts its site (it is ordered at
//! once when nothing is stored); one that removes it stops its task and
//! stops presenting it.
//!
//! ## In a cluster
//!
//! One member orders each certificate: the owner of the key
//! `acme:<first name>` by the cluster's hashing ([`share`]). Before it
//! tells the CA a challenge is ready it sends the answer to every other
//! member over the peer channel, so that whichever node the CA's
//! validation reaches answers it; the certificate it obtains goes to
//! every member the same way (the private key sealed with a key derived
//! from the cluster secret). A member that missed it (down, or joining
//! later) asks the orderer when its own copy is missing or due. When the
//! orderer is lost, the next member in the ranking orders.
//!
//! Challenge answers never enter the cache and never reach the origin:
//! the pipeline answers `/.well-known/acme-challenge/` itself
//! ([`Challenges::http01`]), and a TLS-ALPN-01 handshake is closed after
//! it ([`resolver::ACME_TLS_ALPN`]).
//!
//! ## Locking
//!
//! The site list is a mutex-guarded `Vec` touched at start, reload and
//! by peer messages; each site's state is its own small mutex, never held
//! across an await. The account is behind an async mutex so that sites
//! ordering at once create it once.

pub mod answer;
pub mod files;
pub mod http;
pub mod resolver;
pub mod share;
pub mod site;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use instant_acme::{Account, NewAccount};

pub use resolver::{Certs, Challenges};
use site::Site;

use hoard_policy::clock::Clock;

use hoard_cluster::Cluster;
use hoard_config::acme::{AcmeConfig, ChallengeKind};
use hoard_config::Config;
use hoard_metrics::counters::Counters;

/// Where HTTP-01 challenges are asked for (RFC 8555 §8.3).
pub const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// What `/status` shows of one certificate.
#[derive(Debug, Clone, Default)]
pub struct SiteState {
    /// Its names.
    pub names: Vec<String>,
    /// Expiry of the certificate presented.
    pub not_after: Option<SystemTime>,
    /// When the next order (or, on a member that does not order it, the
    /// next request to the member that does) is due.
    pub next_order: Option<SystemTime>,
    /// The last failure, as the CA (or the network) said it.
    pub last_error: Option<String>,
    /// The member that orders it (in a cluster).
    pub orderer: Option<String>,
    /// The challenge its next order answers (the last one that worked,
    /// or the next reachable one after a failed validation).
    pub challenge: Option<ChallengeKind>,
}

/// See the module docs.
pub struct Acme {
    cfg: AcmeConfig,
    dir: PathBuf,
    /// HTTP-01 is possible: a plain listener without redirect-less ACME.
    http01: AtomicBool,
    /// Every configured ACME name (lower case): the hosts whose HTTP-01
    /// challenge path the pipeline answers itself.
    names: arc_swap::ArcSwap<std::collections::HashSet<String>>,
    /// Presented by the ACME listeners.
    pub certs: Arc<Certs>,
    /// Answered by the pipeline (HTTP-01) and the listeners (TLS-ALPN-01).
    pub challenges: Arc<Challenges>,
    client: http::Client,
    account: tokio::sync::Mutex<Option<Account>>,
    counters: Arc<Counters>,
    clock: Arc<dyn Clock>,
    cluster: Option<Arc<Cluster>>,
    sites: parking_lot::Mutex<Vec<Arc<Site>>>,
    /// Set by [`Acme::start`]: sites added later start their task with it.
    shutdown: OnceLock<tokio::sync::watch::Receiver<bool>>,
}

impl std::fmt::Debug for Acme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acme")
            .field("sites", &self.sites.lock().len())
            .finish()
    }
}

/// The certificates `cfg`'s listeners ask for, each once, in order.
fn wanted(cfg: &Config) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for names in cfg.listeners.iter().flat_map(|l| l.acme.iter()) {
        if !out.contains(names) {
            out.push(names.clone());
        }
    }
    out
}

impl Acme {
    /// The manager for `cfg`'s ACME certificates (none yet is fine: a
    /// reload may add some). Stored certificates are presented at once.
    ///
    /// # Errors
    /// When `acme.ca_root` cannot be read (the message names the file).
    pub fn new(
        cfg: &Config,
        counters: Arc<Counters>,
        clock: Arc<dyn Clock>,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Arc<Acme>, String> {
        let dir = cfg
            .acme
            .dir
            .clone()
            .unwrap_or_else(|| cfg.cache.dir.join("acme"));
        let challenges = Arc::new(Challenges::new(clock.clone()));
        let acme = Arc::new(Acme {
            http01: AtomicBool::new(false),
            names: arc_swap::ArcSwap::from_pointee(std::collections::HashSet::new()),
            client: http::Client::new(cfg.acme.ca_root.as_deref())?,
            certs: Arc::new(Certs::new(challenges.clone())),
            challenges,
            account: tokio::sync::Mutex::new(None),
            cfg: cfg.acme.clone(),
            dir,
            counters,
            clock,
            cluster,
            sites: parking_lot::Mutex::new(Vec::new()),
            shutdown: OnceLock::new(),
        });
        acme.configure(cfg);
        Ok(acme)
    }

    /// True when some listener has ACME names: only then are challenge
    /// paths answered here rather than routed.
    pub fn active(&self) -> bool {
        !self.names.load().is_empty()
    }

    /// True when `host` (a `Host` field, port and case aside) is one of
    /// the ACME names: its challenge path is answered here, never by the
    /// origin. Other hosts' challenges go to the origin like any request
    /// (a site behind hoard may get its own certificates).
    pub fn serves_challenges_for(&self, host: &str) -> bool {
        let names = self.names.load();
        if names.is_empty() {
            return false;
        }
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        let host = host.trim_end_matches('.');
        names.contains(host) || names.contains(&host.to_ascii_lowercase())
    }

    /// Takes `cfg`'s certificates (at start and on each reload): sites
    /// that stay go on, new ones start (stored certificate presented,
    /// task started once [`Acme::start`] ran), removed ones stop.
    pub fn configure(self: &Arc<Self>, cfg: &Config) {
        let wanted = wanted(cfg);
        self.http01.store(
            self.cfg.challenges.contains(&ChallengeKind::Http01)
                && cfg
                    .listeners
                    .iter()
                    .any(|l| l.tls.is_none() && l.certs.is_empty() && l.acme.is_empty()),
            Ordering::Relaxed,
        );
        self.names
            .store(Arc::new(wanted.iter().flatten().cloned().collect()));
        self.certs.set_sites(&wanted);
        let mut sites = self.sites.lock();
        sites.retain(|s| {
            let keep = wanted.contains(&s.names);
            if !keep {
                s.stop();
                self.challenges.forget(&s.key);
                tracing::info!(names = ?s.names, "ACME: certificate no longer configured");
            }
            keep
        });
        for names in wanted {
            if sites.iter().any(|s| s.names == names) {
                continue;
            }
            let site = Arc::new(Site::new(names, self));
            if let Some(rx) = self.shutdown.get() {
                site.start(self.clone(), rx.clone());
            }
            sites.push(site);
        }
    }

    /// Each certificate as `/status` shows it.
    pub fn state(&self) -> Vec<SiteState> {
        let sites: Vec<Arc<Site>> = self.sites.lock().clone();
        sites
            .iter()
            .map(|s| {
                let mut st = s.state();
                st.orderer = self.cluster.as_ref().map(|_| self.orderer(s).to_string());
                st.challenge = s.challenge(&self.reachable_challenges());
                st
            })
            .collect()
    }

    /// Starts every site's task (see the module docs); they end when
    /// `shutdown` turns true.
    pub fn start(self: &Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        if self.shutdown.set(shutdown.clone()).is_err() {
            return;
        }
        for s in self.sites.lock().iter() {
            s.start(self.clone(), shutdown.clone());
        }
    }

    /// The site for exactly `names`.
    fn site(&self, names: &[String]) -> Option<Arc<Site>> {
        self.sites.lock().iter().find(|s| s.names == names).cloned()
    }

    /// The challenges this node can answer, in the order they are tried:
    /// HTTP-01 when allowed and there is a plain listener, then
    /// TLS-ALPN-01 when allowed (every ACME listener is a TLS one).
    fn reachable_challenges(&self) -> Vec<ChallengeKind> {
        let mut kinds = Vec::with_capacity(2);
        if self.http01.load(Ordering::Relaxed) {
            kinds.push(ChallengeKind::Http01);
        }
        if self.cfg.challenges.contains(&ChallengeKind::TlsAlpn01) {
            kinds.push(ChallengeKind::TlsAlpn01);
        }
        kinds
    }

    /// The account: its stored credentials if they are for this CA, else
    /// a new one (stored). Made once, then shared by every site.
    async fn account(&self) -> Result<Account, String> {
        let mut cached = self.account.lock().await;
        if let Some(a) = &*cached {
            return Ok(a.clone());
        }
        let path = self
            .cfg
            .account
            .clone()
            .unwrap_or_else(|| self.dir.join("account.json"));
        let http = || Box::new(self.client.clone());
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(stored) = serde_json::from_str::<files::StoredAccount>(&text) {
                if stored.directory == self.cfg.directory {
                    if let Ok(a) = Account::builder_with_http(http())
                        .from_credentials(stored.credentials)
                        .await
                    {
                        *cached = Some(a.clone());
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
        let stored = files::StoredAccount {
            directory: self.cfg.directory.clone(),
            credentials,
        };
        let text = serde_json::to_string(&stored).map_err(|e| e.to_string())?;
        files::write_path(&path, text.as_bytes(), true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        *cached = Some(account.clone());
        Ok(account)
    }
}
