//! n (nothing lost, nothing wrong), store series: what a disk zone counts
//! is what it serves, byte for byte, across recycling and restarts; a file
//! that names another key is never served; a disk that stalls past the
//! origin's read timeout leaves the account matching the files; a new
//! version stored in another zone wins over the old one.
//!
//! Numbered n003xx: n_races.rs holds n00001-n00005, n_store_races.rs the
//! races with a disk commit.

use std::path::Path;
use std::time::Duration;

use hoard_store::disk::format::{encode_slot, pick_slot, Prefix, PREFIX_LEN};
use hoard_testkit::{Test, TestProxy};

use crate::disk::{
    assert_account, cached, file_of, head_key, object_files, served, stall_proxy, toml_proxy,
    ubody, zone_proxy, Release,
};
use crate::secs;

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
                s.txresp_fresh_etag(1, format!("\"s{i}\""), ubody(&url, 20_000))
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
                s.txresp_fresh_etag(600, format!("\"b{i}\""), ubody(&url, 100_000))
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
                s.serve_fresh(url, 600, ubody(url, 30_000)).await;
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
            s.serve_fresh("/s", 600, ubody("/s v1", 200_000)).await;
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
                s.serve_fresh(url, 1, ubody(&format!("{url} v1"), len))
                    .await;
            }
            for (url, len) in [("/v", 300_000), ("/w", 300_000)] {
                s.serve_fresh(url, 600, ubody(&format!("{url} v2"), len))
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
