//! b (upgrades): WebSockets through hoard with a real client and a real
//! server (tokio-tungstenite): the upgrade reaches the origin, a `101`
//! makes a tunnel both ways, a refusal passes as it came.

use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use hoard_config::ServerAddr;
use hoard_testkit::{Test, TestProxy};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket echo server: every text or binary message comes back;
/// a text `close-please` is answered with a close (code 4000). Returns its
/// address and a task that ends with the close code the client sent.
pub(crate) async fn echo_origin() -> (SocketAddr, tokio::task::JoinHandle<Option<u16>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        while let Some(msg) = ws.next().await {
            // A connection cut without a close handshake ends the echo.
            let Ok(msg) = msg else { return None };
            match msg {
                Message::Text(t) if t.as_str() == "close-please" => {
                    ws.close(Some(CloseFrame {
                        code: CloseCode::Library(4000),
                        reason: "bye".into(),
                    }))
                    .await
                    .unwrap();
                }
                m @ (Message::Text(_) | Message::Binary(_)) => ws.send(m).await.unwrap(),
                Message::Close(frame) => return frame.map(|f| u16::from(f.code)),
                _ => {}
            }
        }
        None
    });
    (addr, task)
}

async fn proxy_to(t: &Test, addr: SocketAddr) -> TestProxy {
    t.proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(addr.to_string())])
        .start()
        .await
}

pub(crate) async fn connect(proxy: &TestProxy) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    use hoard_testkit::Endpoint;
    let stream = TcpStream::connect(proxy.endpoint()).await.unwrap();
    let (ws, resp) = tokio_tungstenite::client_async("ws://localhost/chat", stream)
        .await
        .expect("the upgrade goes through");
    assert_eq!(resp.status(), 101);
    ws
}

// b00095: a WebSocket through hoard: a text message and a 1 MiB binary one
// come back; the client's close (code 1000) reaches the origin; the
// tunnel is counted, opened and closed, and its access log line is
// written when it closes (status 101, bytes each way, outcome pass).
#[tokio::test]
async fn b00095_websocket_echo_through_the_proxy() {
    let t = Test::new("b00095");
    let (addr, origin) = echo_origin().await;
    let log = t.dir().join("access.log");
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(addr.to_string())])
        .config(|c| c.access_log.target = hoard_config::LogTarget::File(log.clone()))
        .start()
        .await;
    let mut ws = connect(&proxy).await;
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(big));
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .unwrap();
    assert_eq!(
        origin.await.unwrap(),
        Some(1000),
        "the close reached the origin"
    );
    // Both ends gone: the tunnel ends.
    drop(ws);
    proxy.wait_counter("tunnels_closed", 1).await;
    proxy.expect_counter("tunnels_opened", 1);
    assert!(proxy.counter("tunnel_bytes_to_origin") > 1 << 20);
    // One line, for the whole tunnel, once it closed.
    proxy.wait_counter("access_log_lines", 1).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["status"], 101, "{line}");
    assert_eq!(line["path"], "/chat");
    assert_eq!(line["cache"], "pass");
    let (to_client, to_origin) = (
        line["bytes"].as_u64().unwrap(),
        line["tunnel_bytes_to_origin"].as_u64().unwrap(),
    );
    assert!(to_client > 1 << 20 && to_origin > 1 << 20, "{line}");
    assert_eq!(to_origin, proxy.counter("tunnel_bytes_to_origin"));
    assert_eq!(to_client, proxy.counter("tunnel_bytes_to_client"));
}

// b00096: the origin closes with its own code: the client gets it.
#[tokio::test]
async fn b00096_a_close_from_the_origin_reaches_the_client() {
    let t = Test::new("b00096");
    let (addr, _origin) = echo_origin().await;
    let proxy = proxy_to(&t, addr).await;
    let mut ws = connect(&proxy).await;
    ws.send(Message::text("close-please")).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 4000),
        other => panic!("expected the origin's close, got {other:?}"),
    }
}

// b00097: an origin that refuses the upgrade (426): its answer reaches the
// client as it came, and no tunnel is made.
#[tokio::test]
async fn b00097_a_refused_upgrade_passes_the_answer() {
    let t = Test::new("b00097");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_header("upgrade", "websocket")
                .expect_header("connection", "upgrade");
            s.txresp(426)
                .hdr("Upgrade", "h2c")
                .body("no websockets here")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/chat")
        .hdr("Connection", "Upgrade")
        .hdr("Upgrade", "websocket")
        .hdr("Sec-WebSocket-Version", "13")
        .hdr("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .expect_status(426)
        .expect_body("no websockets here");
    proxy.expect_counter("tunnels_opened", 0);
    origin.finish().await;
}

// b00098: 32 WebSockets at once, each echoing its own messages, one of
// them after an idle pause: every tunnel carries its own bytes only.
#[tokio::test]
async fn b00098_many_websockets_at_once() {
    let t = Test::new("b00098");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_text() || m.is_binary() {
                        ws.send(m).await.unwrap();
                    }
                }
            });
        }
    });
    let proxy = proxy_to(&t, addr).await;
    let pause = t.barrier(2);
    let mut clients = Vec::new();
    for i in 0..32u32 {
        let mut ws = connect(&proxy).await;
        let pause = (i == 0).then(|| pause.clone());
        clients.push(tokio::spawn(async move {
            if let Some(p) = pause {
                // Idle while the others run, then echo.
                p.sync().await;
            }
            for k in 0..10u32 {
                let text = format!("socket {i} message {k}");
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(text));
            }
        }));
    }
    for c in clients.drain(1..) {
        c.await.unwrap();
    }
    pause.sync().await;
    clients.pop().unwrap().await.unwrap();
    proxy.expect_counter("tunnels_opened", 32);
    server.abort();
}

// b00099: `Connection: upgrade` without `Upgrade`, and an upgrade on a
// route with `upgrade = false`, are 400s that reach no origin; an
// `Upgrade: h2c` (for hoard, not the origin) is dropped and the request
// served (and cached) as a plain GET.
#[tokio::test]
async fn b00099_upgrades_refused_and_h2c_ignored() {
    let t = Test::new("b00099");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_url("/h2c");
            assert!(r.header("upgrade").is_none(), "h2c is not forwarded");
            s.txresp_fresh(60, "plain").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/x")
        .hdr("Connection", "upgrade")
        .send()
        .await
        .expect_status(400);
    for _ in 0..2 {
        t.client(&proxy)
            .get("/h2c")
            .hdr("Connection", "Upgrade, HTTP2-Settings")
            .hdr("Upgrade", "h2c")
            .hdr("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
            .send()
            .await
            .expect_status(200)
            .expect_body("plain");
    }
    proxy.expect_counter("cache_hit", 1);
    let off = t
        .proxy()
        .origin(&origin)
        .route(|r| r.upgrade = false)
        .start()
        .await;
    t.client(&off)
        .get("/ws")
        .hdr("Connection", "Upgrade")
        .hdr("Upgrade", "websocket")
        .send()
        .await
        .expect_status(400);
    origin.finish().await;
}

// b00100: a tunnel with no byte either way for `tunnel_idle_timeout` is
// closed (both sides), and counted.
#[tokio::test]
async fn b00100_an_idle_tunnel_is_closed() {
    let t = Test::new("b00100");
    let (addr, origin) = echo_origin().await;
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(addr.to_string())])
        .config(|c| c.server.tunnel_idle_timeout = std::time::Duration::from_millis(300))
        .start()
        .await;
    let mut ws = connect(&proxy).await;
    ws.send(Message::text("once")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("once"));
    // Nothing more is sent: the proxy ends the tunnel.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
        .await
        .expect("the idle tunnel is closed");
    assert!(
        !matches!(ended, Some(Ok(Message::Text(_) | Message::Binary(_)))),
        "no message, the end: {ended:?}"
    );
    proxy.wait_counter("tunnels_closed", 1).await;
    // The origin's side was closed too.
    assert_eq!(origin.await.unwrap(), None);
}

// b00101: a `101` the client did not ask for (a plain GET) is the origin's
// mistake: a 502, nothing tunnelled, and the next request is served.
#[tokio::test]
async fn b00101_an_unasked_101_is_a_502() {
    let t = Test::new("b00101");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/plain");
            s.txresp(101)
                .hdr("Upgrade", "websocket")
                .hdr("Connection", "Upgrade")
                .send()
                .await;
            s.rxreq().await.expect_url("/after");
            s.txresp(200).body("fine").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/plain")
        .send()
        .await
        .expect_status(502);
    t.client(&proxy)
        .get("/after")
        .send()
        .await
        .expect_status(200)
        .expect_body("fine");
    proxy.expect_counter("tunnels_opened", 0);
    origin.finish().await;
}
