//! s (codings): a fill's streaming clients get a coding they accept, and
//! a coding hoard does not know is stored as sent (RFC 9110 §12.5.3,
//! RFC 9111 §4.1).

use hoard_policy::encoding::Coding;
use hoard_proxy::encode::{decode, encode};
use hoard_testkit::{Response, Test};

/// About 48 KiB of text that gzip shrinks to about half: its first half
/// decodes to many bytes before the rest arrives.
fn text() -> String {
    let words = [
        "cache", "origin", "fill", "hoard", "stream", "gzip", "body", "key",
    ];
    let mut x: u32 = 7;
    let mut out = String::new();
    while out.len() < 48 << 10 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        out.push_str(words[(x >> 16) as usize % words.len()]);
        out.push_str(&format!("{} ", (x >> 8) % 1000));
    }
    out
}

// s02001: an origin that sends gzip although the fill asked for identity.
// The client that started the fill (`identity`) and two collapsed readers
// (none, `gzip`) read it while it arrives: the first two get it decoded
// (no `Content-Encoding`, no `Content-Length`, the identity ETag a hit
// would give), the gzip client the origin's own bytes; one origin request,
// and the hits that follow give each the same.
#[tokio::test]
async fn s02001_a_fills_streaming_clients_get_gzip_decoded_unless_they_accept_it() {
    let t = Test::new("s02001");
    let body = text();
    let gz = encode(Coding::Gzip, body.as_bytes());
    let half = t.barrier(2);
    let go = t.barrier(2);
    let origin = {
        let (gz, half, go) = (gz.clone(), half.clone(), go.clone());
        t.origin()
            .script(move |mut s| async move {
                s.rxreq()
                    .await
                    .expect_url("/g")
                    .expect_header("accept-encoding", "identity");
                s.txresp(200)
                    .hdr("Content-Type", "text/html")
                    .hdr("Content-Encoding", "gzip")
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"g1\"")
                    .hdr("Content-Length", gz.len())
                    .send_head()
                    .await;
                s.chunk(&gz[..gz.len() / 2]).await;
                half.sync().await;
                go.sync().await;
                s.chunk(&gz[gz.len() / 2..]).await;
                s.end().await;
            })
            .start()
            .await
    };
    let p = t.proxy().origin(&origin).admin().start().await;
    let mut first = t.client(&p).connect().await;
    first
        .get("/g")
        .hdr("Accept-Encoding", "identity")
        .tx()
        .await;
    half.sync().await;
    let mut none = t.client(&p).connect().await;
    none.get("/g").tx().await;
    let mut gzip = t.client(&p).connect().await;
    gzip.get("/g").hdr("Accept-Encoding", "gzip").tx().await;
    p.wait_counter("fill_waiters_total", 2).await;
    go.sync().await;

    let identity_ok = |r: &Response, who: &str| {
        r.expect_status(200)
            .expect_no_header("content-encoding")
            .expect_no_header("content-length")
            .expect_header("etag", "\"g1-identity\"")
            .expect_header_contains("vary", "Accept-Encoding");
        assert_eq!(r.text(), body, "{who}: the decoded body");
    };
    let r = first.read_response().await;
    identity_ok(&r, "first");
    let r = none.read_response().await;
    identity_ok(&r, "no Accept-Encoding");
    r.expect_cache_status("collapsed");
    let r = gzip.read_response().await;
    r.expect_status(200)
        .expect_header("content-encoding", "gzip")
        .expect_header("content-length", &gz.len().to_string())
        .expect_header("etag", "\"g1\"")
        .expect_cache_status("collapsed");
    assert_eq!(r.body, gz, "the origin's own bytes");
    assert_eq!(p.counter("stream_decoded"), 2);

    // The stored copy answers the same.
    p.wait_counter("objects_stored", 1).await;
    for ae in [Some("identity"), None] {
        let c = t.client(&p);
        let mut req = c.get("/g");
        if let Some(ae) = ae {
            req = req.hdr("Accept-Encoding", ae);
        }
        let r = req.send().await;
        r.expect_cache_status("hit")
            .expect_no_header("content-encoding")
            .expect_header("etag", "\"g1-identity\"");
        assert_eq!(r.text(), body);
    }
    let r = t
        .client(&p)
        .get("/g")
        .hdr("Accept-Encoding", "gzip")
        .send()
        .await;
    r.expect_cache_status("hit")
        .expect_header("content-encoding", "gzip");
    assert_eq!(
        decode(Coding::Gzip, &r.body, 1 << 20).unwrap(),
        body.as_bytes()
    );
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// s03001: a coding hoard does not know (`x-custom`), sent although the
// fill asked for identity, with `Vary: Accept-Encoding`: stored as sent
// and served from the cache to the requests that accept it (named, or by
// `*`); a request that does not accept it goes to the origin with its own
// field and leaves the stored copy alone. A client that sent no field is
// not taken to accept it.
#[tokio::test]
async fn s03001_an_unknown_coding_is_stored_and_served_to_requests_that_accept_it() {
    let t = Test::new("s03001");
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq()
                .await
                .expect_url("/v")
                .expect_header("accept-encoding", "identity");
            s.txresp(200)
                .hdr("Content-Type", "text/html")
                .hdr("Content-Encoding", "x-custom")
                .hdr("Cache-Control", "max-age=600")
                .hdr("Vary", "Accept-Encoding")
                .body("custom-coded bytes")
                .send()
                .await;
            for ae in [Some("gzip"), None, Some("gzip")] {
                let r = s.rxreq().await;
                r.expect_url("/v");
                match ae {
                    Some(ae) => r.expect_header("accept-encoding", ae),
                    None => r.expect_no_header("accept-encoding"),
                };
                s.txresp(200)
                    .hdr("Content-Type", "text/html")
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Vary", "Accept-Encoding")
                    .body("plain bytes")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let p = t.proxy().origin(&origin).admin().start().await;
    let get = |ae: Option<&'static str>| {
        let c = t.client(&p);
        let mut req = c.get("/v");
        if let Some(ae) = ae {
            req = req.hdr("Accept-Encoding", ae);
        }
        req.send()
    };
    let r = get(Some("x-custom")).await;
    r.expect_status(200)
        .expect_header("content-encoding", "x-custom")
        .expect_body("custom-coded bytes");
    p.wait_counter("objects_stored", 1).await;
    for ae in ["x-custom", "X-Custom;q=0.5, gzip", "*", "gzip, *;q=0.1"] {
        let r = get(Some(ae)).await;
        r.expect_cache_status("hit")
            .expect_header("content-encoding", "x-custom")
            .expect_body("custom-coded bytes");
    }
    // Not acceptable (not named, no field, refused by name): the origin's
    // own answer to the client's field (the codings hoard knows), not stored.
    for ae in [Some("gzip"), None, Some("x-custom;q=0, gzip")] {
        let r = get(ae).await;
        r.expect_status(200)
            .expect_cache_status("fwd=bypass")
            .expect_no_header("content-encoding")
            .expect_body("plain bytes");
    }
    let r = get(Some("x-custom")).await;
    r.expect_cache_status("hit")
        .expect_body("custom-coded bytes");
    assert_eq!(p.counter("objects_stored"), 1);
    assert_eq!(origin.requests(), 4);
    origin.finish().await;
}

// s03002: without `Vary` the origin says its answer does not depend on
// `Accept-Encoding` (RFC 9111 §4.1): a response in a coding hoard does not
// know is stored and its fields and bytes served to every request as sent
// (the shape of the conformance suite's `headers-store-Content-Encoding`).
#[tokio::test]
async fn s03002_an_unknown_coding_without_vary_is_served_to_every_request() {
    let t = Test::new("s03002");
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/n");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=3600")
                .hdr("Content-Encoding", "compress")
                .body("compressed bytes")
                .send()
                .await;
        })
        .start()
        .await;
    let p = t.proxy().origin(&origin).admin().start().await;
    let r = t
        .client(&p)
        .get("/n")
        .hdr("Accept-Encoding", "gzip, deflate")
        .send()
        .await;
    r.expect_status(200)
        .expect_header("content-encoding", "compress")
        .expect_body("compressed bytes");
    p.wait_counter("objects_stored", 1).await;
    for ae in [Some("gzip, deflate"), Some("compress"), None] {
        let c = t.client(&p);
        let mut req = c.get("/n");
        if let Some(ae) = ae {
            req = req.hdr("Accept-Encoding", ae);
        }
        let r = req.send().await;
        r.expect_cache_status("hit")
            .expect_header("content-encoding", "compress")
            .expect_body("compressed bytes");
    }
    assert_eq!(p.counter("hit_for_pass_marks"), 0);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// s03003: the client whose request started the fill does not accept the
// unknown coding the origin sent (with `Vary: Accept-Encoding`): it gets
// the origin's answer to its own field instead, and the fill's copy is
// still stored for the requests that accept it.
#[tokio::test]
async fn s03003_a_fills_client_that_does_not_accept_an_unknown_coding_asks_the_origin_itself() {
    let t = Test::new("s03003");
    let origin = t
        .origin()
        .script(move |mut s| async move {
            for (ae, coding, body) in [
                ("identity", Some("x-custom"), "custom-coded bytes"),
                ("gzip", None, "plain bytes"),
            ] {
                s.rxreq()
                    .await
                    .expect_url("/w")
                    .expect_header("accept-encoding", ae);
                let mut r = s
                    .txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Vary", "Accept-Encoding");
                if let Some(c) = coding {
                    r = r.hdr("Content-Encoding", c);
                }
                r.body(body).send().await;
            }
        })
        .start()
        .await;
    let p = t.proxy().origin(&origin).admin().start().await;
    let r = t
        .client(&p)
        .get("/w")
        .hdr("Accept-Encoding", "gzip")
        .send()
        .await;
    r.expect_status(200)
        .expect_cache_status("fwd=bypass")
        .expect_no_header("content-encoding")
        .expect_body("plain bytes");
    p.wait_counter("objects_stored", 1).await;
    let r = t
        .client(&p)
        .get("/w")
        .hdr("Accept-Encoding", "x-custom")
        .send()
        .await;
    r.expect_cache_status("hit")
        .expect_header("content-encoding", "x-custom")
        .expect_body("custom-coded bytes");
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}
