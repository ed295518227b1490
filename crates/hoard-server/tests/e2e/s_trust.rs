//! s (trust and plain answers): a PROXY header is believed only from the
//! balancers `proxy_protocol_from` names; `via` is one token, so `Via` and
//! `Cache-Status` stay well-formed; listeners that cannot all bind and
//! certificate files that are not there are refused when the file is read;
//! `query_exclude = ["utm_*"]` drops every `utm_` parameter from the key.

use std::net::SocketAddr;

use hoard_config::ops::Cidr;
use hoard_testkit::{Origin, Test, TestProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-route configuration: `listener` and `server` are extra text for
/// the `[[listener]]` and the top of the file, `route` for the route.
fn config(listener: &str, server: &str, route: &str) -> String {
    format!(
        "{server}\n[[listener]]\naddress = \"127.0.0.1:0\"\n{listener}\n\
         [upstream.app]\nservers = [\"http://{{origin}}\"]\n\
         [[site]]\n[[site.route]]\nprefix = \"/\"\n{route}\n"
    )
}

/// An origin answering `n` GETs of `url` with a cacheable `body`.
async fn origin_of(t: &Test, n: usize, url: &'static str, body: &'static str) -> Origin {
    t.origin()
        .script(move |mut s| async move {
            for _ in 0..n {
                s.serve_fresh(url, 600, body).await;
            }
        })
        .start()
        .await
}

async fn proxy(t: &Test, origin: &Origin, text: &str) -> TestProxy {
    t.proxy().origin(origin).toml(origin, text).start().await
}

/// Sends `bytes` to `to` from the loopback address `from` (the peer the
/// proxy sees); returns what came back before the proxy closed.
async fn send_from(from: [u8; 4], to: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut got),
    )
    .await
    .expect("the proxy answers or closes");
    got
}

const PURGE_P: &str = "PURGE /p HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

// s04001: `proxy_protocol = true` without `proxy_protocol_from` (which
// let any peer claim any address) is refused, naming the listener's key
// and line; at start and at a reload alike.
#[tokio::test]
async fn s04001_proxy_protocol_needs_its_balancers() {
    let t = Test::new("s04001");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = proxy(&t, &origin, &config("", "", "")).await;
    for from in ["", "proxy_protocol_from = []"] {
        let text = config(&format!("proxy_protocol = true\n{from}"), "", "");
        let e = proxy.reload_toml(&origin, &text).unwrap_err();
        assert!(
            e.contains("test.toml:4: `listener[0].proxy_protocol_from`"),
            "{e}"
        );
    }
    t.client(&proxy).get("/p").send().await.expect_body("p");
    origin.finish().await;
}

// s04002: a peer outside `proxy_protocol_from` that claims 127.0.0.1 in
// its header is closed before any request: its PURGE does not pass
// `purge_allow = ["127.0.0.1/32"]`. A trusted balancer's header is used:
// its client is not loopback, so the same PURGE is a 403.
#[tokio::test]
async fn s04002_an_untrusted_peer_cannot_claim_loopback() {
    let t = Test::new("s04002");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let text = config(
        "proxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]",
        "[admin]\npurge_allow = [\"127.0.0.1/32\"]",
        "",
    );
    let proxy = proxy(&t, &origin, &text).await;
    let via_balancer = |req: &str| format!("PROXY TCP4 198.51.100.7 127.0.0.1 5555 80\r\n{req}");
    let got = send_from(
        [127, 0, 0, 1],
        proxy.proxy().addr(),
        via_balancer("GET /p HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let claim = format!("PROXY TCP4 127.0.0.1 127.0.0.1 5555 80\r\n{PURGE_P}");
    let got = send_from([127, 0, 0, 2], proxy.proxy().addr(), claim.as_bytes()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "",
        "closed without an answer"
    );
    proxy.expect_counter("proxy_protocol_refused", 1);
    let got = send_from(
        [127, 0, 0, 1],
        proxy.proxy().addr(),
        via_balancer(PURGE_P).as_bytes(),
    )
    .await;
    assert!(
        got.starts_with(b"HTTP/1.1 403"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    proxy.expect_counter("purges_refused", 1);
    proxy.expect_counter("purges_url", 0);
    origin.finish().await;
}

// s04003: a listener given an empty list of balancers (only a program can
// build one now) trusts none: a loopback claim from 127.0.0.2 is closed,
// not a purge.
#[tokio::test]
async fn s04003_an_empty_balancer_list_trusts_no_one() {
    let t = Test::new("s04003");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.purge_allow = vec![Cidr::parse("127.0.0.1/32").unwrap()];
            c.listeners.push(c.listeners[0].clone());
            c.listeners[1].proxy_protocol = Some(Vec::new());
        })
        .start()
        .await;
    t.client(&proxy).get("/p").send().await.expect_body("p");
    let claim = format!("PROXY TCP4 127.0.0.1 127.0.0.1 5555 80\r\n{PURGE_P}");
    let got = send_from([127, 0, 0, 2], proxy.proxy().addrs()[1], claim.as_bytes()).await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "",
        "closed without an answer"
    );
    proxy.expect_counter("proxy_protocol_refused", 1);
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// s08001: `via` names this proxy in `Via` and `Cache-Status`; an empty
// name or one with a space (which gave `Via: 1.1 ` and `Cache-Status: ;
// hit`) is refused with the key and line, and the running name stays.
#[tokio::test]
async fn s08001_via_is_one_token() {
    let t = Test::new("s08001");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = proxy(&t, &origin, &config("", "[server]\nvia = \"edge-1\"", "")).await;
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_header("via", "1.1 edge-1");
    assert!(
        r.header("cache-status")
            .unwrap()
            .starts_with("edge-1; fwd=uri-miss"),
        "{}",
        r.dump()
    );
    for bad in ["\"\"", "\"my proxy\""] {
        let e = proxy
            .reload_toml(&origin, &config("", &format!("[server]\nvia = {bad}"), ""))
            .unwrap_err();
        assert!(e.contains("test.toml:2: `server.via`"), "{e}");
        assert!(e.contains("a letter, then letters, digits"), "{e}");
    }
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_header("via", "1.1 edge-1");
    assert!(
        r.header("cache-status").unwrap().starts_with("edge-1; hit"),
        "{}",
        r.dump()
    );
    origin.finish().await;
}

// s09001: two listeners on one address (here the second a wildcard of
// the first's port) are refused when the file is read, naming both,
// instead of failing to bind; the running listeners are untouched.
#[tokio::test]
async fn s09001_two_listeners_on_one_address() {
    let t = Test::new("s09001");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = proxy(&t, &origin, &config("", "", "")).await;
    // A port of our own for the two listeners, held while the file is checked.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let text = config(
        "",
        &format!("[[listener]]\naddress = \"127.0.0.1:{port}\"\n[[listener]]\naddress = \"0.0.0.0:{port}\""),
        "",
    );
    let e = proxy.reload_toml(&origin, &text).unwrap_err();
    assert!(e.contains("test.toml:4: `listener[1].address`"), "{e}");
    assert!(
        e.contains(&format!("listener[0]'s 127.0.0.1:{port} (test.toml:2)")),
        "{e}"
    );
    assert_eq!(proxy.proxy().addrs().len(), 1);
    t.client(&proxy).get("/p").send().await.expect_body("p");
    origin.finish().await;
}

// s09002: a listener's certificate or key file that is not there is
// refused when the file is read, naming the key, line and path; with both
// files there the listener opens.
#[tokio::test]
async fn s09002_tls_files_are_read_when_the_file_is() {
    let t = Test::new("s09002");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = proxy(&t, &origin, &config("", "", "")).await;
    let (cert, key) = hoard_testkit::pki::TestCa::new()
        .issue(&["localhost"])
        .write(t.dir(), "site");
    let missing = t.dir().join("missing.pem");
    let tls = |cert: &std::path::Path, key: &std::path::Path| {
        config(
            "",
            &format!(
                "[[listener]]\naddress = \"127.0.0.2:0\"\ntls = {{ cert = {:?}, key = {:?} }}",
                cert.display().to_string(),
                key.display().to_string()
            ),
            "",
        )
    };
    for (text, at) in [
        (tls(&missing, &key), "test.toml:3: `listener[0].tls.cert`"),
        (tls(&cert, &missing), "test.toml:3: `listener[0].tls.key`"),
    ] {
        let e = proxy.reload_toml(&origin, &text).unwrap_err();
        assert!(e.contains(at), "{e}");
        assert!(e.contains("missing.pem"), "{e}");
    }
    assert_eq!(proxy.proxy().addrs().len(), 1);
    let r = proxy.reload_toml(&origin, &tls(&cert, &key)).unwrap();
    assert_eq!(r.opened.len(), 1, "{r:?}");
    t.client(&proxy).get("/p").send().await.expect_body("p");
    origin.finish().await;
}

// s09003: an upstream server string with words after its URL (nginx's
// `server a:80 backup;` copied) is refused with the key and line (this
// was already checked; the case keeps it so).
#[tokio::test]
async fn s09003_a_server_with_trailing_words() {
    let t = Test::new("s09003");
    let origin = origin_of(&t, 1, "/p", "p").await;
    let proxy = proxy(&t, &origin, &config("", "", "")).await;
    let text = config("", "", "").replace(
        "servers = [\"http://{origin}\"]",
        "servers = [\"http://{origin}\", \"http://127.0.0.1:1 backup\"]",
    );
    let e = proxy.reload_toml(&origin, &text).unwrap_err();
    assert!(e.contains("test.toml:6: `upstream.app.servers[1]`"), "{e}");
    assert!(e.contains("backup = [...]"), "{e}");
    t.client(&proxy).get("/p").send().await.expect_body("p");
    origin.finish().await;
}

// s11001: `query_exclude = ["utm_*"]` leaves every `utm_` parameter out
// of the key: three URLs that differ only in them are one object (one
// origin request); `id` still tells objects apart. A `*` inside a name is
// refused with the key and line.
#[tokio::test]
async fn s11001_query_exclude_prefix() {
    let t = Test::new("s11001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (url, body) in [
                ("/a?id=1&utm_source=news", "one"),
                ("/a?utm_source=news&id=2", "two"),
            ] {
                s.serve_fresh(url, 600, body).await;
            }
        })
        .start()
        .await;
    let route = "key = { query_exclude = [\"utm_*\", \"fbclid\"] }";
    let proxy = proxy(&t, &origin, &config("", "", route)).await;
    let c = t.client(&proxy);
    c.get("/a?id=1&utm_source=news")
        .send()
        .await
        .expect_body("one");
    proxy.wait_counter("objects_stored", 1).await;
    for url in [
        "/a?utm_medium=mail&id=1&utm_campaign=x",
        "/a?id=1&fbclid=7&utm_=",
    ] {
        c.get(url)
            .send()
            .await
            .expect_body("one")
            .expect_cache_status("hit");
    }
    c.get("/a?utm_source=news&id=2")
        .send()
        .await
        .expect_body("two");
    let bad = config("", "", "key = { query_exclude = [\"utm_*_id\"] }");
    let e = proxy.reload_toml(&origin, &bad).unwrap_err();
    assert!(
        e.contains("test.toml:10: `site[0].route[0].key.query_exclude`"),
        "{e}"
    );
    origin.finish().await;
}
