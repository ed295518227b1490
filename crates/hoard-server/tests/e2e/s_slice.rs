//! s: slice mode. Objects are fetched with `Range` and cached as aligned
//! slices; each slice is a fill of its own.

use std::collections::BTreeSet;

use hoard_testkit::{Request, Script};
use hoard_testkit::{Test, TestProxy};

use super::r_range::{body, random_ranges, LEN};

/// The slice size of these cases: 300 000 bytes are 5 slices (the last one short).
pub(crate) const SIZE: u64 = 65_536;
pub(crate) const ETAG: &str = "\"s1\"";

/// The slice starts a case expects the origin to be asked for, once each.
pub(crate) fn starts(slices: &[u64]) -> BTreeSet<u64> {
    slices.iter().map(|i| i * SIZE).collect()
}

/// The first and last byte of a `Range: bytes=A-B` request.
fn asked(req: &Request) -> (u64, u64) {
    let v = req.header("range").expect("a slice request carries Range");
    let (a, b) = v
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .expect("bytes=A-B");
    (a.parse().unwrap(), b.parse().unwrap())
}

/// Answers one slice request with the bytes of `full` it asks for.
async fn answer(s: &mut Script, req: &Request, full: &[u8], etag: &str) {
    let (a, b) = asked(req);
    assert_eq!(b + 1 - a, SIZE, "slices are aligned and whole");
    let last = b.min(full.len() as u64 - 1);
    s.txresp(206)
        .hdr("Cache-Control", "max-age=600")
        .hdr("ETag", etag)
        .hdr("Content-Type", "application/octet-stream")
        .hdr("Content-Range", format!("bytes {a}-{last}/{}", full.len()))
        .body(&full[a as usize..=last as usize])
        .send()
        .await;
}

/// Serves the slices starting at `want`, in any order, each exactly once.
pub(crate) async fn serve(
    s: &mut Script,
    path: &str,
    full: &[u8],
    etag: &str,
    mut want: BTreeSet<u64>,
) {
    while !want.is_empty() {
        let req = s.rxreq().await;
        req.expect_url(path);
        let (a, _) = asked(&req);
        assert!(
            want.remove(&a),
            "slice at {a} asked for twice or not at all"
        );
        answer(s, &req, full, etag).await;
    }
}

/// A slicing proxy. Ranges are never fetched alone (that depends on how
/// far a fill got when a request looks), except in s00010, which sets it.
pub(crate) async fn slice_proxy(
    t: &Test,
    origin: &hoard_testkit::Origin,
    prefetch: u32,
) -> TestProxy {
    slice_proxy_direct(t, origin, prefetch, 0).await
}

async fn slice_proxy_direct(
    t: &Test,
    origin: &hoard_testkit::Origin,
    prefetch: u32,
    direct_max: u64,
) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .route(|r| {
            r.slice = Some(SIZE);
            r.slice_prefetch = prefetch;
            r.slice_direct_max = direct_max;
        })
        .start()
        .await;
    if std::env::var("HOARD_TEST_STORE").as_deref() == Ok("disk") {
        proxy.wait_counter("disk_load_done", 1).await;
    }
    proxy
}

// s00001: a cold range fetches only the slice it needs (a range that ends
// inside its slice prefetches nothing); ranges inside stored slices are
// hits; a full GET fetches the missing slices and streams them in order;
// every slice is fetched once.
#[tokio::test]
async fn s00001_cold_range_fetches_its_slice_and_later_ones_are_hits() {
    let t = Test::new("s00001");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[1])).await;
            serve(&mut s, "/v", &full, ETAG, starts(&[2])).await;
            serve(&mut s, "/v", &full, ETAG, starts(&[0, 3, 4])).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    let get = |range: &str| t.client(&proxy).get("/v").hdr("Range", range);

    let r = get("bytes=70000-70099").send().await;
    r.expect_status(206)
        .expect_header("content-range", &format!("bytes 70000-70099/{LEN}"))
        .expect_header("content-length", "100")
        .expect_header("etag", ETAG)
        .expect_cache_status("fwd=uri-miss")
        .expect_cache_status("detail=slice")
        .expect_body(&full[70_000..70_100]);
    proxy.wait_counter("objects_stored", 1).await;
    proxy.expect_counter("slice_fills", 1);
    proxy.expect_counter("slice_prefetches", 0);
    proxy.expect_counter("range_misses", 1);

    // Across the boundary of a stored slice and a missing one.
    let r = get("bytes=100000-140000").send().await;
    r.expect_status(206)
        .expect_header("content-range", &format!("bytes 100000-140000/{LEN}"))
        .expect_body(&full[100_000..=140_000]);
    proxy.wait_counter("objects_stored", 2).await;
    proxy.expect_counter("slice_fills", 2);

    // A hit inside one stored slice. (The previous range counted as a
    // hit too: its first slice was stored.)
    get("bytes=66000-66099")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[66_000..66_100]);
    proxy.expect_counter("range_hits", 2);

    // A full GET: slices 0, 3 and 4 are fetched, 1 and 2 are hits.
    let r = t.client(&proxy).get("/v").send().await;
    r.expect_status(200)
        .expect_header("content-length", &LEN.to_string())
        .expect_header("accept-ranges", "bytes")
        .expect_no_header("content-range")
        .expect_body(&full);
    proxy.wait_counter("objects_stored", 5).await;

    // Everything is stored now: HEAD, a full GET, a conditional GET and a
    // suffix range go nowhere.
    t.client(&proxy)
        .head("/v")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", &LEN.to_string());
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body(&full);
    t.client(&proxy)
        .get("/v")
        .hdr("If-None-Match", ETAG)
        .send()
        .await
        .expect_status(304);
    get("bytes=-10")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[LEN - 10..]);
    get(&format!("bytes={LEN}-"))
        .send()
        .await
        .expect_status(416)
        .expect_header("content-range", &format!("bytes */{LEN}"));
    proxy.expect_counter("slice_fills", 5);
    assert_eq!(origin.requests(), 5);
    origin.finish().await;
}

// s00007: reading a slice through to its end prefetches the next one: a
// range of exactly slice 0 has the origin asked for slice 1 too, which is
// then a hit.
#[tokio::test]
async fn s00007_reading_through_a_slice_prefetches_the_next() {
    let t = Test::new("s00007");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/p", &full, ETAG, starts(&[0])).await;
            serve(&mut s, "/p", &full, ETAG, starts(&[1])).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    let get = |range: &str| t.client(&proxy).get("/p").hdr("Range", range);
    get(&format!("bytes=0-{}", SIZE - 1))
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[..SIZE as usize]);
    proxy.wait_counter("objects_stored", 2).await;
    proxy.expect_counter("slice_prefetches", 1);
    get("bytes=70000-70099")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[70_000..70_100]);
    proxy.expect_counter("slice_fills", 2);
    origin.finish().await;
}

// s00002: the bytes of a cold range go out as they arrive from the slice's
// fill, before the slice is complete; a second request for the same slice
// joins that fill.
#[tokio::test]
async fn s00002_range_bytes_go_out_before_the_slice_is_complete() {
    let t = Test::new("s00002");
    let full = body(LEN);
    let first_part = t.barrier(2);
    let answered = t.barrier(2);
    let (b1, b2) = (first_part.clone(), answered.clone());
    let origin = t
        .origin()
        .script(move |mut s| async move {
            let full = body(LEN);
            let req = s.rxreq().await;
            assert_eq!(asked(&req), (0, SIZE - 1));
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", ETAG)
                .hdr("Content-Range", format!("bytes 0-{}/{LEN}", SIZE - 1))
                .hdr("Content-Length", SIZE)
                .send_head()
                .await;
            s.chunk(&full[..10_000]).await;
            b1.sync().await;
            b2.sync().await;
            s.chunk(&full[10_000..SIZE as usize]).await;
            s.end().await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 0).await;
    let get = |range: &str| t.client(&proxy).get("/a").hdr("Range", range);
    let early = get("bytes=100-199").spawn();
    first_part.sync().await;
    early
        .await
        .unwrap()
        .expect_status(206)
        .expect_body(&full[100..200]);
    let joined = get("bytes=5000-5099").send().await;
    joined
        .expect_status(206)
        .expect_cache_status("collapsed")
        .expect_body(&full[5000..5100]);
    answered.sync().await;
    proxy.wait_counter("objects_stored", 1).await;
    get("bytes=60000-65535")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[60_000..65_536]);
    proxy.expect_counter("slice_fills", 1);
    origin.finish().await;
}

// s00003: an origin that ignores Range (answers 200 with the whole body)
// has the object stored whole; later ranges are hits on it.
#[tokio::test]
async fn s00003_origin_ignoring_range_is_stored_whole() {
    let t = Test::new("s00003");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let req = s.rxreq().await;
            assert_eq!(asked(&req), (SIZE, 2 * SIZE - 1));
            s.txresp_fresh_etag(600, ETAG, body(LEN)).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    let get = |range: &str| t.client(&proxy).get("/whole").hdr("Range", range);
    get("bytes=70000-70099")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", &format!("bytes 70000-70099/{LEN}"))
        .expect_body(&full[70_000..70_100]);
    proxy.wait_counter("objects_stored", 1).await;
    proxy.expect_counter("slice_range_ignored", 1);
    get("bytes=-10")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[LEN - 10..]);
    t.client(&proxy)
        .get("/whole")
        .send()
        .await
        .expect_status(200)
        .expect_body(&full);
    proxy.expect_counter("range_hits", 1);
    proxy.expect_counter("slice_prefetches", 0);
    origin.finish().await;
}

// s00004: the object changes at the origin between slices. The response
// whose head came from the old slice is aborted before any byte of the new
// slice; every slice of the object is dropped; the next request gets the
// new object whole and consistent.
#[tokio::test]
async fn s00004_changed_object_aborts_cleanly_and_heals() {
    let t = Test::new("s00004");
    let old = body(LEN);
    let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
    let aborted = t.barrier(2);
    let b = aborted.clone();
    let new2 = new.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            serve(&mut s, "/c", &body(LEN), "\"v1\"", starts(&[0])).await;
            // Slice 1 comes from the changed object; its body completes only
            // after the client saw the abort.
            let req = s.rxreq().await;
            assert_eq!(asked(&req), (SIZE, 2 * SIZE - 1));
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"v2\"")
                .hdr(
                    "Content-Range",
                    format!("bytes {SIZE}-{}/{LEN}", 2 * SIZE - 1),
                )
                .hdr("Content-Length", SIZE)
                .send_head()
                .await;
            b.sync().await;
            s.chunk(&new2[SIZE as usize..2 * SIZE as usize]).await;
            s.end().await;
            // After the heal: slice 0 again, then the rest (slice 1 is stored).
            serve(&mut s, "/c", &new2, "\"v2\"", starts(&[0, 2, 3, 4])).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 0).await;
    t.client(&proxy)
        .get("/c")
        .hdr("Range", "bytes=0-99")
        .send()
        .await
        .expect_status(206)
        .expect_header("etag", "\"v1\"")
        .expect_body(&old[..100]);
    proxy.wait_counter("objects_stored", 1).await;

    let err = t
        .client(&proxy)
        .get("/c")
        .try_send()
        .await
        .expect_err("the response is aborted");
    assert!(err.is_incomplete(), "{err}");
    let partial = err.partial().unwrap();
    partial.expect_status(200).expect_header("etag", "\"v1\"");
    assert!(
        partial.body.len() <= SIZE as usize && old.starts_with(&partial.body),
        "only bytes of the old object, none of the new one"
    );
    proxy.expect_counter("slice_validator_mismatches", 1);
    aborted.sync().await;
    proxy.wait_counter("objects_stored", 2).await;

    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_status(200)
        .expect_header("etag", "\"v2\"")
        .expect_body(&new);
    proxy.expect_counter("slice_validator_mismatches", 1);
    origin.finish().await;
}

// s00005: for random single and multiple ranges, sliced, the bytes equal
// the origin's, cold (slices fetched as ranges need them, each once) and
// warm.
#[tokio::test]
async fn s00005_random_ranges_over_slices_match_the_origin_bytes() {
    let t = Test::new("s00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            serve(&mut s, "/p", &body(LEN), ETAG, starts(&[0, 1, 2, 3, 4])).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    random_ranges(&t, &proxy, "/p", 7).await;
    proxy.wait_counter("objects_stored", 5).await;
    random_ranges(&t, &proxy, "/p", 8).await;
    proxy.expect_counter("slice_fills", 5);
    origin.finish().await;
}

// s00006: an empty object has no slice (the origin answers the first
// slice's Range with 416): it is fetched and stored whole, and a GET gets
// a 200 with no body; a 404 for a slice is relayed as it is.
#[tokio::test]
async fn s00006_empty_objects_and_errors() {
    let t = Test::new("s00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let req = s.rxreq().await;
            req.expect_url("/empty");
            assert_eq!(asked(&req), (0, SIZE - 1));
            s.txresp(416).hdr("Content-Range", "bytes */0").send().await;
            s.rxreq()
                .await
                .expect_url("/empty")
                .expect_no_header("range");
            s.txresp_fresh(600, "").await;
            let req = s.rxreq().await;
            req.expect_url("/missing");
            assert_eq!(asked(&req), (0, SIZE - 1));
            s.txresp(404).body("no such file").send().await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/empty")
            .send()
            .await
            .expect_status(200)
            .expect_header("content-length", "0")
            .expect_body("");
        proxy.wait_counter("objects_stored", 1).await;
    }
    proxy.expect_counter("cache_hit", 1);
    t.client(&proxy)
        .get("/missing")
        .send()
        .await
        .expect_status(404)
        .expect_body("no such file");
    proxy.expect_counter("slice_prefetches", 0);
    origin.finish().await;
}

// s00008: without a strong ETag or a Last-Modified, slices of two versions
// could not be told apart: the object is fetched and stored whole instead.
#[tokio::test]
async fn s00008_no_validator_means_no_slicing() {
    let t = Test::new("s00008");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            let req = s.rxreq().await;
            assert_eq!(asked(&req), (SIZE, 2 * SIZE - 1));
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "W/\"weak\"")
                .hdr(
                    "Content-Range",
                    format!("bytes {SIZE}-{}/{LEN}", 2 * SIZE - 1),
                )
                .body(&full[SIZE as usize..2 * SIZE as usize])
                .send()
                .await;
            s.rxreq().await.expect_url("/nv").expect_no_header("range");
            s.txresp_fresh_etag(600, "W/\"weak\"", &full).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 1).await;
    let get = |range: &str| t.client(&proxy).get("/nv").hdr("Range", range);
    get("bytes=70000-70099")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[70_000..70_100]);
    proxy.wait_counter("objects_stored", 2).await;
    get("bytes=200000-200099")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[200_000..200_100]);
    origin.finish().await;
}

// s00009: an origin error for one slice aborts the response that needed it
// but drops nothing: the stored slices stay, and no mismatch is counted.
#[tokio::test]
async fn s00009_origin_error_for_a_slice_keeps_the_others() {
    let t = Test::new("s00009");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/e", &full, ETAG, starts(&[0])).await;
            let req = s.rxreq().await;
            assert_eq!(asked(&req), (SIZE, 2 * SIZE - 1));
            s.txresp(503).body("busy").send().await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 0).await;
    t.client(&proxy)
        .get("/e")
        .hdr("Range", "bytes=0-9")
        .send()
        .await
        .expect_status(206);
    proxy.wait_counter("objects_stored", 1).await;
    let err = t
        .client(&proxy)
        .get("/e")
        .hdr("Range", "bytes=65000-66000")
        .try_send()
        .await
        .expect_err("aborted");
    assert!(err.is_incomplete(), "{err}");
    assert!(full[65_000..].starts_with(&err.partial().unwrap().body));
    proxy.expect_counter("slice_validator_mismatches", 0);
    t.client(&proxy)
        .get("/e")
        .hdr("Range", "bytes=100-199")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[100..200]);
    origin.finish().await;
}

// s00010: a short range far ahead of its slice's fill is fetched from the
// origin on its own, uncached, while the fill goes on; once the slice is
// stored the same range is a hit.
#[tokio::test]
async fn s00010_short_range_ahead_of_the_fill_is_fetched_alone() {
    let t = Test::new("s00010");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            let slice = s.rxreq().await;
            assert_eq!(asked(&slice), (SIZE, 2 * SIZE - 1));
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", ETAG)
                .hdr(
                    "Content-Range",
                    format!("bytes {SIZE}-{}/{LEN}", 2 * SIZE - 1),
                )
                .hdr("Content-Length", SIZE)
                .send_head()
                .await;
            s.chunk(&full[SIZE as usize..SIZE as usize + 1000]).await;
            // The slice is at 1 000 bytes of 65 536: the range comes alone.
            let alone = s.rxreq_concurrent().await;
            assert_eq!(asked(&alone), (100_000, 100_099));
            s.txresp(206)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", ETAG)
                .hdr("Content-Range", format!("bytes 100000-100099/{LEN}"))
                .body(&full[100_000..100_100])
                .send()
                .await;
            s.switch_to(&slice);
            s.chunk(&full[SIZE as usize + 1000..2 * SIZE as usize])
                .await;
            s.end().await;
        })
        .start()
        .await;
    let proxy = slice_proxy_direct(&t, &origin, 0, 64 << 10).await;
    let get = |range: &str| t.client(&proxy).get("/far").hdr("Range", range);
    get("bytes=100000-100099")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", &format!("bytes 100000-100099/{LEN}"))
        .expect_body(&full[100_000..100_100]);
    proxy.expect_counter("slice_direct_fetches", 1);
    proxy.wait_counter("objects_stored", 1).await;
    get("bytes=100000-100099")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[100_000..100_100]);
    proxy.expect_counter("slice_fills", 1);
    origin.finish().await;
}

// s00011: `Cache-Control: only-if-cached` on a slicing route is answered
// from stored slices when every slice the response needs is stored (a full
// GET, a range, HEAD), and with 504 otherwise; the origin is never asked
// and nothing is prefetched for it.
#[tokio::test]
async fn s00011_only_if_cached_is_answered_from_stored_slices() {
    let t = Test::new("s00011");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[1, 2])).await;
        })
        .start()
        .await;
    let proxy = slice_proxy(&t, &origin, 0).await;
    let only = |range: Option<&str>| {
        let b = t
            .client(&proxy)
            .get("/v")
            .hdr("Cache-Control", "only-if-cached");
        match range {
            Some(r) => b.hdr("Range", r),
            None => b,
        }
    };
    // Nothing stored: 504.
    only(Some("bytes=70000-70099"))
        .send()
        .await
        .expect_status(504);
    // Slices 1 and 2 stored by an ordinary range.
    t.client(&proxy)
        .get("/v")
        .hdr("Range", "bytes=70000-140000")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[70_000..=140_000]);
    proxy.wait_counter("objects_stored", 2).await;
    only(Some("bytes=70000-140000"))
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("hit")
        .expect_body(&full[70_000..=140_000]);
    // Several ranges, all inside slices 1 and 2.
    only(Some("bytes=66000-66009,131072-131081"))
        .send()
        .await
        .expect_status(206);
    // One range reaching into slice 3, a full GET (slice 0 missing), a
    // range in slice 0: 504, and the origin is not asked.
    only(Some("bytes=190000-200000"))
        .send()
        .await
        .expect_status(504);
    only(None).send().await.expect_status(504);
    only(Some("bytes=0-9")).send().await.expect_status(504);
    proxy.expect_counter("only_if_cached_miss", 4);
    proxy.expect_counter("slice_fills", 2);
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}
