//! ACME against a real CA as the cases run it: Debian's `pebble` (Let's
//! Encrypt's test CA) and `pebble-challtestsrv` as the DNS that points the
//! test names at 127.0.0.1, both started on free loopback ports and
//! stopped by process id; TLS clients that trust only pebble's root; a
//! proxy configured for ACME.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use hoard_testkit::Test;
use http_body_util::{BodyExt, Empty};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

pub(crate) use hoard_testkit::free_port;

/// A child process killed (by its id) when dropped.
pub(crate) struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pebble and its DNS, the CA's own HTTPS certified by a test CA.
pub(crate) struct Pebble {
    pub(crate) directory: String,
    pub(crate) management: u16,
    /// The root of pebble's own HTTPS (for the ACME client).
    pub(crate) api_root: std::path::PathBuf,
    pub(crate) _dns: Kill,
    pub(crate) _ca: Kill,
}

impl Pebble {
    /// Starts pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port` of 127.0.0.1.
    pub(crate) async fn start(dir: &Path, http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_with(dir, http_port, tls_port, 0).await
    }

    /// As `start`, issuing certificates valid for `validity` seconds (0:
    /// pebble's default, five years).
    pub(crate) async fn start_with(
        dir: &Path,
        http_port: u16,
        tls_port: u16,
        validity: u64,
    ) -> Pebble {
        Pebble::plan(dir).start(http_port, tls_port, validity).await
    }

    /// Its addresses and its HTTPS root, chosen before it starts (so that
    /// proxies can be configured first).
    pub(crate) fn plan(dir: &Path) -> PebblePlan {
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
pub(crate) struct PebblePlan {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) directory: String,
    pub(crate) acme: u16,
    pub(crate) management: u16,
    pub(crate) api_root: std::path::PathBuf,
    pub(crate) cert: std::path::PathBuf,
    pub(crate) key: std::path::PathBuf,
}

impl PebblePlan {
    /// Starts it validating HTTP-01 on `http_port` and TLS-ALPN-01 on
    /// `tls_port`, issuing for `validity` seconds (0: five years).
    pub(crate) async fn start(self, http_port: u16, tls_port: u16, validity: u64) -> Pebble {
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
            crate::admin::which("pebble"),
            crate::admin::which("pebble-challtestsrv"),
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
    pub(crate) async fn issuing_root(&self) -> CertificateDer<'static> {
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
pub(crate) async fn connect_tls(
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
pub(crate) async fn get_over_tls(
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
pub(crate) fn acme_config(
    c: &mut hoard_config::Config,
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
pub(crate) fn acme_sites(
    c: &mut hoard_config::Config,
    ca: (&str, &Path),
    dir: &Path,
    http_port: Option<u16>,
    tls_port: u16,
    certs: &[&[&str]],
) {
    let acme_listener = hoard_config::ListenerConfig {
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
pub(crate) async fn acme_proxy(
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

/// The leaf certificate `addr` presents for `name`, trusting `root`.
pub(crate) async fn presented(
    addr: SocketAddr,
    name: &str,
    root: &CertificateDer<'static>,
) -> Vec<u8> {
    let tls = connect_tls(addr, name, root).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The root store of one certificate.
pub(crate) fn roots_of(root: &CertificateDer<'static>) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    roots
}
