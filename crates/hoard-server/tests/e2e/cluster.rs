//! A cluster of hoard instances on loopback as the cases build it: members
//! on fixed ports that know each other, the owner of a key, per-node
//! counters and `/status`, and strict origins that serve each path once.

use std::net::SocketAddr;
use std::time::Duration;

use hoard_config::{ClusterConfig, Member};
use hoard_testkit::{Origin, Script, Test, TestProxy};

pub(crate) use crate::admin::status;

/// Starts `n` members named n1..nN, each knowing all (ports picked first),
/// each with its admin listener.
pub(crate) async fn cluster(t: &Test, origin: &Origin, n: usize) -> Vec<TestProxy> {
    cluster_with(t, origin, n, &[]).await
}

/// [`cluster`], with more members (`extra`) that are not started here.
///
/// The members' ports are fixed before they start (each must know the
/// others'), so they are taken below the kernel's ephemeral range
/// (32768 and up on Linux), where neither `bind(:0)` nor outgoing
/// connections pick, from a block of 16 that is this case's own (by its
/// number, `i000NN` → 21000 + 16·NN), skipping any port in use.
pub(crate) async fn cluster_with(
    t: &Test,
    origin: &Origin,
    n: usize,
    extra: &[SocketAddr],
) -> Vec<TestProxy> {
    cluster_sized(t, origin, n, extra, 8 << 20, |_| {}, &|_, _| {}).await
}

/// Adjusts node `i`'s configuration (after its cluster is set).
pub(crate) type Tune = dyn Fn(usize, &mut hoard_config::Config) + Send + Sync;

/// [`cluster_with`], with a near tier of `near` bytes on every node,
/// every node's route set by `route` and the rest by `tune`.
pub(crate) async fn cluster_sized(
    t: &Test,
    origin: &Origin,
    n: usize,
    extra: &[SocketAddr],
    near: u64,
    route: fn(&mut hoard_config::RouteConfig),
    tune: &Tune,
) -> Vec<TestProxy> {
    // i cases from port 21000, j cases from 23000.
    let (series, case) = t.name().split_at(1);
    let case: u32 = case.parse().expect("an xNNNNN case");
    // Other series from 25000, by the case's last two digits.
    let (base, case) = match series {
        "i" => (21_000, case),
        "j" => (23_000, case),
        _ => (25_000, case % 100),
    };
    let (base, case) = (base as u16, case as u16);
    let mut held = Vec::new();
    for port in (base + 16 * case)..(base + 16 * case + 16) {
        if held.len() == n {
            break;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    assert_eq!(held.len(), n, "free ports in this case's block");
    let mut addrs: Vec<SocketAddr> = held.iter().map(|l| l.local_addr().unwrap()).collect();
    drop(held);
    addrs.extend_from_slice(extra);
    let members: Vec<Member> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| Member {
            name: format!("n{}", i + 1),
            addr: *a,
            weight: 1.0,
        })
        .collect();
    let mut nodes = Vec::new();
    for i in 0..n {
        nodes.push(member(t, origin, &members, i, near, route, tune).await);
    }
    if std::env::var("HOARD_TEST_STORE").as_deref() == Ok("disk") {
        for node in &nodes {
            node.wait_counter("disk_load_done", 1).await;
        }
    }
    nodes
}

/// Starts member `i` of `members` (n1 is 0), as [`cluster_sized`] does.
pub(crate) async fn member(
    t: &Test,
    origin: &Origin,
    members: &[Member],
    i: usize,
    near: u64,
    route: fn(&mut hoard_config::RouteConfig),
    tune: &Tune,
) -> TestProxy {
    let members = members.to_vec();
    let addr = members[i].addr;
    let log = t.dir().join(format!("access-n{}.log", i + 1));
    let zone = t.dir().join(format!("zone-n{}", i + 1));
    t.proxy()
        .origin(origin)
        .admin()
        .route(route)
        .config(move |c| {
            // HOARD_TEST_STORE=disk: a zone of its own per member.
            for z in &mut c.cache.zones {
                for d in &mut z.dirs {
                    d.path = zone.clone();
                }
            }
            c.access_log.target = hoard_config::LogTarget::File(log);
            c.listeners[0].address = addr;
            c.server.via = format!("hoard-n{}", i + 1);
            c.cluster = Some(ClusterConfig {
                node: format!("n{}", i + 1),
                members,
                secret: b"a secret of the test cluster".to_vec(),
                owner_connect_timeout: Duration::from_millis(200),
                owner_read_timeout: Duration::from_secs(10),
                purge_timeout: Duration::from_millis(500),
                near_cache_size: near,
                near_admit_after: 2,
                grace: Duration::from_secs(5),
                bus: None,
                discovery: hoard_config::cluster::Discovery::Static,
                rampup: Duration::ZERO,
                tiers: Vec::new(),
            });
            tune(i, c);
        })
        .start()
        .await
}

/// The member list of a cluster's nodes (n1 first).
pub(crate) fn members_of(nodes: &[TestProxy]) -> Vec<Member> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| Member {
            name: format!("n{}", i + 1),
            addr: hoard_testkit::Endpoint::endpoint(n),
            weight: 1.0,
        })
        .collect()
}

pub(crate) fn total(nodes: &[TestProxy], counter: &str) -> u64 {
    nodes.iter().map(|n| n.counter(counter)).sum()
}

pub(crate) fn body_of(path: &str) -> String {
    format!("body of {path}")
}

/// Answers one request for each of `paths`, in that order, with
/// [`body_of`] and `max-age=600`; a peer field must never reach it.
pub(crate) async fn serve_each_once(s: &mut Script, paths: &[String]) {
    for p in paths {
        let req = s.rxreq().await;
        req.expect_url(p);
        assert_eq!(
            req.header("hoard-peer"),
            None,
            "a peer field reached the origin"
        );
        s.txresp_fresh(600, body_of(p)).await;
    }
}

/// An origin that answers `path` once with each of `bodies`, in that
/// order (`max-age=600`): one new version per request.
pub(crate) async fn origin_serving_versions(
    t: &Test,
    path: &str,
    bodies: &[&'static str],
) -> Origin {
    let (path, bodies) = (path.to_string(), bodies.to_vec());
    t.origin()
        .script(move |mut s| async move {
            for v in bodies {
                s.serve_fresh(&path, 600, v).await;
            }
        })
        .start()
        .await
}

/// An origin that expects each of `paths` exactly once, in that order.
pub(crate) async fn origin_serving_once(t: &Test, paths: &[String]) -> Origin {
    let paths = paths.to_vec();
    t.origin()
        .script(move |mut s| async move { serve_each_once(&mut s, &paths).await })
        .start()
        .await
}

/// The `nodes` map of a purge answer.
pub(crate) fn acks(r: &hoard_testkit::Response) -> serde_json::Map<String, serde_json::Value> {
    r.expect_status(200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("purge answer is JSON");
    v["nodes"].as_object().expect("a nodes map").clone()
}

/// The member that owns `path` (as `localhost` over plain HTTP) among n1..nN.
pub(crate) fn owner_of(path: &str, members: usize) -> usize {
    use hoard_cluster::ring::{owner, Slot};
    let slots: Vec<Slot> = (1..=members)
        .map(|i| Slot::new(&format!("n{i}"), 1.0))
        .collect();
    owner(&slots, format!("http|localhost|{path}").as_bytes(), |_| {
        true
    })
    .unwrap()
}

/// The last `Cache-Status` entry: this node's.
pub(crate) fn own_entry(r: &hoard_testkit::Response) -> String {
    r.header_all("cache-status")
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .next_back()
        .expect("a Cache-Status entry")
        .to_string()
}
