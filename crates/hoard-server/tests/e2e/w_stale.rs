//! w: stale serving: stale-while-revalidate in the background, stale-if-error with origin
//! health, microcaching.

use std::time::Duration;

use hoard_testkit::Test;

use crate::secs;

// w00020: nginx's keep-alive failure, reproduced: TTL 2 s, a slow refresh; after expiry three
// requests back to back on one keep-alive connection all come from cache while the origin
// still holds the refresh; exactly one refresh is made.
#[tokio::test]
async fn w00020_swr_never_blocks_the_keep_alive_connection() {
    let t = Test::new("w00020");
    let release = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let release = release.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=2, stale-while-revalidate=60")
                    .hdr("ETag", "\"1\"")
                    .body("v1")
                    .send()
                    .await;
                s.rxreq().await.expect_header("if-none-match", "\"1\"");
                release.sync().await; // the slow origin: answers only after all three responses
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=2, stale-while-revalidate=60")
                    .hdr("ETag", "\"2\"")
                    .body("v2")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/s").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(3));
    let mut conn = t.client(&proxy).connect().await;
    for _ in 0..3 {
        let r = conn.get("/s").send().await;
        r.expect_status(200)
            .expect_body("v1")
            .expect_cache_status("hit; ttl=-1;")
            .expect_cache_status("detail=stale-while-revalidate");
    }
    proxy
        .expect_counter("background_refreshes", 1)
        .expect_counter("stale_while_revalidate_served", 3);
    release.sync().await;
    proxy.wait_counter("objects_stored", 2).await;
    conn.get("/s")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("hit");
    origin.finish().await;
}

// w00021: a route's stale_while_revalidate applies when the origin sends none; outside the
// window the request waits for revalidation.
#[tokio::test]
async fn w00021_swr_from_configuration() {
    let t = Test::new("w00021");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(1, "v1").await;
            s.rxreq().await;
            s.txresp_fresh(1, "v2").await;
            s.rxreq().await;
            s.txresp_fresh(1, "v3").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.policy.stale_while_revalidate = Some(secs(5)))
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/s").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(3));
    c.get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=stale-while-revalidate");
    proxy.wait_counter("objects_stored", 2).await;
    t.clock.advance(secs(10));
    c.get("/s")
        .send()
        .await
        .expect_body("v3")
        .expect_cache_status("fwd=stale");
    origin.finish().await;
}

// w00022: stale-if-error when the origin cannot be reached; after repeated failures the
// origin is known down and the stale copy is served without trying it.
#[tokio::test]
async fn w00022_stale_if_error_on_connect_failure_and_down_origin() {
    let t = Test::new("w00022");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-if-error=600")
                .body("good")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/d").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    origin.finish().await; // the origin is gone: connections are refused from now on
    t.clock.advance(secs(5));
    for _ in 0..3 {
        t.client(&proxy)
            .get("/d")
            .send()
            .await
            .expect_status(200)
            .expect_body("good")
            .expect_cache_status("hit; fwd=stale;")
            .expect_cache_status("detail=stale-if-error");
    }
    proxy.expect_counter("origin_connect_errors", 3);
    // Known down: served at once, no connection attempted.
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_body("good")
        .expect_cache_status("detail=origin-down");
    proxy
        .expect_counter("origin_connect_errors", 3)
        .expect_counter("stale_if_error_served", 4);
}

// w00023: microcaching: a 500 ms TTL with stale-while-revalidate gives one refresh per
// period however many requests arrive.
#[tokio::test]
async fn w00023_microcache_one_refresh_per_period() {
    let t = Test::new("w00023");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 1..=3 {
                s.rxreq().await;
                s.txresp(200).body(format!("v{i}")).send().await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| {
            r.policy
                .default_ttls
                .push(hoard_policy::config::DefaultTtl {
                    status: hoard_policy::config::StatusMatch::Any,
                    ttl: Duration::from_millis(500),
                });
            r.policy.stale_while_revalidate = Some(secs(10));
        })
        .start()
        .await;
    t.client(&proxy).get("/m").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    for (period, want) in [(1u64, "v1"), (2, "v2")] {
        t.clock.advance(Duration::from_millis(600));
        let clients: Vec<_> = (0..10)
            .map(|_| t.client(&proxy).get("/m").spawn())
            .collect();
        for c in clients {
            c.await.unwrap().expect_status(200).expect_body(want);
        }
        proxy.wait_counter("objects_stored", period + 1).await;
        proxy.expect_counter("background_refreshes", period);
    }
    proxy.expect_counter("origin_requests", 3);
    origin.finish().await;
}

// w00024: a 500 answering a stale-while-revalidate background refresh keeps the stale
// copy (RFC 9111 §4.3.3): the next request in the window is still a stale hit.
#[tokio::test]
async fn w00024_swr_refresh_5xx_keeps_the_stale_copy() {
    let t = Test::new("w00024");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .hdr("ETag", "\"a\"")
                .body("v1")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"a\"");
            s.txresp(500).body("oops").send().await;
            // second background refresh expected (object still within SWR)
            s.rxreq().await.expect_header("if-none-match", "\"a\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=60")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/w").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/w")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("hit");
    proxy.wait_counter("fills_started", 2).await;
    proxy.wait_counter("revalidation_failed", 1).await;
    let r = t.client(&proxy).get("/w").send().await;
    r.expect_status(200)
        .expect_body("v1")
        .expect_cache_status("hit");
    origin.finish().await;
}
