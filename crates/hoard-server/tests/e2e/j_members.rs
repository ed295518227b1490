//! j: membership from what the site runs (DNS records the test controls,
//! Redis heartbeats), joins that do not storm the origin, and a parent tier.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hoard_config::cluster::{Discovery, Tier};
use hoard_config::{ClusterConfig, Member};
use hoard_testkit::dns::Dns;
use hoard_testkit::redis::RedisServer;
use hoard_testkit::{Origin, Test, TestProxy};

use crate::cluster::{acks, body_of, owner_of, status, total};

const SECRET: &[u8] = b"a secret of the test cluster";

/// `n` ports of this case's block free on every one of `ips`.
fn ports(t: &Test, n: usize, ips: &[Ipv4Addr]) -> Vec<u16> {
    let case: u16 = t.name()[1..].parse().expect("a jNNNNN case");
    let base = 23_000 + 16 * case;
    let free: Vec<u16> = (base..base + 16)
        .filter(|p| {
            let held: Vec<_> = ips
                .iter()
                .filter_map(|ip| std::net::TcpListener::bind((*ip, *p)).ok())
                .collect();
            held.len() == ips.len()
        })
        .take(n)
        .collect();
    assert_eq!(free.len(), n, "free ports in this case's block");
    free
}

/// A node named `name` listening on `addr`, in the cluster `cluster`.
async fn node(t: &Test, origin: &Origin, addr: SocketAddr, cluster: ClusterConfig) -> TestProxy {
    let log = t.dir().join(format!("access-{}.log", cluster.node));
    let zone = t.dir().join(format!("zone-{}", cluster.node));
    t.proxy()
        .origin(origin)
        .admin()
        .config(move |c| {
            // HOARD_TEST_STORE=disk: a zone of its own per node.
            for z in &mut c.cache.zones {
                for d in &mut z.dirs {
                    d.path = zone.clone();
                }
            }
            c.access_log.target = hoard_config::LogTarget::File(log);
            c.listeners[0].address = addr;
            c.server.via = format!("hoard-{}", cluster.node);
            c.cluster = Some(cluster);
        })
        .start()
        .await
}

fn dns_cluster(name: &str, dns: &Dns, target: &str, port: u16) -> ClusterConfig {
    let mut c = ClusterConfig::new(name, Vec::new(), SECRET.to_vec());
    c.discovery = Discovery::Dns {
        name: target.into(),
        port,
        resolver: Some(dns.addr()),
        refresh: Duration::from_millis(100),
    };
    c.rampup = Duration::from_secs(60);
    c.purge_timeout = Duration::from_millis(500);
    c
}

/// The members' names in a node's `/status`.
async fn names(t: &Test, n: &TestProxy) -> Vec<String> {
    let st = status(t, n).await;
    let mut v: Vec<String> = st["cluster"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// An origin that answers each of `paths` once, in any order, with
/// [`body_of`] and `max-age=600`.
async fn origin_serving_each_once(t: &Test, paths: &[String]) -> Origin {
    let mut left: HashSet<String> = paths.iter().cloned().collect();
    t.origin()
        .script(move |mut s| async move {
            while !left.is_empty() {
                let req = s.rxreq().await;
                let url = req.url().to_string();
                assert!(left.remove(&url), "{url} asked twice, or never expected");
                assert_eq!(
                    req.header("hoard-peer"),
                    None,
                    "a peer field reached the origin"
                );
                s.txresp_fresh(600, body_of(&url)).await;
            }
        })
        .start()
        .await
}

// j00008: members from DNS A records (a headless Service): two nodes find
// each other; a third that appears in DNS joins every view and takes its
// keys; one removed from DNS leaves every view, and its keys go to their
// second choices.
#[tokio::test]
async fn j00008_dns_members_join_and_leave() {
    let t = Test::new("j00008");
    let ips = [
        Ipv4Addr::new(127, 0, 0, 2),
        Ipv4Addr::new(127, 0, 0, 3),
        Ipv4Addr::new(127, 0, 0, 4),
    ];
    let port = ports(&t, 1, &ips)[0];
    let dns = Dns::start().await;
    dns.set_a("hoard.test", &ips[..2]);
    // Owned by n3 once it is in, and by a first member before.
    let path = (0..200)
        .map(|k| format!("/d/{k}"))
        .find(|p| owner_of(p, 3) == 2)
        .unwrap();
    let origin = origin_serving_each_once(&t, std::slice::from_ref(&path)).await;
    let addr = |i: usize| SocketAddr::from((ips[i], port));
    let n1 = node(
        &t,
        &origin,
        addr(0),
        dns_cluster("n1", &dns, "hoard.test", port),
    )
    .await;
    let n2 = node(
        &t,
        &origin,
        addr(1),
        dns_cluster("n2", &dns, "hoard.test", port),
    )
    .await;
    n1.wait_counter("cluster_members_joined", 1).await;
    n2.wait_counter("cluster_members_joined", 1).await;
    assert_eq!(names(&t, &n1).await, ["n1", "n2"]);

    dns.set_a("hoard.test", &ips);
    let n3 = node(
        &t,
        &origin,
        addr(2),
        dns_cluster("n3", &dns, "hoard.test", port),
    )
    .await;
    for n in [&n1, &n2, &n3] {
        n.wait_counter("cluster_members_joined", 2).await;
        assert_eq!(names(&t, n).await, ["n1", "n2", "n3"]);
    }
    // n3 owns the path now: n1 forwards it there, n2 then finds n3's copy.
    t.client(&n1)
        .get(&path)
        .send()
        .await
        .expect_body(body_of(&path));
    t.client(&n2)
        .get(&path)
        .send()
        .await
        .expect_body(body_of(&path));
    assert_eq!(origin.requests(), 1);
    assert_eq!(n3.counter("cluster_owner_fills"), 1, "n3 fetched its key");
    let st = status(&t, &n1).await;
    let n3_addr = st["cluster"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "n3")
        .unwrap()["addr"]
        .clone();
    assert_eq!(n3_addr, addr(2).to_string());

    // n2 is removed from DNS: n1 and n3 drop it.
    dns.set_a("hoard.test", &[ips[0], ips[2]]);
    n1.wait_counter("cluster_members_left", 1).await;
    n3.wait_counter("cluster_members_left", 1).await;
    assert_eq!(names(&t, &n1).await, ["n1", "n3"]);
    // A purge is acknowledged by the members there are now.
    let r = crate::admin::purge(&t, &n1, r#"{"host": "localhost"}"#).await;
    let acked = acks(&r);
    assert_eq!(
        acked.keys().cloned().collect::<Vec<_>>(),
        ["n1", "n3"],
        "{acked:?}"
    );
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    // A failed resolution keeps the view.
    dns.set_a("hoard.test", &[]);
    n1.wait_counter("cluster_discovery_errors", 1).await;
    let asked = dns.queries();
    dns.wait_queries(asked + 4).await;
    assert_eq!(names(&t, &n1).await, ["n1", "n3"]);
    origin.finish().await;
}

// j00009: a fourth node joins a warm cluster of three (SRV records, as
// Consul or a headless Service's named port give): every key that moved to
// it is asked of its previous owner first, so the origin sees no request
// for the 40 warm objects after the join.
#[tokio::test]
async fn j00009_a_join_to_a_warm_cluster_does_not_storm_the_origin() {
    let t = Test::new("j00009");
    let p = ports(&t, 4, &[Ipv4Addr::LOCALHOST]);
    let dns = Dns::start().await;
    let srv = "_http._tcp.hoard.test";
    let targets: Vec<(String, u16)> = (0..4).map(|i| (format!("n{}.test", i + 1), p[i])).collect();
    let set = |n: usize| {
        let t: Vec<(&str, u16)> = targets[..n].iter().map(|(h, p)| (h.as_str(), *p)).collect();
        dns.set_srv(srv, &t);
    };
    set(3);
    let paths: Vec<String> = (0..40).map(|i| format!("/w/{i}")).collect();
    let origin = origin_serving_each_once(&t, &paths).await;
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let cfg = |i: usize| dns_cluster(&format!("n{}", i + 1), &dns, srv, 0);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(node(&t, &origin, at(i), cfg(i)).await);
    }
    for n in &nodes {
        n.wait_counter("cluster_members_joined", 2).await;
    }
    for path in &paths {
        t.client(&nodes[0])
            .get(path)
            .send()
            .await
            .expect_body(body_of(path));
    }
    assert_eq!(origin.requests(), 40);

    set(4);
    nodes.push(node(&t, &origin, at(3), cfg(3)).await);
    for n in &nodes {
        n.wait_counter("cluster_members_joined", 3).await;
    }
    let moved: Vec<&String> = paths.iter().filter(|p| owner_of(p, 4) == 3).collect();
    assert!(moved.len() >= 5, "{} of 40 keys moved", moved.len());
    for n in [&nodes[3], &nodes[1]] {
        for path in &paths {
            t.client(n)
                .get(path)
                .send()
                .await
                .expect_body(body_of(path));
        }
    }
    // Not one more origin request: each moved key came from its previous owner.
    assert_eq!(origin.requests(), 40);
    assert_eq!(nodes[3].counter("cluster_rampup_hits"), moved.len() as u64);
    assert_eq!(nodes[3].counter("cluster_rampup_misses"), 0);
    assert_eq!(nodes[3].counter("cluster_owner_fills"), 0);
    let st = status(&t, &nodes[3]).await;
    assert!(st["cluster"]["rampup_until_ms"].as_u64().is_some(), "{st}");
    origin.finish().await;
}

// j00010: a parent tier: two edge nodes send the misses they own to the
// parent that owns the key (two parents, a cluster of their own); each of
// ten objects asked of both edges reaches the origin once for the whole
// two-tier cluster; a purge taken by an edge is acknowledged by the
// parents too, and nothing old is served after it.
#[tokio::test]
async fn j00010_a_parent_tier_fetches_each_object_once() {
    let t = Test::new("j00010");
    let p = ports(&t, 4, &[Ipv4Addr::LOCALHOST]);
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let member = |name: &str, i: usize| Member {
        name: name.into(),
        addr: at(i),
        weight: 1.0,
    };
    let edges = vec![member("e1", 0), member("e2", 1)];
    let parents = vec![member("p1", 2), member("p2", 3)];
    let paths: Vec<String> = (0..10).map(|i| format!("/t/{i}")).collect();
    // The ten objects in order (the test asks sequentially), then /t/0
    // again after the purge, in a new version.
    let origin = {
        let expected = paths.clone();
        t.origin()
            .script(move |mut s| async move {
                for (path, body) in expected
                    .iter()
                    .map(|p| (p.clone(), body_of(p)))
                    .chain([("/t/0".to_string(), format!("{} v2", body_of("/t/0")))])
                {
                    let req = s.rxreq().await;
                    req.expect_url(&path);
                    assert_eq!(
                        req.header("hoard-peer"),
                        None,
                        "a peer field reached the origin"
                    );
                    s.txresp_fresh(600, body).await;
                }
            })
            .start()
            .await
    };
    let mut nodes = Vec::new();
    for (i, m) in edges.iter().enumerate() {
        let mut c = ClusterConfig::new(&m.name, edges.clone(), SECRET.to_vec());
        c.tiers = vec![Tier {
            name: "shield".into(),
            members: parents.clone(),
        }];
        c.purge_timeout = Duration::from_millis(500);
        nodes.push(node(&t, &origin, at(i), c).await);
    }
    for (i, m) in parents.iter().enumerate() {
        let c = ClusterConfig::new(&m.name, parents.clone(), SECRET.to_vec());
        nodes.push(node(&t, &origin, at(2 + i), c).await);
    }
    let (edge, parent) = nodes.split_at(2);
    for n in edge.iter().chain(edge) {
        for path in &paths {
            t.client(n)
                .get(path)
                .send()
                .await
                .expect_body(body_of(path));
        }
    }
    assert_eq!(
        origin.requests(),
        10,
        "one origin fetch per object for both tiers"
    );
    assert_eq!(
        total(edge, "cluster_owner_fills"),
        0,
        "edges never went to the origin"
    );
    assert_eq!(total(edge, "cluster_parent_fills"), 10);
    assert_eq!(total(parent, "cluster_owner_fills"), 10);
    // Every parent answered only the keys it owns among the parents.
    for (i, pn) in parent.iter().enumerate() {
        let owned = paths
            .iter()
            .filter(|path| {
                use hoard_cluster::ring::{owner, Slot};
                let slots = [Slot::new("p1", 1.0), Slot::new("p2", 1.0)];
                owner(&slots, format!("http|localhost|{path}").as_bytes(), |_| {
                    true
                }) == Some(i)
            })
            .count() as u64;
        assert_eq!(pn.counter("cluster_owner_fills"), owned, "p{}", i + 1);
    }
    // A purge on an edge reaches both tiers.
    let r = crate::admin::purge(&t, &edge[0], r#"{"url": "http://localhost/t/0"}"#).await;
    let acked = acks(&r);
    assert_eq!(
        acked.keys().cloned().collect::<Vec<_>>(),
        ["e1", "e2", "p1", "p2"],
        "{acked:?}"
    );
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    for n in edge {
        t.client(n)
            .get("/t/0")
            .send()
            .await
            .expect_body(format!("{} v2", body_of("/t/0")));
    }
    assert_eq!(origin.requests(), 11);
    origin.finish().await;
}

// j00011: members from heartbeats in the bus's Redis: two nodes that know
// only the bus find each other, route to each other and acknowledge purges
// through the log.
#[tokio::test]
async fn j00011_redis_heartbeats_make_the_member_list() {
    let t = Test::new("j00011");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let p = ports(&t, 2, &[Ipv4Addr::LOCALHOST]);
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let path = (0..200)
        .map(|k| format!("/h/{k}"))
        .find(|p| owner_of(p, 2) == 1)
        .unwrap();
    let origin = origin_serving_each_once(&t, std::slice::from_ref(&path)).await;
    let mut nodes = Vec::new();
    for i in 0..2 {
        let mut c = ClusterConfig::new(&format!("n{}", i + 1), Vec::new(), SECRET.to_vec());
        let mut bus = hoard_config::cluster::bus(&redis.url()).unwrap();
        bus.prefix = "hoard-j11".into();
        c.bus = Some(bus);
        c.discovery = Discovery::Redis {
            advertise: at(i),
            refresh: Duration::from_millis(100),
            ttl: Duration::from_secs(2),
        };
        c.rampup = Duration::ZERO;
        nodes.push(node(&t, &origin, at(i), c).await);
    }
    for n in &nodes {
        n.wait_counter("cluster_members_joined", 1).await;
        n.wait_counter("cluster_bus_caught_up", 1).await;
    }
    t.client(&nodes[0])
        .get(&path)
        .send()
        .await
        .expect_body(body_of(&path));
    assert_eq!(nodes[1].counter("cluster_owner_fills"), 1, "n2 owns it");
    let r = crate::admin::purge(&t, &nodes[0], r#"{"host": "localhost"}"#).await;
    let acked = acks(&r);
    assert_eq!(acked.len(), 2, "{acked:?}");
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    origin.finish().await;
}

// j00012: a member that appears is routed to only once it has caught up
// with the log: a third node that starts while the bus is down answers
// probes but has applied nothing, so the others leave it out; once the bus
// is back it reads the log, and they take it in.
#[tokio::test]
async fn j00012_a_member_behind_the_log_is_not_routed_to() {
    let t = Test::new("j00012");
    let mut redis = RedisServer::start(&t.dir().join("redis")).await;
    let p = ports(&t, 3, &[Ipv4Addr::LOCALHOST]);
    let dns = Dns::start().await;
    let srv = "_http._tcp.hoard.test";
    let targets: Vec<(String, u16)> = (0..3).map(|i| (format!("n{}.test", i + 1), p[i])).collect();
    let all: Vec<(&str, u16)> = targets.iter().map(|(h, p)| (h.as_str(), *p)).collect();
    dns.set_srv(srv, &all[..2]);
    let origin = t.origin().start().await;
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let url = redis.url();
    let cfg = |i: usize| {
        let mut c = dns_cluster(&format!("n{}", i + 1), &dns, srv, 0);
        let mut bus = hoard_config::cluster::bus(&url).unwrap();
        bus.prefix = "hoard-j12".into();
        c.bus = Some(bus);
        c
    };
    let n1 = node(&t, &origin, at(0), cfg(0)).await;
    let n2 = node(&t, &origin, at(1), cfg(1)).await;
    for n in [&n1, &n2] {
        n.wait_counter("cluster_members_joined", 1).await;
        n.wait_counter("cluster_bus_caught_up", 1).await;
    }
    // A purge: the log has an entry both applied.
    let r = crate::admin::purge(&t, &n1, r#"{"host": "localhost"}"#).await;
    assert!(acks(&r).values().all(|v| v == "acked"), "{:?}", acks(&r));

    redis.stop();
    dns.set_srv(srv, &all);
    let n3 = node(&t, &origin, at(2), cfg(2)).await;
    // Probed, answering, and left out: it has applied nothing.
    n1.wait_counter("cluster_members_not_ready", 2).await;
    n2.wait_counter("cluster_members_not_ready", 2).await;
    assert_eq!(names(&t, &n1).await, ["n1", "n2"]);
    assert_eq!(n3.counter("cluster_bus_caught_up"), 0);

    redis.restart().await;
    n3.wait_counter("cluster_bus_caught_up", 1).await;
    n1.wait_counter("cluster_members_joined", 2).await;
    n2.wait_counter("cluster_members_joined", 2).await;
    assert_eq!(names(&t, &n1).await, ["n1", "n2", "n3"]);
    origin.finish().await;
}

// j00013: both tiers on one invalidation log: a purge taken by an edge is
// an entry every edge and every parent applies and acknowledges (the
// answer names all four and the entry); afterwards neither tier serves the
// old body, so the edge's refetch through the parent gets the new one.
#[tokio::test]
async fn j00013_both_tiers_apply_purges_from_one_log() {
    let t = Test::new("j00013");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let p = ports(&t, 4, &[Ipv4Addr::LOCALHOST]);
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let member = |name: &str, i: usize| Member {
        name: name.into(),
        addr: at(i),
        weight: 1.0,
    };
    let edges = vec![member("e1", 0), member("e2", 1)];
    let parents = vec![member("p1", 2), member("p2", 3)];
    let origin = crate::cluster::origin_serving_versions(&t, "/l", &["old", "new"]).await;
    let mut bus = hoard_config::cluster::bus(&redis.url()).unwrap();
    bus.prefix = "hoard-j13".into();
    let mut nodes = Vec::new();
    for (i, m) in edges.iter().chain(&parents).enumerate() {
        let tier = if i < 2 { &edges } else { &parents };
        let mut c = ClusterConfig::new(&m.name, tier.clone(), SECRET.to_vec());
        if i < 2 {
            c.tiers = vec![Tier {
                name: "shield".into(),
                members: parents.clone(),
            }];
        }
        c.bus = Some(bus.clone());
        c.purge_timeout = Duration::from_secs(2);
        nodes.push(node(&t, &origin, at(i), c).await);
    }
    for n in &nodes {
        n.wait_counter("cluster_bus_caught_up", 1).await;
    }
    for n in &nodes[..2] {
        t.client(n).get("/l").send().await.expect_body("old");
    }
    let r = crate::admin::purge(&t, &nodes[0], r#"{"url": "http://localhost/l"}"#).await;
    let acked = acks(&r);
    assert_eq!(
        acked.keys().cloned().collect::<Vec<_>>(),
        ["e1", "e2", "p1", "p2"],
        "{acked:?}"
    );
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(v["entry"].as_str().is_some(), "{v}");
    for n in &nodes[1..] {
        n.wait_counter("cluster_bus_applied", 1).await;
    }
    for n in &nodes[..2] {
        t.client(n).get("/l").send().await.expect_body("new");
    }
    assert_eq!(origin.requests(), 2, "one fetch per version for both tiers");
    origin.finish().await;
}

/// An `EndpointSliceList` of `ready` and not-ready addresses on `port`
/// (named `http`).
fn slices(port: u16, ready: &[Ipv4Addr], not_ready: &[Ipv4Addr]) -> String {
    let endpoint = |ip: &Ipv4Addr, r: bool| serde_json::json!({"addresses": [ip.to_string()], "conditions": {"ready": r}});
    let endpoints: Vec<_> = ready
        .iter()
        .map(|ip| endpoint(ip, true))
        .chain(not_ready.iter().map(|ip| endpoint(ip, false)))
        .collect();
    serde_json::json!({
        "kind": "EndpointSliceList",
        "apiVersion": "discovery.k8s.io/v1",
        "items": [{
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9100}, {"name": "http", "port": port}],
            "endpoints": endpoints
        }]
    })
    .to_string()
}

// j00014: members from the Kubernetes API: the ready endpoints of a
// Service's EndpointSlices (a fake API server that checks the path, the
// label selector and the bearer token). A not-ready endpoint is left out
// until the API says it is ready; then every node routes to it.
#[tokio::test]
async fn j00014_kubernetes_endpoint_slices_make_the_member_list() {
    use hoard_config::cluster::KubernetesSource;
    let t = Test::new("j00014");
    let ips = [
        Ipv4Addr::new(127, 0, 0, 2),
        Ipv4Addr::new(127, 0, 0, 3),
        Ipv4Addr::new(127, 0, 0, 4),
    ];
    let port = ports(&t, 1, &ips)[0];
    let list = std::sync::Arc::new(parking_lot::Mutex::new(slices(port, &ips[..2], &ips[2..])));
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    let api = {
        let (list, stop) = (list.clone(), stop.clone());
        t.origin()
            .script(move |mut s| async move {
                let mut stopping = false;
                loop {
                    // Once the nodes are stopped, a discovery task that has
                    // not seen it yet may still ask: answered, until none
                    // has asked for a second.
                    let req = if stopping {
                        match tokio::time::timeout(Duration::from_secs(1), s.rxreq()).await {
                            Ok(r) => r,
                            Err(_) => return,
                        }
                    } else {
                        tokio::select! {
                            r = s.rxreq() => r,
                            () = stop.notified() => {
                                stopping = true;
                                continue;
                            }
                        }
                    };
                    req.expect_url(
                        "/apis/discovery.k8s.io/v1/namespaces/edge/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dhoard-peers",
                    );
                    assert_eq!(req.header("authorization").as_deref(), Some("Bearer the-token"));
                    let body = list.lock().clone();
                    s.txresp(200)
                        .hdr("Content-Type", "application/json")
                        .body(body)
                        .send()
                        .await;
                }
            })
            .start()
            .await
    };
    let token = t.dir().join("token");
    std::fs::write(&token, "the-token\n").unwrap();
    let origin = t.origin().start().await;
    let cfg = |name: &str| {
        let mut c = ClusterConfig::new(name, Vec::new(), SECRET.to_vec());
        c.discovery = Discovery::Kubernetes(KubernetesSource {
            api: format!("http://{}", api.addr()),
            namespace: "edge".into(),
            service: "hoard-peers".into(),
            port: Some("http".into()),
            token_file: token.clone(),
            ca_file: t.dir().join("no-ca.crt"),
            refresh: Duration::from_millis(100),
        });
        c
    };
    let addr = |i: usize| SocketAddr::from((ips[i], port));
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(node(&t, &origin, addr(i), cfg(&format!("n{}", i + 1))).await);
    }
    for n in &nodes[..2] {
        n.wait_counter("cluster_members_joined", 1).await;
    }
    // n3 runs and answers probes, but the API says it is not ready.
    let before = api.requests();
    api.wait_requests(before + 6).await;
    assert_eq!(names(&t, &nodes[0]).await, ["n1", "n2"]);
    assert_eq!(names(&t, &nodes[1]).await, ["n1", "n2"]);

    *list.lock() = slices(port, &ips, &[]);
    for n in &nodes {
        n.wait_counter("cluster_members_joined", 2).await;
        assert_eq!(names(&t, n).await, ["n1", "n2", "n3"]);
    }
    let st = status(&t, &nodes[0]).await;
    assert_eq!(st["cluster"]["discovery"], "kubernetes");
    for n in nodes {
        n.stop().await;
    }
    stop.notify_one();
    api.finish().await;
    origin.finish().await;
}

// j00015: Redis restarted empty under two members that find each other by
// heartbeat: the first to read the new, empty list sees only itself, and
// must not drop the other (whose entry is missing, not old: it has not had
// the chance to write again). Neither leaves.
#[tokio::test]
async fn j00015_redis_back_empty_keeps_the_members() {
    let t = Test::new("j00015");
    let mut redis = RedisServer::start(&t.dir().join("redis")).await;
    let p = ports(&t, 2, &[Ipv4Addr::LOCALHOST]);
    let at = |i: usize| SocketAddr::from(([127, 0, 0, 1], p[i]));
    let origin = t.origin().start().await;
    let mut nodes = Vec::new();
    for i in 0..2 {
        let mut c = ClusterConfig::new(&format!("n{}", i + 1), Vec::new(), SECRET.to_vec());
        let mut bus = hoard_config::cluster::bus(&redis.url()).unwrap();
        bus.prefix = "hoard-j15".into();
        c.bus = Some(bus);
        c.discovery = Discovery::Redis {
            advertise: at(i),
            refresh: Duration::from_millis(50),
            ttl: Duration::from_secs(2),
        };
        c.rampup = Duration::ZERO;
        nodes.push(node(&t, &origin, at(i), c).await);
    }
    for n in &nodes {
        n.wait_counter("cluster_members_joined", 1).await;
        n.wait_counter("cluster_bus_caught_up", 1).await;
    }
    redis.restart_empty().await;
    // Each node reads the new list a few times: the first read of the
    // first node saw only itself.
    for n in &nodes {
        let reads = n.counter("cluster_discovery_reads");
        n.wait_counter("cluster_discovery_reads", reads + 4).await;
    }
    for n in &nodes {
        n.expect_counter("cluster_members_left", 0);
        assert_eq!(names(&t, n).await, ["n1", "n2"]);
    }
    origin.finish().await;
}
