//! h (WebSockets over HTTP/2, RFC 8441): a client on an HTTP/2 TLS
//! connection opens WebSockets with extended `CONNECT`; the origin, on
//! HTTP/1.1, sees an ordinary WebSocket handshake. Real clients: hyper's
//! HTTP/2 client with tungstenite on the stream, and headless Chromium.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hoard_config::{ServerAddr, TlsConfig};
use hoard_testkit::{Endpoint, Test, TestProxy};
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures")
        .join(name)
}

/// The page the browser loads: it opens a WebSocket to `/ws` on the same
/// origin, sends a message and shows the echo (or the failure) in the DOM.
const PAGE: &str = r#"<!doctype html><html><body data-echo="pending"><script>
const ws = new WebSocket("wss://" + location.host + "/ws");
ws.onopen = () => ws.send("hello over h2");
ws.onmessage = (e) => { document.body.dataset.echo = "echo:" + e.data; ws.close(1000, "done"); };
ws.onerror = () => { document.body.dataset.echo = "error"; };
</script><img src="/wait" alt=""></body></html>"#;

/// What the origin saw: each WebSocket handshake's request fields, and
/// each close code a client sent.
#[derive(Debug)]
pub(crate) enum Seen {
    Handshake(http::HeaderMap),
    Closed(Option<u16>),
}

/// An HTTP/1.1 origin (hyper, with upgrades): `/` is the page, `/ws` a
/// WebSocket echo (a text `close-please` is answered by a close with code
/// 4000), `/refuse` a 426, `/wait` an empty answer held until a client's
/// close frame has reached the echo (the page loads it, so that a browser
/// has not finished loading, and dumps no DOM, before its echo arrived).
pub(crate) async fn site() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let (closed_tx, closed) = tokio::sync::watch::channel(false);
    let closed_tx = std::sync::Arc::new(closed_tx);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            let closed_tx = closed_tx.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let tx = tx.clone();
                    let closed_tx = closed_tx.clone();
                    let mut closed = closed.clone();
                    async move {
                        if req.uri().path() == "/wait" {
                            // Bounded: a failing page shows in the DOM, not as a hang.
                            let _ = tokio::time::timeout(
                                std::time::Duration::from_secs(20),
                                closed.wait_for(|c| *c),
                            )
                            .await;
                            let resp = Response::builder()
                                .header("cache-control", "no-store")
                                .body(Full::new(Bytes::new()))
                                .unwrap();
                            return Ok::<_, std::convert::Infallible>(resp);
                        }
                        Ok::<_, std::convert::Infallible>(answer(req, tx, closed_tx))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, rx)
}

fn answer(
    mut req: Request<hyper::body::Incoming>,
    tx: mpsc::UnboundedSender<Seen>,
    closed: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
) -> Response<Full<Bytes>> {
    let status = |s: u16, body: &'static str| {
        Response::builder()
            .status(s)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    match req.uri().path() {
        "/" => Response::builder()
            .header("content-type", "text/html")
            .header("cache-control", "max-age=60")
            .body(Full::new(Bytes::from_static(PAGE.as_bytes())))
            .unwrap(),
        "/refuse" => status(426, "no websockets here"),
        "/wrong-accept" => {
            let mut resp = status(101, "");
            let h = resp.headers_mut();
            h.insert("upgrade", "websocket".parse().unwrap());
            h.insert("connection", "Upgrade".parse().unwrap());
            h.insert("sec-websocket-accept", "d3Jvbmc=".parse().unwrap());
            resp
        }
        "/ws" => {
            let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
                return status(400, "no key");
            };
            let protocol = req.headers().get("sec-websocket-protocol").cloned();
            tx.send(Seen::Handshake(req.headers().clone())).unwrap();
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let on = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let up = on.await.unwrap();
                let mut ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
                while let Some(Ok(m)) = ws.next().await {
                    match m {
                        Message::Text(t) if t.as_str() == "close-please" => {
                            let bye = CloseFrame {
                                code: CloseCode::Library(4000),
                                reason: "bye".into(),
                            };
                            ws.close(Some(bye)).await.unwrap();
                        }
                        m @ (Message::Text(_) | Message::Binary(_)) => ws.send(m).await.unwrap(),
                        Message::Close(f) => {
                            let _ = tx.send(Seen::Closed(f.map(|f| u16::from(f.code))));
                            closed.send_replace(true);
                            return;
                        }
                        _ => {}
                    }
                }
            });
            let mut resp = status(101, "");
            let h = resp.headers_mut();
            h.insert("upgrade", "websocket".parse().unwrap());
            h.insert("connection", "Upgrade".parse().unwrap());
            h.insert("sec-websocket-accept", accept.parse().unwrap());
            if let Some(p) = protocol {
                h.insert("sec-websocket-protocol", p);
            }
            resp
        }
        _ => status(404, "not here"),
    }
}

/// hoard on a TLS listener with HTTP/2, in front of `addr`.
async fn proxy_to(t: &Test, addr: SocketAddr) -> TestProxy {
    t.proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(addr.to_string())])
        .config(|c| {
            c.listeners[0].tls = Some(TlsConfig {
                cert: fixture("server.pem"),
                key: fixture("server.key"),
            });
        })
        .start()
        .await
}

pub(crate) type H2 = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

/// An HTTP/2 connection to the proxy (TLS, ALPN h2); the page is fetched
/// on it first, as a browser does (and hoard's SETTINGS, which allow
/// extended CONNECT, have arrived by then).
pub(crate) async fn h2(proxy: &TestProxy) -> H2 {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(fixture("ca.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let page = send
        .send_request(
            Request::get("https://localhost/")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let body = page.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, PAGE.as_bytes());
    send
}

/// Extended CONNECT for `protocol` on `path`: the response, and the stream.
pub(super) async fn connect(
    send: &mut H2,
    path: &str,
    protocol: &'static str,
) -> (
    StatusCode,
    http::HeaderMap,
    Option<hyper::upgrade::OnUpgrade>,
) {
    let mut req = Request::connect(format!("https://localhost{path}"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat")
        .body(Empty::new())
        .unwrap();
    req.extensions_mut()
        .insert(hyper::ext::Protocol::from_static(protocol));
    let mut resp = send.send_request(req).await.unwrap();
    let on = (resp.status() == 200).then(|| hyper::upgrade::on(&mut resp));
    (resp.status(), resp.headers().clone(), on)
}

pub(crate) async fn websocket(send: &mut H2) -> WebSocketStream<TokioIo<hyper::upgrade::Upgraded>> {
    let (status, headers, on) = connect(send, "/ws", "websocket").await;
    assert_eq!(status, 200, "{headers:?}");
    assert_eq!(headers["sec-websocket-protocol"], "chat");
    assert!(
        headers.get("sec-websocket-accept").is_none(),
        "the accept is hoard's to check"
    );
    let up = on.unwrap().await.unwrap();
    WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Client, None).await
}

// h00030: two WebSockets over one HTTP/2 connection (after the page): text
// and a 1 MiB binary message echo on each; the origin got an HTTP/1.1
// handshake with a key and the client's fields; a close code from the
// client reaches the origin and one from the origin reaches the client.
#[tokio::test]
async fn h00030_websockets_over_http2() {
    let t = Test::new("h00030");
    let (addr, mut seen) = site().await;
    let proxy = proxy_to(&t, addr).await;
    let mut send = h2(&proxy).await;
    let mut a = websocket(&mut send).await;
    let mut b = websocket(&mut send).await;
    for _ in 0..2 {
        match seen.recv().await.unwrap() {
            Seen::Handshake(h) => {
                assert_eq!(h["upgrade"], "websocket");
                assert_eq!(h["connection"], "upgrade");
                assert_eq!(h["sec-websocket-version"], "13");
                assert_eq!(h["sec-websocket-protocol"], "chat");
                assert_eq!(h["sec-websocket-key"].len(), 24, "a 16-byte key, base64");
            }
            other => panic!("{other:?}"),
        }
    }
    a.send(Message::text("to a")).await.unwrap();
    b.send(Message::text("to b")).await.unwrap();
    assert_eq!(b.next().await.unwrap().unwrap(), Message::text("to b"));
    assert_eq!(a.next().await.unwrap().unwrap(), Message::text("to a"));
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    a.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(a.next().await.unwrap().unwrap(), Message::binary(big));
    a.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .unwrap();
    assert!(matches!(
        seen.recv().await.unwrap(),
        Seen::Closed(Some(1000))
    ));
    b.send(Message::text("close-please")).await.unwrap();
    match b.next().await.unwrap().unwrap() {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 4000),
        other => panic!("expected the origin's close, got {other:?}"),
    }
    drop((a, b));
    proxy.wait_counter("tunnels_closed", 2).await;
    proxy.expect_counter("tunnels_opened", 2);
    proxy.expect_counter("tunnels_opened_http2", 2);
    assert!(proxy.counter("tunnel_bytes_to_origin") > 1 << 20);
    // The connection still serves requests: the page, from the cache.
    let page = send
        .send_request(
            Request::get("https://localhost/")
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    proxy.expect_counter("cache_hit", 1);
}

// h00031: refusals on HTTP/2: the origin's 426 passes as it came; a 101
// with the wrong Sec-WebSocket-Accept is a 502; an extended CONNECT for
// another protocol is a 400 and a plain CONNECT a 405, neither reaching
// the origin; no tunnel is made.
#[tokio::test]
async fn h00031_refusals_over_http2() {
    let t = Test::new("h00031");
    let (addr, _seen) = site().await;
    let proxy = proxy_to(&t, addr).await;
    let mut send = h2(&proxy).await;
    let (status, _, _) = connect(&mut send, "/refuse", "websocket").await;
    assert_eq!(status, 426);
    let (status, _, _) = connect(&mut send, "/wrong-accept", "websocket").await;
    assert_eq!(status, 502);
    let (status, _, _) = connect(&mut send, "/ws", "webtransport").await;
    assert_eq!(status, 400);
    let plain = Request::connect("localhost:443")
        .body(Empty::new())
        .unwrap();
    assert_eq!(send.send_request(plain).await.unwrap().status(), 405);
    proxy.expect_counter("tunnels_opened", 0);
    // The page, the 426 and the wrong accept: all the origin was asked.
    proxy.expect_counter("origin_requests", 3);
}

// h00032: headless Chromium loads the page over HTTP/2 and opens a
// WebSocket from it: the echo shows in the page, and hoard counted a
// WebSocket over HTTP/2 (the browser kept its one connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h00032_websocket_over_http2_in_chromium() {
    let t = Test::new("h00032");
    let (addr, mut seen) = site().await;
    let proxy = proxy_to(&t, addr).await;
    let url = format!("https://127.0.0.1:{}/", proxy.endpoint().port());
    let dir = t.dir().to_path_buf();
    let (dom, stderr) = tokio::task::spawn_blocking(move || chromium_dom(&dir, &url))
        .await
        .unwrap();
    assert!(
        dom.contains(r#"data-echo="echo:hello over h2""#),
        "the page shows the echo:\n{dom}\n{stderr}"
    );
    assert!(matches!(seen.recv().await.unwrap(), Seen::Handshake(_)));
    proxy.expect_counter("tunnels_opened_http2", 1);
    proxy.expect_counter("tunnels_opened", 1);
}

/// Chromium's DOM of `url` once the page settled (and its stderr).
fn chromium_dom(dir: &std::path::Path, url: &str) -> (String, String) {
    let chromium = which("chromium")
        .expect("chromium is needed for this case: apt-get install chromium (.ci/run installs it)");
    let profile = tempfile::tempdir_in(dir).unwrap();
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--ignore-certificate-errors",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .env("HOME", profile.path())
        .env("XDG_CONFIG_HOME", profile.path())
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}
