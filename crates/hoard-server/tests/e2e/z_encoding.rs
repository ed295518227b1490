//! z: content codings made once per stored object (br, zstd, gzip),
//! chosen per request (RFC 9110 §12.5.3), decoded for clients that accept
//! nothing the origin sent, never for `no-transform` or unknown codings.

use hoard_policy::encoding::Coding;
use hoard_proxy::encode::{decode, encode};
use hoard_testkit::{Response, Test, TestProxy};

use super::secs;

/// An HTML page of about 9 KiB.
fn page() -> String {
    (0..200)
        .map(|i| format!("<li class=\"item\">entry number {i} of the list</li>\n"))
        .collect()
}

/// A proxy with the suite's store (the memory tier, or a disk zone under
/// `HOARD_TEST_STORE=disk`).
async fn proxy(t: &Test, origin: &hoard_testkit::Origin) -> TestProxy {
    t.proxy().origin(origin).admin().start().await
}

/// The response's body decoded by its `Content-Encoding`.
fn decoded(r: &Response) -> Vec<u8> {
    let coding = r.header("content-encoding").map_or(Coding::Identity, |c| {
        Coding::parse(c).expect("a coding hoard knows")
    });
    decode(coding, &r.body, 16 << 20).expect("the body decodes")
}

async fn get(t: &Test, p: &TestProxy, path: &str, ae: Option<&str>) -> Response {
    let c = t.client(p);
    let mut req = c.get(path);
    if let Some(ae) = ae {
        req = req.hdr("Accept-Encoding", ae);
    }
    req.send().await
}

// z00001: one origin fetch (asked for identity) serves every client its
// best coding: the bytes decode to the origin's, Content-Length and ETag
// fit the representation, Vary names Accept-Encoding, and every request
// after the first is a hit.
#[tokio::test]
async fn z00001_every_client_gets_its_best_coding_from_one_fetch() {
    let t = Test::new("z00001");
    let body = page();
    let origin = {
        let body = body.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq()
                    .await
                    .expect_url("/page")
                    .expect_header("accept-encoding", "identity");
                s.txresp(200)
                    .hdr("Content-Type", "text/html; charset=utf-8")
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"v1\"")
                    .body(body)
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    // The first request streams what the origin sent.
    let first = get(&t, &p, "/page", Some("gzip, deflate, br, zstd")).await;
    first
        .expect_status(200)
        .expect_no_header("content-encoding");
    first.expect_header_contains("vary", "Accept-Encoding");
    assert_eq!(first.body, body.as_bytes());
    p.wait_counter("encode_objects", 1).await;
    p.wait_counter("objects_stored", 1).await;

    for (ae, want) in [
        (Some("gzip, deflate, br, zstd"), Coding::Br),
        (Some("zstd"), Coding::Zstd),
        (Some("gzip"), Coding::Gzip),
        (Some("gzip;q=1.0, br;q=0.5"), Coding::Gzip),
        (Some("*"), Coding::Br),
        (Some("br;q=0, *"), Coding::Zstd),
        (Some("identity;q=0, gzip"), Coding::Gzip),
        (Some("deflate"), Coding::Identity),
        (Some("br;q=0, gzip;q=0, zstd;q=0"), Coding::Identity),
        (None, Coding::Identity),
    ] {
        let r = get(&t, &p, "/page", ae).await;
        r.expect_status(200).expect_cache_status("hit");
        r.expect_header_contains("vary", "Accept-Encoding");
        assert_eq!(
            r.header("content-encoding"),
            (want != Coding::Identity).then_some(want.as_str()),
            "{ae:?}"
        );
        assert_eq!(decoded(&r), body.as_bytes(), "{ae:?}");
        assert_eq!(
            r.header("content-length"),
            Some(r.body.len().to_string().as_str()),
            "{ae:?}"
        );
        let etag = match want {
            Coding::Identity => "\"v1\"".to_string(),
            c => format!("\"v1-{}\"", c.as_str()),
        };
        r.expect_header("etag", &etag);
        if want != Coding::Identity {
            r.expect_cache_status(&format!("detail={}", want.as_str()));
            assert!(r.body.len() * 5 < body.len(), "{want:?} saves bytes");
        }
    }
    assert_eq!(origin.requests(), 1, "one origin fetch for every coding");
    assert!(p.counter("encode_bytes_br") > 0 && p.counter("encode_bytes_gzip") > 0);
    assert_eq!(p.counter("served_br"), 2);
    // /status (and the dashboard) show what the codings save.
    let st = t.client(p.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let enc = &v["encodings"];
    assert_eq!(enc["objects"], 1, "{enc}");
    assert_eq!(
        enc["identity_bytes"].as_u64(),
        Some(body.len() as u64),
        "{enc}"
    );
    for c in ["br", "zstd", "gzip"] {
        let share = enc[c]["share"].as_f64().unwrap();
        assert!(share > 0.0 && share < 0.2, "{c}: {enc}");
    }
    assert_eq!(enc["br"]["served"], 2, "{enc}");
    origin.finish().await;
}

// z00002: conditional requests and ranges never mix representations: a
// br client's If-None-Match with the br ETag gets 304, with the identity
// ETag a full br response; a Range is answered from the identity bytes.
#[tokio::test]
async fn z00002_conditionals_and_ranges_keep_representations_apart() {
    let t = Test::new("z00002");
    let body = page();
    let origin = {
        let body = body.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/c");
                s.txresp(200)
                    .hdr("Content-Type", "application/json")
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"e7\"")
                    .body(body)
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    get(&t, &p, "/c", None).await.expect_status(200);
    p.wait_counter("encode_objects", 1).await;
    p.wait_counter("objects_stored", 1).await;
    let c = t.client(&p);
    let r = c
        .get("/c")
        .hdr("Accept-Encoding", "br")
        .hdr("If-None-Match", "\"e7-br\"")
        .send()
        .await;
    r.expect_status(304).expect_header("etag", "\"e7-br\"");
    let r = c
        .get("/c")
        .hdr("Accept-Encoding", "br")
        .hdr("If-None-Match", "\"e7\"")
        .send()
        .await;
    r.expect_status(200).expect_header("content-encoding", "br");
    assert_eq!(decoded(&r), body.as_bytes());
    // The identity ETag matches only the identity representation.
    c.get("/c")
        .hdr("If-None-Match", "\"e7\"")
        .send()
        .await
        .expect_status(304);
    let r = c
        .get("/c")
        .hdr("Accept-Encoding", "gzip, br")
        .hdr("Range", "bytes=10-29")
        .send()
        .await;
    r.expect_status(206).expect_no_header("content-encoding");
    assert_eq!(r.body, body.as_bytes()[10..30]);
    // If-Range with the br ETag: a range of the identity bytes would mix
    // representations, so the whole identity representation comes back;
    // with the identity ETag, the range.
    let r = c
        .get("/c")
        .hdr("Accept-Encoding", "gzip, br")
        .hdr("Range", "bytes=10-29")
        .hdr("If-Range", "\"e7-br\"")
        .send()
        .await;
    r.expect_status(200)
        .expect_no_header("content-encoding")
        .expect_header("etag", "\"e7\"");
    assert_eq!(r.body, body.as_bytes());
    let r = c
        .get("/c")
        .hdr("Range", "bytes=10-29")
        .hdr("If-Range", "\"e7\"")
        .send()
        .await;
    r.expect_status(206);
    assert_eq!(r.body, body.as_bytes()[10..30]);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// z00003: an origin that sends gzip although asked for identity: stored
// as sent, decoded once into an identity part (an identity client gets the
// origin's bytes decoded), and re-coded for br clients; a gzip client gets
// the origin's own gzip bytes.
#[tokio::test]
async fn z00003_an_origin_that_sends_only_gzip_still_serves_identity_clients() {
    let t = Test::new("z00003");
    let body = page();
    let gz = encode(Coding::Gzip, body.as_bytes());
    let origin = {
        let gz = gz.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/g");
                s.txresp(200)
                    .hdr("Content-Type", "text/css")
                    .hdr("Content-Encoding", "gzip")
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Vary", "Accept-Encoding")
                    .body(gz)
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    get(&t, &p, "/g", Some("gzip")).await.expect_status(200);
    p.wait_counter("objects_stored", 1).await;
    let r = get(&t, &p, "/g", None).await;
    r.expect_status(200)
        .expect_cache_status("hit")
        .expect_no_header("content-encoding");
    assert_eq!(r.body, body.as_bytes());
    let r = get(&t, &p, "/g", Some("br, gzip")).await;
    r.expect_header("content-encoding", "br");
    assert_eq!(decoded(&r), body.as_bytes());
    let r = get(&t, &p, "/g", Some("gzip")).await;
    r.expect_header("content-encoding", "gzip");
    assert_eq!(r.body, gz, "the origin's own gzip bytes");
    assert_eq!(p.counter("served_decoded"), 1);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// z00004: what is never transformed: `no-transform`, a coding hoard does
// not know, an image, a body under the size limit. Each is served as the
// origin sent it, whatever the client accepts.
#[tokio::test]
async fn z00004_no_transform_unknown_codings_images_and_small_bodies_are_left_alone() {
    let t = Test::new("z00004");
    let body = page();
    let cases: Vec<(&str, Vec<(&str, &str)>, Vec<u8>)> = vec![
        (
            "/nt",
            vec![
                ("Content-Type", "text/html"),
                ("Cache-Control", "max-age=600, no-transform"),
            ],
            body.clone().into_bytes(),
        ),
        (
            "/img",
            vec![
                ("Content-Type", "image/png"),
                ("Cache-Control", "max-age=600"),
            ],
            body.clone().into_bytes(),
        ),
        (
            "/small",
            vec![
                ("Content-Type", "text/html"),
                ("Cache-Control", "max-age=600"),
            ],
            b"<p>short</p>".to_vec(),
        ),
    ];
    let origin = {
        let cases = cases.clone();
        t.origin()
            .script(move |mut s| async move {
                for (path, fields, body) in cases {
                    s.rxreq().await.expect_url(path);
                    let mut r = s.txresp(200);
                    for (n, v) in fields {
                        r = r.hdr(n, v);
                    }
                    r.body(body).send().await;
                }
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    for (path, fields, body) in &cases {
        get(&t, &p, path, Some("br")).await.expect_status(200);
        let r = get(&t, &p, path, Some("br, gzip")).await;
        r.expect_cache_status("hit");
        let sent_coding = fields
            .iter()
            .find(|(n, _)| *n == "Content-Encoding")
            .map(|(_, v)| *v);
        assert_eq!(r.header("content-encoding"), sent_coding, "{path}");
        assert_eq!(&r.body, body, "{path}");
    }
    assert_eq!(p.counter("encode_objects"), 0);
    assert_eq!(origin.requests(), 3);
    origin.finish().await;
}

// z00010: a coding hoard does not know (`compress`), with `Vary:
// Accept-Encoding`, is stored as the origin sent it and served from the
// cache only to requests that accept it; any other client gets the
// origin's own answer to its request (a pass), so no client gets from the
// cache a coding it did not ask for (e2e `s03001` and `s03002` have more).
#[tokio::test]
async fn z00010_unknown_codings_are_stored_and_served_only_where_accepted() {
    let t = Test::new("z00010");
    let body = page();
    let origin = {
        let body = body.clone();
        t.origin()
            .script(move |mut s| async move {
                for (ae, coding) in [("identity", "compress"), ("br", "br")] {
                    s.rxreq()
                        .await
                        .expect_url("/u")
                        .expect_header("accept-encoding", ae);
                    s.txresp(200)
                        .hdr("Content-Type", "text/html")
                        .hdr("Cache-Control", "max-age=600")
                        .hdr("Content-Encoding", coding)
                        .hdr("Vary", "Accept-Encoding")
                        .body(body.clone())
                        .send()
                        .await;
                }
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    let r = get(&t, &p, "/u", Some("compress, br")).await;
    r.expect_status(200)
        .expect_header("content-encoding", "compress");
    assert_eq!(r.body, body.as_bytes());
    p.wait_counter("objects_stored", 1).await;
    // A client that does not accept it: its own field goes to the origin,
    // and what it answers comes back untouched.
    let r = get(&t, &p, "/u", Some("br")).await;
    r.expect_status(200).expect_header("content-encoding", "br");
    assert_eq!(r.body, body.as_bytes(), "passed as the origin sent it");
    let r = get(&t, &p, "/u", Some("compress")).await;
    r.expect_cache_status("hit")
        .expect_header("content-encoding", "compress");
    assert_eq!(p.counter("objects_stored"), 1);
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

// z00005: a corrupt gzip body and a decompression bomb from the origin are
// not stored (the next request goes to the origin again), and counted.
#[tokio::test]
async fn z00005_corrupt_bodies_and_bombs_are_never_stored() {
    let t = Test::new("z00005");
    let mut corrupt = encode(Coding::Gzip, page().as_bytes());
    let n = corrupt.len();
    corrupt.truncate(n / 2);
    corrupt.extend_from_slice(&vec![7u8; n - n / 2]);
    // 64 MiB of zeros in about 64 KiB: past 4x the 4 MiB object limit.
    let bomb = encode(Coding::Gzip, &vec![0u8; 64 << 20]);
    let origin = {
        let (corrupt, bomb) = (corrupt.clone(), bomb.clone());
        t.origin()
            .script(move |mut s| async move {
                for (path, body) in [
                    ("/bad", &corrupt),
                    ("/bad", &corrupt),
                    ("/bomb", &bomb),
                    ("/bomb", &bomb),
                ] {
                    s.rxreq().await.expect_url(path);
                    s.txresp(200)
                        .hdr("Content-Type", "text/html")
                        .hdr("Content-Encoding", "gzip")
                        .hdr("Cache-Control", "max-age=600")
                        .body(body.clone())
                        .send()
                        .await;
                }
            })
            .start()
            .await
    };
    let p = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(|c| {
            c.cache.zones.clear();
            c.cache.memory_size = 64 << 20;
            c.cache.max_object_size = 4 << 20;
        })
        .start()
        .await;
    for path in ["/bad", "/bomb"] {
        for _ in 0..2 {
            let r = get(&t, &p, path, Some("gzip")).await;
            r.expect_status(200);
            assert!(!r
                .expect_status(200)
                .cache_params()
                .iter()
                .any(|x| x == "hit"));
        }
    }
    assert_eq!(p.counter("encode_decode_failures"), 4);
    assert_eq!(p.counter("objects_stored"), 0);
    origin.finish().await;
}

// z00006: a purge removes the object with every coding: the next br
// client's request goes to the origin and gets the new version.
#[tokio::test]
async fn z00006_a_purge_removes_every_coding() {
    let t = Test::new("z00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for v in ["one", "two"] {
                s.rxreq().await.expect_url("/p");
                s.txresp(200)
                    .hdr("Content-Type", "text/plain")
                    .hdr("Cache-Control", "max-age=600")
                    .body(format!("{v} ").repeat(1000))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let p = proxy(&t, &origin).await;
    get(&t, &p, "/p", Some("br")).await.expect_status(200);
    p.wait_counter("encode_objects", 1).await;
    let r = get(&t, &p, "/p", Some("br")).await;
    r.expect_header("content-encoding", "br");
    assert!(String::from_utf8(decoded(&r)).unwrap().starts_with("one "));
    let purged = crate::admin::purge(&t, &p, r#"{"url": "http://localhost/p"}"#).await;
    assert_eq!(crate::admin::purged(&purged), 1);
    let r = get(&t, &p, "/p", Some("br")).await;
    assert!(String::from_utf8(decoded(&r)).unwrap().starts_with("two "));
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

// z00007: a route that asks the origin for gzip (`fill_accept_encoding`):
// the origin's gzip is stored as sent, decoded once for identity clients,
// re-coded for br clients, and a gzip client gets the origin's bytes.
#[tokio::test]
async fn z00007_fills_ask_for_what_the_route_says() {
    let t = Test::new("z00007");
    let body = page();
    let gz = encode(Coding::Gzip, body.as_bytes());
    let origin = {
        let gz = gz.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq()
                    .await
                    .expect_url("/f")
                    .expect_header("accept-encoding", "gzip");
                s.txresp(200)
                    .hdr("Content-Type", "application/javascript")
                    .hdr("Content-Encoding", "gzip")
                    .hdr("Cache-Control", "max-age=600")
                    .body(gz)
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let p = t
        .proxy()
        .origin(&origin)
        .route(|r| r.fill_accept_encoding = http::HeaderValue::from_static("gzip"))
        .config(|c| {
            c.cache.zones.clear();
            c.cache.memory_size = 64 << 20;
        })
        .start()
        .await;
    get(&t, &p, "/f", Some("gzip")).await.expect_status(200);
    p.wait_counter("objects_stored", 1).await;
    let r = get(&t, &p, "/f", Some("identity")).await;
    r.expect_cache_status("hit")
        .expect_no_header("content-encoding");
    assert_eq!(r.body, body.as_bytes());
    let r = get(&t, &p, "/f", Some("br")).await;
    r.expect_header("content-encoding", "br");
    assert_eq!(decoded(&r), body.as_bytes());
    let r = get(&t, &p, "/f", Some("gzip")).await;
    assert_eq!(r.body, gz);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// z00008: in a disk zone (no memory tier: every hit read from disk) the
// parts are written with the object as one file, small objects and ones
// read block by block alike, and an origin's gzip is decoded before it is
// stored; after a restart every coding is still a hit with the right
// bytes, and a purge removes the object with every coding.
#[tokio::test]
async fn z00008_disk_zones_keep_every_coding_across_a_restart() {
    let t = Test::new("z00008");
    let small = page();
    // Larger than a first read: its stored bytes and parts are read from
    // the file span by span.
    let large: String = (0..4000)
        .map(|i| format!("{{\"id\": {i}, \"name\": \"item {}\"}},\n", i % 97))
        .collect();
    let gz = encode(Coding::Gzip, small.as_bytes());
    let origin = {
        let (small, large, gz) = (small.clone(), large.clone(), gz.clone());
        t.origin()
            .script(move |mut s| async move {
                for (path, ctype, body, coding) in [
                    ("/page", "text/html", small.clone().into_bytes(), None),
                    ("/data", "application/json", large.into_bytes(), None),
                    ("/gz", "text/css", gz, Some("gzip")),
                ] {
                    s.rxreq()
                        .await
                        .expect_url(path)
                        .expect_header("accept-encoding", "identity");
                    let mut r = s
                        .txresp(200)
                        .hdr("Content-Type", ctype)
                        .hdr("Cache-Control", "max-age=600")
                        .hdr("ETag", "\"v1\"");
                    if let Some(c) = coding {
                        r = r.hdr("Content-Encoding", c);
                    }
                    r.body(body).send().await;
                }
                s.rxreq().await.expect_url("/page");
                s.txresp(200)
                    .hdr("Content-Type", "text/html")
                    .hdr("Cache-Control", "max-age=600")
                    .body(small.replace("entry", "row"))
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let dir = t.dir().join("zone");
    let disk_proxy = || async {
        let p = t
            .proxy()
            .origin(&origin)
            .admin()
            .disk(&dir, 64 << 20, 0)
            .start()
            .await;
        p.wait_counter("disk_load_done", 1).await;
        p
    };
    let p = disk_proxy().await;
    for path in ["/page", "/data", "/gz"] {
        get(&t, &p, path, Some("br")).await.expect_status(200);
    }
    // Two identity bodies coded after they were stored, one gzip body
    // decoded before.
    p.wait_counter("encode_objects", 3).await;
    let check = |p: TestProxy| {
        let (small, large) = (small.clone(), large.clone());
        let t = &t;
        async move {
            for (path, body) in [("/page", &small), ("/data", &large), ("/gz", &small)] {
                for (ae, want) in [
                    (Some("br, gzip, zstd"), Some("br")),
                    (Some("zstd"), Some("zstd")),
                    (Some("gzip"), Some("gzip")),
                    (None, None),
                ] {
                    let r = get(t, &p, path, ae).await;
                    r.expect_status(200).expect_cache_status("hit");
                    assert_eq!(r.header("content-encoding"), want, "{path} {ae:?}");
                    assert!(decoded(&r) == body.as_bytes(), "{path} {ae:?}");
                }
            }
            p
        }
    };
    let p = check(p).await;
    assert!(p.counter("disk_hits") >= 12);
    p.stop().await;
    // One file per object: the copies written before their parts are gone.
    assert_eq!(crate::disk::objects(&dir).len(), 3);

    let p = disk_proxy().await;
    p.expect_counter("disk_loaded", 3);
    let p = check(p).await;
    assert_eq!(p.counter("encode_objects"), 0, "nothing coded again");
    let purged = crate::admin::purge(&t, &p, r#"{"url": "http://localhost/page"}"#).await;
    assert_eq!(crate::admin::purged(&purged), 1);
    let r = get(&t, &p, "/page", Some("br")).await;
    assert!(String::from_utf8(decoded(&r))
        .unwrap()
        .contains("row number 1 "));
    assert_eq!(origin.requests(), 4);
    origin.finish().await;
}

// z00009: a 304 refreshes the object and keeps its codings (in memory, and
// in a disk zone's head under `HOARD_TEST_STORE=disk`): the revalidated
// response and the hits after it are br, with the refreshed fields.
#[tokio::test]
async fn z00009_a_304_keeps_the_codings() {
    let t = Test::new("z00009");
    let body = page();
    let origin = {
        let body = body.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/r");
                s.txresp(200)
                    .hdr("Content-Type", "text/html")
                    .hdr("Cache-Control", "max-age=10")
                    .hdr("ETag", "\"v1\"")
                    .body(body)
                    .send()
                    .await;
                s.rxreq()
                    .await
                    .expect_header("if-none-match", "\"v1\"")
                    .expect_header("accept-encoding", "identity");
                s.txresp(304)
                    .hdr("Cache-Control", "max-age=20")
                    .hdr("ETag", "\"v1\"")
                    .hdr("X-Version", "new")
                    .no_body()
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let p = proxy(&t, &origin).await;
    get(&t, &p, "/r", Some("br")).await.expect_status(200);
    p.wait_counter("encode_objects", 1).await;
    get(&t, &p, "/r", Some("br"))
        .await
        .expect_cache_status("hit")
        .expect_header("content-encoding", "br");
    t.clock.advance(secs(11));
    let r = get(&t, &p, "/r", Some("br")).await;
    r.expect_status(200)
        .expect_header("content-encoding", "br")
        .expect_header("x-version", "new")
        .expect_header("etag", "\"v1-br\"");
    r.expect_cache_status("fwd=stale; fwd-status=304");
    assert_eq!(decoded(&r), body.as_bytes());
    t.clock.advance(secs(19));
    for (ae, want) in [("br", Some("br")), ("gzip", Some("gzip")), ("x", None)] {
        let r = get(&t, &p, "/r", Some(ae)).await;
        r.expect_cache_status("hit")
            .expect_header("x-version", "new");
        assert_eq!(r.header("content-encoding"), want);
        assert_eq!(decoded(&r), body.as_bytes());
    }
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}
