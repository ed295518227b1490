//! s (store): purges that survive (a failed unlink, a revalidation that
//! raced the purge), durability, and store work kept off the serving
//! threads.

use std::path::Path;

use hoard_store::disk::Durability;
use hoard_testkit::{Origin, Test, TestProxy};

use crate::admin::{purge, purged};
use crate::disk::objects;
use crate::secs;

/// A proxy with a 64 MiB disk zone in `dir`, no memory tier, the admin
/// listener on, its loader done.
async fn disk_proxy(t: &Test, origin: &Origin, dir: &Path, durability: Durability) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .config(|c| c.cache.zones[0].durability = durability)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

// s05001: a hard purge whose unlink fails (EACCES injected) leaves the file
// on disk and a tombstone naming it: the restarted proxy's loader removes
// the file instead of indexing it, drops the tombstone, and the next
// request goes to the origin.
#[tokio::test]
async fn s05001_purge_whose_unlink_failed_stays_purged_after_restart() {
    let t = Test::new("s05001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for n in 1..=2 {
                s.serve_fresh("/p", 600, format!("p{n}")).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir, Durability::Process).await;
    t.client(&proxy).get("/p").send().await.expect_body("p1");
    proxy.wait_counter("disk_stored", 1).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().fail_unlinks(true);
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/p"}"#).await;
    assert_eq!(purged(&r), 1);
    assert_eq!(objects(&dir).len(), 1, "the unlink failed: the file stays");
    let tombstoned = proxy.counter("disk_tombstones");
    proxy.stop().await;

    let proxy = disk_proxy(&t, &origin, &dir, Durability::Process).await;
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_body("p2")
        .expect_cache_status("fwd=uri-miss");
    assert_eq!(tombstoned, 1);
    proxy
        .expect_counter("disk_loaded", 0)
        .expect_counter("disk_tombstones_cleared", 1);
    assert_eq!(
        objects(&dir).len(),
        1,
        "the old file went, the new one is stored"
    );
    assert!(!dir.join("tombstones").exists());
    origin.finish().await;
}

// s05002: a revalidation whose request left before a soft purge of its key
// and whose 304 comes after it does not make the object fresh again: its
// client gets the 304's answer, the object stays stale (on disk), and the
// next request revalidates again.
#[tokio::test]
async fn s05002_304_after_a_soft_purge_does_not_refresh() {
    let t = Test::new("s05002");
    let (asked, purged_now) = (t.barrier(2), t.barrier(2));
    let origin = t
        .origin()
        .script({
            let (asked, purged_now) = (asked.clone(), purged_now.clone());
            |mut s| async move {
                s.rxreq().await.expect_no_header("if-none-match");
                s.txresp_fresh_etag(10, "\"1\"", "v1").await;
                for raced in [true, false] {
                    s.rxreq().await.expect_header("if-none-match", "\"1\"");
                    if raced {
                        asked.sync().await;
                        purged_now.sync().await;
                    }
                    s.txresp(304)
                        .hdr("Cache-Control", "max-age=600")
                        .hdr("ETag", "\"1\"")
                        .no_body()
                        .send()
                        .await;
                }
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir, Durability::Process).await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    proxy.wait_counter("disk_stored", 1).await;
    t.clock.advance(secs(11));
    let raced = t.client(&proxy).get("/r").spawn();
    asked.sync().await;
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/r", "soft": true}"#).await;
    assert_eq!(purged(&r), 1);
    purged_now.sync().await;
    raced
        .await
        .unwrap()
        .expect_body("v1")
        .expect_cache_status("fwd=stale; fwd-status=304");
    // The purge won: revalidated again (and this 304 refreshes).
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("fwd=stale; fwd-status=304");
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_cache_status("hit");
    proxy.expect_counter("revalidations_purged", 1);
    origin.finish().await;
}

// s05003: the same race with a hard purge (memory tier): the 304 stores
// nothing, and the next request fetches the whole object again.
#[tokio::test]
async fn s05003_304_after_a_hard_purge_stores_nothing() {
    let t = Test::new("s05003");
    let (asked, purged_now) = (t.barrier(2), t.barrier(2));
    let origin = t
        .origin()
        .script({
            let (asked, purged_now) = (asked.clone(), purged_now.clone());
            |mut s| async move {
                s.rxreq().await;
                s.txresp_fresh_etag(10, "\"1\"", "v1").await;
                s.rxreq().await.expect_header("if-none-match", "\"1\"");
                asked.sync().await;
                purged_now.sync().await;
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"1\"")
                    .no_body()
                    .send()
                    .await;
                s.rxreq().await.expect_no_header("if-none-match");
                s.txresp_fresh_etag(600, "\"2\"", "v2").await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/h").send().await.expect_body("v1");
    t.clock.advance(secs(11));
    let raced = t.client(&proxy).get("/h").spawn();
    asked.sync().await;
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/h"}"#).await;
    assert_eq!(purged(&r), 1);
    purged_now.sync().await;
    raced
        .await
        .unwrap()
        .expect_body("v1")
        .expect_cache_status("fwd-status=304");
    t.client(&proxy)
        .get("/h")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("fwd=uri-miss");
    proxy.expect_counter("revalidations_purged", 1);
    origin.finish().await;
}

// s06001: with durability = "power" an object is stored with its file and
// its directory synced before it is published (two syncs), served, and
// still a hit after a restart; with "process" nothing is synced.
#[tokio::test]
async fn s06001_power_durability_stores_serves_and_survives_restart() {
    let t = Test::new("s06001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/d", "/e"] {
                s.serve_fresh(path, 600, format!("{path} body")).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir, Durability::Power).await;
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_body("/d body");
    proxy.wait_counter("disk_stored", 1).await;
    proxy.expect_counter("disk_syncs", 2);
    proxy.stop().await;

    let proxy = disk_proxy(&t, &origin, &dir, Durability::Power).await;
    proxy.expect_counter("disk_loaded", 1);
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_body("/d body")
        .expect_cache_status("hit");
    proxy.stop().await;

    let proxy = disk_proxy(&t, &origin, &dir, Durability::Process).await;
    t.client(&proxy)
        .get("/e")
        .send()
        .await
        .expect_body("/e body");
    proxy.wait_counter("disk_stored", 1).await;
    proxy.expect_counter("disk_syncs", 0);
    assert_eq!(objects(&dir).len(), 2);
    origin.finish().await;
}

// s07001: an invalidation (after a POST's 2xx) that must wait for the
// catalogue's admission gate waits on the blocking pool, not on a serving
// thread: while it is held there, the one-threaded runtime that runs the
// proxy, the origin and the clients still answers a hit; let go, the
// invalidation completes and the next request goes to the origin.
#[tokio::test]
async fn s07001_invalidation_waits_off_the_serving_thread() {
    let t = Test::new("s07001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (method, path, body) in [
                ("GET", "/a", "a1"),
                ("GET", "/b", "b1"),
                ("POST", "/a", "posted"),
                ("GET", "/a", "a2"),
            ] {
                s.rxreq().await.expect_method(method).expect_url(path);
                s.txresp_fresh(600, body).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for (path, body) in [("/a", "a1"), ("/b", "b1")] {
        t.client(&proxy).get(path).send().await.expect_body(body);
    }
    let gate = proxy.store().catalog().test_gate();
    gate.hold_writes(true);
    let post = t.client(&proxy).post("/a").body("x").spawn();
    gate.wait_held(1).await;
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_body("b1")
        .expect_cache_status("hit");
    proxy.expect_counter("invalidations", 0);
    gate.hold_writes(false);
    post.await.unwrap().expect_status(200).expect_body("posted");
    proxy.expect_counter("invalidations", 1);
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("a2")
        .expect_cache_status("fwd=uri-miss");
    origin.finish().await;
}
