//! Links verified lately, per thread: a link seen again (the same rule,
//! path, expiry and signature text) skips its hash. A cached object's
//! popular link is checked on every hit, and the hash (one MD5 block,
//! about 650 instructions) would be most of the check's cost.
//!
//! ## Structure
//! Each thread has [`SLOTS`] entries, direct-mapped by a hash of the path
//! and the expiry (never of the signature: the slot a link lands in says
//! nothing about the signature it needs). An entry is written only after
//! a signature verified, and read only by the same rule (its id: a
//! reload's rules are new ones, so a secret taken out stops verifying at
//! once). The signature text is compared in constant time; the path and
//! the expiry are the client's own. A path longer than [`MAX_PATH`] bytes
//! or a signature longer than [`MAX_SIG`] is not remembered. No lock: the
//! entries are the thread's.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use subtle::ConstantTimeEq;

/// Entries per thread.
pub(super) const SLOTS: usize = 32;
/// The longest path remembered.
pub(super) const MAX_PATH: usize = 96;
/// The longest signature text remembered (an HMAC-SHA256 in hex).
pub(super) const MAX_SIG: usize = 64;

#[derive(Clone, Copy)]
struct Entry {
    /// The rule's id; 0: empty.
    rule: u64,
    expires: u64,
    path_len: u8,
    sig_len: u8,
    path: [u8; MAX_PATH],
    sig: [u8; MAX_SIG],
}

const EMPTY: Entry = Entry {
    rule: 0,
    expires: 0,
    path_len: 0,
    sig_len: 0,
    path: [0; MAX_PATH],
    sig: [0; MAX_SIG],
};

thread_local! {
    static MEMO: RefCell<[Entry; SLOTS]> = const { RefCell::new([EMPTY; SLOTS]) };
}

static NEXT_RULE: AtomicU64 = AtomicU64::new(1);

/// A new rule's id (never 0).
pub(super) fn rule_id() -> u64 {
    NEXT_RULE.fetch_add(1, Ordering::Relaxed)
}

/// The slot of `path` until `expires`.
#[inline]
fn slot(path: &[u8], expires: u64) -> usize {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = expires.wrapping_mul(K);
    let mut chunks = path.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("invariant: 8 bytes"));
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(last) ^ path.len() as u64).wrapping_mul(K);
    (h >> 59) as usize % SLOTS
}

/// True when `rule` verified `sig` for `path` until `expires` on this
/// thread lately.
#[inline(always)]
pub(super) fn seen(rule: u64, path: &[u8], expires: u64, sig: &[u8]) -> bool {
    if path.len() > MAX_PATH || sig.len() > MAX_SIG {
        return false;
    }
    let i = slot(path, expires);
    MEMO.with(|m| {
        let m = m.borrow();
        let e = &m[i];
        if e.rule != rule
            || e.expires != expires
            || usize::from(e.path_len) != path.len()
            || usize::from(e.sig_len) != sig.len()
            || &e.path[..path.len()] != path
        {
            return false;
        }
        // Every byte XORed and folded: no early exit on the signature's
        // bytes (the lengths are equal, and the client's own).
        let mut diff = 0u64;
        let mut words = sig.chunks_exact(8);
        let mut at = 0;
        for w in &mut words {
            let mine =
                u64::from_ne_bytes(e.sig[at..at + 8].try_into().expect("invariant: 8 bytes"));
            diff |= mine ^ u64::from_ne_bytes(w.try_into().expect("invariant: 8 bytes"));
            at += 8;
        }
        for (i, b) in words.remainder().iter().enumerate() {
            diff |= u64::from(e.sig[at + i] ^ b);
        }
        diff.ct_eq(&0).into()
    })
}

/// Remembers that `rule` verified `sig` for `path` until `expires`.
pub(super) fn note(rule: u64, path: &[u8], expires: u64, sig: &[u8]) {
    if path.len() > MAX_PATH || sig.len() > MAX_SIG {
        return;
    }
    let i = slot(path, expires);
    MEMO.with(|m| {
        let e = &mut m.borrow_mut()[i];
        e.rule = rule;
        e.expires = expires;
        e.path_len = path.len() as u8;
        e.sig_len = sig.len() as u8;
        e.path[..path.len()].copy_from_slice(path);
        e.sig[..sig.len()].copy_from_slice(sig);
    });
}

/// Forgets every entry of this thread (tests).
#[cfg(test)]
pub(super) fn clear() {
    MEMO.with(|m| *m.borrow_mut() = [EMPTY; SLOTS]);
}
