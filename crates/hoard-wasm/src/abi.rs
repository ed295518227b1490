//! The numbers of the Proxy-Wasm ABI (spec 0.2.1, also 0.2.0): statuses
//! returned by host calls, actions returned by stream callbacks, and the
//! types of header maps and buffers a call names.

/// A host call's result (`proxy_status_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// No such header, property or buffer.
    NotFound = 1,
    /// An argument out of range (a bad map or buffer type, a bad pointer).
    BadArgument = 2,
    /// The value cannot be parsed.
    ParseFailure = 4,
    /// Nothing there (an empty buffer).
    Empty = 7,
    /// Shared data changed since it was read (its CAS number differs).
    CasMismatch = 8,
    /// The host failed (the guest's allocator refused, say).
    InternalFailure = 10,
    /// hoard does not support the call (see `docs/filters.md`).
    Unimplemented = 12,
}

/// What a stream callback asks of the host (`proxy_action_t`): go on.
/// Anything else is `Pause` (see [`crate::Verdict::Continue`]).
pub const ACTION_CONTINUE: i32 = 0;

/// The header maps a call can name (`proxy_map_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// The request's header fields, with `:method`, `:path`,
    /// `:authority` and `:scheme` as Envoy gives them.
    RequestHeaders,
    /// The response's header fields, with `:status`.
    ResponseHeaders,
    /// An HTTP call's response (in `proxy_on_http_call_response`).
    CallResponseHeaders,
    /// Trailers, gRPC metadata: not supported.
    Other,
}

impl MapType {
    /// The map a call's number names.
    pub fn from_raw(n: i32) -> MapType {
        match n {
            0 => MapType::RequestHeaders,
            2 => MapType::ResponseHeaders,
            6 => MapType::CallResponseHeaders,
            _ => MapType::Other,
        }
    }
}

/// The buffers a call can name (`proxy_buffer_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferType {
    /// The request's body (in `proxy_on_request_body`).
    RequestBody,
    /// The response's body (in `proxy_on_response_body`).
    ResponseBody,
    /// The VM's configuration (`vm_config`: empty in hoard).
    VmConfiguration,
    /// The filter's configuration (`config` or `config_file`).
    PluginConfiguration,
    /// An HTTP call's response body (in `proxy_on_http_call_response`).
    CallResponseBody,
    /// Downstream and upstream data (TCP filters), gRPC: not supported.
    Other,
}

impl BufferType {
    /// The buffer a call's number names.
    pub fn from_raw(n: i32) -> BufferType {
        match n {
            0 => BufferType::RequestBody,
            1 => BufferType::ResponseBody,
            6 => BufferType::VmConfiguration,
            7 => BufferType::PluginConfiguration,
            4 => BufferType::CallResponseBody,
            _ => BufferType::Other,
        }
    }
}

/// The ABI versions a module may declare by exporting a function named
/// after it; hoard runs both.
pub const ABI_VERSIONS: [&str; 2] = ["proxy_abi_version_0_2_1", "proxy_abi_version_0_2_0"];

/// `proxy_log`'s levels, as `tracing` levels.
pub fn log_level(n: i32) -> tracing::Level {
    match n {
        0 => tracing::Level::TRACE,
        1 => tracing::Level::DEBUG,
        2 => tracing::Level::INFO,
        3 => tracing::Level::WARN,
        _ => tracing::Level::ERROR,
    }
}
