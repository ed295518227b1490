//! j: the cluster's invalidation log on a real `redis-server`: purges
//! acknowledged through the log, replayed to a member that missed them,
//! and stored objects revalidated while the bus is lost.

use std::time::Duration;

use hoard_config::cluster::{BusConfig, OnBusLoss};
use hoard_testkit::redis::RedisServer;
use hoard_testkit::{Test, TestProxy};

use crate::cluster::{
    acks, cluster_sized, member, members_of, origin_serving_versions, owner_of, total, Tune,
};

fn bus(redis: &RedisServer) -> BusConfig {
    BusConfig {
        url: redis.url(),
        prefix: "hoard-test".into(),
        max_age: Duration::from_secs(3600),
        on_loss: OnBusLoss::Revalidate,
    }
}

/// Waits until every node has read the log to its end once more than
/// `before` times.
async fn caught_up(nodes: &[TestProxy]) {
    for n in nodes {
        n.wait_counter("cluster_bus_caught_up", 1).await;
    }
}

/// A path owned by member `i` of three.
fn owned_by(i: usize, prefix: &str) -> String {
    (0..200)
        .map(|k| format!("{prefix}{k}"))
        .find(|p| owner_of(p, 3) == i)
        .unwrap()
}

// j00001: a purge through the log: every member applies it from the
// stream and acknowledges; the answer names the entry and every member
// `acked`; no node serves the old body afterwards.
#[tokio::test]
async fn j00001_a_purge_is_acked_by_every_member_through_the_log() {
    let t = Test::new("j00001");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let path = owned_by(0, "/p/");
    let origin = origin_serving_versions(&t, &path, &["old", "new"]).await;
    let url = bus(&redis);
    let tune: &Tune = &move |_, c| c.cluster.as_mut().unwrap().bus = Some(url.clone());
    let nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, tune).await;
    caught_up(&nodes).await;
    // Twice on each node: the others keep near copies.
    for n in nodes.iter().chain(&nodes) {
        t.client(n).get(&path).send().await.expect_body("old");
    }
    let r = crate::admin::purge(
        &t,
        &nodes[1],
        &format!(r#"{{"url": "http://localhost{path}"}}"#),
    )
    .await;
    let acked = acks(&r);
    assert_eq!(acked.len(), 3, "{acked:?}");
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(v["entry"].as_str().is_some_and(|e| e.contains('-')), "{v}");
    // Applied from the log by the two others (n2 applied it itself).
    for n in &nodes {
        n.wait_counter("cluster_bus_applied", 1).await;
    }
    assert!(
        total(&nodes, "purged_objects") >= 3,
        "the owner's and two near copies"
    );
    for n in &nodes {
        t.client(n).get(&path).send().await.expect_body("new");
    }
    // /status shows each member's applied position.
    let st = crate::cluster::status(&t, &nodes[0]).await;
    let positions = st["cluster"]["bus"]["positions"]
        .as_object()
        .unwrap()
        .clone();
    assert_eq!(positions.len(), 3, "{positions:?}");
    // And /metrics how far behind the newest position each one is. The
    // members' positions reach n1 through the log: under load the page
    // can be read before the last of them has, so it is read again until
    // every member shows none behind (a deadline, not a pause).
    let zero = |text: &str| {
        ["n1", "n2", "n3"].iter().all(|n| {
            let entries = format!("hoard_cluster_bus_behind_entries{{member=\"{n}\"}} 0");
            text.lines().any(|l| l == entries)
        })
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let m = t.client(nodes[0].admin()).get("/metrics").send().await;
        let text = String::from_utf8_lossy(&m.body).to_string();
        if zero(&text) || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    for n in ["n1", "n2", "n3"] {
        // Every member applied the one entry: none is behind in entries.
        let entries = format!("hoard_cluster_bus_behind_entries{{member=\"{n}\"}} 0");
        assert!(
            text.lines().any(|l| l == entries),
            "{entries} not in /metrics"
        );
        let series = format!("hoard_cluster_bus_behind_ms{{member=\"{n}\"}} ");
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("{series} not in /metrics"));
        assert!(value.parse::<u64>().is_ok(), "{series}{value}");
    }
    origin.finish().await;
}

// j00002: a member that was down while a purge was taken replays it from
// its persisted cursor when it starts again from its disk zone, before
// serving what it stored as fresh.
#[tokio::test]
async fn j00002_a_restarted_member_replays_what_it_missed() {
    let t = Test::new("j00002");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    // n3 owns it: its copy is on its disk.
    let path = owned_by(2, "/r/");
    let origin = origin_serving_versions(&t, &path, &["old", "new"]).await;
    let url = bus(&redis);
    let dir = t.dir().to_path_buf();
    let tune = move |i: usize, c: &mut hoard_config::Config| {
        c.cluster.as_mut().unwrap().bus = Some(url.clone());
        c.cache.memory_size = 0;
        c.cache.zones = vec![hoard_config::zones::quick_zone(
            dir.join(format!("zone-n{}", i + 1)),
            16 << 20,
            c.cache.max_object_size,
        )];
    };
    let mut nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, &tune).await;
    caught_up(&nodes).await;
    t.client(&nodes[2])
        .get(&path)
        .send()
        .await
        .expect_body("old");
    nodes[2].wait_counter("objects_stored", 1).await;
    let members = members_of(&nodes);
    let n3 = nodes.pop().unwrap();
    n3.stop().await;
    let r = crate::admin::purge(
        &t,
        &nodes[0],
        &format!(r#"{{"url": "http://localhost{path}"}}"#),
    )
    .await;
    let acked = acks(&r);
    assert_eq!(acked["n2"], "acked", "{acked:?}");
    assert_ne!(acked["n3"], "acked", "{acked:?}");
    // n3 again, from its zone and its cursor.
    let n3 = member(&t, &origin, &members, 2, 8 << 20, |_| {}, &tune).await;
    n3.wait_counter("disk_load_done", 1).await;
    n3.wait_counter("cluster_bus_caught_up", 1).await;
    assert!(n3.counter("cluster_bus_replayed") >= 1);
    n3.expect_counter("cluster_bus_generation_bumps", 0);
    t.client(&n3).get(&path).send().await.expect_body("new");
    origin.finish().await;
}

// j00003: a member that lost the bus for longer than the grace period
// revalidates what it stored instead of serving it as fresh; once the bus
// is back and read to its end, its hits are hits again.
#[tokio::test]
async fn j00003_a_member_that_lost_the_bus_revalidates() {
    let t = Test::new("j00003");
    let mut redis = RedisServer::start(&t.dir().join("redis")).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/g");
            s.txresp_fresh_etag(600, "\"g1\"", "g").await;
            // The revalidation while the bus is lost.
            s.rxreq()
                .await
                .expect_url("/g")
                .expect_header("if-none-match", "\"g1\"");
            s.txresp(304).hdr("ETag", "\"g1\"").no_body().send().await;
        })
        .start()
        .await;
    let url = bus(&redis);
    let tune: &Tune = &move |_, c| c.cluster.as_mut().unwrap().bus = Some(url.clone());
    let nodes = cluster_sized(&t, &origin, 1, &[], 8 << 20, |_| {}, tune).await;
    let n1 = &nodes[0];
    caught_up(&nodes).await;
    t.client(n1).get("/g").send().await.expect_body("g");
    let r = t.client(n1).get("/g").send().await;
    r.expect_body("g");
    assert!(crate::cluster::own_entry(&r).contains("hit"));
    redis.stop();
    t.clock.advance(Duration::from_secs(6));
    n1.wait_counter("cluster_bus_lost", 1).await;
    // A clock jump past the grace period is also how a frozen node looks
    // to itself (`probe::watch_self`): it fences what it stored before
    // then. Waited for here, so that the fence falls before the object is
    // refreshed below and not, on a slow tick, after the next jump.
    n1.wait_counter("cluster_fenced", 1).await;
    let r = t.client(n1).get("/g").send().await;
    r.expect_body("g");
    let mine = crate::cluster::own_entry(&r);
    assert!(
        !mine.contains("; hit"),
        "served as fresh while the bus is lost: {mine}"
    );
    assert!(mine.contains("detail=cluster-fenced"), "{mine}");
    // Two more seconds unsure: counted as fenced time once caught up.
    t.clock.advance(Duration::from_secs(2));
    redis.restart().await;
    n1.wait_counter("cluster_bus_caught_up", 2).await;
    assert!(
        n1.counter("cluster_fenced_ms") >= 2_000,
        "{}",
        n1.counter("cluster_fenced_ms")
    );
    let r = t.client(n1).get("/g").send().await;
    assert!(crate::cluster::own_entry(&r).contains("hit"));
    origin.finish().await;
}

// j00004: a request forwarded by a member that has applied more of the log
// than the owner: the owner waits briefly for its reader, then answers as a
// miss rather than serve what the sender may have purged. (The position is
// one no member has reached: the owner never catches up to it.)
#[tokio::test]
async fn j00004_an_owner_behind_the_sender_answers_as_a_miss() {
    let t = Test::new("j00004");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let path = owned_by(1, "/b/");
    let origin = origin_serving_versions(&t, &path, &["old", "new"]).await;
    let url = bus(&redis);
    let tune: &Tune = &move |_, c| c.cluster.as_mut().unwrap().bus = Some(url.clone());
    let nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, tune).await;
    caught_up(&nodes).await;
    t.client(&nodes[1])
        .get(&path)
        .send()
        .await
        .expect_body("old");
    // n1's signed hop, as n1 would send it, with a position ahead of n2.
    let key = hoard_cluster::peer_auth::PeerKey::new(b"a secret of the test cluster");
    let signed = key.sign("n1", t.clock.now(), false, "GET", &path);
    let r = t
        .client(&nodes[1])
        .get(&path)
        .hdr("hoard-peer", &signed)
        .hdr("hoard-log", "99999999999999-0")
        .send()
        .await;
    r.expect_body("new");
    nodes[1].expect_counter("cluster_bus_behind_misses", 1);
    // From a client, the field counts for nothing: a hit.
    t.client(&nodes[1])
        .get(&path)
        .hdr("hoard-log", "99999999999999-0")
        .send()
        .await
        .expect_body("new");
    nodes[1].expect_counter("cluster_bus_behind_misses", 1);
    origin.finish().await;
}

// j00005: a member whose position the log no longer reaches (entries after
// it were trimmed while it was down) cannot know what it missed: a
// generation bump. What it stored before is revalidated, not served as
// fresh, and nothing is lost (a 304 keeps the copy).
#[tokio::test]
async fn j00005_a_position_trimmed_away_makes_a_generation_bump() {
    let t = Test::new("j00005");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/t");
            s.txresp_fresh_etag(600, "\"t1\"", "t").await;
            s.rxreq()
                .await
                .expect_url("/t")
                .expect_header("if-none-match", "\"t1\"");
            s.txresp(304).hdr("ETag", "\"t1\"").no_body().send().await;
        })
        .start()
        .await;
    let url = bus(&redis);
    let dir = t.dir().to_path_buf();
    let tune = move |_: usize, c: &mut hoard_config::Config| {
        c.cluster.as_mut().unwrap().bus = Some(url.clone());
        c.cache.memory_size = 0;
        c.cache.zones = vec![hoard_config::zones::quick_zone(
            dir.join("zone"),
            16 << 20,
            c.cache.max_object_size,
        )];
    };
    let nodes = cluster_sized(&t, &origin, 1, &[], 8 << 20, |_| {}, &tune).await;
    caught_up(&nodes).await;
    t.client(&nodes[0]).get("/t").send().await.expect_body("t");
    nodes[0].wait_counter("objects_stored", 1).await;
    let members = members_of(&nodes);
    for n in nodes {
        n.stop().await;
    }
    // Down for a while.
    t.clock.advance(Duration::from_secs(60));
    // Purges by another (now gone) member, then trimmed away unread.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    for i in 0..3 {
        let _: String = redis::cmd("XADD")
            .arg("hoard-test:purges")
            .arg("*")
            .arg("purge")
            .arg(format!(
                r#"{{"selector":{{"prefix":"http://localhost/gone/{i}"}},"soft":false}}"#
            ))
            .arg("from")
            .arg("n9")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let _: u64 = redis::cmd("XTRIM")
        .arg("hoard-test:purges")
        .arg("MAXLEN")
        .arg(0)
        .query_async(&mut c)
        .await
        .unwrap();
    let n1 = member(&t, &origin, &members, 0, 8 << 20, |_| {}, &tune).await;
    n1.wait_counter("disk_load_done", 1).await;
    n1.wait_counter("cluster_bus_caught_up", 1).await;
    n1.expect_counter("cluster_bus_generation_bumps", 1);
    // Revalidated once (the 304), then a hit.
    let r = t.client(&n1).get("/t").send().await;
    r.expect_body("t");
    assert!(!crate::cluster::own_entry(&r).contains("; hit"));
    let r = t.client(&n1).get("/t").send().await;
    assert!(crate::cluster::own_entry(&r).contains("hit"));
    origin.finish().await;
}

// j00006: purges taken while Redis is down go to the members over HTTP
// (the answer says the bus was unreachable) and are applied everywhere;
// when Redis is back, the log goes on from where it was (its append-only
// file kept it) and purges go through it again.
#[tokio::test]
async fn j00006_purges_go_over_http_while_redis_is_down() {
    let t = Test::new("j00006");
    let mut redis = RedisServer::start(&t.dir().join("redis")).await;
    let path = owned_by(1, "/d/");
    let origin = origin_serving_versions(&t, &path, &["one", "two", "three"]).await;
    let url = bus(&redis);
    let tune: &Tune = &move |_, c| c.cluster.as_mut().unwrap().bus = Some(url.clone());
    let nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, tune).await;
    caught_up(&nodes).await;
    let body = format!(r#"{{"url": "http://localhost{path}"}}"#);
    let purge = |n: usize| crate::admin::purge(&t, &nodes[n], &body);
    t.client(&nodes[1])
        .get(&path)
        .send()
        .await
        .expect_body("one");
    redis.stop();
    let r = purge(0).await;
    let acked = acks(&r);
    assert!(acked.values().all(|v| v == "acked"), "{acked:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["bus"], "unreachable", "{v}");
    t.client(&nodes[1])
        .get(&path)
        .send()
        .await
        .expect_body("two");
    redis.restart().await;
    // Back: the log takes purges again, and every member acknowledges them.
    // The first purges after the restart may still find the old connection
    // (no entry), or be appended before a member has read its way back to
    // the log's end (that member's ack times out; it applies the entry when
    // it gets there): a purge is repeated until one goes through the log
    // with every ack (purging a URL again changes nothing).
    let mut answer = serde_json::Value::Null;
    for _ in 0..100 {
        let r = purge(2).await;
        answer = serde_json::from_slice(&r.body).unwrap();
        if answer["entry"].is_string() && acks_of(&answer) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(answer["entry"].is_string(), "{answer}");
    assert!(acks_of(&answer), "{answer}");
    t.client(&nodes[1])
        .get(&path)
        .send()
        .await
        .expect_body("three");
    origin.finish().await;
}

fn acks_of(answer: &serde_json::Value) -> bool {
    answer["nodes"]
        .as_object()
        .is_some_and(|m| m.values().all(|v| v == "acked"))
}

// j00007: the dashboard (headless Chromium) shows the log: connected,
// catching up or not, entries applied, and each member's position, every
// figure the /status value it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j00007_the_dashboard_shows_the_log_positions() {
    let t = Test::new("j00007");
    let redis = RedisServer::start(&t.dir().join("redis")).await;
    let origin = t.origin().start().await;
    let url = bus(&redis);
    let tune: &Tune = &move |_, c| c.cluster.as_mut().unwrap().bus = Some(url.clone());
    let nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, tune).await;
    caught_up(&nodes).await;
    let r = crate::admin::purge(&t, &nodes[2], r#"{"prefix": "http://localhost/x/"}"#).await;
    assert!(acks(&r).values().all(|v| v == "acked"));
    nodes[0].wait_counter("cluster_bus_applied", 1).await;
    let shown = crate::admin::settled_dashboard(&t, &nodes[0]).await;
    assert_eq!(shown["cluster.bus.connected"], "true");
    assert_eq!(shown["cluster.bus.unsure"], "false");
    for n in ["n1", "n2", "n3"] {
        let at = &shown[&format!("cluster.bus.positions.{n}")];
        assert!(at.contains('-'), "{n}: {at:?}");
    }
    origin.finish().await;
}
