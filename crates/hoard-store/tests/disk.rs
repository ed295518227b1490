//! Disk zone defects a client cannot see, each shown through the store's
//! API: the byte account, which files are reused, what a commit leaves.
//! (What a client can see is in `hoard-proxy/tests/e2e/n_store.rs`.)

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::clock::{Clock, SystemClock};
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::key::Digest;
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use hoard_store::catalog::Selector;
use hoard_store::disk::format::Head;
use hoard_store::disk::writer::Abandoned;
use hoard_store::disk::{DirConfig, Durability, ZoneConfig};
use hoard_store::object::ObjectBody;
use hoard_store::{Lookup, Store, StoreEvent, StoreEvents};
use http::{HeaderMap, StatusCode};

/// Counts events by name.
#[derive(Debug, Default)]
struct Events(parking_lot::Mutex<HashMap<&'static str, u64>>);

impl StoreEvents for Events {
    fn event(&self, _zone: &str, e: StoreEvent) {
        *self.0.lock().entry(e.as_str()).or_default() += 1;
    }
}

impl Events {
    fn get(&self, name: &str) -> u64 {
        self.0.lock().get(name).copied().unwrap_or(0)
    }
}

fn zone(name: &str, dir: &Path, max_size: u64) -> ZoneConfig {
    ZoneConfig {
        name: name.into(),
        dirs: vec![DirConfig {
            path: dir.to_path_buf(),
            weight: 1,
        }],
        max_size,
        inactive: None,
        min_free: 0,
        max_object: max_size,
        durability: Durability::Process,
    }
}

async fn store(zones: Vec<ZoneConfig>, memory: u64, events: Arc<Events>) -> Arc<Store> {
    let s = Arc::new(Store::new(memory, 64 << 20, zones, events, Arc::new(SystemClock)).unwrap());
    s.start();
    for z in s.zones() {
        while z.loading() {
            tokio::task::yield_now().await;
        }
    }
    s
}

fn head(key: &str, etag: &str) -> Head {
    let mut headers = HeaderMap::new();
    headers.insert("etag", etag.parse().unwrap());
    let t = SystemClock.now();
    Head {
        key: key.into(),
        vary: VaryNames::default(),
        status: StatusCode::OK,
        headers,
        times: StoredTimes {
            request_time: t,
            response_time: t,
            date: t,
            age_value: None,
            lifetime: Duration::from_secs(600),
        },
        lifetime_source: LifetimeSource::MaxAge,
        rules: StoredRules::new(&CacheControl::default(), None, None),
        parts: Vec::new(),
    }
}

fn digest(key: &str) -> Digest {
    Digest::of(key.as_bytes())
}

/// Writes one whole object through a disk writer in zone `z`.
async fn fill(
    s: &Arc<Store>,
    z: usize,
    key: &str,
    body: &[u8],
    etag: &str,
) -> Result<(), Abandoned> {
    let epoch = s.catalog().epoch();
    let mut w = s
        .disk_writer(z, digest(key), Digest(0), Some(body.len() as u64), 256)
        .await
        .expect("a writer");
    for c in body.chunks(40_000) {
        w.write(Bytes::copy_from_slice(c)).await?;
    }
    let done = s.finish_disk(w, digest(key), &head(key, etag), epoch).await;
    // The writer's file is closed on the pool, in the background: settled,
    // so that whether the next eviction may reuse it does not depend on
    // timing (a file still open anywhere is never reused).
    s.zones()[z].io().settle().await;
    done.map(|_| ())
}

/// The body and ETag a lookup finds, or `None` for a miss.
async fn get(s: &Store, key: &str) -> Option<(Vec<u8>, String)> {
    match s.lookup(digest(key), key, &HeaderMap::new()).await {
        Lookup::Hit(o) => {
            let body = match &o.body {
                ObjectBody::Chunks { chunks, .. } => chunks.concat(),
                ObjectBody::File(f) => f.read_all().await.unwrap().concat(),
            };
            let etag = o.headers["etag"].to_str().unwrap().to_string();
            Some((body, etag))
        }
        _ => None,
    }
}

/// Object files and the bytes the zone counts for them (4 KiB blocks).
fn files(dir: &Path) -> (u64, u64, u64) {
    let (mut objects, mut tmp, mut bytes) = (0, 0, 0);
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if !sub.file_type().unwrap().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            let len = f.metadata().unwrap().len();
            bytes += len.div_ceil(4096) * 4096;
            if f.path().extension().is_some_and(|e| e == "tmp") {
                tmp += 1;
            } else {
                objects += 1;
            }
        }
    }
    (objects, tmp, bytes)
}

/// After every write settled: the account is the files, every file is indexed.
async fn assert_settled(s: &Store, dir: &Path) {
    for z in s.zones() {
        z.io().settle().await;
    }
    let z = &s.zones()[0];
    let (objects, tmp, bytes) = files(dir);
    assert_eq!(tmp, 0, "no temporary file is left");
    assert_eq!(objects, z.objects(), "every object file is indexed");
    assert_eq!(bytes, z.used(), "the account is the files");
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

// n00101: a recycled file whose previous object's head was rewritten
// (slot B, generation 2: a 304 refresh, or a soft purge, which rewrites
// the head of an object never served) serves the new object, never the
// old head over the new body, before and after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00101_a_recycled_file_never_shows_the_previous_head() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("z", dir.path(), 256 << 10)];
    let s = store(cfg(), 0, events.clone()).await;
    for i in 0..6 {
        let key = format!("http|a|/old{i}");
        fill(&s, 0, &key, &body(20_000, i), "\"v1\"").await.unwrap();
    }
    for i in 0..3 {
        // A 304: the head is rewritten into slot B with generation 2.
        let key = format!("http|a|/old{i}");
        let Lookup::Hit(o) = s.lookup(digest(&key), &key, &HeaderMap::new()).await else {
            panic!("stored");
        };
        let mut headers = o.headers.clone();
        headers.insert("etag", "\"v2\"".parse().unwrap());
        let refreshed = o.with_headers(headers, o.times, o.lifetime_source, o.rules);
        s.update(digest(&key), &HeaderMap::new(), &o, Arc::new(refreshed))
            .await;
    }
    for i in 3..6 {
        // A soft purge: the same rewrite, of objects never served.
        let key = format!("http|a|/old{i}");
        assert_eq!(s.mark_stale(digest(&key), SystemClock.now()).await, 1);
    }
    assert_settled(&s, dir.path()).await;
    // New objects push the old ones out; never-served victims are reused.
    for i in 0..40u8 {
        let key = format!("http|a|/new{i}");
        fill(&s, 0, &key, &body(20_000, 100 + i), "\"new\"")
            .await
            .unwrap();
    }
    assert_settled(&s, dir.path()).await;
    assert!(events.get("disk-recycled") >= 3, "files were recycled");
    assert_eq!(
        served(&s).await,
        s.zones()[0].objects(),
        "every indexed object is served"
    );
    drop(s);
    let s = store(cfg(), 0, events.clone()).await;
    assert_eq!(events.get("bad-head"), 0);
    assert_eq!(
        served(&s).await,
        s.zones()[0].objects(),
        "after a restart too"
    );
    assert_settled(&s, dir.path()).await;
}

/// How many of n00101's objects are served, each checked byte for byte.
async fn served(s: &Store) -> u64 {
    let mut n = 0;
    for i in 0..6u8 {
        if let Some((b, etag)) = get(s, &format!("http|a|/old{i}")).await {
            let want = if i < 3 { "\"v2\"" } else { "\"v1\"" };
            assert_eq!((b, etag.as_str()), (body(20_000, i), want));
            n += 1;
        }
    }
    for i in 0..40u8 {
        if let Some((b, etag)) = get(s, &format!("http|a|/new{i}")).await {
            assert_eq!((b, etag.as_str()), (body(20_000, 100 + i), "\"new\""));
            n += 1;
        }
    }
    n
}

// n00102: an evicted file that was served from disk is never reused (its
// pages may still sit in a socket's queue after a sendfile); one never
// served is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00102_a_served_file_is_never_recycled() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    // Room for two 60 KB objects.
    let s = store(vec![zone("z", dir.path(), 160 << 10)], 0, events.clone()).await;
    fill(&s, 0, "http|a|/served", &body(60_000, 1), "\"a\"")
        .await
        .unwrap();
    fill(&s, 0, "http|a|/other", &body(60_000, 3), "\"c\"")
        .await
        .unwrap();
    assert!(get(&s, "http|a|/served").await.is_some());
    assert!(get(&s, "http|a|/other").await.is_some());
    // Both were served: the third evicts one, and unlinks it.
    fill(&s, 0, "http|a|/third", &body(60_000, 2), "\"b\"")
        .await
        .unwrap();
    assert_eq!(events.get("evicted-size"), 1);
    assert_eq!(
        events.get("disk-recycled"),
        0,
        "a served file is not reused"
    );
    // The third was never served: the next eviction takes it and reuses it.
    let evicted_third_next = get(&s, "http|a|/served").await.is_some() as u64
        + get(&s, "http|a|/other").await.is_some() as u64;
    assert_eq!(evicted_third_next, 1);
    fill(&s, 0, "http|a|/fourth", &body(60_000, 4), "\"d\"")
        .await
        .unwrap();
    assert_eq!(
        events.get("disk-recycled"),
        1,
        "a never-served file is reused"
    );
    assert_eq!(get(&s, "http|a|/fourth").await.unwrap().0, body(60_000, 4));
    assert_settled(&s, dir.path()).await;
}

// n00103: a writer dropped while it waits for room on the pool (a fill
// that gives up on a slow disk mid-write) leaves the account exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00103_a_writer_cancelled_while_it_grows_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    let s = store(vec![zone("z", dir.path(), 8 << 20)], 0, events.clone()).await;
    // Fill most of the zone so that growing must evict (a pool job).
    for i in 0..5u8 {
        fill(
            &s,
            0,
            &format!("http|a|/f{i}"),
            &body(1_400_000, i),
            "\"x\"",
        )
        .await
        .unwrap();
    }
    let z = s.zones()[0].clone();
    let key = "http|a|/grows";
    // Declared small, grows past its reservation.
    let mut w = s
        .disk_writer(0, digest(key), Digest(0), Some(1000), 256)
        .await
        .unwrap();
    z.io().gate().hold_writes(true);
    let attempt = {
        let chunk = Bytes::from(body(3 << 20, 9));
        async move {
            let r = w.write(chunk).await;
            drop(w);
            r
        }
    };
    let task = tokio::spawn(attempt);
    z.io().gate().wait_held(1).await;
    // The fill gives up: the write future (and the writer) are dropped
    // while the reservation job is held on the pool.
    task.abort();
    let _ = task.await;
    z.io().gate().hold_writes(false);
    assert_settled(&s, dir.path()).await;
}

// n00104: a commit whose caller stopped waiting (the fill's timeout at
// its end) runs to its end: the object is indexed and accounted, not a
// file behind the index's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00104_a_commit_outlives_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("z", dir.path(), 8 << 20)];
    let s = store(cfg(), 0, events.clone()).await;
    let z = s.zones()[0].clone();
    let key = "http|a|/slow";
    let epoch = s.catalog().epoch();
    let mut w = s
        .disk_writer(0, digest(key), Digest(0), Some(100_000), 256)
        .await
        .unwrap();
    w.write(Bytes::from(body(100_000, 5))).await.unwrap();
    z.io().gate().hold_writes(true);
    let h = head(key, "\"s\"");
    let finish = s.finish_disk(w, digest(key), &h, epoch);
    let timed_out = tokio::time::timeout(Duration::from_millis(50), async {
        tokio::join!(finish, z.io().gate().wait_held(1)).0
    })
    .await;
    assert!(timed_out.is_err(), "the commit is held");
    z.io().gate().hold_writes(false);
    assert_settled(&s, dir.path()).await;
    assert_eq!(z.objects(), 1);
    assert_eq!(get(&s, key).await.unwrap().0, body(100_000, 5));
    drop(s);
    let s = store(cfg(), 0, events).await;
    assert_eq!(get(&s, key).await.unwrap().0, body(100_000, 5));
    assert_settled(&s, dir.path()).await;
}

// n00105: a new version stored in a second zone, or only in memory,
// supersedes the copy in the first zone (asked first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00105_a_new_version_in_another_tier_wins() {
    let (d0, d1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("a", d0.path(), 8 << 20), zone("b", d1.path(), 8 << 20)];
    let s = store(cfg(), 4 << 20, events.clone()).await;
    let key = "http|a|/moves";
    fill(&s, 0, key, &body(1000, 1), "\"v1\"").await.unwrap();
    fill(&s, 1, key, &body(900_000, 2), "\"v2\"").await.unwrap();
    assert_eq!(get(&s, key).await.unwrap().1, "\"v2\"");
    // A third version only in memory (no disk copy).
    let obj = hoard_store::object::StoredObject::new(
        key.into(),
        VaryNames::default(),
        StatusCode::OK,
        head(key, "\"v3\"").headers,
        head(key, "\"v3\"").times,
        LifetimeSource::MaxAge,
        StoredRules::new(&CacheControl::default(), None, None),
        ObjectBody::from_chunks(vec![Bytes::from(body(10, 3))]),
    );
    let epoch = s.catalog().epoch();
    s.insert(digest(key), &HeaderMap::new(), Arc::new(obj), epoch)
        .unwrap();
    assert_eq!(get(&s, key).await.unwrap().1, "\"v3\"");
    s.memory().unwrap().remove_all(digest(key));
    assert!(
        get(&s, key).await.is_none(),
        "no older version is left on disk"
    );
    for z in s.zones() {
        z.io().settle().await;
    }
    drop(s);
    let s = store(cfg(), 4 << 20, events).await;
    assert!(get(&s, key).await.is_none(), "nor after a restart");
}

// n00106: a purge that comes while a fill's commit waits on the pool:
// the fill does not publish, and nothing comes back after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00106_a_purge_during_the_commit_wins() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("z", dir.path(), 8 << 20)];
    let s = store(cfg(), 0, events.clone()).await;
    let z = s.zones()[0].clone();
    let key = "http|a.com|/p";
    fill(&s, 0, key, &body(10, 1), "\"old\"").await.unwrap();
    let epoch = s.catalog().epoch();
    let mut w = s
        .disk_writer(0, digest(key), Digest(0), Some(5000), 256)
        .await
        .unwrap();
    w.write(Bytes::from(body(5000, 2))).await.unwrap();
    z.io().gate().hold_writes(true);
    let commit = {
        let s = s.clone();
        tokio::spawn(async move {
            s.finish_disk(w, digest(key), &head(key, "\"new\""), epoch)
                .await
        })
    };
    z.io().gate().wait_held(1).await;
    let purged = {
        let s = s.clone();
        tokio::spawn(async move {
            let sel = Selector::Url {
                scheme: "http".into(),
                host: "a.com".into(),
                target: "/p".into(),
            };
            s.purge(&sel, false, SystemClock.now()).await
        })
    };
    // The purge joins the log (it does not wait for the held commit's
    // rename: the commit has not taken the gate yet), then lets writes go.
    while s.catalog().epoch() == epoch {
        tokio::task::yield_now().await;
    }
    z.io().gate().hold_writes(false);
    assert_eq!(commit.await.unwrap(), Err(Abandoned::Purged));
    assert_eq!(purged.await.unwrap(), 1, "the old copy went");
    assert!(get(&s, key).await.is_none());
    assert_settled(&s, dir.path()).await;
    drop(s);
    let s = store(cfg(), 0, events).await;
    assert!(get(&s, key).await.is_none(), "nothing comes back");
}

// n00107: a file planted in the cache directory (a valid prefix of one
// key, an intact head of another, in either slot, at any generation) is
// never served for any key: when the planted slot is the one read, the
// file is removed and counted (the loader logs it); when it is not, the
// file's own object is served, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00107_a_planted_file_is_never_served() {
    for (slot, generation) in [(0u32, 1u64), (0, 9), (1, 1), (1, 2), (1, 7)] {
        let dir = tempfile::tempdir().unwrap();
        let events = Arc::new(Events::default());
        let cfg = || vec![zone("z", dir.path(), 8 << 20)];
        let s = store(cfg(), 0, events.clone()).await;
        let (a, b) = ("http|a|/a", "http|a|/b");
        fill(&s, 0, a, &body(5000, 1), "\"a\"").await.unwrap();
        fill(&s, 0, b, &body(5000, 2), "\"b\"").await.unwrap();
        assert_settled(&s, dir.path()).await;
        drop(s);
        // A's file: its prefix stays; a slot holds B's head, with a
        // checksum valid for A's serial.
        let path = find_file(dir.path(), digest(a).0);
        let mut bytes = std::fs::read(&path).unwrap();
        let prefix = hoard_store::disk::format::Prefix::decode(&bytes).unwrap();
        let planted = hoard_store::disk::format::encode_slot(
            prefix.serial,
            generation,
            &head(b, "\"b\"").encode(),
            prefix.slot_len,
        )
        .unwrap();
        let at = 96 + (slot * prefix.slot_len) as usize;
        bytes[at..at + planted.len()].copy_from_slice(&planted);
        std::fs::write(&path, &bytes).unwrap();
        let s = store(cfg(), 0, events.clone()).await;
        // Slot A holds generation 1: a planted slot B of generation 1 is not read.
        let read = slot == 0 || generation > 1;
        let case = format!("slot {slot}, generation {generation}");
        if read {
            assert_eq!(events.get("foreign-head"), 1, "{case}: counted");
            assert!(!path.exists(), "{case}: removed");
            assert!(get(&s, a).await.is_none(), "{case}");
        } else {
            assert_eq!(events.get("foreign-head"), 0, "{case}");
            assert_eq!(get(&s, a).await.unwrap(), (body(5000, 1), "\"a\"".into()));
        }
        assert_eq!(get(&s, b).await.unwrap().0, body(5000, 2), "{case}");
        assert_settled(&s, dir.path()).await;
    }
}

fn find_file(dir: &Path, id: u128) -> std::path::PathBuf {
    let prefix = format!("{id:032x}-");
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if !sub.file_type().unwrap().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
            if f.file_name().to_string_lossy().starts_with(&prefix) {
                return f.path();
            }
        }
    }
    panic!("no file for {id:032x}");
}

/// A stored body's bytes.
async fn bytes_of(b: &ObjectBody) -> Vec<u8> {
    match b {
        ObjectBody::Chunks { chunks, .. } => chunks.concat(),
        ObjectBody::File(f) => f.read_all().await.unwrap().concat(),
    }
}

/// The object a lookup finds.
async fn found(s: &Store, key: &str) -> Arc<hoard_store::object::StoredObject> {
    match s.lookup(digest(key), key, &HeaderMap::new()).await {
        Lookup::Hit(o) => o,
        other => panic!("{key}: no hit: {other:?}"),
    }
}

// n00108: an object written again with its parts (content codings) takes
// the place of its first copy only while that copy is the one stored with
// the same head: a 304 or a newer version meanwhile wins. Parts are read
// back (small and block by block), survive a restart, and the account is
// the files throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00108_parts_replace_only_the_copy_they_were_made_from() {
    use hoard_policy::encoding::Coding;
    use hoard_store::object::Part;
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("a", dir.path(), 16 << 20)];
    let s = store(cfg(), 0, events.clone()).await;
    for (key, len) in [("http|a|/small", 5_000), ("http|a|/large", 300_000)] {
        let identity = body(len, 4);
        let epoch = s.catalog().epoch();
        let mut w = s
            .disk_writer(0, digest(key), Digest(0), None, 256)
            .await
            .unwrap();
        w.write(Bytes::from(identity.clone())).await.unwrap();
        let first = s
            .finish_disk(w, digest(key), &head(key, "\"v1\""), epoch)
            .await
            .unwrap();
        let parts = vec![
            Part::in_memory(Coding::Br, Bytes::from(body(777, 5))),
            Part::in_memory(Coding::Gzip, Bytes::from(body(70_001, 6))),
        ];
        let chunks = [Bytes::from(identity.clone())];
        let ds = (digest(key), Digest(0));
        let h = head(key, "\"v1\"");
        s.store_with_parts(0, ds, &h, &chunks, &parts, epoch, Some(first))
            .await
            .unwrap();
        // The first copy is no longer the one stored.
        let again = s
            .store_with_parts(0, ds, &h, &chunks, &parts, epoch, Some(first))
            .await;
        assert_eq!(again.unwrap_err(), Abandoned::Superseded, "{key}");
        let o = found(&s, key).await;
        assert!(bytes_of(&o.body).await == identity, "{key}");
        assert_eq!(o.parts.len(), 2);
        assert!(bytes_of(&o.part(Coding::Br).unwrap().body).await == body(777, 5));
        assert!(bytes_of(&o.part(Coding::Gzip).unwrap().body).await == body(70_001, 6));
        // A 304 rewrites the head (with the parts): a copy made from the
        // head before it no longer replaces it.
        let at = o.disk.unwrap();
        let refreshed = Arc::new(o.with_headers(
            head(key, "\"v1\"").headers,
            o.times,
            o.lifetime_source,
            o.rules,
        ));
        s.update(digest(key), &HeaderMap::new(), &o, refreshed)
            .await;
        let late = s
            .store_with_parts(0, ds, &h, &chunks, &parts[..1], epoch, Some(at))
            .await;
        assert_eq!(late.unwrap_err(), Abandoned::Superseded, "{key}");
        assert_eq!(
            found(&s, key).await.parts.len(),
            2,
            "the 304 kept the parts"
        );
    }
    assert_settled(&s, dir.path()).await;
    drop(s);
    let s = store(cfg(), 0, events).await;
    for key in ["http|a|/small", "http|a|/large"] {
        let o = found(&s, key).await;
        assert!(bytes_of(&o.part(Coding::Br).unwrap().body).await == body(777, 5));
    }
    // A newer version wins over parts made from the older one.
    let key = "http|a|/small";
    let old = found(&s, key).await.disk.unwrap();
    fill(&s, 0, key, &body(6_000, 9), "\"v2\"").await.unwrap();
    let epoch = s.catalog().epoch();
    let stale = s
        .store_with_parts(
            0,
            (digest(key), Digest(0)),
            &head(key, "\"v1\""),
            &[Bytes::from(body(5_000, 4))],
            &[Part::in_memory(Coding::Br, Bytes::from_static(b"x"))],
            epoch,
            Some(old),
        )
        .await;
    assert_eq!(stale.unwrap_err(), Abandoned::Superseded);
    assert_eq!(
        get(&s, key).await.unwrap(),
        (body(6_000, 9), "\"v2\"".into())
    );
    assert_settled(&s, dir.path()).await;
}

// n00109: durability = "power" syncs a new object's file and then its
// directory before it is published (two syncs, counted), and a head
// rewrite (a 304) before it counts; "process" syncs nothing. Both serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00109_power_durability_syncs_before_publishing() {
    for (durability, syncs) in [(Durability::Power, [2, 3]), (Durability::Process, [0, 0])] {
        let dir = tempfile::tempdir().unwrap();
        let events = Arc::new(Events::default());
        let mut cfg = zone("z", dir.path(), 8 << 20);
        cfg.durability = durability;
        let s = store(vec![cfg], 0, events.clone()).await;
        let key = "http|a.com|/d";
        fill(&s, 0, key, &body(70_000, 3), "\"1\"").await.unwrap();
        assert_eq!(events.get("synced"), syncs[0], "{durability:?}");
        let Lookup::Hit(o) = s.lookup(digest(key), key, &HeaderMap::new()).await else {
            panic!("a hit");
        };
        let mut headers = o.headers.clone();
        headers.insert("x-new", "1".parse().unwrap());
        let refreshed = o.with_headers(headers, o.times, o.lifetime_source, o.rules);
        s.update(digest(key), &HeaderMap::new(), &o, Arc::new(refreshed))
            .await;
        assert_eq!(events.get("synced"), syncs[1], "{durability:?}");
        assert_eq!(get(&s, key).await.unwrap().0, body(70_000, 3));
    }
}

// n00110: a purged object whose file cannot be unlinked (EACCES injected)
// is recorded as a tombstone: a restart whose unlinks still fail does not
// index it (the file and the tombstone stay); a restart whose unlinks work
// removes the file and the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n00110_a_tombstone_keeps_an_unremovable_file_out_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tombstones");
    let events = Arc::new(Events::default());
    let cfg = || vec![zone("z", dir.path(), 8 << 20)];
    let s = store(cfg(), 0, events.clone()).await;
    let key = "http|a.com|/t";
    fill(&s, 0, key, &body(5000, 1), "\"1\"").await.unwrap();
    s.zones()[0].io().gate().fail_unlinks(true);
    let sel = Selector::Key(key.into());
    assert_eq!(s.purge(&sel, false, SystemClock.now()).await, 1);
    assert_eq!(events.get("tombstoned"), 1);
    assert!(get(&s, key).await.is_none());
    assert_eq!(files(dir.path()).0, 1, "the file stays");
    drop(s);

    // Unlinks still fail: not indexed, still there, still tombstoned.
    let s =
        Arc::new(Store::new(0, 64 << 20, cfg(), events.clone(), Arc::new(SystemClock)).unwrap());
    s.zones()[0].io().gate().fail_unlinks(true);
    s.start();
    while s.zones()[0].loading() {
        tokio::task::yield_now().await;
    }
    assert!(get(&s, key).await.is_none());
    assert_eq!(
        (events.get("loaded"), events.get("tombstone-cleared")),
        (0, 0)
    );
    assert_eq!(files(dir.path()).0, 1);
    assert!(log.exists());
    drop(s);

    // Unlinks work again: the file and its tombstone go.
    let s = store(cfg(), 0, events.clone()).await;
    assert!(get(&s, key).await.is_none());
    assert_eq!(
        (events.get("loaded"), events.get("tombstone-cleared")),
        (0, 1)
    );
    assert_eq!(files(dir.path()).0, 0);
    assert!(!log.exists());
    assert_eq!(s.zones()[0].used(), 0);
}
