//! s (site keys): a site's `response_headers` under its routes' own, the
//! limits of a route over a WebSocket's whole life, and the limits' state
//! across a reload.

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use hoard_config::{Config, TlsConfig};
use hoard_testkit::{Endpoint, Test, TestProxy};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use super::h_websocket::{self, Seen};

/// A configuration from `text` (`{ws}` is `ws`), listeners on free ports.
fn config(text: &str, ws: SocketAddr) -> Config {
    let text = text.replace("{ws}", &ws.to_string());
    let mut cfg = Config::from_toml("test.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    for l in &mut cfg.listeners {
        l.address = SocketAddr::from(([127, 0, 0, 1], 0));
    }
    cfg
}

/// `/ws` counts one connection per client address; `/` counts nothing.
const WS_LIMITED: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{ws}"]
[[site]]
[[site.route]]
prefix = "/ws"
limit_connections = 1
[[site.route]]
prefix = "/"
"#;

/// A WebSocket over HTTP/1.1 to `/ws`: the stream, or the refusal's status.
async fn ws_http1(
    proxy: &TestProxy,
) -> Result<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>, u16> {
    let stream = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    match tokio_tungstenite::client_async("ws://localhost/ws", stream).await {
        Ok((ws, resp)) => {
            assert_eq!(resp.status(), 101);
            Ok(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

// s15001: a site's response_headers reach every answer of its routes: a
// miss, a hit, a fixed answer, hoard's own 413 and the site's 404 for a
// path no route takes; a route's edit of the same name wins (its `set`
// over the site's `set` and `remove`), the site's other edits stay.
#[tokio::test]
async fn s15001_site_response_headers_under_route_headers() {
    let t = Test::new("s15001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for url in ["/a", "/own"] {
                s.rxreq().await.expect_url(url);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("X-Powered-By", "PHP/5.4")
                    .body(url)
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
max_body_size = "4"
response_headers = { set = { "Strict-Transport-Security" = "max-age=63072000" }, add = { "X-Site" = "s" }, remove = ["X-Powered-By"] }
[[site.route]]
prefix = "/fixed"
respond = { status = 200, body = "fixed" }
[[site.route]]
prefix = "/own"
response_headers = { set = { "Strict-Transport-Security" = "max-age=0", "X-Powered-By" = "hoard" } }
[[site.route]]
prefix = "/a"
"#;
    let proxy = t.proxy().origin(&origin).toml(&origin, cfg).start().await;
    let site = |r: &hoard_testkit::Response| {
        r.expect_header("strict-transport-security", "max-age=63072000")
            .expect_header("x-site", "s")
            .expect_no_header("x-powered-by");
    };
    let miss = t.client(&proxy).get("/a").send().await;
    site(miss.expect_status(200).expect_cache_status("fwd=uri-miss"));
    let hit = t.client(&proxy).get("/a").send().await;
    site(hit.expect_body("/a").expect_cache_status("hit"));
    site(
        t.client(&proxy)
            .get("/fixed")
            .send()
            .await
            .expect_body("fixed"),
    );
    let big = t.client(&proxy).post("/a").body("too large").send().await;
    site(big.expect_status(413));
    site(
        t.client(&proxy)
            .get("/nothing")
            .send()
            .await
            .expect_status(404),
    );
    t.client(&proxy)
        .get("/own")
        .send()
        .await
        .expect_body("/own")
        .expect_header("strict-transport-security", "max-age=0")
        .expect_header("x-powered-by", "hoard")
        .expect_header("x-site", "s");
    proxy.expect_counter("edge_responds", 1);
    origin.finish().await;
}

// s15002: a site's response_headers are checked as a route's: the file's
// line and the key, for a framing field, an unknown variable and a name
// that is no header name.
#[tokio::test]
async fn s15002_site_response_headers_bad_input() {
    let t = Test::new("s15002");
    let cases: &[(&str, &str, &str)] = &[
        (
            "response_headers = { set = { \"Content-Length\" = \"1\" } }",
            "response_headers.set",
            "framing",
        ),
        (
            "response_headers = { add = { \"X-A\" = \"$nope\" } }",
            "response_headers.add.X-A",
            "unknown variable",
        ),
        (
            "response_headers = { remove = [\"no name\"] }",
            "response_headers.remove",
            "not a header name",
        ),
        ("response_headers = { sett = {} }", "", "unknown field"),
    ];
    for (site, key, says) in cases {
        let path = t.dir().join("hoard.toml");
        let text = format!(
            "[upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n[[site]]\n{site}\n[[site.route]]\nprefix = \"/\"\n"
        );
        std::fs::write(&path, &text).unwrap();
        let e = Config::from_file(&path).unwrap_err();
        assert_eq!(e.line, Some(4), "{site}: {e}");
        if !key.is_empty() {
            assert_eq!(e.key, format!("site[0].{key}"), "{site}: {e}");
        }
        assert!(e.to_string().contains(says), "{site}: {e}");
        assert!(e.to_string().contains("hoard.toml:4"), "{site}: {e}");
    }
}

// s15003: limit_connections counts a WebSocket over HTTP/1.1 for the
// tunnel's life: while one is open, a second from the same address gets
// the limit's 429 (never reaching the origin); once it closed, another
// goes through.
#[tokio::test]
async fn s15003_websocket_counted_while_open() {
    let t = Test::new("s15003");
    let (addr, mut seen) = h_websocket::site().await;
    let cfg = config(WS_LIMITED, addr);
    let proxy = t.proxy().config(|c| *c = cfg).start().await;
    let mut a = ws_http1(&proxy).await.expect("the first WebSocket opens");
    assert!(matches!(seen.recv().await, Some(Seen::Handshake(_))));
    a.send(Message::text("hi")).await.unwrap();
    assert_eq!(a.next().await.unwrap().unwrap(), Message::text("hi"));
    assert_eq!(ws_http1(&proxy).await.err(), Some(429));
    proxy.expect_counter("edge_connections_limited", 1);
    a.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .unwrap();
    assert!(matches!(seen.recv().await, Some(Seen::Closed(Some(1000)))));
    drop(a);
    proxy.wait_counter("tunnels_closed", 1).await;
    let mut b = ws_http1(&proxy).await.expect("the count was given back");
    b.send(Message::text("again")).await.unwrap();
    assert_eq!(b.next().await.unwrap().unwrap(), Message::text("again"));
    proxy.expect_counter("tunnels_opened", 2);
    proxy.expect_counter("edge_connections_limited", 1);
}

// s15004: the same over HTTP/2 (extended CONNECT, RFC 8441): a second
// WebSocket stream is refused 429 while the first is open, and opens once
// the first closed.
#[tokio::test]
async fn s15004_websocket_over_http2_counted_while_open() {
    let t = Test::new("s15004");
    let (addr, mut seen) = h_websocket::site().await;
    let cfg = config(WS_LIMITED, addr);
    let proxy = t
        .proxy()
        .config(|c| {
            *c = cfg;
            c.listeners[0].tls = Some(TlsConfig {
                cert: h_websocket::fixture("server.pem"),
                key: h_websocket::fixture("server.key"),
            });
        })
        .start()
        .await;
    let mut send = h_websocket::h2(&proxy).await;
    let mut a = h_websocket::websocket(&mut send).await;
    assert!(matches!(seen.recv().await, Some(Seen::Handshake(_))));
    let (status, _, _) = h_websocket::connect(&mut send, "/ws", "websocket").await;
    assert_eq!(status, 429);
    a.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .unwrap();
    assert!(matches!(seen.recv().await, Some(Seen::Closed(Some(1000)))));
    drop(a);
    proxy.wait_counter("tunnels_closed", 1).await;
    let mut b = h_websocket::websocket(&mut send).await;
    b.send(Message::text("again")).await.unwrap();
    assert_eq!(b.next().await.unwrap().unwrap(), Message::text("again"));
    proxy.expect_counter("tunnels_opened_http2", 2);
    proxy.expect_counter("edge_connections_limited", 1);
}

/// One site whose route `/` has `route`; `before` goes first in the site
/// (an unrelated change for a reload).
fn limited(before: &str, route: &str) -> String {
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
{before}
[[site.route]]
prefix = "/"
{route}
"#
    )
}

// s15005: a client's spent rate stays spent across a reload that leaves
// the limit as it was (even with a route added before its route); a
// reload that changes the rate starts the cells afresh.
#[tokio::test]
async fn s15005_rate_cells_survive_reload() {
    let t = Test::new("s15005");
    let origin = t.origin().script_fresh("/p", 600, "p").start().await;
    let rate = r#"limit = { rate = "1r/m" }"#;
    let v1 = limited("", rate);
    let proxy = t.proxy().origin(&origin).toml(&origin, &v1).start().await;
    t.client(&proxy).get("/p").send().await.expect_status(200);
    t.client(&proxy).get("/p").send().await.expect_status(429);
    let v2 = limited(
        "[[site.route]]\nprefix = \"/fixed\"\nrespond = { status = 204 }",
        rate,
    );
    assert_eq!(proxy.reload_toml(&origin, &v2).unwrap().generation, 2);
    t.client(&proxy)
        .get("/fixed")
        .send()
        .await
        .expect_status(204);
    t.client(&proxy).get("/p").send().await.expect_status(429);
    proxy.expect_counter("edge_rate_limited", 2);
    // A new rate: a new budget.
    let v3 = limited("", r#"limit = { rate = "2r/m" }"#);
    assert_eq!(proxy.reload_toml(&origin, &v3).unwrap().generation, 3);
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    origin.finish().await;
}

// s15006: requests in progress stay counted across a reload: one waiting
// on the origin when the configuration changes still makes a second from
// the same address a 429; its end gives the count back to the new
// configuration's limit.
#[tokio::test]
async fn s15006_connection_counts_survive_reload() {
    let t = Test::new("s15006");
    let gate = t.barrier(2);
    let g = gate.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/slow");
            g.sync().await;
            s.txresp_no_store("slow").await;
            s.rxreq().await.expect_url("/again");
            s.txresp_no_store("again").await;
        })
        .start()
        .await;
    let v1 = limited("", "limit_connections = 1");
    let proxy = t.proxy().origin(&origin).toml(&origin, &v1).start().await;
    // On one keep-alive connection, `/again` is read only after `/slow`'s
    // response ended.
    let mut conn = t.client(&proxy).connect().await;
    let slow = tokio::spawn(async move {
        conn.get("/slow").send().await.expect_body("slow");
        conn.get("/again").send().await
    });
    origin.wait_requests(1).await;
    let v2 = limited("max_body_size = \"1m\"", "limit_connections = 1");
    assert_eq!(proxy.reload_toml(&origin, &v2).unwrap().generation, 2);
    let r = t.client(&proxy).get("/slow2").send().await;
    r.expect_status(429).expect_header("retry-after", "1");
    gate.sync().await;
    slow.await.unwrap().expect_status(200).expect_body("again");
    proxy.expect_counter("edge_connections_limited", 1);
    origin.finish().await;
}
