//! Shared queues (`proxy_register_shared_queue`,
//! `proxy_resolve_shared_queue`, `proxy_enqueue_shared_queue`,
//! `proxy_dequeue_shared_queue`): named queues common to every filter and
//! VM of one hoard, kept across reloads, gone at a restart.
//!
//! ## Model
//! A queue is named by its registration (hoard's VMs share one VM id, the
//! empty one, so a name is enough). Any VM resolves it and enqueues; its
//! one consumer is the VM that registered it last, whose root context
//! hears `proxy_on_queue_ready` (as in Envoy, where each worker's VM
//! registering the same name takes the queue over). A queue holds at most
//! [`QUEUE_MAX`] items: beyond that, enqueueing fails with
//! `InternalFailure` and the item is not kept.
//!
//! ## Delivery
//! Enqueueing never runs another VM's code inside the caller's callback
//! (that VM may be the caller's own, its slot locked): it leaves a note in
//! the consumer plugin's [`Inbox`], and the plugin's ticker thread calls
//! `proxy_on_queue_ready` in the consumer's slot within one step (10 ms).
//! The answers to root contexts' HTTP calls come the same way.
//!
//! ## Locking
//! One mutex over all queues, held for one queue operation; an inbox's
//! mutex is taken inside it (never the other way round).

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

/// The most items a queue holds.
pub const QUEUE_MAX: usize = 10_000;

/// What waits for a plugin's ticker to run in one of its VMs' root
/// context.
#[derive(Debug)]
pub(crate) enum Note {
    /// Queue `.1` has items for the VM in slot `.0`.
    Queue(usize, u32),
    /// The answer to the root context's HTTP call `.1` in slot `.0`.
    Call(usize, u32, Option<crate::CallResponse>),
}

/// Where a plugin's notes wait for its ticker.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    ready: Mutex<Vec<Note>>,
}

impl Inbox {
    /// The notes so far, oldest first.
    pub(crate) fn take(&self) -> Vec<Note> {
        std::mem::take(&mut *self.ready.lock())
    }

    /// Leaves a note (a queue's once until it is taken).
    pub(crate) fn push(&self, note: Note) {
        let mut ready = self.ready.lock();
        if let Note::Queue(slot, id) = note {
            if ready
                .iter()
                .any(|n| matches!(n, Note::Queue(s, i) if (*s, *i) == (slot, id)))
            {
                return;
            }
        }
        ready.push(note);
    }
}

struct Queue {
    name: Vec<u8>,
    items: VecDeque<Vec<u8>>,
    /// The VM that registered it last: its plugin's inbox and its slot.
    consumer: (Weak<Inbox>, usize),
}

fn queues() -> &'static Mutex<Vec<Queue>> {
    static QUEUES: OnceLock<Mutex<Vec<Queue>>> = OnceLock::new();
    QUEUES.get_or_init(Mutex::default)
}

/// Registers `name` with the VM in `slot` of the plugin owning `inbox` as
/// its consumer; the queue's id (ids start at 1).
pub(crate) fn register(name: &[u8], inbox: &Arc<Inbox>, slot: usize) -> u32 {
    let mut qs = queues().lock();
    let consumer = (Arc::downgrade(inbox), slot);
    if let Some(i) = qs.iter().position(|q| q.name == name) {
        qs[i].consumer = consumer;
        return i as u32 + 1;
    }
    qs.push(Queue {
        name: name.to_vec(),
        items: VecDeque::new(),
        consumer,
    });
    qs.len() as u32
}

/// The id of the queue registered as `name`.
pub(crate) fn resolve(name: &[u8]) -> Option<u32> {
    let qs = queues().lock();
    qs.iter().position(|q| q.name == name).map(|i| i as u32 + 1)
}

/// What enqueueing did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    Ok,
    NoQueue,
    Full,
}

/// Adds `value` to queue `id` and tells its consumer.
pub(crate) fn enqueue(id: u32, value: Vec<u8>) -> Enqueued {
    let mut qs = queues().lock();
    let Some(q) = (id as usize).checked_sub(1).and_then(|i| qs.get_mut(i)) else {
        return Enqueued::NoQueue;
    };
    if q.items.len() >= QUEUE_MAX {
        return Enqueued::Full;
    }
    q.items.push_back(value);
    let (inbox, slot) = &q.consumer;
    if let Some(inbox) = inbox.upgrade() {
        inbox.push(Note::Queue(*slot, id));
    }
    Enqueued::Ok
}

/// The oldest item of queue `id` (`Err`: no such queue).
pub(crate) fn dequeue(id: u32) -> Result<Option<Vec<u8>>, ()> {
    let mut qs = queues().lock();
    let q = (id as usize)
        .checked_sub(1)
        .and_then(|i| qs.get_mut(i))
        .ok_or(())?;
    Ok(q.items.pop_front())
}
