//! f: clients that hold connections without using them, stop reading,
//! stall their bodies or flood resets. Each limit holds, and other clients
//! are served while it is hit.

use std::time::Duration;

use hoard_testkit::Test;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MS: fn(u64) -> Duration = Duration::from_millis;

// f00050: a keep-alive connection with nothing in flight is closed after
// `keep_alive_timeout`; one whose request is still in flight (waiting for a
// slow origin) is not, however long it waits.
#[tokio::test]
async fn f00050_idle_keep_alive_connections_are_closed() {
    let t = Test::new("f00050");
    let release = t.barrier(2);
    let r = release.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            let slow = s.rxreq_concurrent().await;
            slow.expect_url("/slow");
            let quick = s.rxreq_concurrent().await;
            quick.expect_url("/quick");
            s.switch_to(&quick);
            s.txresp_no_store("quick").await;
            r.sync().await;
            s.switch_to(&slow);
            s.txresp_no_store("slow").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.keep_alive_timeout = MS(200))
        .start()
        .await;
    let mut busy = t.client(&proxy).connect().await;
    busy.send_raw("GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    origin.wait_requests(1).await;
    let mut idle = t.client(&proxy).connect().await;
    idle.get("/quick")
        .hdr("Connection", "keep-alive")
        .send()
        .await
        .expect_body("quick");
    idle.expect_closed().await;
    proxy.expect_counter("connections_idle_closed", 1);
    // The busy connection waited longer than the idle timeout, and is served.
    release.sync().await;
    busy.read_response().await.expect_body("slow");
    proxy.expect_counter("connections_idle_closed", 1);
    origin.finish().await;
}

// f00051: a client that stops reading a large response is dropped after
// `send_timeout`; the fill it was pacing ends instead of waiting for it
// (the origin's script can finish), and other clients get hits meanwhile.
#[tokio::test]
async fn f00051_slow_reader_is_dropped() {
    let t = Test::new("f00051");
    const PIECE: usize = 64 << 10;
    const PIECES: usize = 512; // 32 MiB: more than both sockets' buffers
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.serve_fresh("/small", 600, "small").await;
            s.rxreq().await.expect_url("/big");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", PIECE * PIECES)
                .send_head()
                .await;
            let piece = vec![b'b'; PIECE];
            for _ in 0..PIECES {
                s.chunk(&piece).await;
            }
            s.end().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.send_timeout = MS(300))
        .start()
        .await;
    t.client(&proxy)
        .get("/small")
        .send()
        .await
        .expect_body("small");
    let mut stalled = TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    stalled
        .write_all(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    stalled.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // ...and never reads again. Others are served meanwhile.
    t.client(&proxy)
        .get("/small")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body("small");
    proxy.wait_counter("connections_send_timeout", 1).await;
    origin.finish().await;
    drop(stalled);
}

// f00052: a request body that stops arriving gets 408 after
// `body_read_timeout`, and the connection is closed.
#[tokio::test]
async fn f00052_stalled_request_body_is_408() {
    let t = Test::new("f00052");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.body_read_timeout = MS(200))
        .start()
        .await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nabc")
        .await;
    c.read_response()
        .await
        .expect_status(408)
        .expect_header("connection", "close")
        .expect_cache_status("detail=body-timeout");
    c.expect_closed().await;
    proxy.expect_counter("client_body_timeouts", 1);
    origin.finish().await; // strict: no complete request reached the origin
}

/// HTTP/2 by hand: the preface, an empty SETTINGS, then frames.
mod h2raw {
    pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// `GET path` as a HPACK block (static-table names, no indexing).
    pub fn get(path: &str) -> Vec<u8> {
        let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
        b.extend_from_slice(path.as_bytes());
        b.extend_from_slice(&[0x01, 9]);
        b.extend_from_slice(b"localhost");
        b
    }

    /// Reads frames until a GOAWAY; returns its error code (None: closed first).
    pub async fn goaway(s: &mut tokio::net::TcpStream) -> Option<u32> {
        use tokio::io::AsyncReadExt;
        loop {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.ok()?;
            if head[3] == 0x7 {
                return Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
            }
        }
    }
}

// f00053: HTTP/2 rapid reset: a client that opens streams and resets them
// (each a request hoard had accepted) gets GOAWAY once it passes
// `max_resets`; the fill its requests started goes on and is a hit for others.
#[tokio::test]
async fn f00053_rapid_reset_gets_goaway() {
    let t = Test::new("f00053");
    let release = t.barrier(2);
    let r = release.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/slow");
            r.sync().await;
            s.txresp_fresh(600, "slow").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.server.max_resets = 5)
        .start()
        .await;
    let mut s = TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    s.write_all(h2raw::PREFACE).await.unwrap();
    let streams: Vec<u32> = (0..10).map(|i| 1 + 2 * i).collect();
    for &id in &streams {
        s.write_all(&h2raw::frame(0x1, 0x5, id, &h2raw::get("/slow")))
            .await
            .unwrap();
    }
    // All ten are accepted: one leads the fill, nine wait for it.
    origin.wait_requests(1).await;
    proxy.wait_counter("fill_waiters_total", 9).await;
    for &id in &streams {
        s.write_all(&h2raw::frame(0x3, 0, id, &8u32.to_be_bytes()))
            .await
            .unwrap();
    }
    assert_eq!(
        h2raw::goaway(&mut s).await,
        Some(0),
        "GOAWAY (NO_ERROR) after the flood"
    );
    proxy.wait_counter("connections_reset_flood", 1).await;
    release.sync().await;
    t.client(&proxy)
        .get("/slow")
        .send()
        .await
        .expect_body("slow");
    origin.finish().await;
}

// f00054: CONTINUATION flood: a header block that never ends is cut at the
// header list limit (the connection gets GOAWAY or is closed), and other
// clients are served meanwhile.
#[tokio::test]
async fn f00054_continuation_flood_is_cut() {
    let t = Test::new("f00054");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200).body("fine").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut s = TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    s.write_all(h2raw::PREFACE).await.unwrap();
    s.write_all(&h2raw::frame(0x1, 0x1, 1, &h2raw::get("/")))
        .await
        .unwrap();
    // Each CONTINUATION carries one literal field of 16 000 bytes; 4 000 of
    // them would be 64 MB of header list.
    let mut field = vec![0x00, 0x01, b'x', 0x7f, 0x00];
    // HPACK integer 16000 with a 7-bit prefix: 127, then 15873 in 7-bit groups.
    field.truncate(4);
    let mut rest = 16_000u32 - 127;
    while rest >= 128 {
        field.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    field.push(rest as u8);
    field.extend(std::iter::repeat_n(b'v', 16_000));
    let cont = h2raw::frame(0x9, 0, 1, &field);
    let mut sent = 0;
    for _ in 0..4_000 {
        if s.write_all(&cont).await.is_err() {
            break;
        }
        sent += 1;
    }
    assert!(sent < 4_000, "the server kept reading the header block");
    t.client(&proxy).get("/").send().await.expect_body("fine");
    origin.finish().await;
}

// f00055: the in-flight table holds at most `cache.max_fills` fills: a miss
// beyond it goes to the origin uncached (nothing buffered for it, nothing
// stored); once a fill ends, misses are filled and stored again.
#[tokio::test]
async fn f00055_in_flight_fills_are_bounded() {
    let t = Test::new("f00055");
    let release = t.barrier(2);
    let r = release.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            let a = s.rxreq_concurrent().await;
            a.expect_url("/a");
            let b = s.rxreq_concurrent().await;
            b.expect_url("/b");
            s.switch_to(&b);
            s.txresp_fresh(600, "b").await;
            r.sync().await;
            s.switch_to(&a);
            s.txresp_fresh(600, "a").await;
            s.serve_fresh("/b", 600, "b2").await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.cache.max_fills = 1)
        .start()
        .await;
    let a = t.client(&proxy).get("/a").spawn();
    origin.wait_requests(1).await;
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_body("b")
        .expect_cache_status("fwd=bypass");
    proxy.expect_counter("fills_refused", 1);
    release.sync().await;
    a.await.unwrap().expect_body("a");
    proxy.wait_counter("fills_completed", 1).await;
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_body("b2")
        .expect_cache_status("stored");
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}
