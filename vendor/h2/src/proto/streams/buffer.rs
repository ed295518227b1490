use slab::Slab;

use super::recv::Event;
use crate::spares::{self, Spares};

/// Buffers frames for multiple streams.
#[derive(Debug)]
pub struct Buffer<T> {
    slab: Slab<Slot<T>>,
    /// Where a released buffer's slots go and its next slots come from
    /// (see `crate::spares`); without, they are freed and allocated anew.
    spares: Option<SpareSlots<T>>,
}

/// A kind's spare lists: take one, give one.
type SpareSlots<T> = (fn() -> Option<Slab<Slot<T>>>, fn(Slab<Slot<T>>));

/// Most slots a spare buffer keeps.
const SPARE_SLOTS: usize = 64;

std::thread_local! {
    /// The received-frame queues of released connections.
    static EVENT_SLOTS: Spares<Slab<Slot<Event>>> = const { Spares::new() };
}

/// A sequence of frames in a `Buffer`
#[derive(Debug)]
pub struct Deque {
    indices: Option<Indices>,
}

/// Tracks the head & tail for a sequence of frames in a `Buffer`.
#[derive(Debug, Default, Copy, Clone)]
struct Indices {
    head: usize,
    tail: usize,
}

#[derive(Debug)]
struct Slot<T> {
    value: T,
    next: Option<usize>,
}

impl<T> Buffer<T> {
    pub fn new() -> Self {
        Buffer {
            slab: Slab::new(),
            spares: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Gives up the slots when none is used (see `crate::quiet`), to the
    /// thread's spares if the buffer has some: no `Deque` points into an
    /// empty buffer.
    pub fn release_idle(&mut self) {
        if self.slab.is_empty() && self.slab.capacity() != 0 {
            let slab = std::mem::take(&mut self.slab);
            if let Some((_, put)) = self.spares {
                if slab.capacity() <= SPARE_SLOTS {
                    put(slab);
                }
            }
        }
    }

    /// Takes spare slots for a released buffer's next frame.
    fn refill(&mut self) {
        if self.slab.capacity() == 0 {
            if let Some(slab) = self.spares.and_then(|(take, _)| take()) {
                self.slab = slab;
            }
        }
    }
}

impl Buffer<Event> {
    /// A received-frame queue whose slots go to the thread's spares when
    /// it is released, and come from there when it is used again.
    pub fn with_spares() -> Self {
        Buffer {
            slab: Slab::new(),
            spares: Some((
                || spares::take(&EVENT_SLOTS),
                |slab| spares::put(&EVENT_SLOTS, slab),
            )),
        }
    }
}

impl Deque {
    pub fn new() -> Self {
        Deque { indices: None }
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_none()
    }

    pub fn push_back<T>(&mut self, buf: &mut Buffer<T>, value: T) {
        buf.refill();
        let key = buf.slab.insert(Slot { value, next: None });

        match self.indices {
            Some(ref mut idxs) => {
                buf.slab[idxs.tail].next = Some(key);
                idxs.tail = key;
            }
            None => {
                self.indices = Some(Indices {
                    head: key,
                    tail: key,
                });
            }
        }
    }

    pub fn push_front<T>(&mut self, buf: &mut Buffer<T>, value: T) {
        buf.refill();
        let key = buf.slab.insert(Slot { value, next: None });

        match self.indices {
            Some(ref mut idxs) => {
                buf.slab[key].next = Some(idxs.head);
                idxs.head = key;
            }
            None => {
                self.indices = Some(Indices {
                    head: key,
                    tail: key,
                });
            }
        }
    }

    pub fn pop_front<T>(&mut self, buf: &mut Buffer<T>) -> Option<T> {
        match self.indices {
            Some(mut idxs) => {
                let mut slot = buf.slab.remove(idxs.head);

                if idxs.head == idxs.tail {
                    assert!(slot.next.is_none());
                    self.indices = None;
                } else {
                    idxs.head = slot.next.take().unwrap();
                    self.indices = Some(idxs);
                }

                Some(slot.value)
            }
            None => None,
        }
    }
}
