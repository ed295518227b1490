//! o: operating hoard, purges: the admin API's URL, prefix, host and tag
//! purges, soft purges, `PURGE` on the main listener, purges racing a fill,
//! reaching slices, disk and a restart; the admin token.

use hoard_testkit::Test;

use crate::admin::{purge, purged};
use crate::secs;

// o00001: a URL purge removes every Vary variant of the URL and every keyed
// header value; it answers the count, and is idempotent.
#[tokio::test]
async fn o00001_url_purge_takes_every_variant() {
    let t = Test::new("o00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for round in 0..2 {
                for lang in ["en", "de"] {
                    s.rxreq()
                        .await
                        .expect_url("/page")
                        .expect_header("accept-language", lang);
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .hdr("Vary", "Accept-Language")
                        .body(format!("{lang}{round}"))
                        .send()
                        .await;
                }
                if round == 0 {
                    s.serve_fresh("/other", 600, "other").await;
                }
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let get = |lang: &'static str| {
        t.client(&proxy)
            .get("/page")
            .hdr("Accept-Language", lang)
            .send()
    };
    get("en").await.expect_body("en0");
    get("de").await.expect_body("de0");
    t.client(&proxy)
        .get("/other")
        .send()
        .await
        .expect_body("other");
    get("en")
        .await
        .expect_body("en0")
        .expect_cache_status("hit");
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/page"}"#).await;
    assert_eq!(purged(&r), 2);
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"url": "http://localhost/page"}"#).await),
        0
    );
    get("en").await.expect_body("en1");
    get("de").await.expect_body("de1");
    // Other URLs stay.
    t.client(&proxy)
        .get("/other")
        .send()
        .await
        .expect_cache_status("hit");
    proxy
        .expect_counter("purges_url", 2)
        .expect_counter("purged_objects", 2);
    origin.finish().await;
}

// o00002: prefix and host purges select by the URL the key was made from.
#[tokio::test]
async fn o00002_prefix_and_host_purges() {
    let t = Test::new("o00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/img/a", "/img/b", "/news", "/img/a", "/news"] {
                s.serve_fresh(path, 600, path).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/img/a", "/img/b", "/news"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    let r = purge(&t, &proxy, r#"{"prefix": "http://LOCALHOST/img/"}"#).await;
    assert_eq!(purged(&r), 2);
    t.client(&proxy)
        .get("/news")
        .send()
        .await
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/img/a")
        .send()
        .await
        .expect_body("/img/a");
    let r = purge(&t, &proxy, r#"{"host": "localhost"}"#).await;
    assert_eq!(purged(&r), 2);
    t.client(&proxy)
        .get("/news")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    proxy
        .expect_counter("purges_prefix", 1)
        .expect_counter("purges_host", 1);
    origin.finish().await;
}

// o00003: tags come from Surrogate-Key (spaces) and Cache-Tag (commas); clients
// never see those fields; a tag purge removes exactly the tagged objects.
#[tokio::test]
async fn o00003_tag_purge_and_tag_fields_stripped() {
    let t = Test::new("o00003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, sk, ct) in [
                ("/p/42", "product-42 home", ""),
                ("/p/43", "product-43", "home"),
                ("/about", "", "about"),
                ("/p/42", "product-42", ""),
                ("/p/43", "product-43", ""),
            ] {
                s.rxreq().await.expect_url(path);
                let mut r = s.txresp(200).hdr("Cache-Control", "max-age=600");
                if !sk.is_empty() {
                    r = r.hdr("Surrogate-Key", sk);
                }
                if !ct.is_empty() {
                    r = r.hdr("Cache-Tag", ct);
                }
                r.body(path).send().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/p/42", "/p/43", "/about", "/p/42"] {
        t.client(&proxy)
            .get(p)
            .send()
            .await
            .expect_body(p)
            .expect_no_header("surrogate-key")
            .expect_no_header("cache-tag");
    }
    assert_eq!(purged(&purge(&t, &proxy, r#"{"tag": "home"}"#).await), 2);
    t.client(&proxy)
        .get("/about")
        .send()
        .await
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/p/42")
        .send()
        .await
        .expect_body("/p/42");
    t.client(&proxy)
        .get("/p/43")
        .send()
        .await
        .expect_body("/p/43");
    // The new copy of /p/42 is no longer tagged "home".
    assert_eq!(purged(&purge(&t, &proxy, r#"{"tag": "home"}"#).await), 0);
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"tag": "product-42"}"#).await),
        1
    );
    proxy.expect_counter("purges_tag", 3);
    origin.finish().await;
}

// o00004: bad purge requests get 400 with a JSON error naming the field.
#[tokio::test]
async fn o00004_bad_purge_requests_name_the_field() {
    let t = Test::new("o00004");
    let origin = t.origin().start().await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for (body, field, part) in [
        (r#"{"url": "/relative"}"#, Some("url"), "absolute URL"),
        (r#"{"url": "ftp://x/a"}"#, Some("url"), "http or https"),
        (r#"{"prefix": "example.com/"}"#, Some("prefix"), "http://"),
        (r#"{"host": "example.com/a"}"#, Some("host"), "host name"),
        (r#"{"tag": ""}"#, Some("tag"), "non-empty"),
        (r#"{"tag": 5}"#, Some("tag"), "string"),
        (
            r#"{"tag": "a", "soft": "yes"}"#,
            Some("soft"),
            "true or false",
        ),
        (r#"{"tag": "a", "host": "b"}"#, Some("tag"), "only one"),
        (r#"{"tags": "a"}"#, None, "unknown field"),
        (r#"{}"#, None, "give one of"),
        ("not json", None, "not JSON"),
    ] {
        let r = purge(&t, &proxy, body).await;
        r.expect_status(400);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["field"].as_str(), field, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(part), "{body}: {v}");
    }
    t.client(proxy.admin())
        .get("/purge")
        .send()
        .await
        .expect_status(405);
    t.client(proxy.admin())
        .get("/nothing")
        .send()
        .await
        .expect_status(404);
    origin.finish().await;
}

// o00005: a soft purge marks stale instead of removing: stale-while-revalidate
// serves the old copy while exactly one refresh runs, then the new one.
#[tokio::test]
async fn o00005_soft_purge_serves_stale_with_one_refresh() {
    let t = Test::new("o00005");
    // The refresh is answered only once both stale responses are in (the
    // refresh is detached: unheld, it may finish before the second GET).
    let release = t.barrier(2);
    let r = release.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600, stale-while-revalidate=60")
                .hdr("ETag", "\"1\"")
                .hdr("Surrogate-Key", "news")
                .body("v1")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            r.sync().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600, stale-while-revalidate=60")
                .hdr("ETag", "\"2\"")
                .body("v2")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/n").send().await.expect_body("v1");
    t.clock.advance(secs(5));
    let r = purge(&t, &proxy, r#"{"tag": "news", "soft": true}"#).await;
    assert_eq!(purged(&r), 1);
    for _ in 0..2 {
        t.client(&proxy)
            .get("/n")
            .send()
            .await
            .expect_body("v1")
            .expect_cache_status("detail=stale-while-revalidate");
    }
    release.sync().await;
    proxy.wait_counter("objects_stored", 2).await;
    proxy.expect_counter("background_refreshes", 1);
    t.client(&proxy)
        .get("/n")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("hit");
    proxy.expect_counter("purges_soft", 1);
    origin.finish().await;
}

// o00006: a soft purge of an object without stale-while-revalidate makes the
// next request revalidate (a 304 refreshes it).
#[tokio::test]
async fn o00006_soft_purge_revalidates() {
    let t = Test::new("o00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(600, "\"1\"", "v1").await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"1\"")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/r", "soft": true}"#).await;
    assert_eq!(purged(&r), 1);
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
    origin.finish().await;
}

// o00007: a purge that comes while a fill is streaming: the client that asked
// gets its whole body, but the cache does not keep it; a request made after
// the purge does not join that fill (it fetches anew), and its copy is kept.
#[tokio::test]
async fn o00007_purge_racing_a_fill_is_not_stored() {
    let t = Test::new("o00007");
    let second_sent = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let second_sent = second_sent.clone();
            |mut s| async move {
                let old = s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Surrogate-Key", "t")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("old-").await;
                // After the purge: a fetch of its own, while the old one streams.
                s.rxreq_concurrent().await.expect_url("/race");
                s.txresp_fresh(600, "new").await;
                second_sent.sync().await;
                s.switch_to(&old);
                s.chunk("body").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let first = t.client(&proxy).get("/race").spawn();
    proxy.wait_counter("fills_started", 1).await;
    origin.wait_requests(1).await;
    // Nothing is stored yet: the purge finds nothing, but the fill notices it.
    let r = purge(&t, &proxy, r#"{"tag": "t"}"#).await;
    assert_eq!(purged(&r), 0);
    t.client(&proxy)
        .get("/race")
        .send()
        .await
        .expect_body("new");
    proxy.wait_counter("objects_stored", 1).await;
    second_sent.sync().await;
    first.await.unwrap().expect_body("old-body");
    proxy.wait_counter("fills_completed", 2).await;
    proxy
        .expect_counter("purge_raced_fills", 1)
        .expect_counter("objects_stored", 1);
    t.client(&proxy)
        .get("/race")
        .send()
        .await
        .expect_body("new")
        .expect_cache_status("hit");
    origin.finish().await;
}

// o00008: on a non-loopback address the admin API needs the bearer token:
// 401 without it or with a wrong one; with it, every endpoint answers.
#[tokio::test]
async fn o00008_admin_token_on_non_loopback() {
    let t = Test::new("o00008");
    let origin = t.origin().start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.address = Some("0.0.0.0:0".parse().unwrap());
            c.admin.token = Some("s3cret-token".into());
        })
        .start()
        .await;
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], proxy.admin().port()));
    for path in ["/status", "/metrics", "/"] {
        let r = t.client(admin).get(path).send().await;
        r.expect_status(401)
            .expect_header("www-authenticate", "Bearer");
        t.client(admin)
            .get(path)
            .hdr("Authorization", "Bearer s3cret-tokem")
            .send()
            .await
            .expect_status(401);
        t.client(admin)
            .get(path)
            .hdr("Authorization", "Bearer s3cret-token")
            .send()
            .await
            .expect_status(200);
    }
    t.client(admin)
        .post("/purge")
        .body(r#"{"tag": "x"}"#)
        .send()
        .await
        .expect_status(401);
    let r = t
        .client(admin)
        .post("/purge")
        .hdr("Authorization", "Bearer s3cret-token")
        .body(r#"{"tag": "x"}"#)
        .send()
        .await;
    assert_eq!(purged(&r), 0);
    // The dashboard passes the token in its query.
    t.client(admin)
        .get("/status?token=s3cret-token")
        .send()
        .await
        .expect_status(200);
    proxy.expect_counter("admin_unauthorized", 7);
    origin.finish().await;
}

// o00009: PURGE on the main listener: off by default (405), refused outside
// purge_allow (403), and a URL purge from an allowed address.
#[tokio::test]
async fn o00009_purge_method() {
    let t = Test::new("o00009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for body in ["a1", "a2"] {
                s.serve_fresh("/a?x=1", 600, body).await;
            }
        })
        .start()
        .await;
    let off = t.proxy().origin(&origin).start().await;
    t.client(&off)
        .request("PURGE", "/a")
        .send()
        .await
        .expect_status(405);
    let elsewhere = t
        .proxy()
        .origin(&origin)
        .config(|c| c.admin.purge_allow = vec![hoard_config::Cidr::parse("10.0.0.0/8").unwrap()])
        .start()
        .await;
    t.client(&elsewhere)
        .request("PURGE", "/a")
        .send()
        .await
        .expect_status(403);
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.admin.purge_allow = vec![hoard_config::Cidr::parse("127.0.0.1/32").unwrap()])
        .start()
        .await;
    t.client(&proxy)
        .get("/a?x=1")
        .send()
        .await
        .expect_body("a1");
    let r = t.client(&proxy).request("PURGE", "/a?x=1").send().await;
    assert_eq!(purged(&r), 1);
    t.client(&proxy)
        .get("/a?x=1")
        .send()
        .await
        .expect_body("a2");
    proxy.expect_counter("purges_url", 1);
    elsewhere.expect_counter("purges_refused", 1);
    origin.finish().await;
}

// o00013: a URL purge of an object cached as slices removes every slice; a
// later range fetches its slice again.
#[tokio::test]
async fn o00013_url_purge_takes_every_slice() {
    use super::r_range::{body, LEN};
    use super::s_slice::{serve, starts, ETAG, SIZE};
    let t = Test::new("o00013");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[0, 1, 2, 3, 4])).await;
            serve(&mut s, "/v", &full, ETAG, starts(&[2])).await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .route(|r| {
            r.slice = Some(SIZE);
            r.slice_prefetch = 0;
            r.slice_direct_max = 0;
        })
        .start()
        .await;
    t.client(&proxy).get("/v").send().await.expect_body(&full);
    proxy.wait_counter("objects_stored", 5).await;
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/v"}"#).await;
    assert_eq!(purged(&r), 5);
    t.client(&proxy)
        .get("/v")
        .hdr("Range", "bytes=140000-140009")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("fwd=uri-miss")
        .expect_body(&full[140_000..140_010]);
    origin.finish().await;
}

// o00014: purges reach every tier: objects on disk and their promoted
// memory copies; after a restart the loader has catalogued the tags again,
// so a tag purge still finds what was stored before it.
#[tokio::test]
async fn o00014_purge_on_disk_and_after_a_restart() {
    let t = Test::new("o00014");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, tag) in [("/t1", "a"), ("/t2", "a"), ("/t3", "b"), ("/t1", "a")] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Cache-Tag", tag)
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let start = || {
        t.proxy()
            .origin(&origin)
            .admin()
            .disk(&dir, 64 << 20, 1 << 20)
            .start()
    };
    let proxy = start().await;
    for p in ["/t1", "/t2", "/t3"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    proxy.wait_counter("disk_stored", 3).await;
    // Two disk hits: /t1 is promoted to the memory tier.
    for _ in 0..2 {
        t.client(&proxy)
            .get("/t1")
            .send()
            .await
            .expect_cache_status("hit");
    }
    proxy.expect_counter("memory_promotions", 1);
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/t1"}"#).await;
    assert_eq!(purged(&r), 1, "one object, on disk and in memory");
    t.client(&proxy)
        .get("/t1")
        .send()
        .await
        .expect_body("/t1")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("disk_stored", 4).await;
    proxy.stop().await;
    assert_eq!(crate::disk::objects(&dir).len(), 3);

    let proxy = start().await;
    proxy.expect_counter("disk_loaded", 3);
    let r = purge(&t, &proxy, r#"{"tag": "a"}"#).await;
    assert_eq!(purged(&r), 2);
    proxy.stop().await;
    // The purge has unlinked the files before it answered.
    let left = crate::disk::objects(&dir);
    assert_eq!(left.len(), 1, "{left:?}");
    let proxy = start().await;
    t.client(&proxy)
        .get("/t3")
        .send()
        .await
        .expect_body("/t3")
        .expect_cache_status("hit");
    origin.finish().await;
}
