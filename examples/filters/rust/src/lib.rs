//! edge_rs: a Proxy-Wasm filter written with the public Rust SDK
//! (`proxy-wasm`), built by `build.sh` and run by hoard's e2e cases.
//!
//! - Requests under `/blocked` are answered 403 by the filter.
//! - Other requests reach the origin with `x-rust-sdk: 1`.
//! - Every response gets `x-rust-sdk: <plugin configuration>` and
//!   `x-rust-cache: <hoard.cache_status>` (hoard's cache outcome).
//! - Responses to `/shout` have their body upper-cased: the filter holds
//!   the body (`Action::Pause`) until its end, then replaces it.
//!
//! It is written for Rust 1.63 as well (no let-else), so that Debian's
//! rustc builds it too.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(EdgeRoot { config: Rc::from("") })
    });
}}

struct EdgeRoot {
    config: Rc<str>,
}

impl Context for EdgeRoot {}

impl RootContext for EdgeRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        if let Some(bytes) = self.get_plugin_configuration() {
            self.config = Rc::from(String::from_utf8_lossy(&bytes).as_ref());
        }
        log::info!("edge_rs configured: {:?}", self.config);
        true
    }

    fn create_http_context(&self, _id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Edge {
            config: Rc::clone(&self.config),
            shout: false,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Edge {
    config: Rc<str>,
    shout: bool,
}

impl Context for Edge {}

impl HttpContext for Edge {
    fn on_http_request_headers(&mut self, _n: usize, _end: bool) -> Action {
        let path = self.get_http_request_header(":path").unwrap_or_default();
        if path.starts_with("/blocked") {
            self.send_http_response(403, vec![("x-denied-by", "edge_rs")], Some(b"blocked\n"));
            return Action::Pause;
        }
        self.shout = path.starts_with("/shout");
        self.add_http_request_header("x-rust-sdk", "1");
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _n: usize, _end: bool) -> Action {
        self.set_http_response_header("x-rust-sdk", Some(&self.config));
        let status = self
            .get_property(vec!["hoard", "cache_status"])
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_else(|| "none".to_string());
        self.set_http_response_header("x-rust-cache", Some(&status));
        Action::Continue
    }

    fn on_http_response_body(&mut self, size: usize, end: bool) -> Action {
        if !self.shout {
            return Action::Continue;
        }
        if !end {
            return Action::Pause;
        }
        if let Some(body) = self.get_http_response_body(0, size) {
            self.set_http_response_body(0, size, &body.to_ascii_uppercase());
        }
        Action::Continue
    }
}
