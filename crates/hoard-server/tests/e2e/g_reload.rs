//! g: day-two operations. A reload changes what new requests get without
//! closing a connection, failing a request in flight or losing an object.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use hoard_testkit::Test;
use http_body_util::{BodyExt, Empty};

const BASE: &str = r#"
[[listener]]
address = "127.0.0.1:0"
http2 = true
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
upstream = "app"
"#;

/// Requests served on one connection, and whether any failed.
#[derive(Default)]
struct Flow {
    served: AtomicU64,
    failed: AtomicU64,
}

impl Flow {
    /// Waits until `n` more requests were served (the flow runs meanwhile).
    async fn more(&self, n: u64) {
        let start = self.served.load(Relaxed);
        while self.served.load(Relaxed) < start + n {
            tokio::task::yield_now().await;
        }
    }
}

// g00001: requests flow on two HTTP/1.1 keep-alive connections and one
// HTTP/2 connection while the configuration is changed twice (a route's
// lifetime, an added listener) and once replaced by an invalid file: no
// request fails, no connection closes, the stored object stays a hit, the
// new lifetime applies to new fills, and the invalid file changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g00001_reload_under_load() {
    let t = Test::new("g00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            s.txresp(200).body("a").send().await;
            s.rxreq().await.expect_url("/b");
            s.txresp(200).body("b").send().await;
        })
        .start()
        .await;
    let v1 = format!("{BASE}default_ttl = {{ \"200\" = \"100s\" }}\n");
    let proxy = t.proxy().origin(&origin).toml(&origin, &v1).start().await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_cache_status("ttl=100");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flows = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let flow = Arc::new(Flow::default());
        let (f, stop) = (flow.clone(), stop.clone());
        let mut conn = t.client(&proxy).connect().await;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Relaxed) {
                let r = conn
                    .get("/a")
                    .hdr("Connection", "keep-alive")
                    .try_send()
                    .await;
                let hit = r.as_ref().is_ok_and(|r| {
                    r.status == 200
                        && r.text() == "a"
                        && r.cache_status().is_some_and(|c| c.contains("; hit"))
                });
                if hit {
                    f.served.fetch_add(1, Relaxed);
                } else {
                    f.failed.fetch_add(1, Relaxed);
                }
            }
        }));
        flows.push(flow);
    }
    {
        let flow = Arc::new(Flow::default());
        let (f, stop) = (flow.clone(), stop.clone());
        let mut send = super::h_http2::h2c(&proxy).await;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Relaxed) {
                let req = http::Request::get("http://localhost/a")
                    .body(Empty::<bytes::Bytes>::new())
                    .unwrap();
                match send.send_request(req).await {
                    Ok(resp) if resp.status() == 200 => {
                        let body = resp.into_body().collect().await.unwrap().to_bytes();
                        if &body[..] == b"a" {
                            f.served.fetch_add(1, Relaxed);
                        } else {
                            f.failed.fetch_add(1, Relaxed);
                        }
                    }
                    _ => {
                        f.failed.fetch_add(1, Relaxed);
                    }
                }
            }
        }));
        flows.push(flow);
    }
    let all_more = |n| {
        let flows = flows.clone();
        async move {
            for f in &flows {
                f.more(n).await;
            }
        }
    };
    all_more(20).await;

    // 1. A new lifetime: new fills get it; the stored object stays a hit.
    let v2 = format!("{BASE}default_ttl = {{ \"200\" = \"300s\" }}\n");
    let r = proxy
        .reload_toml(&origin, &v2)
        .expect("valid configuration");
    assert_eq!(r.generation, 2);
    all_more(20).await;
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_cache_status("ttl=300");
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_cache_status("hit");

    // 2. An added listener opens; the old one keeps its connections.
    let v3 = format!("{v2}\n[[listener]]\naddress = \"127.0.0.2:0\"\n");
    let r = proxy
        .reload_toml(&origin, &v3)
        .expect("valid configuration");
    assert_eq!(
        (r.generation, r.opened.len(), r.closed.len()),
        (3, 1, 0),
        "{r:?}"
    );
    let added = r.opened[0];
    all_more(20).await;
    t.client(added)
        .get("/b")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body("b");

    // 3. An invalid file is refused with the error `hoard check` prints;
    // nothing changes.
    let e = proxy
        .reload_toml(
            &origin,
            &format!("{v3}\n[server]\nkeep_alive_timeot = \"1s\"\n"),
        )
        .expect_err("invalid configuration");
    assert!(
        e.contains("test.toml:") && e.contains("keep_alive_timeot"),
        "{e}"
    );
    all_more(20).await;
    t.client(added)
        .get("/a")
        .send()
        .await
        .expect_cache_status("hit");
    assert_eq!(proxy.proxy().last_reload().unwrap().result, Err(e));

    stop.store(true, Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    for f in &flows {
        assert_eq!(
            f.failed.load(Relaxed),
            0,
            "a request failed during the reloads"
        );
    }
    origin.finish().await;
}
