//! b: basic proxying: miss then hit, methods, HEAD, hop-by-hop, Via.

use hoard_testkit::Test;

// b00001: a cacheable response is stored on a miss and served from cache on the next request.
#[tokio::test]
async fn b00001_miss_then_hit() {
    let t = Test::new("b00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("GET").expect_url("/a");
            s.txresp_fresh(60, "hello").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    let r = t.client(&proxy).get("/a").send().await;
    r.expect_status(200)
        .expect_body("hello")
        .expect_cache_status("fwd=uri-miss; fwd-status=200; stored; ttl=60");
    proxy.wait_counter("objects_stored", 1).await;
    let r = t.client(&proxy).get("/a").send().await;
    r.expect_status(200)
        .expect_body("hello")
        .expect_header("age", "0")
        .expect_cache_status("hoard; hit; ttl=60");
    proxy
        .expect_counter("cache_hit", 1)
        .expect_counter("cache_miss", 1)
        .expect_counter("origin_requests", 1);
    origin.finish().await;
}

// b00002: POST is passed to the origin every time and never stored.
#[tokio::test]
async fn b00002_post_passes_and_is_not_stored() {
    let t = Test::new("b00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 0..2 {
                s.rxreq()
                    .await
                    .expect_method("POST")
                    .expect_url("/form")
                    .expect_body("x=1");
                s.txresp_fresh(60, format!("r{i}")).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .post("/form")
        .body("x=1")
        .send()
        .await
        .expect_body("r0")
        .expect_cache_status("fwd=method");
    t.client(&proxy)
        .post("/form")
        .body("x=1")
        .send()
        .await
        .expect_body("r1");
    proxy
        .expect_counter("cache_pass", 2)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// b00003: HEAD is answered from a stored GET, with the stored Content-Length and no body.
#[tokio::test]
async fn b00003_head_served_from_stored_get() {
    let t = Test::new("b00003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("GET");
            s.txresp_fresh(60, "0123456789").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/h")
        .send()
        .await
        .expect_body("0123456789");
    proxy.wait_counter("objects_stored", 1).await;
    let r = t.client(&proxy).head("/h").send().await;
    r.expect_status(200)
        .expect_header("content-length", "10")
        .expect_body("")
        .expect_cache_status("hit");
    origin.finish().await;
}

// b00004: a HEAD miss fetches the object with GET, so the next GET is a hit.
#[tokio::test]
async fn b00004_head_miss_fills_with_get() {
    let t = Test::new("b00004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("GET").expect_url("/h");
            s.txresp_fresh(60, "body").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .head("/h")
        .send()
        .await
        .expect_status(200)
        .expect_body("")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/h")
        .send()
        .await
        .expect_body("body")
        .expect_cache_status("hit");
    origin.finish().await;
}

// b00005: hop-by-hop fields, including those named in Connection, are removed in both directions.
#[tokio::test]
async fn b00005_hop_by_hop_removed_both_ways() {
    let t = Test::new("b00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_no_header("x-client-hop")
                .expect_no_header("keep-alive")
                .expect_no_header("te")
                .expect_no_header("proxy-authorization");
            r.expect_header("x-end-to-end", "kept");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .hdr("Connection", "X-Origin-Hop")
                .hdr("X-Origin-Hop", "secret")
                .hdr("Keep-Alive", "timeout=5")
                .hdr("X-Kept", "yes")
                .body("ok")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    let r = t
        .client(&proxy)
        .get("/")
        .hdr("Connection", "X-Client-Hop")
        .hdr("X-Client-Hop", "secret")
        .hdr("Keep-Alive", "timeout=5")
        .hdr("TE", "trailers")
        .hdr("Proxy-Authorization", "Basic eDp5")
        .hdr("X-End-To-End", "kept")
        .send()
        .await;
    r.expect_status(200)
        .expect_no_header("x-origin-hop")
        .expect_no_header("keep-alive")
        .expect_header("x-kept", "yes");
    origin.finish().await;
}

// b00006: Via is added both ways; from a trusted proxy in front, the
// X-Forwarded-For and Forwarded chains are extended.
#[tokio::test]
async fn b00006_via_and_forwarded() {
    let t = Test::new("b00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            assert_eq!(r.header_all("via"), ["1.0 edge, 1.1 hoard"]);
            r.expect_header("x-forwarded-for", "203.0.113.9, 127.0.0.1");
            assert_eq!(
                r.header_all("forwarded"),
                [
                    "for=203.0.113.9",
                    "for=127.0.0.1;proto=http;host=\"www.example.com\""
                ]
            );
            r.expect_header("host", "www.example.com");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .hdr("Via", "1.1 app")
                .body("ok")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.server.trusted_proxies = vec![hoard_config::Cidr::parse("127.0.0.0/8").unwrap()]
        })
        .start()
        .await;

    let r = t
        .client(&proxy)
        .get("/")
        .hdr("Host", "www.example.com")
        .hdr("Via", "1.0 edge")
        .hdr("X-Forwarded-For", "203.0.113.9")
        .hdr("Forwarded", "for=203.0.113.9")
        .send()
        .await;
    assert_eq!(
        r.header_all("via"),
        vec!["1.1 app, 1.1 hoard"],
        "{}",
        r.dump()
    );
    origin.finish().await;
}

// b00007: a request without Host (HTTP/1.1) is a 400; several Host fields too.
#[tokio::test]
async fn b00007_missing_or_duplicate_host_is_400() {
    let t = Test::new("b00007");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;

    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET / HTTP/1.1\r\n\r\n").await;
    c.read_response().await.expect_status(400);
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        .await;
    c.read_response().await.expect_status(400);
    proxy.expect_counter("client_errors", 2);
    origin.finish().await;
}

/// The fields of a response, names lower-cased, sorted: what a client may
/// rely on (the order of different names carries no meaning).
fn field_set(r: &hoard_testkit::Response) -> Vec<(String, String)> {
    let mut f: Vec<_> = r
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect();
    f.sort();
    f
}

// b00102: an HTTP/1.1 GET hit (whose stored fields go out as encoded once,
// counted) sends each stored field once, the repeated one in order, its own
// Age and Cache-Status, the origin's Date, no tag field: the same fields as
// a HEAD of the same object, which takes the full path.
#[tokio::test]
async fn b00102_a_hit_sends_the_stored_fields_once_each() {
    let t = Test::new("b00102");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("GET");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .hdr("Content-Type", "text/plain")
                .hdr("ETag", "\"e1\"")
                .hdr("X-Multi", "a")
                .hdr("X-Multi", "b")
                .hdr("Age", "3")
                .hdr("Date", crate::http_date(0))
                .hdr("Surrogate-Key", "t1 t2")
                .body("0123456789")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_body("0123456789");
    proxy.wait_counter("objects_stored", 1).await;

    let mut c = t.client(&proxy).connect().await;
    let hit = c.get("/f").send().await;
    hit.expect_status(200)
        .expect_body("0123456789")
        .expect_header("age", "3")
        .expect_header("accept-ranges", "bytes")
        .expect_header("content-length", "10")
        .expect_header("date", &crate::http_date(0))
        .expect_no_header("surrogate-key")
        .expect_cache_status("hit");
    assert_eq!(hit.header_all("x-multi"), ["a", "b"], "{}", hit.dump());
    for name in [
        "cache-control",
        "content-type",
        "etag",
        "age",
        "date",
        "content-length",
        "accept-ranges",
        "cache-status",
    ] {
        assert_eq!(hit.header_all(name).len(), 1, "{name} once: {}", hit.dump());
    }
    // A second hit on the same connection: the same fields.
    let again = c.get("/f").send().await;
    assert_eq!(field_set(&again), field_set(&hit), "{}", again.dump());
    let head = c.head("/f").send().await;
    head.expect_status(200).expect_cache_status("hit");
    assert_eq!(field_set(&head), field_set(&hit), "{}", head.dump());
    proxy.expect_counter("cache_hit", 3);
    // The two GETs sent the fields as encoded; the HEAD took the full path.
    proxy.expect_counter("cache_hit_fields_encoded", 2);
    origin.finish().await;
}

// b00103: the fields a 304 brings are what the next hits send, also when a
// hit had encoded the fields stored before it.
#[tokio::test]
async fn b00103_a_hit_after_a_304_sends_the_new_fields() {
    let t = Test::new("b00103");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_no_header("if-none-match");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=10")
                .hdr("ETag", "\"v1\"")
                .hdr("X-Version", "old")
                .body("body-v1")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"v1\"");
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
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_header("x-version", "old")
        .expect_cache_status("hit");
    t.clock.advance(crate::secs(11));
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_header("x-version", "new")
        .expect_cache_status("fwd=stale; fwd-status=304");
    let r = t.client(&proxy).get("/v").send().await;
    r.expect_body("body-v1")
        .expect_header("cache-control", "max-age=20")
        .expect_cache_status("hit");
    assert_eq!(r.header_all("x-version"), ["new"], "{}", r.dump());
    assert_eq!(r.header_all("cache-control").len(), 1, "{}", r.dump());
    proxy.expect_counter("cache_revalidated_304", 1);
    // The hit before, the answer from the object the 304 refreshed and the
    // hit after all sent the fields as encoded, each from its own object.
    proxy.expect_counter("cache_hit_fields_encoded", 3);
    origin.finish().await;
}
