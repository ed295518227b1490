//! r03: certificates from files picked by SNI on one listener
//! (`tls = { certs = [...] }`): each name gets its certificate and its
//! site, over TCP and QUIC, beside ACME certificates, renewed by a reload.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use hoard_testkit::pki::TestCa;
use hoard_testkit::{Endpoint, Test};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::client::TlsStream;

use super::l_http3::H3Client;

/// Two sites behind one upstream; `{tls}` is the listener's `tls` table.
const SITES: &str = r#"
[[listener]]
address = "127.0.0.1:0"
http3 = true
tls = {tls}
[upstream.app]
servers = ["http://{origin}"]
[[site]]
hosts = ["a.example", "www.a.example"]
[[site.route]]
prefix = "/"
[[site]]
hosts = ["b.example", "*.w.example"]
[[site.route]]
prefix = "/"
"#;

/// `{ cert = "...", key = "..." }` for a pair of files.
fn pair((cert, key): &(PathBuf, PathBuf)) -> String {
    format!(
        "{{ cert = {:?}, key = {:?} }}",
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// The configuration with `certs` as the listener's certificates.
fn sites(certs: &[&(PathBuf, PathBuf)], extra: &str) -> String {
    let list: Vec<String> = certs.iter().map(|c| pair(c)).collect();
    SITES.replace(
        "{tls}",
        &format!("{{ {extra}certs = [{}] }}", list.join(", ")),
    )
}

/// Accepts any certificate (the cases read what was presented).
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client trusting `ca` (`None`: any certificate), sending the server
/// name (SNI) when `sni`.
fn connector(ca: Option<&TestCa>, sni: bool) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let mut cfg = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca_der(ca)).unwrap();
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
            .with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.enable_sni = sni;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

fn ca_der(ca: &TestCa) -> CertificateDer<'static> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap()
}

fn roots(ca: &TestCa) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_der(ca)).unwrap();
    roots
}

/// A TLS connection to `addr` for `name`.
async fn connect(
    addr: SocketAddr,
    name: &str,
    connector: &tokio_rustls::TlsConnector,
) -> Result<TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())
}

/// The DNS names of the certificate `tls` was given.
fn presented(tls: &TlsStream<tokio::net::TcpStream>) -> Vec<String> {
    let leaf = &tls.get_ref().1.peer_certificates().unwrap()[0];
    let (_, x509) = x509_parser::parse_x509_certificate(leaf).unwrap();
    x509.subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|g| match g {
            x509_parser::extensions::GeneralName::DNSName(n) => n.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

/// The names presented to a handshake for `name` (`None`: no SNI).
async fn names_for(addr: SocketAddr, name: Option<&str>) -> Vec<String> {
    let c = connector(None, name.is_some());
    presented(
        &connect(addr, name.unwrap_or("localhost"), &c)
            .await
            .unwrap(),
    )
}

/// An HTTP/1.1 sender over `tls`.
async fn http1(
    tls: TlsStream<tokio::net::TcpStream>,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// GET `/` for `host`: status and body.
async fn get(
    send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    host: &str,
) -> (u16, Vec<u8>) {
    let req = http::Request::get("/")
        .header("host", host)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    (
        status,
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
}

/// An origin answering each request with the site's name (its Host),
/// for `hosts` in that order.
async fn origin_for(t: &Test, hosts: &'static [&'static str]) -> hoard_testkit::Origin {
    t.origin()
        .script(move |mut s| async move {
            for host in hosts {
                s.rxreq().await.expect_header("host", host);
                s.txresp_fresh(600, format!("site {host}")).await;
            }
        })
        .start()
        .await
}

// r03001: two sites with their own certificate files share one listener:
// each server name gets its certificate (checked by a client trusting the
// CA, and by the names presented) and its site's content.
#[tokio::test]
async fn r03001_each_server_name_gets_its_certificate_and_its_site() {
    let t = Test::new("r03001");
    let ca = TestCa::new();
    let a = ca
        .issue(&["a.example", "www.a.example"])
        .write(t.dir(), "a");
    let b = ca.issue(&["b.example"]).write(t.dir(), "b");
    let origin = origin_for(&t, &["a.example", "b.example"]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &sites(&[&a, &b], ""))
        .start()
        .await;
    let addr = proxy.endpoint();
    let trusting = connector(Some(&ca), true);
    for (name, names) in [
        ("a.example", &["a.example", "www.a.example"][..]),
        ("b.example", &["b.example"]),
        ("www.a.example", &["a.example", "www.a.example"]),
    ] {
        let tls = connect(addr, name, &trusting)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(presented(&tls), names, "{name}");
        if name == "www.a.example" {
            continue;
        }
        let (status, body) = get(&mut http1(tls).await, name).await;
        assert_eq!(
            (status, String::from_utf8(body).unwrap()),
            (200, format!("site {name}"))
        );
    }
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

// r03002: a wildcard certificate answers for one label under its name
// (RFC 6125 §6.4.3), not for the name itself nor two labels; an exact
// name wins over the wildcard whatever the order of the files.
#[tokio::test]
async fn r03002_a_wildcard_certificate_covers_one_label() {
    let t = Test::new("r03002");
    let ca = TestCa::new();
    let a = ca.issue(&["a.example"]).write(t.dir(), "a");
    let wild = ca.issue(&["*.w.example"]).write(t.dir(), "wild");
    let api = ca.issue(&["api.w.example"]).write(t.dir(), "api");
    let origin = origin_for(&t, &["x.w.example"]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &sites(&[&a, &wild, &api], ""))
        .start()
        .await;
    let addr = proxy.endpoint();
    for (name, names) in [
        ("x.w.example", "*.w.example"),
        ("API.w.example", "api.w.example"),
        ("w.example", "a.example"),
        ("x.y.w.example", "a.example"),
    ] {
        assert_eq!(names_for(addr, Some(name)).await, [names], "{name}");
    }
    // A client checking names accepts the wildcard for one label, and
    // the site (`*.w.example` in its hosts) answers.
    let tls = connect(addr, "x.w.example", &connector(Some(&ca), true))
        .await
        .unwrap();
    let (status, body) = get(&mut http1(tls).await, "x.w.example").await;
    assert_eq!((status, body.as_slice()), (200, &b"site x.w.example"[..]));
    origin.finish().await;
}

// r03003: a handshake without a server name, or with one no certificate
// covers, gets the first certificate (whose check then fails for an
// unknown name, as it should); no request reaches the origin.
#[tokio::test]
async fn r03003_unknown_and_absent_server_names_get_the_first() {
    let t = Test::new("r03003");
    let ca = TestCa::new();
    let a = ca.issue(&["a.example"]).write(t.dir(), "a");
    let b = ca.issue(&["b.example"]).write(t.dir(), "b");
    let origin = origin_for(&t, &[]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &sites(&[&b, &a], ""))
        .start()
        .await;
    let addr = proxy.endpoint();
    assert_eq!(names_for(addr, None).await, ["b.example"]);
    assert_eq!(names_for(addr, Some("other.example")).await, ["b.example"]);
    assert_eq!(names_for(addr, Some("a.example")).await, ["a.example"]);
    let e = connect(addr, "other.example", &connector(Some(&ca), true))
        .await
        .expect_err("no certificate for other.example");
    assert!(e.contains("certificate"), "{e}");
    assert_eq!(origin.requests(), 0);
    origin.finish().await;
}

// r03004: over HTTP/3 the listener picks by server name the same way: a
// QUIC client checking each name against the CA connects, and gets its
// site; a name no certificate covers fails the client's check.
#[tokio::test]
async fn r03004_http3_picks_the_certificate_by_server_name() {
    let t = Test::new("r03004");
    let ca = TestCa::new();
    let a = ca.issue(&["a.example"]).write(t.dir(), "a");
    let b = ca.issue(&["b.example"]).write(t.dir(), "b");
    let wild = ca.issue(&["*.w.example"]).write(t.dir(), "wild");
    let origin = origin_for(&t, &["b.example", "x.w.example", "a.example"]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &sites(&[&a, &b, &wild], ""))
        .start()
        .await;
    let addr = proxy.endpoint();
    for name in ["b.example", "x.w.example", "a.example"] {
        let mut h3 = H3Client::connect_as(addr, name, roots(&ca))
            .await
            .unwrap_or_else(|e| panic!("{name} over QUIC: {e}"));
        let r = h3.request("GET", "/", None).await;
        assert_eq!(
            (r.head.status.as_u16(), String::from_utf8(r.body).unwrap()),
            (200, format!("site {name}"))
        );
    }
    let e = H3Client::connect_as(addr, "other.example", roots(&ca))
        .await
        .err()
        .expect("other.example gets the first certificate");
    assert!(
        e.contains("certificate") || e.contains("Certificate"),
        "{e}"
    );
    proxy.expect_counter("quic_connections", 4);
    origin.finish().await;
}

// r03005: ACME certificates and files on one listener: a name listed
// under `acme` gets ACME's certificate (stored by an earlier run, so no
// CA is needed), although a file's wildcard covers it too; the other
// names get the files; no order is made.
#[tokio::test]
async fn r03005_an_acme_certificate_wins_for_its_name_files_for_the_rest() {
    let t = Test::new("r03005");
    let (ca, acme_ca) = (TestCa::new(), TestCa::new());
    let wild = ca
        .issue(&["*.a.example", "a.example"])
        .write(t.dir(), "wild");
    // What ACME stored for shop.a.example (see `acme::files`).
    let stored = t.dir().join("acme").join("shop.a.example");
    std::fs::create_dir_all(&stored).unwrap();
    let issued = acme_ca.issue(&["shop.a.example"]);
    std::fs::write(stored.join("cert.pem"), &issued.cert_pem).unwrap();
    std::fs::write(stored.join("key.pem"), &issued.key_pem).unwrap();
    std::fs::write(stored.join("names"), "shop.a.example").unwrap();
    let origin = origin_for(&t, &["shop.a.example", "x.a.example"]).await;
    let text = sites(&[&wild], "acme = [\"shop.a.example\"], ").replace(
        "hosts = [\"a.example\", \"www.a.example\"]",
        "hosts = [\"*.a.example\"]",
    );
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &text)
        .config(move |c| {
            // A CA that is never reached: the stored certificate is good.
            c.acme.directory = "https://127.0.0.1:9/directory".into();
            c.acme.dir = Some(dir.join("acme"));
        })
        .start()
        .await;
    let addr = proxy.endpoint();
    assert_eq!(
        names_for(addr, Some("shop.a.example")).await,
        ["shop.a.example"]
    );
    assert_eq!(
        names_for(addr, Some("x.a.example")).await,
        ["*.a.example", "a.example"]
    );
    assert_eq!(names_for(addr, None).await, ["*.a.example", "a.example"]);
    for (name, ca) in [("shop.a.example", &acme_ca), ("x.a.example", &ca)] {
        let tls = connect(addr, name, &connector(Some(ca), true))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (status, body) = get(&mut http1(tls).await, name).await;
        assert_eq!(
            (status, String::from_utf8(body).unwrap()),
            (200, format!("site {name}"))
        );
    }
    // Over QUIC too.
    assert!(
        H3Client::connect_as(addr, "shop.a.example", roots(&acme_ca))
            .await
            .is_ok()
    );
    proxy.expect_counter("acme_orders", 0);
    origin.finish().await;
}

// r03006: a reload reads the certificate files again: a renewed file is
// presented from the next handshake (TCP and QUIC) while a connection
// opened before goes on; a reload with a broken file is refused, names
// the certificate, and the running certificates stay.
#[tokio::test]
async fn r03006_a_reload_presents_the_renewed_file_and_refuses_a_broken_one() {
    let t = Test::new("r03006");
    let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
    let a = old_ca.issue(&["a.example"]).write(t.dir(), "a");
    let b = old_ca.issue(&["b.example"]).write(t.dir(), "b");
    let origin = origin_for(&t, &["a.example", "b.example"]).await;
    let text = sites(&[&a, &b], "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &text).start().await;
    let addr = proxy.endpoint();
    let old = connector(Some(&old_ca), true);
    let mut before = http1(connect(addr, "a.example", &old).await.unwrap()).await;
    assert_eq!(get(&mut before, "a.example").await.0, 200);
    // The renewed certificate of b (another CA, to tell them apart).
    new_ca.issue(&["b.example"]).write(t.dir(), "b");
    let r = proxy.reload_toml(&origin, &text).expect("a valid reload");
    assert!(r.opened.is_empty() && r.closed.is_empty(), "{r:?}");
    let new = connector(Some(&new_ca), true);
    assert!(connect(addr, "b.example", &old).await.is_err());
    let tls = connect(addr, "b.example", &new).await.unwrap();
    assert_eq!(get(&mut http1(tls).await, "b.example").await.0, 200);
    assert!(H3Client::connect_as(addr, "b.example", roots(&new_ca))
        .await
        .is_ok());
    // a's certificate did not change; the connection opened before the
    // reload goes on (a hit).
    assert!(connect(addr, "a.example", &old).await.is_ok());
    assert_eq!(get(&mut before, "a.example").await.0, 200);
    // A broken file: refused, named; the certificates presented stay.
    std::fs::write(&b.0, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    let e = proxy.reload_toml(&origin, &text).unwrap_err();
    assert!(
        e.contains("test.toml:5") && e.contains("listener[0].tls.certs[1].cert"),
        "{e}"
    );
    assert!(e.contains("b.pem"), "{e}");
    let last = proxy.proxy().last_reload().unwrap();
    assert_eq!(last.result.unwrap_err(), e);
    assert!(connect(addr, "b.example", &new).await.is_ok());
    assert_eq!(get(&mut before, "a.example").await.0, 200);
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}
