//! i: a cluster of hoard instances on loopback in front of one strict
//! origin: each object fetched once whichever node a request lands on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hoard_proxy::config::{ClusterConfig, Member};
use hoard_testkit::{Origin, Script, Test, TestProxy};

/// Starts `n` members named n1..nN, each knowing all (ports picked first),
/// each with its admin listener.
async fn cluster(t: &Test, origin: &Origin, n: usize) -> Vec<TestProxy> {
    cluster_with(t, origin, n, &[]).await
}

/// [`cluster`], with more members (`extra`) that are not started here.
///
/// The members' ports are fixed before they start (each must know the
/// others'), so they are taken below the kernel's ephemeral range
/// (32768 and up on Linux), where neither `bind(:0)` nor outgoing
/// connections pick, from a block of 16 that is this case's own (by its
/// number, `i000NN` → 21000 + 16·NN), skipping any port in use.
async fn cluster_with(t: &Test, origin: &Origin, n: usize, extra: &[SocketAddr]) -> Vec<TestProxy> {
    cluster_sized(t, origin, n, extra, 8 << 20, |_| {}, &|_, _| {}).await
}

/// Adjusts node `i`'s configuration (after its cluster is set).
pub(crate) type Tune = dyn Fn(usize, &mut hoard_proxy::config::Config) + Send + Sync;

/// [`cluster_with`], with a near tier of `near` bytes on every node,
/// every node's route set by `route` and the rest by `tune`.
pub(crate) async fn cluster_sized(
    t: &Test,
    origin: &Origin,
    n: usize,
    extra: &[SocketAddr],
    near: u64,
    route: fn(&mut hoard_proxy::config::RouteConfig),
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
    route: fn(&mut hoard_proxy::config::RouteConfig),
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
            c.access_log.target = hoard_proxy::config::LogTarget::File(log);
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
                discovery: hoard_proxy::config::cluster::Discovery::Static,
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
async fn serve_each_once(s: &mut Script, paths: &[String]) {
    for p in paths {
        let req = s.rxreq().await;
        req.expect_url(p);
        assert_eq!(
            req.header("hoard-peer"),
            None,
            "a peer field reached the origin"
        );
        s.txresp(200)
            .hdr("Cache-Control", "max-age=600")
            .body(body_of(p))
            .send()
            .await;
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
                s.rxreq().await.expect_url(&path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(v)
                    .send()
                    .await;
            }
        })
        .start()
        .await
}

/// An origin that expects each of `paths` exactly once, in that order.
async fn origin_serving_once(t: &Test, paths: &[String]) -> Origin {
    let paths = paths.to_vec();
    t.origin()
        .script(move |mut s| async move { serve_each_once(&mut s, &paths).await })
        .start()
        .await
}

// i00001: twelve objects, each asked of every node in turn: the origin sees
// each once; the nodes that do not own a key forward it to the owner, which
// fills once and answers the other from its cache.
#[tokio::test]
async fn i00001_each_object_is_fetched_once_per_cluster() {
    let t = Test::new("i00001");
    let paths: Vec<String> = (0..12).map(|i| format!("/obj/{i}")).collect();
    let origin = origin_serving_once(&t, &paths).await;
    let nodes = cluster(&t, &origin, 3).await;
    let mut two_hops = 0;
    for p in &paths {
        for (i, n) in nodes.iter().enumerate() {
            let r = t.client(n).get(p).send().await;
            r.expect_status(200).expect_body(body_of(p));
            // RFC 9211: one entry per cache, the one nearest the origin
            // first: the owner's, then this node's.
            let entries: Vec<&str> = r
                .header_all("cache-status")
                .into_iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .collect();
            let me = format!("hoard-n{};", i + 1);
            assert!(entries.last().unwrap().starts_with(&me), "{entries:?}");
            assert!(entries.len() <= 2, "{entries:?}");
            if entries.len() == 2 {
                assert!(!entries[0].starts_with(&me), "{entries:?}");
                two_hops += 1;
            }
        }
    }
    assert_eq!(
        two_hops, 24,
        "every forwarded response names its owner first"
    );
    // The access log names the owner of each request that went to one.
    for (i, n) in nodes.iter().enumerate() {
        let lines = 12 + n.counter("cluster_peer_requests");
        n.wait_counter("access_log_lines", lines).await;
        let text = std::fs::read_to_string(t.dir().join(format!("access-n{}.log", i + 1))).unwrap();
        let owners: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["owner"].as_str().map(str::to_string)
            })
            .collect();
        assert_eq!(
            owners.len() as u64,
            n.counter("cluster_forwarded"),
            "{text}"
        );
        assert!(
            owners.iter().all(|o| *o != format!("n{}", i + 1)),
            "{owners:?}"
        );
    }
    // Per key: the two nodes that do not own it forward once each.
    assert_eq!(total(&nodes, "cluster_forwarded"), 24);
    assert_eq!(total(&nodes, "cluster_peer_requests"), 24);
    assert_eq!(total(&nodes, "cluster_forward_retries"), 0);
    // Every node owns a share.
    for n in &nodes {
        assert!(n.counter("cluster_peer_requests") > 0, "a node owns no key");
    }
    origin.finish().await;
}

// i00002: a cold burst of 30 requests for one key, spread over all nodes,
// makes one origin request: each node collapses its own misses into one
// fill, the owner collapses the forwarded ones with its own.
#[tokio::test]
async fn i00002_a_cold_burst_across_nodes_is_one_origin_request() {
    let t = Test::new("i00002");
    let go = Arc::new(tokio::sync::Notify::new());
    let origin = {
        let go = go.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url("/burst");
                go.notified().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body_of("/burst"))
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let nodes = cluster(&t, &origin, 3).await;
    let mut pending = Vec::new();
    for i in 0..30 {
        pending.push(t.client(&nodes[i % 3]).get("/burst").spawn());
    }
    // Every request has arrived and waits (10 per node) before the origin answers.
    for n in &nodes {
        n.wait_counter("requests_total", 10 + n.counter("cluster_peer_requests"))
            .await;
    }
    origin.wait_requests(1).await;
    go.notify_one();
    for p in pending {
        p.await
            .unwrap()
            .expect_status(200)
            .expect_body(body_of("/burst"));
    }
    // The two other nodes forwarded one fill each.
    assert_eq!(total(&nodes, "cluster_forwarded"), 2);
    origin.finish().await;
}

// i00003: a member dies (stopped: its port refuses connections); requests
// for every key keep coming to the others: each is answered, the dead
// owner's keys go to their second choice, and each object is still
// fetched once.
#[tokio::test]
async fn i00003_a_dead_owner_costs_no_client_error() {
    let t = Test::new("i00003");
    let paths: Vec<String> = (0..12).map(|i| format!("/k/{i}")).collect();
    let origin = origin_serving_once(&t, &paths).await;
    let mut nodes = cluster(&t, &origin, 3).await;
    let dead = nodes.remove(1);
    dead.stop().await;
    for p in &paths {
        for n in &nodes {
            t.client(n)
                .get(p)
                .send()
                .await
                .expect_status(200)
                .expect_body(body_of(p));
        }
    }
    assert!(
        total(&nodes, "cluster_forward_retries") > 0,
        "no key of the dead member was asked for"
    );
    assert_eq!(total(&nodes, "client_errors"), 0);
    origin.finish().await;
}

// i00004: a client cannot pose as a peer: a forged peer field is removed
// and counted, the request is routed like any other (forwarded to the
// owner when this node does not own the key), and no peer field reaches
// the origin.
#[tokio::test]
async fn i00004_a_forged_peer_field_is_not_trusted() {
    let t = Test::new("i00004");
    let paths: Vec<String> = (0..6).map(|i| format!("/f/{i}")).collect();
    let origin = origin_serving_once(&t, &paths).await;
    let nodes = cluster(&t, &origin, 3).await;
    let now = t
        .clock
        .now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for p in &paths {
        t.client(&nodes[0])
            .get(p)
            .hdr("hoard-peer", format!("n2 {now} http {}", "ab".repeat(32)))
            .send()
            .await
            .expect_status(200)
            .expect_body(body_of(p));
    }
    nodes[0].expect_counter("cluster_peer_refused", 6);
    // Keys n1 does not own still went to their owners, signed by n1.
    assert_eq!(
        nodes[0].counter("cluster_forwarded"),
        total(&nodes[1..], "cluster_peer_requests")
    );
    assert!(nodes[0].counter("cluster_forwarded") > 0);
    origin.finish().await;
}

/// The `nodes` map of a purge answer.
pub(crate) fn acks(r: &hoard_testkit::Response) -> serde_json::Map<String, serde_json::Value> {
    r.expect_status(200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("purge answer is JSON");
    v["nodes"].as_object().expect("a nodes map").clone()
}

// i00005: a purge sent to one node is applied on every member (each held
// a copy: the owner's, and the copies the others stored from it), each
// acknowledges, and afterwards no node serves the old body.
#[tokio::test]
async fn i00005_a_purge_reaches_and_is_acked_by_every_member() {
    let t = Test::new("i00005");
    let origin = origin_serving_versions(&t, "/p", &["v1", "v2"]).await;
    let nodes = cluster(&t, &origin, 3).await;
    // Twice on each node: a non-owner keeps a near copy of a key it
    // forwarded twice.
    for n in nodes.iter().chain(&nodes) {
        t.client(n).get("/p").send().await.expect_body("v1");
    }
    assert_eq!(total(&nodes, "cluster_near_stored"), 2);
    let r = crate::o_ops::purge(&t, &nodes[1], r#"{"url": "http://localhost/p"}"#).await;
    let acked = acks(&r);
    assert_eq!(acked.len(), 3, "{acked:?}");
    for name in ["n1", "n2", "n3"] {
        assert_eq!(acked[name], "acked", "{acked:?}");
    }
    // Every node held a copy and removed it.
    for n in &nodes {
        assert!(n.counter("purged_objects") >= 1, "a node kept its copy");
    }
    for n in &nodes {
        t.client(n).get("/p").send().await.expect_body("v2");
    }
    // A client cannot use the members' purge endpoint.
    t.client(&nodes[0])
        .post("/.hoard/cluster/purge")
        .body(r#"{"selector":{"host":"localhost"},"soft":false}"#)
        .send()
        .await
        .expect_status(403);
    t.client(&nodes[0]).get("/p").send().await.expect_body("v2");
    origin.finish().await;
}

// i00006: a purge while one member is down and another is frozen (it
// accepts connections and never answers): the answer comes within the
// purge timeout and names them `unreachable` and `timeout`; the live
// members acknowledge.
#[tokio::test]
async fn i00006_a_purge_names_the_members_that_did_not_ack() {
    let t = Test::new("i00006");
    let origin = t.origin().start().await;
    let frozen = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frozen_addr = frozen.local_addr().unwrap();
    // Accepts and holds every connection, says nothing.
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = frozen.accept().await {
            held.push(s);
        }
    });
    let mut nodes = cluster_with(&t, &origin, 3, &[frozen_addr]).await;
    let down = nodes.remove(2);
    down.stop().await;
    let r = crate::o_ops::purge(&t, &nodes[0], r#"{"tag": "news"}"#).await;
    let acked = acks(&r);
    assert_eq!(acked["n1"], "acked", "{acked:?}");
    assert_eq!(acked["n2"], "acked", "{acked:?}");
    assert_eq!(acked["n3"], "unreachable", "{acked:?}");
    assert_eq!(acked["n4"], "timeout", "{acked:?}");
    nodes[0].expect_counter("cluster_purge_not_acked", 2);
    // /status shows the members and what the purge found.
    let status: serde_json::Value =
        serde_json::from_slice(&t.client(nodes[0].admin()).get("/status").send().await.body)
            .unwrap();
    let cluster = &status["cluster"];
    assert_eq!(cluster["node"], "n1");
    assert_eq!(cluster["members"].as_array().unwrap().len(), 4);
    assert_eq!(cluster["purges_not_acked"], 2);
    nodes[1].expect_counter("purges_tag", 1);
    holder.abort();
    origin.finish().await;
}

/// The member that owns `path` (as `localhost` over plain HTTP) among n1..nN.
pub(crate) fn owner_of(path: &str, members: usize) -> usize {
    use hoard_proxy::cluster::ring::{owner, Slot};
    let slots: Vec<Slot> = (1..=members)
        .map(|i| Slot::new(&format!("n{i}"), 1.0))
        .collect();
    owner(&slots, format!("http|localhost|{path}").as_bytes(), |_| {
        true
    })
    .unwrap()
}

// i00007: a frozen member (its port accepts, nothing answers) owns some
// keys: requests for them on a live node wait only until the probes find it
// down, then go to the second choice; a slow origin behind a live owner is
// waited for (no second fetch), however long it takes.
#[tokio::test]
async fn i00007_a_frozen_owner_is_told_from_a_slow_one() {
    let t = Test::new("i00007");
    let frozen_keys: Vec<String> = (0..200)
        .map(|i| format!("/z/{i}"))
        .filter(|p| owner_of(p, 4) == 3)
        .take(3)
        .collect();
    let slow = (0..200)
        .map(|i| format!("/slow/{i}"))
        .find(|p| owner_of(p, 4) == 1)
        .unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let origin = {
        let (keys, slow, release) = (frozen_keys.clone(), slow.clone(), release.clone());
        t.origin()
            .script(move |mut s| async move {
                serve_each_once(&mut s, &keys).await;
                s.rxreq().await.expect_url(&slow);
                release.notified().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body_of(&slow))
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let frozen = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frozen_addr = frozen.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = frozen.accept().await {
            held.push(s);
        }
    });
    let nodes = cluster_with(&t, &origin, 3, &[frozen_addr]).await;
    for p in &frozen_keys {
        t.client(&nodes[0])
            .get(p)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect_status(200)
            .expect_body(body_of(p));
    }
    nodes[0].expect_counter("cluster_members_down", 1);
    assert!(nodes[0].counter("cluster_forward_retries") >= 1);
    let retries = nodes[0].counter("cluster_forward_retries");

    // The slow origin: n2 fills while n1 waits; n1's probes of n2 keep
    // answering, so nothing moves to another member.
    let waiting = t
        .client(&nodes[0])
        .get(&slow)
        .timeout(Duration::from_secs(20))
        .spawn();
    origin.wait_requests(frozen_keys.len() + 1).await;
    // More probe rounds than it took to find the frozen member down pass
    // while the origin holds the answer (n1 and n3 each probe n2).
    let answered = nodes[1].counter("cluster_probes_answered");
    nodes[1]
        .wait_counter("cluster_probes_answered", answered + 4 * 2)
        .await;
    release.notify_one();
    waiting
        .await
        .unwrap()
        .expect_status(200)
        .expect_body(body_of(&slow));
    nodes[0].expect_counter("cluster_forward_retries", retries);
    nodes[0].expect_counter("cluster_members_down", 1);
    holder.abort();
    origin.finish().await;
}

// i00008: a node that stood still past the grace period (a frozen process,
// here its wall clock jumping 10 s between two of its ticks) may have
// missed purges: what it stored before is revalidated before it is served
// as fresh again, once, and then served from cache.
#[tokio::test]
async fn i00008_a_node_that_stood_still_revalidates_what_it_stored() {
    let t = Test::new("i00008");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/g");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"g1\"")
                .body("g")
                .send()
                .await;
            let req = s.rxreq().await;
            req.expect_url("/g");
            assert_eq!(req.header("if-none-match").as_deref(), Some("\"g1\""));
            s.txresp(304)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"g1\"")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let nodes = cluster(&t, &origin, 2).await;
    for n in &nodes {
        t.client(n).get("/g").send().await.expect_body("g");
    }
    t.clock.advance(Duration::from_secs(10));
    for n in &nodes {
        n.wait_counter("cluster_fenced", 1).await;
    }
    // Revalidated (through the owner: one conditional request), then fresh.
    for n in &nodes {
        t.client(n)
            .get("/g")
            .send()
            .await
            .expect_status(200)
            .expect_body("g");
    }
    for (i, n) in nodes.iter().enumerate() {
        let r = t.client(n).get("/g").send().await;
        r.expect_body("g");
        let mine = r
            .header_all("cache-status")
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .next_back()
            .unwrap()
            .to_string();
        assert!(
            mine.starts_with(&format!("hoard-n{}; hit", i + 1)),
            "{mine}"
        );
    }
    origin.finish().await;
}

/// `/status` of a node's admin listener.
pub(crate) async fn status(t: &Test, node: &TestProxy) -> serde_json::Value {
    let r = t.client(node.admin()).get("/status").send().await;
    serde_json::from_slice(&r.expect_status(200).body).expect("/status is JSON")
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

// i00009: the near-cache. A node keeps a copy of another member's object
// once it has forwarded the key twice, then serves it itself (`detail=near`);
// keys asked for once are never copied; the copies never exceed the near
// tier's own byte limit, and the owner is asked once per copy.
#[tokio::test]
async fn i00009_hot_keys_are_kept_near_within_their_own_limit() {
    let t = Test::new("i00009");
    // Keys n1 does not own, 8 KiB each; a 64 KiB near tier holds a few.
    let paths: Vec<String> = (0..100)
        .map(|i| format!("/n/{i}"))
        .filter(|p| owner_of(p, 3) != 0)
        .take(24)
        .collect();
    let big = |p: &str| format!("{p}:{}", "x".repeat(8 << 10));
    let served = paths.clone();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            for p in &served {
                s.rxreq().await.expect_url(p);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(big(p))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let nodes = cluster_sized(&t, &origin, 3, &[], 64 << 10, |_| {}, &|_, _| {}).await;
    let n1 = &nodes[0];
    let hot = &paths[0];
    // Forwarded, not kept; forwarded again (a hit on the owner), kept;
    // then served here.
    for kept in [false, true] {
        let r = t.client(n1).get(hot).send().await;
        r.expect_status(200).expect_body(big(hot));
        let mine = own_entry(&r);
        assert!(mine.contains("fwd="), "{mine}");
        assert_eq!(mine.contains("; stored"), kept, "{mine}");
    }
    n1.expect_counter("cluster_near_declined", 1);
    n1.expect_counter("cluster_near_stored", 1);
    for _ in 0..3 {
        let r = t.client(n1).get(hot).send().await;
        r.expect_status(200).expect_body(big(hot));
        let mine = own_entry(&r);
        assert!(
            mine.starts_with("hoard-n1; hit") && mine.contains("detail=near"),
            "{mine}"
        );
    }
    n1.expect_counter("cluster_near_hits", 3);
    n1.expect_counter("cluster_forwarded", 2);
    // Keys asked for once are not copied.
    for p in &paths[1..] {
        t.client(n1).get(p).send().await.expect_body(big(p));
    }
    n1.expect_counter("cluster_near_stored", 1);
    n1.expect_counter("cluster_near_declined", 24);
    // Asked for again, they are; the near tier stays within its limit
    // (older copies are evicted), and the memory tier holds none of them.
    for p in &paths[1..] {
        t.client(n1).get(p).send().await.expect_body(big(p));
        let near = &status(&t, n1).await["cluster"]["near"];
        assert_eq!(near["size"], 64 << 10);
        assert!(near["bytes"].as_u64().unwrap() <= 64 << 10, "{near}");
    }
    n1.expect_counter("cluster_near_stored", 24);
    let st = status(&t, n1).await;
    let near = &st["cluster"]["near"];
    let kept = near["objects"].as_u64().unwrap();
    assert!((1..24).contains(&kept), "{near}");
    assert_eq!(st["memory"]["objects"], 0, "{}", st["memory"]);
    // Every object came from the origin once, through its owner.
    assert_eq!(total(&nodes, "cluster_owner_fills"), 24);
    origin.finish().await;
}

// i00010: most members look down at once (two of three are gone): health
// is ignored rather than piling every key on the one left, so the shares
// stay as they were, and requests for the gone members' keys are still
// answered (their owners refuse, the next choice fills).
#[tokio::test]
async fn i00010_when_most_members_look_down_health_is_ignored() {
    let t = Test::new("i00010");
    let gone: Vec<SocketAddr> = (0..2)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        })
        .collect();
    let paths: Vec<String> = (0..6).map(|i| format!("/m/{i}")).collect();
    let origin = origin_serving_once(&t, &paths).await;
    let nodes = cluster_with(&t, &origin, 1, &gone).await;
    let n1 = &nodes[0];
    n1.wait_counter("cluster_members_down", 2).await;
    let st = status(&t, n1).await;
    let members = st["cluster"]["members"].as_array().unwrap().clone();
    let up: Vec<bool> = members.iter().map(|m| m["up"] == true).collect();
    assert_eq!(up, [true, false, false], "{members:?}");
    for m in &members {
        let share = m["share"].as_f64().unwrap();
        assert!((share - 1.0 / 3.0).abs() < 1e-9, "{members:?}");
    }
    for p in &paths {
        t.client(n1).get(p).send().await.expect_body(body_of(p));
    }
    assert!(paths.iter().any(|p| owner_of(p, 3) != 0));
    assert!(n1.counter("cluster_forward_retries") > 0);
    n1.expect_counter("client_errors", 0);
    origin.finish().await;
}

// i00011: the dashboard (headless Chromium) shows the members with their
// state and share, and the near tier; every figure is the /status value it
// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i00011_the_dashboard_shows_the_members() {
    let t = Test::new("i00011");
    let paths = vec!["/d".to_string()];
    let origin = origin_serving_once(&t, &paths).await;
    let nodes = cluster(&t, &origin, 3).await;
    for n in nodes.iter().chain(&nodes).chain(&nodes) {
        t.client(n)
            .get("/d")
            .send()
            .await
            .expect_body(body_of("/d"));
    }
    let shown = crate::o_ops::settled_dashboard(&t, &nodes[0]).await;
    assert_eq!(shown["cluster.node"], "n1");
    for i in 0..3 {
        let p = format!("cluster.members.{i}.");
        assert_eq!(shown[&format!("{p}name")], format!("n{}", i + 1));
        assert_eq!(shown[&format!("{p}state")], "up");
        let share: f64 = shown[&format!("{p}share")].parse().unwrap();
        assert!((share - 1.0 / 3.0).abs() < 1e-9, "{share}");
    }
    // n1 served its third request from a near copy unless it owns /d.
    let near_hits = u64::from(owner_of("/d", 3) != 0);
    assert_eq!(shown["cluster.near.hits"], near_hits.to_string());
    assert_eq!(shown["cluster.near.objects"], near_hits.to_string());
    origin.finish().await;
}

// i00012: read-while-write across the hop: a waiter on a node that does not
// own the key gets the first bytes of a slow fill before the origin has
// sent the rest, as does a waiter on the owner.
#[tokio::test]
async fn i00012_the_first_bytes_cross_the_hop_before_the_fill_ends() {
    let t = Test::new("i00012");
    let path = (0..100)
        .map(|i| format!("/rw/{i}"))
        .find(|p| owner_of(p, 3) == 1)
        .unwrap();
    let first_seen = t.barrier(2);
    let origin = {
        let (first_seen, path) = (first_seen.clone(), path.clone());
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url(&path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .chunked()
                    .send_head()
                    .await;
                s.chunk("first\n").await;
                // Both clients have the first chunk before the second is sent.
                first_seen.sync().await;
                s.chunk("second\n").await;
                s.end().await;
            })
            .start()
            .await
    };
    let nodes = cluster(&t, &origin, 3).await;
    let mut far = t.client(&nodes[0]).connect().await;
    far.send_raw(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"))
        .await;
    let head = far.read_until(b"first\n").await;
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // A second client, on the owner, joins the same fill.
    let mut near = t.client(&nodes[1]).connect().await;
    near.send_raw(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n"))
        .await;
    near.read_until(b"first\n").await;
    first_seen.sync().await;
    for c in [&mut far, &mut near] {
        let rest = c.read_until(b"0\r\n\r\n").await;
        assert!(rest.windows(7).any(|w| w == b"second\n"));
    }
    nodes[0].expect_counter("cluster_forwarded", 1);
    nodes[1].expect_counter("cluster_owner_fills", 1);
    origin.finish().await;
}

// i00013: a hit-for-pass verdict learned by the owner travels back: the
// node that forwarded an uncacheable answer marks the key too, and its next
// request for it goes straight to the origin, not through the owner.
#[tokio::test]
async fn i00013_hit_for_pass_travels_back_from_the_owner() {
    let t = Test::new("i00013");
    let path = (0..100)
        .map(|i| format!("/hfp/{i}"))
        .find(|p| owner_of(p, 3) == 1)
        .unwrap();
    let origin = {
        let path = path.clone();
        t.origin()
            .script(move |mut s| async move {
                for v in ["a", "b"] {
                    let req = s.rxreq().await;
                    req.expect_url(&path).expect_no_header("hoard-peer");
                    s.txresp(200)
                        .hdr("Cache-Control", "private")
                        .body(v)
                        .send()
                        .await;
                }
            })
            .start()
            .await
    };
    let nodes = cluster(&t, &origin, 3).await;
    t.client(&nodes[0]).get(&path).send().await.expect_body("a");
    nodes[0].expect_counter("cluster_forwarded", 1);
    nodes[0].expect_counter("hit_for_pass_marks", 1);
    nodes[1].expect_counter("hit_for_pass_marks", 1);
    let r = t.client(&nodes[0]).get(&path).send().await;
    r.expect_body("b");
    let entries = r.header_all("cache-status");
    assert_eq!(entries.len(), 1, "only this node's entry: {entries:?}");
    assert!(own_entry(&r).contains("detail=hit-for-pass"), "{entries:?}");
    // Straight to the origin: not forwarded again, never seen by the owner.
    nodes[0].expect_counter("cluster_forwarded", 1);
    nodes[0].expect_counter("hit_for_pass", 1);
    nodes[1].expect_counter("cluster_peer_requests", 1);
    origin.finish().await;
}

// i00014: a purge racing a fill on the owner: the purge (sent to a third
// node) arrives while the owner waits for the origin; every member acks,
// the client that asked gets the answer, and no node keeps it: the next
// requests anywhere fetch the new version.
#[tokio::test]
async fn i00014_a_purge_racing_a_fill_on_the_owner_is_not_stored() {
    let t = Test::new("i00014");
    let path = (0..100)
        .map(|i| format!("/race/{i}"))
        .find(|p| owner_of(p, 3) == 1)
        .unwrap();
    let release = t.barrier(2);
    let origin = {
        let (release, path) = (release.clone(), path.clone());
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url(&path);
                release.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("old")
                    .send()
                    .await;
                s.rxreq().await.expect_url(&path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("new")
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let nodes = cluster(&t, &origin, 3).await;
    let pending = t.client(&nodes[0]).get(&path).spawn();
    origin.wait_requests(1).await;
    let r = crate::o_ops::purge(
        &t,
        &nodes[2],
        &format!(r#"{{"url": "http://localhost{path}"}}"#),
    )
    .await;
    let acked = acks(&r);
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    release.sync().await;
    pending.await.unwrap().expect_body("old");
    nodes[1].wait_counter("purge_raced_fills", 1).await;
    for n in [&nodes[0], &nodes[1], &nodes[2], &nodes[0]] {
        t.client(n).get(&path).send().await.expect_body("new");
    }
    origin.finish().await;
}

// i00015: slices of one file are routed one by one: a whole GET on one node
// has its slices filled by their owners (more than one member), each slice
// fetched once across the cluster, and the same GET on the other nodes is
// answered without the origin.
#[tokio::test]
async fn i00015_slices_of_one_file_spread_over_their_owners() {
    use crate::s_slice::{serve, starts, ETAG, SIZE};
    let t = Test::new("i00015");
    let full = crate::r_range::body(crate::r_range::LEN);
    let origin = t
        .origin()
        .script(|mut s| async move {
            let full = crate::r_range::body(crate::r_range::LEN);
            serve(&mut s, "/v", &full, ETAG, starts(&[0, 1, 2, 3, 4])).await;
        })
        .start()
        .await;
    let nodes = cluster_sized(
        &t,
        &origin,
        3,
        &[],
        8 << 20,
        |r| {
            r.slice = Some(SIZE);
            // As in s_slice: ranges are never fetched alone.
            r.slice_direct_max = 0;
        },
        &|_, _| {},
    )
    .await;
    for n in &nodes {
        t.client(n)
            .get("/v")
            .send()
            .await
            .expect_status(200)
            .expect_body(&full);
    }
    assert_eq!(total(&nodes, "cluster_owner_fills"), 5);
    let filling = nodes
        .iter()
        .filter(|n| n.counter("cluster_owner_fills") > 0)
        .count();
    assert!(filling >= 2, "every slice on one member");
    assert!(nodes[0].counter("cluster_forwarded") >= 1);
    origin.finish().await;
}

// i00016: a route's `cluster_key` chooses owners: with `{ query = "none" }`
// every query of a path has the path's owner, whichever node takes it, while
// each stays an object of its own (the cache key keeps the query).
#[tokio::test]
async fn i00016_a_routes_cluster_key_chooses_the_owner() {
    let t = Test::new("i00016");
    let paths: Vec<String> = (0..6).map(|i| format!("/q?page={i}")).collect();
    let origin = origin_serving_once(&t, &paths).await;
    let nodes = cluster_sized(
        &t,
        &origin,
        3,
        &[],
        8 << 20,
        |r| {
            r.cluster_key = Some(hoard_policy::key::KeyTemplate {
                query: hoard_policy::key::QueryKey::None,
                ..Default::default()
            });
        },
        &|_, _| {},
    )
    .await;
    for (i, p) in paths.iter().enumerate() {
        t.client(&nodes[i % 3])
            .get(p)
            .send()
            .await
            .expect_body(body_of(p));
    }
    // One member (the owner of `/q`) filled all six.
    let owner = owner_of("/q", 3);
    nodes[owner].expect_counter("cluster_owner_fills", 6);
    assert_eq!(total(&nodes, "cluster_owner_fills"), 6);
    assert_eq!(total(&nodes, "cluster_forwarded"), 4);
    origin.finish().await;
}
