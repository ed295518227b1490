//! r (partial copies): an origin's 206 kept as part of its object (RFC 9111
//! §3.3), reused for the ranges it holds, completed with the rest (§3.4),
//! never joined to bytes of another version, never served as the whole.

use hoard_config::ColdRange;
use hoard_testkit::{Origin, Script, Test, TestProxy};

use super::r_range::{body, multipart};

const LEN: usize = 1000;

/// Sends a 206 of bytes `r` of `full`, fresh for ten minutes, with `etag`.
async fn send_part(s: &mut Script, full: &[u8], r: std::ops::Range<usize>, etag: &str) {
    s.txresp(206)
        .hdr("Cache-Control", "max-age=600")
        .hdr("ETag", etag)
        .hdr(
            "Content-Range",
            format!("bytes {}-{}/{}", r.start, r.end - 1, full.len()),
        )
        .body(&full[r])
        .send()
        .await;
}

/// A proxy whose route forwards cold ranges; with `disk`, over a disk zone
/// with no memory tier (every hit read from disk).
async fn forwarding_proxy(t: &Test, origin: &Origin, disk: bool) -> TestProxy {
    let mut b = t
        .proxy()
        .origin(origin)
        .route(|r| r.cold_range = ColdRange::Forward);
    if disk {
        b = b.disk(&t.dir().join("zone"), 64 << 20, 0);
    }
    let proxy = b.start().await;
    if disk {
        proxy.wait_counter("disk_load_done", 1).await;
    }
    proxy
}

// r00020: with `cold_range = "forward"`, a cold range goes to the origin as
// asked; the 206 is kept and answers every range inside it (single, several,
// unsatisfiable) without the origin. A range outside it is forwarded, and
// its 206 replaces the copy. A URL purge removes the copy.
#[tokio::test]
async fn r00020_a_forwarded_range_is_kept_and_reused() {
    let t = Test::new("r00020");
    let full = body(LEN);
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (range, from, to) in [
                ("bytes=100-199", 100, 200),
                ("bytes=900-", 900, LEN),
                ("bytes=-50", 950, LEN),
            ] {
                s.rxreq()
                    .await
                    .expect_url("/v")
                    .expect_header("range", range);
                s.txresp(206)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Type", "application/octet-stream")
                    .hdr("ETag", "\"v1\"")
                    .hdr("Content-Range", format!("bytes {from}-{}/{LEN}", to - 1))
                    .body(&f[from..to])
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.cold_range = ColdRange::Forward)
        .admin()
        .start()
        .await;
    let get = |range: &str| t.client(&proxy).get("/v").hdr("Range", range);
    get("bytes=100-199")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 100-199/1000")
        .expect_cache_status("fwd=uri-miss; fwd-status=206; stored; ttl=600")
        .expect_body(&full[100..200]);
    proxy.wait_counter("partial_stored", 1).await;
    get("bytes=100-199")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 100-199/1000")
        .expect_header("etag", "\"v1\"")
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full[100..200]);
    get("bytes=120-149")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 120-149/1000")
        .expect_header("content-length", "30")
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full[120..150]);
    let r = get("bytes=100-109,150-159").send().await;
    r.expect_status(206).expect_cache_status("hit; ttl=600");
    assert_eq!(
        multipart(&r),
        vec![
            ("bytes 100-109/1000".to_string(), full[100..110].to_vec()),
            ("bytes 150-159/1000".to_string(), full[150..160].to_vec()),
        ]
    );
    get("bytes=2000-")
        .send()
        .await
        .expect_status(416)
        .expect_header("content-range", "bytes */1000");
    assert_eq!(origin.requests(), 1, "all of these came from the copy");
    // Outside the copy: forwarded; its 206 is the copy from now on.
    get("bytes=900-")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 900-999/1000")
        .expect_body(&full[900..]);
    proxy.wait_counter("partial_stored", 2).await;
    get("bytes=-50")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 950-999/1000")
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full[950..]);
    proxy.expect_counter("partial_hits", 4);
    // A URL purge takes the partial copy too.
    let r = crate::admin::purge(&t, &proxy, r#"{"url": "http://localhost/v"}"#).await;
    assert_eq!(crate::admin::purged(&r), 1);
    get("bytes=-50")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("fwd=uri-miss; fwd-status=206; stored; ttl=600")
        .expect_body(&full[950..]);
    origin.finish().await;
}

/// r00021's case: a copy of the first 300 bytes, then a whole GET.
async fn completion(t: &Test, disk: bool) {
    let full = body(LEN);
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("range", "bytes=0-299");
            send_part(&mut s, &f, 0..300, "\"v1\"").await;
            // The rest, asked for with If-Range: the same version.
            s.rxreq()
                .await
                .expect_header("range", "bytes=300-")
                .expect_header("if-range", "\"v1\"");
            send_part(&mut s, &f, 300..LEN, "\"v1\"").await;
        })
        .start()
        .await;
    let proxy = forwarding_proxy(t, &origin, disk).await;
    t.client(&proxy)
        .get("/c")
        .hdr("Range", "bytes=0-299")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[..300]);
    proxy.wait_counter("partial_stored", 1).await;
    // The whole object: the stored 300 bytes, then the origin's 700.
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", "1000")
        .expect_no_header("content-range")
        .expect_cache_status("fwd=uri-miss; fwd-status=200; stored; ttl=600")
        .expect_body(&full);
    proxy.wait_counter("objects_stored", 2).await;
    proxy.expect_counter("partial_completed", 1);
    // Stored whole: a hit, and ranges anywhere come from it.
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full);
    t.client(&proxy)
        .get("/c")
        .hdr("Range", "bytes=250-349")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 250-349/1000")
        .expect_body(&full[250..350]);
    origin.finish().await;
}

// r00021: a whole GET of an object whose first bytes are kept asks the
// origin for the rest only (`Range: bytes=N-` with `If-Range`), answers a
// 200 of the kept bytes followed by the origin's, and stores the whole
// object: on the memory tier and on a disk zone.
#[tokio::test]
async fn r00021_a_partial_copy_is_completed_with_the_rest() {
    completion(&Test::new("r00021"), false).await;
}

#[tokio::test]
async fn r00021_a_partial_copy_on_disk_is_completed_with_the_rest() {
    completion(&Test::new("r00021d"), true).await;
}

// r00022: the rest of a kept copy comes back from another version (a 206
// with another ETag, from an origin that ignored If-Range): nothing is
// joined. The copy is dropped and the whole object fetched; the client gets
// the new version only. An origin that honours If-Range answers 200: the
// new version, stored whole.
#[tokio::test]
async fn r00022_another_version_is_never_joined_to_a_copy() {
    let t = Test::new("r00022");
    let old = body(LEN);
    let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
    let (o, n) = (old.clone(), new.clone());
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/x", "/y"] {
                s.rxreq()
                    .await
                    .expect_url(path)
                    .expect_header("range", "bytes=0-299");
                send_part(&mut s, &o, 0..300, "\"v1\"").await;
            }
            // /x: If-Range ignored, the rest of another version.
            s.rxreq()
                .await
                .expect_url("/x")
                .expect_header("range", "bytes=300-");
            send_part(&mut s, &n, 300..LEN, "\"v2\"").await;
            s.rxreq().await.expect_url("/x").expect_no_header("range");
            s.txresp_fresh_etag(600, "\"v2\"", &n).await;
            // /y: If-Range honoured, a 200 of the new version.
            s.rxreq()
                .await
                .expect_url("/y")
                .expect_header("if-range", "\"v1\"");
            s.txresp_fresh_etag(600, "\"v2\"", &n).await;
        })
        .start()
        .await;
    let proxy = forwarding_proxy(&t, &origin, false).await;
    for (i, path) in ["/x", "/y"].into_iter().enumerate() {
        t.client(&proxy)
            .get(path)
            .hdr("Range", "bytes=0-299")
            .send()
            .await
            .expect_body(&old[..300]);
        proxy.wait_counter("partial_stored", i as u64 + 1).await;
    }
    for path in ["/x", "/y"] {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_status(200)
            .expect_header("etag", "\"v2\"")
            .expect_body(&new);
    }
    proxy.expect_counter("partial_mismatches", 1);
    proxy.expect_counter("partial_completed", 0);
    proxy.wait_counter("objects_stored", 4).await;
    // The first bytes now come from the new version, stored whole.
    for path in ["/x", "/y"] {
        t.client(&proxy)
            .get(path)
            .hdr("Range", "bytes=0-9")
            .send()
            .await
            .expect_status(206)
            .expect_cache_status("hit; ttl=600")
            .expect_body(&new[..10]);
    }
    origin.finish().await;
}

// r00023: by default a cold range fetches the whole object, without Range.
// An origin that answers that with a 206 anyway (bytes 0-4 of 10) has it
// relayed as sent and kept as a partial copy, never as the whole object: a
// whole GET then asks for `bytes=5-` with If-Range and joins the rest. A
// copy without a validator is never joined (a whole GET fetches the whole
// object), and a 206 whose body is not as long as its Content-Range is
// relayed but never kept.
#[tokio::test]
async fn r00023_an_unasked_206_is_kept_as_a_partial_copy_only() {
    let t = Test::new("r00023");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, etag) in [("/u", Some("\"u1\"")), ("/n", None)] {
                s.rxreq().await.expect_url(path).expect_no_header("range");
                let mut r = s
                    .txresp(206)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Range", "bytes 0-4/10");
                if let Some(e) = etag {
                    r = r.hdr("ETag", e);
                }
                r.body("01234").send().await;
            }
            s.rxreq()
                .await
                .expect_url("/u")
                .expect_header("range", "bytes=5-")
                .expect_header("if-range", "\"u1\"");
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"u1\"")
                .hdr("Content-Range", "bytes 5-9/10")
                .body("56789")
                .send()
                .await;
            s.rxreq().await.expect_url("/n").expect_no_header("range");
            s.txresp_fresh(600, "abcdefghij").await;
            // Six bytes declared by Content-Range, five sent: twice, never kept.
            for _ in 0..2 {
                s.rxreq().await.expect_url("/bad");
                s.txresp(206)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Range", "bytes 4-9/10")
                    .body("01234")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for (i, path) in ["/u", "/n"].into_iter().enumerate() {
        t.client(&proxy)
            .get(path)
            .hdr("Range", "bytes=0-9")
            .send()
            .await
            .expect_status(206)
            .expect_header("content-range", "bytes 0-4/10")
            .expect_body("01234");
        proxy.wait_counter("partial_stored", i as u64 + 1).await;
    }
    t.client(&proxy)
        .get("/u")
        .hdr("Range", "bytes=1-2")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit; ttl=600")
        .expect_body("12");
    t.client(&proxy)
        .get("/u")
        .send()
        .await
        .expect_status(200)
        .expect_body("0123456789");
    t.client(&proxy)
        .get("/n")
        .send()
        .await
        .expect_status(200)
        .expect_body("abcdefghij");
    for _ in 0..2 {
        t.client(&proxy)
            .get("/bad")
            .hdr("Range", "bytes=-5")
            .send()
            .await
            .expect_status(206)
            .expect_body("01234");
    }
    proxy.wait_counter("partial_completed", 1).await;
    proxy.expect_counter("partial_stored", 2);
    origin.finish().await;
}

// r00025: the rest of a copy comes back with a field that forbids storing
// (Set-Cookie): the joined object may not be stored, and its rest alone is
// not the answer, so the whole object is fetched and sent; nothing mixed.
// An error status for the rest is relayed and keeps the copy; a 416 drops
// it and the whole object is fetched.
#[tokio::test]
async fn r00025_a_completion_that_cannot_be_stored_fetches_the_whole() {
    let t = Test::new("r00025");
    let full = body(LEN);
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("range", "bytes=0-299");
            send_part(&mut s, &f, 0..300, "\"v1\"").await;
            s.rxreq().await.expect_header("range", "bytes=300-");
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"v1\"")
                .hdr("Set-Cookie", "s=1")
                .hdr("Content-Range", format!("bytes 300-999/{LEN}"))
                .body(&f[300..])
                .send()
                .await;
            s.rxreq().await.expect_no_header("range");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"v1\"")
                .hdr("Set-Cookie", "s=1")
                .body(&f)
                .send()
                .await;
            // /q: an error for the rest is relayed and keeps the copy.
            s.rxreq()
                .await
                .expect_url("/q")
                .expect_header("range", "bytes=0-299");
            send_part(&mut s, &f, 0..300, "\"v1\"").await;
            s.rxreq()
                .await
                .expect_url("/q")
                .expect_header("range", "bytes=300-");
            s.txresp(503).body("busy").send().await;
            // /r: a 416 drops the copy; the whole object is fetched.
            s.rxreq()
                .await
                .expect_url("/r")
                .expect_header("range", "bytes=0-299");
            send_part(&mut s, &f, 0..300, "\"v1\"").await;
            s.rxreq()
                .await
                .expect_url("/r")
                .expect_header("range", "bytes=300-");
            s.txresp(416)
                .hdr("Content-Range", "bytes */200")
                .send()
                .await;
            s.rxreq().await.expect_no_header("range");
            s.txresp_fresh_etag(600, "\"v2\"", &f[..200]).await;
        })
        .start()
        .await;
    let proxy = forwarding_proxy(&t, &origin, false).await;
    t.client(&proxy)
        .get("/z")
        .hdr("Range", "bytes=0-299")
        .send()
        .await
        .expect_body(&full[..300]);
    proxy.wait_counter("partial_stored", 1).await;
    t.client(&proxy)
        .get("/z")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", "1000")
        .expect_body(&full);
    t.client(&proxy)
        .get("/q")
        .hdr("Range", "bytes=0-299")
        .send()
        .await
        .expect_body(&full[..300]);
    proxy.wait_counter("partial_stored", 2).await;
    t.client(&proxy)
        .get("/q")
        .send()
        .await
        .expect_status(503)
        .expect_body("busy");
    // The copy stays: ranges inside it are still hits.
    t.client(&proxy)
        .get("/q")
        .hdr("Range", "bytes=0-9")
        .send()
        .await
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full[..10]);
    t.client(&proxy)
        .get("/r")
        .hdr("Range", "bytes=0-299")
        .send()
        .await
        .expect_body(&full[..300]);
    proxy.wait_counter("partial_stored", 3).await;
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_status(200)
        .expect_body(&full[..200]);
    proxy.expect_counter("partial_completed", 0);
    proxy.expect_counter("partial_mismatches", 1);
    origin.finish().await;
}

// r00024: a forwarded range that the origin answers with a 200 (it ignores
// Range) gets its range from that response as it arrives, and the object is
// stored whole: later requests, ranged or not, are hits.
#[tokio::test]
async fn r00024_a_forwarded_range_answered_whole_stores_the_whole_object() {
    let t = Test::new("r00024");
    let full = body(LEN);
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("range", "bytes=10-19");
            s.txresp_fresh(600, &f).await;
        })
        .start()
        .await;
    let proxy = forwarding_proxy(&t, &origin, false).await;
    t.client(&proxy)
        .get("/w")
        .hdr("Range", "bytes=10-19")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", "bytes 10-19/1000")
        .expect_body(&full[10..20]);
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/w")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full);
    t.client(&proxy)
        .get("/w")
        .hdr("Range", "bytes=500-")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full[500..]);
    proxy.expect_counter("partial_stored", 0);
    origin.finish().await;
}

// r00026: the rest of a kept copy is longer than its Content-Range says,
// sent chunked (so nothing cuts it at a declared length) in two chunks:
// the right 700 bytes, then 700 more. No chunk is dropped or reordered
// (the client gets the copy, then the right rest, whatever follows), the
// joined body is longer than the object and is not stored, and the next
// whole GET asks for the rest again and stores the right object.
#[tokio::test]
async fn r00026_a_rest_longer_than_announced_is_never_stored() {
    let t = Test::new("r00026");
    let full = body(LEN);
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("range", "bytes=0-299");
            send_part(&mut s, &f, 0..300, "\"v1\"").await;
            s.rxreq().await.expect_header("range", "bytes=300-");
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"v1\"")
                .hdr("Content-Range", format!("bytes 300-{}/{LEN}", LEN - 1))
                .chunked()
                .send_head()
                .await;
            s.chunk(&f[300..]).await;
            s.chunk(vec![b'Z'; LEN - 300]).await;
            s.end().await;
            // Nothing was stored: asked again, answered right.
            s.rxreq().await.expect_header("range", "bytes=300-");
            send_part(&mut s, &f, 300..LEN, "\"v1\"").await;
        })
        .start()
        .await;
    let proxy = forwarding_proxy(&t, &origin, false).await;
    t.client(&proxy)
        .get("/z")
        .hdr("Range", "bytes=0-299")
        .send()
        .await
        .expect_status(206);
    proxy.wait_counter("partial_stored", 1).await;
    let got = match t.client(&proxy).get("/z").try_send().await {
        Ok(r) => r.body.to_vec(),
        Err(e) => e.partial().expect("a response").body.to_vec(),
    };
    let n = got.len().min(LEN);
    assert_eq!(&got[..n], &full[..n], "the copy, then the right rest");
    proxy.wait_counter("fills_aborted", 1).await;
    proxy.expect_counter("partial_completed", 0);
    t.client(&proxy)
        .get("/z")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("fwd=uri-miss; fwd-status=200; stored; ttl=600")
        .expect_body(&full);
    proxy.wait_counter("partial_completed", 1).await;
    t.client(&proxy)
        .get("/z")
        .send()
        .await
        .expect_cache_status("hit; ttl=600")
        .expect_body(&full);
    origin.finish().await;
}
