//! `a` series: the harness tests itself (VTC `a` tests). The client talks to
//! the fake origin directly; no proxy is involved.

use std::sync::Arc;
use std::time::Duration;

use hoard_testkit::{ClientError, Test};
use parking_lot::Mutex;

/// The panic message of a task that is expected to have panicked.
async fn panic_message(task: tokio::task::JoinHandle<()>) -> String {
    let err = task.await.expect_err("task should have panicked");
    assert!(err.is_panic(), "task should have panicked, got {err}");
    let payload = err.into_panic();
    match (
        payload.downcast_ref::<String>(),
        payload.downcast_ref::<&str>(),
    ) {
        (Some(s), _) => s.clone(),
        (_, Some(s)) => (*s).to_owned(),
        _ => String::new(),
    }
}

// a00001: a scripted request/response round trip; the origin sees the request
// as sent and the client sees the response as scripted.
#[tokio::test]
async fn a00001_round_trip() {
    let t = Test::new("a00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let req = s.rxreq().await;
            req.expect_method("POST")
                .expect_url("/a")
                .expect_header("host", "localhost")
                .expect_no_header("te");
            req.expect_header("x-test", "1").expect_body("ping");
            assert_eq!(req.header("content-length").as_deref(), Some("4"));
            s.txresp(200)
                .hdr("Cache-Control", "max-age=10")
                .body("v1")
                .send()
                .await;
        })
        .start()
        .await;
    assert!(origin.url().starts_with("http://127.0.0.1:"));

    let resp = t
        .client(&origin)
        .post("/a")
        .hdr("X-Test", "1")
        .body("ping")
        .send()
        .await;
    resp.expect_status(200)
        .expect_header("cache-control", "max-age=10")
        .expect_body("v1");
    resp.expect_header("content-length", "2")
        .expect_no_header("cache-status");
    assert_eq!(resp.cache_status(), None);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// a00002: a request the script did not expect is answered 500 and makes
// finish() panic with the failure and the transcript.
#[tokio::test]
async fn a00002_unexpected_request_fails_finish() {
    let t = Test::new("a00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            s.txresp(200).body("a").send().await;
        })
        .start()
        .await;
    t.client(&origin).get("/a").send().await.expect_status(200);
    let extra = t.client(&origin).get("/extra").send().await;
    extra.expect_status(500).expect_body("unexpected request");
    assert_eq!(origin.failures().len(), 1);

    let msg = panic_message(tokio::spawn(origin.finish())).await;
    assert!(msg.contains("unexpected request: GET /extra"), "{msg}");
    assert!(msg.contains("---- transcript a00002 ----"), "{msg}");
}

// a00003: a barrier orders two tasks, and is reusable across generations.
#[tokio::test]
async fn a00003_barrier_orders_tasks() {
    let t = Test::new("a00003");
    let b = t.barrier(2);
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = tokio::spawn({
        let (b, order) = (b.clone(), order.clone());
        async move {
            order.lock().push(1);
            b.sync().await;
            b.sync().await;
            order.lock().push(3);
        }
    });
    let second = tokio::spawn({
        let (b, order) = (b.clone(), order.clone());
        async move {
            b.sync().await;
            order.lock().push(2);
            b.sync().await;
        }
    });
    first.await.expect("first task");
    second.await.expect("second task");
    assert_eq!(*order.lock(), vec![1, 2, 3]);
}

// a00004: a chunked response streamed piece by piece arrives complete.
#[tokio::test]
async fn a00004_chunked_streaming() {
    let t = Test::new("a00004");
    let head_sent = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let head_sent = head_sent.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/stream");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                head_sent.sync().await;
                s.chunk("line1\n").await;
                s.chunk("line2\n").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let c1 = t.client(&origin).get("/stream").spawn();
    head_sent.sync().await;
    let resp = c1.await.expect("c1 task");
    resp.expect_status(200)
        .expect_header("transfer-encoding", "chunked")
        .expect_body("line1\nline2\n");
    origin.finish().await;
}

// a00005: bodies cut short are reported as incomplete, never as a shorter
// complete body: Content-Length short, chunked cut mid-stream, broken chunk framing.
#[tokio::test]
async fn a00005_truncated_body_is_incomplete() {
    let t = Test::new("a00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/length");
            s.txresp(200).body("0123456789").send_truncated(4).await;
            s.rxreq().await.expect_url("/chunked");
            s.txresp(200).chunked().send_head().await;
            s.chunk("abc").await;
            s.close().await;
            s.rxreq().await.expect_url("/framing");
            s.send_raw(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY\r\n0\r\n\r\n",
            )
            .await;
            s.close().await;
        })
        .start()
        .await;
    for (path, partial) in [
        ("/length", "0123"),
        ("/chunked", "abc"),
        ("/framing", "abc"),
    ] {
        match t.client(&origin).get(path).try_send().await {
            Err(ClientError::IncompleteBody { response, reason }) => {
                assert_eq!(response.status, 200, "{path}: {reason}");
                assert_eq!(response.body, partial, "{path}: {reason}");
            }
            other => panic!("{path}: expected an incomplete body, got {other:?}"),
        }
    }
    origin.finish().await;
}

// a00006: two requests on one client connection reach the origin on one TCP
// connection (keep-alive on both sides).
#[tokio::test]
async fn a00006_keep_alive_reuses_connection() {
    let t = Test::new("a00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let a = s.rxreq().await;
            a.expect_url("/a").expect_no_header("connection");
            s.txresp(200).body("a").send().await;
            let b = s.rxreq().await;
            b.expect_url("/b");
            assert_eq!((a.conn(), b.conn(), s.connections()), (1, 1, 1));
            s.txresp(200).body("b").send().await;
        })
        .start()
        .await;
    let mut c = t.client(&origin).connect().await;
    c.get("/a")
        .send()
        .await
        .expect_status(200)
        .expect_body("a")
        .expect_no_header("connection");
    c.get("/b").send().await.expect_status(200).expect_body("b");
    origin.wait_requests(2).await;
    assert_eq!(origin.connections(), 1);
    origin.finish().await;
}

// a00007: advancing the test clock moves the origin's Date header.
#[tokio::test]
async fn a00007_clock_drives_date() {
    let t = Test::new("a00007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..3 {
                s.rxreq().await;
                s.txresp(200).body("x").send().await;
            }
        })
        .start()
        .await;
    let client = t.client(&origin);
    client
        .get("/")
        .send()
        .await
        .expect_header("date", "Thu, 01 Jan 2026 00:00:00 GMT");
    t.clock.advance(Duration::from_millis(90_500));
    client
        .get("/")
        .send()
        .await
        .expect_header("date", "Thu, 01 Jan 2026 00:01:30 GMT");
    t.clock.advance(Duration::from_secs(86_400));
    client
        .get("/")
        .send()
        .await
        .expect_header("date", "Fri, 02 Jan 2026 00:01:30 GMT");
    origin.finish().await;
}

// a00008: a failed expectation in the script is a failure: the client's
// connection is closed and finish() panics with the expectation message.
#[tokio::test]
async fn a00008_script_panic_fails_finish() {
    let t = Test::new("a00008");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/expected");
            s.txresp(200).send().await;
        })
        .start()
        .await;
    let err = t
        .client(&origin)
        .get("/other")
        .try_send()
        .await
        .expect_err("no response");
    assert!(matches!(err, ClientError::ClosedBeforeResponse(_)), "{err}");
    let msg = panic_message(tokio::spawn(origin.finish())).await;
    assert!(
        msg.contains("script panicked") && msg.contains("expected url \"/expected\""),
        "{msg}"
    );
}

// a00009: an origin with failures that is dropped without finish() still
// fails the case.
#[tokio::test]
async fn a00009_drop_without_finish_fails() {
    let t = Test::new("a00009");
    let origin = t.origin().start().await; // no script: every request is unexpected
    t.client(&origin).get("/a").send().await.expect_status(500);
    let msg = panic_message(tokio::spawn(async move { drop(origin) })).await;
    assert!(msg.contains("unexpected request: GET /a"), "{msg}");
}

// a00010: HEAD, 304 and an interim 100 have no body; wait_requests is
// event-driven and requests out of order can be answered with switch_to.
#[tokio::test]
async fn a00010_bodiless_responses_and_out_of_order_answers() {
    let t = Test::new("a00010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_method("HEAD");
            s.txresp(200).body("twelve bytes").send().await;
            s.rxreq().await.expect_header("if-none-match", "\"v1\"");
            s.txresp(100).send().await;
            s.txresp(304).hdr("ETag", "\"v1\"").send().await;
            let first = s.rxreq().await;
            let second = s.rxreq().await;
            s.txresp(200).body(second.url()).send().await;
            s.switch_to(&first);
            s.txresp(200).body(first.url()).send().await;
        })
        .start()
        .await;
    let c = t.client(&origin);
    c.head("/h")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", "12")
        .expect_body_len(0);
    let resp = c.get("/c").hdr("If-None-Match", "\"v1\"").send().await;
    resp.expect_status(304)
        .expect_no_header("content-length")
        .expect_body("");
    let one = c.get("/one").spawn();
    origin.wait_requests(3).await;
    let two = c.get("/two").spawn();
    two.await.expect("c two").expect_body("/two");
    one.await.expect("c one").expect_body("/one");
    origin.finish().await;
}
