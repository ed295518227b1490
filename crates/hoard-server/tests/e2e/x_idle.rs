//! x: idle connections are cheap. An HTTP/1.x keep-alive connection quiet
//! between two requests is parked (hyper's buffers freed) and serves its
//! next request on the same socket, whatever shape that request arrives in.
//! An HTTP/2 connection with no stream open releases its write batching
//! buffer when quiet and serves its next stream.

use std::time::Duration;

use hoard_testkit::{Endpoint, Test};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;

/// A 40 ms head timeout makes the watchdog's tick 10 ms, so a connection
/// parks within about 20 ms of going quiet.
fn quick_ticks(c: &mut hoard_config::Config) {
    c.server.header_read_timeout = Duration::from_millis(40);
}

// x00001: a plain keep-alive connection is parked after its first request,
// then answers a second one (a hit) on the same socket, parks again, and
// answers two pipelined requests sent in one write and a head that arrives
// in two writes; the origin sees one request.
#[tokio::test]
async fn x00001_a_parked_connection_serves_its_next_requests() {
    let t = Test::new("x00001");
    let origin = t.origin().script_fresh("/a", 600, "aaa").start().await;
    let proxy = t.proxy().origin(&origin).config(quick_ticks).start().await;
    let mut conn = t.client(&proxy).connect().await;
    conn.get("/a").send().await.expect_body("aaa");
    proxy.wait_counter("connections_parked", 1).await;

    conn.get("/a")
        .send()
        .await
        .expect_body("aaa")
        .expect_cache_status("hit");
    proxy.wait_counter("connections_parked", 2).await;

    // Two requests in one write: the second stays in hyper's buffer while
    // the first is answered, and is answered in turn.
    conn.send_raw(
        "GET /a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /a HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .await;
    conn.read_response().await.expect_body("aaa");
    conn.read_response().await.expect_body("aaa");
    proxy.wait_counter("connections_parked", 3).await;

    // A head in two writes: the first wakes the parked connection.
    conn.send_raw("GET /a HTTP/1.1\r\nHo").await;
    conn.send_raw("st: localhost\r\n\r\n").await;
    conn.read_response().await.expect_body("aaa");
    proxy.wait_counter("connections_parked", 4).await;

    assert_eq!(proxy.counter("connections_idle_closed"), 0);
    assert_eq!(proxy.counter("connections_accepted"), 1);
    origin.finish().await;
}

// x00002: over TLS (HTTP/1.1 by ALPN) a parked connection keeps its TLS
// session: the next request on it is answered.
#[tokio::test]
async fn x00002_a_parked_tls_connection_keeps_its_session() {
    let t = Test::new("x00002");
    let origin = t.origin().script_fresh("/s", 600, "sss").start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            super::h_tls::tls_listener(c);
            quick_ticks(c);
        })
        .start()
        .await;
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = super::h_tls::connector(&[b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    for parked in 1..=2 {
        let req = http::Request::get("/s")
            .header("host", "localhost")
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            b"sss"
        );
        proxy.wait_counter("connections_parked", parked).await;
    }
    assert_eq!(proxy.counter("connections_accepted"), 1);
    origin.finish().await;
}

// x00003: a parked connection still ends at `keep_alive_timeout`, counted
// as an idle close.
#[tokio::test]
async fn x00003_a_parked_connection_is_closed_when_idle_too_long() {
    let t = Test::new("x00003");
    let origin = t.origin().script_fresh("/k", 600, "kkk").start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            quick_ticks(c);
            c.server.keep_alive_timeout = Duration::from_millis(300);
        })
        .start()
        .await;
    let mut conn = t.client(&proxy).connect().await;
    conn.get("/k").send().await.expect_body("kkk");
    proxy.wait_counter("connections_parked", 1).await;
    conn.expect_closed().await;
    proxy.expect_counter("connections_idle_closed", 1);
    proxy.expect_counter("connections_parked", 1);
    origin.finish().await;
}

// x00004: an HTTP/2 connection (prior knowledge) that answered a 300 KiB
// response and went quiet is parked: its batching buffer, grown by that
// response, is released. Its next stream (a hit) gets the whole body, it
// parks again, and it stayed one connection with one origin request.
#[tokio::test]
async fn x00004_a_quiet_http2_connection_releases_its_buffer_and_serves_on() {
    let t = Test::new("x00004");
    let big: String = "0123456789abcdef".repeat(300 * 1024 / 16);
    let origin = t.origin().script_fresh("/big", 600, &big).start().await;
    let proxy = t.proxy().origin(&origin).config(quick_ticks).start().await;
    let mut send = super::h_http2::h2c(&proxy).await;
    for (parked, want) in [(1, "fwd=uri-miss"), (2, "hit")] {
        let req = http::Request::get("http://localhost/big")
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let status = resp.headers()["cache-status"].to_str().unwrap().to_string();
        assert!(status.contains(want), "{status}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body.len(), big.len());
        assert!(body == big.as_bytes(), "the body arrived intact");
        proxy.wait_counter("connections_parked", parked).await;
    }
    assert_eq!(proxy.counter("connections_accepted"), 1);
    assert_eq!(proxy.counter("connections_idle_closed"), 0);
    origin.finish().await;
}
