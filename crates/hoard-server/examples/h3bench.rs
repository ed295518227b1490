#![allow(clippy::disallowed_methods)] // a measuring tool: wall-clock timing is the point
//! The client of bench/http3.sh and bench/idle.sh, one program for every
//! protocol so that a ratio compares the server's protocols, not two
//! clients:
//!
//! * `load h2|h3 ADDR CERT.pem PATH CONNS STREAMS SECS`: CONNS connections,
//!   each with STREAMS GETs in flight at a time, for SECS seconds; prints
//!   `requests N failed N seconds S`.
//! * `idle h1|h1s|h2|h3 ADDR CERT.pem PATH N`: N connections, each after
//!   one GET, held open; prints `ready` and waits to be killed (the memory
//!   an idle connection costs the server). Past 20,000 connections the
//!   plain and TLS ones come from 127.0.0.2, .3, ... as well (one source
//!   address has about 28,000 ephemeral ports). The caller raises the
//!   file-descriptor limit.
//!
//! HTTP/1.1 by hand (plain `h1`, or over TLS `h1s`), HTTP/2 over TLS with
//! hyper, HTTP/3 with quinn and h3.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

fn tls(cert: &str, alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(cert).expect("read the certificate"))
        .expect("a usable certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    cfg
}

/// A byte stream, plain or TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// Connections per source address before the next one is used.
const PER_SOURCE: usize = 20_000;

/// A TCP connection to `addr` from 127.0.0.(1 + nth / PER_SOURCE).
async fn connect(addr: SocketAddr, nth: usize) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    let source = std::net::Ipv4Addr::new(127, 0, 0, 1 + (nth / PER_SOURCE) as u8);
    if source.octets()[3] != 1 {
        socket
            .bind(SocketAddr::from((source, 0)))
            .expect("bind a source address");
    }
    let tcp = socket.connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    tcp
}

/// One HTTP/1.1 GET on `stream`, the response read whole (it must carry
/// Content-Length); true on a 200.
async fn get_h1(stream: &mut dyn Stream, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut got = Vec::with_capacity(2048);
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if got.len() >= end + 4 + len {
            return head.starts_with("http/1.1 200");
        }
    }
}

/// A connection that sends GETs.
enum Client {
    H1(Box<dyn Stream>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
    H3(h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>),
}

impl Client {
    async fn open(
        proto: &str,
        addr: SocketAddr,
        cert: &str,
        endpoint: &quinn::Endpoint,
        nth: usize,
    ) -> (Client, Box<dyn std::any::Any + Send>) {
        match proto {
            "h1" => (Client::H1(Box::new(connect(addr, nth).await)), Box::new(())),
            "h1s" => {
                let tcp = connect(addr, nth).await;
                let stream = tokio_rustls::TlsConnector::from(Arc::new(tls(cert, b"http/1.1")))
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await
                    .expect("TLS");
                (Client::H1(Box::new(stream)), Box::new(()))
            }
            "h2" => {
                let tcp = connect(addr, nth).await;
                let stream = tokio_rustls::TlsConnector::from(Arc::new(tls(cert, b"h2")))
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await
                    .expect("TLS");
                let (send, conn) = hyper::client::conn::http2::handshake(
                    hyper_util::rt::TokioExecutor::new(),
                    hyper_util::rt::TokioIo::new(stream),
                )
                .await
                .expect("HTTP/2");
                (Client::H2(send), Box::new(tokio::spawn(conn)))
            }
            _ => {
                let conn = endpoint
                    .connect(addr, "localhost")
                    .expect("connect")
                    .await
                    .expect("QUIC");
                let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
                    .await
                    .expect("HTTP/3");
                let task = tokio::spawn(async move {
                    let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
                });
                (Client::H3(send), Box::new((conn, task)))
            }
        }
    }

    /// One GET, its body read whole; true on a 200.
    async fn get(&mut self, path: &str) -> bool {
        let uri = format!("https://localhost{path}");
        match self {
            Client::H1(stream) => get_h1(stream.as_mut(), path).await,
            Client::H2(send) => {
                let req = http::Request::get(uri).body(Empty::<Bytes>::new()).unwrap();
                let Ok(resp) = send.send_request(req).await else {
                    return false;
                };
                let ok = resp.status() == 200;
                ok && resp.into_body().collect().await.is_ok()
            }
            Client::H3(send) => {
                let req = http::Request::get(uri).body(()).unwrap();
                let Ok(mut stream) = send.send_request(req).await else {
                    return false;
                };
                if stream.finish().await.is_err() {
                    return false;
                }
                let Ok(resp) = stream.recv_response().await else {
                    return false;
                };
                loop {
                    match stream.recv_data().await {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => return false,
                    }
                }
                resp.status() == 200
            }
        }
    }

    fn clone_sender(&self) -> Client {
        match self {
            Client::H1(_) => unreachable!("HTTP/1.1 connections are not shared"),
            Client::H2(s) => Client::H2(s.clone()),
            Client::H3(s) => Client::H3(s.clone()),
        }
    }
}

fn client_endpoint(cert: &str) -> quinn::Endpoint {
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls(cert, b"h3")).expect("QUIC TLS");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).expect("a UDP socket");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    endpoint
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: h3bench load h2|h3 ADDR CERT PATH CONNS STREAMS SECS | idle h1|h1s|h2|h3 ADDR CERT PATH N");
        std::process::exit(2);
    };
    let (Some(mode), Some(proto), Some(addr), Some(cert), Some(path)) = (
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4),
        args.get(5),
    ) else {
        usage()
    };
    let addr: SocketAddr = addr.parse().expect("ADDR");
    let num = |i: usize| -> usize {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let endpoint = client_endpoint(cert);
    match mode.as_str() {
        "idle" => {
            // Opened 256 at a time; each task holds its connection.
            let n = num(6);
            let opened = Arc::new(tokio::sync::Semaphore::new(0));
            let gate = Arc::new(tokio::sync::Semaphore::new(256));
            for nth in 0..n {
                let permit = gate.clone().acquire_owned().await.expect("open");
                let (proto, cert, path) = (proto.clone(), cert.clone(), path.clone());
                let (endpoint, opened) = (endpoint.clone(), opened.clone());
                tokio::spawn(async move {
                    let (mut c, keep) = Client::open(&proto, addr, &cert, &endpoint, nth).await;
                    assert!(c.get(&path).await, "a GET failed");
                    drop(permit);
                    opened.add_permits(1);
                    let _held = (c, keep);
                    std::future::pending::<()>().await;
                });
            }
            let _all = opened.acquire_many(n as u32).await.expect("opened");
            println!("ready");
            std::future::pending::<()>().await;
        }
        "load" => {
            let (conns, streams, secs) = (num(6), num(7), num(8) as u64);
            let ok = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut held = Vec::new();
            let mut tasks = Vec::new();
            let start = std::time::Instant::now();
            let until = start + std::time::Duration::from_secs(secs);
            for _ in 0..conns {
                let (c, keep) = Client::open(proto, addr, cert, &endpoint, 0).await;
                for _ in 0..streams {
                    let mut c = c.clone_sender();
                    let (ok, failed, path) = (ok.clone(), failed.clone(), path.clone());
                    tasks.push(tokio::spawn(async move {
                        while std::time::Instant::now() < until {
                            let n = if c.get(&path).await { &ok } else { &failed };
                            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }));
                }
                held.push(keep);
            }
            for t in tasks {
                let _ = t.await;
            }
            println!(
                "requests {} failed {} seconds {:.3}",
                ok.load(std::sync::atomic::Ordering::Relaxed),
                failed.load(std::sync::atomic::Ordering::Relaxed),
                start.elapsed().as_secs_f64()
            );
        }
        _ => usage(),
    }
}
