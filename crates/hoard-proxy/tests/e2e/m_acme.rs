//! m: automatic HTTPS over ACME against a real CA: Debian's `pebble` (Let's
//! Encrypt's test CA) and `pebble-challtestsrv` as the DNS that points the
//! test names at 127.0.0.1, both started by each case on free loopback
//! ports and stopped by process id.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use hoard_testkit::{Endpoint, Test};
use http_body_util::{BodyExt, Empty};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// A free loopback port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (by its id) when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pebble and its DNS, the CA's own HTTPS certified by a test CA.
struct Pebble {
    directory: String,
    management: u16,
    /// The root of pebble's own HTTPS (for the ACME client).
    api_root: std::path::PathBuf,
    _dns: Kill,
    _ca: Kill,
}

impl Pebble {
    /// Starts pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port` of 127.0.0.1.
    async fn start(dir: &Path, http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_with(dir, http_port, tls_port, 0).await
    }

    /// As `start`, issuing certificates valid for `validity` seconds (0:
    /// pebble's default, five years).
    async fn start_with(dir: &Path, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        Pebble::plan(dir).start(http_port, tls_port, validity).await
    }

    /// Its addresses and its HTTPS root, chosen before it starts (so that
    /// proxies can be configured first).
    fn plan(dir: &Path) -> PebblePlan {
        let ca = hoard_testkit::pki::TestCa::new();
        let api_root = dir.join("pebble-api-ca.pem");
        ca.write(&api_root);
        let (cert, key) = ca
            .issue(&["localhost", "127.0.0.1"])
            .write(dir, "pebble-api");
        let acme = free_port();
        PebblePlan {
            dir: dir.to_path_buf(),
            directory: format!("https://127.0.0.1:{acme}/dir"),
            acme,
            management: free_port(),
            api_root,
            cert,
            key,
        }
    }
}

/// A pebble not started yet.
struct PebblePlan {
    dir: std::path::PathBuf,
    directory: String,
    acme: u16,
    management: u16,
    api_root: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

impl PebblePlan {
    /// Starts it validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port`, issuing for `validity` seconds (0: five years).
    async fn start(self, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
        let PebblePlan {
            dir,
            directory,
            acme,
            management,
            api_root,
            cert,
            key,
        } = self;
        let dir = dir.as_path();
        let (Some(pebble), Some(chall)) = (
            super::o_ops::which("pebble"),
            super::o_ops::which("pebble-challtestsrv"),
        ) else {
            panic!("pebble is needed for this case: apt-get install pebble (./test installs it)");
        };
        let (dns, chall_mgmt) = (free_port(), free_port());
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{acme}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": cert, "privateKey": key,
            "httpPort": http_port, "tlsPort": tls_port,
            "ocspResponderURL": "", "externalAccountBindingRequired": false,
            "certificateValidityPeriod": validity,
        }});
        let config_path = dir.join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let dns_proc = Kill(
            Command::new(chall)
                .args(["-management", &format!("127.0.0.1:{chall_mgmt}")])
                .args(["-dns01", &format!("127.0.0.1:{dns}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("pebble-challtestsrv starts"),
        );
        let ca_proc = Kill(
            Command::new(pebble)
                .arg("-config")
                .arg(&config_path)
                .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .env("PEBBLE_AUTHZREUSE", "0")
                .stdout(std::fs::File::create(dir.join("pebble.log")).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .expect("pebble starts"),
        );
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", acme))
                .await
                .is_ok()
                && tokio::net::TcpStream::connect(("127.0.0.1", management))
                    .await
                    .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        Pebble {
            directory,
            management,
            api_root,
            _dns: dns_proc,
            _ca: ca_proc,
        }
    }
}

impl Pebble {
    /// The root pebble issues from (made anew at each start).
    async fn issuing_root(&self) -> CertificateDer<'static> {
        let pem = get_over_tls(
            SocketAddr::from(([127, 0, 0, 1], self.management)),
            "127.0.0.1",
            &CertificateDer::from_pem_file(&self.api_root).unwrap(),
            "/roots/0",
        )
        .await
        .expect("pebble's root");
        CertificateDer::from_pem_slice(&pem).unwrap().into_owned()
    }
}

/// A TLS connection to `addr` with SNI `name`, trusting only `root`.
async fn connect_tls(
    addr: SocketAddr,
    name: &str,
    root: &CertificateDer<'static>,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())
}

/// GET `path` over HTTPS from `addr` with SNI `name`, trusting `root`:
/// the body of a 200, or the error.
async fn get_over_tls(
    addr: SocketAddr,
    name: &str,
    root: &CertificateDer<'static>,
    path: &str,
) -> Result<Vec<u8>, String> {
    let tls = connect_tls(addr, name, root).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let resp = send
        .send_request(
            http::Request::get(path)
                .header("host", name)
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()));
    }
    Ok(resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec())
}

/// The proxy's configuration: a plain listener on `http_port` (when
/// given) and an ACME listener for one certificate for `names` on
/// `tls_port`.
fn acme_config(
    c: &mut hoard_proxy::config::Config,
    pebble: &Pebble,
    dir: &Path,
    http_port: Option<u16>,
    tls_port: u16,
    names: &[&str],
) {
    let ca = (pebble.directory.as_str(), pebble.api_root.as_path());
    acme_sites(c, ca, dir, http_port, tls_port, &[names]);
}

/// As [`acme_config`], with one certificate for each list of `certs`,
/// from the CA `ca` (its directory URL and the root of its HTTPS).
fn acme_sites(
    c: &mut hoard_proxy::config::Config,
    ca: (&str, &Path),
    dir: &Path,
    http_port: Option<u16>,
    tls_port: u16,
    certs: &[&[&str]],
) {
    let acme_listener = hoard_proxy::config::ListenerConfig {
        address: SocketAddr::from(([127, 0, 0, 1], tls_port)),
        acme: certs
            .iter()
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .collect(),
        ..Default::default()
    };
    match http_port {
        Some(p) => {
            c.listeners[0].address = SocketAddr::from(([127, 0, 0, 1], p));
            c.listeners.push(acme_listener);
        }
        None => c.listeners = vec![acme_listener],
    }
    c.acme.directory = ca.0.to_string();
    c.acme.ca_root = Some(ca.1.to_path_buf());
    c.acme.dir = Some(dir.join("acme"));
}

/// A proxy with the admin listener on, whose ACME listener on `tls_port`
/// asks `pebble` for `certs` (HTTP-01 on its plain listener, `http_port`).
async fn acme_proxy(
    t: &Test,
    origin: &hoard_testkit::Origin,
    pebble: &Pebble,
    http_port: u16,
    tls_port: u16,
    certs: &[&[&str]],
) -> hoard_testkit::TestProxy {
    let dir = t.dir().to_path_buf();
    let ca = (pebble.directory.as_str(), pebble.api_root.as_path());
    t.proxy()
        .origin(origin)
        .admin()
        .config(|c| acme_sites(c, ca, &dir, Some(http_port), tls_port, certs))
        .start()
        .await
}

// m00001: a certificate obtained over HTTP-01 (answered by hoard on its
// plain listener, never forwarded to the origin) for two names, served on
// the TLS listener and chaining to pebble's root; a restart presents the
// stored certificate at once and orders nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00001_http01_certificate_obtained_served_and_reused() {
    let t = Test::new("m00001");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(t.dir(), http_port, tls_port).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..3 {
                s.rxreq().await.expect_url("/page");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body("secure")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let names = ["a.example.com", "www.a.example.com"];
    let dir = t.dir().to_path_buf();
    let start = || {
        let (pebble, dir) = (&pebble, dir.clone());
        t.proxy()
            .origin(&origin)
            .config(move |c| acme_config(c, pebble, &dir, Some(http_port), tls_port, &names))
            .start()
    };
    let proxy = start().await;
    proxy.wait_counter("acme_certificates_issued", 1).await;
    assert!(proxy.counter("acme_challenges_answered") >= 1);
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    // Both names are in the certificate; another name is not.
    for name in names {
        assert_eq!(
            get_over_tls(tls, name, &root, "/page").await.unwrap(),
            b"secure"
        );
    }
    let e = get_over_tls(tls, "other.example.com", &root, "/page").await;
    assert!(
        e.is_err_and(|e| e.contains("certificate")),
        "a name not in it"
    );
    assert_eq!(proxy.endpoint().port(), http_port);
    proxy.stop().await;
    let stored = std::fs::read_to_string(t.dir().join("acme/a.example.com/names")).unwrap();
    assert_eq!(stored, "a.example.com www.a.example.com");
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(t.dir().join("acme/a.example.com/key.pem"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o777, 0o600);

    // A restart: the stored certificate, no order.
    let proxy = start().await;
    assert_eq!(
        get_over_tls(tls, names[0], &root, "/page").await.unwrap(),
        b"secure"
    );
    assert_eq!(proxy.counter("acme_orders"), 0);
    origin.finish().await;
}

// m00002: without a plain listener the certificate is obtained over
// TLS-ALPN-01 (RFC 8737) on the TLS listener itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00002_tls_alpn01_on_the_tls_listener() {
    let t = Test::new("m00002");
    let tls_port = free_port();
    let pebble = Pebble::start(t.dir(), free_port(), tls_port).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("alpn")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            acme_config(c, &pebble, &dir, None, tls_port, &["b.example.com"]);
            // The account kept apart from the certificates.
            c.acme.account = Some(dir.join("keys").join("account.json"));
        })
        .start()
        .await;
    proxy.wait_counter("acme_certificates_issued", 1).await;
    assert_eq!(proxy.counter("acme_challenges_answered"), 0, "no HTTP-01");
    let account = t.dir().join("keys").join("account.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&account).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", account.display());
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    assert_eq!(
        get_over_tls(tls, "b.example.com", &root, "/")
            .await
            .unwrap(),
        b"alpn"
    );
    origin.finish().await;
}

// m00003: the CA unreachable: hoard keeps serving (plain HTTP here), counts
// the failure, shows the CA's error on /status, and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00003_an_unreachable_ca_is_reported_and_retried() {
    let t = Test::new("m00003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/plain");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .body("still here")
                .send()
                .await;
        })
        .start()
        .await;
    let dead = free_port();
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(move |c| {
            c.listeners.push(hoard_proxy::config::ListenerConfig {
                address: SocketAddr::from(([127, 0, 0, 1], 0)),
                acme: vec![vec!["c.example.com".into()]],
                ..Default::default()
            });
            c.acme.directory = format!("https://127.0.0.1:{dead}/dir");
            c.acme.dir = Some(dir.join("acme"));
            c.acme.retry = std::time::Duration::from_secs(60);
        })
        .start()
        .await;
    proxy.wait_counter("acme_failures", 1).await;
    // The retry is due a minute later (by the clock), then two.
    t.clock.advance(std::time::Duration::from_secs(61));
    proxy.wait_counter("acme_failures", 2).await;

    t.client(&proxy)
        .get("/plain")
        .send()
        .await
        .expect_body("still here");
    let st = t.client(proxy.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let acme = &v["acme"]["certificates"][0];
    assert_eq!(acme["names"][0], "c.example.com", "{acme}");
    assert!(
        acme["last_error"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{acme}"
    );
    assert!(acme["not_after"].is_null(), "{acme}");
    // The next try is two minutes on (the wait doubles).
    let next = httpdate::parse_http_date(acme["next_order"].as_str().unwrap()).unwrap();
    let ahead = next.duration_since(t.clock.now()).unwrap().as_secs();
    assert!((119..=120).contains(&ahead), "{ahead} s: {acme}");
    // The dashboard shows the name, the failure and the next try.
    let page = super::o_ops::settled_dashboard(&t, &proxy).await;
    assert_eq!(page["acme.certificates.0.names.0"], "c.example.com");
    assert!(page["acme.certificates.0.last_error"].contains("Connection refused"));
    assert_eq!(page["acme.certificates.0.next_order"], acme["next_order"]);
    assert_eq!(page["acme.failures"], "2");
    assert!(
        !page.contains_key("acme.certificates.0.not_after"),
        "no expiry yet"
    );
    origin.finish().await;
}

// m00004: a plain listener that redirects to HTTPS (what `--domain` sets
// up): every request gets a 308 to the HTTPS URL, except the ACME
// challenges, which are answered, so the certificate is obtained through
// it; the redirect never reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00004_plain_http_redirects_to_https_except_challenges() {
    let t = Test::new("m00004");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(t.dir(), http_port, tls_port).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/doc?x=1");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("over https")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            acme_config(
                c,
                &pebble,
                &dir,
                Some(http_port),
                tls_port,
                &["d.example.com"],
            );
            c.listeners[0].redirect_https = Some(tls_port);
        })
        .start()
        .await;
    let r = t
        .client(&proxy)
        .get("/doc?x=1")
        .hdr("Host", "d.example.com")
        .send()
        .await;
    r.expect_status(308).expect_header(
        "location",
        &format!("https://d.example.com:{tls_port}/doc?x=1"),
    );
    proxy.wait_counter("acme_certificates_issued", 1).await;
    assert!(proxy.counter("acme_challenges_answered") >= 1);
    assert_eq!(proxy.counter("objects_stored"), 0, "no answer was stored");
    // A token nobody asked for, on hoard's name: 404 here, not forwarded.
    t.client(&proxy)
        .get("/.well-known/acme-challenge/unknown-token")
        .hdr("Host", "d.example.com:80")
        .send()
        .await
        .expect_status(404);
    // Another host's challenge path is not hoard's to answer: it goes the
    // way of any request (here the redirect).
    t.client(&proxy)
        .get("/.well-known/acme-challenge/their-token")
        .hdr("Host", "other.example.org")
        .send()
        .await
        .expect_status(308);
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    assert_eq!(
        get_over_tls(tls, "d.example.com", &root, "/doc?x=1")
            .await
            .unwrap(),
        b"over https"
    );
    origin.finish().await;
}

/// The leaf certificate `addr` presents for `name`, trusting `root`.
async fn presented(addr: SocketAddr, name: &str, root: &CertificateDer<'static>) -> Vec<u8> {
    let tls = connect_tls(addr, name, root).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

// m00005: a short-lived certificate (60 s) is renewed when a third of its
// lifetime is left (the test clock moved there): the new one is presented
// from the next handshake, a connection opened before goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00005_renewal_swapped_in_under_an_open_connection() {
    let t = Test::new("m00005");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start_with(t.dir(), http_port, tls_port, 60).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..3 {
                s.rxreq().await.expect_url("/r");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body("r")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            acme_config(
                c,
                &pebble,
                &dir,
                Some(http_port),
                tls_port,
                &["e.example.com"],
            )
        })
        .start()
        .await;
    proxy.wait_counter("acme_certificates_issued", 1).await;
    let root = pebble.issuing_root().await;
    let tls_addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let first = presented(tls_addr, "e.example.com", &root).await;
    // A keep-alive connection opened on the first certificate.
    let tls = connect_tls(tls_addr, "e.example.com", &root).await.unwrap();
    let (mut before, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let get = || {
        http::Request::get("/r")
            .header("host", "e.example.com")
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    assert_eq!(before.send_request(get()).await.unwrap().status(), 200);
    // To 45 s into the 60 s lifetime (real time, since the CA's dates are).
    #[allow(clippy::disallowed_methods)]
    let real = std::time::SystemTime::now();
    let target = real + std::time::Duration::from_secs(45);
    t.clock
        .advance(target.duration_since(t.clock.now()).unwrap_or_default());
    proxy.wait_counter("acme_certificates_issued", 2).await;
    let second = presented(tls_addr, "e.example.com", &root).await;
    assert_ne!(first, second, "the renewed certificate is presented");
    assert_eq!(before.send_request(get()).await.unwrap().status(), 200);
    assert_eq!(
        get_over_tls(tls_addr, "e.example.com", &root, "/r")
            .await
            .unwrap(),
        b"r"
    );
    origin.finish().await;
}

/// The root store of one certificate.
fn roots_of(root: &CertificateDer<'static>) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    roots
}

// m00006: one certificate per name and one per site (a SAN list), picked
// by SNI on one listener; the listener serves HTTP/3 with them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00006_a_certificate_per_site_chosen_by_sni_over_tcp_and_quic() {
    let t = Test::new("m00006");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(t.dir(), http_port, tls_port).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            // One fill per site name: a6 over TCP, www.b6 over QUIC.
            for host in ["a6.example.com", "www.b6.example.com"] {
                let req = s.rxreq().await;
                req.expect_url("/s");
                req.expect_header("host", host);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .body("site")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().to_path_buf();
    let ca = (pebble.directory.as_str(), pebble.api_root.as_path());
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(|c| {
            acme_sites(
                c,
                ca,
                &dir,
                Some(http_port),
                tls_port,
                &[
                    &["a6.example.com"],
                    &["b6.example.com", "www.b6.example.com"],
                ],
            );
            c.listeners[1].http3 = true;
        })
        .start()
        .await;
    proxy.wait_counter("acme_certificates_issued", 2).await;
    assert_eq!(proxy.counter("acme_orders"), 2);
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let a = presented(tls, "a6.example.com", &root).await;
    let b = presented(tls, "b6.example.com", &root).await;
    let www_b = presented(tls, "www.b6.example.com", &root).await;
    assert_ne!(a, b, "a certificate per site");
    assert_eq!(b, www_b, "one certificate for the site's names");
    for name in ["a6.example.com", "b6.example.com"] {
        assert!(t.dir().join("acme").join(name).join("cert.pem").exists());
    }
    // Over QUIC, SNI picks the same way: www.b6 fills, a6 is a hit of the
    // TCP fill above.
    assert_eq!(
        get_over_tls(tls, "a6.example.com", &root, "/s")
            .await
            .unwrap(),
        b"site"
    );
    for name in ["www.b6.example.com", "a6.example.com"] {
        let mut h3 = super::l_http3::H3Client::connect_as(tls, name, roots_of(&root))
            .await
            .unwrap_or_else(|e| panic!("{name} over QUIC: {e}"));
        let r = h3.request("GET", "/s", None).await;
        assert_eq!(
            (r.head.status.as_u16(), r.body.as_slice()),
            (200, &b"site"[..])
        );
    }
    // /status lists both certificates with their expiry.
    let st = t.client(proxy.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let certs = v["acme"]["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 2, "{v}");
    assert_eq!(certs[1]["names"][1], "www.b6.example.com");
    assert!(certs.iter().all(|c| c["not_after"].is_string()), "{v}");
    // The dashboard lists both, each with its names and expiry.
    let page = super::o_ops::settled_dashboard(&t, &proxy).await;
    assert_eq!(page["acme.certificates.0.names.0"], "a6.example.com");
    assert_eq!(page["acme.certificates.1.names.1"], "www.b6.example.com");
    assert_eq!(page["acme.certificates.1.not_after"], certs[1]["not_after"]);
    assert_eq!(page["acme.issued"], "2");
    assert!(!page.contains_key("acme.certificates.1.last_error"));
    origin.finish().await;
}

// m00007: a reload that adds a certificate orders it without a restart
// (the certificate already there is not ordered again); one that removes
// a certificate stops presenting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00007_a_reload_orders_an_added_certificate_and_drops_a_removed_one() {
    let t = Test::new("m00007");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(t.dir(), http_port, tls_port).await;
    let origin = t.origin().start().await;
    let proxy = acme_proxy(
        &t,
        &origin,
        &pebble,
        http_port,
        tls_port,
        &[&["a7.example.com"]],
    )
    .await;
    proxy.wait_counter("acme_certificates_issued", 1).await;
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let a = presented(tls, "a7.example.com", &root).await;
    assert!(connect_tls(tls, "c7.example.com", &root).await.is_err());

    let mut cfg = (*proxy.proxy().config()).clone();
    cfg.listeners[1].acme.push(vec!["c7.example.com".into()]);
    proxy.proxy().reload(cfg.clone()).unwrap();
    proxy.wait_counter("acme_certificates_issued", 2).await;
    assert_eq!(proxy.counter("acme_orders"), 2, "a7 is not ordered again");
    let c = presented(tls, "c7.example.com", &root).await;
    assert_ne!(a, c);
    assert_eq!(presented(tls, "a7.example.com", &root).await, a);

    cfg.listeners[1].acme.remove(0);
    proxy.proxy().reload(cfg).unwrap();
    let e = connect_tls(tls, "a7.example.com", &root).await.err();
    assert!(
        e.as_deref().is_some_and(|e| e.contains("certificate")),
        "a7 is no longer presented: {e:?}"
    );
    assert_eq!(presented(tls, "c7.example.com", &root).await, c);
    let st = t.client(proxy.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    assert_eq!(
        v["acme"]["certificates"].as_array().unwrap().len(),
        1,
        "{v}"
    );
    assert_eq!(v["acme"]["certificates"][0]["names"][0], "c7.example.com");

    // A reload adds a name to c7's certificate while the CA is down: the
    // new certificate cannot be had, and c7 goes on with the one it has.
    drop(pebble);
    let mut cfg = (*proxy.proxy().config()).clone();
    cfg.listeners[1].acme = vec![vec!["c7.example.com".into(), "d7.example.com".into()]];
    let failures = proxy.counter("acme_failures");
    proxy.proxy().reload(cfg).unwrap();
    proxy.wait_counter("acme_failures", failures + 1).await;
    assert_eq!(presented(tls, "c7.example.com", &root).await, c);
    // So does a restart while the CA is still down (from the stored files).
    let cfg = (*proxy.proxy().config()).clone();
    proxy.stop().await;
    let proxy = t.proxy().config(move |c| *c = cfg).start().await;
    assert_eq!(presented(tls, "c7.example.com", &root).await, c);
    proxy.wait_counter("acme_failures", 1).await;
    origin.finish().await;
}

/// Two cluster members, each with its own main listener (the peer
/// channel, and HTTP-01) and an ACME listener for one name; certificates
/// stored under `n1/acme` and `n2/acme` in the test's directory.
struct AcmeCluster {
    ports: [u16; 2],
    tls_ports: [u16; 2],
    members: Vec<hoard_proxy::config::cluster::Member>,
    tune: Box<super::i_cluster::Tune>,
}

impl AcmeCluster {
    fn new(
        t: &Test,
        plan: &PebblePlan,
        name: &'static str,
        bus: Option<hoard_proxy::config::cluster::BusConfig>,
    ) -> AcmeCluster {
        let (ports, tls_ports) = ([free_port(), free_port()], [free_port(), free_port()]);
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, p)| hoard_proxy::config::cluster::Member {
                name: format!("n{}", i + 1),
                addr: SocketAddr::from(([127, 0, 0, 1], *p)),
                weight: 1.0,
            })
            .collect();
        let (directory, api_root, dir) = (
            plan.directory.clone(),
            plan.api_root.clone(),
            t.dir().to_path_buf(),
        );
        let tune = move |i: usize, c: &mut hoard_proxy::config::Config| {
            let node_dir = dir.join(format!("n{}", i + 1));
            acme_sites(
                c,
                (&directory, &api_root),
                &node_dir,
                None,
                tls_ports[i],
                &[&[name]],
            );
            // `acme_sites` with no plain port made the ACME listener the
            // only one; the member's own listener comes first again.
            let acme_listener = c.listeners.remove(0);
            c.listeners = vec![
                hoard_proxy::config::ListenerConfig {
                    address: SocketAddr::from(([127, 0, 0, 1], ports[i])),
                    ..Default::default()
                },
                acme_listener,
            ];
            if let Some(cl) = c.cluster.as_mut() {
                cl.bus.clone_from(&bus);
            }
        };
        AcmeCluster {
            ports,
            tls_ports,
            members,
            tune: Box::new(tune),
        }
    }
}

// m00008: in a cluster one member orders a certificate; the CA validates
// the challenge at the other member (which answers it with what the
// orderer sent), and the certificate reaches that member too: both
// present the same certificate, one order in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00008_one_member_orders_any_member_answers_all_present_it() {
    let t = Test::new("m00008");
    let plan = Pebble::plan(t.dir());
    let origin = t.origin().start().await;
    let c = AcmeCluster::new(&t, &plan, "k8.example.com", None);
    let (ports, tls_ports, members, tune) = (c.ports, c.tls_ports, c.members, c.tune);
    let mut nodes = Vec::new();
    for i in 0..2 {
        nodes.push(super::i_cluster::member(&t, &origin, &members, i, 0, |_| {}, &*tune).await);
    }
    // The CA is not up yet: the orderer's first order fails.
    let st = t.client(nodes[0].admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let orderer = v["acme"]["certificates"][0]["orderer"]
        .as_str()
        .unwrap()
        .to_string();
    let (o, other) = if orderer == "n1" { (0, 1) } else { (1, 0) };
    nodes[o].wait_counter("acme_failures", 1).await;
    // The CA validates HTTP-01 at the member that did not order.
    let pebble = plan.start(ports[other], tls_ports[other], 0).await;
    t.clock.advance(std::time::Duration::from_secs(61));
    nodes[o].wait_counter("acme_certificates_issued", 1).await;
    assert_eq!(nodes[other].counter("acme_orders"), 0);
    assert_eq!(nodes[o].counter("acme_challenges_answered"), 0);
    assert!(nodes[other].counter("acme_challenges_answered") >= 1);
    let root = pebble.issuing_root().await;
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], tls_ports[i]));
    let by_orderer = presented(at(o), "k8.example.com", &root).await;
    assert_eq!(
        presented(at(other), "k8.example.com", &root).await,
        by_orderer
    );
    // Stored on both (a restart of either presents it).
    for i in [o, other] {
        let stored = t
            .dir()
            .join(format!("n{}/acme/k8.example.com/key.pem", i + 1));
        assert!(stored.exists(), "{}", stored.display());
    }
    // A member's ACME endpoint takes nothing unsigned.
    let r = t
        .client(&nodes[other])
        .post("/.hoard/cluster/acme")
        .body("{\"fetch\":{\"site\":[\"k8.example.com\"]}}")
        .send()
        .await;
    r.expect_status(403);
    // Signed with the cluster's secret (as a member would): a body the
    // body signature does not cover is refused; a message is taken once;
    // an answer from a member that does not order the certificate is
    // refused even though it is signed.
    let key = hoard_proxy::cluster::peer_auth::PeerKey::new(b"a secret of the test cluster");
    let path = "/.hoard/cluster/acme";
    let tr = &t;
    let sign = |as_node: &str, body: &str| {
        let field = key.sign(as_node, tr.clock.now(), false, "POST", path);
        let mac = key.sign_body(&field, body.as_bytes());
        (field, mac)
    };
    let send = |to: usize, body: &'static str, (field, mac): (String, String)| {
        let node = &nodes[to];
        async move {
            tr.client(node)
                .post(path)
                .hdr("hoard-peer", &field)
                .hdr("hoard-peer-body", &mac)
                .body(body)
                .send()
                .await
        }
    };
    let from = ["n1", "n2"][other];
    let fetch = "{\"fetch\":{\"site\":[\"k8.example.com\"]}}";
    let other_fetch = "{\"fetch\":{\"site\":[\"x.example.com\"]}}";
    send(o, fetch, sign(from, other_fetch))
        .await
        .expect_status(403);
    let once = sign(from, fetch);
    send(o, fetch, once.clone()).await.expect_status(200);
    send(o, fetch, once).await.expect_status(403);
    let answer = "{\"answer\":{\"site\":[\"k8.example.com\"],\"answer\":{\"type\":\"http01\",\"token\":\"t\",\"key_authorization\":\"forged\"}}}";
    let r = send(o, answer, sign(from, answer)).await;
    r.expect_status(403);
    assert!(String::from_utf8_lossy(&r.body).contains("orderer"));
    // From the orderer, an answer is given for the CA for ten minutes (by
    // hoard's clock), then no longer.
    let by_orderer = ["n1", "n2"][o];
    send(other, answer, sign(by_orderer, answer))
        .await
        .expect_status(200);
    let challenge = || async {
        t.client(&nodes[other])
            .get("/.well-known/acme-challenge/t")
            .hdr("Host", "k8.example.com")
            .send()
            .await
    };
    challenge().await.expect_status(200).expect_body("forged");
    t.clock.advance(std::time::Duration::from_secs(601));
    challenge().await.expect_status(404);
    origin.finish().await;
}

// m00009: with a Redis bus the orderer also keeps the certificate there
// (its key sealed); a member restarted with nothing stored while the
// orderer is down takes it from the bus: no order, the same certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00009_a_member_takes_the_certificate_from_the_bus_while_the_orderer_is_down() {
    let t = Test::new("m00009");
    let plan = Pebble::plan(t.dir());
    let redis = hoard_testkit::redis::RedisServer::start(t.dir()).await;
    let origin = t.origin().start().await;
    let bus = hoard_proxy::config::cluster::BusConfig {
        url: redis.url(),
        prefix: "m00009".into(),
        max_age: std::time::Duration::from_secs(3600),
        on_loss: hoard_proxy::config::cluster::OnBusLoss::Revalidate,
    };
    let c = AcmeCluster::new(&t, &plan, "k9.example.com", Some(bus));
    let start =
        |i: usize| super::i_cluster::member(&t, &origin, &c.members, i, 0, |_| {}, &*c.tune);
    let mut nodes = vec![start(0).await, start(1).await];
    let st = t.client(nodes[0].admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    let o = match v["acme"]["certificates"][0]["orderer"].as_str() {
        Some("n1") => 0,
        _ => 1,
    };
    let other = 1 - o;
    // The CA is not up yet: the orderer's first order fails; then it
    // validates at the orderer itself.
    nodes[o].wait_counter("acme_failures", 1).await;
    let pebble = plan.start(c.ports[o], c.tls_ports[o], 0).await;
    t.clock.advance(std::time::Duration::from_secs(61));
    nodes[o].wait_counter("acme_certificates_issued", 1).await;
    let root = pebble.issuing_root().await;
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], c.tls_ports[i]));
    let issued = presented(at(o), "k9.example.com", &root).await;

    // Both stop; the other member loses what it stored and starts alone.
    let restarted = nodes.remove(other);
    restarted.stop().await;
    nodes.pop().unwrap().stop().await;
    std::fs::remove_dir_all(t.dir().join(format!("n{}/acme", other + 1))).unwrap();
    let node = start(other).await;
    node.wait_counter("acme_certificates_from_bus", 1).await;
    assert_eq!(node.counter("acme_orders"), 0, "nothing ordered again");
    assert_eq!(presented(at(other), "k9.example.com", &root).await, issued);
    let stored = t
        .dir()
        .join(format!("n{}/acme/k9.example.com/key.pem", other + 1));
    assert!(stored.exists(), "{}", stored.display());
    let st = t.client(node.admin()).get("/status").send().await;
    let v: serde_json::Value = serde_json::from_slice(&st.body).unwrap();
    assert_eq!(v["acme"]["from_bus"], 1, "{v}");
    assert!(v["acme"]["certificates"][0]["not_after"].is_string(), "{v}");
    origin.finish().await;
}

// m00010: the challenge follows what is reachable: with a plain listener
// hoard answers HTTP-01 first, but the CA cannot reach it (its HTTP-01
// port leads nowhere, as when a firewall closes 80); the failed
// validation is reported, and the retry answers TLS-ALPN-01 on the TLS
// listener and gets the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00010_a_failed_http01_validation_falls_back_to_tls_alpn01() {
    let t = Test::new("m00010");
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(t.dir(), free_port(), tls_port).await;
    let origin = t.origin().start().await;
    let proxy = acme_proxy(
        &t,
        &origin,
        &pebble,
        http_port,
        tls_port,
        &[&["f10.example.com"]],
    )
    .await;
    proxy.wait_counter("acme_failures", 1).await;
    let acme = |v: serde_json::Value| v["acme"]["certificates"][0].clone();
    let status = || async {
        let st = t.client(proxy.admin()).get("/status").send().await;
        serde_json::from_slice::<serde_json::Value>(&st.body).unwrap()
    };
    let first = acme(status().await);
    let error = first["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("http-01"), "{first}");
    assert_eq!(first["challenge"], "tls-alpn-01", "{first}");
    t.clock.advance(std::time::Duration::from_secs(61));
    proxy.wait_counter("acme_certificates_issued", 1).await;
    assert_eq!(proxy.counter("acme_orders"), 2);
    assert_eq!(
        proxy.counter("acme_challenges_answered"),
        0,
        "HTTP-01 never reached"
    );
    let root = pebble.issuing_root().await;
    let tls = SocketAddr::from(([127, 0, 0, 1], tls_port));
    connect_tls(tls, "f10.example.com", &root).await.unwrap();
    let done = acme(status().await);
    assert!(done["last_error"].is_null(), "{done}");
    assert_eq!(
        done["challenge"], "tls-alpn-01",
        "the one that worked is kept: {done}"
    );
    origin.finish().await;
}

// m00011: each TLS listener presents the certificates of its own `acme`
// list: SNI for a name of another listener gets this listener's first
// certificate (the client's check fails), as nginx's default server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m00011_each_listener_presents_its_own_certificates() {
    let t = Test::new("m00011");
    let (http_port, tls_a, tls_b) = (free_port(), free_port(), free_port());
    let pebble = Pebble::start(t.dir(), http_port, tls_a).await;
    let origin = t.origin().start().await;
    let dir = t.dir().to_path_buf();
    let ca = (pebble.directory.as_str(), pebble.api_root.as_path());
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            acme_sites(c, ca, &dir, Some(http_port), tls_a, &[&["a11.example.com"]]);
            let mut b = c.listeners[1].clone();
            b.address = SocketAddr::from(([127, 0, 0, 1], tls_b));
            b.acme = vec![vec!["b11.example.com".into()]];
            c.listeners.push(b);
        })
        .start()
        .await;
    proxy.wait_counter("acme_certificates_issued", 2).await;
    let root = pebble.issuing_root().await;
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let a = presented(at(tls_a), "a11.example.com", &root).await;
    let b = presented(at(tls_b), "b11.example.com", &root).await;
    assert_ne!(a, b);
    for (port, name) in [(tls_a, "b11.example.com"), (tls_b, "a11.example.com")] {
        let e = connect_tls(at(port), name, &root).await.err();
        assert!(
            e.as_deref().is_some_and(|e| e.contains("certificate")),
            "{name} on port {port}: {e:?}"
        );
    }
    origin.finish().await;
}
