//! One ACME certificate (a site: one name, or names sharing one SAN list)
//! and the task that keeps it.
//!
//! ## Lifecycle
//!
//! `Site::new` presents the stored certificate if there is one; the task
//! (`Site::start`) then loops: wait until due (looked at every second:
//! the clock decides, so a test clock moved forward makes a renewal due;
//! a certificate sent by another member wakes it at once), then either
//! order (this node is the site's orderer) or ask the orderer for its
//! certificate, and compute the next due time from the outcome:
//!
//! | outcome | next due |
//! |---|---|
//! | a certificate | its renewal point, less the jitter |
//! | a failure | `retry`, doubling up to an hour |
//!
//! The task ends when the site is removed by a reload or at shutdown.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, RetryPolicy,
};

use super::files::{self, Issued};
use super::{Acme, SiteState};
use hoard_config::acme::ChallengeKind;

/// How often a waiting task looks at the clock.
const RECHECK: Duration = Duration::from_secs(1);

/// Longest wait between retries of a failed order.
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// Longest a renewal (an order, or a fetch from a member) may take: a CA
/// that stalls fails it, and it is retried like any failure.
const ORDER_TIMEOUT: Duration = Duration::from_secs(300);

/// Largest share of the lifetime a renewal is moved earlier by, so that
/// certificates obtained together are not all renewed at one instant.
const JITTER: f64 = 0.02;

/// Why a renewal brought no certificate.
enum Failed {
    /// This node's order failed (the CA's or the network's error); counted
    /// in `acme_failures`.
    Order(String),
    /// The orderer had nothing (newer) for this node, or was not reached.
    Fetch(String),
}

/// True when `issued` ends later than `have` (or there is none): the one
/// to present of the two.
fn ends_later(issued: &Issued, have: Option<&Issued>) -> bool {
    have.is_none_or(|have| issued.not_after > have.not_after)
}

/// Where a site's new certificate came from (a renewal's outcome).
enum Renewed {
    /// This node ordered it from the CA.
    Ordered(Issued),
    /// A member kept it on the cluster's bus.
    FromBus(Issued),
    /// The orderer answered a fetch.
    FromOrderer(Issued),
}

/// See the module docs.
pub(crate) struct Site {
    /// Its names, lower case, sorted.
    pub names: Vec<String>,
    /// The names joined by spaces: the site's key in challenges, peer
    /// messages and logs.
    pub key: String,
    state: parking_lot::Mutex<State>,
    /// Wakes the task: a certificate arrived from another member.
    wake: tokio::sync::Notify,
    stop: tokio::sync::watch::Sender<bool>,
    /// Held while the site's files are written (see [`Site::adopt`]).
    saving: parking_lot::Mutex<()>,
}

struct State {
    issued: Option<Issued>,
    due: SystemTime,
    retry: Duration,
    last_error: Option<String>,
    /// The challenge to answer first: the one that last worked, or after
    /// a failed validation the next reachable one (a blocked port 80 makes
    /// the next order use TLS-ALPN-01 on 443).
    prefer: Option<ChallengeKind>,
}

impl Site {
    pub fn new(names: Vec<String>, acme: &Acme) -> Site {
        let now = acme.clock.now();
        let site = Site {
            key: names.join(" "),
            state: parking_lot::Mutex::new(State {
                issued: None,
                due: now,
                retry: acme.cfg.retry,
                last_error: None,
                prefer: None,
            }),
            wake: tokio::sync::Notify::new(),
            stop: tokio::sync::watch::channel(false).0,
            saving: parking_lot::Mutex::new(()),
            names,
        };
        if let Some(issued) = files::load(&acme.dir, &site.names, now) {
            site.present(acme, &issued, true);
        } else if let Some(earlier) = files::load_earlier(&acme.dir, &site.names, now) {
            // Presented meanwhile, not taken as this site's certificate:
            // it is ordered at once.
            acme.certs.install(&site.names, earlier.key);
        }
        site
    }

    /// What `/status` shows.
    pub fn state(&self) -> SiteState {
        let st = self.state.lock();
        SiteState {
            names: self.names.clone(),
            not_after: st.issued.as_ref().map(|i| i.not_after),
            next_order: Some(st.due),
            last_error: st.last_error.clone(),
            orderer: None,
            challenge: None,
        }
    }

    /// The challenge the next order answers, out of `reachable` (see
    /// `State::prefer`).
    pub fn challenge(&self, reachable: &[ChallengeKind]) -> Option<ChallengeKind> {
        let prefer = self.state.lock().prefer;
        prefer
            .filter(|k| reachable.contains(k))
            .or_else(|| reachable.first().copied())
    }

    /// The CA could not validate `kind`: the next order tries the next
    /// reachable challenge (round the list).
    fn validation_failed(&self, kind: ChallengeKind, reachable: &[ChallengeKind]) {
        let next = reachable
            .iter()
            .position(|k| *k == kind)
            .map(|i| reachable[(i + 1) % reachable.len()]);
        self.state.lock().prefer = next;
    }

    /// The certificate presented, if any.
    pub fn issued(&self) -> Option<Issued> {
        self.state.lock().issued.clone()
    }

    /// Ends the task (the site was removed by a reload).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Presents `issued` and makes its renewal the next due time; unless
    /// `force`, only when it ends later than the one presented (checked
    /// and set under the state lock, so that of two certificates taken at
    /// once the newer wins). True when presented.
    fn present(&self, acme: &Acme, issued: &Issued, force: bool) -> bool {
        let mut st = self.state.lock();
        if !(force || ends_later(issued, st.issued.as_ref())) {
            return false;
        }
        acme.certs.install(&self.names, issued.key.clone());
        st.due = self.renewal(issued, acme.cfg.renew_left);
        st.retry = acme.cfg.retry;
        st.last_error = None;
        st.issued = Some(issued.clone());
        true
    }

    /// The renewal point, moved earlier by up to [`JITTER`] of the
    /// lifetime, by a hash of the names and the certificate.
    fn renewal(&self, issued: &Issued, renew_left: f64) -> SystemTime {
        let at = issued.renewal(renew_left);
        let life = issued
            .not_after
            .duration_since(issued.not_before)
            .unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.key, &issued.chain_pem).hash(&mut h);
        let share = (h.finish() % 1000) as f64 / 1000.0;
        at.checked_sub(life.mul_f64(JITTER * share)).unwrap_or(at)
    }

    /// Takes a certificate another member sent (or this node fetched):
    /// presented and stored if it is newer than the one presented.
    pub fn take(&self, acme: &Acme, issued: Issued) -> bool {
        self.adopt(acme, issued, false)
    }

    /// Presents `issued` (see [`Site::present`]) and stores it. The files
    /// are written under the site's save lock and only while `issued` is
    /// still the one presented, so the stored key and chain always belong
    /// together and are the newest.
    fn adopt(&self, acme: &Acme, issued: Issued, force: bool) -> bool {
        if issued.key.cert.is_empty() || !self.present(acme, &issued, force) {
            return false;
        }
        {
            let _saving = self.saving.lock();
            let current = self
                .state
                .lock()
                .issued
                .as_ref()
                .is_some_and(|i| i.chain_pem == issued.chain_pem);
            if current {
                if let Err(e) = files::save(&acme.dir, &self.names, &issued) {
                    tracing::warn!(error = %e, names = ?self.names, "ACME: certificate not stored; it is presented until a restart");
                }
            }
        }
        self.wake.notify_one();
        true
    }

    fn newer(&self, issued: &Issued) -> bool {
        ends_later(issued, self.state.lock().issued.as_ref())
    }

    /// Starts the task (see the module docs).
    pub fn start(
        self: &Arc<Self>,
        acme: Arc<Acme>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let me = self.clone();
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            loop {
                loop {
                    let due = me.state.lock().due;
                    let Ok(wait) = due.duration_since(acme.clock.now()) else {
                        break;
                    };
                    if wait.is_zero() {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait.min(RECHECK)) => {}
                        _ = me.wake.notified() => {}
                        _ = shutdown.changed() => return,
                        _ = stop.changed() => return,
                    }
                }
                let outcome = tokio::select! {
                    r = tokio::time::timeout(ORDER_TIMEOUT, me.renew(&acme)) => {
                        r.unwrap_or_else(|_| {
                            let why = format!("no answer within {ORDER_TIMEOUT:?}");
                            Err(if acme.orders(&me) { Failed::Order(why) } else { Failed::Fetch(why) })
                        })
                    }
                    _ = shutdown.changed() => return,
                    _ = stop.changed() => return,
                };
                acme.challenges.clear(&me.key);
                match outcome {
                    Ok(Renewed::Ordered(issued)) => {
                        // Presented here first (whatever it replaces: the
                        // CA just issued it), then sent to the members.
                        me.adopt(&acme, issued.clone(), true);
                        acme.share_certificate(&me, &issued).await;
                        acme.counters.inc(&acme.counters.acme_certificates_issued);
                    }
                    Ok(Renewed::FromBus(issued)) => {
                        if me.take(&acme, issued) {
                            tracing::info!(names = ?me.names, "ACME: certificate taken from the bus");
                            acme.counters.inc(&acme.counters.acme_certificates_from_bus);
                        }
                    }
                    Ok(Renewed::FromOrderer(issued)) => {
                        if !me.take(&acme, issued) {
                            // Nothing newer (the orderer has not renewed
                            // yet): asked again after `retry`.
                            me.failed(&acme, "the orderer has no newer certificate yet".into());
                        }
                    }
                    Err(Failed::Order(e)) => {
                        // Counted once the retry is scheduled.
                        me.failed(&acme, e);
                        acme.counters.inc(&acme.counters.acme_failures);
                    }
                    Err(Failed::Fetch(e)) => me.failed(&acme, e),
                }
            }
        });
    }

    fn failed(&self, acme: &Acme, e: String) {
        let mut st = self.state.lock();
        let retry = st.retry;
        tracing::warn!(names = ?self.names, error = %e, retry_in = ?retry, "ACME: no new certificate this time; serving with what there is");
        st.last_error = Some(e);
        st.due = acme.clock.now() + retry;
        st.retry = (retry * 2).min(RETRY_MAX);
    }

    /// One renewal: a certificate kept on the bus that is not due, else
    /// an order when this node orders the site, else the orderer's
    /// certificate.
    async fn renew(&self, acme: &Acme) -> Result<Renewed, Failed> {
        // Taken first, whoever orders: no order, and no need of the orderer.
        match acme.kept_on_bus(self).await {
            Ok(Some(issued))
                if self.newer(&issued)
                    && self.renewal(&issued, acme.cfg.renew_left) > acme.clock.now() =>
            {
                return Ok(Renewed::FromBus(issued));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(names = ?self.names, error = %e, "ACME: no certificate from the bus")
            }
        }
        let orderer = acme.orderer(self);
        if !acme.orders(self) {
            return acme
                .fetch(self, &orderer)
                .await
                .map(Renewed::FromOrderer)
                .map_err(Failed::Fetch);
        }
        acme.counters.inc(&acme.counters.acme_orders);
        let issued = self.order(acme).await.map_err(Failed::Order)?;
        tracing::info!(names = ?self.names, "ACME: certificate obtained");
        Ok(Renewed::Ordered(issued))
    }

    /// One order, from account to certificate.
    async fn order(&self, acme: &Acme) -> Result<Issued, String> {
        let account = acme.account().await?;
        let ids: Vec<Identifier> = self.names.iter().cloned().map(Identifier::Dns).collect();
        let mut order = account
            .new_order(&NewOrder::new(&ids))
            .await
            .map_err(|e| format!("new order: {e}"))?;
        let reachable = acme.reachable_challenges();
        let Some(kind) = self.challenge(&reachable) else {
            return Err(format!(
                "no allowed challenge is reachable: [acme] challenges = [{}] (HTTP-01 needs a plain listener)",
                acme.cfg
                    .challenges
                    .iter()
                    .map(|c| format!("{:?}", c.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let ty = match kind {
            ChallengeKind::Http01 => ChallengeType::Http01,
            ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
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
            let Some(mut ch) = a.challenge(ty.clone()) else {
                self.validation_failed(kind, &reachable);
                return Err(format!(
                    "{name}: the CA offers no {} challenge",
                    kind.as_str()
                ));
            };
            let ka = ch.key_authorization();
            let answer = match kind {
                ChallengeKind::Http01 => super::answer::Answer::Http01 {
                    token: ch.token.clone(),
                    key_authorization: ka.as_str().to_string(),
                },
                ChallengeKind::TlsAlpn01 => super::answer::Answer::TlsAlpn01 {
                    name: name.clone(),
                    digest: ka.digest().as_ref().to_vec(),
                },
            };
            acme.put_answer(&self.key, &answer, None)?;
            // Every member answers: the CA's validation may reach any.
            acme.share_answer(self, &answer).await;
            if let Err(e) = ch.set_ready().await {
                self.validation_failed(kind, &reachable);
                return Err(format!("{name}: challenge {}: {e}", kind.as_str()));
            }
        }
        // The order's state is looked at 50 ms after the challenges are
        // ready, then at doubling waits (the crate's default starts at
        // 250 ms): a CA that validates at once (a private one) gives the
        // certificate in a fraction of a second, and a public one that
        // takes seconds is asked a handful of times more, within a minute.
        let retries = RetryPolicy::new()
            .initial_delay(Duration::from_millis(50))
            .backoff(2.0)
            .timeout(Duration::from_secs(60));
        let validated = match order.poll_ready(&retries).await {
            Ok(OrderStatus::Ready) => Ok(()),
            Ok(status) => Err(order
                .state()
                .error
                .as_ref()
                .map_or_else(|| format!("{status:?}"), |p| p.to_string())),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = validated {
            self.validation_failed(kind, &reachable);
            return Err(format!("order not ready ({}): {why}", kind.as_str()));
        }
        self.state.lock().prefer = Some(kind);
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
        files::certified(chain, key.serialize_pem())
    }
}
