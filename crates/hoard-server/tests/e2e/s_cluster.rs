//! s17: members apply a purge at slightly different moments. A member that
//! has applied it may forward a request for the key to an owner that has
//! not yet: the old body it brings back is served, never kept in the near
//! tier, so once the purge is answered no member serves the old body.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::cluster::{acks, cluster_sized, owner_of, total, Tune};
use hoard_testkit::Test;

/// A TCP relay in front of one member: passes every byte, except that a
/// write carrying a member's purge request waits until `release`.
struct Relay {
    addr: SocketAddr,
    target: Arc<OnceLock<SocketAddr>>,
    seen: Arc<Notify>,
    release: watch::Sender<bool>,
}

impl Relay {
    async fn start() -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target: Arc<OnceLock<SocketAddr>> = Arc::default();
        let seen = Arc::new(Notify::new());
        let (release, released) = watch::channel(false);
        let (t, s) = (target.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let to = *t.get().expect("the relay's target is set before traffic");
                let (s, released) = (s.clone(), released.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let chunk = &buf[..n];
                        if chunk.windows(22).any(|w| w == b"/.hoard/cluster/purge ") {
                            s.notify_one();
                            let mut r = released.clone();
                            let _ = r.wait_for(|v| *v).await;
                        }
                        if sw.write_all(chunk).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Relay {
            addr,
            target,
            seen,
            release,
        }
    }
}

// s17001: the purge reaches the owner late (held at a relay): meanwhile the
// member that took it (and applied it) forwards a request for the key to the
// owner, which still has the old body. Once the purge is answered,
// acknowledged by every member, that member serves the new body, not the old
// one from its near tier.
#[tokio::test]
async fn s17001_an_old_body_from_an_owner_not_yet_purged_is_not_kept_near() {
    let t = Test::new("s17001");
    let path = "/po/1";
    let owner = owner_of(path, 3);
    let here = (owner + 1) % 3;
    let origin = crate::cluster::origin_serving_versions(&t, path, &["old", "new"]).await;
    let relay = Relay::start().await;
    let (relay_addr, target) = (relay.addr, relay.target.clone());
    // The other members reach the owner through the relay.
    let tune: &Tune = &move |i, c| {
        let cluster = c.cluster.as_mut().unwrap();
        let _ = target.set(cluster.members[owner].addr);
        if i != owner {
            cluster.members[owner].addr = relay_addr;
        }
    };
    let nodes = cluster_sized(&t, &origin, 3, &[], 8 << 20, |_| {}, tune).await;
    // Twice through `here`: the second answer is kept in its near tier.
    for _ in 0..2 {
        t.client(&nodes[here])
            .get(path)
            .send()
            .await
            .expect_body("old");
    }
    nodes[here].expect_counter("cluster_near_stored", 1);
    let purge = {
        let c = t.client(nodes[here].admin());
        tokio::spawn(async move {
            c.post("/purge")
                .hdr("Content-Type", "application/json")
                .body(r#"{"url": "http://localhost/po/1"}"#)
                .send()
                .await
        })
    };
    // The purge is on its way to the owner, held: a request meanwhile gets
    // the old body (the purge is not answered yet), wherever it comes from.
    relay.seen.notified().await;
    let declined = nodes[here].counter("cluster_near_declined");
    t.client(&nodes[here])
        .get(path)
        .send()
        .await
        .expect_body("old");
    nodes[here].expect_counter("cluster_near_declined", declined + 1);
    relay.release.send_replace(true);
    let answer = purge.await.unwrap();
    let acked = acks(&answer);
    for name in ["n1", "n2", "n3"] {
        assert_eq!(acked[name], "acked", "{acked:?}");
    }
    // Acknowledged by every member: no member serves the old body.
    for n in &nodes {
        t.client(n).get(path).send().await.expect_body("new");
    }
    assert!(total(&nodes, "purged_objects") >= 2);
    origin.finish().await;
}
