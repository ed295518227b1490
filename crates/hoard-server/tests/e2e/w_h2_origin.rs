//! w (HTTP/2 to origins): `protocol = "h2"` sends fills as streams
//! multiplexed over few connections (more only at the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`), over h2c or TLS with ALPN; `"auto"`
//! takes what the server picks; `GOAWAY` and refused streams are retried
//! unseen by clients, a stream reset mid-body is a cut fill, and timeouts,
//! health and failover are HTTP/1.1's. The origin is the test kit's HTTP/2
//! one (`hoard_testkit::h2_origin`), counting connections and streams.

use std::sync::Arc;
use std::time::Duration;

use hoard_config::{OriginProtocol, ServerAddr};
use hoard_testkit::pki::TestCa;
use hoard_testkit::{H2Origin, ProxyBuilder, Reply, Test};
use tokio::sync::{Barrier, Notify};

/// A proxy whose upstream is `origins` over `protocol` (plain TCP).
fn to(t: &Test, origins: &[&H2Origin], protocol: OriginProtocol) -> ProxyBuilder {
    let servers: Vec<ServerAddr> = origins
        .iter()
        .map(|o| ServerAddr::http(o.addr().to_string()))
        .collect();
    t.proxy().upstream(move |u| {
        u.servers = servers;
        u.protocol = protocol;
    })
}

/// An origin answering each request with its path (cacheable), once
/// `all` requests are in flight together.
async fn all_at_once(t: &Test, all: usize, max_streams: Option<u32>) -> H2Origin {
    let barrier = Arc::new(Barrier::new(all));
    let mut b = t.h2_origin().handler(move |r| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            Reply::ok(r.path().to_string(), &[("cache-control", "max-age=60")])
        }
    });
    if let Some(n) = max_streams {
        b = b.max_streams(n);
    }
    b.start().await
}

/// `n` clients at once, each for its own path; each gets its path back.
async fn misses(t: &Test, proxy: &hoard_testkit::TestProxy, n: usize) {
    let clients: Vec<_> = (0..n)
        .map(|k| t.client(proxy).get(&format!("/u{k}")).spawn())
        .collect();
    for (k, c) in clients.into_iter().enumerate() {
        c.await
            .unwrap()
            .expect_status(200)
            .expect_body(format!("/u{k}"));
    }
}

// w20001: 50 concurrent unique misses through an h2 upstream: all 200 with
// their own bodies, all 50 over HTTP/2 on one connection (50 streams in
// flight at once); `/metrics` counts the connection by protocol.
#[tokio::test]
async fn w20001_concurrent_misses_share_one_connection() {
    let t = Test::new("w20001");
    let origin = all_at_once(&t, 50, None).await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).admin().start().await;
    misses(&t, &proxy, 50).await;
    assert_eq!((origin.requests(), origin.http2_requests()), (50, 50));
    assert_eq!(origin.connections(), 1);
    assert_eq!(origin.most_streams(), 50);
    proxy
        .expect_counter("origin_connections_h2", 1)
        .expect_counter("origin_connections_h1", 0)
        .expect_counter("origin_connections_reused", 49)
        .expect_counter("origin_streams_refused", 0);
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    for line in [
        "hoard_origin_connections_total{upstream=\"default\",protocol=\"h2\"} 1",
        "hoard_origin_connections_total{upstream=\"default\",protocol=\"h1\"} 0",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    super::o_metrics::promtool_accepts(&text);
}

// w20002: an origin that allows 4 streams at once: 20 concurrent fills
// open 5 connections, never more than 4 streams on one, none refused.
#[tokio::test]
async fn w20002_more_connections_only_at_the_servers_stream_limit() {
    let t = Test::new("w20002");
    let origin = all_at_once(&t, 20, Some(4)).await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    misses(&t, &proxy, 20).await;
    assert_eq!(origin.requests(), 20);
    assert!(origin.most_streams() <= 4, "{}", origin.most_streams());
    assert_eq!(origin.connections(), 5);
    proxy
        .expect_counter("origin_connections_h2", 5)
        .expect_counter("origin_streams_refused", 0);
}

// w20003: `h2_max_streams` caps the streams hoard puts on one connection
// below what the server allows.
#[tokio::test]
async fn w20003_h2_max_streams_caps_a_connection() {
    let t = Test::new("w20003");
    let origin = all_at_once(&t, 6, None).await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2)
        .upstream(|u| u.h2_max_streams = 2)
        .start()
        .await;
    misses(&t, &proxy, 6).await;
    assert_eq!(origin.connections(), 3);
    assert!(origin.most_streams() <= 2);
}

/// `ca`'s certificate as a file of the case, trusted by the upstream.
fn trusting(t: &Test, ca: &TestCa) -> hoard_config::origin_tls::OriginTls {
    let path = t.dir().join("ca.pem");
    ca.write(&path);
    hoard_config::origin_tls::build(&hoard_config::TlsSettings {
        ca: Some(path),
        ..hoard_config::TlsSettings::verified()
    })
    .unwrap()
}

fn https(t: &Test, addr: std::net::SocketAddr, ca: &TestCa, p: OriginProtocol) -> ProxyBuilder {
    let tls = trusting(t, ca);
    t.proxy().upstream(move |u| {
        u.servers = vec![ServerAddr {
            authority: addr.to_string(),
            tls: true,
            host: "127.0.0.1".into(),
        }];
        u.tls = Some(tls);
        u.protocol = p;
    })
}

// w20004: over TLS: `h2` offers ALPN `h2` and speaks HTTP/2; `auto` with
// an HTTP/2 server does too; `auto` with a server that only takes
// `http/1.1` falls back to HTTP/1.1.
#[tokio::test]
async fn w20004_tls_alpn_h2_and_auto() {
    let t = Test::new("w20004");
    let ca = TestCa::new();
    let cert = ca.issue(&["127.0.0.1"]);
    for p in [OriginProtocol::H2, OriginProtocol::Auto] {
        let origin = t
            .h2_origin()
            .tls(ca.server_config(&cert, false))
            .handler(|r| async move { Reply::ok(format!("h2 {}", r.path()), &[]) })
            .start()
            .await;
        let proxy = https(&t, origin.addr(), &ca, p).start().await;
        for path in ["/a", "/b"] {
            t.client(&proxy)
                .get(path)
                .send()
                .await
                .expect_status(200)
                .expect_body(format!("h2 {path}"));
        }
        assert_eq!(origin.alpn(), [Some("h2".to_string())], "{p:?}");
        assert_eq!((origin.http2_requests(), origin.connections()), (2, 1));
        proxy
            .expect_counter("origin_connections_h2", 1)
            .expect_counter("origin_tls_handshakes", 1);
    }
    // An HTTP/1.1-only origin (ALPN `http/1.1`) with `auto`.
    let origin = t
        .origin()
        .tls(ca.server_config(&cert, false))
        .script(|mut s| async move {
            s.serve_fresh("/a", 60, "h1 /a").await;
            s.serve_fresh("/b", 60, "h1 /b").await;
        })
        .start()
        .await;
    let proxy = https(&t, origin.addr(), &ca, OriginProtocol::Auto)
        .start()
        .await;
    for path in ["/a", "/b"] {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_body(format!("h1 {path}"));
    }
    assert_eq!(origin.connections(), 1, "pooled");
    proxy
        .expect_counter("origin_connections_h1", 1)
        .expect_counter("origin_connections_h2", 0)
        .expect_counter("origin_connections_reused", 1);
    origin.finish().await;
}

// w20005: an origin that sends a graceful GOAWAY after every second
// request: later requests go on a new connection, none fails.
#[tokio::test]
async fn w20005_goaway_moves_requests_to_a_new_connection() {
    let t = Test::new("w20005");
    let origin = t
        .h2_origin()
        .goaway_after(2)
        .handler(
            |r| async move { Reply::ok(r.path().to_string(), &[("cache-control", "no-store")]) },
        )
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    for k in 0..6 {
        t.client(&proxy)
            .get(&format!("/g{k}"))
            .send()
            .await
            .expect_status(200)
            .expect_body(format!("/g{k}"));
    }
    assert_eq!((origin.requests(), origin.connections()), (6, 3));
    proxy.expect_counter("origin_connections_h2", 3);
    // A burst across the GOAWAY: all answered.
    let clients: Vec<_> = (0..10)
        .map(|k| t.client(&proxy).get(&format!("/b{k}")).spawn())
        .collect();
    for (k, c) in clients.into_iter().enumerate() {
        c.await
            .unwrap()
            .expect_status(200)
            .expect_body(format!("/b{k}"));
    }
}

// w20006: a stream the origin refuses (REFUSED_STREAM) is retried on
// another connection; the client sees the answer.
#[tokio::test]
async fn w20006_refused_stream_is_retried_on_another_connection() {
    let t = Test::new("w20006");
    let origin = t
        .h2_origin()
        .handler(|r| async move {
            match r.seq {
                1 => Reply::Refuse,
                _ => Reply::ok("second", &[]),
            }
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_status(200)
        .expect_body("second");
    assert_eq!((origin.requests(), origin.connections()), (2, 2));
    proxy
        .expect_counter("origin_streams_refused", 1)
        .expect_counter("origin_retries", 1)
        .expect_counter("origin_failovers", 0);
}

/// Two servers: `a` answers with `bad`, `b` with its name.
async fn failover_pair(t: &Test, bad: fn() -> Reply) -> (H2Origin, H2Origin) {
    let a = t
        .h2_origin()
        .handler(move |_| async move { bad() })
        .start()
        .await;
    let b = t
        .h2_origin()
        .handler(|_| async { Reply::ok("b", &[]) })
        .start()
        .await;
    (a, b)
}

// w20007: a server that refuses every stream: retried once on another of
// its connections, then the request fails over to the next server.
#[tokio::test]
async fn w20007_refusing_server_fails_over() {
    let t = Test::new("w20007");
    let (a, b) = failover_pair(&t, || Reply::Refuse).await;
    let proxy = to(&t, &[&a, &b], OriginProtocol::H2).start().await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_status(200)
        .expect_body("b");
    assert_eq!((a.requests(), a.connections(), b.requests()), (2, 2, 1));
    proxy
        .expect_counter("origin_streams_refused", 2)
        .expect_counter("origin_failovers", 1);
}

// w20008: a connection that drops before the response head: the request
// (a GET) fails over to the next server, as with HTTP/1.1.
#[tokio::test]
async fn w20008_connection_reset_before_response_fails_over() {
    let t = Test::new("w20008");
    let (a, b) = failover_pair(&t, || Reply::DropConnection).await;
    let proxy = to(&t, &[&a, &b], OriginProtocol::H2).start().await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_status(200)
        .expect_body("b");
    assert_eq!((a.requests(), b.requests()), (1, 1));
    proxy.expect_counter("origin_failovers", 1);
}

// w20009: a stream reset mid-body is a cut fill, as a truncated HTTP/1.1
// body: the client's body is aborted, nothing is stored, the next request
// goes to the origin.
#[tokio::test]
async fn w20009_stream_reset_mid_body_aborts_the_fill() {
    let t = Test::new("w20009");
    let go = Arc::new(Notify::new());
    let reset = go.clone();
    let origin = t
        .h2_origin()
        .handler(move |r| {
            let reset = reset.clone();
            async move {
                match r.seq {
                    1 => Reply::ResetMidBody(
                        http::Response::builder()
                            .status(200)
                            .header("content-length", "100")
                            .header("cache-control", "max-age=60")
                            .body(())
                            .unwrap(),
                        bytes::Bytes::from_static(&[b'x'; 10]),
                        reset,
                    ),
                    _ => Reply::ok("whole", &[("cache-control", "max-age=60")]),
                }
            }
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.get("/m").tx().await;
    // The head and the first bytes reached the client: now the reset.
    c.read_until("xxxxxxxxxx").await;
    go.notify_one();
    c.expect_closed().await;
    proxy.wait_counter("fills_aborted", 1).await;
    proxy.expect_counter("objects_stored", 0);
    t.client(&proxy).get("/m").send().await.expect_body("whole");
    assert_eq!(origin.requests(), 2);
}

// w20010: a stream never answered: 504 after the read timeout, the stream
// cancelled, and the server down after it (down_after = 1), as with
// HTTP/1.1.
#[tokio::test]
async fn w20010_unanswered_stream_times_out_and_marks_the_server_down() {
    let t = Test::new("w20010");
    let origin = t
        .h2_origin()
        .handler(|_| async { Reply::Hang })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2)
        .upstream(|u| {
            u.read_timeout = Duration::from_millis(300);
            u.down_after = 1;
        })
        .admin()
        .start()
        .await;
    t.client(&proxy).get("/t").send().await.expect_status(504);
    proxy.expect_counter("origin_timeouts", 1);
    let st = crate::admin::status(&t, &proxy).await;
    assert_eq!(st["upstreams"][0]["servers"][0]["state"], "down", "{st}");
    assert_eq!(origin.requests(), 1);
}

// w20011: N clients for one key over an h2 upstream: one origin request,
// the others wait for its fill.
#[tokio::test]
async fn w20011_coalescing_holds_on_h2() {
    let t = Test::new("w20011");
    let release = Arc::new(Notify::new());
    let origin = t
        .h2_origin()
        .handler({
            let release = release.clone();
            move |_| {
                let release = release.clone();
                async move {
                    release.notified().await;
                    Reply::ok("shared", &[("cache-control", "max-age=60")])
                }
            }
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    let clients: Vec<_> = (0..5).map(|_| t.client(&proxy).get("/c").spawn()).collect();
    proxy.wait_counter("fill_waiters_total", 4).await;
    release.notify_one();
    for c in clients {
        c.await.unwrap().expect_status(200).expect_body("shared");
    }
    assert_eq!(origin.requests(), 1);
    proxy.expect_counter("origin_requests", 1);
}

// w20012: what reaches an HTTP/2 origin: the client's Host as
// `:authority` (no Host field), scheme http, no connection-specific field;
// the response's Via says HTTP/2.
#[tokio::test]
async fn w20012_host_becomes_authority() {
    let t = Test::new("w20012");
    let seen = Arc::new(parking_lot::Mutex::new(None));
    let origin = t
        .h2_origin()
        .handler({
            let seen = seen.clone();
            move |r| {
                *seen.lock() = Some(r);
                async { Reply::ok("ok", &[]) }
            }
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    let resp = t
        .client(&proxy)
        .get("/h?q=1")
        .hdr("Host", "site.test")
        .hdr("Connection", "keep-alive, x-private")
        .hdr("X-Private", "1")
        .hdr("TE", "trailers")
        .send()
        .await;
    resp.expect_status(200);
    // Via names the protocol the response came over (RFC 9110 §7.6.3).
    assert!(
        resp.header("via").is_some_and(|v| v.starts_with("2 ")),
        "{resp:?}"
    );
    let r = seen.lock().take().expect("a request");
    assert_eq!(r.uri.to_string(), "http://site.test/h?q=1");
    for name in [
        "host",
        "connection",
        "keep-alive",
        "x-private",
        "transfer-encoding",
        "upgrade",
    ] {
        assert!(!r.headers.contains_key(name), "{name} in {:?}", r.headers);
    }
    assert!(r.headers.get("te").is_none_or(|v| v == "trailers"));
}

// w20013: a WebSocket upgrade on an upstream with protocol h2 goes over
// HTTP/1.1.
#[tokio::test]
async fn w20013_upgrades_go_over_http1() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let t = Test::new("w20013");
    let (addr, _echo) = super::b_websocket::echo_origin().await;
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![ServerAddr::http(addr.to_string())];
            u.protocol = OriginProtocol::H2;
        })
        .start()
        .await;
    let mut ws = super::b_websocket::connect(&proxy).await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    let back = ws.next().await.unwrap().unwrap();
    assert_eq!(back.into_text().unwrap().as_str(), "hello");
    proxy
        .expect_counter("origin_connections_h1", 1)
        .expect_counter("origin_connections_h2", 0);
}

// w20014: an HTTP/2 connection with no stream for `idle_timeout` is
// closed, and the next request opens a new one; with `max_idle = 0` a
// connection closes as soon as its last stream ends.
#[tokio::test]
async fn w20014_idle_connections_close() {
    let t = Test::new("w20014");
    let origin = t
        .h2_origin()
        .handler(
            |r| async move { Reply::ok(r.path().to_string(), &[("cache-control", "no-store")]) },
        )
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2)
        .upstream(|u| u.idle_timeout = Duration::from_millis(200))
        .start()
        .await;
    t.client(&proxy).get("/i1").send().await.expect_body("/i1");
    origin.wait_closed(1).await;
    t.client(&proxy).get("/i2").send().await.expect_body("/i2");
    assert_eq!(origin.connections(), 2);
    let proxy = to(&t, &[&origin], OriginProtocol::H2)
        .upstream(|u| u.max_idle = 0)
        .start()
        .await;
    t.client(&proxy).get("/i3").send().await.expect_body("/i3");
    origin.wait_closed(3).await;
    assert_eq!(origin.connections(), 3);
}

// w20015: a server that allows no stream at all (`SETTINGS_MAX_CONCURRENT_
// STREAMS = 0`, RFC 9113 §6.5.2: it does not wish to take requests) is a
// refused connection, not a place to queue: the request fails over to the
// next server at once, and with no other server it is a 502 (not a wait
// for the read timeout), for concurrent requests too; the server never
// sees a request.
#[tokio::test]
async fn w20015_a_server_allowing_no_stream_is_refused() {
    let t = Test::new("w20015");
    let a = t
        .h2_origin()
        .max_streams(0)
        .handler(|_| async { Reply::ok("a", &[]) })
        .start()
        .await;
    let b = t
        .h2_origin()
        .handler(|_| async { Reply::ok("b", &[]) })
        .start()
        .await;
    let hour = Duration::from_secs(3600);
    let proxy = to(&t, &[&a, &b], OriginProtocol::H2)
        .upstream(move |u| u.read_timeout = hour)
        .start()
        .await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_status(200)
        .expect_body("b");
    assert_eq!((a.requests(), b.requests()), (0, 1));
    assert!(a.connections() >= 1);
    proxy
        .expect_counter("origin_failovers", 1)
        .expect_counter("origin_connect_errors", 1);

    let alone = to(&t, &[&a], OriginProtocol::H2)
        .upstream(move |u| u.read_timeout = hour)
        .start()
        .await;
    let clients: Vec<_> = (0..4)
        .map(|k| t.client(&alone).get(&format!("/n{k}")).spawn())
        .collect();
    for c in clients {
        c.await.unwrap().expect_status(502);
    }
    assert_eq!(a.requests(), 0);
}

// w20016: `/status` shows each server's connections: three fills in flight
// over HTTP/2 are three streams on one connection; once they are answered
// the connection stays open with none.
#[tokio::test]
async fn w20016_status_shows_http2_connections_and_streams() {
    let t = Test::new("w20016");
    let arrived = Arc::new(Barrier::new(4));
    let release = Arc::new(Notify::new());
    let origin = t
        .h2_origin()
        .handler({
            let (arrived, release) = (arrived.clone(), release.clone());
            move |r| {
                let (arrived, release) = (arrived.clone(), release.clone());
                async move {
                    let go = release.notified();
                    arrived.wait().await;
                    go.await;
                    Reply::ok(r.path().to_string(), &[("cache-control", "max-age=60")])
                }
            }
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).admin().start().await;
    let clients: Vec<_> = (0..3)
        .map(|k| t.client(&proxy).get(&format!("/s{k}")).spawn())
        .collect();
    arrived.wait().await;
    // (HTTP/1.1 idle, HTTP/2 open, HTTP/2 streams) as `/status` shows them.
    let connections = || async {
        let st = crate::admin::status(&t, &proxy).await;
        let c = &st["upstreams"][0]["servers"][0]["connections"];
        let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {st}"));
        (n("http1_idle"), n("http2"), n("http2_streams"))
    };
    assert_eq!(connections().await, (0, 1, 3));
    release.notify_waiters();
    for (k, c) in clients.into_iter().enumerate() {
        c.await
            .unwrap()
            .expect_status(200)
            .expect_body(format!("/s{k}"));
    }
    assert_eq!(connections().await, (0, 1, 0));
    assert_eq!(origin.connections(), 1);
}

// w20017: a `103 Early Hints` from an HTTP/2 origin: the final response
// reaches the client whole and is stored, a hit of it after; the hint is
// not relayed (hyper's HTTP/2 client does not surface 1xx heads, unlike
// its HTTP/1.1 client, see f00060), so the client's first head is the 200.
#[tokio::test]
async fn w20017_early_hints_from_an_http2_origin() {
    let t = Test::new("w20017");
    let origin = t
        .h2_origin()
        .handler(|_| async {
            let hints = http::Response::builder()
                .status(103)
                .header("link", "</style.css>; rel=preload")
                .body(())
                .unwrap();
            let Reply::Full(page) = Reply::ok("page", &[("cache-control", "max-age=600")]) else {
                unreachable!()
            };
            Reply::Interim(hints, page)
        })
        .start()
        .await;
    let proxy = to(&t, &[&origin], OriginProtocol::H2).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /page HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_no_header("link")
        .expect_body("page");
    t.client(&proxy)
        .get("/page")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit")
        .expect_body("page");
    assert_eq!((origin.requests(), origin.interims_sent()), (1, 1));
}
