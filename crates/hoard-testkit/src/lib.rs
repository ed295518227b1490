//! varnishtest-style harness for hoard: a strict scripted fake origin, a
//! raw-socket client, barriers and a controllable clock, all owned by a [`Test`].
//!
//! ```no_run
//! # async fn case() {
//! use hoard_testkit::Test;
//! let t = Test::new("a00001");
//! let origin = t
//!     .origin()
//!     .script(|mut s| async move {
//!         s.rxreq().await.expect_url("/a");
//!         s.txresp(200).hdr("Cache-Control", "max-age=10").body("v1").send().await;
//!     })
//!     .start()
//!     .await;
//! t.client(&origin).get("/a").send().await.expect_status(200).expect_body("v1");
//! origin.finish().await;
//! # }
//! ```
//!
//! Environment: `HOARD_TEST_VERBOSE=1` prints every transcript (use
//! `--nocapture`), `HOARD_TEST_KEEP=1` keeps the temp directory.

#![deny(missing_docs)]

pub mod barrier;
mod check;
pub mod client;
pub mod clock;
pub mod dns;
pub mod h2_origin;
pub mod origin;
mod ports;
pub mod proxy;
pub mod redis;
pub mod transcript;
mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

pub mod pki;
pub use barrier::Barrier;
pub use client::{cache_status_params, Client, ClientError, Conn, RequestBuilder, Response};
pub use clock::TestClock;
pub use h2_origin::{H2Origin, H2OriginBuilder, H2Request, Reply};
pub use origin::{Origin, OriginBuilder, Request, Script};
pub use ports::free_port;
pub use proxy::{ProxyBuilder, TestProxy};
pub use transcript::Transcript;

/// Something a client can connect to: a [`SocketAddr`], an [`Origin`], a proxy.
pub trait Endpoint {
    /// The address to connect to.
    fn endpoint(&self) -> SocketAddr;
}

impl Endpoint for SocketAddr {
    fn endpoint(&self) -> SocketAddr {
        *self
    }
}

impl<T: Endpoint + ?Sized> Endpoint for &T {
    fn endpoint(&self) -> SocketAddr {
        (**self).endpoint()
    }
}

/// The temp directory of a case: removed on drop, or kept.
enum Dir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

/// One test case: its clock, transcript, temp directory and actors.
pub struct Test {
    name: String,
    /// The clock shared by the fake origin (`Date`) and the proxy.
    pub clock: TestClock,
    transcript: Transcript,
    dir: Dir,
    /// Per-prefix counters for actor names (`c1`, `s1`, `b1`, ...).
    ids: Mutex<HashMap<String, usize>>,
}

impl Test {
    /// Sets up case `name` (e.g. `"w00001"`): a clock at 2026-01-01T00:00:00Z,
    /// an empty transcript and a fresh temp directory named after the case.
    pub fn new(name: &str) -> Self {
        let transcript = Transcript::new(name);
        let clock = TestClock::with_transcript(transcript.clone());
        let tmp = tempfile::Builder::new()
            .prefix(&format!("hoard-{name}-"))
            .tempdir()
            .expect("test: create temp dir");
        let dir = match env_flag("HOARD_TEST_KEEP") {
            true => Dir::Kept(tmp.keep()),
            false => Dir::Temp(tmp),
        };
        let t = Self {
            name: name.to_owned(),
            clock,
            transcript,
            dir,
            ids: Mutex::new(HashMap::new()),
        };
        t.transcript.log(
            "test",
            format_args!("start {name}, dir {}", t.dir().display()),
        );
        t
    }

    /// The case name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The case's temp directory.
    pub fn dir(&self) -> &Path {
        match &self.dir {
            Dir::Temp(d) => d.path(),
            Dir::Kept(p) => p,
        }
    }

    /// The case's transcript (clone it to keep a handle).
    pub fn transcript(&self) -> &Transcript {
        &self.transcript
    }

    /// The next actor name with `prefix`: `"c1"`, `"c2"`, ...
    pub fn next_name(&self, prefix: &str) -> String {
        let mut ids = self.ids.lock();
        let n = ids.entry(prefix.to_owned()).or_insert(0);
        *n += 1;
        format!("{prefix}{n}")
    }

    /// A barrier for `n` parties (named `b1`, `b2`, ... in the transcript).
    pub fn barrier(&self, n: usize) -> Barrier {
        Barrier::build(
            n,
            format!("barrier {}", self.next_name("b")),
            Some(self.transcript.clone()),
        )
    }

    /// A fake origin to configure (`s1`, `s2`, ...); see [`origin`].
    pub fn origin(&self) -> OriginBuilder {
        let name = format!("origin {}", self.next_name("s"));
        OriginBuilder::new(name, self.transcript.clone(), self.clock.clone())
    }

    /// A fake origin that speaks HTTP/2 (`s1`, `s2`, ...); see
    /// [`h2_origin`].
    pub fn h2_origin(&self) -> H2OriginBuilder {
        let name = format!("origin {}", self.next_name("s"));
        H2OriginBuilder::new(name, self.transcript.clone())
    }

    /// A raw client (`c1`, `c2`, ...) for `target`; see [`client`].
    pub fn client(&self, target: impl Endpoint) -> Client {
        Client::new(
            target.endpoint(),
            self.next_name("c"),
            self.transcript.clone(),
        )
    }
}

impl Drop for Test {
    /// Prints the transcript if the case failed (or always when verbose) and
    /// says where a kept directory is.
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if env_flag("HOARD_TEST_VERBOSE") {
            self.transcript.print(false);
        } else if panicking {
            self.transcript.print(true);
        }
        if let Dir::Kept(p) = &self.dir {
            eprintln!("{}: kept temp dir {}", self.name, p.display());
        }
    }
}

impl std::fmt::Debug for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Test")
            .field("name", &self.name)
            .field("dir", &self.dir())
            .finish()
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}
