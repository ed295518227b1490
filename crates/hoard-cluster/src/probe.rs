//! Active probes: telling a frozen member from a slow one.
//!
//! A member whose kernel still accepts connections while its process never
//! answers (stopped with SIGSTOP, wedged) looks, to a forwarded request,
//! exactly like an owner filling from a slow origin. Waiting on it would
//! hang clients; giving up on a slow owner would fetch twice. Probes tell
//! the two apart: every [`INTERVAL`] each other member is asked `GET`
//! [`PATH`], which its serving threads answer at once, whatever its origin
//! does. A member that fails [`DOWN_AFTER`] probes in a row (no answer
//! within [`TIMEOUT`]) is *down*: it leaves the ranking, and the forwarded
//! requests waiting on it are moved to the key's next choice at that
//! moment (see `Cluster::send`). It is up again after [`UP_AFTER`] answered
//! probes in a row, doubled for each other time it went down within
//! [`FLAP_WINDOW`] (at most 32 probes, about 10 s): a flapping member is
//! held down longer, so its keys do not bounce between it and their second
//! choices. So a frozen owner costs a waiting client at most about
//! `DOWN_AFTER × INTERVAL + TIMEOUT` (about 1.2 s), and a slow origin behind
//! a live owner costs nothing extra.
//!
//! The probe state is one `watch` channel per member (true: down): the
//! probe task writes it, forwarded requests wait on it. The task holds the
//! cluster weakly and ends with it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{HeaderMap, Method, Uri};

use super::member::Member;
use super::Cluster;
use hoard_origin::OriginRequest;

/// The path every member answers at once.
pub const PATH: &str = "/.hoard/cluster/ping";
/// Time between probes of one member.
pub const INTERVAL: Duration = Duration::from_millis(300);
/// How long a probe waits for its answer.
pub const TIMEOUT: Duration = Duration::from_millis(300);
/// Failed probes in a row that make a member down.
pub const DOWN_AFTER: u32 = 2;
/// Answered probes in a row that make it up again (when it has not
/// flapped, see [`up_after`]).
pub const UP_AFTER: u32 = 2;
/// How long a member's going down counts as flapping.
pub const FLAP_WINDOW: Duration = Duration::from_secs(60);

/// Answered probes in a row that bring a member up again after it went
/// down `downs` times within [`FLAP_WINDOW`] (this time included).
pub fn up_after(downs: usize) -> u32 {
    UP_AFTER << downs.saturating_sub(1).min(4)
}

/// How often this node checks on itself.
const SELF_TICK: Duration = Duration::from_millis(250);

/// Starts probing every other member and every parent, and watching this
/// node for a freeze (on the current runtime).
pub fn start(cluster: &Arc<Cluster>) {
    tokio::spawn(watch_self(Arc::downgrade(cluster)));
    let view = cluster.view();
    let parents = cluster.tier.iter().flat_map(|(_, t)| t.members.iter());
    for m in view.members.iter().chain(parents) {
        if m.peer.is_some() {
            tokio::spawn(run(Arc::downgrade(cluster), m.clone()));
        }
    }
}

/// Notices that this node itself stood still for longer than its grace
/// period (`[cluster] grace`, default 5 s)
/// (its ticks, read on the wall clock, came that late): purges sent
/// meanwhile may have found it `timeout`, so everything it stored before
/// is fenced: revalidated before it is served as fresh again
/// ([`Cluster::fenced`]). The wall clock (the proxy's `Clock`) is used so
/// that a frozen process, whose monotonic timers may also stand still, is
/// seen, and so that tests can move it.
async fn watch_self(cluster: Weak<Cluster>) {
    let mut last = match cluster.upgrade() {
        Some(c) => c.clock.now(),
        None => return,
    };
    let mut tick = tokio::time::interval(SELF_TICK);
    loop {
        tick.tick().await;
        let Some(c) = cluster.upgrade() else { return };
        let now = c.clock.now();
        if now.duration_since(last).unwrap_or_default() > c.grace {
            tracing::warn!(
                stood_still_ms = now.duration_since(last).unwrap_or_default().as_millis() as u64,
                "this node stood still past the cluster grace period: what it stored before is revalidated before it is served"
            );
            c.fence(now);
        }
        last = now;
    }
}

/// Probes member `m` until it leaves the view (or the cluster ends).
pub(super) async fn run(cluster: Weak<Cluster>, m: Arc<Member>) {
    let (mut fails, mut oks) = (0u32, 0u32);
    // When this member went down lately (monotonic: the probes' own pace).
    let mut downs: std::collections::VecDeque<tokio::time::Instant> = Default::default();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let Some(peer) = &m.peer else { return };
    loop {
        tick.tick().await;
        let Some(c) = cluster.upgrade() else { return };
        if m.gone() {
            return;
        }
        let answered = matches!(
            tokio::time::timeout(TIMEOUT, peer.send(request())).await,
            Ok(Ok(r)) if r.status().is_success()
        );
        let down = *m.down.borrow();
        if answered {
            fails = 0;
            oks += 1;
            let now = tokio::time::Instant::now();
            while downs.front().is_some_and(|t| now - *t > FLAP_WINDOW) {
                downs.pop_front();
            }
            if down && oks >= up_after(downs.len()) {
                tracing::info!(member = %m.name, "cluster member answers probes again: up");
                m.down.send_replace(false);
            }
        } else {
            oks = 0;
            fails += 1;
            if !down && fails >= DOWN_AFTER {
                tracing::warn!(member = %m.name, "cluster member does not answer probes: down");
                c.counters.inc(&c.counters.cluster_members_down);
                m.down.send_replace(true);
                downs.push_back(tokio::time::Instant::now());
            }
        }
    }
}

/// A probe's request.
pub(super) fn request() -> OriginRequest {
    OriginRequest {
        method: Method::GET,
        uri: Uri::from_static(PATH),
        headers: HeaderMap::new(),
        body: None,
        interim: None,
        tries: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flapping_member_is_held_down_longer() {
        assert_eq!(up_after(1), UP_AFTER);
        assert_eq!(up_after(2), 2 * UP_AFTER);
        assert_eq!(up_after(3), 4 * UP_AFTER);
        assert_eq!(up_after(50), 16 * UP_AFTER);
        // At most about ten seconds of answered probes.
        assert!(INTERVAL * up_after(50) <= Duration::from_secs(10));
    }
}
