//! SIGHUP through `hoard reload --pid-file`: the real binary re-reads its
//! file; an invalid file is refused with the `hoard check` text and the
//! running configuration stays; `/status` reports each reload. The admin
//! API's `POST /reload` does the same.

use crate::common;

use std::process::Command;

use common::Hoard;
use hoard_testkit::Test;

fn config(admin: std::net::SocketAddr, ttl: &str) -> String {
    format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[admin]\naddress = \"{admin}\"\n\
         [upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n\
         [[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\ndefault_ttl = {{ \"200\" = \"{ttl}\" }}\n"
    )
}

fn reload(pid_file: &std::path::Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["reload", "--pid-file"])
        .arg(pid_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn sighup_reloads_and_refuses_an_invalid_file() {
    let t = Test::new("cli-reload");
    // A free port for the admin listener.
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let file = t.dir().join("hoard.toml");
    let pid_file = t.dir().join("hoard.pid");
    std::fs::write(&file, config(admin, "1s")).unwrap();
    let mut hoard = Hoard::start(&[
        "run",
        "--config",
        file.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    hoard.wait_log("ready").await;
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, hoard.child.id());
    let status = |t: &Test| {
        let c = t.client(admin);
        async move { c.get("/status").send().await.text() }
    };
    assert!(status(&t).await.contains(r#""generation":1"#));

    std::fs::write(&file, config(admin, "1s") + "bogus_key = 1\n").unwrap();
    reload(&pid_file);
    let line = hoard.wait_log("reload refused").await;
    assert!(
        line.contains("hoard.toml:") && line.contains("bogus_key"),
        "{line}"
    );
    let s = status(&t).await;
    assert!(
        s.contains(r#""generation":1"#) && s.contains(r#""result":"refused""#),
        "{s}"
    );

    std::fs::write(&file, config(admin, "5s")).unwrap();
    reload(&pid_file);
    hoard.wait_log("configuration reloaded").await;
    let s = status(&t).await;
    assert!(
        s.contains(r#""generation":2"#) && s.contains(r#""result":"ok""#),
        "{s}"
    );
    // The admin API's POST /reload does the same.
    std::fs::write(&file, config(admin, "7s")).unwrap();
    let r = t.client(admin).post("/reload").send().await;
    r.expect_status(200);
    assert!(r.text().contains(r#""generation":3"#), "{}", r.text());
    std::fs::write(&file, config(admin, "7s") + "[server]\nbogus = 1\n").unwrap();
    let r = t.client(admin).post("/reload").send().await;
    r.expect_status(409);
    assert!(r.text().contains("bogus"), "{}", r.text());
    // The listener kept its socket.
    t.client(hoard.addr).get("/").send().await;
    hoard.kill9();
}

// The quick start serves HTTPS and HTTP/3 from the command line:
// `--tls-cert`, `--tls-key`, `--http3`.
#[tokio::test]
async fn quick_start_with_tls_and_http3() {
    let dir = tempfile::tempdir().unwrap();
    let ca = hoard_testkit::pki::TestCa::new();
    let (cert, key) = ca.issue(&["localhost"]).write(dir.path(), "server");
    let hoard = Hoard::start(&[
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--http3",
    ])
    .await;
    let line = &hoard.listening;
    assert!(
        line.contains("tls=true") && line.contains("http3=true"),
        "{line}"
    );
}

// Certificate files picked by SNI are read again on SIGHUP: a renewed
// file is taken, a broken one refuses the reload naming the certificate
// and its line (what the new certificate presents is checked in the e2e
// case r03006).
#[tokio::test]
async fn sighup_rereads_certificate_files() {
    let t = Test::new("cli-reload-certs");
    let ca = hoard_testkit::pki::TestCa::new();
    let (a, b) = (
        ca.issue(&["a.example"]).write(t.dir(), "a"),
        ca.issue(&["b.example"]).write(t.dir(), "b"),
    );
    let file = t.dir().join("hoard.toml");
    let pid_file = t.dir().join("hoard.pid");
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = {{ certs = [\n  {{ cert = {:?}, key = {:?} }},\n  {{ cert = {:?}, key = {:?} }},\n] }}\n\
         [upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n",
        a.0.display().to_string(),
        a.1.display().to_string(),
        b.0.display().to_string(),
        b.1.display().to_string(),
    );
    std::fs::write(&file, &text).unwrap();
    let mut hoard = Hoard::start(&[
        "run",
        "--config",
        file.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    hoard.wait_log("ready").await;
    ca.issue(&["b.example"]).write(t.dir(), "b");
    reload(&pid_file);
    hoard.wait_log("configuration reloaded").await;
    // A key that is not the certificate's.
    std::fs::copy(&a.1, &b.1).unwrap();
    reload(&pid_file);
    let line = hoard.wait_log("reload refused").await;
    assert!(
        line.contains("hoard.toml:5") && line.contains("listener[0].tls.certs[1]"),
        "{line}"
    );
    assert!(line.contains("is not the key of"), "{line}");
    hoard.kill9();
}

/// `hoard reload ARGS`: exit code, stdout, stderr.
fn reload_with(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .arg("reload")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

// `hoard reload --admin` waits for the outcome: a refused file exits 1
// with the reason on standard error, a good one exits 0 once it is in
// effect; with --pid-file it signals and reads the outcome in /status; no
// outcome within --wait exits 1 and says so.
#[tokio::test]
async fn reload_exits_with_the_outcome() {
    let t = Test::new("cli-reload-wait");
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let file = t.dir().join("hoard.toml");
    let pid_file = t.dir().join("hoard.pid");
    std::fs::write(&file, config(admin, "1s")).unwrap();
    let mut hoard = Hoard::start(&[
        "run",
        "--config",
        file.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
    ])
    .await;
    hoard.wait_log("ready").await;
    let url = format!("http://{admin}");
    let (pid, url) = (pid_file.to_str().unwrap(), url.as_str());
    for args in [
        vec!["--admin", url],
        vec!["--pid-file", pid, "--admin", url],
    ] {
        std::fs::write(&file, config(admin, "1s") + "bogus_key = 1\n").unwrap();
        let (code, out, err) = reload_with(&args);
        assert_eq!(code, 1, "{args:?}: {out} {err}");
        assert!(
            err.contains("reload refused")
                && err.contains("hoard.toml:")
                && err.contains("bogus_key"),
            "{args:?}: {err}"
        );
        hoard.wait_log("reload refused").await;
        std::fs::write(&file, config(admin, "5s")).unwrap();
        let (code, out, err) = reload_with(&args);
        assert_eq!(code, 0, "{args:?}: {out} {err}");
        assert!(out.contains("configuration reloaded (generation"), "{out}");
        hoard.wait_log("configuration reloaded").await;
    }
    let s = t.client(admin).get("/status").send().await.text();
    assert!(s.contains(r#""generation":3"#), "{s}");
    // A listener that never answers: no outcome within --wait.
    let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let frozen = format!("http://{}", frozen.local_addr().unwrap());
    let (code, _, err) = reload_with(&["--admin", &frozen, "--wait", "300ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no outcome within 300ms"), "{err}");
    // Neither --pid-file nor --admin: usage.
    let (code, _, err) = reload_with(&[]);
    assert_eq!(code, 2, "{err}");
    hoard.kill9();
}
