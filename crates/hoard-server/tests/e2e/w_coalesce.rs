//! w: coalescing, read-while-write for waiters, outcomes reaching every waiter, hit-for-pass.

use std::time::Duration;

use hoard_testkit::Test;

// w00010: five simultaneous misses make one origin request; followers are woken by the fill
// (no polling) and get identical bodies.
#[tokio::test]
async fn w00010_concurrent_misses_one_origin_request() {
    let t = Test::new("w00010");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/c");
                go.sync().await; // every follower has attached
                s.txresp_fresh(60, "shared").await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let clients: Vec<_> = (0..5).map(|_| t.client(&proxy).get("/c").spawn()).collect();
    proxy.wait_counter("fill_waiters_total", 4).await;
    go.sync().await;
    let mut collapsed = 0;
    for c in clients {
        let r = c.await.expect("client");
        r.expect_status(200).expect_body("shared");
        if r.cache_params().iter().any(|p| p == "collapsed") {
            collapsed += 1;
        }
    }
    assert_eq!(collapsed, 4);
    proxy
        .expect_counter("origin_requests", 1)
        .expect_counter("fills_started", 1);
    origin.finish().await;
}

// w00011: two clients on one fill both receive the first chunk while the origin is still sending.
#[tokio::test]
async fn w00011_waiters_stream_while_the_origin_sends() {
    let t = Test::new("w00011");
    let both_have_part1 = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let both = both_have_part1.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("part1|").await;
                both.sync().await;
                s.chunk("part2").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c1 = t.client(&proxy).connect().await;
    c1.send_raw("GET /r HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    c1.read_until("part1|").await;
    let mut c2 = t.client(&proxy).connect().await;
    c2.send_raw("GET /r HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let head2 = c2.read_until("part1|").await;
    assert!(
        String::from_utf8_lossy(&head2).contains("collapsed"),
        "c2 joined the fill"
    );
    both_have_part1.sync().await;
    c1.read_until("part2").await;
    c2.read_until("part2").await;
    proxy.expect_counter("origin_requests", 1);
    origin.finish().await;
}

// w00012: the client whose request started the fill disconnects; the follower still gets
// the whole body and the object is stored.
#[tokio::test]
async fn w00012_leader_disconnect_does_not_cancel_the_fill() {
    let t = Test::new("w00012");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("a").await;
                go.sync().await;
                s.chunk("b").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut leader = t.client(&proxy).connect().await;
    leader
        .send_raw("GET /l HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    proxy.wait_counter("fills_started", 1).await;
    let follower = t.client(&proxy).get("/l").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    drop(leader);
    go.sync().await;
    follower.await.unwrap().expect_status(200).expect_body("ab");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/l")
        .send()
        .await
        .expect_body("ab")
        .expect_cache_status("hit");
    origin.finish().await;
}

// w00013: an origin failing mid-body aborts every reader's response; nothing is stored.
#[tokio::test]
async fn w00013_mid_body_failure_reaches_every_reader() {
    let t = Test::new("w00013");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Content-Length", "100")
                    .send_head()
                    .await;
                go.sync().await;
                s.send_raw("only part").await;
                s.close().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let c1 = tokio::spawn({
        let c = t.client(&proxy);
        async move { c.get("/m").try_send().await }
    });
    proxy.wait_counter("fills_started", 1).await;
    let c2 = tokio::spawn({
        let c = t.client(&proxy);
        async move { c.get("/m").try_send().await }
    });
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    for c in [c1, c2] {
        let err = c
            .await
            .unwrap()
            .expect_err("a truncated body must not look complete");
        assert!(err.is_incomplete(), "{err:?}");
    }
    proxy
        .expect_counter("fills_aborted", 1)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// w00014: an uncacheable response releases the waiters at once (each goes to the origin
// itself), and marks the key hit-for-pass: later requests go to the origin in parallel.
#[tokio::test]
async fn w00014_uncacheable_releases_waiters_and_marks_hit_for_pass() {
    let t = Test::new("w00014");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("mine")
                    .send()
                    .await;
                // The follower, released, comes on its own.
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("yours")
                    .send()
                    .await;
                // Two more requests arrive together: neither waits for the other.
                let a = s.rxreq().await;
                let b = s.rxreq().await;
                s.switch_to(&a);
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("a")
                    .send()
                    .await;
                s.switch_to(&b);
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("b")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let leader = t.client(&proxy).get("/p").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let follower = t.client(&proxy).get("/p").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    leader
        .await
        .unwrap()
        .expect_body("mine")
        .expect_cache_status("detail=private");
    follower.await.unwrap().expect_body("yours");
    proxy.expect_counter("hit_for_pass_marks", 2);
    let (x, y) = (
        t.client(&proxy).get("/p").spawn(),
        t.client(&proxy).get("/p").spawn(),
    );
    let (x, y) = (x.await.unwrap(), y.await.unwrap());
    x.expect_cache_status("fwd=bypass; fwd-status=200")
        .expect_cache_status("detail=hit-for-pass");
    let mut bodies = vec![x.text(), y.text()];
    bodies.sort();
    assert_eq!(bodies, ["a", "b"]);
    proxy
        .expect_counter("hit_for_pass", 2)
        .expect_counter("fill_waiters_total", 1);
    origin.finish().await;
}

// w00015: a cacheable response for a hit-for-pass key is stored and clears the mark.
#[tokio::test]
async fn w00015_cacheable_response_clears_hit_for_pass() {
    let t = Test::new("w00015");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_no_store("1").await;
            s.rxreq().await;
            s.txresp_fresh(60, "2").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy).get("/h").send().await.expect_body("1");
    t.client(&proxy).get("/h").send().await.expect_body("2");
    proxy.expect_counter("hit_for_pass", 1);
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/h")
        .send()
        .await
        .expect_body("2")
        .expect_cache_status("hit");
    // The mark expires on the proxy clock.
    origin.finish().await;
}

// w00016: a waiter that waits longer than the coalesce timeout goes to the origin on its
// own, uncached.
#[tokio::test]
async fn w00016_waiter_timeout_goes_alone_uncached() {
    let t = Test::new("w00016");
    let release = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let release = release.clone();
            |mut s| async move {
                let slow = s.rxreq().await;
                let fast = s.rxreq().await; // the waiter, after its timeout
                s.switch_to(&fast);
                s.txresp_fresh(60, "fast").await;
                release.sync().await;
                s.switch_to(&slow);
                s.txresp_fresh(60, "slow").await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.coalesce_timeout = Duration::from_millis(100))
        .start()
        .await;
    let leader = t.client(&proxy).get("/t").spawn();
    proxy.wait_counter("fills_started", 1).await;
    t.client(&proxy)
        .get("/t")
        .send()
        .await
        .expect_body("fast")
        .expect_cache_status("fwd=bypass");
    proxy.expect_counter("fill_wait_timeouts", 1);
    release.sync().await;
    leader.await.unwrap().expect_body("slow");
    origin.finish().await;
}

// w00017: when the origin fails before a response head, every waiter gets a 502 (no stale copy).
#[tokio::test]
async fn w00017_origin_error_before_head_reaches_every_waiter() {
    let t = Test::new("w00017");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                go.sync().await;
                s.close().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let leader = t.client(&proxy).get("/e").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let follower = t.client(&proxy).get("/e").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    leader.await.unwrap().expect_status(502);
    follower.await.unwrap().expect_status(502);
    proxy.expect_counter("origin_requests", 1);
    origin.finish().await;
}

// w00018: with coalesce = false, simultaneous misses each go to the origin.
#[tokio::test]
async fn w00018_coalescing_off() {
    let t = Test::new("w00018");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let a = s.rxreq().await;
            let b = s.rxreq().await;
            for r in [&a, &b] {
                s.switch_to(r);
                s.txresp_fresh(60, "x").await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.coalesce = false)
        .start()
        .await;
    let (a, b) = (
        t.client(&proxy).get("/o").spawn(),
        t.client(&proxy).get("/o").spawn(),
    );
    a.await.unwrap().expect_body("x");
    b.await.unwrap().expect_body("x");
    proxy.expect_counter("fill_waiters_total", 0);
    origin.finish().await;
}

// w00019: a client that does not read its response does not slow the fill or the others.
#[tokio::test]
async fn w00019_slow_reader_does_not_slow_the_fill() {
    let t = Test::new("w00019");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .chunked()
                .send_head()
                .await;
            for _ in 0..64 {
                s.chunk(vec![b'z'; 64 * 1024]).await;
            }
            s.end().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut stalled = t.client(&proxy).connect().await;
    stalled
        .send_raw("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await; // and never reads
    proxy.wait_counter("fills_started", 1).await;
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_status(200)
        .expect_body_len(4 << 20);
    proxy.wait_counter("objects_stored", 1).await;
    drop(stalled);
    origin.finish().await;
}

// w00030: with ignore_headers = ["set-cookie"], a follower of a coalesced fill never
// receives the leader's Set-Cookie: only the client whose request fetched it does.
#[tokio::test]
async fn w00030_set_cookie_not_shared_with_followers() {
    let t = Test::new("w00030");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Set-Cookie", "session=LEADER")
                    .body("x")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.policy.ignore_set_cookie = true)
        .start()
        .await;
    let leader = t.client(&proxy).get("/c").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let follower = t.client(&proxy).get("/c").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    leader
        .await
        .unwrap()
        .expect_header("set-cookie", "session=LEADER");
    follower
        .await
        .unwrap()
        .expect_status(200)
        .expect_no_header("set-cookie");
    origin.finish().await;
}

// w00031: simultaneous misses of a second variant are coalesced too: the followers that
// the first response's Vary sends elsewhere share one fill.
#[tokio::test]
async fn w00031_second_variant_misses_are_coalesced_too() {
    let t = Test::new("w00031");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await.expect_header("accept-encoding", "gzip");
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Vary", "Accept-Encoding")
                    .body("gz")
                    .send()
                    .await;
                // exactly one request for the br variant
                s.rxreq().await.expect_header("accept-encoding", "br");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Vary", "Accept-Encoding")
                    .body("br")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.encodings.clear())
        .start()
        .await;
    let leader = t
        .client(&proxy)
        .get("/v")
        .hdr("Accept-Encoding", "gzip")
        .spawn();
    proxy.wait_counter("fills_started", 1).await;
    let followers: Vec<_> = (0..3)
        .map(|_| {
            t.client(&proxy)
                .get("/v")
                .hdr("Accept-Encoding", "br")
                .spawn()
        })
        .collect();
    proxy.wait_counter("fill_waiters_total", 3).await;
    go.sync().await;
    leader.await.unwrap().expect_body("gz");
    for f in followers {
        f.await.unwrap().expect_status(200).expect_body("br");
    }
    proxy.expect_counter("origin_requests", 2);
    origin.finish().await;
}

// w00032: a body too large to store, shared by a client that does not read and one that
// does: the reading client gets the whole body (the idle one is cut off once it lags 8 MiB
// behind), so one stalled client never freezes the others.
#[tokio::test]
async fn w00032_stalled_reader_does_not_freeze_a_pass_through_fill() {
    let t = Test::new("w00032");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await;
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                for _ in 0..(24 * 16) {
                    s.chunk(vec![b'z'; 64 * 1024]).await;
                }
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.cache.max_object_size = 100_000)
        .start()
        .await;
    let mut stalled = t.client(&proxy).connect().await;
    stalled
        .send_raw("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await; // and never reads
    proxy.wait_counter("fills_started", 1).await;
    let follower = t.client(&proxy).get("/big").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    follower
        .await
        .unwrap()
        .expect_status(200)
        .expect_body_len(24 << 20);
    proxy.expect_counter("objects_stored", 0);
    drop(stalled);
    origin.finish().await;
}

// w00033: a request that finds the key varies (stored variants, none its own) joins the
// fill already running for its variant instead of starting another.
#[tokio::test]
async fn w00033_vary_miss_joins_the_fill_of_its_variant() {
    let t = Test::new("w00033");
    let (go, release_br) = (t.barrier(2), t.barrier(2));
    let origin = t
        .origin()
        .script({
            let (go, release_br) = (go.clone(), release_br.clone());
            |mut s| async move {
                s.rxreq().await.expect_header("accept-encoding", "gzip");
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Vary", "Accept-Encoding")
                    .body("gz")
                    .send()
                    .await;
                s.rxreq().await.expect_header("accept-encoding", "br");
                release_br.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Vary", "Accept-Encoding")
                    .body("br")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.encodings.clear())
        .start()
        .await;
    let gz = t
        .client(&proxy)
        .get("/v")
        .hdr("Accept-Encoding", "gzip")
        .spawn();
    proxy.wait_counter("fills_started", 1).await;
    let br1 = t
        .client(&proxy)
        .get("/v")
        .hdr("Accept-Encoding", "br")
        .spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    gz.await.unwrap().expect_body("gz");
    proxy.wait_counter("objects_stored", 1).await;
    proxy.wait_counter("fills_started", 2).await; // br1's fill for its variant
    let br2 = t
        .client(&proxy)
        .get("/v")
        .hdr("Accept-Encoding", "br")
        .spawn();
    proxy.wait_counter("fill_waiters_total", 2).await;
    release_br.sync().await;
    br1.await.unwrap().expect_body("br");
    br2.await
        .unwrap()
        .expect_body("br")
        .expect_cache_status("fwd=vary-miss")
        .expect_cache_status("collapsed");
    proxy.expect_counter("origin_requests", 2);
    origin.finish().await;
}
