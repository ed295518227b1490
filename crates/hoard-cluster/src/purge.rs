//! Purges that reach every member.
//!
//! ## Model
//!
//! A purge taken by any node (admin `POST /purge`, `PURGE`, `hoard purge`)
//! is applied here first, then sent to every other member at once over the
//! peer channel: a signed `POST` of [`PATH`] on the member's main listener,
//! whose JSON body names the selector as this node resolved it (so every
//! node removes the same keys). The answer lists each member:
//!
//! | state | meaning |
//! |---|---|
//! | `acked` | the member answered 200: it applied the purge (what `Pipeline::purge` guarantees locally: from then on no matching object is served as fresh there, fills that raced it included) |
//! | `timeout` | no answer within `purge_timeout`; it may still apply it |
//! | `unreachable` | no connection, or an answer other than 200 |
//!
//! This node is always `acked`. A member that answered over HTTP says how
//! many objects it removed or made stale (`{"purged": N}`); the answer
//! lists each member's count (`null` when not known: no answer, or the
//! purge went through the log) and their total. Without a bus, a member that was down or
//! partitioned during the purge does not learn of it later; with one
//! ([`super::bus`]) the purge is an entry of the log instead, which every
//! member reads, applies and acknowledges, and replays after a gap
//! ([`Cluster::spread`] chooses; HTTP when the bus cannot take it).
//! A member's purge endpoint accepts only signed requests from another
//! member (403 otherwise) and never fans out again.

use bytes::Bytes;
use hoard_store::catalog::Selector;
use http::{Method, StatusCode};

use std::sync::Arc;

use super::member::Member;
use super::Cluster;

/// The peer purge endpoint on every member's main listener.
pub const PATH: &str = "/.hoard/cluster/purge";

/// How a member took a purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Applied.
    Acked,
    /// No answer in time.
    Timeout,
    /// Not reached, or refused.
    Unreachable,
}

impl Ack {
    /// As in the purge answer and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Ack::Acked => "acked",
            Ack::Timeout => "timeout",
            Ack::Unreachable => "unreachable",
        }
    }
}

pub use crate::purge_message::{decode, encode};

/// How one member took a purge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAck {
    /// Its name.
    pub node: String,
    /// Its state.
    pub ack: Ack,
    /// The objects it removed or made stale, when it said (over HTTP;
    /// this node's always).
    pub purged: Option<u64>,
}

impl MemberAck {
    /// As in the purge answer's `members` list.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "node": self.node, "state": self.ack.as_str(), "purged": self.purged })
    }
}

/// Where a purge applied here went: each member's state and count (this
/// node's, `acked`, included, in member order), and with a bus the log
/// entry, or `Err` when the log could not take it (it went over HTTP
/// instead).
#[derive(Debug)]
pub struct Spread {
    /// Each member's state and count.
    pub acks: Vec<MemberAck>,
    /// The log entry (with a bus).
    pub log: Option<Result<super::bus::EntryId, ()>>,
}

impl Cluster {
    /// Sends a purge applied here to every other member: through the log
    /// when the cluster has a bus that takes it, else over HTTP
    /// (`Cluster::fan_out`). `here` is what the purge removed on this
    /// node. Members that did not acknowledge are counted and logged.
    pub async fn spread(&self, selector: &Selector, soft: bool, here: u64) -> Spread {
        let spread = match &self.bus {
            None => Spread {
                acks: self.fan_out(selector, soft, here).await,
                log: None,
            },
            Some(bus) => {
                let published = bus
                    .publish(
                        self.node(),
                        selector,
                        soft,
                        &self.others(),
                        self.clock_ms(),
                        self.purge_timeout,
                    )
                    .await;
                match published {
                    Ok(p) => Spread {
                        acks: self
                            .ack_targets()
                            .iter()
                            .map(|m| {
                                let me = *m.name == *self.node();
                                let ack = if me || p.acked.iter().any(|a| *a == *m.name) {
                                    Ack::Acked
                                } else if !m.up() {
                                    Ack::Unreachable
                                } else {
                                    // It applies it when it reads the log.
                                    Ack::Timeout
                                };
                                MemberAck {
                                    node: m.name.to_string(),
                                    ack,
                                    // The others apply it from the log and
                                    // do not say how many.
                                    purged: me.then_some(here),
                                }
                            })
                            .collect(),
                        log: Some(Ok(p.id)),
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "cluster bus unreachable: the purge goes to the members over HTTP");
                        Spread {
                            acks: self.fan_out(selector, soft, here).await,
                            log: Some(Err(())),
                        }
                    }
                }
            }
        };
        for a in &spread.acks {
            if a.ack != Ack::Acked {
                self.counters.inc(&self.counters.cluster_purge_not_acked);
                tracing::warn!(member = %a.node, state = a.ack.as_str(), "purge not acknowledged by a member");
            }
        }
        spread
    }

    /// Who a purge reaches: every member (this node included), then the
    /// parents of the tier.
    fn ack_targets(&self) -> Vec<Arc<Member>> {
        let view = self.view();
        view.members
            .iter()
            .chain(self.tier.iter().flat_map(|(_, t)| t.members.iter()))
            .cloned()
            .collect()
    }

    /// Sends a purge to every other member (and the parents) over HTTP;
    /// each one's state and count, this node's (`acked`, `here`) included,
    /// in member order.
    async fn fan_out(&self, selector: &Selector, soft: bool, here: u64) -> Vec<MemberAck> {
        let body = Bytes::from(encode(selector, soft).to_string());
        let targets = self.ack_targets();
        let sends = targets.iter().map(|m| {
            let body = body.clone();
            async move {
                let node = m.name.to_string();
                if m.peer.is_none() {
                    return MemberAck {
                        node,
                        ack: Ack::Acked,
                        purged: Some(here),
                    };
                }
                let (ack, purged) = match self
                    .call(m, Method::POST, PATH, Some(body), self.purge_timeout)
                    .await
                {
                    Err(super::CallError::Timeout) => (Ack::Timeout, None),
                    Ok((StatusCode::OK, answer)) => (Ack::Acked, answer_count(&answer)),
                    Ok(_) | Err(super::CallError::Failed(_)) => (Ack::Unreachable, None),
                };
                MemberAck { node, ack, purged }
            }
        });
        futures_util::future::join_all(sends).await
    }
}

/// The `purged` count of a member's answer (`{"purged": N}`).
fn answer_count(answer: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(answer)
        .ok()?
        .get("purged")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_travel_whole() {
        for (sel, soft) in [
            (
                Selector::Url {
                    scheme: "https".into(),
                    host: "example.com".into(),
                    target: "/a?b=1".into(),
                },
                false,
            ),
            (Selector::Prefix("http://example.com/img/".into()), true),
            (Selector::Host("example.com".into()), false),
            (Selector::Tag("product-7".into()), true),
            (Selector::Key("http|example.com|/x".into()), false),
            (
                Selector::Regex(hoard_store::catalog::PathRegex::new(r"^/img/.*\.png$").unwrap()),
                true,
            ),
        ] {
            let body = encode(&sel, soft).to_string();
            assert_eq!(decode(body.as_bytes()), Some((sel, soft)));
        }
        assert_eq!(decode(b"{}"), None);
        assert_eq!(decode(br#"{"selector":{"nope":"x"},"soft":false}"#), None);
    }
}
