//! `hoard upstream set` against a running proxy's admin API.

use std::process::Command;

use hoard_testkit::Test;

async fn hoard(args: Vec<String>) -> (i32, String, String) {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hoard"))
            .args(&args)
            .output()
            .expect("run hoard")
    })
    .await
    .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

// The server is taken out and the origin never sees the request (503 at
// once); `auto` puts it back. Bad input: a state clap refuses, a server
// the upstream does not have (the API's 404, with its servers).
#[tokio::test]
async fn upstream_set_takes_a_server_out_and_back() {
    let t = Test::new("cli-upstream");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            s.txresp(200).body("a").send().await;
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .upstream(|u| u.name = "app".into())
        .config(|c| c.admin.address = Some("127.0.0.1:0".parse().unwrap()))
        .start()
        .await;
    let admin = format!("http://{}", proxy.admin());
    let server = origin.addr().to_string();
    let name = "app".to_string();
    let args = |state: &str, server: &str| {
        ["upstream", "set", "--admin", &admin, &name, server, state]
            .map(String::from)
            .to_vec()
    };
    let (code, out, err) = hoard(args("down", &server)).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{name} {server} down (down)\n"));
    t.client(&proxy).get("/a").send().await.expect_status(503);
    let (code, out, err) = hoard(args("auto", &server)).await;
    assert_eq!(
        (code, out),
        (0, format!("{name} {server} auto (up)\n")),
        "{err}"
    );
    t.client(&proxy).get("/a").send().await.expect_body("a");
    let (code, _, err) = hoard(args("sick", &server)).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sick"), "{err}");
    let (code, _, err) = hoard(args("down", "10.9.9.9:80")).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404") && err.contains(&server), "{err}");
    origin.finish().await;
}

// `hoard trace` prints requests as they happen (one JSON line each),
// filtered, and stops at its limit.
#[tokio::test]
async fn trace_prints_requests_as_they_happen() {
    let t = Test::new("cli-trace");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for p in ["/skip", "/x/1"] {
                s.rxreq().await.expect_url(p);
                s.txresp(200).body(p).send().await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| c.admin.address = Some("127.0.0.1:0".parse().unwrap()))
        .start()
        .await;
    let admin = format!("http://{}", proxy.admin());
    let watch = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hoard"))
            .args(["trace", "--admin", &admin, "--url", "/x/", "--limit", "1"])
            .output()
            .expect("run hoard")
    });
    proxy.wait_counter("trace_watchers", 1).await;
    t.client(&proxy)
        .get("/skip")
        .send()
        .await
        .expect_body("/skip");
    t.client(&proxy)
        .get("/x/1")
        .send()
        .await
        .expect_body("/x/1");
    let out = watch.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        (v["url"].as_str(), v["status"].as_u64()),
        (Some("/x/1"), Some(200)),
        "{v}"
    );
    origin.finish().await;
}
