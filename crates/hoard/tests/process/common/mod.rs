//! The real `hoard` binary as a child process, and the lines it logs; or
//! run to its end.

// Each module uses some of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use tokio::sync::mpsc;

/// A running `hoard` binary and the lines it logs (to standard error).
pub struct Hoard {
    pub child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    /// Lines read so far.
    seen: Vec<String>,
    /// The first listener's address.
    pub addr: SocketAddr,
    /// Its `listening` log line.
    pub listening: String,
}

impl Hoard {
    /// Starts `hoard ARGS` and waits until it listens.
    pub async fn start(args: &[&str]) -> Hoard {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hoard"))
            .args(args)
            .env("HOARD_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hoard");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
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
            listening: String::new(),
        };
        let line = hoard.wait_log("listening").await;
        let addr = line.split("addr=").nth(1).expect("addr field");
        hoard.addr = addr.split_whitespace().next().unwrap().parse().unwrap();
        hoard.listening = line;
        hoard
    }

    /// Waits (20 s at most) for a log line containing `text` that was not
    /// returned before; returns it.
    pub async fn wait_log(&mut self, text: &str) -> String {
        if let Some(at) = self.seen.iter().position(|l| l.contains(text)) {
            return self.seen.remove(at);
        }
        let wait = async {
            loop {
                let line = self.lines.recv().await.expect("hoard is running");
                if line.contains(text) {
                    return line;
                }
                self.seen.push(line);
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| panic!("hoard did not log {text:?}; seen: {:?}", self.seen))
    }

    /// SIGKILL.
    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

/// A case that fails half-way leaves no process behind (not even a
/// stopped one).
impl Drop for Hoard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `hoard ARGS` to its end (off the runtime's threads): its exit
/// code, standard output and standard error.
pub async fn run(args: Vec<String>) -> (i32, String, String) {
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
