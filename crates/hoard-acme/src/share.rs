//! ACME in a cluster: who orders a certificate, and how its challenge
//! answers and the certificate reach the other members.
//!
//! ## Model
//!
//! A site's orderer is the owner of `acme:<first name>` by the cluster's
//! hashing over the members that are up (this node without a cluster).
//! Members speak over the peer channel: a signed `POST` of [`PATH`] on a
//! member's main listener with one JSON [`Message`]:
//!
//! | message | sent by | answer |
//! |---|---|---|
//! | `answer` | the orderer, before it tells the CA a challenge is ready | 200 once the member answers it |
//! | `certificate` | the orderer, once it has one | 200 once presented (and stored) |
//! | `fetch` | a member whose certificate is missing or due | 200 with a `certificate`, or 404 |
//!
//! A certificate's private key travels sealed (ChaCha20-Poly1305 under a
//! key derived from the cluster secret, the site's names and the chain as
//! associated data; the receiver checks the certificate names them).
//! Messages are signed with their body and taken once; unsigned,
//! altered or replayed ones, answers and certificates from a member that
//! is not the site's orderer, and any request on a node without a
//! cluster, get 403.
//!
//! With a Redis/Valkey bus (`[cluster.bus]`) the orderer also keeps the
//! certificate message there (`PREFIX:value:acme:<names>`, the key sealed
//! as above), and every member looks there first when its copy is missing
//! or due: a member that was down or joined later takes it even when the
//! orderer is gone, and a new orderer does not order again a certificate
//! that is not due.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use ring::aead;

use super::answer::Answer;
use super::files::{self, Issued};
use super::site::Site;
use super::Acme;

/// The peer endpoint on every member's main listener.
pub const PATH: &str = "/.hoard/cluster/acme";

/// How long a member is given to take a message.
const WAIT: Duration = Duration::from_secs(5);

/// The associated data of a sealed key: the names and the whole chain,
/// so that the key opens only beside the certificate it was sealed with.
fn sealed_with(names: &[String], chain: &str) -> Vec<u8> {
    let mut aad = names.join(" ").into_bytes();
    aad.push(0);
    aad.extend_from_slice(chain.as_bytes());
    aad
}

/// The bus key of a site's certificate.
fn bus_key(site: &Site) -> String {
    format!("acme:{}", site.key)
}

/// What the key sealing is derived for.
const SEALING: &str = "hoard acme certificate key";

/// See the module docs.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Message {
    /// A challenge answer for the site's current order.
    Answer {
        /// The site's names.
        site: Vec<String>,
        /// The answer.
        answer: Answer,
    },
    /// The site's certificate: its chain, and its key sealed.
    Certificate {
        /// The site's names.
        site: Vec<String>,
        /// The chain (PEM).
        chain: String,
        /// The key (PEM), sealed: nonce, then ciphertext and tag.
        #[serde(with = "crate::answer::b64")]
        sealed_key: Vec<u8>,
    },
    /// Asks for the site's certificate.
    Fetch {
        /// The site's names.
        site: Vec<String>,
    },
}

impl Acme {
    /// The member that orders `site`'s certificate.
    pub(crate) fn orderer(&self, site: &Site) -> Arc<str> {
        match &self.cluster {
            Some(c) => c.owner(format!("acme:{}", site.names[0]).as_bytes()),
            None => Arc::from("this node"),
        }
    }

    /// True when this node orders `site`'s certificate.
    pub(crate) fn orders(&self, site: &Site) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|c| *self.orderer(site) == *c.node())
    }

    /// Answers `answer` here (for `until` when another member sent it).
    pub(crate) fn put_answer(
        &self,
        site: &str,
        answer: &Answer,
        until: Option<std::time::SystemTime>,
    ) -> Result<(), String> {
        match answer {
            Answer::Http01 {
                token,
                key_authorization,
            } => {
                self.challenges
                    .put_http01(site, token.clone(), key_authorization.clone(), until);
                Ok(())
            }
            Answer::TlsAlpn01 { name, digest } => {
                self.challenges.put_alpn(site, name, digest, until)
            }
        }
    }

    /// Sends `msg` to every other member at once; how many took it.
    async fn tell_members(&self, msg: &Message) -> usize {
        let Some(c) = &self.cluster else { return 0 };
        let body = Bytes::from(serde_json::to_vec(msg).unwrap_or_default());
        let view = c.view();
        let sends = view.members.iter().filter(|m| m.is_other()).map(|m| {
            let body = body.clone();
            async move {
                match c.call(m, Method::POST, PATH, Some(body), WAIT).await {
                    Ok((StatusCode::OK, _)) => true,
                    other => {
                        tracing::warn!(member = %m.name, answer = ?other.map(|(s, _)| s), "ACME: a member did not take a message");
                        false
                    }
                }
            }
        });
        futures_util::future::join_all(sends)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count()
    }

    /// Sends a challenge answer to every other member.
    pub(crate) async fn share_answer(&self, site: &Site, answer: &Answer) {
        self.tell_members(&Message::Answer {
            site: site.names.clone(),
            answer: answer.clone(),
        })
        .await;
    }

    /// Sends a new certificate to every other member.
    pub(crate) async fn share_certificate(&self, site: &Site, issued: &Issued) {
        if self.cluster.is_none() {
            return;
        }
        match self.certificate_message(site, issued) {
            Ok(msg) => {
                self.keep_on_bus(site, &msg).await;
                let n = self.tell_members(&msg).await;
                tracing::info!(names = ?site.names, members = n, "ACME: certificate sent to the members");
            }
            Err(e) => tracing::warn!(error = %e, "ACME: certificate not sent to the members"),
        }
    }

    /// With a Redis/Valkey bus, keeps the certificate message there too:
    /// a member that missed the push (down, or started later) takes it
    /// from there even when the orderer is gone.
    async fn keep_on_bus(&self, site: &Site, msg: &Message) {
        let Some(c) = &self.cluster else { return };
        let Some(bus) = &c.bus else { return };
        if !c.has_secret() {
            // Sealed under a key anyone can derive: not for a shared store.
            tracing::warn!(names = ?site.names, "ACME: no cluster secret, so the certificate's key is not kept on the bus");
            return;
        }
        let value = serde_json::to_vec(msg).unwrap_or_default();
        if let Err(e) = bus.put_value(&bus_key(site), &value).await {
            tracing::warn!(error = %e, names = ?site.names, "ACME: certificate not kept on the bus; members fetch it from the orderer");
        }
    }

    /// The certificate kept on the bus for `site`, if there is a bus and
    /// one for the same names that this cluster's secret opens.
    pub(crate) async fn kept_on_bus(&self, site: &Site) -> Result<Option<Issued>, String> {
        let Some(bus) = self.cluster.as_ref().and_then(|c| c.bus.as_ref()) else {
            return Ok(None);
        };
        let Some(value) = bus
            .value(&bus_key(site))
            .await
            .map_err(|e| format!("bus: {e}"))?
        else {
            return Ok(None);
        };
        match serde_json::from_slice(&value) {
            Ok(Message::Certificate {
                site: names,
                chain,
                sealed_key,
            }) if names == site.names => self.unseal(&names, chain, sealed_key).map(Some),
            _ => Err("bus: a value that is not this certificate".into()),
        }
    }

    /// Asks `orderer` for `site`'s certificate.
    pub(crate) async fn fetch(&self, site: &Site, orderer: &str) -> Result<Issued, String> {
        let c = self.cluster.as_ref().ok_or("not in a cluster")?;
        let view = c.view();
        let m = view
            .find(orderer)
            .ok_or_else(|| format!("member {orderer}: not in the view"))?;
        let body = serde_json::to_vec(&Message::Fetch {
            site: site.names.clone(),
        })
        .map_err(|e| e.to_string())?;
        let (status, body) = c
            .call(m, Method::POST, PATH, Some(body.into()), WAIT)
            .await
            .map_err(|e| format!("member {orderer}: {e}"))?;
        if status != StatusCode::OK {
            return Err(format!("member {orderer}: no certificate yet ({status})"));
        }
        match serde_json::from_slice(&body) {
            Ok(Message::Certificate {
                site: names,
                chain,
                sealed_key,
            }) if names == site.names => self.unseal(&names, chain, sealed_key),
            _ => Err(format!(
                "member {orderer}: an answer that is not a certificate"
            )),
        }
    }

    fn certificate_message(&self, site: &Site, issued: &Issued) -> Result<Message, String> {
        let c = self.cluster.as_ref().ok_or("not in a cluster")?;
        let key = aead::LessSafeKey::new(
            aead::UnboundKey::new(&aead::CHACHA20_POLY1305, &c.sealing_key(SEALING))
                .map_err(|e| e.to_string())?,
        );
        let mut nonce = [0u8; aead::NONCE_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|e| e.to_string())?;
        let mut sealed = issued.key_pem.as_bytes().to_vec();
        key.seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(sealed_with(&site.names, &issued.chain_pem).as_slice()),
            &mut sealed,
        )
        .map_err(|e| e.to_string())?;
        let mut out = nonce.to_vec();
        out.extend(sealed);
        Ok(Message::Certificate {
            site: site.names.clone(),
            chain: issued.chain_pem.clone(),
            sealed_key: out,
        })
    }

    fn unseal(&self, names: &[String], chain: String, sealed: Vec<u8>) -> Result<Issued, String> {
        let c = self.cluster.as_ref().ok_or("not in a cluster")?;
        if sealed.len() < aead::NONCE_LEN {
            return Err("a sealed key too short".into());
        }
        let key = aead::LessSafeKey::new(
            aead::UnboundKey::new(&aead::CHACHA20_POLY1305, &c.sealing_key(SEALING))
                .map_err(|e| e.to_string())?,
        );
        let (nonce, rest) = sealed.split_at(aead::NONCE_LEN);
        let mut rest = rest.to_vec();
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).map_err(|e| e.to_string())?;
        let plain = key
            .open_in_place(
                nonce,
                aead::Aad::from(sealed_with(names, &chain).as_slice()),
                &mut rest,
            )
            .map_err(|_| "the key does not open with this cluster's secret")?;
        let key_pem = String::from_utf8(plain.to_vec()).map_err(|e| e.to_string())?;
        let issued = files::certified_for(chain, key_pem, names)?;
        if issued.not_after <= self.clock.now() {
            return Err("an expired certificate".into());
        }
        Ok(issued)
    }

    /// A member's message (see the module docs); `from` names it.
    pub async fn peer_message(&self, from: &str, body: &[u8]) -> (StatusCode, String) {
        let msg: Message = match serde_json::from_slice(body) {
            Ok(m) => m,
            Err(e) => return (StatusCode::BAD_REQUEST, format!("{{\"error\":\"{e}\"}}\n")),
        };
        let names = match &msg {
            Message::Answer { site, .. }
            | Message::Certificate { site, .. }
            | Message::Fetch { site } => site.clone(),
        };
        let Some(site) = self.site(&names) else {
            return (
                StatusCode::NOT_FOUND,
                "{\"error\":\"no such certificate here\"}\n".into(),
            );
        };
        // Answers and certificates come from the site's orderer only (by
        // this node's view): another member, even one holding the secret,
        // cannot make this node answer a challenge or present a key.
        if !matches!(msg, Message::Fetch { .. }) && *self.orderer(&site) != *from {
            tracing::warn!(member = %from, names = ?names, "ACME: a message from a member that does not order this certificate, refused");
            return (
                StatusCode::FORBIDDEN,
                "{\"error\":\"not this certificate's orderer\"}\n".into(),
            );
        }
        match msg {
            Message::Answer { answer, .. } => {
                let until = self.clock.now() + super::resolver::PUSHED_FOR;
                match self.put_answer(&site.key, &answer, Some(until)) {
                    Ok(()) => {
                        tracing::info!(member = %from, names = ?names, "ACME: answering a challenge for another member's order");
                        (StatusCode::OK, "{}\n".into())
                    }
                    Err(e) => (StatusCode::BAD_REQUEST, format!("{{\"error\":{e:?}}}\n")),
                }
            }
            Message::Certificate {
                chain, sealed_key, ..
            } => match self.unseal(&names, chain, sealed_key) {
                Ok(issued) => {
                    let taken = site.take(self, issued);
                    tracing::info!(member = %from, names = ?names, newer = taken, "ACME: certificate from another member");
                    (StatusCode::OK, format!("{{\"taken\":{taken}}}\n"))
                }
                Err(e) => (StatusCode::BAD_REQUEST, format!("{{\"error\":{e:?}}}\n")),
            },
            Message::Fetch { .. } => match site
                .issued()
                .filter(|i| i.not_after > self.clock.now())
                .map(|i| self.certificate_message(&site, &i))
            {
                Some(Ok(m)) => (
                    StatusCode::OK,
                    serde_json::to_string(&m).unwrap_or_default(),
                ),
                Some(Err(e)) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("{{\"error\":{e:?}}}\n"),
                ),
                None => (
                    StatusCode::NOT_FOUND,
                    "{\"error\":\"no certificate yet\"}\n".into(),
                ),
            },
        }
    }
}
