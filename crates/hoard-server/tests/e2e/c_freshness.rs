//! c: freshness (RFC 9111 §4.2): max-age, s-maxage, Expires, heuristics, Age, sub-second TTLs, CDN-Cache-Control.

use std::time::Duration;

use hoard_policy::config::{DefaultTtl, StatusMatch};
use hoard_testkit::{Origin, Test};

use crate::{http_date, secs};

/// An origin that answers `n` requests for `/a` with `hdrs` and bodies v1, v2, ...
async fn origin_serving(t: &Test, n: usize, hdrs: Vec<(&'static str, String)>) -> Origin {
    t.origin()
        .script(move |mut s| async move {
            for i in 1..=n {
                s.rxreq().await.expect_url("/a");
                let mut r = s.txresp(200);
                for (k, v) in &hdrs {
                    r = r.hdr(k, v);
                }
                r.body(format!("v{i}")).send().await;
            }
        })
        .start()
        .await
}

// c00001: max-age: hits while fresh with a correct Age, refetch once stale.
#[tokio::test]
async fn c00001_max_age_hit_then_refetch() {
    let t = Test::new("c00001");
    let origin = origin_serving(&t, 2, vec![("Cache-Control", "max-age=10".into())]).await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy).get("/a").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(9));
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("age", "9")
        .expect_cache_status("hit; ttl=1");
    t.clock.advance(secs(1));
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("fwd=stale");
    proxy.expect_counter("cache_hit", 1);
    origin.finish().await;
}

// c00002: s-maxage takes precedence over max-age in a shared cache.
#[tokio::test]
async fn c00002_s_maxage_beats_max_age() {
    let t = Test::new("c00002");
    let origin = origin_serving(
        &t,
        2,
        vec![("Cache-Control", "max-age=100, s-maxage=5".into())],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy).get("/a").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(4));
    t.client(&proxy).get("/a").send().await.expect_body("v1");
    t.clock.advance(secs(2));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00003: Expires relative to Date gives the lifetime.
#[tokio::test]
async fn c00003_expires() {
    let t = Test::new("c00003");
    let origin = origin_serving(&t, 2, vec![("Expires", http_date(30))]).await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy).get("/a").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(29));
    t.client(&proxy).get("/a").send().await.expect_body("v1");
    t.clock.advance(secs(1));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00004: an invalid Expires (e.g. "0") means already expired: not reused.
#[tokio::test]
async fn c00004_invalid_expires_is_stale() {
    let t = Test::new("c00004");
    let origin = origin_serving(
        &t,
        2,
        vec![("Expires", "0".into()), ("ETag", "\"e\"".into())],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy).get("/a").send().await.expect_body("v1");
    // Stored (it has a validator) but stale: the next request revalidates.
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("fwd=stale");
    proxy.expect_counter("cache_hit", 0);
    origin.finish().await;
}

// c00005: heuristic freshness: 10% of the time since Last-Modified.
#[tokio::test]
async fn c00005_heuristic_from_last_modified() {
    let t = Test::new("c00005");
    let origin = origin_serving(&t, 2, vec![("Last-Modified", http_date(-1000))]).await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("stored; ttl=100");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(99));
    t.client(&proxy).get("/a").send().await.expect_body("v1");
    t.clock.advance(secs(1));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00006: an Age from upstream counts against freshness (§4.2.3).
#[tokio::test]
async fn c00006_upstream_age_counts() {
    let t = Test::new("c00006");
    let origin = origin_serving(
        &t,
        2,
        vec![("Cache-Control", "max-age=10".into()), ("Age", "8".into())],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("age", "8");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(1));
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("age", "9");
    t.clock.advance(secs(1));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00007: a configured default TTL applies to responses without freshness, exactly, below one second.
#[tokio::test]
async fn c00007_sub_second_default_ttl() {
    let t = Test::new("c00007");
    let origin = origin_serving(&t, 2, vec![]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| {
            r.policy.default_ttls.push(DefaultTtl {
                status: StatusMatch::Any,
                ttl: Duration::from_millis(500),
            })
        })
        .start()
        .await;

    t.client(&proxy).get("/a").send().await.expect_body("v1");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(Duration::from_millis(499));
    t.client(&proxy).get("/a").send().await.expect_body("v1");
    t.clock.advance(Duration::from_millis(1));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00008: CDN-Cache-Control (RFC 9213) overrides Cache-Control for hoard; Cache-Control still reaches the client.
#[tokio::test]
async fn c00008_cdn_cache_control_wins() {
    let t = Test::new("c00008");
    let origin = origin_serving(
        &t,
        1,
        vec![
            ("Cache-Control", "no-store".into()),
            ("CDN-Cache-Control", "max-age=60".into()),
        ],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("cache-control", "no-store");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("cache-control", "no-store")
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00009: a response without any freshness information or validator is not stored.
#[tokio::test]
async fn c00009_no_freshness_not_stored() {
    let t = Test::new("c00009");
    let origin = origin_serving(&t, 2, vec![]).await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=no-freshness");
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    proxy.expect_counter("not_storable", 2);
    origin.finish().await;
}

// c00041: an invalid CDN-Cache-Control (not a Structured Field) is ignored; Cache-Control applies.
#[tokio::test]
async fn c00041_invalid_cdn_cache_control_is_ignored() {
    let t = Test::new("c00041");
    let origin = origin_serving(
        &t,
        2,
        vec![
            ("Cache-Control", "no-store".into()),
            ("CDN-Cache-Control", "max-age=10000, &&&&&".into()),
        ],
    )
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=no-store");
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}

// c00042: a response without Date is dated on arrival; its age then grows on the proxy clock.
#[tokio::test]
async fn c00042_missing_date_is_added() {
    let t = Test::new("c00042");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .no_date()
                .body("x")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_header("date", &http_date(0));
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(7));
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_header("date", &http_date(0))
        .expect_header("age", "7");
    origin.finish().await;
}

// c00043: a response slower than its max-age is still stored fresh: without Age it is as
// old as its Date says, the time in flight is not added (only to an upstream cache's Age).
#[tokio::test]
async fn c00043_slow_origin_response_is_stored_fresh() {
    let t = Test::new("c00043");
    let sent = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let sent = sent.clone();
            |mut s| async move {
                s.rxreq().await;
                sent.sync().await; // the test moves the clock 3 s while the origin "works"
                s.txresp_fresh(2, "slow").await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c = t.client(&proxy).get("/a").spawn();
    proxy.wait_counter("fills_started", 1).await;
    t.clock.advance(secs(3));
    sent.sync().await;
    c.await
        .unwrap()
        .expect_body("slow")
        .expect_cache_status("stored; ttl=2");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("slow")
        .expect_header("age", "0")
        .expect_cache_status("hit");
    origin.finish().await;
}

// c00044: ignore_headers = ["cache-control", "expires"] with a default TTL caches an app
// that says no-cache (nginx proxy_ignore_headers + proxy_cache_valid).
#[tokio::test]
async fn c00044_ignore_headers_and_max_ttl() {
    let t = Test::new("c00044");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/app");
            s.txresp(200)
                .hdr("Cache-Control", "no-cache, no-store")
                .hdr("Expires", "0")
                .body("app")
                .send()
                .await;
            s.serve_fresh("/long", 86400, "long-v1").await;
            s.serve_fresh("/long", 86400, "long-v2").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| {
            r.policy.ignore_cache_control = true;
            r.policy.ignore_expires = true;
            r.policy
                .default_ttls
                .push(hoard_policy::config::DefaultTtl {
                    status: hoard_policy::config::StatusMatch::Code(200),
                    ttl: secs(5),
                });
        })
        .start()
        .await;
    let c = t.client(&proxy);
    c.get("/app")
        .send()
        .await
        .expect_body("app")
        .expect_cache_status("stored; ttl=5");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/app")
        .send()
        .await
        .expect_body("app")
        .expect_cache_status("hit");
    // Cache-Control is ignored for caching, so max-age=86400 does not count either: 5 s default.
    c.get("/long")
        .send()
        .await
        .expect_body("long-v1")
        .expect_cache_status("ttl=5");
    proxy.wait_counter("objects_stored", 2).await;
    t.clock.advance(secs(6));
    c.get("/long").send().await.expect_body("long-v2");
    origin.finish().await;
}

// c00045: max_ttl caps an origin's lifetime.
#[tokio::test]
async fn c00045_max_ttl_caps_lifetimes() {
    let t = Test::new("c00045");
    let origin = origin_serving(&t, 2, vec![("Cache-Control", "max-age=86400".into())]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.policy.max_ttl = Some(secs(60)))
        .start()
        .await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("stored; ttl=60");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(60));
    t.client(&proxy).get("/a").send().await.expect_body("v2");
    origin.finish().await;
}
