//! r07: purges by a regular expression over the path, as bans: checked at
//! every hit while pending, swept in the background, bounded in number,
//! refused when malformed, and spread to every member of a cluster.

use std::time::Duration;

use hoard_config::Member;
use hoard_testkit::{Origin, Response, Test, TestProxy};

use crate::admin::purge;

/// An origin that answers `paths` once each, in order, with the path (and
/// `#n` for the nth time a path is asked) as the body, `max-age=600`.
async fn origin_serving(t: &Test, paths: &[&str]) -> Origin {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    t.origin()
        .script(move |mut s| async move {
            let mut seen = std::collections::HashMap::<String, u32>::new();
            for p in paths {
                s.rxreq().await.expect_url(&p);
                let n = seen.entry(p.clone()).or_default();
                *n += 1;
                s.txresp_fresh(600, format!("{p}#{n}")).await;
            }
        })
        .start()
        .await
}

async fn get(t: &Test, proxy: &TestProxy, path: &str) -> Response {
    t.client(proxy).get(path).send().await
}

/// The JSON of a purge answer with its status checked.
fn answer(r: &Response, status: u16) -> serde_json::Value {
    r.expect_status(status)
        .expect_header("content-type", "application/json");
    serde_json::from_slice(&r.body).expect("purge answer is JSON")
}

// r07001: a regex purge removes the objects whose path matches (the query
// is not looked at) and nothing else: the origin sees exactly the matching
// ones again, the others stay hits.
#[tokio::test]
async fn r07001_regex_purge_removes_matching_paths_only() {
    let t = Test::new("r07001");
    let origin = origin_serving(
        &t,
        &[
            "/img/a.png",
            "/img/b.png?v=2",
            "/img/c.jpg",
            "/doc/x.png",
            "/img/a.png",
            "/img/b.png?v=2",
        ],
    )
    .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/img/a.png", "/img/b.png?v=2", "/img/c.jpg", "/doc/x.png"] {
        get(&t, &proxy, p).await.expect_body(format!("{p}#1"));
    }
    let r = purge(&t, &proxy, r#"{"regex": "^/img/.*\\.png$"}"#).await;
    let v = answer(&r, 200);
    assert_eq!(v["purged"], 0, "{v}");
    assert!(v["pending_bans"].as_u64().is_some(), "{v}");
    proxy.wait_counter("bans_swept", 1).await;
    proxy
        .expect_counter("purges_regex", 1)
        .expect_counter("bans_swept_objects", 2)
        .expect_counter("purged_objects", 2);
    for p in ["/img/c.jpg", "/doc/x.png"] {
        get(&t, &proxy, p)
            .await
            .expect_cache_status("hit")
            .expect_body(format!("{p}#1"));
    }
    for p in ["/img/a.png", "/img/b.png?v=2"] {
        get(&t, &proxy, p)
            .await
            .expect_cache_status("fwd=uri-miss")
            .expect_body(format!("{p}#2"));
    }
    let m = crate::admin::metrics(&t, &proxy).await;
    assert_eq!(m["hoard_bans_pending"], 0.0);
    assert_eq!(m[r#"hoard_purges_total{kind="regex"}"#], 1.0);
    origin.finish().await;
}

// r07002: the ban works before its sweep does: with the sweep held, an
// object stored before the ban is not served (the lookup removes it and
// fetches anew); what was fetched after the ban is served; the sweep then
// removes the rest and leaves the new copy alone.
#[tokio::test]
async fn r07002_ban_is_checked_at_lookup_before_the_sweep() {
    let t = Test::new("r07002");
    let origin = origin_serving(
        &t,
        &["/img/a.png", "/img/b.png", "/img/a.png", "/img/b.png"],
    )
    .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/img/a.png", "/img/b.png"] {
        get(&t, &proxy, p).await.expect_body(format!("{p}#1"));
    }
    t.clock.advance(Duration::from_secs(1));
    proxy.store().bans().hold_sweeps(true);
    let r = purge(&t, &proxy, r#"{"regex": "^/img/"}"#).await;
    assert_eq!(answer(&r, 200)["pending_bans"], 1);
    // Stored before the ban: not served.
    get(&t, &proxy, "/img/a.png")
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body("/img/a.png#2");
    proxy.expect_counter("bans_lookup_removed", 1);
    // Stored after it: served.
    get(&t, &proxy, "/img/a.png")
        .await
        .expect_cache_status("hit")
        .expect_body("/img/a.png#2");
    proxy
        .expect_counter("bans_lookup_removed", 1)
        .expect_counter("bans_swept", 0);
    proxy.store().bans().hold_sweeps(false);
    proxy.wait_counter("bans_swept", 1).await;
    // The sweep took b and left a's new copy.
    proxy.expect_counter("bans_swept_objects", 1);
    assert_eq!(proxy.store().bans().pending(), 0);
    get(&t, &proxy, "/img/a.png")
        .await
        .expect_cache_status("hit")
        .expect_body("/img/a.png#2");
    get(&t, &proxy, "/img/b.png")
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body("/img/b.png#2");
    origin.finish().await;
}

// r07003: the list of pending bans is bounded (`max_pending_bans`): one
// more is refused with 429 naming the setting, counted, and nothing is
// purged; once the sweep is done, a ban is taken again.
#[tokio::test]
async fn r07003_pending_bans_are_bounded() {
    let t = Test::new("r07003");
    let origin = origin_serving(&t, &["/a/1", "/b/1", "/a/1"]).await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .admin()
        .config(|c| c.admin.max_pending_bans = 1)
        .start()
        .await;
    for p in ["/a/1", "/b/1"] {
        get(&t, &proxy, p).await.expect_body(format!("{p}#1"));
    }
    proxy.store().bans().hold_sweeps(true);
    answer(&purge(&t, &proxy, r#"{"regex": "^/a/"}"#).await, 200);
    let r = purge(&t, &proxy, r#"{"regex": "^/b/"}"#).await;
    let v = answer(&r, 429);
    assert_eq!(v["field"], "regex", "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("max_pending_bans"),
        "{v}"
    );
    proxy
        .expect_counter("bans_refused", 1)
        .expect_counter("purges_regex", 1);
    let m = crate::admin::metrics(&t, &proxy).await;
    assert_eq!(m["hoard_bans_pending"], 1.0);
    // The refused ban did nothing.
    get(&t, &proxy, "/b/1")
        .await
        .expect_cache_status("hit")
        .expect_body("/b/1#1");
    proxy.store().bans().hold_sweeps(false);
    proxy.wait_counter("bans_swept", 1).await;
    answer(&purge(&t, &proxy, r#"{"regex": "^/a/"}"#).await, 200);
    proxy.wait_counter("bans_swept", 2).await;
    get(&t, &proxy, "/a/1").await.expect_body("/a/1#2");
    proxy.expect_counter("purges_regex", 2);
    origin.finish().await;
}

// r07004: a regex that does not compile, an empty one, or a regex given
// with another kind: 400 naming the field and the compiler's message; no
// ban is added.
#[tokio::test]
async fn r07004_bad_regex_is_refused_with_400() {
    let t = Test::new("r07004");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let v = answer(&purge(&t, &proxy, r#"{"regex": "^/img/(.png"}"#).await, 400);
    assert_eq!(v["field"], "regex", "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("not a valid regular expression"), "{v}");
    assert!(e.contains("unclosed group"), "{v}");
    let v = answer(&purge(&t, &proxy, r#"{"regex": ""}"#).await, 400);
    assert_eq!(v["field"], "regex", "{v}");
    let v = answer(
        &purge(&t, &proxy, r#"{"regex": "^/a", "tag": "x"}"#).await,
        400,
    );
    assert!(v["error"].as_str().unwrap().contains("only one of"), "{v}");
    let long = format!(r#"{{"regex": "{}"}}"#, "a".repeat(2000));
    let v = answer(&purge(&t, &proxy, &long).await, 400);
    assert!(v["error"].as_str().unwrap().contains("longer than"), "{v}");
    proxy
        .expect_counter("purges_regex", 0)
        .expect_counter("bans_refused", 0);
    assert_eq!(proxy.store().bans().pending(), 0);
    origin.finish().await;
}

// r07005: a soft regex purge makes the matching objects stale instead of
// removing them: at lookup (sweep held) the next request goes to the
// origin, and the sweep marks the others.
#[tokio::test]
async fn r07005_soft_regex_purge_makes_stale() {
    let t = Test::new("r07005");
    let origin = origin_serving(&t, &["/s/a", "/s/b", "/s/a", "/s/b"]).await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/s/a", "/s/b"] {
        get(&t, &proxy, p).await.expect_body(format!("{p}#1"));
    }
    t.clock.advance(Duration::from_secs(1));
    proxy.store().bans().hold_sweeps(true);
    answer(
        &purge(&t, &proxy, r#"{"regex": "^/s/", "soft": true}"#).await,
        200,
    );
    get(&t, &proxy, "/s/a").await.expect_body("/s/a#2");
    proxy.expect_counter("bans_lookup_removed", 1);
    proxy.store().bans().hold_sweeps(false);
    proxy.wait_counter("bans_swept", 1).await;
    proxy
        .expect_counter("purges_soft", 1)
        .expect_counter("bans_swept_objects", 1);
    get(&t, &proxy, "/s/b").await.expect_body("/s/b#2");
    get(&t, &proxy, "/s/a")
        .await
        .expect_cache_status("hit")
        .expect_body("/s/a#2");
    origin.finish().await;
}

/// Three members on ports of this case's block (27000 + 16·(NNNN − 7000)),
/// as `i_cluster` starts its clusters.
async fn cluster3(t: &Test, origin: &Origin, case: u16) -> Vec<TestProxy> {
    let base = 27_000 + 16 * (case - 7000);
    let mut held = Vec::new();
    for port in base..base + 16 {
        if held.len() == 3 {
            break;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    assert_eq!(held.len(), 3, "free ports in this case's block");
    let members: Vec<Member> = held
        .iter()
        .enumerate()
        .map(|(i, l)| Member {
            name: format!("n{}", i + 1),
            addr: l.local_addr().unwrap(),
            weight: 1.0,
        })
        .collect();
    drop(held);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(
            crate::cluster::member(t, origin, &members, i, 8 << 20, |_| {}, &|_, _| {}).await,
        );
    }
    nodes
}

// r07006: in a cluster, a regex purge sent to one member is applied by
// every member (each adds the ban and sweeps it) and acknowledged; no
// node serves a matching object after it, and the others stay hits.
#[tokio::test]
async fn r07006_regex_purge_reaches_every_member() {
    let t = Test::new("r07006");
    let origin = origin_serving(&t, &["/img/a.png", "/doc/keep", "/img/a.png"]).await;
    let nodes = cluster3(&t, &origin, 7006).await;
    // Twice on each node: non-owners keep near copies.
    for n in nodes.iter().chain(&nodes) {
        get(&t, n, "/img/a.png").await.expect_body("/img/a.png#1");
    }
    for n in &nodes {
        get(&t, n, "/doc/keep").await.expect_body("/doc/keep#1");
    }
    let r = purge(&t, &nodes[1], r#"{"regex": "\\.png$"}"#).await;
    let acked = crate::cluster::acks(&r);
    for name in ["n1", "n2", "n3"] {
        assert_eq!(acked[name], "acked", "{acked:?}");
    }
    for n in &nodes {
        n.wait_counter("bans_swept", 1).await;
        n.expect_counter("purges_regex", 1);
    }
    for n in &nodes {
        get(&t, n, "/img/a.png").await.expect_body("/img/a.png#2");
        get(&t, n, "/doc/keep").await.expect_body("/doc/keep#1");
    }
    origin.finish().await;
}

// r07007: on a disk zone (no memory tier): the ban caught at lookup
// removes the object, the sweep unlinks the other matching files before
// it is done, and the files of what the ban does not select stay.
#[tokio::test]
async fn r07007_regex_ban_on_a_disk_zone_unlinks_the_files() {
    let t = Test::new("r07007");
    let origin = origin_serving(&t, &["/v/1.mp4", "/v/2.mp4", "/v/3.txt", "/v/1.mp4"]).await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    // Each object's file, as it appears.
    let mut files = Vec::new();
    for (i, p) in ["/v/1.mp4", "/v/2.mp4", "/v/3.txt"].into_iter().enumerate() {
        get(&t, &proxy, p).await.expect_body(format!("{p}#1"));
        proxy.wait_counter("disk_stored", i as u64 + 1).await;
        let now = crate::disk::objects(&dir);
        let new: Vec<_> = now
            .iter()
            .filter(|f| !files.contains(*f))
            .cloned()
            .collect();
        assert_eq!(new.len(), 1, "{now:?}");
        files.push(new[0].clone());
    }
    t.clock.advance(Duration::from_secs(1));
    proxy.store().bans().hold_sweeps(true);
    answer(&purge(&t, &proxy, r#"{"regex": "\\.mp4$"}"#).await, 200);
    get(&t, &proxy, "/v/1.mp4")
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body("/v/1.mp4#2");
    proxy.expect_counter("bans_lookup_removed", 1);
    proxy.wait_counter("disk_stored", 4).await;
    assert!(files[1].exists(), "the sweep is held");
    proxy.store().bans().hold_sweeps(false);
    proxy.wait_counter("bans_swept", 1).await;
    proxy.expect_counter("bans_swept_objects", 1);
    assert!(!files[1].exists(), "2.mp4's file is unlinked by the sweep");
    assert!(files[2].exists(), "3.txt's file stays");
    get(&t, &proxy, "/v/3.txt")
        .await
        .expect_cache_status("hit")
        .expect_body("/v/3.txt#1");
    get(&t, &proxy, "/v/1.mp4")
        .await
        .expect_cache_status("hit")
        .expect_body("/v/1.mp4#2");
    origin.finish().await;
}
