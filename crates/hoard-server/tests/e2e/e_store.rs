//! e: the memory store's limits as seen through the proxy.

use hoard_testkit::Test;

// e00010: a chunked body that grows past the largest object size is delivered whole but not stored.
#[tokio::test]
async fn e00010_streamed_object_over_max_size_passes() {
    let t = Test::new("e00010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .chunked()
                    .send_head()
                    .await;
                for _ in 0..20 {
                    s.chunk(vec![b'x'; 10_000]).await;
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
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_status(200)
        .expect_body_len(200_000);
    proxy.wait_counter("objects_too_large", 1).await;
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_body_len(200_000);
    proxy.expect_counter("objects_stored", 0);
    origin.finish().await;
}

// e00011: a Content-Length over the largest object size is not even attempted.
#[tokio::test]
async fn e00011_declared_length_over_max_size() {
    let t = Test::new("e00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .body(vec![b'y'; 150_000])
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.cache.max_object_size = 100_000)
        .start()
        .await;
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_body_len(150_000)
        .expect_cache_status("detail=too-large");
    proxy
        .expect_counter("not_storable", 1)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// e00012: the memory limit holds under a stream of objects; old ones are evicted.
#[tokio::test]
async fn e00012_memory_limit_holds() {
    let t = Test::new("e00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..40 {
                s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .body(vec![b'z'; 20_000])
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            // The memory tier alone, whatever HOARD_TEST_STORE says.
            c.cache.zones.clear();
            c.cache.memory_size = 256 << 10;
            c.cache.max_object_size = 64 << 10;
        })
        .start()
        .await;
    for i in 0..40 {
        t.client(&proxy)
            .get(&format!("/o{i}"))
            .send()
            .await
            .expect_body_len(20_000);
        assert!(
            proxy.store().weight() <= 256 << 10,
            "store weight {} over its limit",
            proxy.store().weight()
        );
    }
    proxy.expect_counter("objects_stored", 40);
    assert!(
        proxy
            .store()
            .memory()
            .expect("a memory tier")
            .stats()
            .evicted
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    origin.finish().await;
}
