//! Spare buffers for connections that come back from idle (a hoard patch,
//! see the `vendor/README.md` of the tree this copy lives in).
//!
//! A connection polled inside [`crate::release_idle`] gives up its idle
//! buffers (see `crate::quiet`); when it speaks again it needs them back.
//! Allocated anew, that was fourteen allocations per quiet spell (hoard's
//! e2e x00008, its own batching buffer included), often on pages the
//! allocator returned to the system meanwhile. Instead each kind of buffer
//! a releasing connection gives up goes to a short list of the calling
//! thread, and the next connection on that thread to need one takes it
//! from there.
//!
//! ## Model
//!
//! One [`Spares`] per kind, a thread-local `Vec` of emptied buffers, at
//! most [`SPARES`] long; a buffer offered to a full list, or one grown past
//! what its kind keeps, is freed as before. Taking from an empty list falls
//! back to a new allocation. The release gives to the lists; a buffer's
//! first use after it, and a new connection's first stream slots, frame
//! queue, table storage and Huffman buffer, take from them. So the lists
//! are a fixed amount of memory per thread (at most eight of each kind:
//! 16, 8 and 4 KiB buffers, slabs of at most 64 slots, tables of at most
//! 32 index slots), filled only by connections that went idle.
//!
//! ## Locking
//!
//! None: each list belongs to its thread and is borrowed only inside
//! `put` and `take`, which call nothing that could borrow it again.

use std::cell::RefCell;
use std::thread::LocalKey;

use bytes::BytesMut;

/// Most buffers of one kind kept per thread: the connections of one
/// thread that go quiet and come back at about the same time.
pub(crate) const SPARES: usize = 8;

/// One thread's spare buffers of one kind.
pub(crate) struct Spares<T>(RefCell<Vec<T>>);

impl<T> Spares<T> {
    pub(crate) const fn new() -> Self {
        Spares(RefCell::new(Vec::new()))
    }
}

/// Keeps `value`, emptied by the caller, unless the thread's list is full
/// (or the thread is ending): then it is dropped.
pub(crate) fn put<T: 'static>(list: &'static LocalKey<Spares<T>>, value: T) {
    let _ = list.try_with(|s| {
        let mut s = s.0.borrow_mut();
        if s.len() < SPARES {
            s.push(value);
        }
    });
}

/// A spare from the thread's list, if it has one.
pub(crate) fn take<T: 'static>(list: &'static LocalKey<Spares<T>>) -> Option<T> {
    list.try_with(|s| s.0.borrow_mut().pop()).ok().flatten()
}

/// Keeps an idle connection's byte buffer for another: emptied, and only
/// if it has room for `size` bytes without allocating and, reclaimed, has
/// not grown past four times that. (If frames or fields read into it still
/// hold its first bytes, only its free tail counts, and it keeps their
/// allocation alive while it waits, as the connection would have.)
pub(crate) fn put_bytes(list: &'static LocalKey<Spares<BytesMut>>, mut buf: BytesMut, size: usize) {
    buf.clear();
    if buf.try_reclaim(size) && buf.capacity() <= 4 * size {
        put(list, buf);
    }
}

/// A byte buffer with room for `size` bytes: a spare, or a new one.
pub(crate) fn take_bytes(list: &'static LocalKey<Spares<BytesMut>>, size: usize) -> BytesMut {
    take(list).unwrap_or_else(|| BytesMut::with_capacity(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    std::thread_local! {
        static LIST: Spares<Vec<u8>> = const { Spares::new() };
    }

    #[test]
    fn a_list_keeps_at_most_spares_and_gives_them_back() {
        for i in 0..SPARES + 3 {
            put(&LIST, vec![i as u8]);
        }
        let mut back = Vec::new();
        while let Some(v) = take(&LIST) {
            back.push(v[0]);
        }
        assert_eq!(back.len(), SPARES);
        assert_eq!(back[0], SPARES as u8 - 1, "the last kept comes first");
        assert!(take(&LIST).is_none());
    }

    std::thread_local! {
        static BYTES: Spares<BytesMut> = const { Spares::new() };
    }

    #[test]
    fn a_byte_buffer_is_kept_only_with_room_and_not_grown() {
        put_bytes(&BYTES, BytesMut::with_capacity(64 * 1024), 1024);
        let mut shared = BytesMut::with_capacity(1024);
        shared.extend_from_slice(&[7; 1000]);
        let _held = shared.split().freeze();
        // 24 bytes of tail left, the rest held by `_held`.
        put_bytes(&BYTES, shared, 1024);
        assert!(take(&BYTES).is_none(), "neither buffer was kept");
        let mut used = BytesMut::with_capacity(1024);
        used.extend_from_slice(&[1; 10]);
        put_bytes(&BYTES, used, 1024);
        let back = take_bytes(&BYTES, 1024);
        assert!(back.is_empty() && back.capacity() >= 1024);
    }
}
