//! n (nothing lost, nothing wrong), store series: a purge or an
//! invalidation that comes while a fill commits to disk (held with the disk
//! gate) or while an uncoalesced fill streams (held by the origin) wins.

use std::path::Path;
use std::time::Duration;

use hoard_testkit::{Barrier, Conn, Origin, Test, TestProxy};

use crate::disk::{cached, object_files, ubody, uncoalesced_proxy, zone_proxy, Release};

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
            s.txresp_fresh(600, ubody("/p after purge", 5000)).await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = zone_proxy(&t, &origin, &dir, 64 << 20).await;
    let (mut client, release) = hold_the_commit(&t, &proxy, &held).await;
    crate::admin::purge(&t, &proxy, r#"{"url": "http://localhost/p"}"#)
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
            s.txresp_fresh(600, ubody("/p after post", 5000)).await;
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
                s.txresp_fresh(600, ubody(&format!("{url} new"), 5000))
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
            crate::admin::purge(&t, &proxy, r#"{"url": "http://localhost/c"}"#)
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
