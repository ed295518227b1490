//! b: the upstream side: errors, timeouts, keep-alive reuse, retry, Host, round-robin.

use std::time::Duration;

use hoard_config::{HostHeader, ServerAddr};
use hoard_testkit::Test;

// b00020: an origin that refuses connections gives 502.
#[tokio::test]
async fn b00020_origin_refused_is_502() {
    let t = Test::new("b00020");
    // Reserve a port, then close it so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(format!("127.0.0.1:{port}"))])
        .start()
        .await;

    let r = t.client(&proxy).get("/").send().await;
    r.expect_status(502)
        .expect_cache_status("detail=connect-refused");
    proxy.expect_counter("origin_connect_errors", 1);
}

// b00021: an origin that accepts but never answers gives 504 after the read timeout.
#[tokio::test]
async fn b00021_origin_timeout_is_504() {
    let t = Test::new("b00021");
    let answered = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let answered = answered.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/slow");
                answered.sync().await; // hold the request until the client saw its 504
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .upstream(|u| u.read_timeout = Duration::from_millis(200))
        .start()
        .await;

    t.client(&proxy)
        .get("/slow")
        .send()
        .await
        .expect_status(504)
        .expect_cache_status("detail=read-timeout");
    proxy.expect_counter("origin_timeouts", 1);
    answered.sync().await;
    origin.finish().await;
}

// b00022: keep-alive connections to the origin are reused.
#[tokio::test]
async fn b00022_origin_connection_reused() {
    let t = Test::new("b00022");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/1", "/2", "/3"] {
                s.serve_fresh(path, 60, path).await;
            }
            assert_eq!(
                s.connections(),
                1,
                "one origin connection for three requests"
            );
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    for path in ["/1", "/2", "/3"] {
        t.client(&proxy).get(path).send().await.expect_body(path);
    }
    proxy
        .expect_counter("origin_connections_opened", 1)
        .expect_counter("origin_connections_reused", 2);
    origin.finish().await;
}

// b00023: when a reused idle connection turns out dead, the request is retried once on a new one.
#[tokio::test]
async fn b00023_retry_once_on_dead_reused_connection() {
    let t = Test::new("b00023");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.serve_fresh("/1", 60, "one").await;
            let r = s.rxreq().await;
            r.expect_url("/2");
            assert_eq!(r.conn(), 1, "second request came on the reused connection");
            s.close().await; // the origin drops the connection without answering
            let r = s.rxreq().await;
            r.expect_url("/2");
            assert_eq!(r.conn(), 2, "retried on a new connection");
            s.txresp_fresh(60, "two").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    t.client(&proxy).get("/1").send().await.expect_body("one");
    t.client(&proxy)
        .get("/2")
        .send()
        .await
        .expect_status(200)
        .expect_body("two");
    proxy.expect_counter("origin_retries", 1);
    origin.finish().await;
}

// b00024: the Host sent to the origin follows the upstream's `host` setting.
#[tokio::test]
async fn b00024_host_as_configured() {
    let t = Test::new("b00024");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("host", "origin.internal");
            s.txresp_no_store("ok").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .upstream(|u| u.host = HostHeader::Fixed("origin.internal".into()))
        .start()
        .await;

    t.client(&proxy)
        .get("/")
        .hdr("Host", "public.example")
        .send()
        .await
        .expect_status(200);
    origin.finish().await;
}

// b00025: requests are spread round-robin over the servers of an upstream.
#[tokio::test]
async fn b00025_round_robin() {
    let t = Test::new("b00025");
    let s1 = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq().await;
                s.txresp_no_store("s1").await;
            }
        })
        .start()
        .await;
    let s2 = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq().await;
                s.txresp_no_store("s2").await;
            }
        })
        .start()
        .await;
    let (a1, a2) = (s1.addr().to_string(), s2.addr().to_string());
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![ServerAddr::http(a1), ServerAddr::http(a2)])
        .start()
        .await;

    let mut bodies = Vec::new();
    for _ in 0..4 {
        bodies.push(t.client(&proxy).get("/").send().await.text());
    }
    assert_eq!(bodies, ["s1", "s2", "s1", "s2"]);
    s1.finish().await;
    s2.finish().await;
}

// b00028: with `host = "server"`, each request (HTTP/1.0 without Host too)
// carries the Host of the server it actually goes to, round-robin over two.
#[tokio::test]
async fn b00028_host_is_the_server_the_request_goes_to() {
    let t = Test::new("b00028");
    // Each origin answers with its name and the Host it got.
    let origin = |t: &Test, name: &'static str, n: usize| {
        t.origin().script(move |mut s| async move {
            for _ in 0..n {
                let host = s.rxreq().await.header("host").unwrap_or_default();
                s.txresp_no_store(format!("{name} {host}")).await;
            }
        })
    };
    let (s1, s2) = (
        origin(&t, "s1", 2).start().await,
        origin(&t, "s2", 2).start().await,
    );
    let addr = |name: &str| match name {
        "s1" => s1.addr().to_string(),
        _ => s2.addr().to_string(),
    };
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![ServerAddr::http(addr("s1")), ServerAddr::http(addr("s2"))];
            u.host = HostHeader::Server;
        })
        .start()
        .await;
    let mut answered = Vec::new();
    for _ in 0..3 {
        answered.push(
            t.client(&proxy)
                .get("/")
                .hdr("Host", "public.example")
                .send()
                .await
                .text(),
        );
    }
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw("GET /old HTTP/1.0\r\n\r\n").await;
    answered.push(conn.read_response().await.text());
    for a in &answered {
        let (name, host) = a.split_once(' ').unwrap();
        assert_eq!(host, addr(name), "{answered:?}");
    }
    s1.finish().await;
    s2.finish().await;
}

// b00026: a body-less POST sent on a reused connection that the origin closes without
// answering must not be replayed (RFC 9110 §9.2.2: POST is not idempotent).
#[tokio::test]
async fn b00026_non_idempotent_request_not_replayed() {
    let t = Test::new("b00026");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/1");
            s.txresp_no_store("one").await;
            let r = s.rxreq().await;
            assert_eq!(r.method(), "POST");
            assert_eq!(r.conn(), 1);
            s.close().await; // processed, then the connection drops before the response
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/1").send().await.expect_body("one");
    t.client(&proxy).post("/x").send().await.expect_status(502);
    proxy.expect_counter("origin_retries", 0);
    origin.finish().await;
}

// b00030: shutdown closes the listener at once, lets the request in flight finish with its
// whole body, closes the drained keep-alive connection, and only then completes.
#[tokio::test]
async fn b00030_shutdown_drains_requests_in_flight() {
    let t = Test::new("b00030");
    let release = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let release = release.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/slow");
                release.sync().await;
                s.txresp_fresh(60, "finished").await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let addr = hoard_testkit::Endpoint::endpoint(&proxy);
    let mut c = t.client(&proxy).connect().await;
    c.get("/slow").tx().await;
    proxy.wait_counter("fills_started", 1).await;
    proxy.begin_stop();
    proxy.wait_counter("listeners_closed", 1).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "new connections are refused"
    );
    release.sync().await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_body("finished");
    c.expect_closed().await;
    proxy.stop().await;
    origin.finish().await;
}

// b00031: idle connections (HTTP/1.1 that never sent a byte, HTTP/1.1 keep-alive after a
// request, h2c after a request) do not hold up a shutdown.
#[tokio::test]
async fn b00031_idle_connections_do_not_delay_shutdown() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let t = Test::new("b00031");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "x").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.shutdown_timeout = std::time::Duration::from_secs(3600))
        .start()
        .await;
    let addr = hoard_testkit::Endpoint::endpoint(&proxy);
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut keep_alive = t.client(&proxy).connect().await;
    keep_alive.get("/a").send().await.expect_status(200);
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let h2 = tokio::spawn(conn);
    let req = http::Request::get("http://localhost/a")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    send.send_request(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap();
    // Failure detection only: a shutdown stuck on idle connections would wait an hour.
    tokio::time::timeout(std::time::Duration::from_secs(10), proxy.stop())
        .await
        .expect("idle connections delayed the shutdown");
    drop(send);
    let _ = h2.await;
    origin.finish().await;
}

// b00027: max_idle = 0 keeps no idle connection: every request opens a new one.
#[tokio::test]
async fn b00027_max_idle_zero_disables_reuse() {
    let t = Test::new("b00027");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/1", "/2"] {
                s.rxreq().await.expect_url(path);
                s.txresp_no_store(path).await;
            }
            assert_eq!(s.connections(), 2);
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .upstream(|u| u.max_idle = 0)
        .start()
        .await;
    for path in ["/1", "/2"] {
        t.client(&proxy).get(path).send().await.expect_body(path);
    }
    proxy
        .expect_counter("origin_connections_opened", 2)
        .expect_counter("origin_connections_reused", 0);
    origin.finish().await;
}

// b00085: an origin on a Unix socket (`unix:/path`): answered, stored,
// then served from cache; the Host it sees is the client's.
#[tokio::test]
async fn b00085_a_unix_socket_origin_is_cached() {
    let t = Test::new("b00085");
    let sock = t.dir().join("app.sock");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/u")
                .expect_header("host", "app.example");
            s.txresp_fresh(60, "from the socket").await;
        })
        .start_unix(&sock)
        .await;
    let proxy = t.proxy().unix_origin(&sock).start().await;
    for status in ["fwd=uri-miss", "hit"] {
        t.client(&proxy)
            .get("/u")
            .hdr("Host", "app.example")
            .send()
            .await
            .expect_status(200)
            .expect_cache_status(status)
            .expect_body("from the socket");
    }
    assert_eq!(origin.connections(), 1);
    origin.finish().await;
}

// b00086: a Unix socket that is not there is a 502 like a refused TCP
// origin; `host = "server"` sends `Host: localhost` to a socket.
#[tokio::test]
async fn b00086_a_missing_unix_socket_is_a_502() {
    let t = Test::new("b00086");
    let proxy = t
        .proxy()
        .unix_origin(&t.dir().join("nothing.sock"))
        .start()
        .await;
    t.client(&proxy)
        .get("/m")
        .send()
        .await
        .expect_status(502)
        .expect_cache_status("detail=connect-refused");
    proxy.expect_counter("origin_connect_errors", 1);

    let sock = t.dir().join("app.sock");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("host", "localhost");
            s.txresp(200).body("ok").send().await;
        })
        .start_unix(&sock)
        .await;
    let proxy = t
        .proxy()
        .unix_origin(&sock)
        .upstream(|u| u.host = HostHeader::Server)
        .start()
        .await;
    t.client(&proxy).get("/h").send().await.expect_status(200);
    origin.finish().await;
}
