//! d: fills written through to disk: read while written, a fill dying
//! mid-write, late readers and ranges of a fill that left memory, and a
//! file being read never reused.

use hoard_testkit::{ClientError, Test};

use crate::disk::{body, disk_proxy, files, objects};

// d00008: read-while-write from a disk fill: two clients stream the body
// while it is written to disk, from byte 0; it is then a disk hit.
#[tokio::test]
async fn d00008_read_while_write_to_disk() {
    let t = Test::new("d00008");
    let joined = t.barrier(2);
    let j = joined.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(body(400_000, 1)).await;
            j.sync().await;
            s.chunk(body(400_000, 2)).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let a = t.client(&proxy).get("/v").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let b = t.client(&proxy).get("/v").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    joined.sync().await;
    let mut want = body(400_000, 1);
    want.extend(body(400_000, 2));
    for r in [a.await.unwrap(), b.await.unwrap()] {
        r.expect_status(200).expect_body(&want);
    }
    proxy.wait_counter("disk_stored", 1).await;
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body(&want)
        .expect_cache_status("hit");
    proxy.expect_counter("disk_hits", 1);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00009: a fill that dies mid-body leaves no servable object: the disk copy
// is abandoned, and a restart serves nothing of it.
#[tokio::test]
async fn d00009_fill_dying_mid_write_leaves_nothing() {
    let t = Test::new("d00009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(body(600_000, 3)).await;
            s.close().await;
            s.rxreq().await;
            s.txresp_fresh(600, "whole").await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    match t.client(&proxy).get("/f").try_send().await {
        Err(ClientError::IncompleteBody { .. }) => {}
        other => panic!("expected an incomplete body, got {other:?}"),
    }
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    assert!(objects(&dir).is_empty(), "no published file");
    proxy.stop().await;
    let proxy = disk_proxy(&t, &origin, &dir).await;
    proxy.expect_counter("disk_loaded", 0);
    t.client(&proxy).get("/f").send().await.expect_body("whole");
    origin.finish().await;
}

// d00013: a large disk-backed fill keeps only a tail in memory: a client
// joining after megabytes were written (and left memory) still gets the
// body from byte 0, read back from the file being written; one origin fetch.
#[tokio::test]
async fn d00013_late_reader_of_a_spilled_fill_starts_at_byte_0() {
    let t = Test::new("d00013");
    let mut first = body(4_600_000, 9);
    first.extend_from_slice(b"MARK-AFTER-FIRST-PART");
    let mut second = body(1_400_000, 4);
    second.extend_from_slice(b"END-OF-BODY");
    let mut want = first.clone();
    want.extend_from_slice(&second);
    let joined = t.barrier(2);
    let j = joined.clone();
    let (f, s2) = (first.clone(), second.clone());
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(f).await;
            j.sync().await;
            s.chunk(s2).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let mut leader = t.client(&proxy).connect().await;
    leader.get("/big").tx().await;
    // The leader has 4.6 MB: the fill has written (and spilled) megabytes.
    leader.read_until("MARK-AFTER-FIRST-PART").await;
    let late = t.client(&proxy).get("/big").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    joined.sync().await;
    leader.read_until("END-OF-BODY").await;
    late.await
        .unwrap()
        .expect_status(200)
        .expect_body(&want)
        .expect_cache_status("collapsed");
    proxy.wait_counter("disk_stored", 1).await;
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_body(&want)
        .expect_cache_status("hit");
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00021: ranges joining a large disk-backed fill after megabytes left
// memory: a range in the spilled part is read back from the file being
// written, a range past it skips the spilled part; one origin fetch.
#[tokio::test]
async fn d00021_ranges_of_a_spilled_fill() {
    const LEN: usize = 6_000_000;
    const FIRST: usize = 4_600_000;
    let t = Test::new("d00021");
    let full = body(LEN, 5);
    let joined = t.barrier(2);
    let j = joined.clone();
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_no_header("range");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", LEN)
                .send_head()
                .await;
            s.chunk(&f[..FIRST]).await;
            j.sync().await;
            s.chunk(&f[FIRST..]).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    // The leader asks for the last bytes of the first part: answered while
    // the rest has not been sent.
    let early = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", format!("bytes={}-{}", FIRST - 100, FIRST - 1))
        .send()
        .await;
    early
        .expect_status(206)
        .expect_body(&full[FIRST - 100..FIRST]);
    // Megabytes were written and left memory: a range at 100 KB is read
    // back from the file; one at 5 MB waits for its bytes.
    let spilled = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", "bytes=100000-100999")
        .spawn();
    let later = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", "bytes=5000000-5000009")
        .spawn();
    proxy.wait_counter("fill_waiters_total", 2).await;
    spilled
        .await
        .unwrap()
        .expect_status(206)
        .expect_body(&full[100_000..101_000]);
    joined.sync().await;
    later
        .await
        .unwrap()
        .expect_status(206)
        .expect_body(&full[5_000_000..5_000_010]);
    proxy.expect_counter("range_misses", 3);
    proxy.wait_counter("disk_stored", 1).await;
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00022: an evicted object's file is overwritten in place for a new object
// only when nobody has it open: a client still reading the old object
// gets the old bytes, whole. A file nobody reads is reused, and cut to the
// new object's length.
#[tokio::test]
async fn d00022_a_file_being_read_is_never_reused() {
    const BIG: usize = 8 << 20;
    const SMALL: usize = 3 << 20;
    let t = Test::new("d00022");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, len, seed) in [("/a", BIG, 1), ("/b", BIG, 2), ("/c", SMALL, 3)] {
                s.serve_fresh(path, 600, body(len, seed)).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    // Room for one big object only: storing /b evicts /a, storing /c /b.
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 10 << 20, 0)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body(body(BIG, 1));
    proxy.wait_counter("disk_stored", 1).await;

    // An HTTP/2 client with a 64 KiB window takes the head of a hit on /a
    // and reads nothing more: the proxy holds /a's file open meanwhile.
    let stream = tokio::net::TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://localhost/a")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(proxy.counter("disk_hits"), 1);

    // Storing /b evicts /a, whose file is still open: it is unlinked, not
    // reused.
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_body(body(BIG, 2));
    proxy.wait_counter("disk_stored", 2).await;
    proxy.expect_counter("disk_evicted_size", 1);
    proxy.expect_counter("disk_files_recycled", 0);
    let got = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(
        got[..] == body(BIG, 1)[..],
        "the reader of /a got other bytes"
    );
    drop(send);

    // /b's file is not open: storing /c takes it over and cuts it to length.
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_body(body(SMALL, 3));
    proxy.wait_counter("disk_stored", 3).await;
    proxy.expect_counter("disk_evicted_size", 2);
    proxy.expect_counter("disk_files_recycled", 1);
    let left = files(&dir);
    assert_eq!(left.len(), 1, "one file left: {left:?}");
    assert!(
        left[0].1 < (SMALL + 64 * 1024) as u64,
        "cut to length: {left:?}"
    );
    for _ in 0..2 {
        t.client(&proxy)
            .get("/c")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(SMALL, 3));
    }
    origin.finish().await;
}
