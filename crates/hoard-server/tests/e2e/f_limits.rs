//! f: robustness: limits on request heads, targets and bodies; framing conflicts.

use hoard_testkit::Test;

// f00001: a request head over the size limit gets 431.
#[tokio::test]
async fn f00001_oversized_head_is_431() {
    let t = Test::new("f00001");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let big = "x".repeat(20_000);
    let mut c = t.client(&proxy).connect().await;
    c.send_raw(format!("GET / HTTP/1.1\r\nHost: a\r\nX-Big: {big}\r\n\r\n"))
        .await;
    c.read_response().await.expect_status(431);
    origin.finish().await;
}

// f00002: too many header fields get 431.
#[tokio::test]
async fn f00002_too_many_headers_is_431() {
    let t = Test::new("f00002");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut req = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
    for i in 0..150 {
        req.push_str(&format!("X-H{i}: v\r\n"));
    }
    req.push_str("\r\n");
    let mut c = t.client(&proxy).connect().await;
    c.send_raw(req).await;
    c.read_response().await.expect_status(431);
    origin.finish().await;
}

// f00003: a request target over the limit gets 414.
#[tokio::test]
async fn f00003_long_uri_is_414() {
    let t = Test::new("f00003");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let path = format!("/{}", "a".repeat(9000));
    t.client(&proxy).get(&path).send().await.expect_status(414);
    proxy.expect_counter("client_errors", 1);
    origin.finish().await;
}

// f00004: a declared body over the limit gets 413 without reaching the origin.
#[tokio::test]
async fn f00004_body_too_large_is_413() {
    let t = Test::new("f00004");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_body_size = 1000)
        .start()
        .await;
    t.client(&proxy)
        .post("/up")
        .body(vec![b'b'; 2000])
        .send()
        .await
        .expect_status(413);
    origin.finish().await;
}

// f00005: Content-Length with Transfer-Encoding (a smuggling vector): the body is framed by
// Transfer-Encoding alone and the connection is closed after the response (RFC 9112 §6.1),
// so the request hidden behind it never reaches the origin.
#[tokio::test]
async fn f00005_cl_and_te_cannot_smuggle() {
    let t = Test::new("f00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_method("POST")
                .expect_url("/")
                .expect_body("")
                .expect_no_header("content-length");
            s.txresp(200).body("ok").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n").await;
    c.read_response().await.expect_status(200);
    c.expect_closed().await;
    origin.finish().await;
}

// f00006: a malformed request line gets 400.
#[tokio::test]
async fn f00006_garbage_is_400() {
    let t = Test::new("f00006");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET\x01 / HTTP/1.1\r\n\r\n").await;
    c.read_response().await.expect_status(400);
    origin.finish().await;
}

// f00007: a client that does not finish its request head within the header read timeout is disconnected.
#[tokio::test]
async fn f00007_header_read_timeout_closes() {
    let t = Test::new("f00007");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.header_read_timeout = std::time::Duration::from_millis(200))
        .start()
        .await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ").await;
    c.expect_closed().await;
    proxy.expect_counter("connections_head_timeout", 1);
    origin.finish().await;
}

// f00008: a chunked request body that grows past the limit gets 413, not a 502.
#[tokio::test]
async fn f00008_streamed_body_over_limit_is_413() {
    let t = Test::new("f00008");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_body_size = 1000)
        .start()
        .await;
    let mut c = t.client(&proxy).connect().await;
    let chunk = "x".repeat(600);
    c.send_raw(format!("POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n")).await;
    c.read_response().await.expect_status(413);
    proxy.expect_counter("client_errors", 1);
    origin.finish().await; // strict: no complete request reached the origin
}

// f00009: clients that connect and never send a byte are closed on the head
// timeout (50 of them), and a real client is served meanwhile.
#[tokio::test]
async fn f00009_silent_connections_are_closed() {
    let t = Test::new("f00009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200).body("served").send().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.header_read_timeout = std::time::Duration::from_millis(300))
        .start()
        .await;
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(t.client(&proxy).connect().await);
    }
    t.client(&proxy).get("/").send().await.expect_body("served");
    for c in &mut silent {
        c.expect_closed().await;
    }
    proxy.expect_counter("connections_silent", 50);
    origin.finish().await;
}

// f00010: past `max_connections`, a new connection is closed at once (not
// queued); when one closes, a new one is served again.
#[tokio::test]
async fn f00010_max_connections() {
    let t = Test::new("f00010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..3 {
                s.rxreq().await;
                s.txresp_no_store("ok").await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_connections = 2)
        .start()
        .await;
    let mut first = t.client(&proxy).connect().await;
    first
        .get("/")
        .hdr("Connection", "keep-alive")
        .send()
        .await
        .expect_body("ok");
    let mut second = t.client(&proxy).connect().await;
    second
        .get("/")
        .hdr("Connection", "keep-alive")
        .send()
        .await
        .expect_body("ok");
    let mut third = t.client(&proxy).connect().await;
    third.expect_closed().await;
    proxy.expect_counter("connections_refused", 1);
    drop(first);
    // The server notices the close and frees the permit: then a client is served.
    proxy.wait_counter("connections_closed", 1).await;
    t.client(&proxy).get("/").send().await.expect_body("ok");
    drop(second);
    origin.finish().await;
}

// f00011: a keep-alive connection carries at most `max_requests_per_connection`
// requests: the last is answered with `Connection: close` and the
// connection ends; a new one is served.
#[tokio::test]
async fn f00011_keep_alive_request_limit() {
    let t = Test::new("f00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(600, "ok").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_requests_per_connection = 3)
        .start()
        .await;
    let mut conn = t.client(&proxy).connect().await;
    for i in 1..=3 {
        let r = conn.get("/k").hdr("Connection", "keep-alive").send().await;
        r.expect_body("ok");
        if i < 3 {
            r.expect_no_header("connection");
        } else {
            r.expect_header("connection", "close");
        }
    }
    conn.expect_closed().await;
    t.client(&proxy).get("/k").send().await.expect_body("ok");
    origin.finish().await;
}

// f00012: with `max_connections` open and some of them silent (no byte
// sent), a new client is served: the oldest silent connection is closed
// to make room, so silent sockets cannot lock real clients out.
#[tokio::test]
async fn f00012_silent_connections_make_room() {
    let t = Test::new("f00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200).body("served").send().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_connections = 2)
        .start()
        .await;
    let mut oldest = t.client(&proxy).connect().await;
    proxy.wait_counter("connections_accepted", 1).await;
    let _newer = t.client(&proxy).connect().await;
    proxy.wait_counter("connections_accepted", 2).await;
    t.client(&proxy).get("/").send().await.expect_body("served");
    oldest.expect_closed().await;
    proxy.expect_counter("connections_reclaimed", 1);
    proxy.expect_counter("connections_refused", 0);
    origin.finish().await;
}

/// The origin takes a request, waits until the client has closed its
/// sending side, then answers; with `ignore_client_abort` the client must
/// get that answer, without it only the connection's close.
async fn half_closed_client(name: &str, ignore_client_abort: bool) {
    let t = Test::new(name);
    let has_it = t.barrier(2);
    let closed = t.barrier(2);
    let (o_has_it, o_closed) = (has_it.clone(), closed.clone());
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/slow");
            o_has_it.sync().await;
            o_closed.sync().await;
            // Dropped by the proxy or not: a failed write is logged, not fatal.
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("late")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(move |c| c.server.ignore_client_abort = ignore_client_abort)
        .start()
        .await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n").await;
    has_it.sync().await;
    c.shutdown_write().await;
    if ignore_client_abort {
        closed.sync().await;
        let r = c.read_response().await;
        r.expect_status(200).expect_body("late");
        c.expect_closed().await;
    } else {
        c.expect_closed().await;
        closed.sync().await;
    }
    origin.finish().await;
}

// f00063: by default (as nginx), a client that closes its sending side while
// its request waits for the origin is taken to have gone: the connection is
// closed without an answer, as soon as the close arrives.
#[tokio::test]
async fn f00063_a_client_that_closes_mid_request_is_dropped() {
    half_closed_client("f00063", false).await;
}

// f00064: with `ignore_client_abort` (as Varnish, nginx's
// `proxy_ignore_client_abort on`), the same client gets its answer, and the
// connection closes after it.
#[tokio::test]
async fn f00064_ignore_client_abort_answers_a_half_closed_client() {
    half_closed_client("f00064", true).await;
}

// f00065: a request pipelined behind one that waits for the origin, sent
// while it waits and longer than what hyper's read in flight takes at once
// (64 bytes, see vendor/README.md), is read whole and answered after it.
#[tokio::test]
async fn f00065_a_request_sent_while_the_previous_one_waits_is_answered_next() {
    let t = Test::new("f00065");
    let has_it = t.barrier(2);
    let sent = t.barrier(2);
    let (o_has_it, o_sent) = (has_it.clone(), sent.clone());
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/first");
            o_has_it.sync().await;
            o_sent.sync().await;
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("one")
                .send()
                .await;
            let second = s.rxreq().await;
            second
                .expect_url("/second")
                .expect_header("x-long", &"l".repeat(300));
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("two")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /first HTTP/1.1\r\nHost: a\r\n\r\n").await;
    has_it.sync().await;
    let long = "l".repeat(300);
    c.send_raw(format!(
        "GET /second HTTP/1.1\r\nHost: a\r\nX-Long: {long}\r\n\r\n"
    ))
    .await;
    sent.sync().await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_body("one");
    c.read_response()
        .await
        .expect_status(200)
        .expect_body("two");
    origin.finish().await;
}
