//! Process control as nginx's, with the real binary: SIGQUIT drains (the
//! request in flight completes); SIGUSR2 and `hoard upgrade --pid-file`
//! hand the listening sockets to a new process of the same binary with no
//! failed request under a loop of new and keep-alive connections; a new
//! process that cannot start leaves the old one serving.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Hoard;
use hoard_testkit::Test;
use rustix::process::{kill_process, Pid, Signal};

const BODY: &str = "served through an upgrade";

/// Polls `ready` every 10 ms until it holds (20 s at most).
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn signal(pid: u32, sig: Signal) {
    kill_process(Pid::from_raw(pid as i32).unwrap(), sig).unwrap();
}

fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Alive, and not a zombie nobody reaped yet.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// The process that took over (not a child of the test): SIGKILLed if the
/// case fails half-way.
struct Successor(u32);

impl Successor {
    /// SIGQUIT; waits until it has drained and removed its pid file.
    async fn quit(self, pid_file: &Path) {
        signal(self.0, Signal::QUIT);
        until("the new process to exit", || !alive(self.0)).await;
        assert!(!pid_file.exists(), "a clean stop removes the pid file");
        std::mem::forget(self);
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        let _ = kill_process(Pid::from_raw(self.0 as i32).unwrap(), Signal::KILL);
    }
}

/// A client loop on real sockets: `new` threads open a connection per
/// request, `keep` threads reuse one keep-alive connection (a new one after
/// `Connection: close`). Strict: any error, short body or other status is
/// a failure; nothing is retried.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// One GET on `stream`; true when the response says `Connection: close`.
fn get(stream: &mut TcpStream, keep: bool, buf: &mut Vec<u8>) -> Result<bool, String> {
    let close = if keep { "" } else { "Connection: close\r\n" };
    stream
        .write_all(format!("GET /x HTTP/1.1\r\nHost: localhost\r\n{close}\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes of head", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return Err(head.lines().next().unwrap_or("").to_string());
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or("no content-length")?;
    while buf.len() < head_end + len {
        match stream.read(&mut chunk) {
            Ok(0) => return Err("closed in the body".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read body: {e}")),
        }
    }
    if &buf[head_end..head_end + len] != BODY.as_bytes() {
        return Err("wrong body".into());
    }
    buf.drain(..head_end + len);
    Ok(head.contains("connection: close"))
}

impl Load {
    fn start(addr: SocketAddr, new: usize, keep: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..new + keep)
            .map(|i| {
                let keep = i >= new;
                let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
                std::thread::spawn(move || {
                    let mut conn: Option<TcpStream> = None;
                    let mut buf = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let stream = match conn.as_mut() {
                            Some(s) => s,
                            None => match TcpStream::connect(addr) {
                                Ok(s) => {
                                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                                    buf.clear();
                                    conn.insert(s)
                                }
                                Err(e) => {
                                    failures.lock().unwrap().push(format!("connect: {e}"));
                                    continue;
                                }
                            },
                        };
                        match get(stream, keep, &mut buf) {
                            Ok(close) => {
                                ok.fetch_add(1, Ordering::Relaxed);
                                if close || !keep {
                                    conn = None;
                                }
                            }
                            Err(e) => {
                                let kind = if keep { "keep-alive" } else { "new" };
                                failures.lock().unwrap().push(format!("{kind}: {e}"));
                                conn = None;
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failures,
            threads,
        }
    }

    fn ok(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits until `n` more requests have succeeded.
    async fn more(&self, n: usize) {
        let want = self.ok() + n;
        until("requests to succeed", || {
            self.ok() >= want || !self.failures.lock().unwrap().is_empty()
        })
        .await;
    }

    /// Stops the loop; returns the successes, asserting no failure.
    fn finish(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let failures = self.failures.lock().unwrap();
        assert!(
            failures.is_empty(),
            "{} failed requests, the first: {:?}",
            failures.len(),
            &failures[..failures.len().min(10)]
        );
        self.ok.load(Ordering::Relaxed)
    }
}

/// Two free loopback ports (held together while chosen, so they differ).
fn free_ports() -> (SocketAddr, SocketAddr) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

fn config(listen: SocketAddr, admin: SocketAddr, origin: SocketAddr) -> String {
    format!(
        "[[listener]]\naddress = \"{listen}\"\n[admin]\naddress = \"{admin}\"\n\
         [upstream.app]\nservers = [\"http://{origin}\"]\n\
         [[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\n"
    )
}

/// An origin that answers `/x` (cacheable; each process has its own
/// cache) until `done` is sent.
async fn origin(t: &Test) -> (hoard_testkit::Origin, tokio::sync::watch::Sender<bool>) {
    let (done, mut stop) = tokio::sync::watch::channel(false);
    let origin = t
        .origin()
        .script(move |mut s| async move {
            loop {
                // (Both cancel-safe.)
                tokio::select! {
                    r = s.rxreq() => r.expect_url("/x"),
                    _ = stop.changed() => break,
                };
                s.txresp(200)
                    .no_date()
                    .hdr("Cache-Control", "max-age=600")
                    .body(BODY)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    (origin, done)
}

/// One request fills the old process's cache: the load then never
/// reaches the origin until a new process serves.
async fn warm(t: &Test, s: &Setup, origin: &hoard_testkit::Origin) {
    t.client(s.hoard.addr)
        .get("/x")
        .send()
        .await
        .expect_status(200)
        .expect_body(BODY);
    assert_eq!(origin.requests(), 1);
}

struct Setup {
    hoard: Hoard,
    file: PathBuf,
    pid_file: PathBuf,
    admin: SocketAddr,
}

async fn start(t: &Test, origin: SocketAddr) -> Setup {
    let (listen, admin) = free_ports();
    let file = t.dir().join("hoard.toml");
    let pid_file = t.dir().join("hoard.pid");
    std::fs::write(&file, config(listen, admin, origin)).unwrap();
    let mut hoard = Hoard::start(&[
        "run",
        "--config",
        file.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    hoard.wait_log("ready").await;
    // (The first "listening" line may be the admin listener's.)
    hoard.addr = listen;
    assert_eq!(read_pid(&pid_file), Some(hoard.child.id()));
    Setup {
        hoard,
        file,
        pid_file,
        admin,
    }
}

fn hoard_upgrade(pid_file: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["upgrade", "--pid-file"])
        .arg(pid_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits for the old process to exit after handing over; returns the new pid.
async fn handed_over(s: &mut Setup) -> Successor {
    handed_over_from(&mut s.hoard, &s.pid_file).await
}

async fn handed_over_from(hoard: &mut Hoard, pid_file: &Path) -> Successor {
    let old = hoard.child.id();
    until("the new process's pid file", || {
        read_pid(pid_file).is_some_and(|p| p != old)
    })
    .await;
    let new = Successor(read_pid(pid_file).unwrap());
    hoard.wait_log("upgrade: the new process is ready").await;
    let mut status = None;
    until("the old process to exit", || {
        status = hoard.child.try_wait().unwrap();
        status.is_some()
    })
    .await;
    assert!(status.unwrap().success(), "old process: {status:?}");
    let mut oldbin = pid_file.to_path_buf().into_os_string();
    oldbin.push(".oldbin");
    assert!(
        !Path::new(&oldbin).exists(),
        "the old pid file goes with it"
    );
    assert!(alive(new.0));
    new
}

#[tokio::test]
async fn sigquit_finishes_the_request_in_flight() {
    let t = Test::new("upgrade-quit");
    let (sent, go) = (t.barrier(2), t.barrier(2));
    let (s2, g2) = (sent.clone(), go.clone());
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/slow");
            s.txresp(200).chunked().send_head().await;
            s.chunk("first half, ").await;
            s2.sync().await;
            // SIGQUIT has been received meanwhile.
            g2.sync().await;
            s.chunk("second half").await;
            s.end().await;
        })
        .start()
        .await;
    let mut hoard = Hoard::start(&["--upstream", &origin.url(), "--listen", "127.0.0.1:0"]).await;
    let response = t.client(hoard.addr).get("/slow").spawn();
    sent.sync().await;
    signal(hoard.child.id(), Signal::QUIT);
    let line = hoard.wait_log("shutting down").await;
    assert!(line.contains("SIGQUIT"), "{line}");
    go.sync().await;
    response
        .await
        .unwrap()
        .expect_status(200)
        .expect_body("first half, second half");
    let status = tokio::task::spawn_blocking(move || {
        let s = hoard.child.wait().unwrap();
        (s, hoard)
    })
    .await
    .unwrap()
    .0;
    assert!(status.success(), "{status:?}");
    origin.finish().await;
}

#[tokio::test]
async fn sigusr2_hands_over_with_no_failed_request() {
    let t = Test::new("upgrade-usr2");
    let (origin, done) = origin(&t).await;
    let mut s = start(&t, origin.addr()).await;
    warm(&t, &s, &origin).await;
    let load = Load::start(s.hoard.addr, 4, 4);
    load.more(200).await;
    assert_eq!(origin.requests(), 1, "hits");
    signal(s.hoard.child.id(), Signal::USR2);
    let new = handed_over(&mut s).await;
    // The new process serves the same sockets, the admin listener's too.
    load.more(200).await;
    let served = load.finish();
    assert!(served >= 400, "{served}");
    let status = t.client(s.admin).get("/status").send().await;
    status.expect_status(200);
    assert!(
        origin.requests() >= 2,
        "the new process filled its own cache"
    );
    new.quit(&s.pid_file).await;
    done.send(true).unwrap();
    origin.finish().await;
}

#[tokio::test]
async fn a_new_process_that_cannot_start_leaves_the_old_one_serving() {
    let t = Test::new("upgrade-fail");
    let (origin, done) = origin(&t).await;
    let mut s = start(&t, origin.addr()).await;
    warm(&t, &s, &origin).await;
    let old = s.hoard.child.id();
    let load = Load::start(s.hoard.addr, 4, 4);
    load.more(200).await;
    let good = std::fs::read_to_string(&s.file).unwrap();
    std::fs::write(&s.file, format!("{good}bogus_key = 1\n")).unwrap();
    hoard_upgrade(&s.pid_file);
    let line = s.hoard.wait_log("upgrade failed").await;
    assert!(
        line.contains("this process serves on") && line.contains("exit status: 2"),
        "{line}"
    );
    // The new process said why on the same standard error.
    s.hoard.wait_log("bogus_key").await;
    assert_eq!(read_pid(&s.pid_file), Some(old), "pid file restored");
    load.more(200).await;
    assert!(s.hoard.child.try_wait().unwrap().is_none());
    assert_eq!(origin.requests(), 1, "the old process served it all");

    // Fixed: `hoard upgrade` hands over.
    std::fs::write(&s.file, good).unwrap();
    hoard_upgrade(&s.pid_file);
    let new = handed_over(&mut s).await;
    load.more(200).await;
    load.finish();
    assert!(
        origin.requests() >= 2,
        "the new process filled its own cache"
    );
    new.quit(&s.pid_file).await;
    done.send(true).unwrap();
    origin.finish().await;
}

#[tokio::test]
async fn tls_http3_and_admin_sockets_are_inherited() {
    let t = Test::new("upgrade-h3");
    let ca = hoard_testkit::pki::TestCa::new();
    let (cert, key) = ca.issue(&["localhost"]).write(t.dir(), "server");
    let (listen, admin) = free_ports();
    let pid_file = t.dir().join("hoard.pid");
    let mut hoard = Hoard::start(&[
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        &listen.to_string(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--http3",
        "--admin",
        &admin.to_string(),
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    hoard.wait_log("ready").await;
    signal(hoard.child.id(), Signal::USR2);
    for (kind, addr) in [("admin", admin), ("tcp", listen), ("udp", listen)] {
        let line = hoard
            .wait_log(&format!("listening socket inherited kind=\"{kind}\""))
            .await;
        assert!(line.contains(&format!("addr={addr}")), "{line}");
    }
    let new = handed_over_from(&mut hoard, &pid_file).await;
    // The old process is gone; the ports are still the new one's.
    let udp = std::net::UdpSocket::bind(listen).unwrap_err();
    assert_eq!(udp.kind(), std::io::ErrorKind::AddrInUse);
    t.client(admin)
        .get("/status")
        .send()
        .await
        .expect_status(200);
    new.quit(&pid_file).await;
}

#[test]
fn hoard_upgrade_names_a_missing_pid_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.pid");
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["upgrade", "--pid-file"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("hoard: upgrade:") && err.contains("none.pid"),
        "{err}"
    );
    std::fs::write(&missing, "twelve\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["upgrade", "--pid-file"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a process id"),
        "{err}"
    );
}
