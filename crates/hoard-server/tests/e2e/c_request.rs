//! c: request directives (RFC 9111 §5.2.1), invalidation (§4.4), stale-if-error (RFC 5861).

use hoard_testkit::Test;

use crate::secs;

// c00030: request no-cache forces revalidation even of a fresh object (fwd=request).
#[tokio::test]
async fn c00030_request_no_cache() {
    let t = Test::new("c00030");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(60, "\"1\"", "x").await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304).no_body().send().await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304).no_body().send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/r").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/r")
        .hdr("Cache-Control", "no-cache")
        .send()
        .await
        .expect_body("x")
        .expect_cache_status("fwd=request");
    t.client(&proxy)
        .get("/r")
        .hdr("Pragma", "no-cache")
        .send()
        .await
        .expect_body("x")
        .expect_cache_status("fwd=request");
    origin.finish().await;
}

// c00031: request max-age and min-fresh limit what a fresh object may be used for.
#[tokio::test]
async fn c00031_request_max_age_and_min_fresh() {
    let t = Test::new("c00031");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "v1").await;
            s.rxreq().await;
            s.txresp_fresh(60, "v2").await;
            s.rxreq().await;
            s.txresp_fresh(60, "v3").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/r").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(10));
    c.get("/r")
        .hdr("Cache-Control", "max-age=10")
        .send()
        .await
        .expect_body("v1");
    c.get("/r")
        .hdr("Cache-Control", "max-age=9")
        .send()
        .await
        .expect_body("v2");
    proxy.wait_counter("objects_stored", 2).await;
    t.clock.advance(secs(30));
    c.get("/r")
        .hdr("Cache-Control", "min-fresh=30")
        .send()
        .await
        .expect_body("v2");
    c.get("/r")
        .hdr("Cache-Control", "min-fresh=31")
        .send()
        .await
        .expect_body("v3");
    origin.finish().await;
}

// c00032: max-stale lets a client accept a stale object.
#[tokio::test]
async fn c00032_max_stale() {
    let t = Test::new("c00032");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(10, "old").await;
            s.rxreq().await;
            s.txresp_fresh(10, "new").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/r").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(15));
    c.get("/r")
        .hdr("Cache-Control", "max-stale=5")
        .send()
        .await
        .expect_body("old")
        .expect_header("age", "15")
        .expect_cache_status("ttl=-5");
    c.get("/r")
        .hdr("Cache-Control", "max-stale=4")
        .send()
        .await
        .expect_body("new");
    origin.finish().await;
}

// c00033: only-if-cached gives 504 when nothing usable is stored, and a hit otherwise.
#[tokio::test]
async fn c00033_only_if_cached() {
    let t = Test::new("c00033");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "x").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/o")
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await
        .expect_status(504);
    c.get("/o").send().await.expect_body("x");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/o")
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await
        .expect_status(200)
        .expect_body("x");
    proxy.expect_counter("only_if_cached_miss", 1);
    origin.finish().await;
}

// c00034: a successful unsafe request invalidates the target URI and a same-origin Location (§4.4).
#[tokio::test]
async fn c00034_unsafe_method_invalidates() {
    let t = Test::new("c00034");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/item", "/list"] {
                s.serve_fresh(path, 60, format!("{path}-v1")).await;
            }
            s.rxreq().await.expect_method("POST").expect_url("/item");
            s.txresp(201)
                .hdr("Location", "http://localhost/list")
                .body("created")
                .send()
                .await;
            for path in ["/item", "/list"] {
                s.serve_fresh(path, 60, format!("{path}-v2")).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/item").send().await;
    c.get("/list").send().await;
    proxy.wait_counter("objects_stored", 2).await;
    c.post("/item").body("new").send().await.expect_status(201);
    proxy.expect_counter("invalidations", 2);
    c.get("/item").send().await.expect_body("/item-v2");
    c.get("/list").send().await.expect_body("/list-v2");
    origin.finish().await;
}

// c00035: stale-if-error: a stale object stands in for a 5xx within the window, not after it.
#[tokio::test]
async fn c00035_stale_if_error_on_5xx() {
    let t = Test::new("c00035");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=10, stale-if-error=60")
                .body("good")
                .send()
                .await;
            s.rxreq().await;
            s.txresp(503).body("down").send().await;
            s.rxreq().await;
            s.txresp(503).body("down").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/e").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(20));
    c.get("/e")
        .send()
        .await
        .expect_status(200)
        .expect_body("good")
        .expect_cache_status("hoard; hit; fwd=stale; fwd-status=503");
    t.clock.advance(secs(60));
    c.get("/e")
        .send()
        .await
        .expect_status(503)
        .expect_body("down");
    proxy.expect_counter("stale_if_error_served", 1);
    origin.finish().await;
}

// c00036: a request's own no-store (with no-cache) is answered but cannot purge the stored
// object for everyone.
#[tokio::test]
async fn c00036_request_no_store_does_not_purge() {
    let t = Test::new("c00036");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "v1").await;
            s.rxreq().await;
            s.txresp_fresh(60, "v1").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/p").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/p")
        .hdr("Cache-Control", "no-cache, no-store")
        .send()
        .await
        .expect_body("v1");
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    origin.finish().await;
}
