//! k: cache keys and Vary (RFC 9111 §4.1).

use hoard_policy::key::QueryKey;
use hoard_testkit::Test;

// k00001: Vary: Accept-Encoding keeps variants side by side; equivalent values share one.
#[tokio::test]
async fn k00001_vary_variants_side_by_side() {
    let t = Test::new("k00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for want in ["gzip, br", "identity"] {
                s.rxreq().await.expect_header("accept-encoding", want);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Vary", "Accept-Encoding")
                    .body(want)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    // With hoard's own encodings off: the variants are the origin's.
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.encodings.clear())
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/v")
        .hdr("Accept-Encoding", "gzip, br")
        .send()
        .await
        .expect_body("gzip, br")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/v")
        .hdr("Accept-Encoding", "identity")
        .send()
        .await
        .expect_body("identity")
        .expect_cache_status("fwd=vary-miss");
    proxy.wait_counter("objects_stored", 2).await;
    c.get("/v")
        .hdr("Accept-Encoding", "BR,gzip")
        .send()
        .await
        .expect_body("gzip, br")
        .expect_cache_status("hit");
    c.get("/v")
        .hdr("Accept-Encoding", "identity")
        .send()
        .await
        .expect_body("identity")
        .expect_cache_status("hit");
    origin.finish().await;
}

// k00002: the Host is part of the key.
#[tokio::test]
async fn k00002_host_in_key() {
    let t = Test::new("k00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for host in ["a.example", "b.example"] {
                s.rxreq().await.expect_header("host", host);
                s.txresp_fresh(60, host).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy);
    c.get("/")
        .hdr("Host", "a.example")
        .send()
        .await
        .expect_body("a.example");
    c.get("/")
        .hdr("Host", "b.example")
        .send()
        .await
        .expect_body("b.example");
    proxy.wait_counter("objects_stored", 2).await;
    c.get("/")
        .hdr("Host", "A.EXAMPLE:80")
        .send()
        .await
        .expect_body("a.example")
        .expect_cache_status("key=\"http|a.example|/\"");
    origin.finish().await;
}

// k00003: a sorted-query key makes parameter order irrelevant; chosen params drop the others.
#[tokio::test]
async fn k00003_query_in_key() {
    let t = Test::new("k00003");
    let origin = t
        .origin()
        .script_fresh("/s?b=2&a=1", 60, "sorted")
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.key.query = QueryKey::Sorted)
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/s?b=2&a=1").send().await.expect_body("sorted");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/s?a=1&b=2")
        .send()
        .await
        .expect_body("sorted")
        .expect_cache_status("hit");
    origin.finish().await;

    let t = Test::new("k00003b");
    let origin = t
        .origin()
        .script_fresh("/p?id=7&utm_source=x", 60, "p")
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.key.query = QueryKey::Only(vec!["id".into()]))
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/p?id=7&utm_source=x").send().await;
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/p?utm_source=y&id=7")
        .send()
        .await
        .expect_body("p")
        .expect_cache_status("hit");
    origin.finish().await;
}

// k00004: a key from a TOML route: cookie value in the key.
#[tokio::test]
async fn k00004_cookie_in_key_from_toml() {
    let t = Test::new("k00004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for lang in ["fr", "de"] {
                s.rxreq().await;
                s.txresp_fresh(60, lang).await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .toml(
            &origin,
            r#"
[server]
debug_headers = true
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
upstream = "app"
key = { cookies = ["lang"] }
"#,
        )
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/")
        .hdr("Cookie", "lang=fr; sid=1")
        .send()
        .await
        .expect_body("fr");
    c.get("/")
        .hdr("Cookie", "lang=de; sid=2")
        .send()
        .await
        .expect_body("de");
    proxy.wait_counter("objects_stored", 2).await;
    c.get("/")
        .hdr("Cookie", "sid=3; lang=fr")
        .send()
        .await
        .expect_body("fr")
        .expect_cache_status("hit; key=\"http|localhost|/|cookie:lang=fr\"");
    origin.finish().await;
}
