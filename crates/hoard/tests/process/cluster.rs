//! A cluster of real `hoard` processes: a member stopped with SIGSTOP
//! during a purge is named as not acknowledging it, and once resumed it
//! does not serve what it stored before as fresh.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::Hoard;
use hoard_testkit::Test;

/// Four free ports (the members' listeners and n1's admin listener),
/// below the ephemeral range (each member must know the others' before any
/// starts), from a block of this test's own.
fn fixed_ports() -> Vec<SocketAddr> {
    let held: Vec<std::net::TcpListener> = (20_800..20_832)
        .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
        .take(4)
        .collect();
    assert_eq!(held.len(), 4, "free ports in 20800-20831");
    held.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Node `i`'s configuration file.
fn config(
    t: &Test,
    i: usize,
    members: &[SocketAddr],
    admin: SocketAddr,
    origin: &str,
) -> std::path::PathBuf {
    let peers: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(j, a)| format!("\"n{}={a}\"", j + 1))
        .collect();
    let text = format!(
        r#"[[listener]]
address = "{addr}"

[admin]
address = "{admin}"

[cluster]
node = "n{n}"
peers = [{peers}]
purge_timeout = "300ms"
grace = "1s"

[upstream.app]
servers = ["{origin}"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "app"
"#,
        addr = members[i],
        admin = if i == 0 {
            admin.to_string()
        } else {
            "127.0.0.1:0".into()
        },
        n = i + 1,
        peers = peers.join(", "),
    );
    let path = t.dir().join(format!("n{}.toml", i + 1));
    std::fs::write(&path, text).unwrap();
    path
}

fn signal(h: &Hoard, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_child(&h.child);
    rustix::process::kill_process(pid, sig).expect("signal sent");
}

#[tokio::test]
async fn a_member_stopped_during_a_purge_revalidates_when_resumed() {
    let t = Test::new("cluster-sigstop");
    // n3 owns the key: it is stopped with its copy.
    let path = (0..100)
        .map(|i| format!("/s/{i}"))
        .find(|p| {
            use hoard_cluster::ring::{owner, Slot};
            let slots: Vec<Slot> = (1..=3).map(|i| Slot::new(&format!("n{i}"), 1.0)).collect();
            owner(&slots, format!("http|localhost|{p}").as_bytes(), |_| true) == Some(2)
        })
        .unwrap();
    let origin = {
        let path = path.clone();
        t.origin()
            .script(move |mut s| async move {
                for v in ["old", "new"] {
                    s.rxreq().await.expect_url(&path);
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .body(v)
                        .send()
                        .await;
                }
            })
            .start()
            .await
    };
    let ports = fixed_ports();
    let (members, admin) = (&ports[..3], ports[3]);
    let mut nodes = Vec::new();
    for i in 0..3 {
        let cfg = config(&t, i, members, admin, &origin.url());
        let mut node = Hoard::start(&["run", "--config", cfg.to_str().unwrap()]).await;
        // `start` saw the admin listener's line; the main one follows.
        node.wait_log("tls=false").await;
        nodes.push(node);
    }
    let get = |i: usize| t.client(members[i]).get(&path).send();
    get(2).await.expect_body("old");

    signal(&nodes[2], rustix::process::Signal::STOP);
    let r = t
        .client(admin)
        .post("/purge")
        .body(format!(r#"{{"url": "http://localhost{path}"}}"#))
        .send()
        .await;
    let answer = String::from_utf8_lossy(&r.expect_status(200).body).to_string();
    for part in [r#""n1":"acked""#, r#""n2":"acked""#, r#""n3":"timeout""#] {
        assert!(answer.contains(part), "{answer}");
    }
    // Stopped past the grace period (1 s): the length of the stop is the
    // case itself, not a wait for something to happen.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    signal(&nodes[2], rustix::process::Signal::CONT);
    nodes[2]
        .wait_log("stood still past the cluster grace period")
        .await;
    // Its copy is revalidated, not served as fresh: the origin's new body.
    get(2).await.expect_body("new");
    for n in nodes {
        n.kill9();
    }
    origin.finish().await;
}
