//! The commands that talk to a running proxy's admin API (`hoard purge`,
//! `hoard upstream set`, `hoard trace`), and the admin flags of the quick
//! start.

use crate::common;

use std::process::Command;

use common::run as hoard;
use hoard_testkit::Test;

#[tokio::test]
async fn purge_prints_the_count() {
    let t = Test::new("cli-purge");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, tag) in [("/a", "x"), ("/b", "x"), ("/c", "y")] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Surrogate-Key", tag)
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .config(|c| {
            c.admin.address = Some("127.0.0.1:0".parse().unwrap());
            c.admin.token = Some("tok".into());
        })
        .start()
        .await;
    for p in ["/a", "/b", "/c"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    let token = t.dir().join("token");
    std::fs::write(&token, "tok\n").unwrap();
    let admin = format!("http://{}", proxy.admin());
    let args = |extra: &[&str]| {
        let mut v = vec!["purge".to_string(), "--admin".into(), admin.clone()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let tok = token.to_str().unwrap();
    let (code, out, err) = hoard(args(&["--token-file", tok, "--tag", "x"])).await;
    assert_eq!((code, out.as_str()), (0, "2\n"), "{err}");
    let (code, out, err) =
        hoard(args(&["--token-file", tok, "--soft", "http://localhost/c"])).await;
    assert_eq!((code, out.as_str()), (0, "1\n"), "{err}");
    let (code, out, err) = hoard(args(&[
        "--token-file",
        tok,
        "--prefix",
        "http://localhost/",
    ]))
    .await;
    assert_eq!((code, out.as_str()), (0, "1\n"), "{err}");
    // No token: the API's 401, said plainly.
    let (code, _, err) = hoard(args(&["--host", "localhost"])).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401") && err.contains("token"), "{err}");
    // Bad input: the API names the field.
    let (code, _, err) = hoard(args(&["--token-file", tok, "--prefix", "localhost/"])).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("field \"prefix\""), "{err}");
    // Nothing to purge named: usage error.
    let (code, _, err) = hoard(args(&["--token-file", tok])).await;
    assert_eq!(code, 2, "{err}");
    origin.finish().await;
}

#[tokio::test]
async fn admin_off_loopback_needs_a_token() {
    let (code, _, err) = hoard(
        [
            "--upstream",
            "http://127.0.0.1:9",
            "--admin",
            "0.0.0.0:8001",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--admin") && err.contains("token"), "{err}");
    let (code, _, err) = hoard(
        ["purge", "--admin", "http://127.0.0.1:9", "--tag", "x"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach the admin listener"), "{err}");
}

// `hoard purge --regex`: a ban over the path; the count is 0 (the sweep
// counts later) and the pending bans are said on standard error; a
// regular expression that does not compile is refused, naming the field.
#[tokio::test]
async fn purge_regex_adds_a_ban() {
    let t = Test::new("cli-purge-regex");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/img/a.png", "/img/b.jpg", "/img/a.png"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    for p in ["/img/a.png", "/img/b.jpg"] {
        t.client(&proxy).get(p).send().await.expect_body(p);
    }
    let admin = format!("http://{}", proxy.admin());
    let args = |re: &str| {
        ["purge", "--admin", &admin, "--regex", re]
            .map(String::from)
            .to_vec()
    };
    let (code, out, err) = hoard(args(r"^/img/.*\.png$")).await;
    assert_eq!((code, out.as_str()), (0, "0\n"), "{err}");
    assert!(
        err.contains("ban added") && err.contains("pending"),
        "{err}"
    );
    proxy.wait_counter("bans_swept", 1).await;
    proxy.expect_counter("bans_swept_objects", 1);
    t.client(&proxy)
        .get("/img/b.jpg")
        .send()
        .await
        .expect_cache_status("hit");
    t.client(&proxy)
        .get("/img/a.png")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    let (code, _, err) = hoard(args("(")).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("field \"regex\"") && err.contains("regular expression"),
        "{err}"
    );
    origin.finish().await;
}

// `hoard purge` in a cluster prints the members' total, then each member's
// state and count: sent to n1, which holds no copy, it counts n2's object.
#[tokio::test]
async fn purge_in_a_cluster_prints_each_member() {
    use hoard_config::{ClusterConfig, Member};
    let t = Test::new("cli-purge-cluster");
    // Ports fixed before the members start (each knows the other's), below
    // the ephemeral range, from a block of this test's own.
    let held: Vec<std::net::TcpListener> = (20_840..20_872)
        .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
        .take(2)
        .collect();
    assert_eq!(held.len(), 2, "free ports in 20840-20871");
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
    // A path n2 owns.
    let path = (0..100)
        .map(|i| format!("/c/{i}"))
        .find(|p| {
            use hoard_cluster::ring::{owner, Slot};
            let slots: Vec<Slot> = (1..=2).map(|i| Slot::new(&format!("n{i}"), 1.0)).collect();
            owner(&slots, format!("http|localhost|{p}").as_bytes(), |_| true) == Some(1)
        })
        .unwrap();
    let origin = {
        let path = path.clone();
        t.origin()
            .script(move |mut s| async move {
                s.rxreq().await.expect_url(&path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("v1")
                    .send()
                    .await;
            })
            .start()
            .await
    };
    let mut nodes = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let (members, addr) = (members.clone(), m.addr);
        nodes.push(
            t.proxy()
                .origin(&origin)
                .admin()
                .config(move |c| {
                    c.listeners[0].address = addr;
                    c.cluster = Some(ClusterConfig::new(
                        &format!("n{}", i + 1),
                        members,
                        b"a secret of the test cluster".to_vec(),
                    ));
                })
                .start()
                .await,
        );
    }
    t.client(&nodes[0])
        .get(&path)
        .send()
        .await
        .expect_body("v1");
    let admin = format!("http://{}", nodes[0].admin());
    let (code, out, err) = hoard(
        [
            "purge",
            "--admin",
            &admin,
            &format!("http://localhost{path}"),
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (0, "1\nn1 acked 0\nn2 acked 1\n"),
        "{err}"
    );
    origin.finish().await;
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
