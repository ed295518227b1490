//! d: directory faults: a directory that goes away, reads held or failing,
//! writes failing or stalled, min_free; each costs the cache, never the
//! client, and the directory comes back.

use std::time::Duration;

use hoard_testkit::Test;

use crate::disk::{body, disk_proxy, files, objects};
use crate::secs;

// d00006: a directory that goes away is taken out of service (logged,
// counted); fills go on uncached; after the retry interval a healthy
// directory comes back and stores again.
#[tokio::test]
async fn d00006_directory_offline_and_back() {
    let t = Test::new("d00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, n) in [("/x", 2), ("/y", 1)] {
                for _ in 0..n {
                    s.serve_fresh(path, 600, path).await;
                }
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    std::fs::remove_dir_all(&dir).unwrap();
    t.client(&proxy).get("/x").send().await.expect_body("/x");
    proxy.wait_counter("fills_completed", 1).await;
    proxy
        .expect_counter("disk_dirs_offline", 1)
        .expect_counter("disk_stored", 0);
    assert!(proxy.counter("disk_errors") >= 1);
    // Still offline: a miss again, no new error.
    t.client(&proxy).get("/x").send().await.expect_body("/x");
    proxy.expect_counter("disk_dirs_offline", 1);
    std::fs::create_dir(&dir).unwrap();
    t.clock.advance(secs(11));
    t.client(&proxy).get("/y").send().await.expect_body("/y");
    proxy.wait_counter("disk_stored", 1).await;
    proxy.expect_counter("disk_dirs_online", 1);
    t.client(&proxy)
        .get("/y")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00007: a disk read that never completes (held in the I/O layer) delays
// only the request that needs it: memory hits go on; released, it completes.
#[tokio::test]
async fn d00007_held_disk_read_does_not_stop_memory_hits() {
    let t = Test::new("d00007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/hot", "/cold"] {
                s.serve_fresh(path, 600, format!("{path} body")).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 1 << 20)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/hot")
        .send()
        .await
        .expect_body("/hot body");
    proxy.wait_counter("disk_stored", 1).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/hot")
            .send()
            .await
            .expect_body("/hot body");
    }
    // Stored on disk, a first disk hit, then admitted to memory.
    proxy.expect_counter("memory_promotions", 1);
    t.client(&proxy)
        .get("/cold")
        .send()
        .await
        .expect_body("/cold body");
    proxy.wait_counter("disk_stored", 2).await;
    let gate = proxy.store().zone("disk").unwrap().io().gate();
    gate.close();
    let cold = t.client(&proxy).get("/cold").spawn();
    gate.wait_held(1).await;
    for _ in 0..5 {
        t.client(&proxy)
            .get("/hot")
            .send()
            .await
            .expect_body("/hot body")
            .expect_cache_status("hit");
    }
    assert!(!cold.is_finished(), "the held read cannot have completed");
    gate.open();
    cold.await
        .unwrap()
        .expect_body("/cold body")
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00014: a write that fails (ENOSPC injected in the I/O layer) does not
// stop the fill: the client gets the whole body, nothing is published, the
// error is counted and the directory rests; then it stores again.
#[tokio::test]
async fn d00014_write_error_serves_the_client_uncached() {
    let t = Test::new("d00014");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/a", "/a", "/b"] {
                s.serve_fresh(path, 600, body(700_000, 2)).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().fail_writes(true);
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body(body(700_000, 2));
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    proxy.wait_counter("fills_completed", 1).await;
    proxy
        .expect_counter("disk_stored", 0)
        .expect_counter("disk_dirs_offline", 1);
    assert!(proxy.counter("disk_errors") >= 1);
    assert!(objects(&dir).is_empty());
    // Uncached: the next request goes to the origin again.
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    zone.io().gate().fail_writes(false);
    t.clock.advance(secs(11));
    t.client(&proxy).get("/b").send().await;
    proxy.wait_counter("disk_stored", 1).await;
    assert_eq!(objects(&dir).len(), 1);
    assert!(zone.used() <= 64 << 20);
    origin.finish().await;
}

// d00015: min_free larger than the file system's free space: the zone
// never writes (it would rather evict everything), the client is served.
#[tokio::test]
async fn d00015_min_free_is_never_crossed() {
    let t = Test::new("d00015");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(600, "x").await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.cache.zones[0].min_free = u64::MAX / 4)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy).get("/x").send().await.expect_body("x");
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    proxy.wait_counter("fills_completed", 1).await;
    proxy.expect_counter("disk_stored", 0);
    assert!(files(&dir).is_empty());
    origin.finish().await;
}

// d00016: a directory whose reads fail (EIO injected) is taken out of
// service: its objects are misses served by the origin, nothing hangs; after
// the retry interval a read probes it and it serves hits again.
#[tokio::test]
async fn d00016_read_errors_take_a_directory_out_and_back() {
    let t = Test::new("d00016");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for n in 0..2 {
                s.serve_fresh("/o", 6000, format!("o{n}")).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    t.client(&proxy).get("/o").send().await.expect_body("o0");
    proxy.wait_counter("disk_stored", 1).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().fail_reads(true);
    t.client(&proxy)
        .get("/o")
        .send()
        .await
        .expect_body("o1")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("fills_completed", 2).await;
    proxy.expect_counter("disk_dirs_offline", 1);
    assert!(!zone.dirs()[0].online());
    zone.io().gate().fail_reads(false);
    t.clock.advance(secs(11));
    t.client(&proxy)
        .get("/o")
        .send()
        .await
        .expect_cache_status("hit");
    proxy.expect_counter("disk_dirs_online", 1);
    origin.finish().await;
}

// d00017: a disk whose writes stall (held in the I/O layer) costs the disk
// copy, never the client: the miss is answered within the origin's read
// timeout, nothing is published, and the zone stores again afterwards.
#[tokio::test]
async fn d00017_stalled_disk_writes_do_not_hold_a_fill() {
    let t = Test::new("d00017");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/s", "/t"] {
                s.serve_fresh(path, 600, body(300_000, 1)).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .upstream(|u| u.read_timeout = Duration::from_millis(300))
        .start()
        .await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().hold_writes(true);
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body(body(300_000, 1));
    proxy.wait_counter("fills_completed", 1).await;
    proxy.expect_counter("disk_stored", 0);
    zone.io().gate().hold_writes(false);
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    t.client(&proxy).get("/t").send().await;
    proxy.wait_counter("disk_stored", 1).await;
    origin.finish().await;
}
