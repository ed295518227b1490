//! n (nothing lost, nothing wrong), store series: what a disk zone counts
//! is what it serves, byte for byte, across recycling and restarts; a file
//! that names another key is never served; a purge or an invalidation
//! that comes while a fill commits to disk (held with the disk gate) or
//! while an uncoalesced fill streams (held by the origin) wins; a disk that
//! stalls past the origin's read timeout leaves the account matching the
//! files; a new version stored in another zone wins over the old one.
//!
//! Numbered n003xx: n_races.rs holds n00001-n00005.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hoard_store::disk::format::{encode_slot, pick_slot, Head, Prefix, PREFIX_LEN};
use hoard_store::disk::DiskZone;
use hoard_testkit::{Barrier, Conn, Origin, Test, TestProxy};

use super::secs;

/// A body of `len` bytes that no other URL has: the URL, then bytes
/// from a generator seeded by the URL.
fn ubody(url: &str, len: usize) -> Vec<u8> {
    let mut seed: u64 = 0xcbf2_9ce4_8422_2325;
    for b in url.bytes() {
        seed = (seed ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut out: Vec<u8> = format!("<{url}>").into_bytes();
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push((x >> 24) as u8);
    }
    out.truncate(len);
    out
}

/// Every file under a zone directory (two levels), with its length.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for sub in rd.flatten() {
        if sub.path().is_dir() {
            for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
                out.push((f.path(), f.metadata().unwrap().len()));
            }
        }
    }
    out
}

/// Published object files (not `.tmp`), with their lengths.
fn object_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    files(dir)
        .into_iter()
        .filter(|(p, _)| p.extension().is_none())
        .collect()
}

/// Temporary files left in a zone directory.
fn tmp_files(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect()
}

/// The key text in an object file's current head.
fn head_key(path: &Path) -> String {
    let b = std::fs::read(path).unwrap();
    let p = Prefix::decode(&b).unwrap();
    let slot = pick_slot(
        &b[PREFIX_LEN as usize..p.data_offset() as usize],
        p.slot_len,
        p.serial,
    )
    .unwrap();
    Head::decode(slot.head).unwrap().key
}

/// The object file whose head is for path `url`.
fn file_of(dir: &Path, url: &str) -> PathBuf {
    let suffix = format!("|{url}");
    let found: Vec<PathBuf> = object_files(dir)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| head_key(p).ends_with(&suffix))
        .collect();
    assert_eq!(found.len(), 1, "one file for {url}: {found:?}");
    found[0].clone()
}

/// Asserts that the zone's account matches its directory: every object
/// file is indexed, no temporary file is left, and the bytes accounted are
/// the files' lengths in 4 KiB blocks. Call after `settle`.
fn assert_account(zone: &DiskZone, dir: &Path, when: &str) {
    let objs = object_files(dir);
    assert_eq!(
        objs.len() as u64,
        zone.objects(),
        "{when}: object files on disk vs objects indexed: {objs:?}"
    );
    let tmps = tmp_files(dir);
    assert!(tmps.is_empty(), "{when}: temporary files left: {tmps:?}");
    let on_disk: u64 = objs.iter().map(|(_, l)| l.div_ceil(4096) * 4096).sum();
    assert_eq!(
        zone.used(),
        on_disk,
        "{when}: bytes accounted vs files on disk ({} files)",
        objs.len()
    );
}

/// Lets held disk writes go when dropped, so that a failing case never
/// leaves a blocking thread held (the runtime would wait for it).
struct Release(Arc<DiskZone>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.io().gate().hold_writes(false);
    }
}

/// A proxy over a disk zone of `max_size` in `dir` with no memory tier
/// (every hit read from disk), the admin API on, its loader done.
async fn zone_proxy(t: &Test, origin: &Origin, dir: &Path, max_size: u64) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, max_size, 0)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy over a 64 MiB disk zone in `dir`, no memory tier, whose route
/// does not coalesce (each miss is a fill of its own, not in the in-flight
/// table), the admin API on.
async fn uncoalesced_proxy(t: &Test, origin: &Origin, dir: &Path) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .route(|r| r.coalesce = false)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy over a 64 MiB disk zone in `dir`, no memory tier, with a 1 s
/// upstream read_timeout.
async fn stall_proxy(t: &Test, origin: &Origin, dir: &Path) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .upstream(|u| u.read_timeout = Duration::from_secs(1))
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy from a TOML text with `zones` disk zones, their loaders done.
async fn toml_proxy(t: &Test, origin: &Origin, toml: &str, zones: u64) -> TestProxy {
    let proxy = t.proxy().toml(origin, toml).start().await;
    proxy.wait_counter("disk_load_done", zones).await;
    proxy
}

/// How many of `urls` are served from the cache (`only-if-cached`); each
/// one served must be exactly its own body.
async fn served(t: &Test, proxy: &TestProxy, urls: &[(String, usize)]) -> u64 {
    let mut n = 0;
    for (url, len) in urls {
        let r = t
            .client(proxy)
            .get(url)
            .hdr("Cache-Control", "only-if-cached")
            .send()
            .await;
        match r.status {
            200 => {
                assert!(
                    r.body[..] == ubody(url, *len)[..],
                    "{url}: served {} bytes that are not its body (starts {:?})",
                    r.body.len(),
                    String::from_utf8_lossy(&r.body[..r.body.len().min(40)])
                );
                n += 1;
            }
            504 => {}
            other => panic!("{url}: status {other}"),
        }
    }
    n
}

/// `url` from the cache only: its status and body.
async fn cached(t: &Test, proxy: &TestProxy, url: &str) -> (u16, Vec<u8>) {
    let r = t
        .client(proxy)
        .get(url)
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await;
    (r.status, r.body.to_vec())
}

// n00301: the reported bug, as the user hit it. Memory tier off, a 1 MiB
// zone: ten 20 KB objects (max-age=1, an ETag) are stored; a second later
// each is refreshed by a 304 (its head rewritten into its file's second
// slot); then 150 objects of 100 KB push them out, so that evicted files
// are recycled for new objects. Every object the zone's index holds is
// served, each with its own bytes, and as many as it holds; the same after
// a restart on the directory.
#[tokio::test]
async fn n00301_every_indexed_object_is_served_after_304_and_recycling() {
    let t = Test::new("n00301");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 0..10 {
                let url = format!("/small/{i}");
                s.rxreq().await.expect_url(&url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=1")
                    .hdr("ETag", format!("\"s{i}\""))
                    .body(ubody(&url, 20_000))
                    .send()
                    .await;
            }
            for i in 0..10 {
                let url = format!("/small/{i}");
                s.rxreq()
                    .await
                    .expect_url(&url)
                    .expect_header("if-none-match", &format!("\"s{i}\""));
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", format!("\"s{i}\""))
                    .no_body()
                    .send()
                    .await;
            }
            for i in 0..150 {
                let url = format!("/big/{i}");
                s.rxreq().await.expect_url(&url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", format!("\"b{i}\""))
                    .body(ubody(&url, 100_000))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 1 << 20).await;
    let mut urls: Vec<(String, usize)> = Vec::new();
    for i in 0..10 {
        let url = format!("/small/{i}");
        t.client(&proxy)
            .get(&url)
            .send()
            .await
            .expect_body(ubody(&url, 20_000));
        urls.push((url, 20_000));
    }
    proxy.wait_counter("disk_stored", 10).await;
    t.clock.advance(secs(2));
    for (url, len) in urls.clone() {
        t.client(&proxy)
            .get(&url)
            .send()
            .await
            .expect_body(ubody(&url, len));
    }
    proxy.wait_counter("cache_revalidated_304", 10).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    // The head rewrites are done before the flood starts.
    zone.io().settle().await;
    for i in 0..150 {
        let url = format!("/big/{i}");
        t.client(&proxy)
            .get(&url)
            .send()
            .await
            .expect_body(ubody(&url, 100_000));
        urls.push((url, 100_000));
    }
    proxy.wait_counter("fills_completed", 160).await;
    zone.io().settle().await;
    assert!(
        proxy.counter("disk_files_recycled") > 0,
        "the case needs evicted files reused"
    );
    let counted = zone.objects();
    assert!(counted > 0, "the zone holds objects");
    let n = served(&t, &proxy, &urls).await;
    assert_eq!(
        n, counted,
        "objects served vs objects the zone holds (before restart)"
    );
    assert_eq!(
        zone.objects(),
        counted,
        "reading what the zone holds removed some of it"
    );
    zone.io().settle().await;
    proxy.stop().await;

    let proxy = zone_proxy(&t, &origin, &dir, 1 << 20).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    assert_eq!(zone.objects(), counted, "objects indexed after a restart");
    let n = served(&t, &proxy, &urls).await;
    assert_eq!(
        n, counted,
        "objects served vs objects the zone held (after restart)"
    );
    origin.finish().await;
}

/// Rewrites `victim` (an object file) so that its prefix still names the
/// victim's key and write, but its head (valid for this file's serial) is
/// `donor`'s, and its body and block table are `donor`'s.
fn plant_foreign_head(victim: &Path, donor: &Path) {
    let v = std::fs::read(victim).unwrap();
    let d = std::fs::read(donor).unwrap();
    let vp = Prefix::decode(&v).unwrap();
    let dp = Prefix::decode(&d).unwrap();
    let data = dp.data_offset() as usize;
    let slot = pick_slot(&d[PREFIX_LEN as usize..data], dp.slot_len, dp.serial).unwrap();
    let new_slot = encode_slot(vp.serial, slot.generation, slot.head, dp.slot_len).unwrap();
    let prefix = Prefix {
        primary: vp.primary,
        variant: vp.variant,
        serial: vp.serial,
        ..dp
    };
    let mut out = d.clone();
    out[..PREFIX_LEN as usize].copy_from_slice(&prefix.encode());
    out[PREFIX_LEN as usize..data].fill(0);
    let at = PREFIX_LEN as usize;
    out[at..at + new_slot.len()].copy_from_slice(&new_slot);
    std::fs::write(victim, out).unwrap();
}

// n00302: a planted file is never served. After /a, /b and /c are stored,
// /b's file is copied over /a's path, and /c's file is rewritten to hold
// /b's head (valid for /c's file) and body under a prefix naming /c. After
// a restart /a and /c are misses (only-if-cached: 504), /b is served with
// /b's bytes, and the loader counted both files as rejected (and removed
// them).
#[tokio::test]
async fn n00302_a_planted_file_is_never_served() {
    let t = Test::new("n00302");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for url in ["/a", "/b", "/c"] {
                s.rxreq().await.expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(ubody(url, 30_000))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 64 << 20).await;
    for url in ["/a", "/b", "/c"] {
        t.client(&proxy)
            .get(url)
            .send()
            .await
            .expect_body(ubody(url, 30_000));
    }
    proxy.wait_counter("disk_stored", 3).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().settle().await;
    proxy.stop().await;
    let (a, b, c) = (
        file_of(&dir, "/a"),
        file_of(&dir, "/b"),
        file_of(&dir, "/c"),
    );
    std::fs::copy(&b, &a).unwrap();
    plant_foreign_head(&c, &b);
    assert!(head_key(&c).ends_with("|/b"), "the planted head is /b's");

    let proxy = zone_proxy(&t, &origin, &dir, 64 << 20).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    for url in ["/a", "/c"] {
        let (status, body) = cached(&t, &proxy, url).await;
        assert_eq!(
            status,
            504,
            "{url}: a planted file was served ({} bytes, starts {:?})",
            body.len(),
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
    }
    let (status, body) = cached(&t, &proxy, "/b").await;
    assert_eq!(status, 200, "/b is served");
    assert!(body == ubody("/b", 30_000), "/b is served with /b's bytes");
    let rejected: u64 = proxy
        .counters()
        .snapshot()
        .iter()
        .filter(|(name, _)| name.starts_with("disk_rejected_"))
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(
        rejected,
        2,
        "both planted files counted as rejected: {:?}",
        proxy.counters().snapshot()
    );
    proxy.expect_counter("disk_loaded", 1);
    zone.io().settle().await;
    assert_eq!(object_files(&dir).len(), 1, "the planted files are removed");
    assert_eq!(zone.objects(), 1);
    origin.finish().await;
}

/// `/p`'s first answer: a head with `Content-Length: 30000`, 1000 body
/// bytes, two syncs at `held` (between them the test holds the disk), the
/// rest.
async fn send_held_p(s: &mut hoard_testkit::Script, held: &Barrier) {
    s.rxreq().await.expect_method("GET").expect_url("/p");
    s.txresp(200)
        .hdr("Cache-Control", "max-age=600")
        .hdr("Content-Length", "30000")
        .send_head()
        .await;
    let b = ubody("/p", 30_000);
    s.chunk(&b[..1000]).await;
    held.sync().await;
    held.sync().await;
    s.chunk(&b[1000..]).await;
    s.end().await;
}

/// Starts a GET of `/p` and reads its first body bytes (its fill has its
/// disk writer by then), holds every disk write, lets the origin send the
/// rest, and waits until the fill's commit (table, head, prefix, rename,
/// index entry) is held at the disk gate.
async fn hold_the_commit(t: &Test, proxy: &TestProxy, held: &Barrier) -> (Conn, Release) {
    let zone = proxy.store().zone("disk").unwrap().clone();
    let mut conn = t.client(proxy).connect().await;
    conn.get("/p").tx().await;
    conn.read_until(&ubody("/p", 30_000)[..1000]).await;
    held.sync().await;
    zone.io().settle().await;
    zone.io().gate().hold_writes(true);
    let release = Release(zone.clone());
    held.sync().await;
    tokio::time::timeout(Duration::from_secs(10), zone.io().gate().wait_held(1))
        .await
        .expect("the fill's disk commit is held at the gate");
    (conn, release)
}

/// After a purge or an invalidation raced `/p`'s commit: the zone keeps
/// nothing of it, the next GET goes to the origin (`new` is its body) and
/// is stored, and after a restart `/p` is `new`, never the old body.
async fn after_the_race(t: &Test, origin: Origin, proxy: TestProxy, dir: &Path, new: &str) {
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().settle().await;
    assert_eq!(zone.objects(), 0, "the raced object is not indexed");
    assert!(
        object_files(dir).is_empty(),
        "the raced object left a file: {:?}",
        object_files(dir)
    );
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body(ubody(new, 5000));
    proxy.wait_counter("disk_stored", 1).await;
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body(ubody(new, 5000));
    zone.io().settle().await;
    proxy.stop().await;

    let proxy = zone_proxy(t, &origin, dir, 64 << 20).await;
    let (status, body) = cached(t, &proxy, "/p").await;
    assert_eq!(status, 200, "/p is served after the restart");
    assert!(
        body == ubody(new, 5000),
        "after a restart /p is not the body fetched after the race ({} bytes)",
        body.len()
    );
    origin.finish().await;
}

// n00303: a purge (admin API) between the end of a fill's body and its
// disk commit wins: the commit is held at the disk gate while the purge
// runs; once writes go, the zone keeps nothing of the fill, the next
// request is a miss that the origin answers with a new body, and after a
// restart the pre-purge body does not come back.
#[tokio::test]
async fn n00303_a_purge_during_the_disk_commit_wins() {
    let t = Test::new("n00303");
    let held = t.barrier(2);
    let h = held.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            send_held_p(&mut s, &h).await;
            s.rxreq().await.expect_method("GET").expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body(ubody("/p after purge", 5000))
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 64 << 20).await;
    let (mut client, release) = hold_the_commit(&t, &proxy, &held).await;
    super::o_ops::purge(&t, &proxy, r#"{"url": "http://localhost/p"}"#)
        .await
        .expect_status(200);
    drop(release);
    // The client that asked gets the whole body.
    client.read_until(&ubody("/p", 30_000)[29_000..]).await;
    after_the_race(&t, origin, proxy, &dir, "/p after purge").await;
}

// n00304: the same with an unsafe method: a POST to the URL (answered 200
// by the origin) while the GET's commit is held invalidates it (RFC 9111
// §4.4): the pre-POST body is not stored, the next GET goes to the origin,
// and a restart does not bring the pre-POST body back.
#[tokio::test]
async fn n00304_a_post_during_the_disk_commit_wins() {
    let t = Test::new("n00304");
    let held = t.barrier(2);
    let h = held.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            send_held_p(&mut s, &h).await;
            s.rxreq().await.expect_method("POST").expect_url("/p");
            s.txresp(200).body("changed").send().await;
            s.rxreq().await.expect_method("GET").expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body(ubody("/p after post", 5000))
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 64 << 20).await;
    let (mut client, release) = hold_the_commit(&t, &proxy, &held).await;
    t.client(&proxy)
        .post("/p")
        .body("x")
        .send()
        .await
        .expect_status(200)
        .expect_body("changed");
    drop(release);
    client.read_until(&ubody("/p", 30_000)[29_000..]).await;
    after_the_race(&t, origin, proxy, &dir, "/p after post").await;
}

// n00305: fills that are not in the in-flight table (the route has
// `coalesce = false`), over a disk zone with no memory tier, held mid-body
// by the origin: /c is purged (admin API) while held, /d is invalidated by
// a POST (answered 200) while held. After their bodies end neither is
// stored: the next GETs go to the origin, and after a restart what is
// served is what was fetched after the purge and the POST.
#[tokio::test]
async fn n00305_a_purge_or_a_post_reaches_an_uncoalesced_fill() {
    let t = Test::new("n00305");
    let held = t.barrier(2);
    let h = held.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (url, between) in [("/c", None), ("/d", Some("POST"))] {
                let first = s.rxreq().await;
                first.expect_method("GET").expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Length", "20000")
                    .send_head()
                    .await;
                let b = ubody(url, 20_000);
                s.chunk(&b[..1000]).await;
                h.sync().await;
                if let Some(method) = between {
                    s.rxreq_concurrent()
                        .await
                        .expect_method(method)
                        .expect_url(url);
                    s.txresp(200).body("changed").send().await;
                    s.switch_to(&first);
                }
                h.sync().await;
                s.chunk(&b[1000..]).await;
                s.end().await;
            }
            for url in ["/c", "/d"] {
                s.rxreq().await.expect_method("GET").expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(ubody(&format!("{url} new"), 5000))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = uncoalesced_proxy(&t, &origin, &dir).await;
    for url in ["/c", "/d"] {
        let mut conn = t.client(&proxy).connect().await;
        conn.get(url).tx().await;
        conn.read_until(&ubody(url, 20_000)[..1000]).await;
        held.sync().await;
        if url == "/c" {
            super::o_ops::purge(&t, &proxy, r#"{"url": "http://localhost/c"}"#)
                .await
                .expect_status(200);
        } else {
            t.client(&proxy)
                .post(url)
                .body("x")
                .send()
                .await
                .expect_status(200)
                .expect_body("changed");
        }
        held.sync().await;
        conn.read_until(&ubody(url, 20_000)[19_000..]).await;
    }
    proxy.wait_counter("fills_completed", 2).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().settle().await;
    assert_eq!(zone.objects(), 0, "neither raced fill is indexed");
    assert!(
        object_files(&dir).is_empty(),
        "a raced fill left a file: {:?}",
        object_files(&dir)
    );
    for url in ["/c", "/d"] {
        let new = format!("{url} new");
        t.client(&proxy)
            .get(url)
            .send()
            .await
            .expect_cache_status("fwd=uri-miss")
            .expect_body(ubody(&new, 5000));
    }
    proxy.wait_counter("disk_stored", 2).await;
    zone.io().settle().await;
    proxy.stop().await;

    let proxy = uncoalesced_proxy(&t, &origin, &dir).await;
    for url in ["/c", "/d"] {
        let new = format!("{url} new");
        let (status, body) = cached(&t, &proxy, url).await;
        assert_eq!(status, 200, "{url} is served after the restart");
        assert!(
            body == ubody(&new, 5000),
            "after a restart {url} is not the body fetched after the race"
        );
    }
    origin.finish().await;
}

// n00306: a disk that stalls at the end of a fill for longer than the
// upstream's read_timeout (1 s here, real time: tokio's timer). /s is
// stored (v1), then a request with `Cache-Control: no-cache` fetches v2,
// whose disk commit is held at the gate: the client gets v2 once the
// read_timeout gives up waiting on the disk. Then writes go: the commit
// completes in the background. Afterwards the zone's account matches the
// files (every object file indexed, no temporary file, bytes accounted =
// the files' lengths in 4 KiB blocks), and /s serves v2, before and after
// a restart.
#[tokio::test]
async fn n00306_a_disk_stall_past_read_timeout_keeps_the_account_and_the_newest_body() {
    let t = Test::new("n00306");
    let held = t.barrier(2);
    let h = held.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/s");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body(ubody("/s v1", 200_000))
                .send()
                .await;
            s.rxreq().await.expect_url("/s");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", "300000")
                .send_head()
                .await;
            let b = ubody("/s v2", 300_000);
            s.chunk(&b[..1000]).await;
            h.sync().await;
            h.sync().await;
            s.chunk(&b[1000..]).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = stall_proxy(&t, &origin, &dir).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body(ubody("/s v1", 200_000));
    proxy.wait_counter("disk_stored", 1).await;
    zone.io().settle().await;

    let mut conn = t.client(&proxy).connect().await;
    conn.get("/s").hdr("Cache-Control", "no-cache").tx().await;
    let v2 = ubody("/s v2", 300_000);
    conn.read_until(&v2[..1000]).await;
    held.sync().await;
    zone.io().settle().await;
    zone.io().gate().hold_writes(true);
    let release = Release(zone.clone());
    held.sync().await;
    tokio::time::timeout(Duration::from_secs(10), zone.io().gate().wait_held(1))
        .await
        .expect("the fill's disk commit is held at the gate");
    // The fill stops waiting for the disk after read_timeout: the client
    // gets the end of the body while the commit is still held.
    conn.read_until(&v2[299_000..]).await;
    assert_eq!(
        proxy.counter("disk_stored"),
        1,
        "v2 cannot be published while the disk is held"
    );
    drop(release);
    proxy.wait_counter("disk_stored", 2).await;
    zone.io().settle().await;
    assert_account(&zone, &dir, "after the stall");
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body(&v2);
    zone.io().settle().await;
    proxy.stop().await;

    let proxy = stall_proxy(&t, &origin, &dir).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().settle().await;
    assert_account(&zone, &dir, "after a restart");
    let (status, body) = cached(&t, &proxy, "/s").await;
    assert_eq!(status, 200, "/s is served after the restart");
    assert!(
        body == v2,
        "after a restart /s is not the newest body ({} bytes, starts {:?})",
        body.len(),
        String::from_utf8_lossy(&body[..body.len().min(10)])
    );
    origin.finish().await;
}

// n00307: a new version stored in another zone wins. Two zones, "a" first
// and "b" for objects declared at least 256 KiB. /v's first body is small
// (zone a, max-age=1); once it is stale the origin's new version is large
// (zone b). /v then serves the new body, and after a restart too, also
// when the old copy's file in zone a was still there when the proxy
// stopped (its unlink held at zone a's disk gate, as a crash between the
// new copy's publish and the old one's removal leaves it).
#[tokio::test]
async fn n00307_a_new_version_in_another_zone_wins() {
    let t = Test::new("n00307");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (url, len) in [("/v", 1000), ("/w", 1000)] {
                s.rxreq().await.expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=1")
                    .body(ubody(&format!("{url} v1"), len))
                    .send()
                    .await;
            }
            for (url, len) in [("/v", 300_000), ("/w", 300_000)] {
                s.rxreq().await.expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(ubody(&format!("{url} v2"), len))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let (a, b) = (t.dir().join("a"), t.dir().join("b"));
    let toml = format!(
        r#"
[cache]
memory_size = 0
[[cache.zone]]
name = "a"
dirs = ["{a}"]
max_size = "16MiB"
[[cache.zone]]
name = "b"
dirs = ["{b}"]
max_size = "16MiB"
[[cache.placement]]
zone = "b"
min_size = "256KiB"
[upstream.o]
servers = ["http://{{origin}}"]
"#,
        a = a.display(),
        b = b.display()
    );
    let count = |p: &TestProxy, z: &str| p.store().zone(z).unwrap().objects();
    let proxy = toml_proxy(&t, &origin, &toml, 2).await;
    for url in ["/v", "/w"] {
        t.client(&proxy)
            .get(url)
            .send()
            .await
            .expect_body(ubody(&format!("{url} v1"), 1000));
    }
    proxy.wait_counter("disk_stored", 2).await;
    assert_eq!((count(&proxy, "a"), count(&proxy, "b")), (2, 0));
    t.clock.advance(secs(2));

    // /v: the new version goes to zone b; the old one's removal completes.
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body(ubody("/v v2", 300_000));
    proxy.wait_counter("disk_stored", 3).await;
    let (za, zb) = (
        proxy.store().zone("a").unwrap().clone(),
        proxy.store().zone("b").unwrap().clone(),
    );
    za.io().settle().await;
    zb.io().settle().await;
    let (status, body) = cached(&t, &proxy, "/v").await;
    assert_eq!(status, 200, "/v is served from the cache");
    assert!(
        body == ubody("/v v2", 300_000),
        "/v is not the new body ({} bytes)",
        body.len()
    );
    assert_eq!(count(&proxy, "b"), 1, "the new /v is in zone b");

    // /w: the same, but zone a's disk writes are held, so the old copy's
    // file is still there when the proxy stops.
    za.io().gate().hold_writes(true);
    let release = Release(za.clone());
    t.client(&proxy)
        .get("/w")
        .send()
        .await
        .expect_body(ubody("/w v2", 300_000));
    proxy.wait_counter("disk_stored", 4).await;
    zb.io().settle().await;
    let (status, body) = cached(&t, &proxy, "/w").await;
    assert_eq!(status, 200, "/w is served from the cache");
    assert!(
        body == ubody("/w v2", 300_000),
        "/w is not the new body ({} bytes)",
        body.len()
    );
    proxy.stop().await;

    let proxy = toml_proxy(&t, &origin, &toml, 2).await;
    for (url, len) in [("/v", 300_000), ("/w", 300_000)] {
        let (status, body) = cached(&t, &proxy, url).await;
        assert_eq!(
            status, 200,
            "{url}: after a restart the new body is not what is served"
        );
        assert!(
            body == ubody(&format!("{url} v2"), len),
            "{url}: after a restart the body is not the new one ({} bytes)",
            body.len()
        );
    }
    drop(release);
    origin.finish().await;
}
