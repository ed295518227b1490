//! o: operating hoard, the access log: one JSON line per request with its
//! outcome, reopened on demand, and a writer that falls behind drops lines
//! rather than hold a request.

use hoard_testkit::{Origin, Test, TestProxy};

use crate::secs;

/// A proxy in front of `origin` whose access log (JSON lines) goes to a
/// file of the test's own, and that file.
async fn logged_proxy(t: &Test, origin: &Origin) -> (TestProxy, std::path::PathBuf) {
    let log = t.dir().join("access.log");
    let proxy = t
        .proxy()
        .origin(origin)
        .config(|c| c.access_log.target = hoard_config::LogTarget::File(log.clone()))
        .start()
        .await;
    (proxy, log)
}

/// The access log's lines, parsed.
fn log_lines(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// o00012: the access log has one JSON line per request with the outcome of
// each: miss, hit, stale, revalidated, pass, error; and reopens its file.
#[tokio::test]
async fn o00012_access_log_line_for_each_outcome() {
    let t = Test::new("o00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .hdr("ETag", "\"1\"")
                .body("hello")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"1\"")
                .send()
                .await;
            s.rxreq().await.expect_method("POST");
            s.txresp(200).body("posted").send().await;
            s.rxreq().await.expect_url("/b");
            s.txresp_fresh_etag(1, "\"b\"", "b").await;
            s.rxreq().await.expect_header("if-none-match", "\"b\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"b\"")
                .send()
                .await;
            for _ in 0..2 {
                s.rxreq().await.expect_url("/h");
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("mine")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let (proxy, log) = logged_proxy(&t, &origin).await;
    // Each line is written when its response body is done: wait for it, so
    // the order of lines is the order of requests.
    let mut lines = 0;
    let mut logged = || {
        lines += 1;
        proxy.wait_counter("access_log_lines", lines)
    };
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // miss
    logged().await;
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // hit
    logged().await;
    t.clock.advance(secs(2));
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // stale, refreshed behind
    logged().await;
    proxy.wait_counter("cache_revalidated_304", 1).await;
    t.client(&proxy)
        .post("/a")
        .body("x")
        .send()
        .await
        .expect_body("posted"); // pass
    logged().await;
    t.client(&proxy).get("/b").send().await.expect_body("b"); // miss
    logged().await;
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/b")
        .hdr("Cache-Control", "no-cache")
        .send()
        .await
        .expect_body("b"); // revalidated
    logged().await;
    t.client(&proxy).get("/h").send().await.expect_body("mine"); // miss, not storable
    logged().await;
    t.client(&proxy).get("/h").send().await.expect_body("mine"); // hit-for-pass
    logged().await;
    t.client(&proxy)
        .get("/c")
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await
        .expect_status(504); // error
    logged().await;
    let lines = log_lines(&log);
    let outcomes: Vec<&str> = lines.iter().map(|l| l["cache"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes,
        [
            "miss",
            "hit",
            "stale",
            "pass",
            "miss",
            "revalidated",
            "miss",
            "hit_for_pass",
            "error"
        ]
    );
    let first = &lines[0];
    assert_eq!(first["method"], "GET");
    assert_eq!(first["host"], "localhost");
    assert_eq!(first["path"], "/a");
    assert_eq!(first["status"], 200);
    assert_eq!(first["bytes"], 5);
    assert_eq!(first["client"], "127.0.0.1");
    assert!(first["upstream_ms"].as_f64().is_some());
    assert!(first["total_ms"].as_f64().unwrap() >= 0.0);
    assert!(first["time"].as_str().unwrap().ends_with('Z'));
    assert!(lines[1]["upstream_ms"].is_null());
    assert_eq!(lines[8]["status"], 504);
    // logrotate: the file is moved away, then the log is told to reopen.
    let rotated = t.dir().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    proxy.proxy().reopen_logs();
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_cache_status("hit");
    proxy.wait_counter("access_log_lines", 10).await;
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap().lines().count(),
        9
    );
    proxy.expect_counter("access_log_dropped", 0);
    origin.finish().await;
}

// o00018: a request refused before any route step (two Host fields, RFC
// 9112 §3.2) is answered 400 and logged and counted as an error: the
// phases end in an error, which is answered after the request's noted
// state is read (`pipeline/serving.rs`).
#[tokio::test]
async fn o00018_a_refused_request_is_logged_as_an_error() {
    let t = Test::new("o00018");
    let origin = t.origin().start().await;
    let (proxy, log) = logged_proxy(&t, &origin).await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /x HTTP/1.1\r\nHost: localhost\r\nHost: other\r\n\r\n")
        .await;
    c.read_response()
        .await
        .expect_status(400)
        .expect_cache_status("detail=bad-request");
    proxy.wait_counter("access_log_lines", 1).await;
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["cache"], "error");
    assert_eq!(lines[0]["status"], 400);
    assert_eq!(lines[0]["path"], "/x");
    proxy.expect_counter("client_errors", 1);
    origin.finish().await;
}

// o00016: a writer that falls behind never holds a request: with the log
// going into a pipe nobody reads, requests are answered as usual and the
// lines that do not fit are dropped and counted.
#[tokio::test]
async fn o00016_a_stuck_access_log_drops_lines_and_blocks_nothing() {
    use std::os::unix::fs::OpenOptionsExt;
    let t = Test::new("o00016");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(600, "x").await;
        })
        .start()
        .await;
    let fifo = t.dir().join("log.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A reader that never reads: the pipe fills up and the writer blocks.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .unwrap();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.access_log.target = hoard_config::LogTarget::File(fifo.clone());
            c.access_log.buffer = 4;
        })
        .start()
        .await;
    let mut conn = t.client(&proxy).connect().await;
    let n = 2000;
    for _ in 0..n {
        conn.get("/x")
            .hdr("Connection", "keep-alive")
            .send()
            .await
            .expect_body("x");
    }
    // A pipe holds 64 KiB: a few hundred lines; the queue holds 4.
    let dropped = proxy.counter("access_log_dropped");
    assert!(dropped > 1000, "dropped {dropped}");
    assert!(proxy.counter("access_log_lines") < 1000);
    origin.finish().await;
}
