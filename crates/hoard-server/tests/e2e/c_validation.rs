//! c: validation (RFC 9111 §4.3): conditional requests to the origin, 304 merge, client conditionals from cache.

use hoard_testkit::Test;

use crate::{http_date, secs};

// c00020: a stale object with an ETag is revalidated with If-None-Match; the 304's fields are merged.
#[tokio::test]
async fn c00020_revalidate_etag_304_merges_headers() {
    let t = Test::new("c00020");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_no_header("if-none-match");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=10")
                .hdr("ETag", "\"v1\"")
                .hdr("X-Version", "old")
                .body("body-v1")
                .send()
                .await;
            let r = s.rxreq().await;
            r.expect_header("if-none-match", "\"v1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=20")
                .hdr("ETag", "\"v1\"")
                .hdr("X-Version", "new")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body("body-v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(11));
    let r = t.client(&proxy).get("/v").send().await;
    r.expect_status(200)
        .expect_body("body-v1")
        .expect_header("x-version", "new")
        .expect_header("cache-control", "max-age=20");
    r.expect_cache_status("fwd=stale; fwd-status=304");
    // The refreshed object is fresh for 20 s from the 304.
    t.clock.advance(secs(19));
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body("body-v1")
        .expect_header("x-version", "new")
        .expect_cache_status("hit");
    proxy.expect_counter("cache_revalidated_304", 1);
    origin.finish().await;
}

// c00021: with only Last-Modified, revalidation uses If-Modified-Since.
#[tokio::test]
async fn c00021_revalidate_last_modified() {
    let t = Test::new("c00021");
    let lm = http_date(-3600);
    let origin = t
        .origin()
        .script({
            let lm = lm.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=1")
                    .hdr("Last-Modified", &lm)
                    .body("x")
                    .send()
                    .await;
                s.rxreq()
                    .await
                    .expect_header("if-modified-since", &lm)
                    .expect_no_header("if-none-match");
                s.txresp(304).no_body().send().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/v").send().await.expect_body("x");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_status(200)
        .expect_body("x")
        .expect_cache_status("fwd-status=304");
    origin.finish().await;
}

// c00022: a revalidation answered with a new 200 replaces the stored object.
#[tokio::test]
async fn c00022_revalidate_200_replaces() {
    let t = Test::new("c00022");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(1, "\"v1\"", "one").await;
            s.rxreq().await.expect_header("if-none-match", "\"v1\"");
            s.txresp_fresh_etag(60, "\"v2\"", "two").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/v").send().await.expect_body("one");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(2));
    t.client(&proxy).get("/v").send().await.expect_body("two");
    proxy.wait_counter("objects_stored", 2).await;
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body("two")
        .expect_header("etag", "\"v2\"");
    origin.finish().await;
}

// c00023: a client's If-None-Match is answered 304 from cache; a mismatch gets the full object.
#[tokio::test]
async fn c00023_client_if_none_match_from_cache() {
    let t = Test::new("c00023");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_no_header("if-none-match");
            s.txresp_fresh_etag(60, "\"abc\"", "full").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    // Even on the miss the client's condition is evaluated against the fetched response.
    t.client(&proxy)
        .get("/c")
        .hdr("If-None-Match", "\"abc\"")
        .send()
        .await
        .expect_status(304)
        .expect_body("");
    proxy.wait_counter("objects_stored", 1).await;
    let r = t
        .client(&proxy)
        .get("/c")
        .hdr("If-None-Match", "\"zzz\", W/\"abc\"")
        .send()
        .await;
    r.expect_status(304)
        .expect_header("etag", "\"abc\"")
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/c")
        .hdr("If-None-Match", "\"zzz\"")
        .send()
        .await
        .expect_status(200)
        .expect_body("full");
    origin.finish().await;
}

// c00024: a client's If-Modified-Since is answered 304 from cache when not modified since.
#[tokio::test]
async fn c00024_client_if_modified_since_from_cache() {
    let t = Test::new("c00024");
    let lm = http_date(-100);
    let origin = t
        .origin()
        .script({
            let lm = lm.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Last-Modified", &lm)
                    .body("full")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/c").send().await.expect_body("full");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/c")
        .hdr("If-Modified-Since", http_date(-50))
        .send()
        .await
        .expect_status(304);
    t.client(&proxy)
        .get("/c")
        .hdr("If-Modified-Since", http_date(-200))
        .send()
        .await
        .expect_status(200)
        .expect_body("full");
    origin.finish().await;
}

// c00025: Cache-Control: no-cache on a response: stored, but revalidated on every use.
#[tokio::test]
async fn c00025_response_no_cache_revalidates_each_time() {
    let t = Test::new("c00025");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "no-cache")
                .hdr("ETag", "\"n\"")
                .body("nc")
                .send()
                .await;
            for _ in 0..2 {
                s.rxreq().await.expect_header("if-none-match", "\"n\"");
                s.txresp(304).hdr("ETag", "\"n\"").no_body().send().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/n").send().await.expect_body("nc");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/n")
        .send()
        .await
        .expect_body("nc")
        .expect_cache_status("fwd-status=304");
    t.client(&proxy).get("/n").send().await.expect_body("nc");
    proxy
        .expect_counter("cache_hit", 0)
        .expect_counter("cache_revalidated_304", 2);
    origin.finish().await;
}

// c00026: must-revalidate: a stale object is never served, even when the client accepts stale.
#[tokio::test]
async fn c00026_must_revalidate_blocks_max_stale() {
    let t = Test::new("c00026");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, must-revalidate")
                .body("a")
                .send()
                .await;
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, must-revalidate")
                .body("b")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/m").send().await.expect_body("a");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(5));
    t.client(&proxy)
        .get("/m")
        .hdr("Cache-Control", "max-stale=60")
        .send()
        .await
        .expect_body("b");
    origin.finish().await;
}

// c00027: a 304 without Date refreshes the object: it is fresh for max-age from the 304's
// arrival, not aged by the time since the original response's Date.
#[tokio::test]
async fn c00027_undated_304_refreshes_the_object() {
    let t = Test::new("c00027");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(10, "\"v1\"", "b").await;
            s.rxreq().await.expect_header("if-none-match", "\"v1\"");
            s.txresp(304)
                .no_date()
                .hdr("Cache-Control", "max-age=10")
                .hdr("ETag", "\"v1\"")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/d").send().await.expect_body("b");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(20));
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("fwd-status=304");
    // refreshed 0 s ago with max-age=10: must be a hit
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00028: If-Match: * on a stored response without ETag: a current representation exists,
// so the condition is true (RFC 9110 §13.1.1) -> 200, not 412.
#[tokio::test]
async fn c00028_star_preconditions_without_etag() {
    let t = Test::new("c00028");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "b").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/s").send().await.expect_body("b");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/s")
        .hdr("If-Match", "*")
        .send()
        .await
        .expect_status(200);
    t.client(&proxy)
        .get("/s")
        .hdr("If-None-Match", "*")
        .send()
        .await
        .expect_status(304);
    origin.finish().await;
}

// c00029: preconditions are ignored when the response would not be 2xx (RFC 9110 §13.2.1):
// a cached 404 must not become 412 / 304.
#[tokio::test]
async fn c00029_preconditions_ignored_on_non_2xx() {
    let t = Test::new("c00029");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(404)
                .hdr("Cache-Control", "max-age=60")
                .hdr("ETag", "\"e\"")
                .body("nf")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/n").send().await.expect_status(404);
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/n")
        .hdr("If-Match", "\"other\"")
        .send()
        .await
        .expect_status(404);
    t.client(&proxy)
        .get("/n")
        .hdr("If-None-Match", "\"e\"")
        .send()
        .await
        .expect_status(404);
    origin.finish().await;
}

// c00040: a 5xx answering a revalidation (no stale-if-error) is forwarded like any other
// response: hop-by-hop fields removed, Via added; the stored copy is kept.
#[tokio::test]
async fn c00040_revalidation_5xx_is_forwarded_cleanly() {
    let t = Test::new("c00040");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(1, "\"a\"", "v1").await;
            s.rxreq().await.expect_header("if-none-match", "\"a\"");
            s.txresp(503)
                .hdr("Connection", "X-Origin-Hop")
                .hdr("X-Origin-Hop", "secret")
                .body("down")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(5));
    let r = t.client(&proxy).get("/r").send().await;
    r.expect_status(503)
        .expect_body("down")
        .expect_no_header("x-origin-hop")
        .expect_header_contains("via", "1.1 hoard");
    r.expect_cache_status("fwd=stale; fwd-status=503;")
        .expect_cache_status("detail=server-error");
    proxy.expect_counter("revalidation_failed", 1);
    origin.finish().await;
}

// c00046: a 304's Set-Cookie reaches the client whose request revalidated, and is never stored.
#[tokio::test]
async fn c00046_set_cookie_of_a_304_goes_to_its_client_only() {
    let t = Test::new("c00046");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(1, "\"e\"", "b").await;
            s.rxreq().await.expect_header("if-none-match", "\"e\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=60")
                .hdr("Set-Cookie", "sid=mine")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/c").send().await.expect_body("b");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_body("b")
        .expect_header("set-cookie", "sid=mine");
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_body("b")
        .expect_no_header("set-cookie")
        .expect_cache_status("hit");
    origin.finish().await;
}
