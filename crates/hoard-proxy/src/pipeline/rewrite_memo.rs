//! Query rewrites (`rewrite_query`) remembered per thread: a target seen
//! again on the same route skips the split, the sort and the parse of
//! its new form. A page's popular link (a newsletter's `utm_*` tags) is
//! rewritten on every hit, and the rewrite would be most of the route's
//! cost per hit.
//!
//! ## Structure
//! Each thread has [`SLOTS`] entries, direct-mapped by a hash of the
//! target. An entry holds its route (an `Arc`: a reload's routes are new
//! ones, and the old one cannot be mistaken for them while the entry
//! holds it), the target as the client sent it (copied, never a slice of
//! the connection's buffer) and its rewritten form (`None`: the rewrite
//! leaves it as it is). A target longer than [`MAX_TARGET`] bytes is not
//! remembered. No lock: the entries are the thread's.

use std::cell::RefCell;
use std::sync::Arc;

use hoard_config::RouteConfig;
use http::uri::PathAndQuery;

/// Entries per thread.
const SLOTS: usize = 64;
/// The longest target remembered.
const MAX_TARGET: usize = 512;

struct Entry {
    route: Arc<RouteConfig>,
    target: Box<[u8]>,
    rewritten: Option<PathAndQuery>,
}

thread_local! {
    static MEMO: RefCell<Vec<Option<Entry>>> = RefCell::new((0..SLOTS).map(|_| None).collect());
}

/// The slot of `target`: its length and three words of it, mixed.
fn slot(target: &[u8]) -> usize {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        let end = (at + 8).min(target.len());
        w[..end - at].copy_from_slice(&target[at..end]);
        u64::from_le_bytes(w)
    };
    let n = target.len();
    let mut h = (n as u64).wrapping_mul(K);
    for at in [0, n.saturating_sub(8), n / 2] {
        h = (h.rotate_left(5) ^ word(at.min(n))).wrapping_mul(K);
    }
    (h >> 58) as usize % SLOTS
}

/// The remembered rewrite of `target` on `route`: `Some(None)` when it
/// stays as it is, `None` when not remembered.
pub(super) fn get(route: &Arc<RouteConfig>, target: &[u8]) -> Option<Option<PathAndQuery>> {
    if target.len() > MAX_TARGET {
        return None;
    }
    MEMO.with(|m| {
        let m = m.borrow();
        let e = m[slot(target)].as_ref()?;
        (Arc::ptr_eq(&e.route, route) && *e.target == *target).then(|| e.rewritten.clone())
    })
}

/// Remembers the rewrite of `target` on `route`.
pub(super) fn put(route: &Arc<RouteConfig>, target: &[u8], rewritten: Option<PathAndQuery>) {
    if target.len() > MAX_TARGET {
        return;
    }
    MEMO.with(|m| {
        m.borrow_mut()[slot(target)] = Some(Entry {
            route: route.clone(),
            target: target.into(),
            rewritten,
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_is_remembered_for_its_route_and_target_only() {
        let a = Arc::new(RouteConfig::catch_all());
        let b = Arc::new(RouteConfig::catch_all());
        let pq = PathAndQuery::from_static("/x?a=1");
        assert_eq!(get(&a, b"/x?b=2&a=1"), None);
        put(&a, b"/x?b=2&a=1", None);
        put(&a, b"/x?utm=1&a=1", Some(pq.clone()));
        assert_eq!(get(&a, b"/x?b=2&a=1"), Some(None));
        assert_eq!(get(&a, b"/x?utm=1&a=1"), Some(Some(pq)));
        assert_eq!(get(&b, b"/x?utm=1&a=1"), None, "another route");
        assert_eq!(get(&a, b"/x?utm=2&a=1"), None, "another target");
        let long = vec![b'a'; MAX_TARGET + 1];
        put(&a, &long, None);
        assert_eq!(get(&a, &long), None, "too long to remember");
    }
}
