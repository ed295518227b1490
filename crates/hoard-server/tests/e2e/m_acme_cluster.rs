//! m: ACME in a cluster (pebble as in `m_acme.rs`): one member orders, any
//! member answers the challenge, all present the certificate; a member
//! takes it from the bus while the orderer is down.

use std::net::SocketAddr;

use hoard_testkit::Test;

use crate::acme::{acme_sites, free_port, presented, Pebble, PebblePlan};

/// Two cluster members, each with its own main listener (the peer
/// channel, and HTTP-01) and an ACME listener for one name; certificates
/// stored under `n1/acme` and `n2/acme` in the test's directory.
struct AcmeCluster {
    ports: [u16; 2],
    tls_ports: [u16; 2],
    members: Vec<hoard_config::cluster::Member>,
    tune: Box<crate::cluster::Tune>,
}

impl AcmeCluster {
    fn new(
        t: &Test,
        plan: &PebblePlan,
        name: &'static str,
        bus: Option<hoard_config::cluster::BusConfig>,
    ) -> AcmeCluster {
        let (ports, tls_ports) = ([free_port(), free_port()], [free_port(), free_port()]);
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, p)| hoard_config::cluster::Member {
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
        let tune = move |i: usize, c: &mut hoard_config::Config| {
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
                hoard_config::ListenerConfig {
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
        nodes.push(crate::cluster::member(&t, &origin, &members, i, 0, |_| {}, &*tune).await);
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
    let key = hoard_cluster::peer_auth::PeerKey::new(b"a secret of the test cluster");
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
    let bus = hoard_config::cluster::BusConfig {
        url: redis.url(),
        prefix: "m00009".into(),
        max_age: std::time::Duration::from_secs(3600),
        on_loss: hoard_config::cluster::OnBusLoss::Revalidate,
    };
    let c = AcmeCluster::new(&t, &plan, "k9.example.com", Some(bus));
    let start = |i: usize| crate::cluster::member(&t, &origin, &c.members, i, 0, |_| {}, &*c.tune);
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
