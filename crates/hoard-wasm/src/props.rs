//! Properties (`proxy_get_property`, `proxy_set_property`): a path of
//! segments separated by zero bytes, as Envoy names them. Strings are
//! returned as bytes, numbers as 8-byte little-endian integers (Envoy's
//! form). hoard's own are under `hoard`: the cache outcome on responses,
//! `hoard.cache_key`, which a request filter sets to add a value to the
//! route's cache key, and on an origin filter's response (route
//! `origin_filters`) `hoard.ttl` (seconds, as text: `"300"`, `"0.5"`) and
//! `hoard.uncacheable` (`"true"`), which decide how it is stored.
//! `hoard.stage` says which list the stream runs in (`client`, `origin`).

use crate::abi::Status;
use crate::vm::Host;

/// The property at `path`, if hoard has it now.
pub(crate) fn get(h: &Host, path: &[u8]) -> Option<Vec<u8>> {
    let name = dotted(path)?;
    let info = h.x.info.as_deref();
    let req = h.x.request.as_ref();
    let text = |s: &str| Some(s.as_bytes().to_vec());
    let int = |n: i64| Some(n.to_le_bytes().to_vec());
    match name.as_str() {
        "plugin_name" => text(&h.filter),
        "plugin_root_id" => text(&h.root_id),
        "plugin_vm_id" => text(""),
        "request.path" => match req {
            Some(r) => text(&r.path),
            None => text(&info?.path),
        },
        "request.url_path" => {
            let p = req.map_or(info.map(|i| i.path.as_str()), |r| Some(r.path.as_str()))?;
            text(p.split('?').next().unwrap_or(p))
        }
        "request.query" => {
            let p = req.map_or(info.map(|i| i.path.as_str()), |r| Some(r.path.as_str()))?;
            text(p.split_once('?').map_or("", |(_, q)| q))
        }
        "request.method" => match req {
            Some(r) => text(r.method.as_str()),
            None => text(&info?.method),
        },
        "request.host" => match req {
            Some(r) => text(&r.authority),
            None => text(&info?.host),
        },
        "request.scheme" => text(info?.scheme),
        "request.protocol" => text(info?.protocol),
        "request.id" => text(info?.request_id.as_deref()?),
        "source.address" => text(&info?.client?.to_string()),
        "source.port" => int(i64::from(info?.client?.port())),
        "route_name" => text(&info?.route),
        "response.code" => int(i64::from(h.x.response.as_ref()?.status.as_u16())),
        "hoard.cache_status" => text(info?.cache_status?),
        "hoard.cache_key" => text(info?.cache_key.as_deref()?),
        "hoard.stage" => text(if info?.origin { "origin" } else { "client" }),
        "hoard.ttl" => text(&format!("{}", info?.ttl?.as_secs_f64())),
        "hoard.uncacheable" => text(if info?.uncacheable { "true" } else { "false" }),
        _ => None,
    }
}

/// Sets a property: `hoard.cache_key` in a client filter's request
/// callback, `hoard.ttl` and `hoard.uncacheable` in an origin filter's
/// response callback; `BadArgument` elsewhere or for a value that does
/// not parse, `NotFound` for any other name.
pub(crate) fn set(h: &mut Host, path: &[u8], value: Vec<u8>) -> Status {
    let Some(name) = dotted(path) else {
        return Status::BadArgument;
    };
    let origin_response = h.x.response.is_some() && h.x.info.as_deref().is_some_and(|i| i.origin);
    match name.as_str() {
        "hoard.ttl" if origin_response => {
            let secs = std::str::from_utf8(&value)
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .and_then(|v| std::time::Duration::try_from_secs_f64(v).ok());
            match (secs, h.x.info.as_deref_mut()) {
                (Some(ttl), Some(info)) => {
                    info.ttl = Some(ttl);
                    Status::Ok
                }
                _ => Status::BadArgument,
            }
        }
        "hoard.uncacheable" if origin_response => {
            let on = match value.as_slice() {
                b"true" | b"1" => true,
                b"false" | b"0" | b"" => false,
                _ => return Status::BadArgument,
            };
            match h.x.info.as_deref_mut() {
                Some(info) => {
                    info.uncacheable = on;
                    Status::Ok
                }
                None => Status::BadArgument,
            }
        }
        "hoard.ttl" | "hoard.uncacheable" => Status::BadArgument,
        "hoard.cache_key"
            if h.x.request.is_some() && !h.x.info.as_deref().is_some_and(|i| i.origin) =>
        {
            let Ok(v) = String::from_utf8(value) else {
                return Status::BadArgument;
            };
            match h.x.info.as_deref_mut() {
                Some(info) => {
                    info.cache_key = Some(v);
                    Status::Ok
                }
                None => Status::NotFound,
            }
        }
        "hoard.cache_key" => Status::BadArgument,
        _ => Status::NotFound,
    }
}

/// `request\0path` (or `request.path`, as some SDKs send it) as `request.path`.
fn dotted(path: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(path).ok()?;
    Some(s.trim_end_matches('\0').replace('\0', "."))
}
