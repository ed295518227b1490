;; stamp (examples/filters.toml, and the benchmarks' filter): adds
;; `x-filter: <its configuration>` to every response, as a header-setting
;; filter of any SDK would (the configuration read once, in
;; proxy_on_configure; one host call per response).
(module
  (import "env" "proxy_add_header_map_value" (func $add (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $buf (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $top (mut i32) (i32.const 4096))
  (data (i32.const 1024) "x-filter")
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $top))
    (global.set $top (i32.add (global.get $top) (local.get $n)))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  ;; The configuration's address and size stay at 2048 and 2052.
  (func (export "proxy_on_configure") (param i32 i32) (result i32)
    (drop (call $buf (i32.const 7) (i32.const 0) (local.get 1) (i32.const 2048) (i32.const 2052)))
    (i32.const 1))
  (func (export "proxy_on_request_headers") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32)
    (drop (call $add (i32.const 2) (i32.const 1024) (i32.const 8) (i32.load (i32.const 2048)) (i32.load (i32.const 2052))))
    (i32.const 0))
  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_log") (param i32))
  (func (export "proxy_on_delete") (param i32)))
