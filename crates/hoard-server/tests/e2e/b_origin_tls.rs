//! b (origins over HTTPS): verified against the system's roots or a
//! private CA, named by SNI, client certificates, sessions resumed, and
//! every failure a 502 that says why (never plaintext instead).
//! Certificates are made in the test (`hoard_testkit::pki`).

use std::path::PathBuf;

use hoard_config::origin_tls::TlsSettings;
use hoard_testkit::pki::{Issued, TestCa};
use hoard_testkit::{Origin, Test, TestProxy};

/// An origin over TLS presenting `cert` (signed by `ca`), answering each
/// of `paths` once with a cacheable body naming it.
async fn tls_origin(
    t: &Test,
    ca: &TestCa,
    cert: &Issued,
    client_auth: bool,
    paths: &'static [&'static str],
) -> Origin {
    t.origin()
        .tls(ca.server_config(cert, client_auth))
        .script(move |mut s| async move {
            for p in paths {
                s.serve_fresh(p, 600, format!("secure {p}")).await;
            }
        })
        .start()
        .await
}

/// `ca`'s certificate as a file of the test.
fn ca_file(t: &Test, ca: &TestCa) -> PathBuf {
    let path = t.dir().join("ca.pem");
    ca.write(&path);
    path
}

fn trusting(path: PathBuf) -> TlsSettings {
    TlsSettings {
        ca: Some(path),
        ..TlsSettings::verified()
    }
}

/// A configuration file with one https:// upstream trusting `ca_path`.
fn tls_toml(ca_path: &std::path::Path) -> String {
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["https://{{origin}}"]
tls = {{ ca = "{}" }}
"#,
        ca_path.display()
    )
}

/// A proxy whose upstream is `https://ADDR` (a socket of the test's own,
/// not a test kit origin), trusting `ca`; `adjust` changes the rest.
async fn raw_tls_proxy(
    t: &Test,
    addr: std::net::SocketAddr,
    ca: &TestCa,
    adjust: impl FnOnce(&mut hoard_config::UpstreamConfig),
) -> TestProxy {
    let tls = hoard_config::origin_tls::build(&trusting(ca_file(t, ca))).unwrap();
    t.proxy()
        .upstream(|u| {
            u.servers = vec![hoard_config::ServerAddr {
                authority: addr.to_string(),
                tls: true,
                host: "127.0.0.1".into(),
            }];
            u.tls = Some(tls);
            adjust(u);
        })
        .start()
        .await
}

async fn proxy(t: &Test, origin: &Origin, settings: TlsSettings) -> TestProxy {
    t.proxy().https_origin(origin, settings).start().await
}

/// A request answered 502 with `Cache-Status` naming `why`; the origin
/// saw no request.
async fn refused(t: &Test, proxy: &TestProxy, why: &str) {
    t.client(proxy)
        .get("/x")
        .send()
        .await
        .expect_status(502)
        .expect_cache_status(&format!("detail={why}"));
    proxy.expect_counter("origin_tls_errors", 1);
}

// b00070: an https:// origin with a certificate from a private CA (`ca`):
// the response is fetched over TLS, stored, and the next request is a hit;
// the next miss reuses the pooled connection (one handshake in all).
#[tokio::test]
async fn b00070_an_https_origin_is_verified_and_cached() {
    let t = Test::new("b00070");
    let ca = TestCa::new();
    let origin = tls_origin(&t, &ca, &ca.issue(&["127.0.0.1"]), false, &["/a", "/b"]).await;
    let proxy = proxy(&t, &origin, trusting(ca_file(&t, &ca))).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("fwd=uri-miss; stored")
        .expect_body("secure /a");
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body("secure /a");
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body("secure /b");
    assert_eq!(origin.tls_handshakes(), (1, 0));
    assert_eq!(origin.connections(), 1, "pooled");
    proxy
        .expect_counter("origin_tls_handshakes", 1)
        .expect_counter("origin_connections_reused", 1);
    origin.finish().await;
}

// b00071: a certificate no trusted root signs: 502, `tls-untrusted`.
#[tokio::test]
async fn b00071_an_untrusted_certificate_is_refused() {
    let t = Test::new("b00071");
    let ca = TestCa::new();
    let origin = tls_origin(&t, &ca, &ca.issue(&["127.0.0.1"]), false, &[]).await;
    let proxy = proxy(&t, &origin, TlsSettings::verified()).await;
    refused(&t, &proxy, "tls-untrusted").await;
    origin.finish().await;
}

// b00072: a certificate for another name: 502, `tls-name`.
#[tokio::test]
async fn b00072_a_certificate_for_another_name_is_refused() {
    let t = Test::new("b00072");
    let ca = TestCa::new();
    let origin = tls_origin(&t, &ca, &ca.issue(&["other.test"]), false, &[]).await;
    let proxy = proxy(&t, &origin, trusting(ca_file(&t, &ca))).await;
    refused(&t, &proxy, "tls-name").await;
    origin.finish().await;
}

// b00073: an expired certificate: 502, `tls-expired`.
#[tokio::test]
async fn b00073_an_expired_certificate_is_refused() {
    let t = Test::new("b00073");
    let ca = TestCa::new();
    let cert = ca.issue_valid(&["127.0.0.1"], (2001, 2002));
    let origin = tls_origin(&t, &ca, &cert, false, &[]).await;
    let proxy = proxy(&t, &origin, trusting(ca_file(&t, &ca))).await;
    refused(&t, &proxy, "tls-expired").await;
    origin.finish().await;
}

// b00074: `server_name` is what is sent as SNI and verified (an origin
// reached by address whose certificate names it otherwise); the Host
// header stays the client's.
#[tokio::test]
async fn b00074_server_name_is_sent_and_verified() {
    let t = Test::new("b00074");
    let ca = TestCa::new();
    let origin = t
        .origin()
        .tls(ca.server_config(&ca.issue(&["origin.test"]), false))
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/n")
                .expect_header("host", "www.example.com");
            s.txresp(200).body("named").send().await;
        })
        .start()
        .await;
    let settings = TlsSettings {
        server_name: Some("origin.test".into()),
        ..trusting(ca_file(&t, &ca))
    };
    let proxy = proxy(&t, &origin, settings).await;
    t.client(&proxy)
        .get("/n")
        .hdr("Host", "www.example.com")
        .send()
        .await
        .expect_status(200)
        .expect_body("named");
    origin.finish().await;
}

// b00075: an origin that requires a client certificate: given (`cert`,
// `key`), the request goes through; missing, 502 `tls-client-cert`.
#[tokio::test]
async fn b00075_client_certificates() {
    let t = Test::new("b00075");
    let ca = TestCa::new();
    let server = ca.issue(&["127.0.0.1"]);
    let origin = tls_origin(&t, &ca, &server, true, &["/m"]).await;
    let (cert, key) = ca.issue(&["hoard.client"]).write(t.dir(), "client");
    let settings = TlsSettings {
        cert: Some(cert),
        key: Some(key),
        ..trusting(ca_file(&t, &ca))
    };
    let with_cert = proxy(&t, &origin, settings).await;
    t.client(&with_cert)
        .get("/m")
        .send()
        .await
        .expect_status(200)
        .expect_body("secure /m");
    let without = proxy(&t, &origin, trusting(ca_file(&t, &ca))).await;
    refused(&t, &without, "tls-client-cert").await;
    origin.finish().await;
}

// b00076: a plaintext server behind an https:// URL: 502 `tls-handshake`,
// and nothing is sent to it in plaintext.
#[tokio::test]
async fn b00076_a_plaintext_server_behind_https_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = Test::new("b00076");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 5];
        s.read_exact(&mut first).await.unwrap();
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nplain")
            .await;
        first
    });
    let ca = TestCa::new();
    let proxy = raw_tls_proxy(&t, addr, &ca, |_| {}).await;
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_status(502)
        .expect_cache_status("detail=tls-handshake");
    // What it received was a TLS handshake record, not a request.
    assert_eq!(server.await.unwrap()[0], 0x16);
    proxy.expect_counter("origin_tls_errors", 1);
}

// b00077: `verify = false` accepts a certificate nobody signs (an explicit
// choice, logged at start).
#[tokio::test]
async fn b00077_verify_false_accepts_any_certificate() {
    let t = Test::new("b00077");
    let ca = TestCa::new();
    let origin = tls_origin(&t, &ca, &ca.issue(&["nobody.test"]), false, &["/v"]).await;
    let settings = TlsSettings {
        verify: false,
        ..TlsSettings::default()
    };
    let proxy = proxy(&t, &origin, settings).await;
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_status(200)
        .expect_body("secure /v");
    origin.finish().await;
}

// b00078: a new connection after the first resumes its TLS session (no
// full handshake); the origin counts one full handshake and one resumed.
#[tokio::test]
async fn b00078_sessions_are_resumed() {
    let t = Test::new("b00078");
    let ca = TestCa::new();
    let origin = tls_origin(&t, &ca, &ca.issue(&["127.0.0.1"]), false, &["/r1", "/r2"]).await;
    let proxy = t
        .proxy()
        .https_origin(&origin, trusting(ca_file(&t, &ca)))
        // No idle connection is kept: each request opens one.
        .upstream(|u| u.max_idle = 0)
        .start()
        .await;
    for p in ["/r1", "/r2"] {
        t.client(&proxy).get(p).send().await.expect_status(200);
    }
    assert_eq!(origin.tls_handshakes(), (1, 1));
    proxy
        .expect_counter("origin_tls_handshakes", 1)
        .expect_counter("origin_tls_resumed", 1);
    origin.finish().await;
}

// b00079: the upstream's `tls` files are read at every reload: a reload
// that swaps the CA for one that does not sign the origin makes new
// connections fail (`tls-untrusted`, no pooled connection of the old
// trust is kept); swapping it back restores them.
#[tokio::test]
async fn b00079_a_reload_reads_the_ca_again() {
    let t = Test::new("b00079");
    let (ca, other) = (TestCa::new(), TestCa::new());
    let origin = tls_origin(&t, &ca, &ca.issue(&["127.0.0.1"]), false, &["/1", "/3"]).await;
    let ca_path = ca_file(&t, &ca);
    let text = tls_toml(&ca_path);
    let proxy = t.proxy().toml(&origin, &text).start().await;
    t.client(&proxy).get("/1").send().await.expect_status(200);
    other.write(&ca_path);
    proxy.reload_toml(&origin, &text).expect("reload");
    t.client(&proxy)
        .get("/2")
        .send()
        .await
        .expect_status(502)
        .expect_cache_status("detail=tls-untrusted");
    ca.write(&ca_path);
    proxy.reload_toml(&origin, &text).expect("reload");
    t.client(&proxy).get("/3").send().await.expect_status(200);
    origin.finish().await;
}

// b00080: an origin that accepts the connection but never answers the
// TLS handshake: 504 once `connect_timeout` has passed (the handshake is
// part of connecting), and the next request is not stuck behind it.
#[tokio::test]
async fn b00080_a_handshake_that_never_ends_times_out() {
    let t = Test::new("b00080");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts and holds every connection, says nothing.
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let ca = TestCa::new();
    let proxy = raw_tls_proxy(&t, addr, &ca, |u| {
        u.connect_timeout = std::time::Duration::from_millis(200)
    })
    .await;
    for path in ["/h1", "/h2"] {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_status(504)
            .expect_cache_status("detail=connect-timeout");
    }
    proxy.expect_counter("origin_connect_errors", 2);
    holder.abort();
}

// b00081: when the origin's TLS fails (here: a reload made its certificate
// untrusted), a stored response within `stale-if-error` is served instead
// of the 502; TLS failures count toward marking the server down.
#[tokio::test]
async fn b00081_a_tls_failure_serves_stale_if_error() {
    let t = Test::new("b00081");
    let (ca, other) = (TestCa::new(), TestCa::new());
    let origin = t
        .origin()
        .tls(ca.server_config(&ca.issue(&["127.0.0.1"]), false))
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/s");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1, stale-if-error=60")
                .body("kept")
                .send()
                .await;
        })
        .start()
        .await;
    let ca_path = ca_file(&t, &ca);
    let text = tls_toml(&ca_path);
    let proxy = t.proxy().toml(&origin, &text).start().await;
    t.client(&proxy).get("/s").send().await.expect_body("kept");
    t.clock.advance(super::secs(5));
    other.write(&ca_path);
    proxy.reload_toml(&origin, &text).expect("reload");
    for _ in 0..3 {
        t.client(&proxy)
            .get("/s")
            .send()
            .await
            .expect_status(200)
            .expect_body("kept")
            .expect_cache_status("detail=stale-if-error");
    }
    proxy.expect_counter("origin_tls_errors", 3);
    // Three TLS failures: the server counts as down (as after connect
    // errors), and the stale copy is served without a handshake.
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body("kept")
        .expect_cache_status("detail=origin-down");
    proxy
        .expect_counter("origin_tls_errors", 3)
        .expect_counter("stale_if_error_served", 4);
    origin.finish().await;
}
