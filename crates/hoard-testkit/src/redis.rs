//! A real `redis-server` for the cluster-bus cases (Debian's package; the
//! test script installs it): started in the case's directory on a free
//! loopback port, with an append-only file so that a restart keeps the
//! log, and stopped by its process id (also when the case fails).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    addr: SocketAddr,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one in `dir` (created) on a free port; waits until it answers.
    pub async fn start(dir: &Path) -> RedisServer {
        let port = crate::free_port();
        let mut r = RedisServer {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir: dir.to_path_buf(),
        };
        std::fs::create_dir_all(dir).expect("redis directory");
        r.spawn().await;
        r
    }

    async fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.addr.port().to_string())
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "yes", "--appendfsync", "always"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is needed for this case: apt-get install redis-server (./test installs it)");
        self.child = Some(child);
        // Readiness: the port accepts (at most 10 s).
        for _ in 0..1000 {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("redis-server did not listen on {}", self.addr);
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://{}/0", self.addr)
    }

    /// Stops it (SIGKILL: its append-only file, written on every command,
    /// holds everything acknowledged).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    /// Starts it again on the same port with nothing in it (as a Redis
    /// without persistence, or a failover to an empty replica).
    pub async fn restart_empty(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("redis directory");
        self.spawn().await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
