//! v (ESI): pages assembled at the edge from fragments: includes fetched
//! in parallel through the cache, streamed in document order; the ESI
//! elements and their errors; limits; malformed markup; codings.

use std::io::Read;

use hoard_testkit::{Request, Script, Test};

use crate::secs;

/// A route with `esi` (the given value) in front of `{origin}`.
fn config(esi: &str, extra: &str) -> String {
    format!(
        r#"
[server]
{extra}
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
upstream = "app"
esi = {esi}
"#
    )
}

/// Answers `req` from `pages` (path, Cache-Control, Content-Type, body);
/// any other path fails the test.
async fn answer(s: &mut Script, req: &Request, pages: &[(&str, &str, &str, &str)]) {
    let Some((_, cc, ct, body)) = pages.iter().find(|p| p.0 == req.url()) else {
        panic!("unexpected request for {}", req.url());
    };
    s.switch_to(req);
    let mut r = s.txresp(200).hdr("Content-Type", ct).body(*body);
    if !cc.is_empty() {
        r = r.hdr("Cache-Control", cc);
    }
    r.send().await;
}

/// Serves `n` requests from `pages`, in whatever order they come.
async fn serve(s: &mut Script, n: usize, pages: &[(&str, &str, &str, &str)]) {
    for _ in 0..n {
        let req = s.rxreq().await;
        answer(s, &req, pages).await;
    }
}

const HTML: &str = "text/html; charset=utf-8";

// v18001: a page's includes are assembled in place, in order; the page is
// stored as its template and each fragment under its own key, so a second
// request costs the origin nothing. Surrogate-Control never reaches the
// client; the assembled page has no Content-Length or ETag.
#[tokio::test]
async fn v18001_includes_are_assembled_and_each_part_is_cached() {
    let t = Test::new("v18001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let page = "<h1>Top</h1><esi:include src=\"/frag/a\"/>|<esi:include src=\"b\"></esi:include><p>end</p>";
            let req = s.rxreq().await;
            req.expect_url("/news/page");
            s.txresp(200)
                .hdr("Content-Type", "text/plain")
                .hdr("Surrogate-Control", "content=\"ESI/1.0\"")
                .hdr("Cache-Control", "max-age=60")
                .hdr("ETag", "\"t1\"")
                .body(page)
                .send()
                .await;
            serve(
                &mut s,
                2,
                &[
                    ("/frag/a", "max-age=60", "text/plain", "A"),
                    ("/news/b", "max-age=60", "text/plain", "B"),
                ],
            )
            .await;
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    for _ in 0..2 {
        let r = t.client(&proxy).get("/news/page").send().await;
        r.expect_status(200)
            .expect_body("<h1>Top</h1>A|B<p>end</p>")
            .expect_no_header("surrogate-control")
            .expect_no_header("content-length")
            .expect_no_header("etag");
    }
    proxy.expect_counter("esi_pages", 2);
    proxy.expect_counter("esi_fragments", 4);
    proxy.expect_counter("esi_fragment_failures", 0);
    origin.finish().await;
}

// v18002: all of a page's includes are requested at once (the origin gets
// the three before it answers any), and the page's first bytes reach the
// client before any fragment is answered.
#[tokio::test]
async fn v18002_includes_are_fetched_in_parallel_and_the_page_streams() {
    let t = Test::new("v18002");
    let first = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let first = first.clone();
            move |mut s| async move {
                let req = s.rxreq().await;
                req.expect_url("/page");
                s.txresp(200)
                    .hdr("Content-Type", HTML)
                    .body("<h1>Top</h1><esi:include src=\"/1\"/><esi:include src=\"/2\"/><esi:include src=\"/3\"/>.")
                    .send()
                    .await;
                // The three come before any is answered: fetched in parallel.
                let mut reqs = Vec::new();
                for _ in 0..3 {
                    reqs.push(s.rxreq().await);
                }
                // The client has the page's head and first text already.
                first.sync().await;
                let pages = [
                    ("/1", "", HTML, "one"),
                    ("/2", "", HTML, "two"),
                    ("/3", "", HTML, "three"),
                ];
                for r in reqs.iter().rev() {
                    answer(&mut s, r, &pages).await;
                }
            }
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    let client = t.client(&proxy);
    let mut conn = client.connect().await;
    conn.send_raw("GET /page HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await;
    conn.read_until("<h1>Top</h1>").await;
    first.sync().await;
    // The rest, to the chunked body's end.
    let rest = conn.read_until("0\r\n\r\n").await;
    let rest = String::from_utf8_lossy(&rest).into_owned();
    let (one, two, three) = (rest.find("one"), rest.find("two"), rest.find("three"));
    assert!(
        one.is_some() && one < two && two < three,
        "in document order: {rest}"
    );
    proxy.expect_counter("esi_fragments", 3);
    origin.finish().await;
}

// v18003: esi:remove and esi:comment go; <!--esi ... --> keeps its content
// processed; esi:vars replaces HTTP_HOST, HTTP_COOKIE{name} and
// QUERY_STRING{name} (HTML-escaped), and an include's src takes variables
// (URL-encoded).
#[tokio::test]
async fn v18003_remove_comment_vars_and_variables_in_src() {
    let t = Test::new("v18003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/p?q=7");
            s.txresp(200)
                .hdr("Content-Type", HTML)
                .body(concat!(
                    "<esi:remove><a href=\"/nojs\">no ESI</a></esi:remove>",
                    "<esi:comment text=\"for editors\"/>",
                    "<!--esi <b>on</b> -->",
                    "<esi:vars>[$(HTTP_HOST)|$(HTTP_COOKIE{user})|$(QUERY_STRING{q})|$(HTTP_COOKIE{none}|'guest')]</esi:vars>",
                    "<esi:include src=\"/box?u=$(HTTP_COOKIE{user})\"/>"
                ))
                .send()
                .await;
            let req = s.rxreq().await;
            req.expect_url("/box?u=%3Cbob%3E");
            s.txresp(200).hdr("Cache-Control", "no-store").body("BOX").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    let r = t
        .client(&proxy)
        .get("/p?q=7")
        .hdr("Host", "shop.example")
        .hdr("Cookie", "a=1; user=<bob>")
        .send()
        .await;
    r.expect_status(200)
        .expect_body(" <b>on</b> [shop.example|&lt;bob&gt;|7|guest]BOX");
    origin.finish().await;
}

// v18004: esi:choose picks by a cookie; esi:try sends the except when a
// fragment of the attempt fails (its fragments then are not in the page);
// alt replaces a failed src; onerror="continue" drops a failure silently.
#[tokio::test]
async fn v18004_choose_try_alt_and_onerror() {
    let t = Test::new("v18004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/p");
            s.txresp(200)
                .hdr("Content-Type", HTML)
                .hdr("Cache-Control", "max-age=60")
                .body(concat!(
                    "<esi:choose><esi:when test=\"$(HTTP_COOKIE{tier})=='gold'\">G</esi:when>",
                    "<esi:otherwise>O</esi:otherwise></esi:choose>|",
                    "<esi:try><esi:attempt>(<esi:include src=\"/ok\"/><esi:include src=\"/down\"/>)</esi:attempt>",
                    "<esi:except>fallback</esi:except></esi:try>|",
                    "<esi:include src=\"/missing\" alt=\"/ok\"/>|",
                    "<esi:include src=\"/down\" onerror=\"continue\"/>.",
                ))
                .send()
                .await;
            // /ok (twice: attempt and alt; no-store), /down (twice), /missing.
            for _ in 0..5 {
                let req = s.rxreq().await;
                match req.url() {
                    "/ok" => s.txresp(200).hdr("Cache-Control", "no-store").body("OK").send().await,
                    "/down" => s.txresp(503).hdr("Cache-Control", "no-store").body("down").send().await,
                    "/missing" => s.txresp(404).hdr("Cache-Control", "no-store").body("nf").send().await,
                    u => panic!("unexpected {u}"),
                }
            }
            // The second page request: the template from cache, the
            // fragments again (no-store), with the other branch.
            for _ in 0..5 {
                let req = s.rxreq().await;
                match req.url() {
                    "/ok" => s.txresp(200).hdr("Cache-Control", "no-store").body("OK").send().await,
                    "/down" => s.txresp(503).hdr("Cache-Control", "no-store").body("down").send().await,
                    "/missing" => s.txresp(404).hdr("Cache-Control", "no-store").body("nf").send().await,
                    u => panic!("unexpected {u}"),
                }
            }
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_status(200).expect_body("O|fallback|OK|.");
    let r = t
        .client(&proxy)
        .get("/p")
        .hdr("Cookie", "tier=gold")
        .send()
        .await;
    r.expect_body("G|fallback|OK|.");
    // Per page: /down in the attempt and /down with continue (/missing's
    // alt answered for it).
    proxy.expect_counter("esi_fragment_failures", 4);
    origin.finish().await;
}

// v18005: a failed include without onerror or alt is dropped (logged,
// counted) by default; with on_error = "abort" the page is cut there: the
// client sees an incomplete response, never a page that looks whole.
#[tokio::test]
async fn v18005_a_failed_include_is_dropped_or_cuts_the_page() {
    for (case, esi, whole) in [
        ("v18005a", "true", true),
        ("v18005b", "{ on_error = \"abort\" }", false),
    ] {
        let t = Test::new(case);
        let origin = t
            .origin()
            .script(|mut s| async move {
                s.rxreq().await.expect_url("/p");
                s.txresp(200)
                    .hdr("Content-Type", HTML)
                    .body("before<esi:include src=\"/broken\"/>after")
                    .send()
                    .await;
                s.rxreq().await.expect_url("/broken");
                s.txresp(500).body("oops").send().await;
            })
            .start()
            .await;
        let proxy = t.proxy().toml(&origin, &config(esi, "")).start().await;
        let r = t.client(&proxy).get("/p").try_send().await;
        if whole {
            let r = r.unwrap_or_else(|e| panic!("{e}"));
            r.expect_status(200).expect_body("beforeafter");
        } else {
            let e = r.expect_err("the page is cut");
            assert!(e.is_incomplete(), "{e}");
            let p = e.partial().expect("a partial response");
            p.expect_status(200);
            assert!(!p.text().contains("after"), "{}", p.dump());
        }
        proxy.expect_counter("esi_fragment_failures", 1);
        origin.finish().await;
    }
}

// v18006: nesting ends at max_depth (a fragment that includes itself) and
// a page's includes at max_includes, nested ones counted; what is over
// the limit is dropped, and the origin never sees it.
#[tokio::test]
async fn v18006_nesting_and_include_count_are_bounded() {
    let t = Test::new("v18006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            serve(
                &mut s,
                2,
                &[
                    ("/deep", "max-age=60", HTML, "<esi:include src=\"/loop\"/>"),
                    ("/loop", "max-age=60", HTML, "L<esi:include src=\"/loop\"/>"),
                ],
            )
            .await;
            let many = "<esi:include src=\"/f1\"/><esi:include src=\"/f2\"/><esi:include src=\"/f3\"/><esi:include src=\"/f4\"/><esi:include src=\"/f5\"/>";
            s.rxreq().await.expect_url("/many");
            s.txresp(200).hdr("Content-Type", HTML).body(many).send().await;
            let pages = [
                ("/f1", "max-age=60", HTML, "1"),
                ("/f2", "max-age=60", HTML, "2"),
                ("/f3", "max-age=60", HTML, "3"),
                ("/f4", "max-age=60", HTML, "4"),
                ("/f5", "max-age=60", HTML, "5"),
            ];
            serve(&mut s, 3, &pages).await;
        })
        .start()
        .await;
    let cfg = config("{ max_depth = 3, max_includes = 3 }", "");
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let r = t.client(&proxy).get("/deep").send().await;
    // Depths 1, 2 and 3 are /loop; the include at depth 4 is dropped.
    r.expect_status(200).expect_body("LLL");
    let r = t.client(&proxy).get("/many").send().await;
    r.expect_status(200).expect_body("123");
    origin.finish().await;
}

// v18007: malformed markup is served as the text it is (counted), never
// half processed, never a hang; a page without markup goes out as it is.
#[tokio::test]
async fn v18007_malformed_markup_is_served_as_text() {
    let t = Test::new("v18007");
    let bad = "<p>x</p><esi:include src=\"/a\"<esi:try><esi:attempt>$(";
    let origin = t
        .origin()
        .script(move |mut s| async move {
            serve(
                &mut s,
                2,
                &[
                    ("/bad", "max-age=60", HTML, bad),
                    ("/plain", "max-age=60", HTML, "<p>no markup</p>"),
                ],
            )
            .await;
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/bad")
            .send()
            .await
            .expect_status(200)
            .expect_body(bad);
        t.client(&proxy)
            .get("/plain")
            .send()
            .await
            .expect_status(200)
            .expect_body("<p>no markup</p>");
    }
    // Parsed once: the stored object keeps what it is.
    proxy.expect_counter("esi_malformed", 1);
    proxy.expect_counter("esi_pages", 0);
    origin.finish().await;
}

// v18008: a fragment past its lifetime within stale-while-revalidate is
// served stale inside the page and refreshed once in the background; the
// next page has the new fragment.
#[tokio::test]
async fn v18008_fragments_are_served_stale_and_refreshed() {
    let t = Test::new("v18008");
    let origin = t
        .origin()
        .script(|mut s| async move {
            serve(
                &mut s,
                2,
                &[
                    (
                        "/p",
                        "max-age=600",
                        HTML,
                        "[<esi:include src=\"/ticker\"/>]",
                    ),
                    (
                        "/ticker",
                        "max-age=1, stale-while-revalidate=60",
                        "text/plain",
                        "old",
                    ),
                ],
            )
            .await;
            s.rxreq().await.expect_url("/ticker");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("new")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    t.client(&proxy).get("/p").send().await.expect_body("[old]");
    t.clock.advance(secs(5));
    t.client(&proxy).get("/p").send().await.expect_body("[old]");
    proxy.expect_counter("background_refreshes", 1);
    // The page, the ticker, the ticker's refresh.
    proxy.wait_counter("objects_stored", 3).await;
    t.client(&proxy).get("/p").send().await.expect_body("[new]");
    origin.finish().await;
}

// v18009: a client that accepts gzip gets the assembled page gzipped (and
// Vary: Accept-Encoding); one that accepts nothing gets it as it is.
#[tokio::test]
async fn v18009_assembled_pages_are_coded_for_the_client() {
    let t = Test::new("v18009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            serve(
                &mut s,
                2,
                &[
                    (
                        "/p",
                        "max-age=60",
                        HTML,
                        "<h1>page</h1><esi:include src=\"/f\"/><footer/>",
                    ),
                    ("/f", "max-age=60", HTML, "fragment fragment fragment"),
                ],
            )
            .await;
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    let want = "<h1>page</h1>fragment fragment fragment<footer/>";
    let r = t
        .client(&proxy)
        .get("/p")
        .hdr("Accept-Encoding", "gzip")
        .send()
        .await;
    r.expect_status(200)
        .expect_header("content-encoding", "gzip")
        .expect_header_contains("vary", "Accept-Encoding");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, want);
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_no_header("content-encoding").expect_body(want);
    origin.finish().await;
}

// v18010: with debug_headers, Cache-Status names each fragment's outcome
// (a miss, then a hit); includes of another host are refused unless the
// route allows it.
#[tokio::test]
async fn v18010_fragment_outcomes_in_cache_status_and_hosts() {
    let t = Test::new("v18010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            serve(
                &mut s,
                3,
                &[
                    ("/p", "max-age=60", HTML, "<esi:include src=\"/f\"/>|<esi:include src=\"http://evil.example/x\"/>|<esi:include src=\"http://cdn.example/c\"/>"),
                    ("/f", "max-age=60", HTML, "F"),
                    ("/c", "max-age=60", HTML, "C"),
                ],
            )
            .await;
        })
        .start()
        .await;
    let cfg = config(
        "{ allow_hosts = [\"cdn.example\"] }",
        "debug_headers = true",
    );
    let proxy = t.proxy().toml(&origin, &cfg).start().await;
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_status(200)
        .expect_body("F||C")
        .expect_header_contains("cache-status", "esi=\"")
        .expect_header_contains("cache-status", "/f=miss")
        .expect_header_contains("cache-status", "http://evil.example/x=error");
    let r = t.client(&proxy).get("/p").send().await;
    r.expect_body("F||C")
        .expect_header_contains("cache-status", "/f=hit")
        .expect_header_contains("cache-status", "http://cdn.example/c=hit");
    origin.finish().await;
}

// v18011: two pages that include the same fragment at once share one
// origin request for it (fragments coalesce like any request), and a
// fragment that proves uncacheable passes afterwards (hit-for-pass).
#[tokio::test]
async fn v18011_fragments_coalesce_and_pass_like_requests() {
    let t = Test::new("v18011");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            move |mut s| async move {
                let pages = [
                    (
                        "/a",
                        "max-age=60",
                        HTML,
                        "a:<esi:include src=\"/shared\"/>:<esi:include src=\"/me\"/>",
                    ),
                    ("/b", "max-age=60", HTML, "b:<esi:include src=\"/shared\"/>"),
                    ("/me", "private", HTML, "ME"),
                ];
                // /a, /b, /me, and /shared once for both pages: held until
                // the second page waits on its fill.
                let mut shared = None;
                for _ in 0..4 {
                    let req = s.rxreq().await;
                    if req.url() == "/shared" {
                        assert!(shared.replace(req).is_none(), "/shared asked twice");
                    } else {
                        answer(&mut s, &req, &pages).await;
                    }
                }
                go.sync().await;
                let shared = shared.expect("/shared asked");
                s.switch_to(&shared);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .body("S")
                    .send()
                    .await;
                s.rxreq().await.expect_url("/me");
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("ME2")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().toml(&origin, &config("true", "")).start().await;
    let a = t.client(&proxy).get("/a").spawn();
    let b = t.client(&proxy).get("/b").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    a.await.unwrap().expect_body("a:S:ME");
    b.await.unwrap().expect_body("b:S");
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("a:S:ME2");
    proxy.expect_counter("hit_for_pass", 1);
    origin.finish().await;
}
