//! b: a route's bypass and no-store rules, one case per condition.

use hoard_testkit::Test;

/// An origin that answers each request with `max-age=600` and a body
/// naming the request's number and URL.
fn counting(t: &Test, answers: usize) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for n in 1..=answers {
            let r = s.rxreq().await;
            let url = r.url().to_string();
            s.txresp_fresh(600, format!("{n} {url}")).await;
        }
    })
}

/// A one-route configuration with `rules` added to the route.
fn rules(rules: &str) -> String {
    format!(
        r#"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
{rules}
"#
    )
}

// b00060: the WordPress case: a `wordpress_logged_in_*` cookie bypasses the
// cache (every such request reaches the origin, and never replaces the
// anonymous copy), while anonymous visitors get hits.
#[tokio::test]
async fn b00060_cookie_pattern_bypasses() {
    let t = Test::new("b00060");
    let origin = counting(&t, 3).start().await;
    let cfg = rules(
        r#"[[site.route.bypass]]
name = "logged-in"
cookie = "wordpress_logged_in_*""#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/post")
        .send()
        .await
        .expect_body("1 /post");
    for n in [2, 3] {
        t.client(&proxy)
            .get("/post")
            .hdr("Cookie", "wp-settings=1; wordpress_logged_in_4f2a=alice")
            .send()
            .await
            .expect_body(format!("{n} /post"))
            .expect_cache_status("fwd=bypass")
            .expect_cache_status("detail=bypass-rule:logged-in");
    }
    t.client(&proxy)
        .get("/post")
        .hdr("Cookie", "wordpress_test_cookie=1")
        .send()
        .await
        .expect_body("1 /post")
        .expect_cache_status("hit");
    proxy.expect_counter("bypass_rule_matches", 2);
    origin.finish().await;
}

// b00061: a header rule with a value, as no_store: the matching request is
// looked up (a hit is served) but what it fetches is never stored.
#[tokio::test]
async fn b00061_header_rule_no_store() {
    let t = Test::new("b00061");
    let origin = counting(&t, 2).start().await;
    let cfg = rules(
        r#"[[site.route.no_store]]
name = "debug"
header = "X-Debug: on""#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let r = t.client(&proxy).get("/a").hdr("X-Debug", "ON").send().await;
    r.expect_body("1 /a")
        .expect_cache_status("fwd=uri-miss")
        .expect_cache_status("detail=no-store-rule:debug");
    assert!(
        !r.header("cache-status")
            .unwrap_or_default()
            .contains("stored"),
        "a no-store rule's response was stored"
    );
    // Not stored: the next request fetches; "X-Debug: off" does not match.
    t.client(&proxy)
        .get("/a")
        .hdr("X-Debug", "off")
        .send()
        .await
        .expect_body("2 /a")
        .expect_cache_status("stored");
    t.client(&proxy)
        .get("/a")
        .hdr("X-Debug", "on")
        .send()
        .await
        .expect_body("2 /a")
        .expect_cache_status("hit");
    proxy.expect_counter("no_store_rule_matches", 2);
    origin.finish().await;
}

// b00062: a query rule (`preview=true`) bypasses; other values of the
// parameter are cached as usual.
#[tokio::test]
async fn b00062_query_rule_bypasses() {
    let t = Test::new("b00062");
    let origin = counting(&t, 3).start().await;
    let cfg = rules(
        r#"[[site.route.bypass]]
name = "preview"
query = "preview=true""#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    for n in [1, 2] {
        t.client(&proxy)
            .get("/p?id=7&preview=true")
            .send()
            .await
            .expect_body(format!("{n} /p?id=7&preview=true"))
            .expect_cache_status("detail=bypass-rule:preview");
    }
    t.client(&proxy)
        .get("/p?preview=false")
        .send()
        .await
        .expect_body("3 /p?preview=false");
    t.client(&proxy)
        .get("/p?preview=false")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// b00063: a method rule: HEAD bypasses, GET is cached.
#[tokio::test]
async fn b00063_method_rule_bypasses() {
    let t = Test::new("b00063");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("GET");
            s.txresp_fresh(600, "get").await;
            s.rxreq().await.expect_method("HEAD");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = rules(
        r#"[[site.route.bypass]]
name = "heads"
method = ["head"]"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy).get("/m").send().await.expect_body("get");
    t.client(&proxy)
        .head("/m")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("detail=bypass-rule:heads");
    t.client(&proxy)
        .get("/m")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// b00064: client address rules: the loopback range matches (a bypass that
// stores: the origin is asked and the object replaced), another range does not.
#[tokio::test]
async fn b00064_client_rule_and_refresh() {
    let t = Test::new("b00064");
    let origin = counting(&t, 2).start().await;
    let cfg = rules(
        r#"[[site.route.bypass]]
name = "office"
client = ["10.0.0.0/8"]
[[site.route.bypass]]
name = "refresh"
client = ["127.0.0.0/8", "::1"]
header = "X-Refresh"
store = true"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy).get("/r").send().await.expect_body("1 /r");
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body("1 /r")
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/r")
        .hdr("X-Refresh", "1")
        .send()
        .await
        .expect_body("2 /r")
        .expect_cache_status("fwd=bypass")
        .expect_cache_status("stored")
        .expect_cache_status("detail=bypass-rule:refresh");
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body("2 /r")
        .expect_cache_status("hit");
    origin.finish().await;
}
