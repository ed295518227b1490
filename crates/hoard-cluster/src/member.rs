//! The member set: who is in the cluster now, as this node sees it.
//!
//! ## Model
//!
//! A [`View`] is an immutable list of [`Member`]s, this node among them,
//! and the cluster holds the current one in an `ArcSwap`: a request loads
//! it once and ranks keys over it; a change of membership
//! ([`super::discover`]) builds a new view and swaps it in. A member keeps
//! its `Arc` across views, so its connections, its probe state and its
//! probe task live as long as it stays a member; a member dropped from the
//! view is marked `gone` and its probe task ends.
//!
//! Each name gets a small id for good ([`Names`]), so a request can note
//! its key's owner in a `Copy` field and the access log can name it later,
//! whatever the view is by then.
//!
//! ## Locking
//!
//! Views are never modified, only replaced (by one task at a time: the
//! discovery task, or `Cluster::new`). [`Names`] is a mutex over an
//! append-only list, locked briefly.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::ring::Slot;
use hoard_origin::Upstream;

/// One member.
#[derive(Debug)]
pub struct Member {
    /// Its id in [`Names`].
    pub id: u16,
    /// Its name (its `--cluster-node`).
    pub name: Arc<str>,
    /// Its main listener (this node's: as configured or advertised).
    pub addr: SocketAddr,
    pub(super) slot: Slot,
    /// Its connections (`None` for this node).
    pub(super) peer: Option<Upstream>,
    /// Down by its probes ([`super::probe`]); never for this node.
    pub(super) down: tokio::sync::watch::Sender<bool>,
    /// Left the view: its probe task ends.
    gone: AtomicBool,
}

impl Member {
    /// True for another member (one this node can send to).
    pub fn is_other(&self) -> bool {
        self.peer.is_some()
    }

    /// A member (`peer`: `None` for this node).
    pub(super) fn new(
        id: u16,
        name: Arc<str>,
        addr: SocketAddr,
        weight: f64,
        peer: Option<Upstream>,
    ) -> Member {
        Member {
            id,
            slot: Slot::new(&name, weight),
            name,
            addr,
            peer,
            down: tokio::sync::watch::Sender::new(false),
            gone: AtomicBool::new(false),
        }
    }

    /// Up: this node, or another member that answers probes and has no
    /// recent connection failures.
    pub fn up(&self) -> bool {
        self.peer
            .as_ref()
            .is_none_or(|p| !p.is_down() && !*self.down.borrow())
    }

    /// Marks it as having left the view.
    pub(super) fn leave(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    /// True once it left the view.
    pub(super) fn gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

/// The members at one moment. See the module docs.
#[derive(Debug)]
pub struct View {
    /// Every member, this node included, in name order.
    pub members: Vec<Arc<Member>>,
    /// This node's index in `members` (`usize::MAX` in a parent tier's).
    pub me: usize,
    /// The ring's slots, in member order.
    pub slots: Vec<Slot>,
}

impl View {
    /// A view of `members` (sorted here), one of which is named `me`.
    pub fn new(members: Vec<Arc<Member>>, me: &str) -> View {
        let mut v = View::parents(members);
        v.me = v
            .members
            .iter()
            .position(|m| &*m.name == me)
            .expect("invariant: a view holds this node");
        v
    }

    /// A parent tier: members of which none is this node.
    pub fn parents(mut members: Vec<Arc<Member>>) -> View {
        members.sort_by(|a, b| a.name.cmp(&b.name));
        View {
            slots: members.iter().map(|m| m.slot.clone()).collect(),
            members,
            me: usize::MAX,
        }
    }

    /// Which members take part in ranking keys: those up, unless most
    /// members look down at once. That is more likely this node's own
    /// trouble (a partition, a stall) than most of the cluster dying, and
    /// sending every key to the few that remain would bury them: health
    /// is then ignored, and a member that really is gone costs a failed
    /// connection and the next choice (see `Cluster::send`).
    pub fn ranked(&self) -> impl Fn(usize) -> bool + '_ {
        let down = self.members.iter().filter(|m| !m.up()).count();
        let ignore = down * 2 > self.members.len();
        move |i| ignore || self.members[i].up()
    }

    /// The member named `name`.
    pub fn find(&self, name: &str) -> Option<&Arc<Member>> {
        self.members.iter().find(|m| &*m.name == name)
    }
}

/// Every name this node has known as a member, by id (append-only).
#[derive(Debug, Default)]
pub struct Names(parking_lot::Mutex<Vec<Arc<str>>>);

impl Names {
    /// The id of `name` (new if it was never seen).
    pub fn id(&self, name: &str) -> (u16, Arc<str>) {
        let mut all = self.0.lock();
        if let Some(i) = all.iter().position(|n| &**n == name) {
            return (i as u16, all[i].clone());
        }
        let n: Arc<str> = Arc::from(name);
        all.push(n.clone());
        ((all.len() - 1).min(usize::from(u16::MAX)) as u16, n)
    }

    /// The name of id `i`.
    pub fn name(&self, i: u16) -> Option<Arc<str>> {
        self.0.lock().get(usize::from(i)).cloned()
    }
}
