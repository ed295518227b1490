//! `[server] user`: started as root, the binary binds and opens as root,
//! then serves as that user; `hoard check` says what the user needs and
//! names an unknown user or group with file, line and key.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::Hoard;
use hoard_testkit::Test;

fn hoard(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(args)
        .output()
        .expect("run hoard");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The ids on a `Uid:` or `Gid:` line of /proc/PID/status (real,
/// effective, saved, filesystem).
fn ids(pid: u32, field: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    line[field.len()..]
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// Every entry under `dir` (itself included) with its owner.
fn owners(dir: &Path) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let m = std::fs::symlink_metadata(dir).unwrap();
    out.push((dir.display().to_string(), m.uid(), m.gid()));
    if m.is_dir() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            out.extend(owners(&e.path()));
        }
    }
    out
}

fn config(dir: &Path, origin: std::net::SocketAddr, server: &str) -> String {
    format!(
        "[server]\n{server}\n\
         [[listener]]\naddress = \"127.0.0.1:0\"\n\
         [cache]\ndir = \"{cache}\"\n\
         [access_log]\ntarget = \"{log}\"\n\
         [upstream.app]\nservers = [\"http://{origin}\"]\n\
         [[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\n",
        cache = dir.join("cache").display(),
        log = dir.join("access.log").display(),
    )
}

// Started as root with `user = "nobody"`: the process's real, effective,
// saved and filesystem ids are nobody's once it is ready; it serves a
// request from an origin on loopback, and the disk zone it created as
// root and the access log it opened are nobody's, with the object's file
// and the log line written as nobody.
#[tokio::test]
async fn serves_as_the_configured_user() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let t = Test::new("cli-user");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/a");
            // The binary's clock is the system's: no test-clock `Date`.
            s.txresp(200)
                .no_date()
                .hdr("Cache-Control", "max-age=600")
                .body("as nobody")
                .send()
                .await;
        })
        .start()
        .await;
    // nobody must reach the files: a directory of its own parents allow.
    let dir = t.dir().join("run");
    std::fs::create_dir(&dir).unwrap();
    for p in [t.dir(), dir.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let file = dir.join("hoard.toml");
    std::fs::write(&file, config(&dir, origin.addr(), "user = \"nobody\"")).unwrap();
    let (code, out, err) = hoard(&["check", "--config", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "runs as nobody:nogroup; needs write access to {}, {}",
            dir.join("cache").display(),
            dir.join("access.log").display()
        )),
        "{out}"
    );

    let mut hoard = Hoard::start(&["run", "--config", file.to_str().unwrap()]).await;
    hoard.wait_log("serving as an unprivileged user").await;
    hoard.wait_log("ready").await;
    let pid = hoard.child.id();
    assert_eq!(ids(pid, "Uid:"), [65534; 4]);
    assert_eq!(ids(pid, "Gid:"), [65534; 4]);
    assert_eq!(ids(pid, "Groups:"), [65534]);

    t.client(hoard.addr)
        .get("/a")
        .send()
        .await
        .expect_status(200)
        .expect_body("as nobody");
    // Stored on disk: the second request is a hit.
    t.client(hoard.addr)
        .get("/a")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body("as nobody");
    origin.finish().await;

    let cache = owners(&dir.join("cache"));
    assert!(cache.len() > 1, "{cache:?}");
    assert!(
        cache.iter().all(|(_, u, g)| (*u, *g) == (65534, 65534)),
        "{cache:?}"
    );
    // The access log: nobody's, and the lines reach it (the writer is
    // asked to reopen, which needs the file to be nobody's).
    let log = dir.join("access.log");
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), 65534);
    let mut lines = String::new();
    for _ in 0..200 {
        lines = std::fs::read_to_string(&log).unwrap();
        if lines.matches("/a").count() >= 2 {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(lines.matches("/a").count(), 2, "{lines}");
    hoard.kill9();
}

// An unknown user or group: `hoard check` (and start) exit 2 naming the
// file, the line and the key; `group` without `user` too.
#[test]
fn unknown_user_or_group_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let origin: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    for (server, key, msg) in [
        (
            "user = \"no-such-user-x\"",
            "server.user",
            "no user \"no-such-user-x\"",
        ),
        (
            "user = \"nobody\"\ngroup = \"no-such-group-x\"",
            "server.group",
            "no group \"no-such-group-x\"",
        ),
        ("group = \"nogroup\"", "server.group", "needs `user`"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, config(dir.path(), origin, server)).unwrap();
        let line = if server.starts_with("user") && key == "server.group" {
            3
        } else {
            2
        };
        for cmd in ["check", "run"] {
            let (code, _, err) = hoard(&[cmd, "--config", path.to_str().unwrap()]);
            assert_eq!(code, 2, "{cmd}: {err}");
            assert!(err.contains(&format!("bad.toml:{line}")), "{err}");
            assert!(err.contains(key), "{err}");
            assert!(err.contains(msg), "{err}");
        }
    }
}

// Started as another user than root or the configured one: hoard refuses
// to start and says why.
#[tokio::test]
async fn refuses_to_start_as_another_user() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = dir.path().join("hoard.toml");
    let origin: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    std::fs::write(&path, config(dir.path(), origin, "user = \"daemon\"")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // Run as nobody (setpriv drops before exec).
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_hoard"),
            "run",
            "--config",
            path.to_str().unwrap(),
        ])
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("started as uid 65534 gid 65534, which is neither root nor daemon:daemon"),
        "{err}"
    );
}
