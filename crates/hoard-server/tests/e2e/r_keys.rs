//! r06: route keys an nginx operator expects: `max_body_size` per site and
//! route (413 before the origin), `respond` (a fixed answer without an
//! upstream) and `client_no_cache` (`revalidate` or `ignore`).

use hoard_testkit::Test;

/// A configuration with the origin as upstream `app` and one site whose
/// keys are `site`, followed by `routes` (each starting `[[site.route]]`).
fn site(server: &str, site: &str, routes: &str) -> String {
    format!(
        r#"
[server]
{server}
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
{site}
{routes}
"#
    )
}

// r06001: a declared body over a route's limit gets 413 and the origin
// sees no connection at all; the server's larger limit still holds on the
// other route, whose request goes through.
#[tokio::test]
async fn r06001_declared_body_over_route_limit_never_reaches_origin() {
    let t = Test::new("r06001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/other")
                .expect_body(vec![b'b'; 2000]);
            s.txresp(200).body("taken").send().await;
        })
        .start()
        .await;
    let cfg = site(
        "",
        "",
        "[[site.route]]\nprefix = \"/upload\"\nmax_body_size = \"1KiB\"\n[[site.route]]\nprefix = \"/\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let big = vec![b'b'; 2000];
    t.client(&proxy)
        .post("/upload")
        .body(&big)
        .send()
        .await
        .expect_status(413)
        .expect_cache_status("detail=body-too-large");
    assert_eq!(origin.connections(), 0, "413 before any connection");
    proxy.expect_counter("client_errors", 1);
    t.client(&proxy)
        .post("/other")
        .body(&big)
        .send()
        .await
        .expect_status(200)
        .expect_body("taken");
    origin.finish().await;
}

// r06002: a chunked body that grows past the route's limit is cut with
// 413; the origin request started is aborted (no complete request).
#[tokio::test]
async fn r06002_chunked_body_over_route_limit_is_cut() {
    let t = Test::new("r06002");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let cfg = site(
        "",
        "",
        "[[site.route]]\nprefix = \"/\"\nmax_body_size = \"1000\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let mut c = t.client(&proxy).connect().await;
    let chunk = "x".repeat(600);
    c.send_raw(format!(
        "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
         258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
    ))
    .await;
    c.read_response()
        .await
        .expect_status(413)
        .expect_header("connection", "close");
    proxy.expect_counter("client_errors", 1);
    assert_eq!(
        origin.requests(),
        0,
        "no complete request reached the origin"
    );
    origin.finish().await;
}

// r06003: route over site over server: the site raises a small server
// limit, a route raises it further; each is enforced where it applies.
#[tokio::test]
async fn r06003_site_and_route_limits_override_server() {
    let t = Test::new("r06003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (url, len) in [("/page", 3000), ("/upload/a", 50_000)] {
                s.rxreq().await.expect_url(url).expect_body(vec![b'b'; len]);
                s.txresp(200).body("taken").send().await;
            }
        })
        .start()
        .await;
    let cfg = site(
        "max_body_size = \"1000\"",
        "max_body_size = \"4000\"",
        "[[site.route]]\nprefix = \"/upload/\"\nmax_body_size = \"1MiB\"\n[[site.route]]\nprefix = \"/\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let post = |path: &'static str, len: usize| t.client(&proxy).post(path).body(vec![b'b'; len]);
    post("/page", 3000).send().await.expect_status(200);
    post("/page", 5000).send().await.expect_status(413);
    post("/upload/a", 50_000).send().await.expect_status(200);
    post("/upload/b", 2 << 20).send().await.expect_status(413);
    // The two taken ones may share a connection; the refused ones open none.
    assert!(origin.connections() <= 2, "{}", origin.connections());
    origin.finish().await;
}

// r06004: HTTP/2: a declared body over the route's limit gets 413 with
// no origin connection, and a streamed one (no content-length) is cut.
#[tokio::test]
async fn r06004_http2_route_limit() {
    use http_body_util::{BodyExt, Full, StreamBody};

    let t = Test::new("r06004");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let cfg = site(
        "",
        "",
        "[[site.route]]\nprefix = \"/\"\nmax_body_size = \"1000\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let mut send = super::h_http2::h2c(&proxy).await;
    let req = http::Request::post("http://h2.example/up")
        .header("content-length", "2000")
        .body(Full::new(bytes::Bytes::from(vec![b'b'; 2000])).boxed())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(origin.connections(), 0);
    let frames = (0..2).map(|_| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from(vec![
            b'c';
            600
        ])))
    });
    let body = StreamBody::new(futures_util::stream::iter(frames)).boxed();
    let req = http::Request::post("http://h2.example/up")
        .body(body)
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 413);
    proxy.expect_counter("client_errors", 2);
    assert_eq!(
        origin.requests(),
        0,
        "no complete request reached the origin"
    );
    origin.finish().await;
}

// r06005: `respond` with a body answers a health check without any
// upstream in the configuration; the answer is never stored.
#[tokio::test]
async fn r06005_respond_body_without_upstream() {
    let t = Test::new("r06005");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let cfg = r#"
[[site]]
[[site.route]]
prefix = "/healthz"
respond = { status = 200, body = "ok" }
[[site.route]]
prefix = "/robots.txt"
respond = { status = 200, body = "User-agent: *\nDisallow: /private/\n" }
"#;
    let proxy = t.proxy().toml(&origin, cfg).start().await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/healthz")
            .send()
            .await
            .expect_status(200)
            .expect_body("ok")
            .expect_header("content-type", "text/plain; charset=utf-8")
            .expect_header("content-length", "2")
            .expect_cache_status("detail=respond");
    }
    t.client(&proxy)
        .get("/robots.txt")
        .send()
        .await
        .expect_status(200)
        .expect_body("User-agent: *\nDisallow: /private/\n");
    proxy.expect_counter("edge_responds", 3);
    proxy.expect_counter("objects_stored", 0);
    assert_eq!(origin.connections(), 0);
    origin.finish().await;
}

// r06006: `respond` with `body_file` (a maintenance page, typed from its
// extension, with a Retry-After); HEAD gets the fields and no body; a
// POST is answered the same, its body never sent on.
#[tokio::test]
async fn r06006_respond_body_file_and_head() {
    let t = Test::new("r06006");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let page = t.dir().join("maintenance.html");
    std::fs::write(&page, "<h1>back soon</h1>\n").unwrap();
    let cfg = site(
        "",
        "",
        &format!(
            "[[site.route]]\nprefix = \"/\"\nrespond = {{ status = 503, body_file = {:?}, headers = {{ \"Retry-After\" = \"120\" }} }}\n",
            page.display().to_string()
        ),
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/any/page")
        .send()
        .await
        .expect_status(503)
        .expect_body("<h1>back soon</h1>\n")
        .expect_header("content-type", "text/html; charset=utf-8")
        .expect_header("retry-after", "120");
    t.client(&proxy)
        .head("/any/page")
        .no_response_body()
        .send()
        .await
        .expect_status(503)
        .expect_header("content-length", "19")
        .expect_body("");
    t.client(&proxy)
        .post("/form")
        .body("a=1")
        .send()
        .await
        .expect_status(503);
    proxy.expect_counter("edge_responds", 3);
    assert_eq!(origin.connections(), 0);
    origin.finish().await;
}

// r06007: the route's response_headers apply to its fixed answer.
#[tokio::test]
async fn r06007_respond_gets_response_headers() {
    let t = Test::new("r06007");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let cfg = site(
        "",
        "",
        "[[site.route]]\nprefix = \"/\"\nrespond = { status = 200, body = \"ok\", headers = { \"X-From\" = \"respond\" } }\n\
         response_headers = { set = { \"Cache-Control\" = \"no-store\", \"X-Host\" = \"$host\" }, remove = [\"X-From\"] }\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/")
        .hdr("Host", "example.com")
        .send()
        .await
        .expect_status(200)
        .expect_body("ok")
        .expect_header("cache-control", "no-store")
        .expect_header("x-host", "example.com")
        .expect_no_header("x-from");
    origin.finish().await;
}

// r06008: `respond` answers after allow/deny and basic_auth: a client the
// allow list refuses gets 403, not the page.
#[tokio::test]
async fn r06008_respond_behind_allow_and_auth() {
    let t = Test::new("r06008");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let users = t.dir().join("users");
    // "ops:secret", SHA-1 as htpasswd -s writes it.
    std::fs::write(&users, "ops:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n").unwrap();
    let cfg = site(
        "",
        "",
        &format!(
            "[[site.route]]\nprefix = \"/status\"\nallow = [\"10.0.0.0/8\"]\nrespond = {{ status = 200, body = \"internal\" }}\n\
             [[site.route]]\nprefix = \"/ops\"\nbasic_auth = {{ users_file = {:?} }}\nrespond = {{ status = 200, body = \"ops\" }}\n\
             [[site.route]]\nprefix = \"/\"\nallow = [\"127.0.0.1\"]\nrespond = {{ status = 200, body = \"open\" }}\n",
            users.display().to_string()
        ),
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/status")
        .send()
        .await
        .expect_status(403);
    t.client(&proxy).get("/ops").send().await.expect_status(401);
    t.client(&proxy)
        .get("/ops")
        .hdr("Authorization", "Basic b3BzOnNlY3JldA==")
        .send()
        .await
        .expect_status(200)
        .expect_body("ops");
    t.client(&proxy)
        .get("/")
        .send()
        .await
        .expect_status(200)
        .expect_body("open");
    proxy.expect_counter("edge_access_denied", 1);
    proxy.expect_counter("edge_responds", 2);
    origin.finish().await;
}

/// An origin that answers one fill with `max-age=600` and an ETag.
fn one_fill(t: &Test) -> hoard_testkit::OriginBuilder {
    t.origin().script(|mut s| async move {
        s.rxreq().await.expect_url("/obj");
        s.txresp_fresh_etag(600, "\"v1\"", "stored").await;
    })
}

// r06009: `client_no_cache = "ignore"`: 20 sequential and 20 concurrent
// requests carrying no-cache, Pragma: no-cache or max-age=0 are served
// from the cache: one origin fetch in all.
#[tokio::test]
async fn r06009_client_no_cache_ignore() {
    let t = Test::new("r06009");
    let origin = one_fill(&t).start().await;
    let cfg = site(
        "",
        "",
        "[[site.route]]\nprefix = \"/\"\nclient_no_cache = \"ignore\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/obj")
        .send()
        .await
        .expect_body("stored");
    proxy.wait_counter("objects_stored", 1).await;
    let asks = [
        ("Cache-Control", "no-cache"),
        ("Pragma", "no-cache"),
        ("Cache-Control", "max-age=0"),
        ("Cache-Control", "no-cache, max-age=0, min-fresh=600"),
    ];
    for i in 0..20 {
        let (name, value) = asks[i % asks.len()];
        t.client(&proxy)
            .get("/obj")
            .hdr(name, value)
            .send()
            .await
            .expect_body("stored")
            .expect_cache_status("hit");
    }
    let concurrent: Vec<_> = (0..20)
        .map(|i| {
            let (name, value) = asks[i % asks.len()];
            t.client(&proxy).get("/obj").hdr(name, value).spawn()
        })
        .collect();
    for c in concurrent {
        c.await
            .unwrap()
            .expect_body("stored")
            .expect_cache_status("hit");
    }
    proxy.expect_counter("cache_hit", 40);
    assert_eq!(origin.requests(), 1, "one origin fetch in all");
    origin.finish().await;
}

// r06010: the default, `revalidate` (RFC 9111 §5.2.1.4): each of 20
// sequential requests with no-cache (or Pragma: no-cache) makes a
// conditional request with the stored ETag; each 304 refreshes and the
// stored body is served.
#[tokio::test]
async fn r06010_client_no_cache_revalidate_is_conditional() {
    let t = Test::new("r06010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_no_header("if-none-match");
            s.txresp_fresh_etag(600, "\"v1\"", "stored").await;
            for _ in 0..20 {
                s.rxreq().await.expect_header("if-none-match", "\"v1\"");
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"v1\"")
                    .no_body()
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/obj")
        .send()
        .await
        .expect_body("stored");
    proxy.wait_counter("objects_stored", 1).await;
    for i in 0..20 {
        let (name, value) = [("Cache-Control", "no-cache"), ("Pragma", "no-cache")][i % 2];
        t.client(&proxy)
            .get("/obj")
            .hdr(name, value)
            .send()
            .await
            .expect_status(200)
            .expect_body("stored")
            .expect_cache_status("fwd=request; fwd-status=304");
    }
    proxy.expect_counter("cache_revalidate", 20);
    assert_eq!(
        origin.requests(),
        21,
        "one fill, then one conditional request each"
    );
    origin.finish().await;
}

// r06011: `revalidate` without a validator stored: a full fetch, whose
// answer replaces the stored one.
#[tokio::test]
async fn r06011_client_no_cache_without_validator_fetches() {
    let t = Test::new("r06011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for body in ["one", "two"] {
                let r = s.rxreq().await;
                r.expect_no_header("if-none-match")
                    .expect_no_header("if-modified-since");
                s.txresp_fresh(600, body).await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/obj").send().await.expect_body("one");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/obj")
        .hdr("Cache-Control", "no-cache")
        .send()
        .await
        .expect_body("two");
    proxy.wait_counter("objects_stored", 2).await;
    t.client(&proxy)
        .get("/obj")
        .send()
        .await
        .expect_body("two")
        .expect_cache_status("hit");
    origin.finish().await;
}

// r06012: `revalidate`, 20 concurrent requests with no-cache or
// max-age=0: they join one conditional request; the 304 it gets is the
// validation each asked for.
#[tokio::test]
async fn r06012_concurrent_no_cache_share_one_revalidation() {
    let t = Test::new("r06012");
    let held = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let held = held.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp_fresh_etag(600, "\"v1\"", "stored").await;
                s.rxreq().await.expect_header("if-none-match", "\"v1\"");
                held.sync().await;
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"v1\"")
                    .no_body()
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/obj")
        .send()
        .await
        .expect_body("stored");
    proxy.wait_counter("objects_stored", 1).await;
    // One second old: max-age=0 asks for a validation too.
    t.clock.advance(super::secs(1));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let asks = ["no-cache", "max-age=0"];
            t.client(&proxy)
                .get("/obj")
                .hdr("Cache-Control", asks[i % 2])
                .spawn()
        })
        .collect();
    proxy.wait_counter("fill_waiters_total", 19).await;
    held.sync().await;
    for c in clients {
        c.await.unwrap().expect_status(200).expect_body("stored");
    }
    assert_eq!(origin.requests(), 2, "one fill, one shared revalidation");
    origin.finish().await;
}

// r06013: a route that raises a small server limit lets a chunked body
// past the server's limit through whole; the server's limit still cuts
// one on another route.
#[tokio::test]
async fn r06013_chunked_body_under_raised_route_limit() {
    let t = Test::new("r06013");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_url("/upload/a").expect_body("x".repeat(1200));
            s.txresp(201).body("taken").send().await;
        })
        .start()
        .await;
    let cfg = site(
        "max_body_size = \"1000\"",
        "",
        "[[site.route]]\nprefix = \"/upload/\"\nmax_body_size = \"1MiB\"\n[[site.route]]\nprefix = \"/\"\n",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let chunk = "x".repeat(600);
    for (path, status) in [("/upload/a", 201), ("/page", 413)] {
        let mut c = t.client(&proxy).connect().await;
        c.send_raw(format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n"
        ))
        .await;
        c.read_response().await.expect_status(status);
    }
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}
