//! The admin API as the cases use it: `POST /purge`, `/metrics`, `/status`,
//! and the dashboard rendered by headless Chromium, checked against
//! `/status`.

use std::collections::HashMap;

use hoard_testkit::{Response, Test, TestProxy};

/// `POST /purge` on the admin listener.
pub(crate) async fn purge(t: &Test, proxy: &TestProxy, body: &str) -> Response {
    t.client(proxy.admin())
        .post("/purge")
        .hdr("Content-Type", "application/json")
        .body(body)
        .send()
        .await
}

/// The `purged` count of a successful purge.
pub(crate) fn purged(r: &Response) -> u64 {
    r.expect_status(200)
        .expect_header("content-type", "application/json");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("purge answer is JSON");
    v["purged"].as_u64().expect("purged is a number")
}

/// `GET /metrics` as `name{labels}` → value.
pub(crate) async fn metrics(t: &Test, proxy: &TestProxy) -> HashMap<String, f64> {
    let r = t.client(proxy.admin()).get("/metrics").send().await;
    r.expect_status(200)
        .expect_header_contains("content-type", "version=0.0.4");
    r.text()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("sample line");
            (k.to_string(), v.parse::<f64>().expect("sample value"))
        })
        .collect()
}

/// `GET /status` as JSON.
pub(crate) async fn status(t: &Test, proxy: &TestProxy) -> serde_json::Value {
    let r = t.client(proxy.admin()).get("/status").send().await;
    r.expect_status(200);
    serde_json::from_slice(&r.body).expect("status is JSON")
}

/// A program on PATH.
pub(crate) fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// The dashboard as headless Chromium renders it: `data-ready` (the
/// sample shown) and each `data-metric` element's text.
pub(crate) fn render_dashboard(
    dir: &std::path::Path,
    admin: std::net::SocketAddr,
) -> (u64, Vec<(String, String)>) {
    let chromium = which("chromium")
        .expect("chromium is needed for this case: apt-get install chromium (.ci/run installs it)");
    let profile = tempfile::tempdir_in(dir).unwrap();
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("http://{admin}/"))
        .env("HOME", profile.path())
        .env("XDG_CONFIG_HOME", profile.path())
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    let ready = regex::Regex::new(r#"<body[^>]*data-ready="(\d+)""#).unwrap();
    let ready: u64 = ready.captures(&dom).unwrap_or_else(|| {
        panic!(
            "the page never rendered a status:\n{dom}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })[1]
        .parse()
        .unwrap();
    let metric = regex::Regex::new(r#"data-metric="([^"]+)"[^>]*>([^<]*)<"#).unwrap();
    let figures = metric
        .captures_iter(&dom)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    (ready, figures)
}

/// The `/status` value at a dotted path, as the page prints it.
pub(crate) fn at_path(v: &serde_json::Value, path: &str) -> String {
    let mut cur = v;
    for part in path.split('.') {
        cur = match part.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[part],
        };
    }
    match cur {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => panic!("{path}: not in /status"),
        other => other.to_string(),
    }
}

/// Renders the dashboard once the sampler has settled (two samples after
/// the traffic: rates back to zero) and checks every figure against
/// `/status`; returns the figures.
pub(crate) async fn settled_dashboard(t: &Test, proxy: &TestProxy) -> HashMap<String, String> {
    let now = proxy.counter("status_samples");
    proxy.wait_counter("status_samples", now + 2).await;
    let admin = proxy.admin();
    let dir = t.dir().to_path_buf();
    let (ready, figures) = tokio::task::spawn_blocking(move || render_dashboard(&dir, admin))
        .await
        .unwrap();
    let st = status(t, proxy).await;
    assert!(figures.len() >= 30, "figures: {figures:?}");
    let mut seen = HashMap::new();
    for (path, text) in figures {
        match path.as_str() {
            // Moving with the clock, not with traffic.
            "uptime_seconds" => assert!(text.parse::<u64>().is_ok(), "{text}"),
            "sample" => assert_eq!(text, ready.to_string()),
            _ => {
                let want = at_path(&st, &path);
                let same = match (text.parse::<f64>(), want.parse::<f64>()) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => text == want,
                };
                assert!(
                    same,
                    "{path}: the page shows {text:?}, /status says {want:?}"
                );
            }
        }
        seen.insert(path, text);
    }
    seen
}
