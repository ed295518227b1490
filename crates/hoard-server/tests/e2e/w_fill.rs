//! w: the fill: read-while-write from the origin, failures mid-body, client disconnects.

use hoard_testkit::{ClientError, Test};

// w00001: an origin failing mid-body (Content-Length) reaches the client as an incomplete
// response, never as a complete-looking one, and nothing is stored.
#[tokio::test]
async fn w00001_mid_body_failure_is_an_abort() {
    let t = Test::new("w00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .body(vec![b'x'; 100])
                .send_truncated(10)
                .await;
            s.rxreq().await;
            s.txresp_fresh(60, "whole").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    match t.client(&proxy).get("/f").try_send().await {
        Err(ClientError::IncompleteBody { .. }) => {}
        other => panic!("expected an incomplete body, got {other:?}"),
    }
    proxy.wait_counter("fills_aborted", 1).await;
    proxy.expect_counter("objects_stored", 0);
    t.client(&proxy).get("/f").send().await.expect_body("whole");
    origin.finish().await;
}

// w00002: the same with a chunked origin body: the client sees broken chunked framing.
#[tokio::test]
async fn w00002_chunked_mid_body_failure_is_an_abort() {
    let t = Test::new("w00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .chunked()
                .send_head()
                .await;
            s.chunk("part").await;
            s.close().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let err = t
        .client(&proxy)
        .get("/f")
        .try_send()
        .await
        .expect_err("a truncated body must not look complete");
    assert!(err.is_incomplete(), "{err:?}");
    proxy.wait_counter("fills_aborted", 1).await;
    proxy.expect_counter("objects_stored", 0);
    origin.finish().await;
}

// w00003: a client that disconnects mid-body does not cancel the fill: the object is stored.
#[tokio::test]
async fn w00003_client_disconnect_does_not_cancel_fill() {
    let t = Test::new("w00003");
    let client_gone = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let client_gone = client_gone.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("line1\n").await;
                client_gone.sync().await;
                s.chunk("line2\n").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.get("/d").tx().await;
    proxy.wait_counter("fills_started", 1).await;
    drop(c);
    client_gone.sync().await;
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_body("line1\nline2\n")
        .expect_cache_status("hit");
    origin.finish().await;
}

// w00004: the client streams the body while the origin is still sending it (read-while-write).
#[tokio::test]
async fn w00004_body_streams_before_the_origin_finishes() {
    let t = Test::new("w00004");
    let first_seen = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let first_seen = first_seen.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("first\n").await;
                first_seen.sync().await; // the client has the first chunk before the second is sent
                s.chunk("second\n").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /s HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let head = c.read_until(b"first\n").await;
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    first_seen.sync().await;
    let rest = c.read_until(b"0\r\n\r\n").await;
    assert!(rest.windows(7).any(|w| w == b"second\n"));
    origin.finish().await;
}

// w00040: a shutdown waits for a fill nobody waits for (a background
// refresh): it completes and is stored on disk before the proxy stops.
#[tokio::test]
async fn w00040_shutdown_lets_a_running_fill_finish() {
    let t = Test::new("w00040");
    let release = t.barrier(2);
    let r = release.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .body("v1")
                .send()
                .await;
            s.rxreq().await;
            r.sync().await;
            s.txresp_fresh(600, "v2").await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    proxy.wait_counter("disk_stored", 1).await;
    t.clock.advance(std::time::Duration::from_secs(5));
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("detail=stale-while-revalidate");
    origin.wait_requests(2).await;
    let counters = proxy.counters_arc();
    let stopping = tokio::spawn(proxy.stop());
    release.sync().await;
    stopping.await.unwrap();
    assert_eq!(counters.get("disk_stored"), 2, "the refresh was stored");
    assert_eq!(counters.get("fills_cancelled"), 0);
    origin.finish().await;
}

// w00041: a fill still running after the shutdown timeout is cancelled
// cleanly: the stop returns, the partial disk copy is removed.
#[tokio::test]
async fn w00041_shutdown_cancels_a_fill_past_the_timeout() {
    let t = Test::new("w00041");
    let hold = t.barrier(2);
    let h = hold.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .body("v1")
                .send()
                .await;
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(vec![b'x'; 400_000]).await;
            // Held until the proxy has stopped.
            h.sync().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.server.shutdown_timeout = std::time::Duration::from_millis(200))
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    proxy.wait_counter("disk_stored", 1).await;
    t.clock.advance(std::time::Duration::from_secs(5));
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    origin.wait_requests(2).await;
    let counters = proxy.counters_arc();
    proxy.stop().await;
    assert_eq!(counters.get("fills_cancelled"), 1);
    assert_eq!(counters.get("disk_stored"), 1);
    hold.sync().await;
    // The abandoned copy's removal runs on the disk pool; wait for its count.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        counters.wait_for("disk_writes_abandoned", 1),
    )
    .await
    .expect("the partial copy is abandoned");
    origin.finish().await;
}

// w00042: an unsafe request that succeeds while a fill of its URI streams:
// the fill's client gets its body, but the pre-change body is not stored,
// and a GET after the POST fetches anew instead of joining that fill.
#[tokio::test]
async fn w00042_invalidation_during_a_fill_is_not_undone() {
    let t = Test::new("w00042");
    let posted = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let posted = posted.clone();
            |mut s| async move {
                let old = s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("before-").await;
                s.rxreq_concurrent().await.expect_method("POST");
                s.txresp(204).send().await;
                s.rxreq_concurrent().await.expect_method("GET");
                s.txresp_fresh(600, "after").await;
                posted.sync().await;
                s.switch_to(&old);
                s.chunk("change").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let first = t.client(&proxy).get("/doc").spawn();
    origin.wait_requests(1).await;
    t.client(&proxy)
        .post("/doc")
        .body("edit")
        .send()
        .await
        .expect_status(204);
    t.client(&proxy)
        .get("/doc")
        .send()
        .await
        .expect_body("after");
    proxy.wait_counter("objects_stored", 1).await;
    posted.sync().await;
    first.await.unwrap().expect_body("before-change");
    proxy.wait_counter("fills_completed", 2).await;
    proxy
        .expect_counter("purge_raced_fills", 1)
        .expect_counter("objects_stored", 1);
    t.client(&proxy)
        .get("/doc")
        .send()
        .await
        .expect_body("after")
        .expect_cache_status("hit");
    origin.finish().await;
}

// w00043: a leader whose own fill ends without an outcome (here: cancelled
// by a shutdown while the origin had not answered) gets a 500 that says
// `internal`, not a 502 blaming the origin.
#[tokio::test]
async fn w00043_leader_without_an_outcome_is_an_internal_error() {
    let t = Test::new("w00043");
    let hold = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let hold = hold.clone();
            |mut s| async move {
                s.rxreq().await;
                // Never answered before the proxy has stopped.
                hold.sync().await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.shutdown_timeout = std::time::Duration::from_millis(100))
        .start()
        .await;
    let leader = t.client(&proxy).get("/never").spawn();
    origin.wait_requests(1).await;
    let counters = proxy.counters_arc();
    proxy.stop().await;
    assert_eq!(counters.get("fills_cancelled"), 1);
    leader
        .await
        .unwrap()
        .expect_status(500)
        .expect_cache_status("detail=internal");
    hold.sync().await;
    origin.finish().await;
}
