//! r (logs): access lines that log tools read (`combined` exactly as nginx
//! writes it, `hoard`, JSON), the client's address as a trusted proxy or the
//! PROXY protocol gives it in every place that names the client, and
//! request ids from the client's proxy to the origin and the log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hoard_testkit::{Origin, OriginBuilder, Test, TestProxy};

/// The request fields an origin saw, request by request.
type Seen = Arc<Mutex<Vec<Vec<(String, String)>>>>;

/// An origin answering `answers` requests `200` with `body` and
/// `Cache-Control: cc`, noting each request's fields.
fn noting(t: &Test, answers: usize, cc: &'static str, body: &'static str) -> (OriginBuilder, Seen) {
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let b = t.origin().script(move |mut s| async move {
        for _ in 0..answers {
            let r = s.rxreq().await;
            s2.lock().unwrap().push(r.headers().to_vec());
            s.txresp(200)
                .hdr("Cache-Control", cc)
                .body(body)
                .send()
                .await;
        }
    });
    (b, seen)
}

/// The value of `name` in the `n`th request the origin saw.
fn field(seen: &Seen, n: usize, name: &str) -> Option<String> {
    seen.lock().unwrap()[n]
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// A configuration with one route (`route` added to it), `server` before
/// the rest, and the access log in `format` to `log` (`None`: off).
fn config(server: &str, route: &str, log: Option<(&Path, &str)>) -> String {
    let log = match log {
        Some((path, format)) => format!(
            "[access_log]\ntarget = {:?}\nformat = \"{format}\"\n",
            path.display().to_string()
        ),
        None => String::new(),
    };
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
{server}
{log}
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
{route}
"#
    )
}

async fn proxy(t: &Test, origin: &Origin, cfg: &str) -> TestProxy {
    t.proxy().origin(origin).toml(origin, cfg).start().await
}

/// The log's lines once `n` have been written.
async fn lines(proxy: &TestProxy, log: &Path, n: u64) -> Vec<String> {
    proxy.wait_counter("access_log_lines", n).await;
    let text = std::fs::read_to_string(log).unwrap();
    assert!(text.ends_with('\n'), "{text}");
    text.lines().map(str::to_string).collect()
}

fn log_path(t: &Test) -> PathBuf {
    t.dir().join("access.log")
}

fn is_made_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

// r02001: `combined` is nginx's combined line, byte for byte: the Basic
// user name, the request line as sent (absolute-form kept), `-` for an
// absent Referer or User-Agent and `""` for an empty one, `"`, control and
// non-ASCII bytes written `\xHH`, the time as `$time_local`.
#[tokio::test]
async fn r02001_combined_line_is_nginx_combined() {
    let t = Test::new("r02001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_url("/a?x=1");
            s.txresp(200).body("hello").send().await;
            s.rxreq().await.expect_url("/abs");
            s.txresp(200).body("abs").send().await;
            s.rxreq().await.expect_url("/missing");
            s.txresp(404).body("nope").send().await;
        })
        .start()
        .await;
    let log = log_path(&t);
    let proxy = proxy(&t, &origin, &config("", "", Some((&log, "combined")))).await;
    t.client(&proxy)
        .get("/a?x=1")
        .hdr("Referer", "https://ref.example/p")
        .hdr("User-Agent", "agent \"q\"/1.0 \u{e9}\t!")
        // ann:pw
        .hdr("Authorization", "Basic YW5uOnB3")
        .send()
        .await
        .expect_body("hello");
    proxy.wait_counter("access_log_lines", 1).await;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(b"GET http://localhost/abs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    conn.read_response().await.expect_body("abs");
    proxy.wait_counter("access_log_lines", 2).await;
    t.client(&proxy)
        .get("/missing")
        .hdr("Referer", "")
        .send()
        .await
        .expect_status(404);
    let got = lines(&proxy, &log, 3).await;
    assert_eq!(
        got,
        [
            r#"127.0.0.1 - ann [01/Jan/2026:00:00:00 +0000] "GET /a?x=1 HTTP/1.1" 200 5 "https://ref.example/p" "agent \x22q\x22/1.0 \xC3\xA9\x09!""#,
            r#"127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET http://localhost/abs HTTP/1.1" 200 3 "-" "-""#,
            r#"127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET /missing HTTP/1.1" 404 4 "" "-""#,
        ]
    );
    origin.finish().await;
}

// r02002: `hoard` is the combined line with the cache outcome, the
// upstream and request times (seconds), the request id (the one the origin
// got) and the Host after it; a hit has `-` for the upstream time and an
// id of its own.
#[tokio::test]
async fn r02002_hoard_line_adds_outcome_times_id_and_host() {
    let t = Test::new("r02002");
    let (origin, seen) = noting(&t, 1, "max-age=600", "hoard");
    let origin = origin.start().await;
    let log = log_path(&t);
    let proxy = proxy(&t, &origin, &config("", "", Some((&log, "hoard")))).await;
    for n in 1..=2 {
        t.client(&proxy)
            .get("/h")
            .hdr("Host", "www.example:8080")
            .hdr("User-Agent", "ua/1")
            .send()
            .await
            .expect_body("hoard");
        proxy.wait_counter("access_log_lines", n).await;
    }
    let got = lines(&proxy, &log, 2).await;
    let to_origin = field(&seen, 0, "x-request-id").expect("the origin got an id");
    let mut ids = Vec::new();
    for (line, outcome) in got.iter().zip(["miss", "hit"]) {
        let (combined, rest) = line.split_at(line.find("\"ua/1\"").unwrap() + 6);
        assert_eq!(
            combined,
            r#"127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET /h HTTP/1.1" 200 5 "-" "ua/1""#
        );
        let f: Vec<&str> = rest.split(' ').collect();
        assert_eq!(f.len(), 6, "{line}");
        assert_eq!((f[0], f[1]), ("", outcome), "{line}");
        let secs = |s: &str| {
            s.split_once('.')
                .is_some_and(|(a, b)| a.parse::<u64>().is_ok() && b.len() == 3)
        };
        match outcome {
            "miss" => assert!(secs(f[2]), "{line}"),
            _ => assert_eq!(f[2], "-", "{line}"),
        }
        assert!(secs(f[3]), "{line}");
        assert!(is_made_id(f[4]), "{line}");
        assert_eq!(f[5], "\"www.example:8080\"", "{line}");
        ids.push(f[4].to_string());
    }
    assert_eq!(ids[0], to_origin, "the miss's id is the one the origin got");
    assert_ne!(ids[0], ids[1]);
    origin.finish().await;
}

// r02003: JSON lines carry user_agent, referer, request_id and
// remote_user (null when the request had none), next to the fields they
// had.
#[tokio::test]
async fn r02003_json_has_agent_referer_id_and_user() {
    let t = Test::new("r02003");
    let (origin, seen) = noting(&t, 2, "no-store", "j");
    let origin = origin.start().await;
    let log = log_path(&t);
    let proxy = proxy(&t, &origin, &config("", "", Some((&log, "json")))).await;
    t.client(&proxy)
        .get("/j")
        .hdr("User-Agent", "Mozilla/5.0 \"x\"")
        .hdr("Referer", "https://ref.example/")
        // bob:secret
        .hdr("Authorization", "basic Ym9iOnNlY3JldA==")
        .send()
        .await
        .expect_body("j");
    proxy.wait_counter("access_log_lines", 1).await;
    t.client(&proxy).get("/j").send().await.expect_body("j");
    let got = lines(&proxy, &log, 2).await;
    let v: Vec<serde_json::Value> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v[0]["user_agent"], "Mozilla/5.0 \"x\"");
    assert_eq!(v[0]["referer"], "https://ref.example/");
    assert_eq!(v[0]["remote_user"], "bob");
    assert_eq!(v[0]["path"], "/j");
    assert_eq!(v[0]["cache"], "miss");
    assert!(!got[0].contains("secret"), "{}", got[0]);
    for (n, line) in v.iter().enumerate() {
        let id = line["request_id"].as_str().unwrap();
        assert!(is_made_id(id), "{line}");
        assert_eq!(Some(id.to_string()), field(&seen, n, "x-request-id"));
    }
    assert!(v[1]["user_agent"].is_null());
    assert!(v[1]["referer"].is_null());
    assert!(v[1]["remote_user"].is_null());
    origin.finish().await;
}

// r02004: the log names the client a trusted proxy gives (the rightmost
// X-Forwarded-For address not itself trusted); from a peer that is not
// trusted, the peer, whatever X-Forwarded-For says.
#[tokio::test]
async fn r02004_log_client_from_a_trusted_proxy_only() {
    let t = Test::new("r02004");
    let (origin, _) = noting(&t, 2, "no-store", "c");
    let origin = origin.start().await;
    let xff = "198.51.100.4, 203.0.113.9, 10.0.0.2";
    for (trusted, client, n) in [
        (
            "[server]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]",
            "203.0.113.9",
            1,
        ),
        ("", "127.0.0.1", 2),
    ] {
        let log = t.dir().join(format!("access{n}.log"));
        let proxy = proxy(&t, &origin, &config(trusted, "", Some((&log, "combined")))).await;
        t.client(&proxy)
            .get("/c")
            .hdr("X-Forwarded-For", xff)
            .send()
            .await
            .expect_body("c");
        let got = lines(&proxy, &log, 1).await;
        assert!(got[0].starts_with(&format!("{client} - - [")), "{}", got[0]);
    }
    origin.finish().await;
}

// r02005: on a PROXY protocol listener the log names the address the
// header carries.
#[tokio::test]
async fn r02005_log_client_from_the_proxy_protocol() {
    let t = Test::new("r02005");
    let (origin, seen) = noting(&t, 1, "no-store", "pp");
    let origin = origin.start().await;
    let log = log_path(&t);
    let cfg = config("", "", Some((&log, "combined"))).replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nproxy_protocol = true\nproxy_protocol_from = [\"127.0.0.1/32\"]",
    );
    let proxy = proxy(&t, &origin, &cfg).await;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n")
        .await;
    conn.send_raw(b"GET /pp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await;
    conn.read_response().await.expect_body("pp");
    let got = lines(&proxy, &log, 1).await;
    assert!(got[0].starts_with("203.0.113.7 - - ["), "{}", got[0]);
    assert_eq!(
        field(&seen, 0, "x-forwarded-for").as_deref(),
        Some("203.0.113.7")
    );
    origin.finish().await;
}

// r02006: a cache rule's `client` condition takes the client a trusted
// proxy gives, as the edge rules do (it took the proxy's address).
#[tokio::test]
async fn r02006_rule_client_condition_takes_the_resolved_client() {
    let t = Test::new("r02006");
    let (origin, _) = noting(&t, 2, "max-age=600", "r");
    let origin = origin.start().await;
    let route = "[[site.route.bypass]]\nname = \"office\"\nclient = [\"203.0.113.0/24\"]";
    let cfg = config("[server]\ntrusted_proxies = [\"127.0.0.1\"]", route, None);
    let proxy = proxy(&t, &origin, &cfg).await;
    let from = |ip: &'static str| t.client(&proxy).get("/r").hdr("X-Forwarded-For", ip);
    from("198.51.100.1")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    from("198.51.100.1").send().await.expect_cache_status("hit");
    from("203.0.113.9")
        .send()
        .await
        .expect_cache_status("fwd=bypass")
        .expect_cache_status("detail=bypass-rule:office");
    proxy.expect_counter("bypass_rule_matches", 1);
    origin.finish().await;
}

// r02007: towards the origin: from a trusted proxy X-Forwarded-For is its
// list (every field of it) with the proxy's address after it, so the
// client is its rightmost untrusted address again, and `$remote_addr` is
// that client; from anyone else both name the peer.
#[tokio::test]
async fn r02007_forwarded_for_and_remote_addr_name_the_client() {
    let t = Test::new("r02007");
    let (origin, seen) = noting(&t, 4, "no-store", "f");
    let origin = origin.start().await;
    let route = "request_headers = { set = { \"X-Real-IP\" = \"$remote_addr\" } }";
    let trusted = config("[server]\ntrusted_proxies = [\"127.0.0.1\"]", route, None);
    let untrusted = config("", route, None);
    for cfg in [&trusted, &untrusted] {
        let proxy = proxy(&t, &origin, cfg).await;
        t.client(&proxy)
            .get("/f")
            .hdr("X-Forwarded-For", "198.51.100.4")
            .hdr("X-Forwarded-For", "203.0.113.9")
            .send()
            .await
            .expect_body("f");
        t.client(&proxy).get("/f").send().await.expect_body("f");
    }
    let got = |n: usize| {
        (
            field(&seen, n, "x-forwarded-for").unwrap(),
            field(&seen, n, "x-real-ip").unwrap(),
        )
    };
    assert_eq!(
        got(0),
        (
            "198.51.100.4, 203.0.113.9, 127.0.0.1".into(),
            "203.0.113.9".into()
        )
    );
    assert_eq!(got(1), ("127.0.0.1".into(), "127.0.0.1".into()));
    assert_eq!(got(2), ("127.0.0.1".into(), "127.0.0.1".into()));
    assert_eq!(got(3), ("127.0.0.1".into(), "127.0.0.1".into()));
    origin.finish().await;
}

// r02008: `PURGE`'s allow list takes the client a trusted proxy gives: the
// proxy's own address is not enough.
#[tokio::test]
async fn r02008_purge_allow_takes_the_resolved_client() {
    let t = Test::new("r02008");
    let (origin, _) = noting(&t, 2, "max-age=600", "p");
    let origin = origin.start().await;
    let server =
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[admin]\npurge_allow = [\"203.0.113.0/24\"]";
    let proxy = proxy(&t, &origin, &config(server, "", None)).await;
    t.client(&proxy).get("/p").send().await.expect_body("p");
    let purge = |xff: &'static str| {
        let r = t.client(&proxy).request("PURGE", "/p");
        if xff.is_empty() {
            r
        } else {
            r.hdr("X-Forwarded-For", xff)
        }
    };
    purge("").send().await.expect_status(403);
    purge("198.51.100.1").send().await.expect_status(403);
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("hit");
    purge("203.0.113.9").send().await.expect_status(200);
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    proxy.expect_counter("purges_refused", 2);
    origin.finish().await;
}

// r02009: over HTTP/2 the combined line's request is the path and
// `HTTP/2.0`, as nginx prints it (the target arrives as :scheme,
// :authority and :path).
#[tokio::test]
async fn r02009_combined_line_over_http2() {
    use http_body_util::BodyExt;
    let t = Test::new("r02009");
    let (origin, _) = noting(&t, 1, "max-age=60", "over h2");
    let origin = origin.start().await;
    let log = log_path(&t);
    let l = log.clone();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(move |c| {
            c.access_log.target = hoard_config::LogTarget::File(l);
            c.access_log.format = hoard_config::LogFormat::Combined;
        })
        .start()
        .await;
    let stream = tokio::net::TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://h2.example/two?x=1")
        .header("user-agent", "h2-client/1")
        .header("referer", "https://r.example/")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"over h2");
    let got = lines(&proxy, &log, 1).await;
    assert_eq!(
        got,
        [
            r#"127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET /two?x=1 HTTP/2.0" 200 7 "https://r.example/" "h2-client/1""#
        ]
    );
    origin.finish().await;
}

// r02010: a sane X-Request-Id from a trusted proxy is kept: the origin
// gets it and the log has it.
#[tokio::test]
async fn r02010_request_id_kept_from_a_trusted_proxy() {
    let t = Test::new("r02010");
    let (origin, seen) = noting(&t, 1, "no-store", "k");
    let origin = origin.start().await;
    let log = log_path(&t);
    let cfg = config(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
        "",
        Some((&log, "json")),
    );
    let proxy = proxy(&t, &origin, &cfg).await;
    t.client(&proxy)
        .get("/k")
        .hdr("X-Request-Id", "lb-7f3a:42")
        .send()
        .await
        .expect_body("k");
    let got = lines(&proxy, &log, 1).await;
    let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
    assert_eq!(v["request_id"], "lb-7f3a:42");
    assert_eq!(
        field(&seen, 0, "x-request-id").as_deref(),
        Some("lb-7f3a:42")
    );
    origin.finish().await;
}

// r02011: an X-Request-Id from a client that is not a trusted proxy, or an
// insane one (a space, too long) from a trusted proxy, is replaced by a
// made id, the same at the origin and in the log.
#[tokio::test]
async fn r02011_request_id_replaced_when_untrusted_or_insane() {
    let t = Test::new("r02011");
    let (origin, seen) = noting(&t, 3, "no-store", "u");
    let origin = origin.start().await;
    let long = "a".repeat(129);
    let cases: [(&str, String); 3] = [
        ("", "chosen-by-client".into()),
        (
            "[server]\ntrusted_proxies = [\"127.0.0.1\"]",
            "two words".into(),
        ),
        ("[server]\ntrusted_proxies = [\"127.0.0.1\"]", long),
    ];
    for (n, (server, sent)) in cases.into_iter().enumerate() {
        let log = t.dir().join(format!("access{n}.log"));
        let proxy = proxy(&t, &origin, &config(server, "", Some((&log, "json")))).await;
        t.client(&proxy)
            .get("/u")
            .hdr("X-Request-Id", &sent)
            .send()
            .await
            .expect_body("u");
        let got = lines(&proxy, &log, 1).await;
        let v: serde_json::Value = serde_json::from_str(&got[0]).unwrap();
        let id = v["request_id"].as_str().unwrap();
        assert!(is_made_id(id), "{sent:?} gave {id:?}");
        assert_eq!(field(&seen, n, "x-request-id").as_deref(), Some(id));
    }
    origin.finish().await;
}

// r02012: with the log off, a request that goes forward still gets an
// id for the origin (the client's is not passed on), one per request.
#[tokio::test]
async fn r02012_request_id_made_for_the_origin_without_a_log() {
    let t = Test::new("r02012");
    let (origin, seen) = noting(&t, 2, "no-store", "o");
    let origin = origin.start().await;
    let proxy = proxy(&t, &origin, &config("", "", None)).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/o")
            .hdr("X-Request-Id", "mine")
            .send()
            .await
            .expect_body("o");
    }
    let a = field(&seen, 0, "x-request-id").unwrap();
    let b = field(&seen, 1, "x-request-id").unwrap();
    assert!(is_made_id(&a) && is_made_id(&b), "{a} {b}");
    assert_ne!(a, b);
    origin.finish().await;
}

/// The path of `name`, or a panic saying what to install.
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{name} is needed for this case: apt-get install {name} (./test installs it)")
        })
}

/// GoAccess's summary of `log` read with `args`: (total, valid, failed).
fn goaccess(log: &Path, args: &[&str]) -> (u64, u64, u64) {
    let out = std::process::Command::new(which("goaccess"))
        .arg(log)
        .args(args)
        .args(["-o", "json", "--no-global-config"])
        .output()
        .expect("goaccess runs");
    assert!(
        out.status.success(),
        "goaccess failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("goaccess's JSON: {e}"));
    let g = &v["general"];
    let n = |k: &str| g[k].as_u64().unwrap_or_else(|| panic!("{k} in {g}"));
    (
        n("total_requests"),
        n("valid_requests"),
        n("failed_requests"),
    )
}

/// Requests of every kind a log holds: hits, misses, passes, errors,
/// absolute-form, odd bytes in the fields, a Basic user.
async fn mixed_traffic(t: &Test, format: &str) -> (PathBuf, u64) {
    let (origin, _) = noting(t, 4, "max-age=600", "body");
    let origin = origin.start().await;
    let log = t.dir().join(format!("{format}.log"));
    let proxy = proxy(t, &origin, &config("", "", Some((&log, format)))).await;
    let mut n = 0;
    for path in ["/a", "/a", "/b?q=1&r=%22x%22", "/a"] {
        t.client(&proxy)
            .get(path)
            .hdr(
                "User-Agent",
                "Mozilla/5.0 (X11; Linux x86_64) \"quoted\" \u{e9}",
            )
            .hdr("Referer", "https://ref.example/?a=b c")
            .send()
            .await
            .expect_status(200);
        n += 1;
    }
    t.client(&proxy)
        .head("/b?q=1&r=%22x%22")
        .send()
        .await
        .expect_status(200);
    n += 1;
    t.client(&proxy)
        .post("/form")
        .hdr("Referer", "")
        .hdr("Authorization", "Basic YW5uOnB3")
        .body("x=1")
        .send()
        .await
        .expect_status(200);
    n += 1;
    t.client(&proxy)
        .get("/c")
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await
        .expect_status(504);
    n += 1;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(
        b"GET http://localhost/d HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    conn.read_response().await.expect_status(200);
    n += 1;
    assert_eq!(lines(&proxy, &log, n).await.len() as u64, n);
    origin.finish().await;
    (log, n)
}

// r02020: GoAccess reads every line of a `combined` log as nginx's
// (`--log-format=COMBINED`): as many requests as lines, none failed.
#[tokio::test]
async fn r02020_goaccess_reads_every_combined_line() {
    let t = Test::new("r02020");
    let (log, n) = mixed_traffic(&t, "combined").await;
    assert_eq!(goaccess(&log, &["--log-format=COMBINED"]), (n, n, 0));
}

// r02021: GoAccess reads every line of a `hoard` log with the format the
// docs give for it (cache status and request time included).
#[tokio::test]
async fn r02021_goaccess_reads_every_hoard_line() {
    let t = Test::new("r02021");
    let (log, n) = mixed_traffic(&t, "hoard").await;
    let args = [
        "--log-format=%h %^ %e [%d:%t %^] \"%r\" %s %b \"%R\" \"%u\" %C %^ %T %^ \"%v\"",
        "--date-format=%d/%b/%Y",
        "--time-format=%T",
    ];
    assert_eq!(goaccess(&log, &args), (n, n, 0));
}
