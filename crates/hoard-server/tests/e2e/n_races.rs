//! n (nothing lost, nothing wrong): what a disk zone stores is served
//! exactly, and a purge or an invalidation that comes at any point of a
//! fill wins over it (what the store model cannot reach: the proxy's fill
//! and the store's commit, held with the disk gate and origin barriers).

use std::path::Path;
use std::sync::Arc;

use hoard_testkit::{Origin, Test, TestProxy};

use super::secs;
use crate::disk::objects;

/// A body whose every 1000-byte window occurs once (a client can wait
/// for a given piece of it on the wire).
fn unique_body(n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i % 251) as u8).wrapping_mul(3) ^ seed)
        .collect()
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

/// How many of `paths` are served from the cache (`only-if-cached`), each
/// checked against the body its seed makes.
async fn served(t: &Test, proxy: &TestProxy, paths: &[(String, usize, u8)]) -> u64 {
    let mut n = 0;
    for (path, len, seed) in paths {
        let r = t
            .client(proxy)
            .get(path)
            .hdr("Cache-Control", "only-if-cached")
            .send()
            .await;
        match r.status {
            200 => {
                r.expect_body(body(*len, *seed));
                n += 1;
            }
            504 => {}
            other => panic!("{path}: status {other}"),
        }
    }
    n
}

// n00001: the reported loss. A 1 MiB zone, memory off: ten 20 KB objects
// with an ETag are refreshed by a 304 (each head rewritten into its file's
// second slot), then 150 objects of 100 KB push them out, so that evicted
// files are reused. Every object the zone counts is served, with its own
// bytes, before and after a restart (before the fix: 9 counted, 6 served).
#[tokio::test]
async fn n00001_every_counted_object_is_served_after_recycling() {
    let t = Test::new("n00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 0..10u8 {
                s.rxreq().await.expect_url(&format!("/s{i}"));
                s.txresp_fresh_etag(1, format!("\"s{i}\""), body(20_000, i))
                    .await;
            }
            for i in 0..10u8 {
                s.rxreq()
                    .await
                    .expect_url(&format!("/s{i}"))
                    .expect_header("if-none-match", &format!("\"s{i}\""));
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", format!("\"s{i}\""))
                    .no_body()
                    .send()
                    .await;
            }
            for i in 0..150u8 {
                s.rxreq().await.expect_url(&format!("/b{i}"));
                s.txresp_fresh_etag(600, format!("\"b{i}\""), body(100_000, i))
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 1 << 20).await;
    let mut paths: Vec<(String, usize, u8)> = Vec::new();
    for i in 0..10u8 {
        t.client(&proxy)
            .get(&format!("/s{i}"))
            .send()
            .await
            .expect_body(body(20_000, i));
        paths.push((format!("/s{i}"), 20_000, i));
    }
    proxy.wait_counter("disk_stored", 10).await;
    t.clock.advance(secs(2));
    for i in 0..10u8 {
        t.client(&proxy)
            .get(&format!("/s{i}"))
            .send()
            .await
            .expect_body(body(20_000, i));
    }
    proxy.wait_counter("cache_revalidated_304", 10).await;
    for i in 0..150u8 {
        t.client(&proxy)
            .get(&format!("/b{i}"))
            .send()
            .await
            .expect_body(body(100_000, i));
        paths.push((format!("/b{i}"), 100_000, i));
    }
    proxy.wait_counter("disk_stored", 160).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().settle().await;
    assert!(
        proxy.counter("disk_files_recycled") > 0,
        "files were reused"
    );
    let counted = zone.objects();
    assert_eq!(objects(&dir).len() as u64, counted, "every file is indexed");
    assert_eq!(served(&t, &proxy, &paths).await, counted);
    proxy.stop().await;

    let proxy = zone_proxy(&t, &origin, &dir, 1 << 20).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    assert_eq!(zone.objects(), counted, "a restart keeps them all");
    assert_eq!(served(&t, &proxy, &paths).await, counted);
    proxy
        .expect_counter("disk_rejected_bad_head", 0)
        .expect_counter("disk_rejected_foreign_head", 0);
    origin.finish().await;
}

/// Sends `/p`'s head and first 1000 bytes, waits at `held` (two syncs: the
/// test holds the disk, then lets the rest go), sends the rest; then goes
/// on with `then`.
fn held_fill(
    held: hoard_testkit::Barrier,
    then: impl FnOnce(
            hoard_testkit::Script,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + 'static,
) -> impl FnOnce(
    hoard_testkit::Script,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
       + Send
       + 'static {
    move |mut s| {
        Box::pin(async move {
            s.rxreq().await.expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", "30000")
                .send_head()
                .await;
            let b = unique_body(30_000);
            s.chunk(&b[..1000]).await;
            held.sync().await;
            held.sync().await;
            s.chunk(&b[1000..]).await;
            s.end().await;
            then(s).await;
        })
    }
}

/// Starts a GET of `/p` and reads its first body bytes (so its fill has
/// its disk writer), then holds every disk write and lets the origin send
/// the rest: the fill's commit (table, head, prefix, rename, index entry)
/// waits on the disk gate. Returns the client's connection, and the zone.
async fn hold_the_commit(
    t: &Test,
    proxy: &TestProxy,
    held: &hoard_testkit::Barrier,
) -> (hoard_testkit::Conn, Arc<hoard_store::disk::DiskZone>) {
    let zone = proxy.store().zone("disk").unwrap().clone();
    let mut conn = t.client(proxy).connect().await;
    conn.get("/p").tx().await;
    conn.read_until(&unique_body(30_000)[..1000]).await;
    held.sync().await;
    zone.io().settle().await;
    zone.io().gate().hold_writes(true);
    held.sync().await;
    // The rest is in; the fill's commit waits for the gate.
    zone.io().gate().wait_held(1).await;
    (conn, zone)
}

// n00002: a purge between the end of a fill's body and its disk commit
// wins: the client that asked gets the body, the cache keeps nothing of
// it (the next request goes to the origin), and nothing comes back after
// a restart.
#[tokio::test]
async fn n00002_a_purge_during_the_disk_commit_wins() {
    let t = Arc::new(Test::new("n00002"));
    let held = t.barrier(2);
    let origin = t
        .origin()
        .script(held_fill(held.clone(), |mut s| {
            Box::pin(async move {
                s.serve_fresh("/p", 600, body(10, 2)).await;
            })
        }))
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = Arc::new(zone_proxy(&t, &origin, &dir, 64 << 20).await);
    let (mut client, zone) = hold_the_commit(&t, &proxy, &held).await;
    let r = crate::admin::purge(&t, &proxy, r#"{"url": "http://localhost/p"}"#).await;
    r.expect_status(200);
    zone.io().gate().hold_writes(false);
    // The client that asked gets the whole body.
    client.read_until(&unique_body(30_000)[29_000..]).await;
    proxy.wait_counter("purge_raced_fills", 1).await;
    zone.io().settle().await;
    assert!(objects(&dir).is_empty(), "no file is left");
    assert_eq!(zone.objects(), 0);
    t.client(&*proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body(body(10, 2));
    origin.finish().await;
}

// n00003: an unsafe request (POST) to the URL while a GET's fill waits for
// its disk commit invalidates it (RFC 9111 §4.4): the body fetched before
// the change is not stored.
#[tokio::test]
async fn n00003_an_invalidation_during_the_disk_commit_wins() {
    let t = Arc::new(Test::new("n00003"));
    let held = t.barrier(2);
    let origin = t
        .origin()
        .script(held_fill(held.clone(), |mut s| {
            Box::pin(async move {
                s.rxreq().await.expect_method("POST").expect_url("/p");
                s.txresp(200).body("changed").send().await;
                s.rxreq().await.expect_method("GET").expect_url("/p");
                s.txresp_fresh(600, body(10, 3)).await;
            })
        }))
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = Arc::new(zone_proxy(&t, &origin, &dir, 64 << 20).await);
    let (mut client, zone) = hold_the_commit(&t, &proxy, &held).await;
    t.client(&*proxy)
        .post("/p")
        .body("x")
        .send()
        .await
        .expect_status(200);
    zone.io().gate().hold_writes(false);
    // The client that asked gets the whole body.
    client.read_until(&unique_body(30_000)[29_000..]).await;
    proxy.wait_counter("purge_raced_fills", 1).await;
    t.client(&*proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body(body(10, 3));
    origin.finish().await;
}

/// A memory-tier proxy whose route does not coalesce: each miss is a fill
/// of its own, not in the in-flight table.
async fn uncoalesced_proxy(t: &Test, origin: &Origin) -> TestProxy {
    t.proxy()
        .origin(origin)
        .route(|r| r.coalesce = false)
        .admin()
        .start()
        .await
}

/// `/c`'s origin: the head and half the body, a pause at `held` (two
/// syncs; between them, with `between`, a request of that method for `/c`
/// answered 204), the rest; then one more request for `/c`.
fn paused_origin(
    held: hoard_testkit::Barrier,
    between: Option<&'static str>,
) -> impl FnOnce(
    hoard_testkit::Script,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
       + Send
       + 'static {
    move |mut s| {
        Box::pin(async move {
            let first = s.rxreq().await;
            first.expect_url("/c");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", "2000")
                .send_head()
                .await;
            s.chunk(&body(2000, 4)[..1000]).await;
            held.sync().await;
            if let Some(method) = between {
                s.rxreq_concurrent()
                    .await
                    .expect_method(method)
                    .expect_url("/c");
                s.txresp(204).no_body().send().await;
                s.switch_to(&first);
            }
            held.sync().await;
            s.chunk(&body(2000, 4)[1000..]).await;
            s.end().await;
            s.serve_fresh("/c", 600, body(10, 5)).await;
        })
    }
}

/// A GET of `/c` whose fill (not in the in-flight table) is paused
/// mid-body while a purge (`method` `None`) or a request of `method` for
/// the URL comes: the body fetched before it is not stored.
async fn uncoalesced_race(name: &str, method: Option<&'static str>) {
    let t = Arc::new(Test::new(name));
    let held = t.barrier(2);
    let origin = t
        .origin()
        .script(paused_origin(held.clone(), method))
        .start()
        .await;
    let proxy = Arc::new(uncoalesced_proxy(&t, &origin).await);
    let (t2, p2) = (t.clone(), proxy.clone());
    let client = tokio::spawn(async move { t2.client(&*p2).get("/c").send().await });
    held.sync().await;
    match method {
        None => crate::admin::purge(&t, &proxy, r#"{"url": "http://localhost/c"}"#)
            .await
            .expect_status(200),
        Some(m) => t
            .client(&*proxy)
            .request(m, "/c")
            .send()
            .await
            .expect_status(204),
    };
    held.sync().await;
    client.await.unwrap().expect_body(body(2000, 4));
    proxy.wait_counter("purge_raced_fills", 1).await;
    t.client(&*proxy)
        .get("/c")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body(body(10, 5));
    origin.finish().await;
}

// n00004: a fill that is not in the in-flight table (the route does not
// coalesce) is purged mid-body: it does not store what it fetched.
#[tokio::test]
async fn n00004_a_purge_reaches_an_uncoalesced_fill() {
    uncoalesced_race("n00004", None).await;
}

// n00005: the same fill invalidated by a DELETE of the URL mid-body (RFC
// 9111 §4.4): the body fetched before the change is not stored.
#[tokio::test]
async fn n00005_an_invalidation_reaches_an_uncoalesced_fill() {
    uncoalesced_race("n00005", Some("DELETE")).await;
}
