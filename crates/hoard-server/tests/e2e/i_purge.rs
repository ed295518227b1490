//! i: purges in a cluster: every member acknowledges, the members that did
//! not are named, and a purge racing a fill on the owner wins.

use hoard_testkit::Test;

use crate::cluster::{acks, cluster, cluster_with, origin_serving_versions, owner_of, total};

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
    let r = crate::admin::purge(&t, &nodes[1], r#"{"url": "http://localhost/p"}"#).await;
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
    let r = crate::admin::purge(&t, &nodes[0], r#"{"tag": "news"}"#).await;
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
                s.txresp_fresh(600, "old").await;
                s.serve_fresh(&path, 600, "new").await;
            })
            .start()
            .await
    };
    let nodes = cluster(&t, &origin, 3).await;
    let pending = t.client(&nodes[0]).get(&path).spawn();
    origin.wait_requests(1).await;
    let r = crate::admin::purge(
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
