//! q: what an nginx operator configures around the cache: header edits,
//! redirects, allow/deny, basic auth, rate and connection limits, error
//! pages, and each key's bad input.

use hoard_testkit::Test;

use super::secs;

/// An origin that answers `answers` requests with `max-age=600`, a body
/// naming the request's number and URL, and an `X-Powered-By`.
fn counting(t: &Test, answers: usize) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for n in 1..=answers {
            let r = s.rxreq().await;
            let url = r.url().to_string();
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("X-Powered-By", "PHP/5.4")
                .body(format!("{n} {url}"))
                .send()
                .await;
        }
    })
}

/// A configuration whose one route carries `route`; `{origin}` is the origin.
fn one_route(server: &str, route: &str) -> String {
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
{server}
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
{route}
"#
    )
}

// q00001: response_headers on a miss, a hit and hoard's own 502 (nginx
// `add_header ... always`, `proxy_hide_header`); request_headers towards the
// origin, a forwarding field among them.
#[tokio::test]
async fn q00001_header_edits() {
    let t = Test::new("q00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_header("x-real-ip", "127.0.0.1")
                .expect_header("x-site", "example.com")
                .expect_no_header("cookie");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("X-Powered-By", "PHP/5.4")
                .hdr("Server-Timing", "db;dur=53")
                .body("page")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = r#"
[upstream.app]
servers = ["http://{origin}"]
[upstream.gone]
servers = ["http://127.0.0.1:1"]
[[site]]
[[site.route]]
prefix = "/down"
upstream = "gone"
response_headers = { set = { "Strict-Transport-Security" = "max-age=63072000" } }
[[site.route]]
prefix = "/"
upstream = "app"
response_headers = { set = { "Strict-Transport-Security" = "max-age=63072000", "X-Served-For" = "$host$request_uri" }, add = { "Vary" = "Origin" }, remove = ["X-Powered-By", "Server-Timing"] }
request_headers = { set = { "X-Real-IP" = "$remote_addr", "X-Site" = "$host" }, remove = ["Cookie"] }
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    for status in ["fwd=uri-miss", "hit"] {
        let r = t
            .client(&proxy)
            .get("/a?x=1")
            .hdr("Host", "example.com:8080")
            .hdr("Cookie", "session=1")
            .send()
            .await;
        r.expect_status(200)
            .expect_body("page")
            .expect_cache_status(status)
            .expect_header("strict-transport-security", "max-age=63072000")
            .expect_header("x-served-for", "example.com/a?x=1")
            .expect_header("vary", "Origin")
            .expect_no_header("x-powered-by")
            .expect_no_header("server-timing");
    }
    // The edits apply to the stored fields: the hit took the full path,
    // not the fields as encoded once.
    proxy.expect_counter("cache_hit", 1);
    proxy.expect_counter("cache_hit_fields_encoded", 0);
    // hoard's own answer carries them too.
    t.client(&proxy)
        .get("/down")
        .send()
        .await
        .expect_status(502)
        .expect_header("strict-transport-security", "max-age=63072000");
    origin.finish().await;
}

// q00002: redirects: a whole site to https with the query kept, a regex
// route with capture groups; the origin is never asked.
#[tokio::test]
async fn q00002_redirects() {
    let t = Test::new("q00002");
    let origin = t.origin().start().await; // any request fails the case
    let cfg = r#"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
hosts = ["old.example.com"]
[[site.route]]
regex = "^/blog/([0-9]+)/(.*)$"
redirect = { to = "https://new.example.com/posts/$2?year=$1", status = 301 }
[[site.route]]
prefix = "/"
redirect = { to = "https://new.example.com/", status = 302 }
[[site]]
[[site.route]]
prefix = "/"
redirect = { to = "https://$host$request_uri", status = 308 }
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    t.client(&proxy)
        .get("/a/b?c=1&d=2")
        .hdr("Host", "www.example.com:80")
        .send()
        .await
        .expect_status(308)
        .expect_header("location", "https://www.example.com/a/b?c=1&d=2")
        .expect_cache_status("detail=redirect");
    t.client(&proxy)
        .get("/blog/2019/hello-world")
        .hdr("Host", "old.example.com")
        .send()
        .await
        .expect_status(301)
        .expect_header(
            "location",
            "https://new.example.com/posts/hello-world?year=2019",
        );
    // No query in `to`: the request's is kept.
    t.client(&proxy)
        .get("/x?utm=1")
        .hdr("Host", "old.example.com")
        .send()
        .await
        .expect_status(302)
        .expect_header("location", "https://new.example.com/?utm=1");
    proxy.expect_counter("edge_redirects", 3);
    assert_eq!(origin.requests(), 0);
    origin.finish().await;
}

// q00003: allow/deny by the client address a trusted proxy gives; a denied
// request gets 403, never the stored object.
#[tokio::test]
async fn q00003_allow_deny() {
    let t = Test::new("q00003");
    let origin = counting(&t, 1).start().await;
    let cfg = one_route(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
        r#"allow = ["10.0.0.0/8", "2001:db8::/32"]
deny = ["10.0.0.66"]"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let get = |xff: &'static str| {
        let c = t.client(&proxy).get("/admin/");
        if xff.is_empty() {
            c
        } else {
            c.hdr("X-Forwarded-For", xff)
        }
    };
    get("10.1.2.3")
        .send()
        .await
        .expect_status(200)
        .expect_body("1 /admin/");
    get("203.0.113.9, 2001:db8::7")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    for xff in ["10.0.0.66", "192.0.2.1", "10.1.2.3, 192.0.2.1", ""] {
        let r = get(xff).send().await;
        r.expect_status(403);
        assert_ne!(
            r.text(),
            "1 /admin/",
            "a denied request got the stored object"
        );
    }
    proxy.expect_counter("edge_access_denied", 4);
    origin.finish().await;
}

// q00004: basic auth from an htpasswd file (apr1, bcrypt, {SHA}): 401 with
// a challenge before any lookup, the credentials never reach the origin,
// the response is cached and served only to authenticated requests; a
// reload reads the file again.
#[tokio::test]
async fn q00004_basic_auth() {
    let t = Test::new("q00004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_no_header("authorization");
            s.txresp_fresh(600, "staging").await;
        })
        .start()
        .await;
    let users = t.dir().join("users");
    let bcrypt = bcrypt::hash("hunter2", 4).unwrap();
    // ann: "password" (apr1); bob: "hunter2" (bcrypt); cid: "password" ({SHA}).
    std::fs::write(
        &users,
        format!(
            "# staging users\nann:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\nbob:{bcrypt}\n\
             cid:{{SHA}}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n"
        ),
    )
    .unwrap();
    let cfg = one_route(
        "",
        &format!(
            "basic_auth = {{ realm = \"staging\", users_file = \"{}\" }}",
            users.display()
        ),
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let basic = |u: &str, p: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    };
    let r = t.client(&proxy).get("/").send().await;
    r.expect_status(401).expect_header(
        "www-authenticate",
        "Basic realm=\"staging\", charset=\"UTF-8\"",
    );
    t.client(&proxy)
        .get("/")
        .hdr("Authorization", basic("ann", "wrong"))
        .send()
        .await
        .expect_status(401);
    t.client(&proxy)
        .get("/")
        .hdr("Authorization", basic("ann", "password"))
        .send()
        .await
        .expect_status(200)
        .expect_body("staging")
        .expect_cache_status("stored");
    for (u, p) in [("bob", "hunter2"), ("cid", "password"), ("bob", "hunter2")] {
        t.client(&proxy)
            .get("/")
            .hdr("Authorization", basic(u, p))
            .send()
            .await
            .expect_status(200)
            .expect_cache_status("hit");
    }
    for auth in [
        basic("bob", "hunter3"),
        basic("nobody", "password"),
        "Bearer x".into(),
    ] {
        let r = t
            .client(&proxy)
            .get("/")
            .hdr("Authorization", auth)
            .send()
            .await;
        r.expect_status(401);
        assert_ne!(r.text(), "staging");
    }
    proxy.expect_counter("edge_auth_failed", 5);
    // bob is removed; the reload reads the file again.
    std::fs::write(&users, "ann:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n").unwrap();
    proxy.reload_toml(&origin, &cfg).unwrap();
    t.client(&proxy)
        .get("/")
        .hdr("Authorization", basic("bob", "hunter2"))
        .send()
        .await
        .expect_status(401);
    t.client(&proxy)
        .get("/")
        .hdr("Authorization", basic("ann", "password"))
        .send()
        .await
        .expect_cache_status("hit");
    // A file that turns bad is refused at the reload; the running rules stay.
    std::fs::write(&users, "ann:secret\n").unwrap();
    let e = proxy.reload_toml(&origin, &cfg).unwrap_err();
    assert!(
        e.contains("users:1") && e.contains("unsupported hash"),
        "{e}"
    );
    t.client(&proxy)
        .get("/")
        .hdr("Authorization", basic("ann", "password"))
        .send()
        .await
        .expect_status(200);
    origin.finish().await;
}

// q00005: a rate per client address on the test clock: the burst, then 429
// with Retry-After; other addresses are not held back; time gives cells back.
#[tokio::test]
async fn q00005_rate_limit() {
    let t = Test::new("q00005");
    let origin = counting(&t, 1).start().await;
    let cfg = one_route(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
        r#"limit = { rate = "10r/s", burst = 2 }"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let from = |ip: &str| t.client(&proxy).get("/p").hdr("X-Forwarded-For", ip);
    for _ in 0..3 {
        from("192.0.2.1").send().await.expect_status(200);
    }
    let r = from("192.0.2.1").send().await;
    r.expect_status(429).expect_header("retry-after", "1");
    from("192.0.2.2").send().await.expect_status(200);
    t.clock.advance(std::time::Duration::from_millis(100));
    from("192.0.2.1").send().await.expect_status(200);
    from("192.0.2.1").send().await.expect_status(429);
    t.clock.advance(secs(1));
    for _ in 0..3 {
        from("192.0.2.1")
            .send()
            .await
            .expect_status(200)
            .expect_cache_status("hit");
    }
    proxy.expect_counter("edge_rate_limited", 2);
    origin.finish().await;
}

// q00006: requests in progress per client address: a second one while the
// first waits on the origin is refused 429; another address goes on; the
// count is given back when the first response ends.
#[tokio::test]
async fn q00006_connection_limit() {
    let t = Test::new("q00006");
    let gate = t.barrier(2);
    let g = gate.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            let first = s.rxreq_concurrent().await;
            let second = s.rxreq_concurrent().await;
            second.expect_url("/other");
            s.switch_to(&second);
            s.txresp_no_store("other").await;
            g.sync().await;
            s.switch_to(&first);
            first.expect_url("/slow");
            s.txresp_no_store("slow").await;
            let r = s.rxreq().await;
            r.expect_url("/again");
            s.txresp_no_store("again").await;
        })
        .start()
        .await;
    let cfg = one_route(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
        "limit_connections = 1",
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    // On one keep-alive connection, the next request is read only after the
    // previous response has ended, so `/again` finds the count given back.
    let mut conn = t.client(&proxy).connect().await;
    let slow = tokio::spawn(async move {
        conn.get("/slow")
            .hdr("X-Forwarded-For", "192.0.2.1")
            .send()
            .await
            .expect_body("slow");
        conn.get("/again")
            .hdr("X-Forwarded-For", "192.0.2.1")
            .send()
            .await
    });
    origin.wait_requests(1).await;
    let r = t
        .client(&proxy)
        .get("/slow2")
        .hdr("X-Forwarded-For", "192.0.2.1")
        .send()
        .await;
    r.expect_status(429).expect_header("retry-after", "1");
    t.client(&proxy)
        .get("/other")
        .hdr("X-Forwarded-For", "192.0.2.2")
        .send()
        .await
        .expect_body("other");
    gate.sync().await;
    slow.await.unwrap().expect_status(200).expect_body("again");
    proxy.expect_counter("edge_connections_limited", 1);
    origin.finish().await;
}

// q00007: error pages: hoard's own 502 and 404 get the file's body and
// type; an origin's own error passes untouched; stale-if-error wins over
// the page.
#[tokio::test]
async fn q00007_error_pages() {
    let t = Test::new("q00007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/boom");
            s.txresp(500).body("origin says no").send().await;
            s.rxreq().await.expect_url("/kept");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-if-error=600")
                .body("kept")
                .send()
                .await;
        })
        .start()
        .await;
    let down = t.dir().join("down.html");
    std::fs::write(&down, "<h1>back soon</h1>").unwrap();
    let missing = t.dir().join("missing.json");
    std::fs::write(&missing, "{\"error\":\"not here\"}").unwrap();
    let cfg = format!(
        r#"
[upstream.app]
servers = ["http://{{origin}}"]
[upstream.gone]
servers = ["http://127.0.0.1:1"]
[[site]]
error_pages = {{ "502" = "{down}", "404" = "{missing}" }}
[[site.route]]
prefix = "/gone"
upstream = "gone"
[[site.route]]
prefix = "/"
upstream = "app"
"#,
        down = down.display(),
        missing = missing.display()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/gone")
        .send()
        .await
        .expect_status(502)
        .expect_header("content-type", "text/html; charset=utf-8")
        .expect_body("<h1>back soon</h1>");
    t.client(&proxy)
        .get("/boom")
        .send()
        .await
        .expect_status(500)
        .expect_body("origin says no");
    t.client(&proxy)
        .get("/kept")
        .send()
        .await
        .expect_body("kept");
    proxy.wait_counter("objects_stored", 1).await;
    origin.finish().await; // refused from now on
    t.clock.advance(secs(5));
    t.client(&proxy)
        .get("/kept")
        .send()
        .await
        .expect_status(200)
        .expect_body("kept")
        .expect_cache_status("detail=stale-if-error");
    // A request no route takes: the site's 404 page.
    let cfg404 = format!(
        r#"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
error_pages = {{ "404" = "{missing}" }}
[[site.route]]
prefix = "/only"
"#,
        missing = missing.display()
    );
    let origin2 = t.origin().start().await;
    let proxy2 = t
        .proxy()
        .origin(&origin2)
        .toml(&origin2, &cfg404)
        .start()
        .await;
    t.client(&proxy2)
        .get("/elsewhere")
        .send()
        .await
        .expect_status(404)
        .expect_header("content-type", "application/json")
        .expect_body("{\"error\":\"not here\"}");
    origin2.finish().await;
}

// q00008: the limit answers and the auth answer use the pages too.
#[tokio::test]
async fn q00008_error_pages_for_refusals() {
    let t = Test::new("q00008");
    let origin = t.origin().start().await;
    let page = t.dir().join("nope.html");
    std::fs::write(&page, "<p>not for you</p>").unwrap();
    let cfg = one_route(
        "",
        &format!(
            "deny = [\"127.0.0.0/8\"]\nerror_pages = {{ \"403\" = \"{}\" }}",
            page.display()
        ),
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/")
        .send()
        .await
        .expect_status(403)
        .expect_body("<p>not for you</p>");
    assert_eq!(origin.requests(), 0);
    origin.finish().await;
}

// q00009: each key's bad input is refused with the file, line and key
// (what `hoard check` prints).
#[tokio::test]
async fn q00009_bad_input_names_line_and_key() {
    let t = Test::new("q00009");
    let dir = t.dir();
    std::fs::write(
        dir.join("bad-users"),
        "ann:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\nbob\n",
    )
    .unwrap();
    std::fs::write(dir.join("page.html"), "x").unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "redirect = { to = \"/x\", status = 305 }",
            "redirect.status",
            "301, 302, 303, 307 or 308",
        ),
        (
            "redirect = { to = \"/new/$host\", status = 301 }",
            "redirect.to",
            "redirects to itself",
        ),
        (
            "redirect = { to = \"$hots\" }",
            "redirect.to",
            "unknown variable",
        ),
        ("allow = [\"10.0.0.0/33\"]", "allow", "prefix length"),
        ("deny = [\"ten\"]", "deny", "not an address range"),
        (
            "basic_auth = { users_file = \"no-such-file\" }",
            "basic_auth.users_file",
            "no-such-file",
        ),
        (
            "basic_auth = { users_file = \"bad-users\" }",
            "basic_auth.users_file",
            "bad-users:2: expected `user:hash`",
        ),
        ("limit = { rate = \"10/s\" }", "limit.rate", "10r/s"),
        ("limit_connections = 0", "limit_connections", "at least 1"),
        (
            "error_pages = { \"200\" = \"page.html\" }",
            "error_pages.200",
            "400 to 599",
        ),
        (
            "error_pages = { \"503\" = \"gone.html\" }",
            "error_pages.503",
            "gone.html",
        ),
        (
            "response_headers = { set = { \"Content-Length\" = \"1\" } }",
            "response_headers.set",
            "framing",
        ),
        (
            "request_headers = { remove = [\"Host\"] }",
            "request_headers.remove",
            "upstream.host",
        ),
        (
            "response_headers = { add = { \"X-A\" = \"$nope\" } }",
            "response_headers.add.X-A",
            "unknown variable",
        ),
    ];
    for (route, key, says) in cases {
        let path = dir.join("hoard.toml");
        let text = format!(
            "[upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n{route}\n"
        );
        std::fs::write(&path, &text).unwrap();
        let e = hoard_config::Config::from_file(&path).unwrap_err();
        assert_eq!(e.line, Some(6), "{route}: {e}");
        assert_eq!(e.key, format!("site[0].route[0].{key}"), "{route}: {e}");
        assert!(e.to_string().contains(says), "{route}: {e}");
    }
    let path = dir.join("scheme.toml");
    std::fs::write(
        &path,
        "[upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n[[site]]\nscheme = \"ftp\"\n",
    )
    .unwrap();
    let e = hoard_config::Config::from_file(&path).unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (Some(4), "site[0].scheme"), "{e}");
    // A redirect to a path an earlier route takes is no loop.
    let path = dir.join("ok.toml");
    std::fs::write(
        &path,
        "[[site]]\n[[site.route]]\nprefix = \"/maintenance.html\"\nredirect = { to = \"https://status.example.com/\" }\n\
         [[site.route]]\nprefix = \"/\"\nredirect = { to = \"/maintenance.html\", status = 302 }\n",
    )
    .unwrap();
    let cfg = hoard_config::Config::from_file(&path).unwrap();
    assert!(
        cfg.upstreams.is_empty(),
        "a redirect-only site needs no upstream"
    );
}

// q00010: the plain listener answers every request with a redirect to
// HTTPS (a site with `scheme = "http"`), while the TLS listener serves the
// site itself.
#[tokio::test]
async fn q00010_plain_listener_redirects_to_https() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;

    let t = Test::new("q00010");
    let origin = t
        .origin()
        .script_fresh("/page?a=1", 60, "over tls")
        .start()
        .await;
    let (cert, key) = (
        super::h_tls::fixture("server.pem"),
        super::h_tls::fixture("server.key"),
    );
    let cfg = format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[[listener]]
address = "127.0.0.1:0"
tls = {{ cert = {cert:?}, key = {key:?} }}
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
scheme = "http"
[[site.route]]
prefix = "/"
redirect = {{ to = "https://$host$request_uri", status = 308 }}
[[site]]
scheme = "https"
hosts = ["localhost"]
[[site.route]]
prefix = "/"
response_headers = {{ set = {{ "Strict-Transport-Security" = "max-age=63072000" }} }}
"#
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addrs = proxy.proxy().addrs();
    t.client(addrs[0])
        .get("/page?a=1")
        .hdr("Host", "localhost")
        .send()
        .await
        .expect_status(308)
        .expect_header("location", "https://localhost/page?a=1");
    let tcp = tokio::net::TcpStream::connect(addrs[1]).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = super::h_tls::connector(&[b"http/1.1"])
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/page?a=1")
        .header("host", "localhost")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["strict-transport-security"],
        "max-age=63072000"
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"over tls");
    proxy.expect_counter("edge_redirects", 1);
    origin.finish().await;
}

// q00011: `$remote_addr` is the client a trusted proxy names, also on a
// route whose only edge key is a header edit.
#[tokio::test]
async fn q00011_remote_addr_through_a_trusted_proxy() {
    let t = Test::new("q00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_header("x-client-addr", "203.0.113.5");
            s.txresp_no_store("ok").await;
        })
        .start()
        .await;
    let cfg = one_route(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
        r#"request_headers = { set = { "X-Client-Addr" = "$remote_addr" } }"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/")
        .hdr("X-Forwarded-For", "203.0.113.5")
        .send()
        .await
        .expect_body("ok");
    origin.finish().await;
}
