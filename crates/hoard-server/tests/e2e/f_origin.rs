//! f: origins that misbehave. Each broken answer gets a 502 (or a cut
//! body), is never stored, and its connection is not used again.

use hoard_testkit::Test;

/// Raw answers whose head or framing is broken: each must be a 502.
const BROKEN: [(&str, &str); 5] = [
    ("malformed status line", "HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok"),
    ("a status line of garbage", "HTTP/9 hello\r\n\r\n"),
    (
        "two different Content-Length values",
        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk",
    ),
    (
        "Content-Length and Transfer-Encoding",
        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    ),
    (
        "a 204 with a body",
        "HTTP/1.1 204 No Content\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nhello",
    ),
];

// f00030: each broken answer is a 502 that names a bad response; nothing is
// stored (the next request goes to the origin) and the next request comes
// on a new connection.
#[tokio::test]
async fn f00030_broken_origin_answers_are_502_and_never_stored() {
    for (what, raw) in BROKEN {
        expect_502_not_stored("f00030", what, raw.to_string()).await;
    }
}

/// The origin answers `/x` with `raw`: the client gets 502 naming a bad
/// response; the next `/x` reaches the origin again, on a new connection.
async fn expect_502_not_stored(name: &str, what: &'static str, raw: String) {
    let t = Test::new(name);
    let origin = t
        .origin()
        .script(move |mut s| async move {
            let first = s.rxreq().await;
            s.send_raw(&raw).await;
            let second = s.rxreq().await;
            assert_ne!(second.conn(), first.conn(), "{what}: connection reused");
            s.txresp_fresh(60, "fine").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/x")
        .send()
        .await
        .expect_status(502)
        .expect_cache_status("detail=bad-response");
    t.client(&proxy)
        .get("/x")
        .send()
        .await
        .expect_status(200)
        .expect_body("fine")
        .expect_cache_status("fwd=uri-miss");
    origin.finish().await;
}

// f00031: a body longer than its Content-Length is cut at the declared
// length, and the connection with the extra bytes is not used again; an
// interim 102 before the answer is skipped (RFC 9110 §15.2).
#[tokio::test]
async fn f00031_overlong_body_is_cut_and_its_connection_dropped() {
    let t = Test::new("f00031");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let first = s.rxreq().await;
            s.send_raw("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nokEXTRA")
                .await;
            let second = s.rxreq().await;
            second.expect_url("/y");
            assert_ne!(second.conn(), first.conn(), "connection with extra bytes reused");
            s.txresp_fresh(60, "y").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/x").send().await.expect_body("ok");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/x")
        .send()
        .await
        .expect_body("ok")
        .expect_cache_status("hit");
    t.client(&proxy).get("/y").send().await.expect_body("y");
    origin.finish().await;
}

// f00032: a response head over the limits (a 600 KB field, or 200 fields)
// is a 502, never stored, and its connection is not used again.
#[tokio::test]
async fn f00032_oversized_origin_heads_are_502() {
    let huge_field = format!(
        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nX-Big: {}\r\nContent-Length: 2\r\n\r\nok",
        "v".repeat(600_000)
    );
    let many_fields = format!(
        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n{}Content-Length: 2\r\n\r\nok",
        (0..200)
            .map(|i| format!("X-F{i}: v\r\n"))
            .collect::<String>()
    );
    expect_502_not_stored("f00032", "a 600 KB field", huge_field).await;
    expect_502_not_stored("f00032", "200 fields", many_fields).await;
}

// f00033: a response whose body stops arriving is cut after the upstream
// read timeout: the client sees a truncated (closed) response, nothing is
// stored, and the next request goes to the origin on a new connection.
#[tokio::test]
async fn f00033_response_that_never_ends_is_cut() {
    let t = Test::new("f00033");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let first = s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .chunked()
                .send_head()
                .await;
            s.chunk("part").await;
            // ...and nothing more, ever, on this connection.
            let second = s.rxreq_concurrent().await;
            assert_ne!(second.conn(), first.conn(), "stalled connection reused");
            s.switch_to(&second);
            s.txresp_fresh(60, "fine").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .upstream(|u| u.read_timeout = std::time::Duration::from_millis(200))
        .start()
        .await;
    let cut = t.client(&proxy).get("/x").try_send().await;
    assert!(cut.is_err(), "a cut body must not look complete: {cut:?}");
    t.client(&proxy)
        .get("/x")
        .send()
        .await
        .expect_body("fine")
        .expect_cache_status("fwd=uri-miss");
    origin.finish().await;
}
