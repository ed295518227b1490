//! r (failover): a request that cannot be served by one server of an
//! upstream goes on to the next (`retry_on`, `tries`), backup servers serve
//! only while the others are down or failed, a request that may have been
//! processed is never sent twice unless its method is idempotent, and a
//! server string with words after the URL is refused at check time.

use hoard_config::{Config, LogTarget, ServerAddr};
use hoard_origin::failover::RetryOn;
use hoard_testkit::{Endpoint, Origin, Test};

/// A port nothing listens on: bound, then closed (connections are refused).
fn dead() -> ServerAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    ServerAddr::http(format!("127.0.0.1:{port}"))
}

fn at(origin: &Origin) -> ServerAddr {
    ServerAddr::http(origin.addr().to_string())
}

/// An origin that answers `n` requests with 200 and `body`, uncacheable.
fn answers(t: &Test, n: usize, body: &'static str) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for _ in 0..n {
            s.rxreq().await;
            s.txresp_no_store(body).await;
        }
    })
}

/// An origin that reads `n` requests of `method` and drops each connection
/// without an answer (the request reached it and may have been processed).
fn resets(t: &Test, n: usize, method: &'static str) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for _ in 0..n {
            s.rxreq().await.expect_method(method);
            s.close().await;
        }
    })
}

fn logged(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// r01001: one dead server and one live one: 40 sequential requests, no
// error; the live origin sees exactly 40. The dead server is tried until
// health marks it down (3 failures), each time followed by the live one,
// and the access log says how many servers each request was tried on.
#[tokio::test]
async fn r01001_a_dead_server_costs_no_errors() {
    let t = Test::new("r01001");
    let live = answers(&t, 40, "live").start().await;
    let log = t.dir().join("access.log");
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![dead(), at(&live)])
        .config(|c| c.access_log.target = LogTarget::File(log.clone()))
        .start()
        .await;
    for i in 0..40 {
        t.client(&proxy)
            .get(&format!("/{i}"))
            .send()
            .await
            .expect_status(200)
            .expect_body("live");
    }
    assert_eq!(live.requests(), 40);
    proxy
        .expect_counter("origin_connect_errors", 3)
        .expect_counter("origin_failovers", 3)
        .expect_counter("origin_requests", 43);
    proxy.wait_counter("access_log_lines", 40).await;
    let lines = logged(&std::fs::read_to_string(&log).unwrap());
    let tries: Vec<u64> = lines
        .iter()
        .map(|l| l["upstream_tries"].as_u64().unwrap())
        .collect();
    // Round-robin: every other request starts at the dead server.
    assert_eq!(&tries[..6], [2, 1, 2, 1, 2, 1]);
    assert!(tries[6..].iter().all(|&n| n == 1), "{tries:?}");
    live.finish().await;
}

// r01002: a backup server serves nothing while a server of `servers`
// answers (even with another one dead), and everything while every one
// of `servers` is down: first after each failed try, then, once health
// marks the primary down, directly.
#[tokio::test]
async fn r01002_backup_only_when_the_servers_are_down() {
    let t = Test::new("r01002");
    let primary = answers(&t, 10, "primary").start().await;
    let unused = t.origin().start().await; // any request is unexpected
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![dead(), at(&primary)];
            u.backup = vec![at(&unused)];
        })
        .start()
        .await;
    for i in 0..10 {
        t.client(&proxy)
            .get(&format!("/{i}"))
            .send()
            .await
            .expect_body("primary");
    }
    assert_eq!((primary.requests(), unused.requests()), (10, 0));

    let backup = answers(&t, 6, "backup").start().await;
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![dead()];
            u.backup = vec![at(&backup)];
        })
        .start()
        .await;
    for i in 0..6 {
        t.client(&proxy)
            .get(&format!("/{i}"))
            .send()
            .await
            .expect_status(200)
            .expect_body("backup");
    }
    assert_eq!(backup.requests(), 6);
    // Three refusals mark the primary down; then the backup goes first.
    proxy
        .expect_counter("origin_connect_errors", 3)
        .expect_counter("origin_failovers", 3);
    primary.finish().await;
    unused.finish().await;
    backup.finish().await;
}

// r01003: a POST that reached a server which then dropped the connection
// is not sent again (it may have been processed; RFC 9110 §9.2.2): 502,
// and the next server sees nothing. A GET in the same spot goes on. A POST
// whose server refused the connection goes on, its body whole.
#[tokio::test]
async fn r01003_post_goes_on_only_when_it_never_reached_a_server() {
    let t = Test::new("r01003");
    let reset = resets(&t, 1, "POST").start().await;
    let unused = t.origin().start().await;
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![at(&reset), at(&unused)])
        .start()
        .await;
    t.client(&proxy)
        .post("/order")
        .body("one order")
        .send()
        .await
        .expect_status(502);
    proxy.expect_counter("origin_failovers", 0);

    let reset_get = resets(&t, 1, "GET").start().await;
    let next = answers(&t, 1, "next").start().await;
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![at(&reset_get), at(&next)])
        .start()
        .await;
    t.client(&proxy)
        .get("/page")
        .send()
        .await
        .expect_status(200)
        .expect_body("next");
    proxy.expect_counter("origin_failovers", 1);

    let taker = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_method("POST").expect_body("one order");
            s.txresp(201).body("taken").send().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![dead(), at(&taker)])
        .start()
        .await;
    t.client(&proxy)
        .post("/order")
        .body("one order")
        .send()
        .await
        .expect_status(201)
        .expect_body("taken");
    proxy
        .expect_counter("origin_connect_errors", 1)
        .expect_counter("origin_failovers", 1);
    for o in [reset, unused, reset_get, next, taker] {
        o.finish().await;
    }
}

// r01004: with `retry_on = ["error", "503"]`, a GET answered 503 goes on
// to the next server; a POST answered 503 does not (the client gets the
// 503). Without "503" in `retry_on`, a GET's 503 is passed on as it is.
#[tokio::test]
async fn r01004_retry_on_503_for_get_not_for_post() {
    let t = Test::new("r01004");
    let busy = t
        .origin()
        .script(|mut s| async move {
            for method in ["GET", "POST", "GET"] {
                s.rxreq().await.expect_method(method);
                s.txresp(503).body("busy").send().await;
            }
        })
        .start()
        .await;
    let next = answers(&t, 1, "next").start().await;
    let on_503 = RetryOn::DEFAULT.with("503").unwrap();
    let start = |retry_on| {
        t.proxy()
            .upstream(|u| {
                u.servers = vec![at(&busy), at(&next)];
                u.retry_on = retry_on;
            })
            .start()
    };
    let proxy = start(on_503).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_status(200)
        .expect_body("next");
    proxy.expect_counter("origin_failovers", 1);
    let proxy = start(on_503).await;
    t.client(&proxy)
        .post("/b")
        .body("x")
        .send()
        .await
        .expect_status(503)
        .expect_body("busy");
    proxy.expect_counter("origin_failovers", 0);
    let proxy = start(RetryOn::DEFAULT).await;
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_status(503)
        .expect_body("busy");
    proxy.expect_counter("origin_failovers", 0);
    busy.finish().await;
    next.finish().await;
}

// r01005: on the last try, an answer with a retryable status goes to the
// client as it came (not turned into a 502).
#[tokio::test]
async fn r01005_the_last_answer_is_passed_on() {
    let t = Test::new("r01005");
    let busy = |body: &'static str| {
        t.origin().script(move |mut s| async move {
            s.rxreq().await;
            s.txresp(503)
                .hdr("Retry-After", "5")
                .body(body)
                .send()
                .await;
        })
    };
    let (a, b) = (busy("a").start().await, busy("b").start().await);
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![at(&a), at(&b)];
            u.retry_on = RetryOn::DEFAULT.with("503").unwrap();
        })
        .start()
        .await;
    t.client(&proxy)
        .get("/")
        .send()
        .await
        .expect_status(503)
        .expect_header("retry-after", "5")
        .expect_body("b");
    proxy.expect_counter("origin_failovers", 1);
    a.finish().await;
    b.finish().await;
}

// r01006: `tries` bounds the servers a request is tried on: with two dead
// servers before a live one, `tries = 2` answers 502 and the live origin
// sees nothing; `tries = 3` reaches it.
#[tokio::test]
async fn r01006_tries_bounds_the_attempts() {
    let t = Test::new("r01006");
    let live = answers(&t, 1, "live").start().await;
    let start = |tries| {
        t.proxy()
            .upstream(|u| {
                u.servers = vec![dead(), dead(), at(&live)];
                u.tries = Some(tries);
            })
            .start()
    };
    let proxy = start(2).await;
    t.client(&proxy).get("/").send().await.expect_status(502);
    proxy
        .expect_counter("origin_connect_errors", 2)
        .expect_counter("origin_failovers", 1);
    assert_eq!(live.requests(), 0);
    let proxy = start(3).await;
    t.client(&proxy)
        .get("/")
        .send()
        .await
        .expect_status(200)
        .expect_body("live");
    proxy.expect_counter("origin_failovers", 2);
    live.finish().await;
}

// r01007: nginx's `server ... backup` habit written into a server string is
// refused at check time, naming the key and its line, instead of failing
// every request with a DNS error.
#[tokio::test]
async fn r01007_a_server_with_trailing_words_is_refused() {
    let e = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\n  \"http://127.0.0.1:8080\",\n  \"http://127.0.0.1:1 backup\",\n]\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "upstream.app.servers[1]"),
        "{e}"
    );
    assert!(e.message.contains("backup = [...]"), "{e}");
    assert!(
        e.to_string().starts_with("config error: hoard.toml:4:"),
        "{e}"
    );
    let e = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"http://a:1\"]\nretry_on = [\"error\", \"http_503\"]\ntries = 2\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(3), "upstream.app.retry_on[1]"),
        "{e}"
    );
}

// r01008: an upgrade (WebSocket) whose first server refuses the connection
// goes to the next one.
#[tokio::test]
async fn r01008_an_upgrade_goes_on_after_a_refused_connect() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let t = Test::new("r01008");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        let msg = ws.next().await.unwrap().unwrap();
        ws.send(msg).await.unwrap();
    });
    let proxy = t
        .proxy()
        .upstream(|u| u.servers = vec![dead(), ServerAddr::http(addr.to_string())])
        .start()
        .await;
    let stream = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async("ws://localhost/chat", stream)
        .await
        .expect("the upgrade goes through");
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
    echo.await.unwrap();
    proxy
        .expect_counter("origin_connect_errors", 1)
        .expect_counter("origin_failovers", 1);
}

// r01009: a server that takes the request and answers nothing within
// `read_timeout`: with "timeout" in `retry_on` a GET goes on to the next
// server; without it (the default) the client gets the 504.
#[tokio::test]
async fn r01009_retry_on_timeout() {
    let t = Test::new("r01009");
    let answered = t.barrier(2);
    let slow = t
        .origin()
        .script({
            let answered = answered.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/a");
                s.rxreq().await.expect_url("/b");
                answered.sync().await; // hold both until the client saw its 504
            }
        })
        .start()
        .await;
    let next = answers(&t, 1, "next").start().await;
    let start = |retry_on| {
        t.proxy()
            .upstream(|u| {
                u.servers = vec![at(&slow), at(&next)];
                u.read_timeout = std::time::Duration::from_millis(200);
                u.retry_on = retry_on;
            })
            .start()
    };
    let proxy = start(RetryOn::DEFAULT.with("timeout").unwrap()).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_status(200)
        .expect_body("next");
    proxy
        .expect_counter("origin_timeouts", 1)
        .expect_counter("origin_failovers", 1);
    let proxy = start(RetryOn::DEFAULT).await;
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_status(504)
        .expect_cache_status("detail=read-timeout");
    proxy.expect_counter("origin_failovers", 0);
    answered.sync().await;
    slow.finish().await;
    next.finish().await;
}

// r01010: a server whose TLS handshake fails (a certificate nobody
// trusts) is passed over for the next one, whatever the method: the
// request never left.
#[tokio::test]
async fn r01010_a_failed_tls_handshake_goes_on() {
    use hoard_testkit::pki::TestCa;
    let t = Test::new("r01010");
    let (trusted, stranger) = (TestCa::new(), TestCa::new());
    let impostor = t
        .origin()
        .tls(stranger.server_config(&stranger.issue(&["127.0.0.1"]), false))
        .start()
        .await;
    let good = t
        .origin()
        .tls(trusted.server_config(&trusted.issue(&["127.0.0.1"]), false))
        .script(|mut s| async move {
            s.rxreq().await.expect_method("POST").expect_body("payload");
            s.txresp(200).body("secure").send().await;
        })
        .start()
        .await;
    let ca = t.dir().join("ca.pem");
    trusted.write(&ca);
    let tls = hoard_config::origin_tls::build(&hoard_config::origin_tls::TlsSettings {
        ca: Some(ca),
        ..hoard_config::origin_tls::TlsSettings::verified()
    })
    .unwrap();
    let https = |o: &Origin| ServerAddr {
        authority: o.addr().to_string(),
        tls: true,
        host: "127.0.0.1".into(),
    };
    let proxy = t
        .proxy()
        .upstream(|u| {
            u.servers = vec![https(&impostor), https(&good)];
            u.tls = Some(tls);
        })
        .start()
        .await;
    t.client(&proxy)
        .post("/p")
        .body("payload")
        .send()
        .await
        .expect_status(200)
        .expect_body("secure");
    proxy
        .expect_counter("origin_tls_errors", 1)
        .expect_counter("origin_failovers", 1);
    impostor.finish().await;
    good.finish().await;
}
