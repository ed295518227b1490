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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::hmac;

/// The field's name.
pub const FIELD: &str = "hoard-peer";

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
