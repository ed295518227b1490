//! The catalogue: which keys are stored and under which tags, for purges.
//!
//! ## Model
//!
//! One entry per primary key (all its variants, in every tier): the key
//! text and the tags of its most recent response (`Surrogate-Key`,
//! `Cache-Tag`). A tag index maps each tag to its keys, so a tag purge
//! visits only its own keys. URL, prefix and host purges scan the entries'
//! key texts (a scan of 100k keys takes milliseconds and holds no tier's
//! lock).
//!
//! ## Lifecycle
//!
//! An entry is added (or its tags replaced) whenever an object is stored:
//! memory insert, disk publish, disk load, 304 refresh. Eviction does not
//! tell the catalogue; instead, when it has grown to twice its size after
//! the last sweep, a sweep drops the entries of keys that no tier holds any
//! more (amortized constant work per insert). A purge drops the entries of
//! the keys it removed. Each entry carries a stamp, so a sweep never drops
//! an entry re-added while it ran.
//!
//! ## Purges racing fills
//!
//! Every purge gets an epoch number and is remembered in a short log. A
//! fill notes the epoch when it starts; before storing, it asks
//! [`Catalog::purged_since`] whether a purge since then matches its key or
//! tags: a hard purge means the fill does not store, a soft one that it
//! stores its object already stale. When the log has forgotten purges the
//! fill may have raced (more than [`PURGE_LOG`] since it started), the fill
//! does not store.
//!
//! That check alone would leave a window: a fill that checked before a
//! purge and stores after the purge removed what it selected. So storing
//! is one step under the **admission gate** (a read lock, [`Catalog::admit`]):
//! check the log, put the object in its tier, add it here. A purge takes the
//! gate exclusively while it joins the log and collects its keys
//! ([`Catalog::select`]). Either the store happened first (the purge finds
//! and removes the object) or the purge did (the store sees it and does not
//! happen). An invalidation after an unsafe method (RFC 9111 §4.4) is a
//! purge of one exact key ([`Selector::Key`]), so it closes the same window.
//!
//! ## Locking
//!
//! One `parking_lot::Mutex` for the entries and tags, one for the log;
//! neither is held across an await or while a tier is touched. The gate is
//! taken before either, and held only for the synchronous steps above (a
//! disk store's rename included, on the disk pool). Since a selection may
//! wait for the gate, every caller runs it off the serving threads (on
//! the blocking pool): purges, bans and invalidations alike. A test can
//! hold selections where they would wait ([`Catalog::test_gate`]) to show
//! that nothing else waits with them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hoard_policy::key::KeyUrl;
use http::HeaderMap;
use parking_lot::Mutex;

use crate::io::{IoGate, IoKind};

/// Purges remembered for fills that race them.
pub const PURGE_LOG: usize = 4096;

/// Fewest entries before the first sweep.
const SWEEP_MIN: usize = 4096;

/// Bytes an entry costs beyond its key text and tags (map slot, item, stamp):
/// documented in `docs/operations.md`.
pub const ENTRY_OVERHEAD: usize = 72;

/// What a purge selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Keys of one URL: `scheme`, `host` and `target` as keys hold them
    /// (see [`KeyUrl`]); every variant, every keyed header or cookie
    /// value, every slice.
    Url {
        /// `http` or `https`.
        scheme: String,
        /// Host as keyed.
        host: String,
        /// Path and query as keyed.
        target: String,
    },
    /// Keys whose URL (`scheme://host/path?query`) starts with this.
    Prefix(String),
    /// Keys of one host.
    Host(String),
    /// Keys whose response carried this tag.
    Tag(String),
    /// One exact primary key text (an invalidation after an unsafe method).
    Key(String),
    /// Keys whose path (the target without its query) a regular
    /// expression matches; applied as a ban (see [`crate::bans`]).
    Regex(PathRegex),
}

/// A regular expression over a key's path, compared by its source text.
#[derive(Clone)]
pub struct PathRegex(Arc<regex::Regex>);

/// Longest regular expression source accepted.
pub const MAX_REGEX_LEN: usize = 1024;

impl PathRegex {
    /// Compiles `source` with a bounded program size.
    ///
    /// # Errors
    /// The compiler's message, or that it is too long.
    pub fn new(source: &str) -> Result<PathRegex, String> {
        if source.len() > MAX_REGEX_LEN {
            return Err(format!("longer than {MAX_REGEX_LEN} bytes"));
        }
        regex::RegexBuilder::new(source)
            .size_limit(1 << 20)
            .build()
            .map(|r| PathRegex(Arc::new(r)))
            .map_err(|e| e.to_string())
    }

    /// The source text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// True when the expression matches the path of `target` (path and
    /// query as keyed; the query is not looked at).
    pub fn matches_target(&self, target: &str) -> bool {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        self.0.is_match(path)
    }
}

impl std::fmt::Debug for PathRegex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl PartialEq for PathRegex {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for PathRegex {}

impl Selector {
    /// What it selects, as written (`GET /purges`).
    pub fn pattern(&self) -> String {
        match self {
            Selector::Url {
                scheme,
                host,
                target,
            } => format!("{scheme}://{host}{target}"),
            Selector::Prefix(p) | Selector::Host(p) | Selector::Tag(p) | Selector::Key(p) => {
                p.clone()
            }
            Selector::Regex(r) => r.as_str().to_owned(),
        }
    }

    /// The name of the purge kind, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Selector::Url { .. } => "url",
            Selector::Prefix(_) => "prefix",
            Selector::Host(_) => "host",
            Selector::Tag(_) => "tag",
            Selector::Key(_) => "key",
            Selector::Regex(_) => "regex",
        }
    }

    /// True when this selects an object with this key text and response fields.
    pub fn selects(&self, key: &str, headers: &HeaderMap) -> bool {
        match self {
            Selector::Tag(t) => hoard_policy::tags::tags(headers).contains(&t.as_str()),
            _ => self.matches(key, &[]),
        }
    }

    fn matches(&self, key: &str, tags: &[Arc<str>]) -> bool {
        match self {
            Selector::Tag(t) => tags.iter().any(|x| **x == **t),
            Selector::Key(k) => k == key,
            _ => KeyUrl::parse(key).is_some_and(|k| self.matches_url(&k)),
        }
    }

    fn matches_url(&self, k: &KeyUrl<'_>) -> bool {
        match self {
            Selector::Url {
                scheme,
                host,
                target,
            } => {
                (k.scheme.is_empty() || k.scheme == scheme)
                    && (k.host.is_empty() || k.host == host)
                    && k.target == target
            }
            Selector::Prefix(p) => k.starts_with(p),
            Selector::Host(h) => k.on_host(h),
            Selector::Regex(r) => r.matches_target(k.target),
            Selector::Tag(_) | Selector::Key(_) => false,
        }
    }
}

/// What a fill must do after purges it raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raced {
    /// No purge since the fill started matches it: store as usual.
    No,
    /// A soft purge matched: store, already stale.
    Soft,
    /// A hard purge matched (or the log forgot): do not store.
    Hard,
}

#[derive(Debug)]
struct Item {
    key: Box<str>,
    tags: Box<[Arc<str>]>,
    stamp: u64,
}

#[derive(Debug, Default)]
struct Inner {
    keys: HashMap<u128, Item>,
    tags: HashMap<Arc<str>, HashSet<u128>>,
    next_stamp: u64,
    sweep_at: usize,
}

impl Inner {
    fn untag(&mut self, primary: u128, tags: &[Arc<str>]) {
        for t in tags {
            if let Some(set) = self.tags.get_mut(t) {
                set.remove(&primary);
                if set.is_empty() {
                    self.tags.remove(t);
                }
            }
        }
    }

    fn remove(&mut self, primary: u128) {
        if let Some(item) = self.keys.remove(&primary) {
            self.untag(primary, &item.tags);
        }
    }
}

/// The catalogue. See the module docs.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The admission gate (module docs): stores read, purges write.
    gate: parking_lot::RwLock<()>,
    inner: Mutex<Inner>,
    epoch: AtomicU64,
    /// Recent purges: epoch, selector, soft, when (monotonic).
    log: Mutex<VecDeque<(u64, Selector, bool, tokio::time::Instant)>>,
    /// Holds selections before the gate (tests only use it).
    hold: IoGate,
}

impl Catalog {
    /// Records that `primary` (key text `key`) is stored, with the tags of
    /// `headers`. Returns true when a sweep is due.
    pub fn add(&self, primary: u128, key: &str, headers: &HeaderMap) -> bool {
        let tags = hoard_policy::tags::tags(headers);
        let mut inner = self.inner.lock();
        inner.next_stamp += 1;
        let stamp = inner.next_stamp;
        let tags: Box<[Arc<str>]> = tags
            .iter()
            .map(|t| match inner.tags.get_key_value(*t) {
                Some((shared, _)) => shared.clone(),
                None => Arc::from(*t),
            })
            .collect();
        if let Some(old) = inner.keys.get_mut(&primary) {
            old.stamp = stamp;
            if old.tags == tags {
                return false;
            }
            let old_tags = std::mem::take(&mut old.tags);
            old.tags = tags.clone();
            inner.untag(primary, &old_tags);
        } else {
            inner.keys.insert(
                primary,
                Item {
                    key: key.into(),
                    tags: tags.clone(),
                    stamp,
                },
            );
        }
        for t in tags.iter() {
            inner.tags.entry(t.clone()).or_default().insert(primary);
        }
        inner.keys.len() > inner.sweep_at.max(SWEEP_MIN)
    }

    /// Keys in the catalogue (some may have been evicted since the last sweep).
    pub fn len(&self) -> usize {
        self.inner.lock().keys.len()
    }

    /// True when no key is catalogued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the entries of keys for which `held` is false. `held` is
    /// called without the catalogue's lock.
    pub fn sweep(&self, held: impl Fn(u128) -> bool) -> usize {
        let snapshot: Vec<(u128, u64)> = {
            let mut inner = self.inner.lock();
            // No second sweep until this one is done and the catalogue doubles.
            inner.sweep_at = usize::MAX;
            inner.keys.iter().map(|(p, i)| (*p, i.stamp)).collect()
        };
        let gone: Vec<(u128, u64)> = snapshot.into_iter().filter(|(p, _)| !held(*p)).collect();
        let mut inner = self.inner.lock();
        let mut n = 0;
        for (p, stamp) in gone {
            if inner.keys.get(&p).is_some_and(|i| i.stamp == stamp) {
                inner.remove(p);
                n += 1;
            }
        }
        inner.sweep_at = 2 * inner.keys.len();
        n
    }

    /// Starts a purge: remembers it for racing fills and returns the keys it
    /// selects. The caller removes (or marks stale) their objects, then calls
    /// [`Catalog::forget`] for removed ones.
    pub fn select(&self, selector: &Selector, soft: bool) -> Vec<u128> {
        self.hold.pass(IoKind::Write);
        // Exclusive: no store is between its check and its insert now.
        let _gate = self.gate.write();
        {
            let mut log = self.log.lock();
            let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            if log.len() >= PURGE_LOG {
                log.pop_front();
            }
            log.push_back((epoch, selector.clone(), soft, tokio::time::Instant::now()));
        }
        let inner = self.inner.lock();
        match selector {
            Selector::Tag(t) => inner
                .tags
                .get(t.as_str())
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default(),
            _ => inner
                .keys
                .iter()
                .filter(|(_, i)| selector.matches(&i.key, &[]))
                .map(|(p, _)| *p)
                .collect(),
        }
    }

    /// The stamp of `primary`'s entry: it changes whenever the key is
    /// stored again (a ban's sweep leaves such keys alone).
    pub fn stamp(&self, primary: u128) -> Option<u64> {
        self.inner.lock().keys.get(&primary).map(|i| i.stamp)
    }

    /// Drops the entries of purged keys.
    pub fn forget(&self, primaries: &[u128]) {
        let mut inner = self.inner.lock();
        for p in primaries {
            inner.remove(*p);
        }
    }

    /// Holds the admission gate for one store: check
    /// [`Catalog::purged_since`], insert into the tier, [`Catalog::add`],
    /// then drop the guard. Never held across an await.
    pub fn admit(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Holds every selection (purge, ban, invalidation) just before it
    /// takes the admission gate while its writes are held, as a store
    /// holding the gate would: [`IoGate::hold_writes`], [`IoGate::wait_held`].
    pub fn test_gate(&self) -> &IoGate {
        &self.hold
    }

    /// The purge epoch: a fill notes it when it starts.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The purge epoch as it was at `at` (monotonic): the epoch of the
    /// last purge before then, so that [`Catalog::purged_since`] of it
    /// also sees the purges of the window since `at`. A cluster member
    /// keeps no copy of another member's object when a purge of it was
    /// applied here in that window: the owner may not have applied it yet
    /// when it answered.
    pub fn epoch_as_of(&self, at: tokio::time::Instant) -> u64 {
        let log = self.log.lock();
        // Entries are pushed in time order: the first one after `at`.
        match log.get(log.partition_point(|(.., t)| *t <= at)) {
            Some((e, ..)) => e - 1,
            None => self.epoch(),
        }
    }

    /// Whether a purge after `epoch` matches an object with this key text
    /// and headers. See the module docs. `forgotten` is the answer when the
    /// log no longer holds every purge since `epoch` (a fill does not store;
    /// the disk loader keeps what it cannot judge).
    pub fn purged_since(
        &self,
        epoch: u64,
        key: &str,
        headers: &HeaderMap,
        forgotten: Raced,
    ) -> Raced {
        if self.epoch() == epoch {
            return Raced::No;
        }
        let tags: Vec<Arc<str>> = hoard_policy::tags::tags(headers)
            .into_iter()
            .map(Arc::from)
            .collect();
        let log = self.log.lock();
        if log.front().is_some_and(|(e, ..)| *e > epoch + 1) {
            return forgotten;
        }
        let mut raced = Raced::No;
        for (_, sel, soft, _) in log.iter().filter(|(e, ..)| *e > epoch) {
            if sel.matches(key, &tags) {
                if !soft {
                    return Raced::Hard;
                }
                raced = Raced::Soft;
            }
        }
        raced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(tags: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("surrogate-key", tags.parse().unwrap());
        h
    }

    fn sorted(mut v: Vec<u128>) -> Vec<u128> {
        v.sort_unstable();
        v
    }

    #[test]
    fn selects_by_url_prefix_host_and_tag() {
        let c = Catalog::default();
        c.add(1, "http|a.com|/img/1.jpg", &tagged("p1 img"));
        c.add(2, "http|a.com|/img/1.jpg slice=1048576:0", &tagged("p1"));
        c.add(
            3,
            "http|a.com|/img/1.jpg|accept-language=de",
            &HeaderMap::new(),
        );
        c.add(4, "http|a.com|/news", &tagged("news"));
        c.add(5, "https|b.com:8443|/img/1.jpg", &tagged("img"));
        let url = Selector::Url {
            scheme: "http".into(),
            host: "a.com".into(),
            target: "/img/1.jpg".into(),
        };
        assert_eq!(sorted(c.select(&url, false)), [1, 2, 3]);
        assert_eq!(
            sorted(c.select(&Selector::Prefix("http://a.com/".into()), false)),
            [1, 2, 3, 4]
        );
        assert_eq!(c.select(&Selector::Host("b.com".into()), false), [5]);
        assert_eq!(
            sorted(c.select(&Selector::Tag("img".into()), false)),
            [1, 5]
        );
        // A new response replaces the key's tags.
        c.add(1, "http|a.com|/img/1.jpg", &tagged("other"));
        assert_eq!(c.select(&Selector::Tag("img".into()), false), [5]);
        c.forget(&[5]);
        assert!(c.select(&Selector::Tag("img".into()), false).is_empty());
        assert_eq!(c.len(), 4);
    }

    #[test]
    fn epoch_as_of_sees_the_purges_since_then() {
        let c = Catalog::default();
        let key = Selector::Key("http|a.com|/x".into());
        c.select(&key, false);
        let between = tokio::time::Instant::now();
        c.select(&key, false);
        // As of `between`: the first purge, so the second is still "since".
        assert_eq!(c.epoch_as_of(between), 1);
        assert_eq!(
            c.purged_since(
                c.epoch_as_of(between),
                "http|a.com|/x",
                &HeaderMap::new(),
                Raced::Hard
            ),
            Raced::Hard
        );
        assert_eq!(c.epoch_as_of(tokio::time::Instant::now()), c.epoch());
    }

    #[test]
    fn sweep_keeps_what_is_held_and_what_was_re_added() {
        let c = Catalog::default();
        for p in 0..10u128 {
            c.add(p, &format!("http|a.com|/{p}"), &HeaderMap::new());
        }
        assert_eq!(c.sweep(|p| p % 2 == 0), 5);
        assert_eq!(c.len(), 5);
        assert!(!c.add(0, "http|a.com|/0", &HeaderMap::new()));
    }

    #[test]
    fn fills_see_purges_that_raced_them() {
        let c = Catalog::default();
        let started = c.epoch();
        let h = tagged("t1");
        assert_eq!(
            c.purged_since(started, "http|a.com|/x", &h, Raced::Hard),
            Raced::No
        );
        c.select(&Selector::Tag("t2".into()), false);
        assert_eq!(
            c.purged_since(started, "http|a.com|/x", &h, Raced::Hard),
            Raced::No
        );
        c.select(&Selector::Tag("t1".into()), true);
        assert_eq!(
            c.purged_since(started, "http|a.com|/x", &h, Raced::Hard),
            Raced::Soft
        );
        c.select(&Selector::Prefix("http://a.com/".into()), false);
        assert_eq!(
            c.purged_since(started, "http|a.com|/x", &h, Raced::Hard),
            Raced::Hard
        );
        // A fill started after the purges is not affected.
        assert_eq!(
            c.purged_since(c.epoch(), "http|a.com|/x", &h, Raced::Hard),
            Raced::No
        );
        // The log forgets: a fill older than the log does not store.
        for _ in 0..PURGE_LOG {
            c.select(&Selector::Tag("zz".into()), false);
        }
        assert_eq!(
            c.purged_since(started, "http|a.com|/y", &h, Raced::Hard),
            Raced::Hard
        );
    }
}
