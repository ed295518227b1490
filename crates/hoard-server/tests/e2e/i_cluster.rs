//! i: a cluster of hoard instances on loopback in front of one strict
//! origin: each object fetched once whichever node a request lands on,
//! forwarded to its owner (bytes crossing the hop before the fill ends,
//! hit-for-pass, slices, a route's cluster key), hot keys kept near, and a
//! forged peer field not trusted.

use std::sync::Arc;

use hoard_testkit::Test;

use crate::cluster::{
    body_of, cluster, cluster_sized, origin_serving_once, own_entry, owner_of, status, total,
};

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
                s.txresp_fresh(600, body_of("/burst")).await;
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
                s.serve_fresh(p, 600, big(p)).await;
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
