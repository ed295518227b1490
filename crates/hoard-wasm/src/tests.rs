//! The host against small modules in the WebAssembly text format: each
//! states the ABI by hand, so every edge (a trap, a spent budget, a bad
//! import, a missing version) is exact.

use super::*;

/// A filter module: a bump allocator, the ABI marker, and `extra` (data
/// segments from offset 1024, and callbacks).
pub(crate) fn module(imports: &str, extra: &str) -> String {
    format!(
        r#"(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $buf (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $local (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $prop (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_property" (func $setprop (param i32 i32 i32 i32) (result i32)))
  {imports}
  (memory (export "memory") 1)
  (global $top (mut i32) (i32.const 4096))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    global.get $top
    local.set $p
    global.get $top
    local.get $n
    i32.add
    global.set $top
    local.get $p)
  (func (export "proxy_on_context_create") (param i32 i32))
  {extra}
)"#
    )
}

fn plugin(wat: &str) -> Arc<Plugin> {
    Arc::new(
        Plugin::compile(
            "t",
            "",
            wat.as_bytes(),
            Bytes::from_static(b"cfg"),
            Limits::default(),
        )
        .unwrap(),
    )
}

fn response() -> ResponseHead {
    ResponseHead {
        status: http::StatusCode::OK,
        headers: http::HeaderMap::new(),
    }
}

const ADD_HEADER: &str = r#"
  (data (i32.const 1024) "x-filter")
  (data (i32.const 1040) "on")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $add (i32.const 2) (i32.const 1024) (i32.const 8) (i32.const 1040) (i32.const 2)))
    i32.const 0)
"#;

#[test]
fn a_response_filter_adds_a_field() {
    let p = plugin(&module("", ADD_HEADER));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut head = response();
    assert!(matches!(
        s.on_response(&mut head).unwrap(),
        Verdict::Continue
    ));
    assert_eq!(head.headers.get("x-filter").unwrap(), "on");
    assert_eq!(head.status, http::StatusCode::OK);
    // A module without a request callback lets requests through.
    let mut req = RequestHead::default();
    assert!(matches!(s.on_request(&mut req).unwrap(), Verdict::Continue));
}

#[test]
fn a_local_response_is_the_answer() {
    let extra = r#"
  (data (i32.const 1024) "denied\n")
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $local (i32.const 403) (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 7) (i32.const 0) (i32.const 0) (i32.const -1)))
    i32.const 1)
"#;
    let p = plugin(&module("", extra));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut req = RequestHead::default();
    match s.on_request(&mut req).unwrap() {
        Verdict::Respond(r) => {
            assert_eq!(r.status, 403);
            assert_eq!(&r.body[..], b"denied\n");
        }
        other => panic!("expected the filter's answer, got {other:?}"),
    }
}

#[test]
fn the_plugin_configuration_is_readable() {
    // Reads the configuration into memory at 2048 (pointer, size) and adds it
    // as a response field.
    let extra = r#"
  (data (i32.const 1024) "x-config")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $buf (i32.const 7) (i32.const 0) (i32.const 100) (i32.const 2048) (i32.const 2052)))
    (drop (call $add (i32.const 2) (i32.const 1024) (i32.const 8) (i32.load (i32.const 2048)) (i32.load (i32.const 2052))))
    i32.const 0)
"#;
    let p = plugin(&module("", extra));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut head = response();
    s.on_response(&mut head).unwrap();
    assert_eq!(head.headers.get("x-config").unwrap(), "cfg");
}

#[test]
fn properties_are_read_and_the_cache_key_set() {
    let extra = r#"
  (data (i32.const 1024) "request\00path")
  (data (i32.const 1040) "x-path")
  (data (i32.const 1056) "hoard\00cache_key")
  (data (i32.const 1072) "mobile")
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (drop (call $prop (i32.const 1024) (i32.const 12) (i32.const 2048) (i32.const 2052)))
    (drop (call $add (i32.const 0) (i32.const 1040) (i32.const 6) (i32.load (i32.const 2048)) (i32.load (i32.const 2052))))
    (drop (call $setprop (i32.const 1056) (i32.const 15) (i32.const 1072) (i32.const 6)))
    i32.const 0)
"#;
    let p = plugin(&module("", extra));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut req = RequestHead {
        path: "/a?b=1".into(),
        ..RequestHead::default()
    };
    s.on_request(&mut req).unwrap();
    assert_eq!(req.headers.get("x-path").unwrap(), "/a?b=1");
    assert_eq!(s.info().cache_key.as_deref(), Some("mobile"));
}

#[test]
fn a_trap_fails_the_request_and_the_next_gets_a_new_vm() {
    // Traps on a response with a field (num_headers 2: `:status` and one).
    let extra = r#"
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (if (i32.eq (local.get 1) (i32.const 2)) (then unreachable))
    i32.const 0)
"#;
    let p = plugin(&module("", extra));
    let mut a = p.stream(StreamInfo::default()).unwrap();
    let mut b = p.stream(StreamInfo::default()).unwrap();
    let mut with_field = response();
    with_field
        .headers
        .insert("x-boom", http::HeaderValue::from_static("1"));
    let e = a.on_response(&mut with_field).unwrap_err();
    assert_eq!(e.kind, Failure::Trap);
    assert_eq!(&*e.filter, "t");
    assert!(e.detail.contains("unreachable"), "{}", e.detail);
    // The head is handed back as it was.
    assert_eq!(with_field.headers.get("x-boom").unwrap(), "1");
    // b's context lived in the dropped VM.
    assert_eq!(
        b.on_response(&mut response()).unwrap_err().kind,
        Failure::Lost
    );
    drop((a, b));
    // The next request starts a new VM, which serves it.
    let mut c = p.stream(StreamInfo::default()).unwrap();
    assert!(matches!(
        c.on_response(&mut response()).unwrap(),
        Verdict::Continue
    ));
}

#[test]
fn an_endless_loop_runs_out_of_fuel() {
    let extra = r#"
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (loop $l (br $l))
    i32.const 0)
"#;
    let limits = Limits {
        fuel: 100_000,
        ..Limits::default()
    };
    let p = Arc::new(
        Plugin::compile(
            "spin",
            "",
            module("", extra).as_bytes(),
            Bytes::new(),
            limits,
        )
        .unwrap(),
    );
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let e = s.on_request(&mut RequestHead::default()).unwrap_err();
    assert_eq!(e.kind, Failure::Budget);
    assert!(e.to_string().starts_with("filter \"spin\": budget"), "{e}");
}

#[test]
fn memory_beyond_the_bound_is_refused() {
    // Asks for 32 pages (2 MiB) over a 1 MiB bound: memory.grow answers -1,
    // and the filter traps on it.
    let extra = r#"
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32)
    (if (i32.eq (memory.grow (i32.const 32)) (i32.const -1)) (then unreachable))
    i32.const 0)
"#;
    let limits = Limits {
        max_memory: 1 << 20,
        ..Limits::default()
    };
    let p = Arc::new(
        Plugin::compile(
            "big",
            "",
            module("", extra).as_bytes(),
            Bytes::new(),
            limits,
        )
        .unwrap(),
    );
    let mut s = p.stream(StreamInfo::default()).unwrap();
    assert_eq!(
        s.on_request(&mut RequestHead::default()).unwrap_err().kind,
        Failure::Trap
    );
}

#[test]
fn bad_modules_are_refused_with_a_reason() {
    let e = Plugin::compile("x", "", b"not wasm", Bytes::new(), Limits::default()).unwrap_err();
    assert!(e.starts_with("not a valid module"), "{e}");
    let no_version = module("", "").replace(r#"(func (export "proxy_abi_version_0_2_1"))"#, "");
    let e = Plugin::compile(
        "x",
        "",
        no_version.as_bytes(),
        Bytes::new(),
        Limits::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("exports no supported Proxy-Wasm ABI version"),
        "{e}"
    );
    let bad_import = module(
        r#"(import "env" "proxy_teleport" (func (param i32) (result i32)))"#,
        "",
    );
    let e = Plugin::compile(
        "x",
        "",
        bad_import.as_bytes(),
        Bytes::new(),
        Limits::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("imports what hoard does not provide") && e.contains("proxy_teleport"),
        "{e}"
    );
    let refuses = module(
        "",
        r#"(func (export "proxy_on_configure") (param i32 i32) (result i32) i32.const 0)"#,
    );
    let e =
        Plugin::compile("x", "", refuses.as_bytes(), Bytes::new(), Limits::default()).unwrap_err();
    assert!(e.contains("refused the configuration"), "{e}");
}

#[test]
fn unsupported_calls_answer_unimplemented() {
    let extra = r#"
  (data (i32.const 1024) "x-status")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    ;; 12 (Unimplemented) as one ASCII digit pair at 1100
    (i32.store8 (i32.const 1100) (i32.add (i32.const 48) (i32.div_u (call $close (i32.const 1)) (i32.const 10))))
    (i32.store8 (i32.const 1101) (i32.add (i32.const 48) (i32.rem_u (call $close (i32.const 1)) (i32.const 10))))
    (drop (call $add (i32.const 2) (i32.const 1024) (i32.const 8) (i32.const 1100) (i32.const 2)))
    i32.const 0)
"#;
    let p = plugin(&module(
        r#"(import "env" "proxy_grpc_close" (func $close (param i32) (result i32)))"#,
        extra,
    ));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut head = response();
    s.on_response(&mut head).unwrap();
    assert_eq!(head.headers.get("x-status").unwrap(), "12");
}

#[test]
fn shared_data_and_metrics() {
    let imports = r#"
  (import "env" "proxy_set_shared_data" (func $sset (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_shared_data" (func $sget (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_define_metric" (func $def (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $inc (param i32 i64) (result i32)))
"#;
    let extra = r#"
  (data (i32.const 1024) "u-key")
  (data (i32.const 1040) "shared!")
  (data (i32.const 1056) "x-shared")
  (data (i32.const 1072) "responses")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    ;; set with CAS 0 (always), read back with its CAS number at 2056
    (drop (call $sset (i32.const 1024) (i32.const 5) (i32.const 1040) (i32.const 7) (i32.const 0)))
    (drop (call $sget (i32.const 1024) (i32.const 5) (i32.const 2048) (i32.const 2052) (i32.const 2056)))
    (drop (call $add (i32.const 2) (i32.const 1056) (i32.const 8) (i32.load (i32.const 2048)) (i32.load (i32.const 2052))))
    ;; a stale CAS number (1, long changed) is refused: 8 goes to 2064
    (i32.store (i32.const 2064) (call $sset (i32.const 1024) (i32.const 5) (i32.const 1040) (i32.const 7) (i32.const 1)))
    (drop (call $def (i32.const 0) (i32.const 1072) (i32.const 9) (i32.const 2060)))
    (drop (call $inc (i32.load (i32.const 2060)) (i64.const 1)))
    i32.const 0)
"#;
    let p = plugin(&module(imports, extra));
    for _ in 0..3 {
        let mut s = p.stream(StreamInfo::default()).unwrap();
        let mut head = response();
        s.on_response(&mut head).unwrap();
        assert_eq!(head.headers.get("x-shared").unwrap(), "shared!");
    }
    let m = p.metrics().snapshot();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].name, "responses");
    assert_eq!(m[0].kind, MetricKind::Counter);
    assert_eq!(m[0].value.load(std::sync::atomic::Ordering::Relaxed), 3);
    let (v, cas) = shared::get(b"u-key").unwrap();
    assert_eq!(v, b"shared!");
    assert!(cas >= 3, "{cas}");
    assert!(!shared::set(b"u-key", b"x".to_vec(), 1));
    assert!(shared::set(b"u-key", b"x".to_vec(), cas));
}

#[test]
fn ticks_reach_the_root_context_until_the_plugin_goes() {
    let imports = r#"
  (import "env" "proxy_set_tick_period_milliseconds" (func $period (param i32) (result i32)))
  (import "env" "proxy_define_metric" (func $def (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $inc (param i32 i64) (result i32)))
"#;
    let extra = r#"
  (data (i32.const 1024) "ticks")
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $period (i32.const 10)))
    i32.const 1)
  (func (export "proxy_on_tick") (param i32)
    (drop (call $def (i32.const 0) (i32.const 1024) (i32.const 5) (i32.const 2060)))
    (drop (call $inc (i32.load (i32.const 2060)) (i64.const 1))))
"#;
    let p = plugin(&module(imports, extra));
    let (tx, rx) = std::sync::mpsc::channel();
    p.start(
        Arc::new(hoard_policy::clock::SystemClock),
        Arc::new(Told(parking_lot::Mutex::new(tx))),
    );
    p.start_ticks(); // once only
    let wait = std::time::Duration::from_secs(10);
    for _ in 0..3 {
        rx.recv_timeout(wait).expect("a tick");
    }
    let ticks = p.metrics().snapshot()[0]
        .value
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(ticks >= 3, "{ticks}");
    // The ticker holds the plugin only while it ticks: dropping it ends
    // them, and drops the services (the channel closes).
    drop(p);
    loop {
        match rx.recv_timeout(wait) {
            Ok(()) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("the ticker kept the plugin: {e}"),
        }
    }
}

/// Services that tell a channel of each root callback.
struct Told(parking_lot::Mutex<std::sync::mpsc::Sender<()>>);

impl crate::Services for Told {
    fn root_called(&self) {
        let _ = self.0.lock().send(());
    }
    fn call(&self, _: crate::HttpCall, done: Box<dyn FnOnce(Option<crate::CallResponse>) + Send>) {
        done(None)
    }
}

#[test]
fn filters_read_hoards_clock() {
    #[derive(Debug)]
    struct Fixed;
    impl hoard_policy::clock::Clock for Fixed {
        fn now(&self) -> std::time::SystemTime {
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000)
        }
    }
    // Adds the clock's seconds' low byte (1000 % 256 = 232) as `x-now`.
    let extra = r#"
  (data (i32.const 1024) "x-now")
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $time (i32.const 2048)))
    ;; nanoseconds / 1e9, low byte, as three decimal digits at 1100
    (i64.store (i32.const 2056) (i64.div_u (i64.load (i32.const 2048)) (i64.const 1000000000)))
    (i32.store8 (i32.const 1100) (i32.add (i32.const 48) (i32.div_u (i32.load8_u (i32.const 2056)) (i32.const 100))))
    (i32.store8 (i32.const 1101) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (i32.load8_u (i32.const 2056)) (i32.const 10)) (i32.const 10))))
    (i32.store8 (i32.const 1102) (i32.add (i32.const 48) (i32.rem_u (i32.load8_u (i32.const 2056)) (i32.const 10))))
    (drop (call $add (i32.const 2) (i32.const 1024) (i32.const 5) (i32.const 1100) (i32.const 3)))
    i32.const 0)
"#;
    let p = plugin(&module(
        r#"(import "env" "proxy_get_current_time_nanoseconds" (func $time (param i32) (result i32)))"#,
        extra,
    ));
    p.start(Arc::new(Fixed), Arc::new(NoServices));
    let mut s = p.stream(StreamInfo::default()).unwrap();
    let mut head = response();
    s.on_response(&mut head).unwrap();
    assert_eq!(head.headers.get("x-now").unwrap(), "232");
}

/// Services that count nothing and fail every call.
struct NoServices;

impl crate::Services for NoServices {
    fn root_called(&self) {}
    fn call(&self, _: crate::HttpCall, done: Box<dyn FnOnce(Option<crate::CallResponse>) + Send>) {
        done(None)
    }
}

#[test]
fn a_maps_size_is_its_encoded_length() {
    let pairs: [(&[u8], &[u8]); 3] = [(b":status", b"200"), (b"x-a", b""), (b"", b"v")];
    assert_eq!(
        crate::pairs::encoded_len(pairs.iter().copied()),
        crate::pairs::encode(pairs.iter().copied()).len()
    );
    assert_eq!(crate::pairs::encoded_len(std::iter::empty()), 4);
}
