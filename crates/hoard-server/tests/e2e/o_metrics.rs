//! o: operating hoard, what it shows: `/metrics` moving by exactly what
//! happened, accepted by `promtool`, and the dashboard matching `/status`.

use std::collections::HashMap;

use hoard_testkit::Test;

use crate::admin::{metrics, purge, purged, settled_dashboard, status, which};

/// The value of a sample, 0 when absent.
fn m(map: &HashMap<String, f64>, key: &str) -> f64 {
    map.get(key).copied().unwrap_or(0.0)
}

// o00010: a scripted sequence (a miss with one coalesced waiter, two hits, one
// purge) moves each metric by exactly the expected amount.
#[tokio::test]
async fn o00010_metrics_move_by_exactly_the_sequence() {
    let t = Test::new("o00010");
    let both_in = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let both_in = both_in.clone();
            |mut s| async move {
                s.rxreq().await;
                both_in.sync().await;
                s.txresp_fresh(600, "0123456789").await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    let before = metrics(&t, &proxy).await;
    let leader = t.client(&proxy).get("/m").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let waiter = t.client(&proxy).get("/m").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    both_in.sync().await;
    leader.await.unwrap().expect_body("0123456789");
    waiter
        .await
        .unwrap()
        .expect_body("0123456789")
        .expect_cache_status("collapsed");
    proxy.wait_counter("objects_stored", 1).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/m")
            .send()
            .await
            .expect_cache_status("hit");
    }
    assert_eq!(
        purged(&purge(&t, &proxy, r#"{"url": "http://localhost/m"}"#).await),
        1
    );
    let after = metrics(&t, &proxy).await;
    let delta = |k: &str| m(&after, k) - m(&before, k);
    let up = "upstream=\"default\"";
    for (key, want) in [
        ("hoard_requests_total{cache=\"miss\"}", 2.0),
        ("hoard_requests_total{cache=\"hit\"}", 2.0),
        ("hoard_requests_total{cache=\"stale\"}", 0.0),
        ("hoard_requests_total{cache=\"pass\"}", 0.0),
        ("hoard_requests_total{cache=\"error\"}", 0.0),
        ("hoard_ttfb_seconds_count{cache=\"hit\"}", 2.0),
        ("hoard_ttfb_seconds_count{cache=\"miss\"}", 2.0),
        ("hoard_coalesced_waiters_total", 1.0),
        ("hoard_client_bytes_total", 40.0),
        (
            &format!("hoard_origin_requests_total{{{up},result=\"2xx\"}}"),
            1.0,
        ),
        (&format!("hoard_origin_seconds_count{{{up}}}"), 1.0),
        (&format!("hoard_origin_bytes_total{{{up}}}"), 10.0),
        ("hoard_purges_total{kind=\"url\"}", 1.0),
        ("hoard_purged_objects_total", 1.0),
        ("hoard_background_refreshes_total", 0.0),
        ("hoard_fills_in_flight", 0.0),
    ] {
        assert_eq!(
            delta(key),
            want,
            "{key}: before {} after {}",
            m(&before, key),
            m(&after, key)
        );
    }
    assert_eq!(
        m(
            &after,
            &format!("hoard_upstream_up{{{up},server=\"{}\"}}", origin.addr())
        ),
        1.0
    );
    // /status agrees with the metrics.
    let st = status(&t, &proxy).await;
    assert_eq!(st["requests"]["hit"], 2);
    assert_eq!(st["requests"]["miss"], 2);
    assert_eq!(st["requests"]["total"], 4);
    assert_eq!(st["hit_ratio"], 0.5);
    assert_eq!(st["client"]["bytes"], 40);
    assert_eq!(st["origin"]["bytes"], 10);
    assert_eq!(st["origin"]["requests"], 1);
    assert_eq!(st["bytes_saved_ratio"], 0.75);
    assert_eq!(st["coalesced_waiters"], 1);
    assert_eq!(st["purges"], 1);
    assert_eq!(st["upstreams"][0]["servers"][0]["state"], "up");
    origin.finish().await;
}

// o00011: `promtool check metrics` (Debian's prometheus package) accepts the
// exposition, with every family present after traffic of each kind.
#[tokio::test]
async fn o00011_promtool_accepts_the_metrics() {
    let t = Test::new("o00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(60, "x").await;
            s.rxreq().await.expect_method("POST");
            s.txresp(201).body("made").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/a").send().await;
    t.client(&proxy).get("/a").send().await;
    t.client(&proxy)
        .post("/a")
        .body("x")
        .send()
        .await
        .expect_status(201);
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    promtool_accepts(&text);
    for family in hoard_admin::prometheus::FAMILIES {
        assert!(
            text.contains(&format!("# TYPE {} {}", family.name, family.kind)),
            "{}",
            family.name
        );
    }
    assert!(
        text.contains("hoard_requests_total{cache=\"pass\"} 1"),
        "{text}"
    );
    origin.finish().await;
}

// o00015: the dashboard in headless Chromium: every figure is the
// /status value it names, and the figures follow the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o00015_dashboard_in_chromium_matches_status() {
    let t = Test::new("o00015");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh(600, "dashboard").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for _ in 0..3 {
        t.client(&proxy)
            .get("/d")
            .send()
            .await
            .expect_body("dashboard");
    }
    let first = settled_dashboard(&t, &proxy).await;
    assert_eq!(first["requests.hit"], "2");
    assert_eq!(first["requests.miss"], "1");
    assert_eq!(first["upstreams.0.servers.0.state"], "up");
    for _ in 0..4 {
        t.client(&proxy)
            .get("/d")
            .send()
            .await
            .expect_body("dashboard");
    }
    let second = settled_dashboard(&t, &proxy).await;
    assert_eq!(second["requests.hit"], "6");
    assert_eq!(second["requests.total"], "7");
    assert_ne!(first["client.bytes"], second["client.bytes"]);
    assert_ne!(first["hit_ratio"], second["hit_ratio"]);
    origin.finish().await;
}

/// `promtool check metrics` accepts `text`, with no lint finding.
pub(crate) fn promtool_accepts(text: &str) {
    let promtool = which("promtool").expect(
        "promtool is needed for this case: apt-get install prometheus (.ci/run installs it)",
    );
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{said}\n---\n{text}"
    );
    assert!(said.trim().is_empty(), "promtool lint findings:\n{said}");
}
