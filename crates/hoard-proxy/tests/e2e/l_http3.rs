//! l: HTTP/3 over QUIC on a TLS listener (`http3 = true`): advertised with
//! `Alt-Svc`, serving fills, hits and passes from the same cache.

use std::sync::Arc;

use bytes::{Buf, Bytes};
use hoard_testkit::{Endpoint, Test, TestProxy};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::h_tls::{fixture, tls_listener};

fn http3_listener(c: &mut hoard_proxy::config::Config) {
    tls_listener(c);
    c.listeners[0].http3 = true;
}

/// An HTTP/3 client connection to `proxy`, trusting the test CA.
struct H3Client {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    _endpoint: quinn::Endpoint,
}

/// A response read whole over HTTP/3.
struct H3Response {
    head: http::response::Parts,
    body: Vec<u8>,
}

impl H3Client {
    async fn connect(proxy: &TestProxy) -> H3Client {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(fixture("ca.pem")).unwrap())
            .unwrap();
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
            .connect(proxy.endpoint(), "localhost")
            .unwrap()
            .await
            .expect("a QUIC connection");
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
            .await
            .expect("an HTTP/3 connection");
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        H3Client {
            send,
            _endpoint: endpoint,
        }
    }

    async fn request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> H3Response {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        if let Some(b) = body {
            req = req.header("content-length", b.len().to_string());
        }
        let mut stream = self.send.send_request(req.body(()).unwrap()).await.unwrap();
        if let Some(b) = body {
            stream.send_data(Bytes::copy_from_slice(b)).await.unwrap();
        }
        stream.finish().await.unwrap();
        let resp = stream.recv_response().await.expect("a response");
        let mut out = Vec::new();
        while let Some(mut chunk) = stream.recv_data().await.unwrap() {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                out.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
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
