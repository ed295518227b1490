//! A `kill -9` of the real binary in the middle of writing an object to
//! disk: after a restart every complete object is a hit, the partial one
//! is never served (its temporary file is removed and counted) and is
//! fetched again.

use std::net::SocketAddr;
use std::path::Path;

use hoard_testkit::Test;

use crate::common;
use common::Hoard;

async fn start(origin: SocketAddr, dir: &Path) -> Hoard {
    Hoard::start(&[
        "--upstream",
        &format!("http://{origin}"),
        "--listen",
        "127.0.0.1:0",
        "--cache-dir",
        dir.to_str().unwrap(),
        "--cache-size",
        "0",
        "--threads",
        "1",
    ])
    .await
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if sub.path().is_dir() {
            for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
                out.push(f.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out
}

#[tokio::test]
async fn kill_9_mid_write_leaves_no_servable_partial_object() {
    let t = Test::new("crash");
    let killed = t.barrier(2);
    let k = killed.clone();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b = big.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/done");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .body(b)
                .send()
                .await;
            s.rxreq().await.expect_url("/partial");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            let mut part = vec![b'p'; 2_000_000];
            part.extend_from_slice(b"HALFWAY");
            s.chunk(part).await;
            // The proxy is killed here, mid-body.
            k.sync().await;
            s.rxreq().await.expect_url("/partial");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .body("complete")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let mut hoard = start(origin.addr(), &dir).await;
    hoard.wait_log("disk: zone loaded").await;
    t.client(hoard.addr)
        .get("/done")
        .send()
        .await
        .expect_body(&big);
    let mut conn = t.client(hoard.addr).connect().await;
    conn.get("/partial").tx().await;
    conn.read_until("HALFWAY").await;
    assert!(
        files(&dir).iter().any(|f| f.ends_with(".tmp")),
        "the partial object is being written: {:?}",
        files(&dir)
    );
    hoard.kill9();
    killed.sync().await;

    let mut hoard = start(origin.addr(), &dir).await;
    let loaded = hoard.wait_log("disk: zone loaded").await;
    assert!(loaded.contains("objects=1"), "{loaded}");
    assert!(
        !files(&dir).iter().any(|f| f.ends_with(".tmp")),
        "temporary file removed: {:?}",
        files(&dir)
    );
    t.client(hoard.addr)
        .get("/done")
        .send()
        .await
        .expect_body(&big)
        .expect_cache_status("hit");
    t.client(hoard.addr)
        .get("/partial")
        .send()
        .await
        .expect_body("complete")
        .expect_cache_status("fwd=uri-miss");
    hoard.kill9();
    origin.finish().await;
}
