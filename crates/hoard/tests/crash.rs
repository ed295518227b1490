//! A `kill -9` of the real binary in the middle of writing an object to
//! disk: after a restart every complete object is a hit, the partial one
//! is never served (its temporary file is removed and counted) and is
//! fetched again.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use hoard_testkit::Test;
use tokio::sync::mpsc;

/// A running `hoard` binary and the lines it logs.
struct Hoard {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    /// Lines read so far (the loader may log before the listener does).
    seen: Vec<String>,
    addr: SocketAddr,
}

impl Hoard {
    async fn start(origin: SocketAddr, dir: &Path) -> Hoard {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hoard"))
            .args([
                "--upstream",
                &format!("http://{origin}"),
                "--listen",
                "127.0.0.1:0",
                "--cache-dir",
                dir.to_str().unwrap(),
                "--cache-size",
                "0",
                "--threads",
                "1",
            ])
            .env("HOARD_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hoard");
        // The log goes to standard output.
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut hoard = Hoard {
            child,
            lines,
            seen: Vec::new(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = hoard.wait_log("listening").await;
        let addr = line.split("addr=").nth(1).expect("addr field");
        hoard.addr = addr.split_whitespace().next().unwrap().parse().unwrap();
        hoard
    }

    /// Waits (20 s at most) for a log line containing `text`; returns it.
    async fn wait_log(&mut self, text: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
            return l.clone();
        }
        let wait = async {
            loop {
                let line = self.lines.recv().await.expect("hoard is running");
                self.seen.push(line.clone());
                if line.contains(text) {
                    return line;
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| panic!("hoard did not log {text:?}"))
    }

    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(dir).unwrap().flatten() {
        if sub.path().is_dir() {
            for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
                out.push(f.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out
}

#[tokio::test]
async fn kill_9_mid_write_leaves_no_servable_partial_object() {
    let t = Test::new("crash");
    let killed = t.barrier(2);
    let k = killed.clone();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b = big.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/done");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .body(b)
                .send()
                .await;
            s.rxreq().await.expect_url("/partial");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            let mut part = vec![b'p'; 2_000_000];
            part.extend_from_slice(b"HALFWAY");
            s.chunk(part).await;
            // The proxy is killed here, mid-body.
            k.sync().await;
            s.rxreq().await.expect_url("/partial");
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .body("complete")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let mut hoard = Hoard::start(origin.addr(), &dir).await;
    hoard.wait_log("disk: zone loaded").await;
    t.client(hoard.addr)
        .get("/done")
        .send()
        .await
        .expect_body(&big);
    let mut conn = t.client(hoard.addr).connect().await;
    conn.get("/partial").tx().await;
    conn.read_until("HALFWAY").await;
    assert!(
        files(&dir).iter().any(|f| f.ends_with(".tmp")),
        "the partial object is being written: {:?}",
        files(&dir)
    );
    hoard.kill9();
    killed.sync().await;

    let mut hoard = Hoard::start(origin.addr(), &dir).await;
    let loaded = hoard.wait_log("disk: zone loaded").await;
    assert!(loaded.contains("objects=1"), "{loaded}");
    assert!(
        !files(&dir).iter().any(|f| f.ends_with(".tmp")),
        "temporary file removed: {:?}",
        files(&dir)
    );
    t.client(hoard.addr)
        .get("/done")
        .send()
        .await
        .expect_body(&big)
        .expect_cache_status("hit");
    t.client(hoard.addr)
        .get("/partial")
        .send()
        .await
        .expect_body("complete")
        .expect_cache_status("fwd=uri-miss");
    hoard.kill9();
    origin.finish().await;
}
