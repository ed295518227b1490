//! b: routing from a configuration file: sites by Host, routes by prefix and regex, each
//! naming an upstream and a cache policy.

use hoard_testkit::Test;

use crate::secs;

const CONFIG: &str = r#"
[server]
debug_headers = true

[upstream.app]
servers = ["http://{origin}"]

[upstream.assets]
servers = ["http://{assets}"]
host = "assets.internal"

[[site]]
hosts = ["www.example.com", "*.example.org"]

[[site.route]]
prefix = "/api/"
upstream = "app"
cache = false

[[site.route]]
regex = "\\.(css|js)$"
upstream = "assets"
default_ttl = { "200" = "10m" }

[[site.route]]
prefix = "/"
upstream = "app"

[[site]]
[[site.route]]
upstream = "assets"
cache = false
"#;

// b00040: requests go to the upstream of the first matching route of the site chosen by Host.
#[tokio::test]
async fn b00040_sites_and_routes_pick_upstream_and_policy() {
    let t = Test::new("b00040");
    let app = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq()
                    .await
                    .expect_url("/api/items")
                    .expect_header("host", "www.example.com");
                s.txresp_fresh(60, "items").await;
            }
            s.rxreq()
                .await
                .expect_url("/page")
                .expect_header("host", "shop.example.org");
            s.txresp_fresh(60, "page").await;
        })
        .start()
        .await;
    let assets = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/site.css")
                .expect_header("host", "assets.internal");
            s.txresp(200).body("css").send().await; // no freshness: the route's default_ttl applies
            s.rxreq()
                .await
                .expect_url("/other")
                .expect_header("host", "assets.internal");
            s.txresp(200).body("default site").send().await;
        })
        .start()
        .await;
    let text = CONFIG.replace("{assets}", &assets.addr().to_string());
    let proxy = t.proxy().toml(&app, &text).start().await;
    let c = t.client(&proxy);
    // /api/ on the first site: cache = false, so both go to the app.
    for _ in 0..2 {
        c.get("/api/items")
            .hdr("Host", "www.example.com")
            .send()
            .await
            .expect_body("items")
            .expect_cache_status("fwd=bypass");
    }
    // The regex route: assets upstream, 10 minutes by default_ttl.
    c.get("/site.css")
        .hdr("Host", "www.example.com")
        .send()
        .await
        .expect_body("css")
        .expect_cache_status("stored; ttl=600");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(secs(599));
    c.get("/site.css")
        .hdr("Host", "www.example.com")
        .send()
        .await
        .expect_body("css")
        .expect_cache_status("hit");
    // A wildcard host, catch-all route.
    c.get("/page")
        .hdr("Host", "shop.example.org")
        .send()
        .await
        .expect_body("page");
    // An unknown host: the default site.
    c.get("/other")
        .hdr("Host", "unknown.test")
        .send()
        .await
        .expect_body("default site");
    app.finish().await;
    assets.finish().await;
}
