//! c: storability (RFC 9111 §3): no-store, private, Authorization, Set-Cookie, Vary: *.

use hoard_testkit::{Origin, Test};

/// An origin answering two requests for `/s` with `hdrs`; the proxy must pass both.
async fn twice(t: &Test, hdrs: &'static [(&'static str, &'static str)]) -> Origin {
    t.origin()
        .script(move |mut s| async move {
            for i in 1..=2 {
                s.rxreq().await.expect_url("/s");
                let mut r = s.txresp(200);
                for (k, v) in hdrs {
                    r = r.hdr(k, v);
                }
                r.body(format!("v{i}")).send().await;
            }
        })
        .start()
        .await
}

// c00010: Cache-Control: no-store on the response is never stored.
#[tokio::test]
async fn c00010_no_store_not_stored() {
    let t = Test::new("c00010");
    let origin = twice(&t, &[("Cache-Control", "max-age=60, no-store")]).await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=no-store");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    proxy.expect_counter("objects_stored", 0);
    origin.finish().await;
}

// c00011: private responses are not stored by a shared cache.
#[tokio::test]
async fn c00011_private_not_stored() {
    let t = Test::new("c00011");
    let origin = twice(&t, &[("Cache-Control", "private, max-age=60")]).await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=private");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    origin.finish().await;
}

// c00012: with Authorization, a response is stored only if public, s-maxage or must-revalidate allow it (§3.5).
#[tokio::test]
async fn c00012_authorization() {
    let t = Test::new("c00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 1..=2 {
                s.rxreq()
                    .await
                    .expect_url("/s")
                    .expect_header("authorization", "Bearer x");
                s.txresp_fresh(60, format!("v{i}")).await;
            }
            s.rxreq().await.expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "public, max-age=60")
                .body("p")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/s")
        .hdr("Authorization", "Bearer x")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=authorization");
    c.get("/s")
        .hdr("Authorization", "Bearer x")
        .send()
        .await
        .expect_body("v2");
    c.get("/p")
        .hdr("Authorization", "Bearer x")
        .send()
        .await
        .expect_body("p");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/p")
        .hdr("Authorization", "Bearer x")
        .send()
        .await
        .expect_body("p")
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00013: Set-Cookie responses are not stored by default; with ignore_headers = ["set-cookie"]
// they are stored without the cookie, which only the first client receives.
#[tokio::test]
async fn c00013_set_cookie() {
    let t = Test::new("c00013");
    let origin = twice(
        &t,
        &[("Cache-Control", "max-age=60"), ("Set-Cookie", "sid=1")],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_header("set-cookie", "sid=1")
        .expect_cache_status("detail=set-cookie");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    origin.finish().await;

    let t = Test::new("c00013b");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .hdr("Set-Cookie", "sid=1")
                .body("v1")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.policy.ignore_set_cookie = true)
        .start()
        .await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_header("set-cookie", "sid=1");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_no_header("set-cookie")
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00014: Vary: * is never served from cache.
#[tokio::test]
async fn c00014_vary_star_never_served() {
    let t = Test::new("c00014");
    let origin = twice(&t, &[("Cache-Control", "max-age=60"), ("Vary", "*")]).await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=vary-star");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    origin.finish().await;
}

// c00015: a request with no-store is answered but its response is not stored.
#[tokio::test]
async fn c00015_request_no_store() {
    let t = Test::new("c00015");
    let origin = twice(&t, &[("Cache-Control", "max-age=60")]).await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/s")
        .hdr("Cache-Control", "no-store")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=request-no-store");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    origin.finish().await;
}

// c00016: a route with cache = false passes every request.
#[tokio::test]
async fn c00016_route_cache_off() {
    let t = Test::new("c00016");
    let origin = twice(&t, &[("Cache-Control", "max-age=60")]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.cache = false)
        .start()
        .await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("fwd=bypass");
    t.client(&proxy).get("/s").send().await.expect_body("v2");
    proxy.expect_counter("cache_pass", 2);
    origin.finish().await;
}

// c00017: 5xx responses with explicit freshness are stored; without it they are not.
#[tokio::test]
async fn c00017_error_status_needs_explicit_freshness() {
    let t = Test::new("c00017");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/e");
            s.txresp(500)
                .hdr("Last-Modified", crate::http_date(-1000))
                .body("e1")
                .send()
                .await;
            s.rxreq().await.expect_url("/e");
            s.txresp(500)
                .hdr("Cache-Control", "max-age=60")
                .body("e2")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/e")
        .send()
        .await
        .expect_status(500)
        .expect_body("e1");
    t.client(&proxy)
        .get("/e")
        .send()
        .await
        .expect_status(500)
        .expect_body("e2");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/e")
        .send()
        .await
        .expect_status(500)
        .expect_body("e2")
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00018: Proxy-Authentication-Info is never stored (RFC 9111 §3.1); other fields are.
#[tokio::test]
async fn c00018_never_stored_fields() {
    let t = Test::new("c00018");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .hdr("Proxy-Authentication-Info", "nextnonce=x")
                .hdr("X-Kept", "1")
                .body("b")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/s").send().await.expect_body("b");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_no_header("proxy-authentication-info")
        .expect_header("x-kept", "1");
    origin.finish().await;
}
