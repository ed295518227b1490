//! l: HTTP/3 over QUIC on a TLS listener (`http3 = true`): advertised with
//! `Alt-Svc`, serving fills, hits and passes from the same cache.

use std::sync::Arc;

use bytes::{Buf, Bytes};
use hoard_testkit::{Endpoint, Test, TestProxy};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::h_tls::{fixture, tls_listener};

fn http3_listener(c: &mut hoard_config::Config) {
    tls_listener(c);
    c.listeners[0].http3 = true;
}

/// An HTTP/3 client connection to `proxy`, trusting the test CA.
/// Ends the request's sending side. A server that has all it needs of the
/// request may stop reading it (RFC 9114 §4.1.1): the client then finds
/// its side terminated, and its response still comes (a browser's FIN goes
/// with the headers, so it never sees this).
async fn finish_sending<S: h3::quic::SendStream<Bytes>>(
    stream: &mut h3::client::RequestStream<S, Bytes>,
) {
    match stream.finish().await {
        Ok(()) => {}
        Err(e) if format!("{e:?}").starts_with("RemoteTerminate") => {}
        Err(e) => panic!("ending the request: {e:?}"),
    }
}

pub(crate) struct H3Client {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    conn: quinn::Connection,
    _endpoint: quinn::Endpoint,
    /// The `:authority` of every request: the server name connected to.
    authority: String,
}

/// A response read whole over HTTP/3.
pub(crate) struct H3Response {
    pub(crate) head: http::response::Parts,
    pub(crate) body: Vec<u8>,
}

impl H3Client {
    async fn connect(proxy: &TestProxy) -> H3Client {
        Self::try_connect(proxy.endpoint(), &std::fs::read(fixture("ca.pem")).unwrap())
            .await
            .expect("a QUIC connection")
    }

    /// A connection to `addr` trusting the CA certificate `ca` (PEM).
    async fn try_connect(addr: std::net::SocketAddr, ca: &[u8]) -> Result<H3Client, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca).unwrap())
            .unwrap();
        Self::connect_as(addr, "localhost", roots).await
    }

    /// A connection to `addr` for server name `name`, trusting `roots`.
    pub(crate) async fn connect_as(
        addr: std::net::SocketAddr,
        name: &str,
        roots: rustls::RootCertStore,
    ) -> Result<H3Client, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        let conn = endpoint
            .connect(addr, name)
            .unwrap()
            .await
            .map_err(|e| e.to_string())?;
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(H3Client {
            send,
            conn,
            _endpoint: endpoint,
            authority: name.to_owned(),
        })
    }

    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> H3Response {
        self.request_with(method, path, &[], body).await
    }

    async fn request_with(
        &mut self,
        method: &str,
        path: &str,
        fields: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> H3Response {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority));
        for (n, v) in fields {
            req = req.header(*n, *v);
        }
        if let Some(b) = body {
            req = req.header("content-length", b.len().to_string());
        }
        let mut stream = self.send.send_request(req.body(()).unwrap()).await.unwrap();
        if let Some(b) = body {
            stream.send_data(Bytes::copy_from_slice(b)).await.unwrap();
        }
        finish_sending(&mut stream).await;
        let resp = stream.recv_response().await.expect("a response");
        let mut out = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.unwrap() {
            out.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
        H3Response {
            head: resp.into_parts().0,
            body: out,
        }
    }
}

impl H3Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

// l00001: a TLS listener with `http3 = true` advertises HTTP/3 in
// `Alt-Svc` over TCP; over QUIC a fill, then hits of it (for the same and
// a new connection), a pass with a request body, all from one cache.
#[tokio::test]
async fn l00001_http3_serves_fills_hits_and_passes() {
    let t = Test::new("l00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/page");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Type", "image/png")
                .body(vec![7u8; 100_000])
                .send()
                .await;
            let r = s.rxreq().await;
            r.expect_url("/form").expect_method("POST");
            assert_eq!(r.body(), b"a=1&b=2");
            s.txresp(200).body("posted").send().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(http3_listener)
        .start()
        .await;
    let mut c = H3Client::connect(&proxy).await;
    let r = c.request("GET", "/page", None).await;
    assert_eq!(r.head.status, 200);
    assert_eq!(r.head.version, http::Version::HTTP_3);
    assert_eq!(r.body, vec![7u8; 100_000]);
    proxy.wait_counter("objects_stored", 1).await;
    let r = c.request("GET", "/page", None).await;
    assert!(
        r.header("cache-status").unwrap().contains("hit"),
        "{:?}",
        r.head
    );
    assert_eq!(r.body.len(), 100_000);
    let mut c2 = H3Client::connect(&proxy).await;
    let r = c2.request("GET", "/page", None).await;
    assert!(r.header("cache-status").unwrap().contains("hit"));
    let r = c2.request("POST", "/form", Some(b"a=1&b=2")).await;
    assert_eq!(r.body, b"posted");
    assert_eq!(proxy.counter("quic_connections"), 2);
    // Over TCP (TLS), the same port is advertised for HTTP/3.
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = super::h_tls::connector(&[b"http/1.1"])
        .connect(
            rustls_pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = send
        .send_request(
            http::Request::get("/page")
                .header("host", "localhost")
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["alt-svc"],
        format!("h3=\":{}\"; ma=86400", proxy.endpoint().port()).as_str()
    );
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

// l00002: over HTTP/3 as over HTTP/2: concurrent misses of one key on one
// connection are one origin request (the others wait for it and stream
// it); a range of the stored object; `PURGE`; the access log and
// `/status` name the protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l00002_collapsed_waiters_ranges_and_purge_over_http3() {
    let t = Test::new("l00002");
    let release = hoard_testkit::Barrier::new(2);
    let origin = {
        let release = release.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/cold");
                release.sync().await;
                s.txresp_fresh(600, "0123456789abcdefghij").await;
                s.serve_fresh("/cold", 600, "after the purge").await;
            })
            .start()
            .await
    };
    let log = t.dir().join("access.log");
    let proxy = {
        let log = log.clone();
        t.proxy()
            .origin(&origin)
            .admin()
            .config(move |c| {
                http3_listener(c);
                c.access_log.target = hoard_config::LogTarget::File(log);
                c.admin.purge_allow = vec![hoard_config::Cidr::parse("127.0.0.1/32").unwrap()];
            })
            .start()
            .await
    };
    let c = H3Client::connect(&proxy).await;
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let mut c = H3Client {
            send: c.send.clone(),
            conn: c.conn.clone(),
            _endpoint: c._endpoint.clone(),
            authority: c.authority.clone(),
        };
        tasks.push(tokio::spawn(async move {
            c.request("GET", "/cold", None).await
        }));
    }
    proxy.wait_counter("fill_waiters_total", 4).await;
    release.sync().await;
    for task in tasks {
        let r = task.await.unwrap();
        assert_eq!(r.head.status, 200);
        assert_eq!(r.body, b"0123456789abcdefghij");
    }
    let mut c = c;
    let r = c
        .request_with("GET", "/cold", &[("range", "bytes=10-14")], None)
        .await;
    assert_eq!(r.head.status, 206);
    assert_eq!(r.body, b"abcde");
    let r = c.request("PURGE", "/cold", None).await;
    assert_eq!(r.head.status, 200, "{:?}", r.head);
    let r = c.request("GET", "/cold", None).await;
    assert_eq!(r.body, b"after the purge");
    assert_eq!(origin.requests(), 2);
    proxy.wait_counter("access_log_lines", 8).await;
    let text = std::fs::read_to_string(&log).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["protocol"], "HTTP/3.0", "{line}");
    }
    let st = t.client(proxy.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    assert_eq!(
        v["connections"]["quic"]["accepted"], 1,
        "{}",
        v["connections"]
    );
    assert_eq!(v["connections"]["quic"]["open"], 1);
    assert_eq!(v["connections"]["requests"]["http3"], 8);
    origin.finish().await;
}

// l00003: QUIC connections take the same permits as TCP ones (with
// `max_connections = 1` a second is refused while the first is open), and
// one left idle past `keep_alive_timeout` is closed by hoard.
#[tokio::test]
async fn l00003_connection_cap_and_idle_close() {
    let t = Test::new("l00003");
    let origin = t.origin().script_fresh("/a", 600, "a").start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            http3_listener(c);
            c.server.max_connections = 1;
            c.server.keep_alive_timeout = std::time::Duration::from_millis(300);
        })
        .start()
        .await;
    let mut first = H3Client::connect(&proxy).await;
    assert_eq!(first.request("GET", "/a", None).await.body, b"a");
    let ca = std::fs::read(fixture("ca.pem")).unwrap();
    let second = H3Client::try_connect(proxy.endpoint(), &ca).await;
    assert!(second.is_err(), "a second connection past the cap");
    proxy.expect_counter("connections_refused", 1);
    // Idle: hoard closes it (the client sees the connection end).
    let closed = first.conn.closed().await;
    assert!(
        matches!(closed, quinn::ConnectionError::TimedOut),
        "{closed:?}"
    );
    proxy.wait_counter("quic_connections_closed", 1).await;
    // Its permit is back: a new connection is served.
    let mut third = H3Client::connect(&proxy).await;
    assert_eq!(third.request("GET", "/a", None).await.body, b"a");
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// l00004: a reload renews the certificate of the running QUIC endpoint:
// new connections get the new one, a connection opened before goes on.
#[tokio::test]
async fn l00004_reload_renews_the_quic_certificate() {
    let t = Test::new("l00004");
    let (old_ca, new_ca) = (
        hoard_testkit::pki::TestCa::new(),
        hoard_testkit::pki::TestCa::new(),
    );
    let (cert, key) = old_ca.issue(&["localhost"]).write(t.dir(), "server");
    let origin = t.origin().script_fresh("/r", 600, "r").start().await;
    let toml = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\nhttp3 = true\ntls = {{ cert = {:?}, key = {:?} }}\n\
         [upstream.app]\nservers = [\"http://{{origin}}\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &toml).start().await;
    let mut before = H3Client::try_connect(proxy.endpoint(), old_ca.pem().as_bytes())
        .await
        .unwrap();
    assert_eq!(before.request("GET", "/r", None).await.body, b"r");
    new_ca.issue(&["localhost"]).write(t.dir(), "server");
    proxy
        .reload_toml(&origin, &toml)
        .expect("valid configuration");
    let e = H3Client::try_connect(proxy.endpoint(), old_ca.pem().as_bytes())
        .await
        .err()
        .expect("the old certificate is gone");
    assert!(
        e.contains("certificate") || e.contains("Certificate"),
        "{e}"
    );
    let mut after = H3Client::try_connect(proxy.endpoint(), new_ca.pem().as_bytes())
        .await
        .unwrap();
    assert_eq!(after.request("GET", "/r", None).await.body, b"r");
    assert_eq!(before.request("GET", "/r", None).await.body, b"r");
    // Turning HTTP/3 off (or on) for a listener that stays waits for a
    // restart, and says so.
    let r = proxy
        .reload_toml(&origin, &toml.replace("http3 = true\n", ""))
        .expect("valid configuration");
    assert!(r.restart_needed.contains(&"listener.http3"), "{r:?}");
    assert_eq!(after.request("GET", "/r", None).await.body, b"r");
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// l00005: headless Chromium loads a page and its stylesheet through hoard
// over HTTP/3 (QUIC forced for the origin, the test certificate's key
// pinned); hoard's access log shows both requests came over HTTP/3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l00005_chromium_loads_a_page_over_http3() {
    use base64::Engine as _;
    let t = Test::new("l00005");
    let chromium = crate::admin::which("chromium")
        .expect("chromium is needed for this case: apt-get install chromium (.ci/run installs it)");
    let ca = hoard_testkit::pki::TestCa::new();
    let issued = ca.issue_valid(&["localhost"], (2025, 2027));
    let (cert, key) = issued.write(t.dir(), "server");
    let spki = ring::digest::digest(&ring::digest::SHA256, &issued.spki);
    let pin = base64::engine::general_purpose::STANDARD.encode(spki.as_ref());
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                let r = s.rxreq().await;
                let (ctype, body) = match r.url() {
                    "/page" => (
                        "text/html",
                        "<html><head><link rel=\"icon\" href=\"data:,\">\
                         <link rel=\"stylesheet\" href=\"/style.css\"></head>\
                         <body><p id=\"x\">served over h3</p></body></html>",
                    ),
                    "/style.css" => ("text/css", "p { color: green; }"),
                    other => panic!("unexpected {other}"),
                };
                s.txresp(200)
                    .hdr("Content-Type", ctype)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let log = t.dir().join("access.log");
    let proxy = {
        let log = log.clone();
        t.proxy()
            .origin(&origin)
            .config(move |c| {
                c.listeners[0].tls = Some(hoard_config::TlsConfig { cert, key });
                c.listeners[0].http3 = true;
                c.access_log.target = hoard_config::LogTarget::File(log);
            })
            .start()
            .await
    };
    let port = proxy.endpoint().port();
    let profile = tempfile::tempdir_in(t.dir()).unwrap();
    let mut cmd = std::process::Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-quic",
        "--host-resolver-rules=MAP localhost 127.0.0.1",
        "--virtual-time-budget=3000",
        "--dump-dom",
    ])
    .arg(format!("--origin-to-force-quic-on=localhost:{port}"))
    .arg(format!("--ignore-certificate-errors-spki-list={pin}"))
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("https://localhost:{port}/page"))
    .env("HOME", profile.path())
    .env("XDG_CONFIG_HOME", profile.path());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("served over h3"),
        "the page did not load:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    proxy.wait_counter("access_log_lines", 2).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let mut paths = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["protocol"], "HTTP/3.0", "{line}");
        paths.push(v["path"].as_str().unwrap().to_string());
    }
    assert!(paths.contains(&"/page".to_string()), "{paths:?}");
    assert!(paths.contains(&"/style.css".to_string()), "{paths:?}");
    assert_eq!(
        proxy.counter("requests_http1") + proxy.counter("requests_http2"),
        0
    );
    origin.finish().await;
}

// l00006: over HTTP/3 a fill's first bytes reach the client before the
// origin has sent the rest (read-while-write), and a stale object is
// served at once under `stale-while-revalidate` while one background
// refresh runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l00006_read_while_write_and_stale_while_revalidate_over_http3() {
    let t = Test::new("l00006");
    let (first_seen, release) = (
        hoard_testkit::Barrier::new(2),
        hoard_testkit::Barrier::new(2),
    );
    let origin = {
        let (first_seen, release) = (first_seen.clone(), release.clone());
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/s");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=2, stale-while-revalidate=60")
                    .hdr("ETag", "\"1\"")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("first;").await;
                // The client has the first bytes while the fill goes on.
                first_seen.sync().await;
                s.chunk("rest").await;
                s.end().await;
                s.rxreq().await.expect_url("/s");
                release.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=2, stale-while-revalidate=60")
                    .hdr("ETag", "\"2\"")
                    .body("v2")
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(http3_listener)
        .start()
        .await;
    let mut c = H3Client::connect(&proxy).await;
    let req = http::Request::get("https://localhost/s").body(()).unwrap();
    let mut stream = c.send.send_request(req).await.unwrap();
    finish_sending(&mut stream).await;
    let resp = stream.recv_response().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut got = Vec::new();
    while got.len() < 6 {
        let mut chunk = stream.recv_data().await.unwrap().expect("the first bytes");
        got.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(got, b"first;", "before the origin sent the rest");
    first_seen.sync().await;
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        got.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(got, b"first;rest");
    proxy.wait_counter("objects_stored", 1).await;
    t.clock.advance(super::secs(3));
    for _ in 0..3 {
        let r = c.request("GET", "/s", None).await;
        assert_eq!(r.body, b"first;rest");
        let cs = r.header("cache-status").unwrap();
        assert!(cs.contains("detail=stale-while-revalidate"), "{cs}");
    }
    proxy.expect_counter("background_refreshes", 1);
    release.sync().await;
    proxy.wait_counter("objects_stored", 2).await;
    assert_eq!(c.request("GET", "/s", None).await.body, b"v2");
    origin.finish().await;
}

// l00007: trailer fields the origin sends after a passed body reach an
// HTTP/3 client as HTTP/3 trailers.
#[tokio::test]
async fn l00007_origin_trailers_reach_an_http3_client() {
    let t = Test::new("l00007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/t");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .hdr("Trailer", "x-checksum")
                .chunked()
                .send_head()
                .await;
            s.chunk("payload").await;
            s.end_with_trailers(&[("x-checksum", "c0ffee")]).await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(http3_listener)
        .start()
        .await;
    let mut c = H3Client::connect(&proxy).await;
    let req = http::Request::get("https://localhost/t")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut stream = c.send.send_request(req).await.unwrap();
    finish_sending(&mut stream).await;
    assert_eq!(stream.recv_response().await.unwrap().status(), 200);
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(body, b"payload");
    let trailers = stream.recv_trailers().await.unwrap().expect("trailers");
    assert_eq!(trailers["x-checksum"], "c0ffee");
    origin.finish().await;
}

// l00008: a QUIC connection may have `http3_max_streams` request streams
// open at once (default 100, RFC 9114 §6.1's floor; HTTP/2's limit is
// `http2_max_streams`): the client can open that many bidirectional
// streams and not one more, and requests are served under a low limit.
#[tokio::test]
async fn l00008_request_streams_per_connection_are_http3_max_streams() {
    use futures_util::FutureExt;
    let t = Test::new("l00008");
    let origin = t.origin().script_fresh("/s", 600, "sss").start().await;
    for (limit, config) in [(100u64, None), (3, Some(3u32))] {
        let proxy = t
            .proxy()
            .origin(&origin)
            .config(move |c| {
                http3_listener(c);
                if let Some(n) = config {
                    c.server.http3_max_streams = n;
                }
            })
            .start()
            .await;
        let client = H3Client::connect(&proxy).await;
        let mut open = Vec::new();
        for i in 0..limit {
            let s = client
                .conn
                .open_bi()
                .now_or_never()
                .unwrap_or_else(|| panic!("stream {i} of {limit} could not be opened"))
                .unwrap();
            open.push(s);
        }
        assert!(
            client.conn.open_bi().now_or_never().is_none(),
            "stream {limit} waits for the server's credit"
        );
        if config.is_some() {
            let mut other = H3Client::connect(&proxy).await;
            let r = other.request("GET", "/s", None).await;
            assert_eq!(r.head.status, 200);
            assert_eq!(r.body, b"sss");
        }
    }
    origin.finish().await;
}

// l00009: QPACK string literals (Huffman-coded, RFC 9204 §4.1.2) carry
// every octet a field value may hold, both ways: a request field of every
// visible ASCII character, space and tab, and a 6 KiB one, reach the origin
// unchanged; the origin's response fields of the same octets reach the
// client unchanged on the fill and on the hit; so does a target of every
// character a path and query may hold.
#[tokio::test]
async fn l00009_field_values_of_every_octet_cross_http3_unchanged() {
    let visible: String = (0x21u8..=0x7e).map(char::from).collect();
    let spaced = format!("a {visible}\tz");
    let long: String = (0..6 * 1024)
        .map(|i| char::from(0x21 + (i * 7 % 94) as u8))
        .collect();
    let path = "/p/AZaz09-._~!$&'()*+,;=:@%2F?q=AZaz09-._~!$&'()*+,;=:@/?%20";
    let t = Test::new("l00009");
    let origin = t
        .origin()
        .script({
            let (spaced, long) = (spaced.clone(), long.clone());
            move |mut s| async move {
                let r = s.rxreq().await;
                r.expect_url(path)
                    .expect_header("x-spaced", &spaced)
                    .expect_header("x-long", &long);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("X-Spaced", &spaced)
                    .hdr("X-Long", &long)
                    .body("fields")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(http3_listener)
        .start()
        .await;
    let mut c = H3Client::connect(&proxy).await;
    let fields = [("x-spaced", spaced.as_str()), ("x-long", long.as_str())];
    for round in ["fill", "hit"] {
        let r = c.request_with("GET", path, &fields, None).await;
        assert_eq!(r.head.status, 200, "{round}");
        assert_eq!(r.header("x-spaced"), Some(spaced.as_str()), "{round}");
        assert_eq!(r.header("x-long"), Some(long.as_str()), "{round}");
        assert_eq!(r.body, b"fields", "{round}");
        if round == "fill" {
            proxy.wait_counter("objects_stored", 1).await;
        } else {
            assert!(r.header("cache-status").unwrap().contains("hit"));
        }
    }
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// l00010: slices over HTTP/3 (the same pipeline as over TCP): a cold range
// fetches its one slice and is answered 206 with its bytes; a whole GET
// fetches the other slices and streams the object in order; a range inside
// stored slices is a hit; every slice reaches the origin once.
#[tokio::test]
async fn l00010_slices_over_http3() {
    use super::r_range::{body, LEN};
    use super::s_slice::{serve, starts, ETAG, SIZE};
    let t = Test::new("l00010");
    let full = body(LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = body(LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[1])).await;
            serve(&mut s, "/v", &full, ETAG, starts(&[0, 2, 3, 4])).await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(http3_listener)
        .route(|r| r.slice = Some(SIZE))
        .start()
        .await;
    let mut c = H3Client::connect(&proxy).await;
    let r = c
        .request_with("GET", "/v", &[("range", "bytes=70000-70099")], None)
        .await;
    assert_eq!(r.head.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 70000-70099/{LEN}").as_str())
    );
    assert_eq!(r.body, &full[70_000..70_100]);
    proxy.wait_counter("objects_stored", 1).await;
    let r = c.request("GET", "/v", None).await;
    assert_eq!(r.head.status, 200);
    assert!(r.body == full, "the whole object, in order");
    proxy.wait_counter("objects_stored", 5).await;
    let r = c
        .request_with("GET", "/v", &[("range", "bytes=200000-200009")], None)
        .await;
    assert_eq!(r.head.status, 206);
    assert!(r.header("cache-status").unwrap().contains("hit"));
    assert_eq!(r.body, &full[200_000..200_010]);
    assert_eq!(origin.requests(), 5);
    proxy.expect_counter("slice_fills", 5);
    origin.finish().await;
}
