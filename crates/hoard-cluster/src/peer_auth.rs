//! Peer requests: how a member says "this request comes from me", and how
//! the receiver checks it.
//!
//! A forwarded request carries one field, `hoard-peer`:
//!
//! ```text
//! hoard-peer: <node> <unix seconds> <scheme> <hex HMAC-SHA256>
//! ```
//!
//! The MAC is over `node \n seconds \n scheme \n method \n target`, keyed
//! with the cluster's shared secret (`--cluster-secret-file`; on a cluster
//! whose members are all on loopback it may be empty). The receiver accepts
//! it only from another member, within [`SKEW`] of its own clock; anything
//! else is a forgery: the field is removed and the request is routed like
//! any client's (so a client can never make a node skip routing or fill for
//! another). `scheme` is the client's at the first node, so that both
//! nodes compute the same cache key. Pure: `now` is an argument.
//!
//! A member's message with a body (a purge, an ACME message) also carries
//! `hoard-peer-body: <nonce> <hex HMAC-SHA256>`, the MAC of the
//! `hoard-peer` value, a random nonce and the body: a captured signature
//! cannot carry another body.
//! The receiver refuses a message it has already taken ([`Cluster`]'s
//! replay window, [`SKEW`] long).
//!
//! [`Cluster`]: super::Cluster

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::hmac;

/// The field's name.
pub const FIELD: &str = "hoard-peer";

/// The field that signs a message's body.
pub const BODY_FIELD: &str = "hoard-peer-body";

/// Largest clock difference accepted between two members.
pub const SKEW: Duration = Duration::from_secs(30);

/// Signs and checks peer fields with one secret.
#[derive(Debug, Clone)]
pub struct PeerKey {
    key: hmac::Key,
}

/// A peer field that checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHop {
    /// The sending member.
    pub node: String,
    /// The client's scheme at the first node.
    pub tls: bool,
}

/// Why a peer field was refused (counted, then the field is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not `node seconds scheme mac`.
    Malformed,
    /// The node is not another member.
    UnknownNode,
    /// Too far from this node's clock.
    Stale,
    /// The MAC does not match.
    BadMac,
}

impl PeerKey {
    /// A key from the shared secret.
    pub fn new(secret: &[u8]) -> PeerKey {
        PeerKey {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    /// A 256-bit key for `purpose`, derived from the secret (HMAC of the
    /// purpose's name).
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        let tag = hmac::sign(&self.key, purpose.as_bytes());
        let mut out = [0; 32];
        out.copy_from_slice(&tag.as_ref()[..32]);
        out
    }

    /// The body field's value for a message signed with `field` (the
    /// `hoard-peer` value) carrying `body`: `<nonce> <hex MAC>`, the MAC
    /// over the field, the nonce and the body. The nonce (random, 128
    /// bits) makes two identical messages of one second distinct, so that
    /// a receiver can refuse a replay without refusing a repeat.
    pub fn sign_body(&self, field: &str, body: &[u8]) -> String {
        let mut nonce = [0u8; 16];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let tag = hmac::sign(&self.key, &Self::body_message(field, &nonce, body));
        let mac: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{nonce} {mac}")
    }

    /// True when `value` is a body field of `field` and `body`.
    pub fn verify_body(&self, field: &str, body: &[u8], value: &str) -> bool {
        let Some((nonce, mac)) = value.split_once(' ') else {
            return false;
        };
        let Some(mac) = hex(mac) else { return false };
        nonce.len() == 32
            && hmac::verify(&self.key, &Self::body_message(field, nonce, body), &mac).is_ok()
    }

    fn body_message(field: &str, nonce: &str, body: &[u8]) -> Vec<u8> {
        let mut msg = Vec::with_capacity(field.len() + nonce.len() + 2 + body.len());
        msg.extend_from_slice(field.as_bytes());
        msg.push(b'\n');
        msg.extend_from_slice(nonce.as_bytes());
        msg.push(b'\n');
        msg.extend_from_slice(body);
        msg
    }

    fn message(node: &str, secs: u64, scheme: &str, method: &str, target: &str) -> String {
        format!("{node}\n{secs}\n{scheme}\n{method}\n{target}")
    }

    /// The field's value for a request from `node`.
    pub fn sign(
        &self,
        node: &str,
        now: SystemTime,
        tls: bool,
        method: &str,
        target: &str,
    ) -> String {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let scheme = if tls { "https" } else { "http" };
        let tag = hmac::sign(
            &self.key,
            Self::message(node, secs, scheme, method, target).as_bytes(),
        );
        let mut out = format!("{node} {secs} {scheme} ");
        for b in tag.as_ref() {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// Checks a field's value; `is_member` says whether a name is another member.
    pub fn verify(
        &self,
        value: &str,
        now: SystemTime,
        method: &str,
        target: &str,
        is_member: impl Fn(&str) -> bool,
    ) -> Result<PeerHop, Refused> {
        let mut parts = value.split(' ');
        let (Some(node), Some(secs), Some(scheme), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Refused::Malformed);
        };
        let secs: u64 = secs.parse().map_err(|_| Refused::Malformed)?;
        let tls = match scheme {
            "https" => true,
            "http" => false,
            _ => return Err(Refused::Malformed),
        };
        let mac = hex(mac).ok_or(Refused::Malformed)?;
        if !is_member(node) {
            return Err(Refused::UnknownNode);
        }
        let sent = UNIX_EPOCH + Duration::from_secs(secs);
        let skew = now.duration_since(sent).unwrap_or_else(|e| e.duration());
        if skew > SKEW {
            return Err(Refused::Stale);
        }
        hmac::verify(
            &self.key,
            Self::message(node, secs, scheme, method, target).as_bytes(),
            &mac,
        )
        .map_err(|_| Refused::BadMac)?;
        Ok(PeerHop {
            node: node.to_string(),
            tls,
        })
    }
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Refused {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Malformed => "malformed",
            Refused::UnknownNode => "unknown-node",
            Refused::Stale => "stale",
            Refused::BadMac => "bad-mac",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_signature_binds_the_body_to_its_field() {
        let k = PeerKey::new(b"s");
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let field = k.sign("n1", now, false, "POST", "/.hoard/cluster/acme");
        let mac = k.sign_body(&field, b"{\"a\":1}");
        assert!(k.verify_body(&field, b"{\"a\":1}", &mac));
        assert!(!k.verify_body(&field, b"{\"a\":2}", &mac), "another body");
        let later = k.sign(
            "n1",
            now + Duration::from_secs(1),
            false,
            "POST",
            "/.hoard/cluster/acme",
        );
        assert!(!k.verify_body(&later, b"{\"a\":1}", &mac), "another field");
        assert!(
            !PeerKey::new(b"t").verify_body(&field, b"{\"a\":1}", &mac),
            "another secret"
        );
        assert!(!k.verify_body(&field, b"{\"a\":1}", "zz"));
        assert_ne!(mac, k.sign_body(&field, b"{\"a\":1}"), "a nonce each time");
    }

    fn member(n: &str) -> bool {
        n == "n1" || n == "n2"
    }

    #[test]
    fn a_signed_field_checks_out_once_and_only_for_its_request() {
        let k = PeerKey::new(b"secret");
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let v = k.sign("n1", now, true, "GET", "/a?b");
        assert_eq!(
            k.verify(&v, now + Duration::from_secs(3), "GET", "/a?b", member),
            Ok(PeerHop {
                node: "n1".into(),
                tls: true
            })
        );
        assert_eq!(
            k.verify(&v, now, "GET", "/other", member),
            Err(Refused::BadMac)
        );
        assert_eq!(
            k.verify(&v, now, "HEAD", "/a?b", member),
            Err(Refused::BadMac)
        );
        assert_eq!(
            k.verify(
                &v,
                now + SKEW + Duration::from_secs(1),
                "GET",
                "/a?b",
                member
            ),
            Err(Refused::Stale)
        );
        assert_eq!(
            PeerKey::new(b"other").verify(&v, now, "GET", "/a?b", member),
            Err(Refused::BadMac)
        );
        let forged = v.replacen("https", "http", 1);
        assert_eq!(
            k.verify(&forged, now, "GET", "/a?b", member),
            Err(Refused::BadMac)
        );
        let stranger = k.sign("n9", now, false, "GET", "/a?b");
        assert_eq!(
            k.verify(&stranger, now, "GET", "/a?b", member),
            Err(Refused::UnknownNode)
        );
        assert_eq!(
            k.verify("n1 x", now, "GET", "/", member),
            Err(Refused::Malformed)
        );
    }
}
