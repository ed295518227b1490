//! s (ops): what operators read is what happened: a cluster purge's answer
//! counts every member's objects, a discovered node shows the address its
//! members reach it at, and a forwarded request carries every hop's `Via`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hoard_config::cluster::Discovery;
use hoard_config::{ClusterConfig, Member};
use hoard_testkit::dns::Dns;
use hoard_testkit::{Origin, Test, TestProxy};

use crate::cluster::{body_of, member, owner_of, status};

const SECRET: &[u8] = b"a secret of the test cluster";

/// `n` ports free on every one of `ips`, from this case's own block of 16
/// below the kernel's ephemeral range (as the `i` and `j` cases take
/// theirs): `s1IJJJ` → 25000 + 16·(8·(I) + JJJ).
fn ports(t: &Test, n: usize, ips: &[Ipv4Addr]) -> Vec<u16> {
    let case: u16 = t.name()[1..].parse().expect("an sNNNNN case");
    let (item, number) = (case / 1000 - 10, case % 1000);
    let base = 25_000 + 16 * (8 * item + number);
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

/// Three members n1..n3 on loopback, each knowing all, with admin
/// listeners and `Via: 1.1 hoard-nI`.
async fn three(t: &Test, origin: &Origin) -> Vec<TestProxy> {
    let members: Vec<Member> = ports(t, 3, &[Ipv4Addr::LOCALHOST])
        .into_iter()
        .enumerate()
        .map(|(i, p)| Member {
            name: format!("n{}", i + 1),
            addr: SocketAddr::from(([127, 0, 0, 1], p)),
            weight: 1.0,
        })
        .collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(member(t, origin, &members, i, 8 << 20, |_| {}, &|_, _| {}).await);
    }
    nodes
}

/// A path of `/x/N` that member `owner` (n1 is 0) of three owns.
fn owned_by(owner: usize) -> String {
    (0..200)
        .map(|k| format!("/x/{k}"))
        .find(|p| owner_of(p, 3) == owner)
        .unwrap()
}

// s12001: a purge sent to a node that holds no copy, of an object its
// owner holds: the answer counts the owner's object in `purged` and lists
// every member with its own count and state.
#[tokio::test]
async fn s12001_a_cluster_purge_counts_every_members_objects() {
    let t = Test::new("s12001");
    let path = owned_by(1);
    let origin = crate::cluster::origin_serving_versions(&t, &path, &["v1"]).await;
    let nodes = three(&t, &origin).await;
    // n1 forwards to n2, the owner, which stores it; n1 keeps no copy (a
    // near copy takes two requests).
    t.client(&nodes[0])
        .get(&path)
        .send()
        .await
        .expect_body("v1");
    let r = crate::admin::purge(
        &t,
        &nodes[0],
        &format!(r#"{{"url": "http://localhost{path}"}}"#),
    )
    .await;
    r.expect_status(200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["purged"], 1, "{v}");
    assert_eq!(
        v["members"],
        serde_json::json!([
            { "node": "n1", "state": "acked", "purged": 0 },
            { "node": "n2", "state": "acked", "purged": 1 },
            { "node": "n3", "state": "acked", "purged": 0 },
        ]),
        "{v}"
    );
    // The map of states stays as it was.
    assert_eq!(v["nodes"]["n2"], "acked", "{v}");
    nodes[1].expect_counter("purged_objects", 1);
    origin.finish().await;
}

// s12002: a member that is down: its state says so and its count is
// `null` (not known), the total counts the members that answered.
#[tokio::test]
async fn s12002_a_member_that_did_not_answer_has_no_count() {
    let t = Test::new("s12002");
    let path = owned_by(0);
    let origin = crate::cluster::origin_serving_versions(&t, &path, &["v1"]).await;
    let mut nodes = three(&t, &origin).await;
    t.client(&nodes[1])
        .get(&path)
        .send()
        .await
        .expect_body("v1");
    nodes.pop().unwrap().stop().await;
    let r = crate::admin::purge(&t, &nodes[1], r#"{"host": "localhost"}"#).await;
    let v: serde_json::Value = serde_json::from_slice(&r.expect_status(200).body).unwrap();
    assert_eq!(v["purged"], 1, "{v}");
    assert_eq!(
        v["members"][2],
        serde_json::json!({ "node": "n3", "state": "unreachable", "purged": null }),
        "{v}"
    );
    assert_eq!(v["members"][0]["purged"], 1, "{v}");
    origin.finish().await;
}

/// A node of a cluster whose members come from the A records of
/// `hoard.test` on `dns`, listening on `addr`.
async fn dns_node(t: &Test, origin: &Origin, dns: &Dns, name: &str, addr: SocketAddr) -> TestProxy {
    let mut c = ClusterConfig::new(name, Vec::new(), SECRET.to_vec());
    c.discovery = Discovery::Dns {
        name: "hoard.test".into(),
        port: addr.port(),
        resolver: Some(dns.addr()),
        refresh: Duration::from_millis(100),
    };
    t.proxy()
        .origin(origin)
        .admin()
        .config(move |cfg| {
            cfg.listeners[0].address = addr;
            cfg.cluster = Some(c);
        })
        .start()
        .await
}

// s13001: with members from DNS, each node's `/status` shows its own
// address as its members reach it (the one DNS gave), not `0.0.0.0:0`.
#[tokio::test]
async fn s13001_a_discovered_node_shows_its_own_address() {
    let t = Test::new("s13001");
    let ips = [Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)];
    let port = ports(&t, 1, &ips)[0];
    let dns = Dns::start().await;
    dns.set_a("hoard.test", &ips);
    let origin = t.origin().start().await;
    let addr = |i: usize| SocketAddr::from((ips[i], port));
    let n1 = dns_node(&t, &origin, &dns, "n1", addr(0)).await;
    let n2 = dns_node(&t, &origin, &dns, "n2", addr(1)).await;
    for (i, n) in [&n1, &n2].into_iter().enumerate() {
        n.wait_counter("cluster_members_joined", 1).await;
        // The view is made again once this node found its own address.
        let addrs = loop {
            let st = status(&t, n).await;
            let addrs: Vec<(String, String)> = st["cluster"]["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let s = |k: &str| m[k].as_str().unwrap().to_string();
                    (s("name"), s("addr"))
                })
                .collect();
            if addrs.iter().all(|(_, a)| a != "0.0.0.0:0") {
                break addrs;
            }
            let asked = dns.queries();
            dns.wait_queries(asked + 2).await;
            assert!(
                asked < 200,
                "still 0.0.0.0:0 after {asked} lookups: {addrs:?}"
            );
        };
        let own = &addrs
            .iter()
            .find(|(m, _)| *m == format!("n{}", i + 1))
            .unwrap()
            .1;
        assert_eq!(*own, addr(i).to_string(), "{addrs:?}");
    }
    origin.finish().await;
}

// s13002: a request forwarded to its owner reaches the origin with both
// hops' `Via`, the forwarder's first (RFC 9110 §7.6.3: each proxy appends
// its own); the client sees the response's hops in the same order.
#[tokio::test]
async fn s13002_a_forwarded_request_carries_every_hops_via() {
    let t = Test::new("s13002");
    let path = owned_by(1);
    let origin = t
        .origin()
        .script({
            let path = path.clone();
            move |mut s| async move {
                let req = s.rxreq().await;
                req.expect_url(&path);
                // One field line: an origin that reads one line of a
                // field (as many do) sees both hops.
                assert_eq!(
                    req.header_all("via"),
                    ["1.1 hoard-n1, 1.1 hoard-n2"],
                    "Via at the origin"
                );
                s.txresp_fresh(600, body_of(&path)).await;
            }
        })
        .start()
        .await;
    let nodes = three(&t, &origin).await;
    let r = t.client(&nodes[0]).get(&path).send().await;
    r.expect_status(200).expect_body(body_of(&path));
    nodes[1].expect_counter("cluster_owner_fills", 1);
    origin.finish().await;
}

/// The JSON access log's lines once `n` have been written, parsed.
async fn json_lines(proxy: &TestProxy, log: &std::path::Path, n: u64) -> Vec<serde_json::Value> {
    proxy.wait_counter("access_log_lines", n).await;
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The keys of a JSON object, sorted.
fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

// s14001: the JSON access-log line docs/operations.md shows (a hit) has
// the keys of a real hit's line, no more and no fewer; a miss's line adds
// only keys the text after the example names.
#[tokio::test]
async fn s14001_the_documented_json_log_line_is_a_real_ones_shape() {
    let t = Test::new("s14001");
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .unwrap();
    let section = doc
        .split("**`json`**")
        .nth(1)
        .and_then(|s| s.split("```json\n").nth(1))
        .expect("the JSON example under **`json`**");
    let (example, after) = section.split_once('\n').unwrap();
    let after = after
        .split("\n\n")
        .nth(1)
        .expect("the text after the example");
    let example: serde_json::Value = serde_json::from_str(example).unwrap();
    let origin = t.origin().script_fresh("/a.jpg?x=1", 60, "a").start().await;
    let log = t.dir().join("access.log");
    let proxy = {
        let log = log.clone();
        t.proxy()
            .origin(&origin)
            .config(move |c| c.access_log.target = hoard_config::LogTarget::File(log))
            .start()
            .await
    };
    for _ in 0..2 {
        t.client(&proxy)
            .get("/a.jpg?x=1")
            .send()
            .await
            .expect_body("a");
    }
    let lines = json_lines(&proxy, &log, 2).await;
    let (miss, hit) = (&lines[0], &lines[1]);
    assert_eq!(hit["cache"], "hit");
    assert_eq!(keys(hit), keys(&example), "{hit}");
    assert_eq!(hit["protocol"], "HTTP/1.1", "{hit}");
    let documented = keys(&example);
    for k in keys(miss).iter().filter(|k| !documented.contains(k)) {
        assert!(
            after.contains(&format!("`{k}`")),
            "`{k}` of {miss} not named in: {after}"
        );
    }
    origin.finish().await;
}

// s14002: members share an object only for the same Host: one path asked
// of two members with one Host is one origin request; with each member's
// own address as the Host (port included) it is two objects, two
// requests.
#[tokio::test]
async fn s14002_members_share_an_object_only_for_the_same_host() {
    let t = Test::new("s14002");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for host in ["example.com", "", ""] {
                let req = s.rxreq().await;
                if !host.is_empty() {
                    req.expect_header("host", host);
                }
                let url = req.url().to_string();
                s.txresp_fresh(600, body_of(&url)).await;
            }
        })
        .start()
        .await;
    let nodes = three(&t, &origin).await;
    for n in &nodes[..2] {
        t.client(n)
            .get("/same")
            .hdr("Host", "example.com")
            .send()
            .await
            .expect_body(body_of("/same"));
    }
    assert_eq!(origin.requests(), 1);
    for n in &nodes[..2] {
        let own = hoard_testkit::Endpoint::endpoint(n).to_string();
        t.client(n)
            .get("/each")
            .hdr("Host", &own)
            .send()
            .await
            .expect_body(body_of("/each"));
    }
    assert_eq!(origin.requests(), 3, "one object per Host");
    origin.finish().await;
}

// s14003: a WebSocket over HTTP/2 (extended CONNECT) is logged as what the
// client was sent: method CONNECT, status 200 (an HTTP/1.1 one: 101).
#[tokio::test]
async fn s14003_an_http2_tunnel_is_logged_as_connect_200() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let t = Test::new("s14003");
    let (addr, _seen) = crate::h_websocket::site().await;
    let log = t.dir().join("access.log");
    let proxy = {
        let log = log.clone();
        t.proxy()
            .upstream(|u| u.servers = vec![hoard_config::ServerAddr::http(addr.to_string())])
            .config(move |c| {
                c.listeners[0].tls = Some(hoard_config::TlsConfig {
                    cert: crate::h_websocket::fixture("server.pem"),
                    key: crate::h_websocket::fixture("server.key"),
                });
                c.access_log.target = hoard_config::LogTarget::File(log);
            })
            .start()
            .await
    };
    let mut send = crate::h_websocket::h2(&proxy).await;
    let mut ws = crate::h_websocket::websocket(&mut send).await;
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
    drop(ws);
    proxy.wait_counter("tunnels_closed", 1).await;
    // The page h2() fetched first, then the tunnel.
    let lines = json_lines(&proxy, &log, 2).await;
    let tunnel = &lines[1];
    assert_eq!(tunnel["method"], "CONNECT", "{tunnel}");
    assert_eq!(tunnel["status"], 200, "{tunnel}");
    assert_eq!(tunnel["protocol"], "HTTP/2.0", "{tunnel}");
    assert!(
        tunnel["tunnel_bytes_to_origin"].as_u64().unwrap() > 0,
        "{tunnel}"
    );
}
