//! o: operating hoard: purges (admin API, `PURGE`, tags, soft), metrics,
//! `/status`, the admin token, the access log.

use std::collections::HashMap;

use hoard_testkit::{Response, Test, TestProxy};

use crate::secs;

/// `POST /purge` on the admin listener.
pub async fn purge(t: &Test, proxy: &TestProxy, body: &str) -> Response {
    t.client(proxy.admin())
        .post("/purge")
        .hdr("Content-Type", "application/json")
        .body(body)
        .send()
        .await
}

/// The `purged` count of a successful purge.
pub fn purged(r: &Response) -> u64 {
    r.expect_status(200)
        .expect_header("content-type", "application/json");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("purge answer is JSON");
    v["purged"].as_u64().expect("purged is a number")
}

/// `GET /metrics` as `name{labels}` → value.
pub async fn metrics(t: &Test, proxy: &TestProxy) -> HashMap<String, f64> {
    let r = t.client(proxy.admin()).get("/metrics").send().await;
    r.expect_status(200)
        .expect_header_contains("content-type", "version=0.0.4");
    r.text()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("sample line");
            (k.to_string(), v.parse::<f64>().expect("sample value"))
        })
        .collect()
}

/// `GET /status` as JSON.
pub async fn status(t: &Test, proxy: &TestProxy) -> serde_json::Value {
    let r = t.client(proxy.admin()).get("/status").send().await;
    r.expect_status(200);
    serde_json::from_slice(&r.body).expect("status is JSON")
}

// o00001: a URL purge removes every Vary variant of the URL and every keyed
// header value; it answers the count, and is idempotent.
#[tokio::test]
async fn o00001_url_purge_takes_every_variant() {
    let t = Test::new("o00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for round in 0..2 {
                for lang in ["en", "de"] {
                    s.rxreq()
                        .await
                        .expect_url("/page")
                        .expect_header("accept-language", lang);
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .hdr("Vary", "Accept-Language")
                        .body(format!("{lang}{round}"))
                        .send()
                        .await;
                }
                if round == 0 {
                    s.rxreq().await.expect_url("/other");
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .body("other")
                        .send()
                        .await;
                }
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let get = |lang: &'static str| {
        t.client(&proxy)
            .get("/page")
            .hdr("Accept-Language", lang)
            .send()
    };
    get("en").await.expect_body("en0");
    get("de").await.expect_body("de0");
    t.client(&proxy)
        .get("/other")
        .send()
        .await
        .expect_body("other");
    get("en")
        .await
        .expect_body("en0")
        .expect_cache_status("hit");
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/page"}"#).await;
    assert_eq!(purged(&r), 2);
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"url": "http://localhost/page"}"#).await),
        0
    );
    get("en").await.expect_body("en1");
    get("de").await.expect_body("de1");
    // Other URLs stay.
    t.client(&proxy)
        .get("/other")
        .send()
        .await
        .expect_cache_status("hit");
    proxy
        .expect_counter("purges_url", 2)
        .expect_counter("purged_objects", 2);
    origin.finish().await;
}

// o00002: prefix and host purges select by the URL the key was made from.
#[tokio::test]
async fn o00002_prefix_and_host_purges() {
    let t = Test::new("o00002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/img/a", "/img/b", "/news", "/img/a", "/news"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/img/a", "/img/b", "/news"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    let r = purge(&t, &proxy, r#"{"prefix": "http://LOCALHOST/img/"}"#).await;
    assert_eq!(purged(&r), 2);
    t.client(&proxy)
        .get("/news")
        .send()
        .await
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/img/a")
        .send()
        .await
        .expect_body("/img/a");
    let r = purge(&t, &proxy, r#"{"host": "localhost"}"#).await;
    assert_eq!(purged(&r), 2);
    t.client(&proxy)
        .get("/news")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    proxy
        .expect_counter("purges_prefix", 1)
        .expect_counter("purges_host", 1);
    origin.finish().await;
}

// o00003: tags come from Surrogate-Key (spaces) and Cache-Tag (commas); clients
// never see those fields; a tag purge removes exactly the tagged objects.
#[tokio::test]
async fn o00003_tag_purge_and_tag_fields_stripped() {
    let t = Test::new("o00003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, sk, ct) in [
                ("/p/42", "product-42 home", ""),
                ("/p/43", "product-43", "home"),
                ("/about", "", "about"),
                ("/p/42", "product-42", ""),
                ("/p/43", "product-43", ""),
            ] {
                s.rxreq().await.expect_url(path);
                let mut r = s.txresp(200).hdr("Cache-Control", "max-age=600");
                if !sk.is_empty() {
                    r = r.hdr("Surrogate-Key", sk);
                }
                if !ct.is_empty() {
                    r = r.hdr("Cache-Tag", ct);
                }
                r.body(path).send().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/p/42", "/p/43", "/about", "/p/42"] {
        t.client(&proxy)
            .get(p)
            .send()
            .await
            .expect_body(p)
            .expect_no_header("surrogate-key")
            .expect_no_header("cache-tag");
    }
    assert_eq!(purged(&purge(&t, &proxy, r#"{"tag": "home"}"#).await), 2);
    t.client(&proxy)
        .get("/about")
        .send()
        .await
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/p/42")
        .send()
        .await
        .expect_body("/p/42");
    t.client(&proxy)
        .get("/p/43")
        .send()
        .await
        .expect_body("/p/43");
    // The new copy of /p/42 is no longer tagged "home".
    assert_eq!(purged(&purge(&t, &proxy, r#"{"tag": "home"}"#).await), 0);
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"tag": "product-42"}"#).await),
        1
    );
    proxy.expect_counter("purges_tag", 3);
    origin.finish().await;
}

// o00004: bad purge requests get 400 with a JSON error naming the field.
#[tokio::test]
async fn o00004_bad_purge_requests_name_the_field() {
    let t = Test::new("o00004");
    let origin = t.origin().start().await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for (body, field, part) in [
        (r#"{"url": "/relative"}"#, Some("url"), "absolute URL"),
        (r#"{"url": "ftp://x/a"}"#, Some("url"), "http or https"),
        (r#"{"prefix": "example.com/"}"#, Some("prefix"), "http://"),
        (r#"{"host": "example.com/a"}"#, Some("host"), "host name"),
        (r#"{"tag": ""}"#, Some("tag"), "non-empty"),
        (r#"{"tag": 5}"#, Some("tag"), "string"),
        (
            r#"{"tag": "a", "soft": "yes"}"#,
            Some("soft"),
            "true or false",
        ),
        (r#"{"tag": "a", "host": "b"}"#, Some("tag"), "only one"),
        (r#"{"tags": "a"}"#, None, "unknown field"),
        (r#"{}"#, None, "give one of"),
        ("not json", None, "not JSON"),
    ] {
        let r = purge(&t, &proxy, body).await;
        r.expect_status(400);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["field"].as_str(), field, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(part), "{body}: {v}");
    }
    t.client(proxy.admin())
        .get("/purge")
        .send()
        .await
        .expect_status(405);
    t.client(proxy.admin())
        .get("/nothing")
        .send()
        .await
        .expect_status(404);
    origin.finish().await;
}

// o00005: a soft purge marks stale instead of removing: stale-while-revalidate
// serves the old copy while exactly one refresh runs, then the new one.
#[tokio::test]
async fn o00005_soft_purge_serves_stale_with_one_refresh() {
    let t = Test::new("o00005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600, stale-while-revalidate=60")
                .hdr("ETag", "\"1\"")
                .hdr("Surrogate-Key", "news")
                .body("v1")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600, stale-while-revalidate=60")
                .hdr("ETag", "\"2\"")
                .body("v2")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/n").send().await.expect_body("v1");
    t.clock.advance(secs(5));
    let r = purge(&t, &proxy, r#"{"tag": "news", "soft": true}"#).await;
    assert_eq!(purged(&r), 1);
    for _ in 0..2 {
        t.client(&proxy)
            .get("/n")
            .send()
            .await
            .expect_body("v1")
            .expect_cache_status("detail=stale-while-revalidate");
    }
    proxy.wait_counter("objects_stored", 2).await;
    proxy.expect_counter("background_refreshes", 1);
    t.client(&proxy)
        .get("/n")
        .send()
        .await
        .expect_body("v2")
        .expect_cache_status("hit");
    proxy.expect_counter("purges_soft", 1);
    origin.finish().await;
}

// o00006: a soft purge of an object without stale-while-revalidate makes the
// next request revalidate (a 304 refreshes it).
#[tokio::test]
async fn o00006_soft_purge_revalidates() {
    let t = Test::new("o00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"1\"")
                .body("v1")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"1\"")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/r").send().await.expect_body("v1");
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/r", "soft": true}"#).await;
    assert_eq!(purged(&r), 1);
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body("v1")
        .expect_cache_status("fwd=stale; fwd-status=304");
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// o00007: a purge that comes while a fill is streaming: the client that asked
// gets its whole body, but the cache does not keep it; a request made after
// the purge does not join that fill (it fetches anew), and its copy is kept.
#[tokio::test]
async fn o00007_purge_racing_a_fill_is_not_stored() {
    let t = Test::new("o00007");
    let second_sent = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let second_sent = second_sent.clone();
            |mut s| async move {
                let old = s.rxreq().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Surrogate-Key", "t")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("old-").await;
                // After the purge: a fetch of its own, while the old one streams.
                s.rxreq_concurrent().await.expect_url("/race");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("new")
                    .send()
                    .await;
                second_sent.sync().await;
                s.switch_to(&old);
                s.chunk("body").await;
                s.end().await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let first = t.client(&proxy).get("/race").spawn();
    proxy.wait_counter("fills_started", 1).await;
    origin.wait_requests(1).await;
    // Nothing is stored yet: the purge finds nothing, but the fill notices it.
    let r = purge(&t, &proxy, r#"{"tag": "t"}"#).await;
    assert_eq!(purged(&r), 0);
    t.client(&proxy)
        .get("/race")
        .send()
        .await
        .expect_body("new");
    proxy.wait_counter("objects_stored", 1).await;
    second_sent.sync().await;
    first.await.unwrap().expect_body("old-body");
    proxy.wait_counter("fills_completed", 2).await;
    proxy
        .expect_counter("purge_raced_fills", 1)
        .expect_counter("objects_stored", 1);
    t.client(&proxy)
        .get("/race")
        .send()
        .await
        .expect_body("new")
        .expect_cache_status("hit");
    origin.finish().await;
}

// o00008: on a non-loopback address the admin API needs the bearer token:
// 401 without it or with a wrong one; with it, every endpoint answers.
#[tokio::test]
async fn o00008_admin_token_on_non_loopback() {
    let t = Test::new("o00008");
    let origin = t.origin().start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.address = Some("0.0.0.0:0".parse().unwrap());
            c.admin.token = Some("s3cret-token".into());
        })
        .start()
        .await;
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], proxy.admin().port()));
    for path in ["/status", "/metrics", "/"] {
        let r = t.client(admin).get(path).send().await;
        r.expect_status(401)
            .expect_header("www-authenticate", "Bearer");
        t.client(admin)
            .get(path)
            .hdr("Authorization", "Bearer s3cret-tokem")
            .send()
            .await
            .expect_status(401);
        t.client(admin)
            .get(path)
            .hdr("Authorization", "Bearer s3cret-token")
            .send()
            .await
            .expect_status(200);
    }
    t.client(admin)
        .post("/purge")
        .body(r#"{"tag": "x"}"#)
        .send()
        .await
        .expect_status(401);
    let r = t
        .client(admin)
        .post("/purge")
        .hdr("Authorization", "Bearer s3cret-token")
        .body(r#"{"tag": "x"}"#)
        .send()
        .await;
    assert_eq!(purged(&r), 0);
    // The dashboard passes the token in its query.
    t.client(admin)
        .get("/status?token=s3cret-token")
        .send()
        .await
        .expect_status(200);
    proxy.expect_counter("admin_unauthorized", 7);
    origin.finish().await;
}

// o00009: PURGE on the main listener: off by default (405), refused outside
// purge_allow (403), and a URL purge from an allowed address.
#[tokio::test]
async fn o00009_purge_method() {
    let t = Test::new("o00009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for body in ["a1", "a2"] {
                s.rxreq().await.expect_url("/a?x=1");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let off = t.proxy().origin(&origin).start().await;
    t.client(&off)
        .request("PURGE", "/a")
        .send()
        .await
        .expect_status(405);
    let elsewhere = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.purge_allow = vec![hoard_proxy::config::Cidr::parse("10.0.0.0/8").unwrap()]
        })
        .start()
        .await;
    t.client(&elsewhere)
        .request("PURGE", "/a")
        .send()
        .await
        .expect_status(403);
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.purge_allow = vec![hoard_proxy::config::Cidr::parse("127.0.0.1/32").unwrap()]
        })
        .start()
        .await;
    t.client(&proxy)
        .get("/a?x=1")
        .send()
        .await
        .expect_body("a1");
    let r = t.client(&proxy).request("PURGE", "/a?x=1").send().await;
    assert_eq!(purged(&r), 1);
    t.client(&proxy)
        .get("/a?x=1")
        .send()
        .await
        .expect_body("a2");
    proxy.expect_counter("purges_url", 1);
    elsewhere.expect_counter("purges_refused", 1);
    origin.finish().await;
}

/// The value of a sample, 0 when absent.
fn m(map: &HashMap<String, f64>, key: &str) -> f64 {
    map.get(key).copied().unwrap_or(0.0)
}

// o00010: a scripted sequence (a miss with one coalesced waiter, two hits, one
// purge) moves each metric by exactly the expected amount.
#[tokio::test]
async fn o00010_metrics_move_by_exactly_the_sequence() {
    let t = Test::new("o00010");
    let both_in = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let both_in = both_in.clone();
            |mut s| async move {
                s.rxreq().await;
                both_in.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("0123456789")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let before = metrics(&t, &proxy).await;
    let leader = t.client(&proxy).get("/m").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let waiter = t.client(&proxy).get("/m").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    both_in.sync().await;
    leader.await.unwrap().expect_body("0123456789");
    waiter
        .await
        .unwrap()
        .expect_body("0123456789")
        .expect_cache_status("collapsed");
    proxy.wait_counter("objects_stored", 1).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/m")
            .send()
            .await
            .expect_cache_status("hit");
    }
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"url": "http://localhost/m"}"#).await),
        1
    );
    let after = metrics(&t, &proxy).await;
    let delta = |k: &str| m(&after, k) - m(&before, k);
    let up = "upstream=\"default\"";
    for (key, want) in [
        ("hoard_requests_total{cache=\"miss\"}", 2.0),
        ("hoard_requests_total{cache=\"hit\"}", 2.0),
        ("hoard_requests_total{cache=\"stale\"}", 0.0),
        ("hoard_requests_total{cache=\"pass\"}", 0.0),
        ("hoard_requests_total{cache=\"error\"}", 0.0),
        ("hoard_ttfb_seconds_count{cache=\"hit\"}", 2.0),
        ("hoard_ttfb_seconds_count{cache=\"miss\"}", 2.0),
        ("hoard_coalesced_waiters_total", 1.0),
        ("hoard_client_bytes_total", 40.0),
        (
            &format!("hoard_origin_requests_total{{{up},result=\"2xx\"}}"),
            1.0,
        ),
        (&format!("hoard_origin_seconds_count{{{up}}}"), 1.0),
        (&format!("hoard_origin_bytes_total{{{up}}}"), 10.0),
        ("hoard_purges_total{kind=\"url\"}", 1.0),
        ("hoard_purged_objects_total", 1.0),
        ("hoard_background_refreshes_total", 0.0),
        ("hoard_fills_in_flight", 0.0),
    ] {
        assert_eq!(
            delta(key),
            want,
            "{key}: before {} after {}",
            m(&before, key),
            m(&after, key)
        );
    }
    assert_eq!(
        m(
            &after,
            &format!("hoard_upstream_up{{{up},server=\"{}\"}}", origin.addr())
        ),
        1.0
    );
    // /status agrees with the metrics.
    let st = status(&t, &proxy).await;
    assert_eq!(st["requests"]["hit"], 2);
    assert_eq!(st["requests"]["miss"], 2);
    assert_eq!(st["requests"]["total"], 4);
    assert_eq!(st["hit_ratio"], 0.5);
    assert_eq!(st["client"]["bytes"], 40);
    assert_eq!(st["origin"]["bytes"], 10);
    assert_eq!(st["origin"]["requests"], 1);
    assert_eq!(st["bytes_saved_ratio"], 0.75);
    assert_eq!(st["coalesced_waiters"], 1);
    assert_eq!(st["purges"], 1);
    assert_eq!(st["upstreams"][0]["servers"][0]["state"], "up");
    origin.finish().await;
}

// o00011: `promtool check metrics` (Debian's prometheus package) accepts the
// exposition, with every family present after traffic of each kind.
#[tokio::test]
async fn o00011_promtool_accepts_the_metrics() {
    let t = Test::new("o00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .body("x")
                .send()
                .await;
            s.rxreq().await.expect_method("POST");
            s.txresp(201).body("made").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/a").send().await;
    t.client(&proxy).get("/a").send().await;
    t.client(&proxy)
        .post("/a")
        .body("x")
        .send()
        .await
        .expect_status(201);
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    let promtool = which("promtool").expect(
        "promtool is needed for this case: apt-get install prometheus (.ci/run installs it)",
    );
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{said}\n---\n{text}"
    );
    assert!(said.trim().is_empty(), "promtool lint findings:\n{said}");
    for family in hoard_proxy::admin::prometheus::FAMILIES {
        assert!(
            text.contains(&format!("# TYPE {} {}", family.name, family.kind)),
            "{}",
            family.name
        );
    }
    assert!(
        text.contains("hoard_requests_total{cache=\"pass\"} 1"),
        "{text}"
    );
    origin.finish().await;
}

/// A program on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}

// o00012: the access log has one JSON line per request with the outcome of
// each: miss, hit, stale, revalidated, pass, error; and reopens its file.
#[tokio::test]
async fn o00012_access_log_line_for_each_outcome() {
    let t = Test::new("o00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .hdr("ETag", "\"1\"")
                .body("hello")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"1\"")
                .send()
                .await;
            s.rxreq().await.expect_method("POST");
            s.txresp(200).body("posted").send().await;
            s.rxreq().await.expect_url("/b");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"b\"")
                .body("b")
                .send()
                .await;
            s.rxreq().await.expect_header("if-none-match", "\"b\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"b\"")
                .send()
                .await;
            for _ in 0..2 {
                s.rxreq().await.expect_url("/h");
                s.txresp(200)
                    .hdr("Cache-Control", "private")
                    .body("mine")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let log = t.dir().join("access.log");
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.access_log.target = hoard_proxy::config::LogTarget::File(log.clone()))
        .start()
        .await;
    // Each line is written when its response body is done: wait for it, so
    // the order of lines is the order of requests.
    let mut lines = 0;
    let mut logged = || {
        lines += 1;
        proxy.wait_counter("access_log_lines", lines)
    };
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // miss
    logged().await;
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // hit
    logged().await;
    t.clock.advance(secs(2));
    t.client(&proxy).get("/a").send().await.expect_body("hello"); // stale, refreshed behind
    logged().await;
    proxy.wait_counter("cache_revalidated_304", 1).await;
    t.client(&proxy)
        .post("/a")
        .body("x")
        .send()
        .await
        .expect_body("posted"); // pass
    logged().await;
    t.client(&proxy).get("/b").send().await.expect_body("b"); // miss
    logged().await;
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/b")
        .hdr("Cache-Control", "no-cache")
        .send()
        .await
        .expect_body("b"); // revalidated
    logged().await;
    t.client(&proxy).get("/h").send().await.expect_body("mine"); // miss, not storable
    logged().await;
    t.client(&proxy).get("/h").send().await.expect_body("mine"); // hit-for-pass
    logged().await;
    t.client(&proxy)
        .get("/c")
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await
        .expect_status(504); // error
    logged().await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<&str> = lines.iter().map(|l| l["cache"].as_str().unwrap()).collect();
    assert_eq!(
        outcomes,
        [
            "miss",
            "hit",
            "stale",
            "pass",
            "miss",
            "revalidated",
            "miss",
            "hit_for_pass",
            "error"
        ]
    );
    let first = &lines[0];
    assert_eq!(first["method"], "GET");
    assert_eq!(first["host"], "localhost");
    assert_eq!(first["path"], "/a");
    assert_eq!(first["status"], 200);
    assert_eq!(first["bytes"], 5);
    assert_eq!(first["client"], "127.0.0.1");
    assert!(first["upstream_ms"].as_f64().is_some());
    assert!(first["total_ms"].as_f64().unwrap() >= 0.0);
    assert!(first["time"].as_str().unwrap().ends_with('Z'));
    assert!(lines[1]["upstream_ms"].is_null());
    assert_eq!(lines[8]["status"], 504);
    // logrotate: the file is moved away, then the log is told to reopen.
    let rotated = t.dir().join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    proxy.proxy().reopen_logs();
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_cache_status("hit");
    proxy.wait_counter("access_log_lines", 10).await;
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap().lines().count(),
        9
    );
    proxy.expect_counter("access_log_dropped", 0);
    origin.finish().await;
}

// o00013: a URL purge of an object cached as slices removes every slice; a
// later range fetches its slice again.
#[tokio::test]
async fn o00013_url_purge_takes_every_slice() {
    use super::r_range::{body, LEN};
    use super::s_slice::{serve, starts, ETAG, SIZE};
    let t = Test::new("o00013");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[0, 1, 2, 3, 4])).await;
            serve(&mut s, "/v", &full, ETAG, starts(&[2])).await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .route(|r| {
            r.slice = Some(SIZE);
            r.slice_prefetch = 0;
            r.slice_direct_max = 0;
        })
        .start()
        .await;
    t.client(&proxy).get("/v").send().await.expect_body(&full);
    proxy.wait_counter("objects_stored", 5).await;
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/v"}"#).await;
    assert_eq!(purged(&r), 5);
    t.client(&proxy)
        .get("/v")
        .hdr("Range", "bytes=140000-140009")
        .send()
        .await
        .expect_status(206)
        .expect_cache_status("fwd=uri-miss")
        .expect_body(&full[140_000..140_010]);
    origin.finish().await;
}

// o00014: purges reach every tier: objects on disk and their promoted
// memory copies; after a restart the loader has catalogued the tags again,
// so a tag purge still finds what was stored before it.
#[tokio::test]
async fn o00014_purge_on_disk_and_after_a_restart() {
    let t = Test::new("o00014");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, tag) in [("/t1", "a"), ("/t2", "a"), ("/t3", "b"), ("/t1", "a")] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Cache-Tag", tag)
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let start = || {
        t.proxy()
            .origin(&origin)
            .admin()
            .disk(&dir, 64 << 20, 1 << 20)
            .start()
    };
    let proxy = start().await;
    for p in ["/t1", "/t2", "/t3"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    proxy.wait_counter("disk_stored", 3).await;
    // Two disk hits: /t1 is promoted to the memory tier.
    for _ in 0..2 {
        t.client(&proxy)
            .get("/t1")
            .send()
            .await
            .expect_cache_status("hit");
    }
    proxy.expect_counter("memory_promotions", 1);
    let r = purge(&t, &proxy, r#"{"url": "http://localhost/t1"}"#).await;
    assert_eq!(purged(&r), 1, "one object, on disk and in memory");
    t.client(&proxy)
        .get("/t1")
        .send()
        .await
        .expect_body("/t1")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("disk_stored", 4).await;
    proxy.stop().await;
    assert_eq!(super::d_disk::objects(&dir).len(), 3);

    let proxy = start().await;
    proxy.expect_counter("disk_loaded", 3);
    let r = purge(&t, &proxy, r#"{"tag": "a"}"#).await;
    assert_eq!(purged(&r), 2);
    proxy.stop().await;
    // The purge has unlinked the files before it answered.
    let left = super::d_disk::objects(&dir);
    assert_eq!(left.len(), 1, "{left:?}");
    let proxy = start().await;
    t.client(&proxy)
        .get("/t3")
        .send()
        .await
        .expect_body("/t3")
        .expect_cache_status("hit");
    origin.finish().await;
}

/// The dashboard as headless Chromium renders it: `data-ready` (the
/// sample shown) and each `data-metric` element's text.
fn render_dashboard(
    dir: &std::path::Path,
    admin: std::net::SocketAddr,
) -> (u64, Vec<(String, String)>) {
    let chromium = which("chromium")
        .expect("chromium is needed for this case: apt-get install chromium (.ci/run installs it)");
    let profile = tempfile::tempdir_in(dir).unwrap();
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{admin}/"))
        .env("HOME", profile.path())
        .env("XDG_CONFIG_HOME", profile.path())
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    let ready = regex::Regex::new(r#"<body[^>]*data-ready="(\d+)""#).unwrap();
    let ready: u64 = ready.captures(&dom).unwrap_or_else(|| {
        panic!(
            "the page never rendered a status:\n{dom}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })[1]
        .parse()
        .unwrap();
    let metric = regex::Regex::new(r#"data-metric="([^"]+)"[^>]*>([^<]*)<"#).unwrap();
    let figures = metric
        .captures_iter(&dom)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    (ready, figures)
}

/// The `/status` value at a dotted path, as the page prints it.
fn at_path(v: &serde_json::Value, path: &str) -> String {
    let mut cur = v;
    for part in path.split('.') {
        cur = match part.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[part],
        };
    }
    match cur {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => panic!("{path}: not in /status"),
        other => other.to_string(),
    }
}

/// Renders the dashboard once the sampler has settled (two samples after
/// the traffic: rates back to zero) and checks every figure against
/// `/status`; returns the figures.
pub(crate) async fn settled_dashboard(t: &Test, proxy: &TestProxy) -> HashMap<String, String> {
    let now = proxy.counter("status_samples");
    proxy.wait_counter("status_samples", now + 2).await;
    let admin = proxy.admin();
    let dir = t.dir().to_path_buf();
    let (ready, figures) = tokio::task::spawn_blocking(move || render_dashboard(&dir, admin))
        .await
        .unwrap();
    let st = status(t, proxy).await;
    assert!(figures.len() >= 30, "figures: {figures:?}");
    let mut seen = HashMap::new();
    for (path, text) in figures {
        match path.as_str() {
            // Moving with the clock, not with traffic.
            "uptime_seconds" => assert!(text.parse::<u64>().is_ok(), "{text}"),
            "sample" => assert_eq!(text, ready.to_string()),
            _ => {
                let want = at_path(&st, &path);
                let same = match (text.parse::<f64>(), want.parse::<f64>()) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => text == want,
                };
                assert!(
                    same,
                    "{path}: the page shows {text:?}, /status says {want:?}"
                );
            }
        }
        seen.insert(path, text);
    }
    seen
}

// o00015: the dashboard in headless Chromium: every figure is the
// /status value it names, and the figures follow the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o00015_dashboard_in_chromium_matches_status() {
    let t = Test::new("o00015");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("dashboard")
                .send()
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for _ in 0..3 {
        t.client(&proxy)
            .get("/d")
            .send()
            .await
            .expect_body("dashboard");
    }
    let first = settled_dashboard(&t, &proxy).await;
    assert_eq!(first["requests.hit"], "2");
    assert_eq!(first["requests.miss"], "1");
    assert_eq!(first["upstreams.0.servers.0.state"], "up");
    for _ in 0..4 {
        t.client(&proxy)
            .get("/d")
            .send()
            .await
            .expect_body("dashboard");
    }
    let second = settled_dashboard(&t, &proxy).await;
    assert_eq!(second["requests.hit"], "6");
    assert_eq!(second["requests.total"], "7");
    assert_ne!(first["client.bytes"], second["client.bytes"]);
    assert_ne!(first["hit_ratio"], second["hit_ratio"]);
    origin.finish().await;
}

// o00016: a writer that falls behind never holds a request: with the log
// going into a pipe nobody reads, requests are answered as usual and the
// lines that do not fit are dropped and counted.
#[tokio::test]
async fn o00016_a_stuck_access_log_drops_lines_and_blocks_nothing() {
    use std::os::unix::fs::OpenOptionsExt;
    let t = Test::new("o00016");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("x")
                .send()
                .await;
        })
        .start()
        .await;
    let fifo = t.dir().join("log.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A reader that never reads: the pipe fills up and the writer blocks.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .unwrap();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.access_log.target = hoard_proxy::config::LogTarget::File(fifo.clone());
            c.access_log.buffer = 4;
        })
        .start()
        .await;
    let mut conn = t.client(&proxy).connect().await;
    let n = 2000;
    for _ in 0..n {
        conn.get("/x")
            .hdr("Connection", "keep-alive")
            .send()
            .await
            .expect_body("x");
    }
    // A pipe holds 64 KiB: a few hundred lines; the queue holds 4.
    let dropped = proxy.counter("access_log_dropped");
    assert!(dropped > 1000, "dropped {dropped}");
    assert!(proxy.counter("access_log_lines") < 1000);
    origin.finish().await;
}
