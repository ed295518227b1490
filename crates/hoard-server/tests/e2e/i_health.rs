//! i: a cluster whose members fail: a dead or frozen owner costs no client
//! error, a node that stood still revalidates what it stored, health is
//! ignored when most members look down, and the dashboard shows the
//! members.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hoard_testkit::Test;

use crate::cluster::{
    body_of, cluster, cluster_with, origin_serving_once, owner_of, serve_each_once, status, total,
};

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
                s.txresp_fresh(600, body_of(&slow)).await;
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
            s.txresp_fresh_etag(600, "\"g1\"", "g").await;
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
    let shown = crate::admin::settled_dashboard(&t, &nodes[0]).await;
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
