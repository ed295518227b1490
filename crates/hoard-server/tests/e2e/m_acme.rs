//! m: automatic HTTPS over ACME against a real CA: Debian's `pebble` (Let's
//! Encrypt's test CA) and `pebble-challtestsrv` as the DNS that points the
//! test names at 127.0.0.1, both started by each case on free loopback
//! ports and stopped by process id.
//!
//! One proxy: HTTP-01 and TLS-ALPN-01, an unreachable CA, the redirect to
//! HTTPS, renewal, a certificate per site, reloads, and each listener's own
//! certificates.

use std::net::SocketAddr;

use bytes::Bytes;
use hoard_testkit::{Endpoint, Test};
use http_body_util::Empty;

use crate::acme::{
    acme_config, acme_proxy, acme_sites, connect_tls, free_port, get_over_tls, presented, roots_of,
    Pebble,
};

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
                s.txresp_no_store("secure").await;
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
            s.txresp_no_store("alpn").await;
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
        .script_fresh("/plain", 60, "still here")
        .start()
        .await;
    let dead = free_port();
    let dir = t.dir().to_path_buf();
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(move |c| {
            c.listeners.push(hoard_config::ListenerConfig {
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
    let page = crate::admin::settled_dashboard(&t, &proxy).await;
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
            s.txresp_no_store("over https").await;
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
                s.txresp_no_store("r").await;
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
                s.txresp_fresh(60, "site").await;
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
    let page = crate::admin::settled_dashboard(&t, &proxy).await;
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
