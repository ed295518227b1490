//! h: TLS listeners: HTTP/1.1 and h2 negotiated by ALPN.

use std::path::PathBuf;
use std::sync::Arc;

use hoard_config::TlsConfig;
use hoard_testkit::{Endpoint, Test};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

pub(super) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/fixtures")
        .join(name)
}

pub(super) fn connector(alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    connector_trusting(&fixture("ca.pem"), alpn)
}

fn connector_trusting(root: &std::path::Path, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(root).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

// h00010: a TLS listener serves h2 (by ALPN) and HTTP/1.1 from the same cache.
#[tokio::test]
async fn h00010_tls_alpn_h2_and_http1() {
    let t = Test::new("h00010");
    let origin = t.origin().script_fresh("/tls", 60, "secret").start().await;
    let proxy = t.proxy().origin(&origin).config(tls_listener).start().await;
    let name = ServerName::try_from("localhost").unwrap();

    // h2 over TLS.
    let mut send = h2_over_tls(&proxy).await;
    let resp = send
        .send_request(
            http::Request::get("https://localhost/tls")
                .body(Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        hoard_testkit::cache_status_params(resp.headers()["cache-status"].to_str().unwrap())
            .iter()
            .any(|p| p == "key=\"https|localhost|/tls\"")
    );
    assert_eq!(
        &resp.into_body().collect().await.unwrap().to_bytes()[..],
        b"secret"
    );
    proxy.wait_counter("objects_stored", 1).await;

    // HTTP/1.1 over TLS, a hit on the same object.
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = connector(&[b"http/1.1"]).connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/tls")
        .header("host", "localhost")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(
        hoard_testkit::cache_status_params(resp.headers()["cache-status"].to_str().unwrap())
            .first()
            .map(String::as_str),
        Some("hit")
    );
    assert_eq!(
        &resp.into_body().collect().await.unwrap().to_bytes()[..],
        b"secret"
    );
    origin.finish().await;
}

/// The first listener serves TLS with the test certificate.
pub(super) fn tls_listener(c: &mut hoard_config::Config) {
    c.listeners[0].tls = Some(TlsConfig {
        cert: fixture("server.pem"),
        key: fixture("server.key"),
    });
}

/// An HTTP/2 connection over TLS to `proxy` (ALPN checked to be h2).
async fn h2_over_tls(
    proxy: &hoard_testkit::TestProxy,
) -> hyper::client::conn::http2::SendRequest<Empty<bytes::Bytes>> {
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = connector(&[b"h2"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

/// GET `path` over HTTP/1.1 on a TLS connection made by `connector`.
async fn get_over_tls(
    addr: std::net::SocketAddr,
    connector: &tokio_rustls::TlsConnector,
) -> Result<http::StatusCode, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get("/r")
        .header("host", "localhost")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(resp.status())
}

// h00011: a reload reads the certificate again: after the files are
// replaced (a renewal), new handshakes present the new certificate, while a
// connection opened before the reload goes on.
#[tokio::test]
async fn h00011_reload_reads_renewed_certificates() {
    let t = Test::new("h00011");
    let (cert, key) = (t.dir().join("cert.pem"), t.dir().join("key.pem"));
    std::fs::copy(fixture("server.pem"), &cert).unwrap();
    std::fs::copy(fixture("server.key"), &key).unwrap();
    let (new_cert, new_key) = (t.dir().join("new-cert.pem"), t.dir().join("new-key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .args([
            "-addext",
            "subjectAltName=DNS:localhost",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ])
        .arg("-keyout")
        .arg(&new_key)
        .arg("-out")
        .arg(&new_cert)
        .output();
    if !made.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: openssl is not installed (Debian package `openssl`)");
        return;
    }
    let origin = t.origin().script_fresh("/r", 60, "r").start().await;
    let toml = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = {{ cert = {:?}, key = {:?} }}\n\
         [upstream.app]\nservers = [\"http://{{origin}}\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &toml).start().await;
    let old_ca = connector(&[b"http/1.1"]);
    let new_ca = connector_trusting(&new_cert, &[b"http/1.1"]);
    // A keep-alive connection opened before the renewal.
    let tcp = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let tls = old_ca
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut before, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = || {
        http::Request::get("/r")
            .header("host", "localhost")
            .body(Empty::<bytes::Bytes>::new())
            .unwrap()
    };
    assert_eq!(before.send_request(get()).await.unwrap().status(), 200);

    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    proxy
        .reload_toml(&origin, &toml)
        .expect("valid configuration");
    let e = get_over_tls(proxy.endpoint(), &old_ca)
        .await
        .expect_err("the old certificate is gone");
    assert!(e.contains("certificate"), "{e}");
    assert_eq!(
        get_over_tls(proxy.endpoint(), &new_ca).await,
        Ok(http::StatusCode::OK)
    );
    assert_eq!(before.send_request(get()).await.unwrap().status(), 200);
    origin.finish().await;
}

// h00012: one HTTP/2 connection over TLS carries 100 concurrent streams: hits
// of a small and of a 1 MiB object (answered inside the connection's poll,
// their writes batched; the large bodies fill the batching buffer past its
// limit) and a miss that waits for the origin meanwhile. (Each body is read
// by its own task: read one after another, unread bodies would hold the
// connection's flow-control window and stall the client.) Every body arrives whole and in order, and the
// origin sees exactly the three fills.
#[tokio::test]
async fn h00012_http2_batched_writes_keep_every_stream_whole() {
    let t = Test::new("h00012");
    let small: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let big: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(7) % 253) as u8)
        .collect();
    let (late_asked, late_go) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let origin = {
        let (small, big) = (small.clone(), big.clone());
        let (asked, go) = (late_asked.clone(), late_go.clone());
        t.origin()
            .script(move |mut s| async move {
                s.serve_fresh("/small", 60, &small).await;
                s.serve_fresh("/big", 60, &big).await;
                s.rxreq().await.expect_url("/late");
                asked.notify_one();
                go.notified().await;
                s.txresp_fresh(60, "late").await;
            })
            .start()
            .await
    };
    // The origin holds /late until every hit is read (a barrier, not a
    // timer): the read timeout must outlast 33 MiB over TLS on a busy
    // machine, so the kit's 5 s is raised here.
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            tls_listener(c);
            c.upstreams[0].read_timeout = std::time::Duration::from_secs(60);
        })
        .start()
        .await;
    let send = h2_over_tls(&proxy).await;
    let get = |path: &str| {
        let mut send = send.clone();
        let req = http::Request::get(format!("https://localhost{path}"))
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        async move { send.send_request(req).await.unwrap() }
    };
    // Fill both objects.
    for (path, want) in [("/small", &small), ("/big", &big)] {
        let resp = get(path).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            &resp.into_body().collect().await.unwrap().to_bytes()[..],
            &want[..]
        );
    }
    proxy.wait_counter("objects_stored", 2).await;

    // The miss first, so that it waits on the origin while the hits go by.
    let late = tokio::spawn(get("/late"));
    late_asked.notified().await;
    let paths: Vec<&str> = (0..99)
        .map(|i| if i % 3 == 0 { "/big" } else { "/small" })
        .collect();
    let pending: Vec<_> = paths
        .iter()
        .map(|p| {
            let resp = get(p);
            tokio::spawn(async move {
                let (head, body) = resp.await.into_parts();
                (head, body.collect().await.unwrap().to_bytes())
            })
        })
        .collect();
    for (path, done) in paths.iter().zip(pending) {
        let (head, body) = done.await.unwrap();
        assert_eq!(head.status, 200, "{path}");
        assert_eq!(
            hoard_testkit::cache_status_params(head.headers["cache-status"].to_str().unwrap())
                .first()
                .map(String::as_str),
            Some("hit"),
            "{path}"
        );
        let want = if *path == "/big" { &big } else { &small };
        assert!(
            body[..] == want[..],
            "{path}: {} bytes, not the stored body",
            body.len()
        );
    }
    late_go.notify_one();
    let resp = late.await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        &resp.into_body().collect().await.unwrap().to_bytes()[..],
        b"late"
    );
    origin.finish().await;
}
