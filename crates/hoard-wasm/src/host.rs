//! The host calls a filter imports (`env.proxy_*`), defined once on one
//! `Linker` for every plugin. Each reads and writes the guest's memory
//! through the exported `memory`, and hands data back in memory the guest
//! allocates (`proxy_on_memory_allocate` or `malloc`), as the ABI says.
//! What hoard does not support answers `Unimplemented` (see
//! `UNIMPLEMENTED` and `docs/filters.md`).

use std::borrow::Cow;
use std::sync::OnceLock;

use wasmtime::{Caller, Engine, Linker, Memory, TypedFunc};

use crate::abi::{log_level, BufferType, MapType, Status};
use crate::head::Head;
use crate::vm::Host;

/// Calls of the ABI hoard answers `Unimplemented`, with their arities
/// (all `i32`; the two metric calls with an `i64` are defined apart).
const UNIMPLEMENTED: &[(&str, usize)] = &[
    ("proxy_grpc_call", 12),
    ("proxy_grpc_stream", 9),
    ("proxy_grpc_send", 4),
    ("proxy_grpc_cancel", 1),
    ("proxy_grpc_close", 1),
    ("proxy_call_foreign_function", 6),
    ("proxy_close_stream", 1),
    ("proxy_continue_response", 0),
    ("proxy_clear_route_cache", 0),
    ("proxy_get_status", 3),
];

/// The linker with every host call, built once per engine.
pub(crate) fn linker(engine: &Engine) -> &'static Linker<Host> {
    static LINKER: OnceLock<Linker<Host>> = OnceLock::new();
    LINKER.get_or_init(|| build(engine).expect("invariant: host calls are defined once each"))
}

type R<T> = wasmtime::Result<T>;

fn build(engine: &Engine) -> R<Linker<Host>> {
    let mut l = Linker::new(engine);
    l.func_wrap("env", "proxy_log", proxy_log)?;
    l.func_wrap(
        "env",
        "proxy_get_log_level",
        |mut c: Caller<'_, Host>, ret: i32| {
            let level = if tracing::enabled!(tracing::Level::DEBUG) {
                1
            } else {
                2
            };
            Ok(status(put_u32(&mut c, ret, level)))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: Caller<'_, Host>, ret: i32| {
            let now = c.data().unix_nanos();
            Ok(status(put_bytes(&mut c, ret, &now.to_le_bytes())))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_set_effective_context",
        |_: Caller<'_, Host>, _id: i32| Ok(Status::Ok as i32),
    )?;
    l.func_wrap("env", "proxy_done", |_: Caller<'_, Host>| {
        Ok(Status::Unimplemented as i32)
    })?;
    l.func_wrap("env", "proxy_get_buffer_status", get_buffer_status)?;
    l.func_wrap("env", "proxy_get_buffer_bytes", get_buffer_bytes)?;
    l.func_wrap("env", "proxy_set_buffer_bytes", set_buffer_bytes)?;
    l.func_wrap("env", "proxy_get_header_map_pairs", get_map_pairs)?;
    l.func_wrap("env", "proxy_set_header_map_pairs", set_map_pairs)?;
    l.func_wrap("env", "proxy_get_header_map_value", get_map_value)?;
    l.func_wrap("env", "proxy_get_header_map_size", get_map_size)?;
    l.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |c: Caller<'_, Host>, t: i32, kp: i32, ks: i32, vp: i32, vs: i32| {
            edit(c, t, kp, ks, Some((vp, vs)), Edit::Add)
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |c: Caller<'_, Host>, t: i32, kp: i32, ks: i32, vp: i32, vs: i32| {
            edit(c, t, kp, ks, Some((vp, vs)), Edit::Replace)
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |c: Caller<'_, Host>, t: i32, kp: i32, ks: i32| edit(c, t, kp, ks, None, Edit::Remove),
    )?;
    l.func_wrap("env", "proxy_get_property", get_property)?;
    l.func_wrap("env", "proxy_set_property", set_property)?;
    l.func_wrap("env", "proxy_send_local_response", send_local_response)?;
    for (name, arity) in UNIMPLEMENTED {
        let ty = wasmtime::FuncType::new(
            engine,
            std::iter::repeat_n(wasmtime::ValType::I32, *arity),
            [wasmtime::ValType::I32],
        );
        l.func_new("env", name, ty, |_, _, ret| {
            ret[0] = wasmtime::Val::I32(Status::Unimplemented as i32);
            Ok(())
        })?;
    }
    l.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: Caller<'_, Host>, ms: i32| {
            let ms = ms as u32;
            c.data_mut().tick =
                (ms > 0).then(|| std::time::Duration::from_millis(u64::from(ms.max(10))));
            Ok(status(Status::Ok))
        },
    )?;
    l.func_wrap("env", "proxy_http_call", http_call)?;
    l.func_wrap("env", "proxy_dispatch_http_call", http_call)?;
    // hoard resumes a stream when its calls are answered; asking is fine.
    l.func_wrap(
        "env",
        "proxy_continue_stream",
        |_: Caller<'_, Host>, _t: i32| Ok(Status::Ok as i32),
    )?;
    l.func_wrap("env", "proxy_continue_request", |_: Caller<'_, Host>| {
        Ok(Status::Ok as i32)
    })?;
    l.func_wrap("env", "proxy_get_shared_data", get_shared_data)?;
    l.func_wrap("env", "proxy_register_shared_queue", register_queue)?;
    l.func_wrap("env", "proxy_resolve_shared_queue", resolve_queue)?;
    l.func_wrap("env", "proxy_enqueue_shared_queue", enqueue)?;
    l.func_wrap("env", "proxy_dequeue_shared_queue", dequeue)?;
    l.func_wrap("env", "proxy_set_shared_data", set_shared_data)?;
    l.func_wrap("env", "proxy_define_metric", define_metric)?;
    l.func_wrap(
        "env",
        "proxy_increment_metric",
        |c: Caller<'_, Host>, id: i32, by: i64| {
            Ok(status(match c.data().metrics.get(id) {
                Some(m) if m.increment(by) => Status::Ok,
                Some(_) => Status::BadArgument,
                None => Status::NotFound,
            }))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_record_metric",
        |c: Caller<'_, Host>, id: i32, v: i64| {
            Ok(status(match c.data().metrics.get(id) {
                Some(m) if m.record(v) => Status::Ok,
                Some(_) => Status::BadArgument,
                None => Status::NotFound,
            }))
        },
    )?;
    l.func_wrap(
        "env",
        "proxy_get_metric",
        |mut c: Caller<'_, Host>, id: i32, ret: i32| {
            let Some(m) = c.data().metrics.get(id) else {
                return Ok(status(Status::NotFound));
            };
            let v = m.value.load(std::sync::atomic::Ordering::Relaxed) as u64;
            Ok(status(put_bytes(&mut c, ret, &v.to_le_bytes())))
        },
    )?;
    crate::wasi::define(&mut l)?;
    Ok(l)
}

fn status(s: Status) -> i32 {
    s as i32
}

fn memory(c: &Caller<'_, Host>) -> Option<Memory> {
    c.data().memory
}

/// `len` bytes of guest memory at `ptr`, copied out.
fn read(c: &Caller<'_, Host>, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let m = memory(c)?;
    let (p, n) = (ptr as u32 as usize, len as u32 as usize);
    m.data(c).get(p..p.checked_add(n)?).map(<[u8]>::to_vec)
}

fn put_bytes(c: &mut Caller<'_, Host>, at: i32, bytes: &[u8]) -> Status {
    let Some(m) = memory(c) else {
        return Status::InternalFailure;
    };
    let at = at as u32 as usize;
    match m.data_mut(c).get_mut(at..at + bytes.len()) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            Status::Ok
        }
        None => Status::BadArgument,
    }
}

fn put_u32(c: &mut Caller<'_, Host>, at: i32, v: u32) -> Status {
    put_bytes(c, at, &v.to_le_bytes())
}

/// Copies `bytes` into memory the guest allocates and writes its address
/// and size at `ret_ptr` and `ret_size`. The allocation may trap (an
/// exhausted budget): that error is the caller's.
fn give(c: &mut Caller<'_, Host>, bytes: &[u8], ret_ptr: i32, ret_size: i32) -> R<Status> {
    let alloc: Option<TypedFunc<i32, i32>> = c.data().alloc.clone();
    let Some(alloc) = alloc else {
        return Ok(Status::InternalFailure);
    };
    let p = if bytes.is_empty() {
        0
    } else {
        let p = alloc.call(&mut *c, bytes.len() as i32)?;
        if p == 0 {
            return Ok(Status::InternalFailure);
        }
        let s = put_bytes(c, p, bytes);
        if s != Status::Ok {
            return Ok(s);
        }
        p
    };
    let s = put_u32(c, ret_ptr, p as u32);
    if s != Status::Ok {
        return Ok(s);
    }
    Ok(put_u32(c, ret_size, bytes.len() as u32))
}

fn proxy_log(c: Caller<'_, Host>, level: i32, ptr: i32, len: i32) -> R<i32> {
    let Some(msg) = read(&c, ptr, len) else {
        return Ok(status(Status::BadArgument));
    };
    let msg = String::from_utf8_lossy(&msg);
    let filter = &*c.data().filter;
    match log_level(level) {
        tracing::Level::TRACE => tracing::trace!(filter, "{msg}"),
        tracing::Level::DEBUG => tracing::debug!(filter, "{msg}"),
        tracing::Level::INFO => tracing::info!(filter, "{msg}"),
        tracing::Level::WARN => tracing::warn!(filter, "{msg}"),
        _ => tracing::error!(filter, "{msg}"),
    }
    Ok(status(Status::Ok))
}

fn buffer(h: &Host, t: i32) -> Option<bytes::Bytes> {
    match BufferType::from_raw(t) {
        BufferType::PluginConfiguration => Some(h.config.clone()),
        BufferType::VmConfiguration => Some(bytes::Bytes::new()),
        BufferType::CallResponseBody => h.x.call_response.as_ref().map(|(_, b)| b.clone()),
        BufferType::RequestBody => {
            h.x.body
                .as_ref()
                .filter(|b| !b.response)
                .map(|b| b.bytes.clone())
        }
        BufferType::ResponseBody => {
            h.x.body
                .as_ref()
                .filter(|b| b.response)
                .map(|b| b.bytes.clone())
        }
        BufferType::Other => None,
    }
}

/// `proxy_set_buffer_bytes`: bytes `start..start + size` of the body in
/// hand (request or response, in its body callback) replaced by the
/// value (`start` past the end appends; `size` 0 inserts); other buffers
/// cannot be set.
fn set_buffer_bytes(
    mut c: Caller<'_, Host>,
    t: i32,
    start: i32,
    size: i32,
    vp: i32,
    vs: i32,
) -> R<i32> {
    let response = match BufferType::from_raw(t) {
        BufferType::RequestBody => false,
        BufferType::ResponseBody => true,
        _ => return Ok(status(Status::BadArgument)),
    };
    let Some(value) = read(&c, vp, vs) else {
        return Ok(status(Status::BadArgument));
    };
    let Some(body) = c
        .data_mut()
        .x
        .body
        .as_mut()
        .filter(|b| b.response == response)
    else {
        return Ok(status(Status::NotFound));
    };
    let old = &body.bytes;
    let start = (start as u32 as usize).min(old.len());
    let end = start.saturating_add(size as u32 as usize).min(old.len());
    let mut new = Vec::with_capacity(old.len() - (end - start) + value.len());
    new.extend_from_slice(&old[..start]);
    new.extend_from_slice(&value);
    new.extend_from_slice(&old[end..]);
    body.bytes = bytes::Bytes::from(new);
    Ok(status(Status::Ok))
}

fn get_buffer_status(mut c: Caller<'_, Host>, t: i32, len_ptr: i32, flags_ptr: i32) -> R<i32> {
    let Some(b) = buffer(c.data(), t) else {
        return Ok(status(Status::NotFound));
    };
    let s = put_u32(&mut c, len_ptr, b.len() as u32);
    if s != Status::Ok {
        return Ok(status(s));
    }
    Ok(status(put_u32(&mut c, flags_ptr, 0)))
}

fn get_buffer_bytes(
    mut c: Caller<'_, Host>,
    t: i32,
    start: i32,
    max: i32,
    rp: i32,
    rs: i32,
) -> R<i32> {
    let Some(b) = buffer(c.data(), t) else {
        return Ok(status(Status::NotFound));
    };
    let start = (start as u32 as usize).min(b.len());
    let end = start.saturating_add(max as u32 as usize).min(b.len());
    if start == end {
        return Ok(status(Status::Empty));
    }
    Ok(status(give(&mut c, &b[start..end], rp, rs)?))
}

/// The head a map type names in the current callback, if it has one.
fn with_head<T>(h: &mut Host, t: i32, f: impl FnOnce(&mut dyn Head) -> T) -> Option<T> {
    match MapType::from_raw(t) {
        MapType::RequestHeaders => h.x.request.as_mut().map(|r| f(r)),
        MapType::ResponseHeaders => h.x.response.as_mut().map(|r| f(r)),
        MapType::CallResponseHeaders => h.x.call_response.as_mut().map(|(r, _)| f(r)),
        MapType::Other => None,
    }
}

fn get_map_pairs(mut c: Caller<'_, Host>, t: i32, rp: i32, rs: i32) -> R<i32> {
    let Some(bytes) = with_head(c.data_mut(), t, |h| {
        crate::pairs::encode(h.pairs().into_iter())
    }) else {
        return Ok(status(Status::NotFound));
    };
    Ok(status(give(&mut c, &bytes, rp, rs)?))
}

fn get_map_size(mut c: Caller<'_, Host>, t: i32, ret: i32) -> R<i32> {
    let Some(n) = with_head(c.data_mut(), t, |h| {
        crate::pairs::encoded_len(h.pairs().into_iter())
    }) else {
        return Ok(status(Status::NotFound));
    };
    Ok(status(put_u32(&mut c, ret, n as u32)))
}

fn set_map_pairs(mut c: Caller<'_, Host>, t: i32, ptr: i32, len: i32) -> R<i32> {
    let Some(raw) = read(&c, ptr, len) else {
        return Ok(status(Status::BadArgument));
    };
    let Some(pairs) = crate::pairs::decode(&raw) else {
        return Ok(status(Status::ParseFailure));
    };
    Ok(status(
        match with_head(c.data_mut(), t, |h| h.set_pairs(&pairs)) {
            None => Status::NotFound,
            Some(Ok(())) => Status::Ok,
            Some(Err(_)) => Status::BadArgument,
        },
    ))
}

fn get_map_value(mut c: Caller<'_, Host>, t: i32, kp: i32, ks: i32, rp: i32, rs: i32) -> R<i32> {
    let Some(key) = read(&c, kp, ks) else {
        return Ok(status(Status::BadArgument));
    };
    let found = with_head(c.data_mut(), t, |h| h.get(&key).map(Cow::into_owned));
    match found {
        None => Ok(status(Status::NotFound)),
        Some(None) => Ok(status(Status::NotFound)),
        Some(Some(v)) => Ok(status(give(&mut c, &v, rp, rs)?)),
    }
}

#[derive(Clone, Copy)]
enum Edit {
    Add,
    Replace,
    Remove,
}

fn edit(
    mut c: Caller<'_, Host>,
    t: i32,
    kp: i32,
    ks: i32,
    v: Option<(i32, i32)>,
    e: Edit,
) -> R<i32> {
    let Some(key) = read(&c, kp, ks) else {
        return Ok(status(Status::BadArgument));
    };
    let value = match v {
        Some((vp, vs)) => match read(&c, vp, vs) {
            Some(v) => v,
            None => return Ok(status(Status::BadArgument)),
        },
        None => Vec::new(),
    };
    let done = with_head(c.data_mut(), t, |h| match e {
        Edit::Add => h.add(&key, &value),
        Edit::Replace => h.replace(&key, &value),
        Edit::Remove => h.remove(&key),
    });
    Ok(status(match done {
        None => Status::NotFound,
        Some(Ok(())) => Status::Ok,
        Some(Err(_)) => Status::BadArgument,
    }))
}

fn get_property(mut c: Caller<'_, Host>, pp: i32, ps: i32, rp: i32, rs: i32) -> R<i32> {
    let Some(path) = read(&c, pp, ps) else {
        return Ok(status(Status::BadArgument));
    };
    let Some(v) = crate::props::get(c.data(), &path) else {
        return Ok(status(Status::NotFound));
    };
    Ok(status(give(&mut c, &v, rp, rs)?))
}

fn set_property(mut c: Caller<'_, Host>, pp: i32, ps: i32, vp: i32, vs: i32) -> R<i32> {
    let (Some(path), Some(value)) = (read(&c, pp, ps), read(&c, vp, vs)) else {
        return Ok(status(Status::BadArgument));
    };
    Ok(status(crate::props::set(c.data_mut(), &path, value)))
}

/// `proxy_http_call`: in a client filter's request callback, queued for
/// the pipeline; in a root context's callback (a tick, a queue, a call's
/// answer), for hoard's [`crate::Services`]. Either sends it through the
/// named upstream and answers with `proxy_on_http_call_response`;
/// elsewhere `Unimplemented`.
#[allow(clippy::too_many_arguments)]
fn http_call(
    mut c: Caller<'_, Host>,
    up: i32,
    up_len: i32,
    hp: i32,
    hs: i32,
    bp: i32,
    bs: i32,
    _tp: i32,
    _ts: i32,
    timeout_ms: i32,
    token_ptr: i32,
) -> R<i32> {
    if (c.data().x.request.is_none() && !c.data().x.root) || origin_stage(&c) {
        return Ok(status(Status::Unimplemented));
    }
    let (Some(upstream), Some(raw), Some(body)) =
        (read(&c, up, up_len), read(&c, hp, hs), read(&c, bp, bs))
    else {
        return Ok(status(Status::BadArgument));
    };
    let Some(pairs) = crate::pairs::decode(&raw) else {
        return Ok(status(Status::ParseFailure));
    };
    let mut call = crate::HttpCall {
        token: 0,
        upstream: String::from_utf8_lossy(&upstream).into_owned(),
        method: http::Method::GET,
        path: String::new(),
        authority: String::new(),
        headers: http::HeaderMap::new(),
        body: body.into(),
        timeout: std::time::Duration::from_millis(u64::from((timeout_ms as u32).clamp(1, 60_000))),
    };
    for (k, v) in pairs {
        let Ok(text) = std::str::from_utf8(v) else {
            return Ok(status(Status::BadArgument));
        };
        match k {
            b":method" => match http::Method::from_bytes(v) {
                Ok(m) => call.method = m,
                Err(_) => return Ok(status(Status::BadArgument)),
            },
            b":path" => call.path = text.to_owned(),
            b":authority" => call.authority = text.to_owned(),
            b":scheme" => {}
            _ => match (
                http::header::HeaderName::from_bytes(k),
                http::HeaderValue::from_bytes(v),
            ) {
                (Ok(k), Ok(v)) => {
                    call.headers.append(k, v);
                }
                _ => return Ok(status(Status::BadArgument)),
            },
        }
    }
    if !call.path.starts_with('/') {
        return Ok(status(Status::BadArgument));
    }
    let x = &mut c.data_mut().x;
    x.next_token = x.next_token.wrapping_add(1);
    call.token = x.next_token;
    let token = call.token;
    x.calls.push(call);
    Ok(status(put_u32(&mut c, token_ptr, token)))
}

/// `proxy_register_shared_queue`: this VM consumes the queue (see `queues`).
fn register_queue(mut c: Caller<'_, Host>, np: i32, ns: i32, ret: i32) -> R<i32> {
    let Some(name) = read(&c, np, ns) else {
        return Ok(status(Status::BadArgument));
    };
    let id = crate::queues::register(&name, &c.data().inbox, c.data().slot);
    Ok(status(put_u32(&mut c, ret, id)))
}

/// `proxy_resolve_shared_queue`: a queue's id by its name (every VM of
/// hoard has the empty VM id: the one given is not compared).
fn resolve_queue(
    mut c: Caller<'_, Host>,
    _vp: i32,
    _vs: i32,
    np: i32,
    ns: i32,
    ret: i32,
) -> R<i32> {
    let Some(name) = read(&c, np, ns) else {
        return Ok(status(Status::BadArgument));
    };
    match crate::queues::resolve(&name) {
        Some(id) => Ok(status(put_u32(&mut c, ret, id))),
        None => Ok(status(Status::NotFound)),
    }
}

/// `proxy_enqueue_shared_queue`.
fn enqueue(c: Caller<'_, Host>, id: i32, vp: i32, vs: i32) -> R<i32> {
    let Some(value) = read(&c, vp, vs) else {
        return Ok(status(Status::BadArgument));
    };
    Ok(status(match crate::queues::enqueue(id as u32, value) {
        crate::queues::Enqueued::Ok => Status::Ok,
        crate::queues::Enqueued::NoQueue => Status::NotFound,
        crate::queues::Enqueued::Full => Status::InternalFailure,
    }))
}

/// `proxy_dequeue_shared_queue`: the oldest item, `Empty` when none.
fn dequeue(mut c: Caller<'_, Host>, id: i32, rp: i32, rs: i32) -> R<i32> {
    match crate::queues::dequeue(id as u32) {
        Ok(Some(v)) => Ok(status(give(&mut c, &v, rp, rs)?)),
        Ok(None) => Ok(status(Status::Empty)),
        Err(()) => Ok(status(Status::NotFound)),
    }
}

fn get_shared_data(
    mut c: Caller<'_, Host>,
    kp: i32,
    ks: i32,
    rp: i32,
    rs: i32,
    cas_ptr: i32,
) -> R<i32> {
    let Some(key) = read(&c, kp, ks) else {
        return Ok(status(Status::BadArgument));
    };
    let Some((value, cas)) = crate::shared::get(&key) else {
        return Ok(status(Status::NotFound));
    };
    let s = give(&mut c, &value, rp, rs)?;
    if s != Status::Ok {
        return Ok(status(s));
    }
    Ok(status(put_u32(&mut c, cas_ptr, cas)))
}

fn set_shared_data(c: Caller<'_, Host>, kp: i32, ks: i32, vp: i32, vs: i32, cas: i32) -> R<i32> {
    let (Some(key), Some(value)) = (read(&c, kp, ks), read(&c, vp, vs)) else {
        return Ok(status(Status::BadArgument));
    };
    Ok(status(if crate::shared::set(&key, value, cas as u32) {
        Status::Ok
    } else {
        Status::CasMismatch
    }))
}

fn define_metric(mut c: Caller<'_, Host>, kind: i32, np: i32, ns: i32, ret: i32) -> R<i32> {
    let (Some(kind), Some(name)) = (crate::shared::MetricKind::from_raw(kind), read(&c, np, ns))
    else {
        return Ok(status(Status::BadArgument));
    };
    let name = String::from_utf8_lossy(&name).into_owned();
    let Some(id) = c.data().metrics.define(kind, name) else {
        return Ok(status(Status::BadArgument));
    };
    Ok(status(put_u32(&mut c, ret, id)))
}

/// The callback runs in an origin filter (route `origin_filters`).
fn origin_stage(c: &Caller<'_, Host>) -> bool {
    c.data().x.info.as_deref().is_some_and(|i| i.origin)
}

#[allow(clippy::too_many_arguments)]
fn send_local_response(
    mut c: Caller<'_, Host>,
    code: i32,
    _dp: i32,
    _ds: i32,
    bp: i32,
    bs: i32,
    hp: i32,
    hs: i32,
    _grpc: i32,
) -> R<i32> {
    // An origin filter shapes the fetch; answering is a client filter's.
    if origin_stage(&c) {
        return Ok(status(Status::Unimplemented));
    }
    let Ok(code) = http::StatusCode::from_u16(code as u16) else {
        return Ok(status(Status::BadArgument));
    };
    let (Some(body), Some(raw)) = (read(&c, bp, bs), read(&c, hp, hs)) else {
        return Ok(status(Status::BadArgument));
    };
    let pairs = if raw.is_empty() {
        Vec::new()
    } else {
        match crate::pairs::decode(&raw) {
            Some(p) => p,
            None => return Ok(status(Status::ParseFailure)),
        }
    };
    let mut headers = http::HeaderMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        match (
            http::header::HeaderName::from_bytes(k),
            http::HeaderValue::from_bytes(v),
        ) {
            (Ok(k), Ok(v)) => {
                headers.append(k, v);
            }
            _ => return Ok(status(Status::BadArgument)),
        }
    }
    c.data_mut().x.local = Some(crate::LocalResponse {
        status: code,
        headers,
        body: body.into(),
    });
    Ok(status(Status::Ok))
}
