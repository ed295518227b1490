//! u (filters): Proxy-Wasm filters in a route's phases: on misses and hits,
//! answering, failing (a trap, a spent budget), setting the cache key and
//! rewriting the path, swapped by a reload, refused with the key and line
//! when bad; and filters built from a public SDK (AssemblyScript) as part
//! of the set-up.

use std::path::{Path, PathBuf};

use hoard_config::Config;
use hoard_testkit::Test;

use super::secs;

/// A fixture module (`fixtures/filters/NAME.wat`) with the shared prelude
/// spliced in, written to the test's directory; its path.
fn fixture(t: &Test, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/fixtures/filters");
    let prelude = std::fs::read_to_string(dir.join("prelude.wat")).unwrap();
    let own = std::fs::read_to_string(dir.join(format!("{name}.wat"))).unwrap();
    // A fixture with its own `proxy_on_configure` replaces the prelude's.
    let prelude = if own.contains(r#"(export "proxy_on_configure")"#) {
        prelude.replace(
            r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))"#,
            "",
        )
    } else {
        prelude
    };
    let text = own.replace("  ;; prelude", &prelude);
    let out = t.dir().join(format!("{name}.wat"));
    std::fs::write(&out, text).unwrap();
    out
}

/// `[filter.NAME]` for each fixture, then `rest`.
fn with_filters(t: &Test, names: &[&str], rest: &str) -> String {
    let mut text = String::new();
    for n in names {
        text.push_str(&format!(
            "[filter.{n}]\nwasm = {:?}\n",
            fixture(t, n).display().to_string()
        ));
        if *n == "stamp" {
            text.push_str("config = \"edge-7\"\n");
        }
        if *n == "trap" {
            text.push_str("fuel = 200000\n");
        }
    }
    text.push_str(rest);
    text
}

const ROUTES: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/deny-first"
filters = ["deny", "stamp"]
[[site.route]]
prefix = "/stamp-first"
filters = ["stamp", "deny"]
[[site.route]]
prefix = "/trap"
filters = ["trap"]
[[site.route]]
prefix = "/"
filters = ["stamp"]
"#;

// u16001: a filter sees the request before the origin and every response
// after: a miss and then a hit both get its field, the origin gets the
// filter's request field, and the stored response does not keep the
// response field (the hit has it once).
#[tokio::test]
async fn u16001_a_filter_runs_on_misses_and_hits() {
    let t = Test::new("u16001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/a")
                .expect_header("x-filtered", "1");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("a")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["stamp", "deny", "trap"], ROUTES);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let miss = t.client(&proxy).get("/a").send().await;
    miss.expect_status(200)
        .expect_body("a")
        .expect_cache_status("fwd=uri-miss")
        .expect_header("x-filter", "edge-7");
    let hit = t.client(&proxy).get("/a").send().await;
    hit.expect_body("a").expect_cache_status("hit");
    assert_eq!(hit.header_all("x-filter"), ["edge-7"]);
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

// u16002: a filter's local response answers the request: the origin never
// sees it; the filters after the one that answered never run, the ones
// before it see the answer on its way out; HEAD gets no body.
#[tokio::test]
async fn u16002_a_filter_answers() {
    let t = Test::new("u16002");
    let origin = t.origin().script(|_| async move {}).start().await;
    let cfg = with_filters(&t, &["stamp", "deny", "trap"], ROUTES);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let first = t
        .client(&proxy)
        .get("/deny-first")
        .hdr("x-deny", "1")
        .send()
        .await;
    first
        .expect_status(403)
        .expect_body("denied\n")
        .expect_header("x-denied-by", "wat")
        .expect_cache_status("detail=filter")
        .expect_no_header("x-filter");
    let second = t
        .client(&proxy)
        .get("/stamp-first")
        .hdr("x-deny", "yes")
        .send()
        .await;
    second
        .expect_status(403)
        .expect_header("x-filter", "edge-7");
    t.client(&proxy)
        .head("/deny-first")
        .hdr("x-deny", "1")
        .send()
        .await
        .expect_status(403)
        .expect_body("");
    proxy.expect_counter("filter_answers", 3);
    origin.finish().await;
}

// u16003: a filter that traps, or spins past its fuel, fails that one
// request with 500 (counted, never reaching the origin); the next request
// on the route is served by a new VM. /status, /metrics and the dashboard
// (headless Chromium) show each filter's contexts and failures by kind.
#[tokio::test]
async fn u16003_a_failing_filter_costs_one_request() {
    let t = Test::new("u16003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/trap/ok");
            s.txresp(200).body("ok").send().await;
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["stamp", "deny", "trap"], ROUTES);
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &cfg)
        .admin()
        .start()
        .await;
    t.client(&proxy)
        .get("/trap/x")
        .hdr("x-boom", "1")
        .send()
        .await
        .expect_status(500);
    t.client(&proxy)
        .get("/trap/y")
        .hdr("x-spin", "1")
        .send()
        .await
        .expect_status(500);
    proxy.expect_counter("filter_failures", 2);
    t.client(&proxy)
        .get("/trap/ok")
        .send()
        .await
        .expect_status(200)
        .expect_body("ok");
    proxy.expect_counter("filter_failures", 2);
    // By filter and kind, in /status and /metrics.
    let st = crate::admin::status(&t, &proxy).await;
    let trap = st["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "trap")
        .unwrap()
        .clone();
    assert_eq!(trap["failures"]["trap"], 1, "{trap}");
    assert_eq!(trap["failures"]["budget"], 1, "{trap}");
    assert_eq!(trap["contexts"], 3, "{trap}");
    assert_eq!(trap["abi"], "proxy_abi_version_0_2_1", "{trap}");
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    for line in [
        "hoard_filter_failures_total{filter=\"trap\",failure=\"trap\"} 1",
        "hoard_filter_failures_total{filter=\"trap\",failure=\"budget\"} 1",
        "hoard_filter_contexts_total{filter=\"trap\"} 3",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    super::o_metrics::promtool_accepts(&text);
    let shown = crate::admin::settled_dashboard(&t, &proxy).await;
    let i = st["filters"]
        .as_array()
        .unwrap()
        .iter()
        .position(|f| f["name"] == "trap")
        .unwrap();
    assert_eq!(shown[&format!("filters.{i}.name")], "trap");
    assert_eq!(shown[&format!("filters.{i}.failures.budget")], "1");
    origin.finish().await;
}

// u16004: a filter adds a request field to the cache key (`hoard.cache_key`)
// and rewrites a path: two devices are two objects, the same device a hit;
// `/old` goes to the origin as `/new`.
#[tokio::test]
async fn u16004_a_filter_sets_the_key_and_the_path() {
    let t = Test::new("u16004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for device in ["phone", "desk"] {
                s.rxreq()
                    .await
                    .expect_url("/p")
                    .expect_header("x-device", device);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(device)
                    .send()
                    .await;
            }
            s.rxreq().await.expect_url("/new");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("new")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = with_filters(
        &t,
        &["device"],
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["device"]
"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let get = |device: &'static str| {
        let c = t.client(&proxy);
        async move { c.get("/p").hdr("x-device", device).send().await }
    };
    get("phone")
        .await
        .expect_body("phone")
        .expect_cache_status("fwd=uri-miss");
    get("desk")
        .await
        .expect_body("desk")
        .expect_cache_status("fwd=uri-miss");
    get("phone")
        .await
        .expect_body("phone")
        .expect_cache_status("hit");
    get("desk")
        .await
        .expect_body("desk")
        .expect_cache_status("hit");
    t.client(&proxy).get("/old").send().await.expect_body("new");
    // Keyed as rewritten: `/new` is the same object.
    t.client(&proxy)
        .get("/new")
        .send()
        .await
        .expect_body("new")
        .expect_cache_status("hit");
    origin.finish().await;
}

// u16005: a reload swaps a filter's module and configuration for new
// requests; a reload with a bad module is refused and the running filter
// stays.
#[tokio::test]
async fn u16005_a_reload_swaps_filters() {
    let t = Test::new("u16005");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..3 {
                s.rxreq().await.expect_url("/a");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body("a")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["stamp", "deny", "trap"], ROUTES);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_header("x-filter", "edge-7");
    let next = cfg.replace("config = \"edge-7\"", "config = \"edge-8\"");
    proxy.reload_toml(&origin, &next).unwrap();
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_header("x-filter", "edge-8");
    let bad = t.dir().join("bad.wasm");
    std::fs::write(&bad, b"\0asm\x01\0\0\0garbage").unwrap();
    let broken = next.replace(
        &format!("{:?}", t.dir().join("stamp.wat").display().to_string()),
        &format!("{:?}", bad.display().to_string()),
    );
    let e = proxy.reload_toml(&origin, &broken).unwrap_err();
    assert!(
        e.contains("filter.stamp") && e.contains("not a valid module"),
        "{e}"
    );
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_header("x-filter", "edge-8");
    origin.finish().await;
}

// u16006: bad filter configuration names the key and the line: a missing
// file, a file that is no module, a module without an ABI version, an
// import hoard does not provide, a configuration the filter refuses, an
// unknown filter on a route, both `config` and `config_file`, too little
// fuel.
#[tokio::test]
async fn u16006_bad_filters_are_refused() {
    let t = Test::new("u16006");
    let good = fixture(&t, "stamp");
    let text_of = |name: &str, body: &str| {
        let p = t.dir().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let prelude = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/fixtures/filters/prelude.wat"),
    )
    .unwrap();
    let no_version = text_of(
        "noversion.wat",
        &format!(
            "(module {})",
            prelude.replace(r#"(func (export "proxy_abi_version_0_2_1"))"#, "")
        ),
    );
    let bad_import = text_of(
        "import.wat",
        &format!(
            "(module (import \"env\" \"proxy_teleport\" (func (param i32) (result i32))) {prelude})"
        ),
    );
    let refuses = text_of(
        "refuses.wat",
        &format!(
            "(module {})",
            prelude.replace(
                r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))"#,
                r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 0))"#
            )
        ),
    );
    let junk = text_of("junk.wasm", "not a module");
    let route = "\n[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";
    let good = good.display().to_string();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!("[filter.f]\nwasm = \"/nonexistent/f.wasm\"\n{route}"),
            "filter.f.wasm",
            "cannot read",
        ),
        (
            format!("[filter.f]\nwasm = {junk:?}\n{route}"),
            "filter.f",
            "not a valid module",
        ),
        (
            format!("[filter.f]\nwasm = {no_version:?}\n{route}"),
            "filter.f",
            "exports no supported Proxy-Wasm ABI version",
        ),
        (
            format!("[filter.f]\nwasm = {bad_import:?}\n{route}"),
            "filter.f",
            "proxy_teleport",
        ),
        (
            format!("[filter.f]\nwasm = {refuses:?}\n{route}"),
            "filter.f",
            "refused the configuration",
        ),
        (
            format!("[filter.f]\nwasm = {good:?}\n{route}filters = [\"nope\"]\n"),
            "site[0].route[0].filters",
            "unknown filter \"nope\" (defined: f)",
        ),
        (
            format!("[filter.f]\nwasm = {good:?}\n{route}origin_filters = [\"f\", \"f\"]\n"),
            "site[0].route[0].origin_filters",
            "filter \"f\" is listed twice",
        ),
        (
            format!("[filter.f]\nwasm = {good:?}\nconfig = \"a\"\nconfig_file = \"b\"\n{route}"),
            "filter.f.config_file",
            "not both",
        ),
        (
            format!("[filter.f]\nwasm = {good:?}\nfuel = 10\n{route}"),
            "filter.f.fuel",
            "at least 1000",
        ),
    ];
    for (text, key, message) in cases {
        let e = Config::from_toml("bad.toml", &text).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.line.is_some(), "no line: {e}");
        assert!(e.to_string().contains(message), "{e}");
    }
}

/// The AssemblyScript SDK's filters (`examples/filters/assemblyscript`),
/// built by its script into the target directory (npm keeps its packages
/// there between runs); their directory.
fn sdk_filters() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let out = target.join("filters-as/out");
    let status = std::process::Command::new("bash")
        .arg(root.join("examples/filters/assemblyscript/build.sh"))
        .arg(&out)
        .env("BUILD_DIR", target.join("filters-as/work"))
        .status()
        .expect("bash runs the SDK build");
    assert!(status.success(), "the AssemblyScript filters did not build");
    out
}

// u16007: filters built from a public SDK (AssemblyScript,
// `@solo-io/proxy-runtime` from the npm registry) run unchanged: one adds a
// response field from its configuration, one answers 403, one sends the
// origin what it read from hoard's properties (path, method, client,
// root id); a hit goes through them too.
#[tokio::test]
async fn u16007_filters_from_the_assemblyscript_sdk() {
    let t = Test::new("u16007");
    let out = sdk_filters();
    let origin = t
        .origin()
        .script(|mut s| async move {
            let req = s.rxreq().await;
            req.expect_url("/p?x=1");
            let props = req.header("x-props").unwrap_or_default();
            assert!(props.starts_with("/p?x=1|GET|127.0.0.1:"), "{props}");
            assert!(props.ends_with('|'), "root id: {props}");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("p")
                .send()
                .await;
        })
        .start()
        .await;
    let wasm = |n: &str| format!("{:?}", out.join(format!("{n}.wasm")).display().to_string());
    let cfg = format!(
        r#"
[filter.stamp]
wasm = {}
config = "edge-7"
[filter.deny]
wasm = {}
[filter.props]
wasm = {}
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["deny", "props", "stamp"]
"#,
        wasm("add_header"),
        wasm("deny"),
        wasm("echo_props")
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/p?x=1")
        .send()
        .await
        .expect_status(200)
        .expect_body("p")
        .expect_header("x-filter", "edge-7")
        .expect_cache_status("fwd=uri-miss");
    let hit = t.client(&proxy).get("/p?x=1").send().await;
    hit.expect_body("p").expect_cache_status("hit");
    assert_eq!(hit.header_all("x-filter"), ["edge-7"]);
    t.client(&proxy)
        .get("/p?x=1")
        .hdr("x-deny", "")
        .send()
        .await
        .expect_status(403)
        .expect_body("denied\n")
        .expect_header("x-denied-by", "filter");
    proxy.expect_counter("filter_failures", 0);
    proxy.expect_counter("filter_answers", 1);
    origin.finish().await;
}

// u16008: a filter's metrics reach `/metrics` (a counter, a gauge and a
// histogram, by filter and name; `promtool` accepts them), and shared data
// is common to its VMs.
#[tokio::test]
async fn u16008_filter_metrics_and_shared_data() {
    let t = Test::new("u16008");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..2 {
                s.rxreq().await.expect_url("/a");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body("a")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = with_filters(
        &t,
        &["count"],
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["count"]
"#,
    );
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &cfg)
        .admin()
        .start()
        .await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/a")
            .send()
            .await
            .expect_body("a")
            .expect_header("x-shared", "first");
    }
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    for line in [
        "hoard_filter_events_total{filter=\"count\",name=\"responses\"} 2",
        "hoard_filter_observed_count{filter=\"count\",name=\"fields_seen\"} 2",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    assert!(
        text.contains("hoard_filter_value{filter=\"count\",name=\"fields\"} "),
        "{text}"
    );
    super::o_metrics::promtool_accepts(&text);
    origin.finish().await;
}

/// `pairs` in the ABI's form, written as a WebAssembly text string.
fn wat_pairs(pairs: &[(&str, &str)]) -> (String, usize) {
    let mut b = (pairs.len() as u32).to_le_bytes().to_vec();
    for (k, v) in pairs {
        b.extend_from_slice(&(k.len() as u32).to_le_bytes());
        b.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        b.extend_from_slice(k.as_bytes());
        b.push(0);
        b.extend_from_slice(v.as_bytes());
        b.push(0);
    }
    (b.iter().map(|x| format!("\\{x:02x}")).collect(), b.len())
}

// u16009: a filter pauses a request for an HTTP call through one of
// hoard's upstreams and decides on its answer: a 200 lets the request go
// on to the cache and the origin, a 401 makes the filter answer 403 (the
// origin never sees that request). No worker waits: the call is the
// request's own wait.
#[tokio::test]
async fn u16009_a_filter_calls_out_and_resumes() {
    let t = Test::new("u16009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/auth")
                .expect_header("host", "auth.internal")
                .expect_header("x-asked-by", "filter");
            s.txresp(200).body("yes").send().await;
            s.rxreq().await.expect_url("/page");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .body("page")
                .send()
                .await;
            s.rxreq().await.expect_url("/auth");
            s.txresp(401).body("no").send().await;
        })
        .start()
        .await;
    let (pairs, len) = wat_pairs(&[
        (":method", "GET"),
        (":path", "/auth"),
        (":authority", "auth.internal"),
        ("x-asked-by", "filter"),
    ]);
    let auth = format!(
        r#"(module
  (import "env" "proxy_http_call" (func $call (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  ;; prelude
  (data (i32.const 1024) "app")
  (data (i32.const 1100) "{pairs}")
  (data (i32.const 1400) ":status")
  (data (i32.const 1440) "denied by auth\n")
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $call (i32.const 1024) (i32.const 3) (i32.const 1100) (i32.const {len}) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 5000) (i32.const 2040)))
    (i32.const 1))
  (func (export "proxy_on_http_call_response") (param i32 i32 i32 i32 i32)
    ;; a failed call (no fields) or a status that is not 2xx: 403
    (if (i32.eqz (local.get 2))
      (then (drop (call $local (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 1440) (i32.const 15) (i32.const 0) (i32.const 0) (i32.const -1))) (return)))
    (drop (call $get (i32.const 6) (i32.const 1400) (i32.const 7) (i32.const 2048) (i32.const 2052)))
    (if (i32.ne (i32.load8_u (i32.load (i32.const 2048))) (i32.const 50))
      (then (drop (call $local (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 1440) (i32.const 15) (i32.const 0) (i32.const 0) (i32.const -1)))))))
"#
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/fixtures/filters");
    let prelude = std::fs::read_to_string(dir.join("prelude.wat")).unwrap();
    let path = t.dir().join("auth.wat");
    std::fs::write(&path, auth.replace("  ;; prelude", &prelude)).unwrap();
    let cfg = format!(
        r#"
[filter.auth]
wasm = {:?}
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["auth"]
"#,
        path.display().to_string()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/page")
        .send()
        .await
        .expect_status(200)
        .expect_body("page");
    t.client(&proxy)
        .get("/page")
        .send()
        .await
        .expect_status(403)
        .expect_body("denied by auth\n");
    proxy.expect_counter("filter_calls", 2);
    proxy.expect_counter("filter_answers", 1);
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

const BACKEND: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
origin_filters = ["backend"]
"#;

// u16010: an origin filter shapes the fetch and decides the storing: the
// origin gets its request field; a response with no freshness of its own
// is stored for the TTL the filter set (`hoard.ttl`), with the field the
// filter added, which hits keep; past that TTL the origin is asked again.
// Coalesced clients share one fetch: the filter runs once for them.
#[tokio::test]
async fn u16010_an_origin_filter_sets_the_ttl() {
    let t = Test::new("u16010");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq()
                    .await
                    .expect_url("/t")
                    .expect_header("x-fetch", "1");
                go.sync().await;
                s.txresp(200)
                    .hdr("x-hoard-ttl", "30")
                    .body("t1")
                    .send()
                    .await;
                s.rxreq()
                    .await
                    .expect_url("/t")
                    .expect_header("x-fetch", "1");
                s.txresp(200)
                    .hdr("x-hoard-ttl", "30")
                    .body("t2")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["backend"], BACKEND);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let first = tokio::spawn(t.client(&proxy).get("/t").send());
    let second = tokio::spawn(t.client(&proxy).get("/t").send());
    proxy.wait_counter("fill_waiters_total", 1).await;
    go.sync().await;
    for r in [first.await.unwrap(), second.await.unwrap()] {
        r.expect_status(200)
            .expect_body("t1")
            .expect_header("x-stored-by", "backend");
    }
    proxy.wait_counter("objects_stored", 1).await;
    let hit = t.client(&proxy).get("/t").send().await;
    hit.expect_body("t1")
        .expect_cache_status("hit")
        .expect_header("x-stored-by", "backend");
    t.clock.advance(secs(29));
    t.client(&proxy)
        .get("/t")
        .send()
        .await
        .expect_cache_status("hit");
    t.clock.advance(secs(2));
    t.client(&proxy)
        .get("/t")
        .send()
        .await
        .expect_body("t2")
        .expect_cache_status("fwd=stale");
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

// u16011: an origin filter marks a response uncacheable whatever its
// Cache-Control says: it is forwarded, not stored, and the key passes
// (hit-for-pass) without the filter's help; a response the filter leaves
// alone is stored as usual. A filter that traps fails that fetch with a
// 500, counted, and nothing is stored.
#[tokio::test]
async fn u16011_an_origin_filter_refuses_to_store() {
    let t = Test::new("u16011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("x-no-cache", "1")
                .body("p1")
                .send()
                .await;
            s.rxreq().await.expect_url("/p");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("p2")
                .send()
                .await;
            s.rxreq().await.expect_url("/boom");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("x-boom", "1")
                .body("never")
                .send()
                .await;
            s.rxreq().await.expect_url("/boom");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("b")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["backend"], BACKEND);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_body("p1")
        .expect_cache_status("detail=filter");
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_body("p2")
        .expect_cache_status("detail=hit-for-pass");
    t.client(&proxy)
        .get("/boom")
        .send()
        .await
        .expect_status(500);
    proxy.expect_counter("filter_failures", 1);
    t.client(&proxy)
        .get("/boom")
        .send()
        .await
        .expect_status(200)
        .expect_body("b")
        .expect_cache_status("stored");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/boom")
        .send()
        .await
        .expect_body("b")
        .expect_cache_status("hit");
    origin.finish().await;
}

const BODIES: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/small"
max_body_size = "16b"
filters = ["body"]
[[site.route]]
prefix = "/"
filters = ["body"]
"#;

// u16012: a response body streams through a filter's body callback: the
// filter holds the chunks (`Pause`) and rewrites the whole body at its
// end, on a miss streamed from the origin in chunks and on the hit after
// it (the stored body is the origin's, rewritten once per delivery); the
// length changed, so `Content-Length` is not the origin's.
#[tokio::test]
async fn u16012_a_filter_rewrites_response_bodies() {
    let t = Test::new("u16012");
    let part = "x".repeat(40_000);
    let origin = t
        .origin()
        .script({
            let part = part.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/r");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .chunked()
                    .send_head()
                    .await;
                for _ in 0..3 {
                    s.chunk(&part).await;
                }
                s.end().await;
            }
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["body"], BODIES);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let want = format!("<{}>", part.repeat(3));
    let miss = t.client(&proxy).get("/r").send().await;
    miss.expect_status(200).expect_body(&want);
    assert_ne!(miss.header("content-length"), Some("120000"));
    proxy.wait_counter("objects_stored", 1).await;
    let hit = t.client(&proxy).get("/r").send().await;
    hit.expect_cache_status("hit").expect_body(&want);
    assert_ne!(hit.header("content-length"), Some("120000"));
    t.client(&proxy)
        .head("/r")
        .send()
        .await
        .expect_status(200)
        .expect_body("");
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

// u16013: a request body goes through a filter's body callback before the
// origin sees it: read whole, rewritten, sent with its new length; a body
// the filter refuses is answered by the filter (the origin never sees
// it), and one over the route's `max_body_size` gets 413 while it is read.
// Responses go out through its response body callback (`<...>`).
#[tokio::test]
async fn u16013_a_filter_reads_request_bodies() {
    let t = Test::new("u16013");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/form")
                .expect_header("content-length", "5")
                .expect_body("[abc]");
            s.txresp(200).body("posted").send().await;
        })
        .start()
        .await;
    let cfg = with_filters(&t, &["body"], BODIES);
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .post("/form")
        .body("abc")
        .send()
        .await
        .expect_status(200)
        .expect_body("<posted>");
    t.client(&proxy)
        .post("/form")
        .body("far too long for it")
        .send()
        .await
        .expect_status(422)
        // The answer goes out through the filter's own response callbacks
        // too, as its headers do (see u16002).
        .expect_body("<body too long\n>");
    t.client(&proxy)
        .post("/small")
        .hdr("Transfer-Encoding", "chunked")
        .body("20\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n0\r\n\r\n")
        .send()
        .await
        .expect_status(413);
    proxy.expect_counter("filter_answers", 1);
    origin.finish().await;
}

// u16014: root contexts work without requests: a filter's first tick calls
// one of hoard's upstreams and keeps the answer in shared data (once, by
// the first VM to tick), and a shared queue carries a request's value to
// the VM that consumes it, whose `proxy_on_queue_ready` runs on the
// plugin's own thread; later responses show both.
#[tokio::test]
async fn u16014_root_contexts_call_out_and_consume_queues() {
    let t = Test::new("u16014");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/list")
                .expect_header("host", "origin");
            s.txresp(200).body("allow-list").send().await;
            s.rxreq().await.expect_url("/page");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("page")
                .send()
                .await;
        })
        .start()
        .await;
    let cfg = with_filters(
        &t,
        &["root"],
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["root"]
"#,
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    // The tick, then the call's answer.
    proxy.wait_counter("filter_root_callbacks", 2).await;
    t.client(&proxy)
        .get("/page")
        .hdr("x-event", "hello")
        .send()
        .await
        .expect_body("page")
        .expect_header("x-list", "allow-list");
    // (Whether this first response already shows the event depends on
    // whether the plugin's thread consumed the queue before the origin
    // answered: a race, not asserted.)
    proxy.wait_counter("filter_root_callbacks", 3).await;
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/page")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_header("x-list", "allow-list")
        .expect_header("x-event", "hello");
    proxy.expect_counter("filter_calls", 1);
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

/// The Rust SDK's filter (`examples/filters/rust`), built by its script
/// into the target directory; its path.
fn rust_sdk_filter() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let out = target.join("filters-rs/out");
    let status = std::process::Command::new("bash")
        .arg(root.join("examples/filters/rust/build.sh"))
        .arg(&out)
        .env("BUILD_DIR", target.join("filters-rs/work"))
        .status()
        .expect("bash runs the Rust SDK build");
    assert!(status.success(), "the Rust SDK filter did not build");
    out.join("edge_rs.wasm")
}

// u16015: a filter built from the public Rust SDK (`proxy-wasm`) as part
// of the set-up runs unchanged: it answers some requests itself, edits the
// request the origin gets and every response (reading hoard's cache
// outcome, a miss then a hit), and rewrites a body it holds to its end.
#[tokio::test]
async fn u16015_a_filter_from_the_rust_sdk() {
    let t = Test::new("u16015");
    let wasm = rust_sdk_filter();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_url("/a")
                .expect_header("x-rust-sdk", "1");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("a")
                .send()
                .await;
            s.rxreq()
                .await
                .expect_url("/shout")
                .expect_header("x-rust-sdk", "1");
            s.txresp(200)
                .hdr("Cache-Control", "no-store")
                .chunked()
                .send_head()
                .await;
            s.chunk("quiet ").await;
            s.chunk("words").await;
            s.end().await;
        })
        .start()
        .await;
    let cfg = format!(
        r#"
[filter.edge_rs]
wasm = {:?}
config = "rs-7"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["edge_rs"]
"#,
        wasm.display().to_string()
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/blocked/x")
        .send()
        .await
        .expect_status(403)
        .expect_header("x-denied-by", "edge_rs")
        .expect_body("blocked\n");
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("a")
        .expect_header("x-rust-sdk", "rs-7")
        .expect_header("x-rust-cache", "miss");
    proxy.wait_counter("objects_stored", 1).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body("a")
        .expect_cache_status("hit")
        .expect_header("x-rust-cache", "hit");
    t.client(&proxy)
        .get("/shout")
        .send()
        .await
        .expect_body("QUIET WORDS")
        .expect_header("x-rust-sdk", "rs-7");
    proxy.expect_counter("filter_answers", 1);
    proxy.expect_counter("filter_failures", 0);
    origin.finish().await;
}

// u16016: `proxy_on_log` comes after the response's last byte, not at its
// head: while the body is still coming, the filter has logged nothing;
// the next request on the connection sees the first one logged. The
// body passes untouched, with its length.
#[tokio::test]
async fn u16016_the_log_callback_waits_for_the_body() {
    let t = Test::new("u16016");
    let go = t.barrier(2);
    let origin = t
        .origin()
        .script({
            let go = go.clone();
            |mut s| async move {
                s.rxreq().await.expect_url("/slow");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .hdr("Content-Length", "10")
                    .send_head()
                    .await;
                s.send_raw("first").await;
                go.sync().await;
                s.send_raw("-last").await;
                s.rxreq().await.expect_url("/next");
                s.txresp(200)
                    .hdr("Cache-Control", "no-store")
                    .body("next")
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let cfg = with_filters(
        &t,
        &["log"],
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
filters = ["log"]
"#,
    );
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(&origin, &cfg)
        .admin()
        .start()
        .await;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw("GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let head = conn.read_until("first").await;
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.contains("x-logged: 0"), "{head}");
    assert!(head.contains("content-length: 10"), "{head}");
    let text = t.client(proxy.admin()).get("/metrics").send().await.text();
    let line = "hoard_filter_events_total{filter=\"log\",name=\"logged\"} 0";
    assert!(text.contains(line), "{line} not in:\n{text}");
    go.sync().await;
    conn.read_until("-last").await;
    conn.get("/next")
        .send()
        .await
        .expect_body("next")
        .expect_header("x-logged", "1");
    origin.finish().await;
}
