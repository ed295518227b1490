//! r: byte ranges (RFC 9110 §14) from stored objects (memory and disk) and
//! from fills in progress.

use hoard_testkit::{Response, Test, TestProxy};

use crate::disk::disk_proxy;

/// A body whose every byte depends on its offset.
pub(crate) fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

pub(crate) const LEN: usize = 300_000;
const ETAG: &str = "\"r1\"";
const LAST_MODIFIED: &str = "Mon, 01 Dec 2025 10:00:00 GMT";

/// The parts of a `multipart/byteranges` body: (Content-Range, bytes).
pub(crate) fn multipart(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").expect("content-type").to_string();
    let boundary = ct
        .split("boundary=")
        .nth(1)
        .expect("a boundary")
        .to_string();
    let delim = format!("\r\n--{boundary}");
    let text = &r.body[..];
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let at = find(rest, delim.as_bytes()).expect("a delimiter");
        rest = &rest[at + delim.len()..];
        if rest.starts_with(b"--\r\n") {
            assert_eq!(rest.len(), 4, "nothing after the close delimiter");
            return out;
        }
        let head_end = find(rest, b"\r\n\r\n").expect("part head");
        let head = std::str::from_utf8(&rest[..head_end]).unwrap();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .expect("Content-Range in the part")
            .to_string();
        assert!(
            head.contains("Content-Type: application/octet-stream"),
            "{head}"
        );
        rest = &rest[head_end + 4..];
        let next = find(rest, delim.as_bytes()).expect("next delimiter");
        out.push((cr, rest[..next].to_vec()));
        rest = &rest[next..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Every case of RFC 9110 §14 against `path`, a stored `LEN`-byte object.
async fn range_cases(t: &Test, proxy: &TestProxy, path: &str) {
    let full = body(LEN);
    let get = |range: &str| t.client(proxy).get(path).hdr("Range", range);
    // Single range.
    let r = get("bytes=1000-1999").send().await;
    r.expect_status(206)
        .expect_header("content-range", &format!("bytes 1000-1999/{LEN}"))
        .expect_header("content-length", "1000")
        .expect_cache_status("hit")
        .expect_body(&full[1000..2000]);
    // Across block boundaries (64 KiB on disk), to the end.
    get("bytes=65000-")
        .send()
        .await
        .expect_status(206)
        .expect_header("content-range", &format!("bytes 65000-{}/{LEN}", LEN - 1))
        .expect_body(&full[65000..]);
    // Suffix.
    get("bytes=-500")
        .send()
        .await
        .expect_status(206)
        .expect_header(
            "content-range",
            &format!("bytes {}-{}/{LEN}", LEN - 500, LEN - 1),
        )
        .expect_body(&full[LEN - 500..]);
    // A last byte past the end is clamped.
    get("bytes=299990-999999")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[299_990..]);
    // Several ranges: multipart, sorted, overlapping ones coalesced.
    let r = get("bytes=200000-200009, 0-4, 3-9").send().await;
    r.expect_status(206)
        .expect_header_contains("content-type", "multipart/byteranges; boundary=");
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    let parts = multipart(&r);
    assert_eq!(
        parts,
        vec![
            (format!("bytes 0-9/{LEN}"), full[0..10].to_vec()),
            (
                format!("bytes 200000-200009/{LEN}"),
                full[200_000..200_010].to_vec()
            ),
        ]
    );
    // Unsatisfiable.
    get(&format!("bytes={LEN}-"))
        .send()
        .await
        .expect_status(416)
        .expect_header("content-range", &format!("bytes */{LEN}"));
    // Not a valid Range: ignored, the whole object.
    get("bytes=9-1")
        .send()
        .await
        .expect_status(200)
        .expect_header("accept-ranges", "bytes")
        .expect_body(&full);
    // If-Range: a matching strong ETag or date applies the range, anything
    // else gets the whole object.
    for (if_range, partial) in [
        (ETAG, true),
        ("\"other\"", false),
        (&format!("W/{ETAG}"), false),
        (LAST_MODIFIED, true),
        ("Mon, 01 Dec 2025 09:00:00 GMT", false),
    ] {
        let r = get("bytes=10-19").hdr("If-Range", if_range).send().await;
        if partial {
            r.expect_status(206).expect_body(&full[10..20]);
        } else {
            r.expect_status(200).expect_body(&full);
        }
    }
    // HEAD ignores Range (§14.2: defined for GET only).
    t.client(proxy)
        .head(path)
        .hdr("Range", "bytes=0-9")
        .send()
        .await
        .expect_status(200)
        .expect_header("accept-ranges", "bytes")
        .expect_header("content-length", &LEN.to_string());
    // Preconditions come first: a matching If-None-Match is a 304.
    get("bytes=0-9")
        .hdr("If-None-Match", ETAG)
        .send()
        .await
        .expect_status(304);
}

/// An origin that serves `path` once.
async fn origin_once(t: &Test, path: &'static str) -> hoard_testkit::Origin {
    t.origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url(path).expect_no_header("range");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", ETAG)
                .hdr("Last-Modified", LAST_MODIFIED)
                .hdr("Content-Type", "application/octet-stream")
                .body(body(LEN))
                .send()
                .await;
        })
        .start()
        .await
}

// r00001: ranges from an object in the memory tier.
#[tokio::test]
async fn r00001_ranges_from_a_memory_object() {
    let t = Test::new("r00001");
    let origin = origin_once(&t, "/m").await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/m")
        .send()
        .await
        .expect_status(200)
        .expect_header("accept-ranges", "bytes")
        .expect_body(body(LEN));
    proxy.wait_counter("objects_stored", 1).await;
    range_cases(&t, &proxy, "/m").await;
    proxy.expect_counter("range_hits", 7);
    proxy.expect_counter("range_ignored", 4);
    proxy.expect_counter("range_not_satisfiable", 1);
    origin.finish().await;
}

// r00002: ranges from a disk object, read only where the ranges are: first
// through user space (block by block, checked), then, once the file is
// verified, with sendfile.
#[tokio::test]
async fn r00002_ranges_from_a_disk_object() {
    let t = Test::new("r00002");
    let origin = origin_once(&t, "/d").await;
    let proxy = disk_proxy(&t, &origin, &t.dir().join("zone")).await;
    t.client(&proxy)
        .get("/d")
        .send()
        .await
        .expect_body(body(LEN));
    proxy.wait_counter("disk_stored", 1).await;
    range_cases(&t, &proxy, "/d").await;
    let before = proxy.counter("disk_sendfile_bytes");
    range_cases(&t, &proxy, "/d").await;
    assert!(
        proxy.counter("disk_sendfile_bytes") > before,
        "the second round used sendfile"
    );
    proxy.expect_counter("range_hits", 14);
    origin.finish().await;
}

// r00003: a cold range starts one full fill (Range not forwarded) and is
// answered as soon as its bytes arrive, before the fill ends; a range at
// another offset joins the same fill; the origin sees one request.
#[tokio::test]
async fn r00003_cold_range_is_answered_from_the_fill_as_bytes_arrive() {
    let t = Test::new("r00003");
    let first_sent = t.barrier(2);
    let early_answered = t.barrier(2);
    let (b1, b2) = (first_sent.clone(), early_answered.clone());
    let full = body(LEN);
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq()
                .await
                .expect_url("/cold")
                .expect_no_header("range");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", LEN)
                .send_head()
                .await;
            s.chunk(&body(LEN)[..100_000]).await;
            b1.sync().await;
            // The early range was answered while the rest was not sent.
            b2.sync().await;
            s.chunk(&body(LEN)[100_000..]).await;
            s.end().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let early = t
        .client(&proxy)
        .get("/cold")
        .hdr("Range", "bytes=50000-50999")
        .spawn();
    first_sent.sync().await;
    proxy.wait_counter("fills_started", 1).await;
    let late = t
        .client(&proxy)
        .get("/cold")
        .hdr("Range", "bytes=250000-250099")
        .spawn();
    let early = early.await.unwrap();
    early
        .expect_status(206)
        .expect_header("content-range", &format!("bytes 50000-50999/{LEN}"))
        .expect_body(&full[50_000..51_000]);
    early_answered.sync().await;
    late.await
        .unwrap()
        .expect_status(206)
        .expect_header("content-range", &format!("bytes 250000-250099/{LEN}"))
        .expect_body(&full[250_000..250_100]);
    proxy.expect_counter("range_misses", 2);
    // Stored whole: the next range is a hit.
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/cold")
        .hdr("Range", "bytes=-10")
        .send()
        .await
        .expect_status(206)
        .expect_body(&full[LEN - 10..]);
    proxy.expect_counter("range_hits", 1);
    origin.finish().await;
}

// r00004: a fill whose length is not declared (chunked) answers a range
// with the whole response (counted as ignored); once stored it is served as
// ranges.
#[tokio::test]
async fn r00004_ranges_of_a_fill_of_unknown_length_get_the_whole_body() {
    let t = Test::new("r00004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/chunked");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(&body(LEN)[..1000]).await;
            s.chunk(&body(LEN)[1000..]).await;
            s.end().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/chunked")
        .hdr("Range", "bytes=0-9")
        .send()
        .await
        .expect_status(200)
        .expect_body(body(LEN));
    proxy.expect_counter("range_ignored", 1);
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/chunked")
        .hdr("Range", "bytes=0-9")
        .send()
        .await
        .expect_status(206)
        .expect_body(&body(LEN)[..10]);
    origin.finish().await;
}

// r00007: several ranges of a fill in progress get a multipart/byteranges
// 206 whose parts go out as their bytes arrive: it is complete while the
// origin still holds back the rest of the body, two parts may lie in one
// chunk of the fill, and a part may span chunks.
#[tokio::test]
async fn r00007_several_ranges_of_a_fill_stream_as_multipart() {
    let t = Test::new("r00007");
    let first_sent = t.barrier(2);
    let answered = t.barrier(2);
    let (b1, b2) = (first_sent.clone(), answered.clone());
    let full = body(LEN);
    let origin = t
        .origin()
        .script(move |mut s| async move {
            s.rxreq().await.expect_url("/multi");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Type", "application/octet-stream")
                .hdr("Content-Length", LEN)
                .send_head()
                .await;
            s.chunk(&body(LEN)[..60_000]).await;
            s.chunk(&body(LEN)[60_000..100_000]).await;
            b1.sync().await;
            b2.sync().await;
            s.chunk(&body(LEN)[100_000..]).await;
            s.end().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let early = t
        .client(&proxy)
        .get("/multi")
        .hdr("Range", "bytes=10-19,30-39,59990-60009,99990-99999")
        .spawn();
    first_sent.sync().await;
    let r = early.await.unwrap();
    r.expect_status(206);
    assert_eq!(
        multipart(&r),
        [(10, 20), (30, 40), (59_990, 60_010), (99_990, 100_000)]
            .iter()
            .map(|&(a, b)| (format!("bytes {a}-{}/{LEN}", b - 1), full[a..b].to_vec()))
            .collect::<Vec<_>>()
    );
    answered.sync().await;
    proxy.expect_counter("range_misses", 1);
    proxy.wait_counter("objects_stored", 1).await;
    // A part past what the fill had then is served from the stored object.
    let r = t
        .client(&proxy)
        .get("/multi")
        .hdr("Range", "bytes=0-0,-1")
        .send()
        .await;
    r.expect_status(206).expect_cache_status("hit; ttl=600");
    assert_eq!(multipart(&r).len(), 2);
    origin.finish().await;
}

// r00005: on a route that does not cache, Range goes to the origin and its
// 206 comes back as it is; it is never stored or served as a full object.
#[tokio::test]
async fn r00005_origin_206_on_a_pass_route_is_relayed_never_stored() {
    let t = Test::new("r00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq()
                    .await
                    .expect_url("/p")
                    .expect_header("range", "bytes=0-4");
                s.txresp(206)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Range", "bytes 0-4/100")
                    .body("abcde")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .route(|r| r.cache = false)
        .start()
        .await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/p")
            .hdr("Range", "bytes=0-4")
            .send()
            .await
            .expect_status(206)
            .expect_header("content-range", "bytes 0-4/100")
            .expect_body("abcde");
    }
    proxy.expect_counter("objects_stored", 0);
    origin.finish().await;
}

/// A small deterministic generator (the cases are the same on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// A random `Range` value over a `len`-byte body and the bytes it must
/// return: one to three specs of every form.
fn random_range(g: &mut Lcg, full: &[u8]) -> (String, Vec<(u64, u64)>) {
    let len = full.len() as u64;
    let n = 1 + g.next(3);
    let mut specs = Vec::new();
    let mut want = Vec::new();
    for _ in 0..n {
        match g.next(3) {
            0 => {
                let a = g.next(len);
                let b = a + g.next(len - a);
                specs.push(format!("{a}-{b}"));
                want.push((a, b + 1));
            }
            1 => {
                let a = g.next(len);
                specs.push(format!("{a}-"));
                want.push((a, len));
            }
            _ => {
                let s = 1 + g.next(len);
                specs.push(format!("-{s}"));
                want.push((len - s, len));
            }
        }
    }
    // What the answer must hold: the ranges sorted and coalesced.
    want.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in want {
        match merged.last_mut() {
            Some(m) if a <= m.1 => m.1 = m.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    (format!("bytes={}", specs.join(",")), merged)
}

/// Sends 60 random range requests for `path` and checks every byte.
pub(crate) async fn random_ranges(t: &Test, proxy: &TestProxy, path: &str, seed: u64) {
    let full = body(LEN);
    let mut g = Lcg(seed);
    for _ in 0..60 {
        let (range, want) = random_range(&mut g, &full);
        let r = t.client(proxy).get(path).hdr("Range", &range).send().await;
        r.expect_status(206);
        if let [(a, b)] = want[..] {
            r.expect_header("content-range", &format!("bytes {a}-{}/{LEN}", b - 1))
                .expect_body(&full[a as usize..b as usize]);
        } else {
            let got = multipart(&r);
            let expected: Vec<(String, Vec<u8>)> = want
                .iter()
                .map(|&(a, b)| {
                    (
                        format!("bytes {a}-{}/{LEN}", b - 1),
                        full[a as usize..b as usize].to_vec(),
                    )
                })
                .collect();
            assert_eq!(got, expected, "{range}");
        }
    }
}

// r00006: for random single and multiple ranges, the bytes equal the
// origin's, from memory and from disk, the first time (a cold range on
// each, answered from its fill) and warm.
#[tokio::test]
async fn r00006_random_ranges_match_the_origin_bytes() {
    let t = Test::new("r00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/mem", "/disk"] {
                s.rxreq().await.expect_url(path).expect_no_header("range");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Type", "application/octet-stream")
                    .body(body(LEN))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let mem = t.proxy().origin(&origin).start().await;
    // Cold: a single range starts the fill.
    t.client(&mem)
        .get("/mem")
        .hdr("Range", "bytes=123-4567")
        .send()
        .await
        .expect_status(206)
        .expect_body(&body(LEN)[123..4568]);
    mem.wait_counter("objects_stored", 1).await;
    random_ranges(&t, &mem, "/mem", 1).await;
    let disk = disk_proxy(&t, &origin, &t.dir().join("zone")).await;
    t.client(&disk)
        .get("/disk")
        .hdr("Range", "bytes=-70000")
        .send()
        .await
        .expect_status(206)
        .expect_body(&body(LEN)[LEN - 70_000..]);
    disk.wait_counter("disk_stored", 1).await;
    random_ranges(&t, &disk, "/disk", 2).await;
    origin.finish().await;
}
