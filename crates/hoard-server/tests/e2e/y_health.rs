//! y (health): active health checks (probes whether or not clients come,
//! a window and a threshold, a server out and back), and run-time control
//! of a server's state through the admin API (down, drain, up, auto).

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;

use hoard_testkit::{Origin, Test};
use tokio::sync::Notify;

/// A server of the cases: `/health` answered with the status in `health`
/// (as often as probes come), any other path with `name` (counted in
/// `pages`), until `stop` is notified and every request that came was
/// answered.
struct Server {
    origin: Origin,
    health: Arc<AtomicU16>,
    pages: Arc<AtomicUsize>,
    stop: Arc<Notify>,
}

impl Server {
    async fn start(t: &Test, name: &'static str) -> Server {
        let health = Arc::new(AtomicU16::new(200));
        let pages = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(Notify::new());
        let origin = t
            .origin()
            .script({
                let (health, pages, stop) = (health.clone(), pages.clone(), stop.clone());
                move |mut s| async move {
                    let mut answered = 0;
                    loop {
                        let req = tokio::select! {
                            biased;
                            r = s.rxreq() => r,
                            () = stop.notified() => {
                                if s.requests() == answered {
                                    return;
                                }
                                // Requests came after all: answer them too.
                                stop.notify_one();
                                continue;
                            }
                        };
                        answered += 1;
                        if req.url() == "/health" {
                            let status = health.load(Ordering::SeqCst);
                            s.txresp(status).body("health").send().await;
                        } else {
                            pages.fetch_add(1, Ordering::SeqCst);
                            s.txresp(200)
                                .hdr("Cache-Control", "no-store")
                                .body(name)
                                .send()
                                .await;
                        }
                    }
                }
            })
            .start()
            .await;
        Server {
            origin,
            health,
            pages,
            stop,
        }
    }

    fn pages(&self) -> usize {
        self.pages.load(Ordering::SeqCst)
    }

    /// After the proxy stopped (no probe in flight any more).
    async fn finish(self) {
        self.stop.notify_one();
        self.origin.finish().await;
    }
}

fn config(a: &Server, b: &Server, health_check: &str) -> String {
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{}", "http://{}"]
{health_check}
[[site]]
[[site.route]]
prefix = "/"
"#,
        a.origin.addr(),
        b.origin.addr()
    )
}

/// The server entries of upstream `app` in `/status`.
async fn servers(t: &Test, proxy: &hoard_testkit::TestProxy) -> Vec<serde_json::Value> {
    let st = crate::admin::status(t, proxy).await;
    st["upstreams"][0]["servers"].as_array().unwrap().clone()
}

// y17001: probes run with no client at all; a server failing 2 of its last
// 3 probes is out: no request goes to it (none fails either), `/status`
// says `down` with the probes passed, `/metrics` the same; once it passes
// again it is back in turn. Probes are not origin requests. The dashboard
// shows the probes passed.
#[tokio::test]
async fn y17001_probes_take_a_failing_server_out_and_back() {
    let t = Test::new("y17001");
    let (a, b) = (Server::start(&t, "a").await, Server::start(&t, "b").await);
    let hc = r#"health_check = { path = "/health", interval = "20ms", timeout = "2s", window = 3, threshold = 2 }"#;
    let cfg = config(&a, &b, hc);
    let proxy = t
        .proxy()
        .origin(&a.origin)
        .toml(&a.origin, &cfg)
        .admin()
        .start()
        .await;
    // No client yet: two rounds of two probes.
    proxy.wait_counter("health_probes", 4).await;
    proxy.expect_counter("health_probe_failures", 0);
    proxy.expect_counter("origin_requests", 0);
    let s = servers(&t, &proxy).await;
    assert_eq!(s[0]["state"], "up", "{s:?}");
    assert_eq!(s[0]["probes"]["window"], 3, "{s:?}");
    // `a` fails its probes: out after two.
    a.health.store(503, Ordering::SeqCst);
    proxy.wait_counter("health_probe_failures", 2).await;
    let s = servers(&t, &proxy).await;
    assert_eq!(s[0]["state"], "down", "{s:?}");
    assert_eq!(s[0]["probes"]["healthy"], false, "{s:?}");
    assert_eq!(s[1]["state"], "up", "{s:?}");
    let before = a.pages();
    for _ in 0..4 {
        t.client(&proxy)
            .get("/p")
            .send()
            .await
            .expect_status(200)
            .expect_body("b");
    }
    assert_eq!(a.pages(), before, "no request went to the server out");
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    let line = format!(
        "hoard_upstream_up{{upstream=\"app\",server=\"{}\"}} 0",
        a.origin.addr()
    );
    assert!(text.contains(&line), "{line} not in:\n{text}");
    assert!(text.contains("hoard_upstream_probes_passed{"), "{text}");
    super::o_metrics::promtool_accepts(&text);
    // `a` passes again: back after its window holds two passes (three
    // more rounds at the most).
    a.health.store(200, Ordering::SeqCst);
    let probes = proxy.counter("health_probes");
    proxy.wait_counter("health_probes", probes + 6).await;
    let s = servers(&t, &proxy).await;
    assert_eq!(s[0]["state"], "up", "{s:?}");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..4 {
        seen.insert(t.client(&proxy).get("/p").send().await.text());
    }
    assert!(seen.contains("a") && seen.contains("b"), "{seen:?}");
    // The dashboard (headless Chromium) shows each server's probes.
    let shown = crate::admin::settled_dashboard(&t, &proxy).await;
    assert_eq!(shown["upstreams.0.servers.0.probes.window"], "3");
    assert!(
        shown.contains_key("upstreams.0.servers.1.probes.passed"),
        "{shown:?}"
    );
    proxy.stop().await;
    a.finish().await;
    b.finish().await;
}

// y17002: run-time control through the admin API: `down` takes a server
// out (its health notwithstanding), `drain` too (shown as `drain`), `up`
// keeps it in service while its probes fail, `auto` gives it back to them;
// every server out answers 503 at once. Bad input: an unknown upstream or
// server (404, naming what exists) and an unknown state (400). A reload
// returns every server to `auto`.
#[tokio::test]
async fn y17002_servers_set_down_drain_up_and_auto() {
    let t = Test::new("y17002");
    let (a, b) = (Server::start(&t, "a").await, Server::start(&t, "b").await);
    let hc = r#"health_check = { path = "/health", interval = "20ms", window = 2, threshold = 2 }"#;
    let cfg = config(&a, &b, hc);
    let proxy = t
        .proxy()
        .origin(&a.origin)
        .toml(&a.origin, &cfg)
        .admin()
        .start()
        .await;
    let admin = t.client(proxy.admin());
    let set = |server: String, state: &str| {
        admin
            .post(&format!("/upstreams/app/servers/{server}"))
            .body(format!("{{\"state\": \"{state}\"}}"))
            .send()
    };
    let (aa, ba) = (a.origin.addr().to_string(), b.origin.addr().to_string());
    let r = set(aa.clone(), "down").await;
    r.expect_status(200);
    assert!(r.text().contains("\"state\":\"down\""), "{}", r.text());
    for _ in 0..3 {
        t.client(&proxy).get("/p").send().await.expect_body("b");
    }
    set(ba.clone(), "drain").await.expect_status(200);
    let s = servers(&t, &proxy).await;
    assert_eq!(
        (s[0]["admin"].as_str(), s[1]["state"].as_str()),
        (Some("down"), Some("drain")),
        "{s:?}"
    );
    // Nothing in service: 503 at once, no origin request.
    let sent = proxy.counter("origin_requests");
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_status(503)
        .expect_cache_status("detail=no-live-server");
    proxy.expect_counter("origin_requests", sent);
    // `up` overrides failing probes.
    a.health.store(500, Ordering::SeqCst);
    let failures = proxy.counter("health_probe_failures");
    proxy
        .wait_counter("health_probe_failures", failures + 2)
        .await;
    set(aa.clone(), "up").await.expect_status(200);
    t.client(&proxy).get("/p").send().await.expect_body("a");
    // `auto`: the probes decide again, and they say out.
    set(aa.clone(), "auto").await.expect_status(200);
    t.client(&proxy).get("/p").send().await.expect_status(503);
    // Bad input.
    let r = admin
        .post("/upstreams/nope/servers/1.2.3.4:80")
        .body(r#"{"state": "down"}"#)
        .send()
        .await;
    r.expect_status(404);
    assert!(r.text().contains("configured: app"), "{}", r.text());
    let r = admin
        .post("/upstreams/app/servers/1.2.3.4:80")
        .body(r#"{"state": "down"}"#)
        .send()
        .await;
    r.expect_status(404);
    assert!(r.text().contains(&aa), "{}", r.text());
    let r = set(aa.clone(), "sick").await;
    r.expect_status(400);
    assert!(r.text().contains("state"), "{}", r.text());
    // A reload: every server back to `auto` (b serves again).
    a.health.store(200, Ordering::SeqCst);
    proxy.reload_toml(&a.origin, &cfg).unwrap();
    let s = servers(&t, &proxy).await;
    assert_eq!(s[1]["admin"], "auto", "{s:?}");
    t.client(&proxy).get("/p").send().await.expect_status(200);
    proxy.stop().await;
    a.finish().await;
    b.finish().await;
}

// y17003: bad health checks are refused with the key and the line.
#[test]
fn y17003_bad_health_checks_are_refused() {
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n";
    let cases = [
        (
            "health_check = { path = \"health\" }",
            "upstream.app.health_check.path",
            "not a path",
        ),
        (
            "health_check = { path = \"/h\", window = 0 }",
            "upstream.app.health_check.window",
            "from 1 to 64",
        ),
        (
            "health_check = { path = \"/h\", window = 65 }",
            "upstream.app.health_check.window",
            "from 1 to 64",
        ),
        (
            "health_check = { path = \"/h\", window = 3, threshold = 4 }",
            "upstream.app.health_check.threshold",
            "from 1 to the window (3)",
        ),
        (
            "health_check = { path = \"/h\", interval = \"1ms\" }",
            "upstream.app.health_check.interval",
            "at least 10ms",
        ),
        (
            "health_check = { path = \"/h\", expect = 42 }",
            "upstream.app.health_check.expect",
            "not an HTTP status",
        ),
        (
            "health_check = { path = \"/h\", every = \"1s\" }",
            "health_check",
            "unknown field `every`",
        ),
    ];
    for (line, key, message) in cases {
        let text = format!("{base}{line}\n[[site]]\n[[site.route]]\nprefix = \"/\"\n");
        let e = hoard_config::Config::from_toml("bad.toml", &text).unwrap_err();
        assert!(e.key.starts_with(key), "{key}: {e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17004: routes chosen by the request as well as the path (`when`): a
// header with a value, a cookie, a method, a query parameter; all given
// conditions must hold, and the first route that takes the request wins
// (the path-only route after them takes the rest). Bad `when` tables are
// refused with the key and line.
#[tokio::test]
async fn y17004_routes_by_header_cookie_method_and_query() {
    let t = Test::new("y17004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/m", "/s", "/p", "/d?debug=1&x=2", "/plain"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let route = |when: &str, name: &str| {
        format!("[[site.route]]\nprefix = \"/\"\n{when}\nresponse_headers = {{ set = {{ \"x-route\" = \"{name}\" }} }}\n")
    };
    let cfg = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://{{origin}}\"]\n[[site]]\n{}{}{}{}{}{}",
        route(r#"when = { header = "X-Device: mobile", method = "GET" }"#, "mobile"),
        route(r#"when = { cookie = "session*" }"#, "session"),
        route(r#"when = { method = ["POST", "PUT"] }"#, "write"),
        route(r#"when = { query = "debug=1" }"#, "debug"),
        route(r#"when = { header = "X-Never" }"#, "never"),
        route("", "plain"),
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let c = t.client(&proxy);
    c.get("/m")
        .hdr("X-Device", "Mobile")
        .send()
        .await
        .expect_header("x-route", "mobile");
    c.get("/s")
        .hdr("Cookie", "a=1; session_id=7")
        .send()
        .await
        .expect_header("x-route", "session");
    c.post("/p")
        .body("x")
        .send()
        .await
        .expect_header("x-route", "write");
    c.get("/d?debug=1&x=2")
        .send()
        .await
        .expect_header("x-route", "debug");
    // X-Device with another value, a cookie of another name, a query
    // parameter with another value: none of them is taken.
    c.get("/plain")
        .hdr("X-Device", "desktop")
        .hdr("Cookie", "other=1")
        .send()
        .await
        .expect_header("x-route", "plain");
    origin.finish().await;
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    for (when, key, message) in [
        ("when = {}", "site[0].route[0].when", "no condition"),
        (
            "when = { method = \"G T\" }",
            "site[0].route[0].when.method",
            "not a method",
        ),
        (
            "when = { header = \"Bad Name: x\" }",
            "site[0].route[0].when.header",
            "not a header name",
        ),
        (
            "when = { client = [\"10.0.0.0/99\"] }",
            "site[0].route[0].when.client",
            "",
        ),
        // serde's own message: the key as written, and the line.
        ("when = { path = \"/x\" }", "when", "unknown field `path`"),
    ] {
        let e =
            hoard_config::Config::from_toml("bad.toml", &format!("{base}{when}\n")).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17005: normalisation the origin sees: tracking parameters removed and
// the rest sorted (`rewrite_query`), Accept-Language mapped to one of
// three languages (`normalise`, RFC 4647 lookup by quality). Six
// language preferences and two orders of the query with different
// tracking tags make three origin fetches, each with the clean query and
// the normalised language. Bad tables are refused with the key and line.
#[tokio::test]
async fn y17005_the_origin_sees_the_normalised_request() {
    let t = Test::new("y17005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for lang in ["en", "de", "fr"] {
                s.rxreq()
                    .await
                    .expect_url("/page?a=1&b=2")
                    .expect_header("accept-language", lang);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Vary", "Accept-Language")
                    .body(format!("page-{lang}"))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
rewrite_query = { sort = true, remove = ["utm_*", "gclid"] }
normalise = { "accept-language" = ["en", "de", "fr"] }
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    let get = |q: &'static str, lang: &'static str| {
        let c = t.client(&proxy);
        async move { c.get(q).hdr("Accept-Language", lang).send().await }
    };
    get("/page?b=2&a=1&utm_source=news&gclid=XYZ", "en-US")
        .await
        .expect_body("page-en");
    proxy.wait_counter("objects_stored", 1).await;
    for (q, lang, body) in [
        ("/page?a=1&b=2&utm_medium=x", "en-GB,en;q=0.9", "page-en"),
        ("/page?b=2&a=1", "de-DE", "page-de"),
        ("/page?a=1&b=2", "de-AT;q=0.8, xx", "page-de"),
        ("/page?a=1&gclid=1&b=2", "fr-CA", "page-fr"),
        ("/page?a=1&b=2", "fr", "page-fr"),
        ("/page?a=1&b=2", "es", "page-en"),
        ("/page?a=1&b=2", "pt-BR, de;q=0.5", "page-de"),
    ] {
        let stored = proxy.counter("objects_stored");
        let r = get(q, lang).await;
        r.expect_body(body);
        if r.cache_status().is_some_and(|s| s.contains("fwd=")) {
            proxy.wait_counter("objects_stored", stored + 1).await;
        }
    }
    proxy.expect_counter("origin_requests", 3);
    origin.finish().await;
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    for (line, key, message) in [
        (
            "rewrite_query = {}",
            "site[0].route[0].rewrite_query",
            "says nothing to do",
        ),
        (
            "rewrite_query = { remove = [\"a=b\"] }",
            "site[0].route[0].rewrite_query.remove",
            "not a parameter name",
        ),
        (
            "normalise = { \"accept-language\" = [] }",
            "site[0].route[0].normalise.accept-language",
            "lists no value",
        ),
        (
            "normalise = { \"bad header\" = [\"x\"] }",
            "site[0].route[0].normalise.bad header",
            "not a header name",
        ),
    ] {
        let e =
            hoard_config::Config::from_toml("bad.toml", &format!("{base}{line}\n")).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17006: `request_cookie = "pass"` on a site: a request with a Cookie goes
// to the origin (Alice's page is never Bob's), one without is cached as
// before; a route that strips cookies (`request_headers`) caches anyway,
// since the rule looks after the route's edits. A site's bypass rules
// reach its routes. Bad values are refused with the key and line.
#[tokio::test]
async fn y17006_requests_with_cookies_pass() {
    let t = Test::new("y17006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, who) in [
                ("/profile", "alice"),
                ("/profile", "bob"),
                ("/profile", "anonymous"),
                ("/static/a.css", "css"),
                ("/x?preview=1", "preview"),
                ("/x?preview=1", "preview"),
            ] {
                let r = s.rxreq().await;
                r.expect_url(path);
                if path == "/static/a.css" {
                    r.expect_no_header("cookie");
                }
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(who)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
request_cookie = "pass"
[[site.bypass]]
name = "preview"
query = "preview"
[[site.route]]
prefix = "/static/"
request_headers = { remove = ["Cookie"] }
[[site.route]]
prefix = "/"
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    let c = t.client(&proxy);
    c.get("/profile")
        .hdr("Cookie", "sid=alice")
        .send()
        .await
        .expect_body("alice")
        .expect_cache_status("detail=request-cookie");
    c.get("/profile")
        .hdr("Cookie", "sid=bob")
        .send()
        .await
        .expect_body("bob");
    c.get("/profile").send().await.expect_body("anonymous");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/profile")
        .send()
        .await
        .expect_body("anonymous")
        .expect_cache_status("hit");
    c.get("/static/a.css")
        .hdr("Cookie", "sid=alice")
        .send()
        .await
        .expect_body("css");
    proxy.wait_counter("objects_stored", 2).await;
    c.get("/static/a.css")
        .hdr("Cookie", "sid=bob")
        .send()
        .await
        .expect_body("css")
        .expect_cache_status("hit");
    for _ in 0..2 {
        c.get("/x?preview=1")
            .send()
            .await
            .expect_body("preview")
            .expect_cache_status("detail=bypass-rule:preview");
    }
    origin.finish().await;
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n";
    for (text, key, message) in [
        (
            "request_cookie = \"never\"\n[[site.route]]\nprefix = \"/\"\n",
            "site[0].request_cookie",
            "expected \"pass\"",
        ),
        (
            "[[site.route]]\nprefix = \"/\"\nrequest_cookie = \"yes\"\n",
            "site[0].route[0].request_cookie",
            "expected \"pass\"",
        ),
        (
            "[[site.bypass]]\nname = \"x\"\n[[site.route]]\nprefix = \"/\"\n",
            "site[0].bypass[0]",
            "has no condition",
        ),
    ] {
        let e = hoard_config::Config::from_toml("bad.toml", &format!("{base}{text}")).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17007: decisions on what the origin sent (`[[site.route.store]]`, first
// match wins): a rule on a header passes a response its Cache-Control
// would store (and the key passes after it); a rule on the status stores
// a 503 for 10 s; a rule on the content type replaces the origin's 5 s
// with an hour. Bad rules are refused with the key and line.
#[tokio::test]
async fn y17007_store_rules_decide_on_the_response() {
    let t = Test::new("y17007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/flagged");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("X-No-Store", "1")
                .body("flagged")
                .send()
                .await;
            s.rxreq().await.expect_url("/flagged");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("again")
                .send()
                .await;
            s.rxreq().await.expect_url("/down");
            s.txresp(503).body("down").send().await;
            s.rxreq().await.expect_url("/i.png");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=5")
                .hdr("Content-Type", "image/png")
                .body("png")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
[[site.route.store]]
name = "flagged"
header = "X-No-Store"
action = "pass"
[[site.route.store]]
name = "errors-briefly"
status = ["5xx"]
ttl = "10s"
[[site.route.store]]
name = "images"
content_type = "image/*"
ttl = "1h"
grace = "10m"
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    let c = t.client(&proxy);
    c.get("/flagged")
        .send()
        .await
        .expect_body("flagged")
        .expect_cache_status("detail=store-rule");
    c.get("/flagged")
        .send()
        .await
        .expect_body("again")
        .expect_cache_status("detail=hit-for-pass");
    c.get("/down").send().await.expect_status(503);
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/down")
        .send()
        .await
        .expect_status(503)
        .expect_body("down")
        .expect_cache_status("hit; ttl=10");
    c.get("/i.png").send().await.expect_body("png");
    proxy.wait_counter("objects_stored", 2).await;
    t.clock.advance(super::secs(60));
    c.get("/i.png")
        .send()
        .await
        .expect_body("png")
        .expect_cache_status("hit; ttl=3540");
    origin.finish().await;
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n[[site.route.store]]\n";
    for (rule, key, message) in [
        (
            "status = [\"6xx\"]\nttl = \"1s\"",
            "site[0].route[0].store[0].status",
            "a status (404) or a class",
        ),
        (
            "action = \"pass\"\nttl = \"1s\"",
            "site[0].route[0].store[0].action",
            "sets no ttl",
        ),
        (
            "action = \"keep\"",
            "site[0].route[0].store[0].action",
            "expected \"pass\" or \"store\"",
        ),
        (
            "header = \"X-A\"",
            "site[0].route[0].store[0]",
            "decides nothing",
        ),
        (
            "header = \"Bad Name\"\naction = \"pass\"",
            "site[0].route[0].store[0].header",
            "not a header name",
        ),
    ] {
        let e =
            hoard_config::Config::from_toml("bad.toml", &format!("{base}{rule}\n")).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17008: delivery variables in `response_headers` (a VCL's X-Cache and
// obj.hits): `$cache_status` MISS, HIT, EXPIRED, PASS; `$cache_hits` counts
// the stored object's hits; `$upstream_name`, `$age`. A fixed answer
// carries its own fields (a 503 with Retry-After). A delivery variable in
// `request_headers` is refused with the key and line.
#[tokio::test]
async fn y17008_x_cache_and_hits_on_delivery() {
    let t = Test::new("y17008");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for body in ["v1", "v2", "nocache"] {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=10")
                    .body(body)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
response_headers = { set = { "X-Cache" = "$cache_status", "X-Cache-Hits" = "$cache_hits", "X-Upstream" = "$upstream_name", "X-Age" = "[$age]" } }
[[site.route]]
prefix = "/maintenance"
respond = { status = 503, body = "back soon", headers = { "Retry-After" = "120" } }
[[site.route]]
prefix = "/live"
cache = false
[[site.route]]
prefix = "/"
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    let c = t.client(&proxy);
    c.get("/a")
        .send()
        .await
        .expect_body("v1")
        .expect_header("x-cache", "MISS")
        .expect_header("x-cache-hits", "0")
        .expect_header("x-upstream", "app")
        .expect_header("x-age", "[]");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/a")
        .send()
        .await
        .expect_header("x-cache", "HIT")
        .expect_header("x-cache-hits", "1");
    t.clock.advance(super::secs(4));
    c.get("/a")
        .send()
        .await
        .expect_header("x-cache", "HIT")
        .expect_header("x-cache-hits", "2")
        .expect_header("x-age", "[4]");
    t.clock.advance(super::secs(7));
    c.get("/a")
        .send()
        .await
        .expect_body("v2")
        .expect_header("x-cache", "EXPIRED");
    c.get("/live/x")
        .send()
        .await
        .expect_body("nocache")
        .expect_header("x-cache", "PASS");
    c.get("/maintenance")
        .send()
        .await
        .expect_status(503)
        .expect_body("back soon")
        .expect_header("retry-after", "120")
        .expect_header("x-cache", "NONE");
    origin.finish().await;
    let text = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nrequest_headers = { set = { \"X-C\" = \"$cache_status\" } }\n";
    let e = hoard_config::Config::from_toml("bad.toml", text).unwrap_err();
    assert_eq!(e.key, "site[0].route[0].request_headers.set.X-C", "{e}");
    assert!(e.line.is_some(), "{e}");
    assert!(
        e.to_string().contains("only when a response is delivered"),
        "{e}"
    );
}

// y17009: a custom access log line (`format = "custom"`, nginx's
// log_format): the variables a log_format uses, with `-` for what is
// absent and nginx's escaping; bad templates are refused with the key and
// line.
#[tokio::test]
async fn y17009_a_custom_log_line() {
    let t = Test::new("y17009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a?x=1");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .body("aa")
                .send()
                .await;
        })
        .start()
        .await;
    let log = t.dir().join("access.log");
    let cfg = format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[access_log]
target = {:?}
format = "custom"
template = "$remote_addr $remote_user \"$request\" $status $body_bytes_sent $upstream_cache_status uri=$uri args=$args host=$host ua=\"$http_user_agent\" ref=\"$http_referer\" tries=$upstream_tries $$"
"#,
        log.display().to_string()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let c = t.client(&proxy);
    c.get("/a?x=1")
        .hdr("User-Agent", "say \"hi\"")
        .send()
        .await
        .expect_body("aa");
    proxy.wait_counter("objects_stored", 1).await;
    c.get("/a?x=1").send().await.expect_body("aa");
    proxy.wait_counter("access_log_lines", 2).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            r#"127.0.0.1 - "GET /a?x=1 HTTP/1.1" 200 2 MISS uri=/a args=x=1 host=localhost ua="say \x22hi\x22" ref="-" tries=1 $"#,
            r#"127.0.0.1 - "GET /a?x=1 HTTP/1.1" 200 2 HIT uri=/a args=x=1 host=localhost ua="-" ref="-" tries=0 $"#,
        ]
    );
    origin.finish().await;
    let base = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[access_log]\ntarget = \"stdout\"\n";
    for (text, message) in [
        ("format = \"custom\"\n", "needs a template"),
        (
            "format = \"custom\"\ntemplate = \"$status $nope\"\n",
            "unknown variable `$nope`",
        ),
        (
            "format = \"combined\"\ntemplate = \"$status\"\n",
            "for format = \"custom\"",
        ),
    ] {
        let e = hoard_config::Config::from_toml("bad.toml", &format!("{base}{text}")).unwrap_err();
        assert_eq!(e.key, "access_log.template", "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{message}: {e}");
    }
}

// y17010: `GET /purges` lists the recent purges, newest first (Varnish's
// ban.list): kind, pattern, time, who asked, soft or not and objects
// purged; a regex purge shows as a pending ban with no count until its
// sweep is done, then with it.
#[tokio::test]
async fn y17010_the_list_of_purges() {
    let t = Test::new("y17010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, tag) in [("/a", "x"), ("/img/b.png", "y")] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Surrogate-Key", tag)
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let c = t.client(&proxy);
    c.get("/a").send().await.expect_body("/a");
    c.get("/img/b.png").send().await.expect_body("/img/b.png");
    proxy.wait_counter("objects_stored", 2).await;
    let admin = t.client(proxy.admin());
    let purge = |body: &'static str| admin.post("/purge").body(body).send();
    purge(r#"{"tag": "x"}"#).await.expect_status(200);
    purge(r#"{"prefix": "http://localhost/nothing/", "soft": true}"#)
        .await
        .expect_status(200);
    proxy.store().bans().hold_sweeps(true);
    purge(r#"{"regex": "^/img/"}"#).await.expect_status(200);
    let list = |r: hoard_testkit::Response| -> serde_json::Value {
        r.expect_status(200);
        serde_json::from_slice(&r.body).unwrap()
    };
    let v = list(admin.get("/purges").send().await);
    let p = v["purges"].as_array().unwrap();
    assert_eq!(p.len(), 3, "{v}");
    assert_eq!(
        (p[0]["kind"].as_str(), p[0]["pattern"].as_str()),
        (Some("regex"), Some("^/img/")),
        "{v}"
    );
    assert!(p[0]["purged"].is_null(), "{v}");
    assert_eq!(
        (
            p[1]["kind"].as_str(),
            p[1]["soft"].as_bool(),
            p[1]["purged"].as_u64()
        ),
        (Some("prefix"), Some(true), Some(0)),
        "{v}"
    );
    assert_eq!(
        (
            p[2]["kind"].as_str(),
            p[2]["pattern"].as_str(),
            p[2]["purged"].as_u64()
        ),
        (Some("tag"), Some("x"), Some(1)),
        "{v}"
    );
    assert!(p[2]["source"].as_str().unwrap().starts_with("admin"), "{v}");
    assert_eq!(v["bans"][0]["pattern"], "^/img/", "{v}");
    proxy.store().bans().hold_sweeps(false);
    proxy.wait_counter("bans_swept", 1).await;
    let v = list(admin.get("/purges").send().await);
    assert_eq!(v["purges"][0]["purged"], 1, "{v}");
    assert!(v["bans"].as_array().unwrap().is_empty(), "{v}");
    origin.finish().await;
}

// y17011: `GET /trace` streams requests as they happen, filtered by URL
// (and outcome, status): a miss with why it went forward and that it was
// stored, then the hit; a request outside the filter is not shown; the
// stream ends at its limit. A bad filter is a 400 naming it.
#[tokio::test]
async fn y17011_requests_traced_as_they_happen() {
    let t = Test::new("y17011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/other", "/t/a"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let watch = t
        .client(proxy.admin())
        .get("/trace?url=/t/&limit=2")
        .spawn();
    proxy.wait_counter("trace_watchers", 1).await;
    let c = t.client(&proxy);
    c.get("/other").send().await.expect_body("/other");
    c.get("/t/a").send().await.expect_body("/t/a");
    proxy.wait_counter("objects_stored", 2).await;
    c.get("/t/a").send().await.expect_cache_status("hit");
    let r = watch.await.unwrap();
    r.expect_status(200)
        .expect_header("content-type", "application/x-ndjson");
    let lines: Vec<serde_json::Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (lines[0]["url"].as_str(), lines[0]["outcome"].as_str()),
        (Some("/t/a"), Some("miss")),
        "{lines:?}"
    );
    let cs = lines[0]["cache_status"].as_str().unwrap();
    assert!(cs.contains("fwd=uri-miss") && cs.contains("stored"), "{cs}");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[1]["outcome"], "hit", "{lines:?}");
    let r = t
        .client(proxy.admin())
        .get("/trace?colour=red")
        .send()
        .await;
    r.expect_status(400);
    assert!(r.text().contains("colour"), "{}", r.text());
    origin.finish().await;
}
