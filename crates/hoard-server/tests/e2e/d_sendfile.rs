//! d: how disk hits leave: by sendfile once their file is verified (never
//! over HTTP/2), through user space when turned off, small ones copied
//! from the page cache.

use hoard_testkit::{Origin, Test, TestProxy};

use crate::disk::{body, disk_proxy};

/// Disk objects `(path, len)` (bodies [`body`]`(len, seed)`) stored through a
/// disk-only proxy, then each read once on a keep-alive connection (which
/// verifies its open file); that connection is returned for more hits.
async fn stored_and_verified(
    t: &Test,
    objects: &[(&'static str, usize)],
    seed: u8,
) -> (Origin, TestProxy, hoard_testkit::Conn) {
    let list = objects.to_vec();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            for (path, len) in list {
                s.serve_fresh(path, 600, body(len, seed)).await;
            }
        })
        .start()
        .await;
    let proxy = disk_proxy(t, &origin, &t.dir().join("zone")).await;
    for &(path, len) in objects {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_body(body(len, seed));
    }
    proxy
        .wait_counter("disk_stored", objects.len() as u64)
        .await;
    let mut c = t.client(&proxy).connect().await;
    for &(path, len) in objects {
        c.get(path)
            .send()
            .await
            .expect_status(200)
            .expect_body(body(len, seed));
    }
    (origin, proxy, c)
}

/// An HTTP/2 prior-knowledge connection to a proxy.
struct H2c(hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>);

impl H2c {
    async fn connect(proxy: &TestProxy) -> H2c {
        let stream = tokio::net::TcpStream::connect(hoard_testkit::Endpoint::endpoint(proxy))
            .await
            .unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        H2c(send)
    }

    /// GETs `path`: 200 expected; the body.
    async fn get(&mut self, path: &str) -> bytes::Bytes {
        let req = http::Request::get(format!("http://localhost{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = self.0.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes()
    }
}

// d00019: disk hits on plain HTTP/1.1 go out with sendfile once their file
// handle has been read whole and checked: the bytes are the same, on one
// keep-alive connection and pipelined, and HTTP/2 is never sent that way.
#[tokio::test]
async fn d00019_disk_hits_are_sent_with_sendfile_once_verified() {
    const BIG: usize = 3 * 1024 * 1024 + 123;
    const SMALL: usize = 40_000;
    let t = Test::new("d00019");
    // The first hits read and check every block (verifying the open file);
    // the next ones are sent from the page cache without a copy.
    let (origin, proxy, mut c) =
        stored_and_verified(&t, &[("/big", BIG), ("/small", SMALL)], 9).await;
    let before = proxy.counter("disk_sendfile_bytes");
    for (path, len) in [("/big", BIG), ("/small", SMALL), ("/big", BIG)] {
        c.get(path)
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(len, 9));
    }
    assert_eq!(
        proxy.counter("disk_sendfile_bytes") - before,
        (2 * BIG + SMALL) as u64
    );
    // HEAD: no body, nothing sent.
    let sent = proxy.counter("disk_sendfile_bytes");
    c.head("/big")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", &BIG.to_string());
    proxy.expect_counter("disk_sendfile_bytes", sent);

    // Pipelined: two requests in one write, answered in order.
    c.send_raw("GET /small HTTP/1.1\r\nHost: localhost\r\n\r\nGET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    c.read_response().await.expect_body(body(SMALL, 9));
    c.read_response().await.expect_body(body(BIG, 9));
    proxy.expect_counter("disk_sendfile_bytes", sent + (BIG + SMALL) as u64);

    // HTTP/2 (h2c) gets the same bytes, copied into frames.
    let mut h2 = H2c::connect(&proxy).await;
    assert!(
        h2.get("/big").await[..] == body(BIG, 9)[..],
        "h2 body differs"
    );
    proxy.expect_counter("disk_sendfile_bytes", sent + (BIG + SMALL) as u64);
    origin.finish().await;
}

// d00020: `sendfile = false` in [server] sends every disk hit through user
// space, checked block by block.
#[tokio::test]
async fn d00020_sendfile_can_be_turned_off() {
    let t = Test::new("d00020");
    let origin = t
        .origin()
        .script_fresh("/f", 600, body(200_000, 4))
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.server.sendfile = false)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_body(body(200_000, 4));
    proxy.wait_counter("disk_stored", 1).await;
    let mut c = t.client(&proxy).connect().await;
    for _ in 0..3 {
        c.get("/f")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(200_000, 4));
    }
    proxy.expect_counter("disk_hits", 3);
    proxy.expect_counter("disk_sendfile_bytes", 0);
    origin.finish().await;
}

// d00023: a small disk hit, once its file is verified, is copied from the
// page cache and leaves with its head (no sendfile); a larger one still goes
// by sendfile, whole, its tail included; a small range of the large one is
// copied too. Over HTTP/2 the same bytes arrive. Every byte is the stored one.
#[tokio::test]
async fn d00023_small_disk_hits_are_copied_large_ones_sent() {
    const TINY: usize = 1000;
    const LARGE: usize = 300_123;
    let t = Test::new("d00023");
    let (origin, proxy, mut c) =
        stored_and_verified(&t, &[("/tiny", TINY), ("/large", LARGE)], 3).await;
    let before = proxy.counter("disk_sendfile_bytes");
    for _ in 0..3 {
        c.get("/tiny")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(TINY, 3));
    }
    proxy.expect_counter("disk_sendfile_bytes", before);
    c.get("/large")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body(body(LARGE, 3));
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);
    c.get("/large")
        .hdr("Range", "bytes=100000-100099")
        .send()
        .await
        .expect_status(206)
        .expect_body(&body(LARGE, 3)[100_000..100_100]);
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);

    // HTTP/2 (h2c): copied into frames, never sendfile.
    let mut h2 = H2c::connect(&proxy).await;
    for (path, len) in [("/tiny", TINY), ("/large", LARGE)] {
        assert!(
            h2.get(path).await[..] == body(len, 3)[..],
            "h2 {path} differs"
        );
    }
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);
    proxy.expect_counter("disk_hits", 9);
    origin.finish().await;
}
