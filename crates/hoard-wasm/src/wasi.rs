//! The few WASI (preview 1) calls that SDK runtimes import even when a
//! filter does no I/O: output goes to hoard's log, the clock and random
//! bytes are real, the environment and arguments are empty, files do not
//! exist, and `proc_exit` ends the callback with a trap. AssemblyScript's
//! `env.abort` is a trap too.

use wasmtime::{Caller, Linker};

use crate::vm::Host;

const W: &str = "wasi_snapshot_preview1";
/// WASI's `errno`s used here.
const SUCCESS: i32 = 0;
const BADF: i32 = 8;
const INVAL: i32 = 28;

type R<T> = wasmtime::Result<T>;

fn mem(c: &mut Caller<'_, Host>) -> Option<wasmtime::Memory> {
    c.data().memory
}

fn put(c: &mut Caller<'_, Host>, at: i32, bytes: &[u8]) -> bool {
    let Some(m) = mem(c) else { return false };
    let at = at as u32 as usize;
    match m.data_mut(c).get_mut(at..at + bytes.len()) {
        Some(d) => {
            d.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

fn word(c: &mut Caller<'_, Host>, at: usize) -> Option<u32> {
    let m = mem(c)?;
    let b = m.data(c).get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Defines the calls under both names WASI has had (`wasi_unstable` is
/// what older toolchains, AssemblyScript's among them, import).
pub(crate) fn define(l: &mut Linker<Host>) -> wasmtime::Result<()> {
    for w in [W, "wasi_unstable"] {
        define_in(l, w)?;
    }
    Ok(())
}

fn define_in(l: &mut Linker<Host>, w: &str) -> wasmtime::Result<()> {
    l.func_wrap(
        w,
        "fd_write",
        |mut c: Caller<'_, Host>, fd: i32, iovs: i32, n: i32, ret: i32| -> R<i32> {
            let mut text = Vec::new();
            for i in 0..n.max(0) as usize {
                let at = iovs as u32 as usize + i * 8;
                let (Some(p), Some(len)) = (word(&mut c, at), word(&mut c, at + 4)) else {
                    return Ok(INVAL);
                };
                let Some(m) = mem(&mut c) else {
                    return Ok(INVAL);
                };
                let (p, len) = (p as usize, len as usize);
                match m.data(&c).get(p..p + len) {
                    Some(b) => text.extend_from_slice(b),
                    None => return Ok(INVAL),
                }
            }
            let filter = &*c.data().filter;
            let line = String::from_utf8_lossy(&text);
            let line = line.trim_end();
            if fd == 2 {
                tracing::warn!(filter, "{line}");
            } else {
                tracing::info!(filter, "{line}");
            }
            Ok(if put(&mut c, ret, &(text.len() as u32).to_le_bytes()) {
                SUCCESS
            } else {
                INVAL
            })
        },
    )?;
    l.func_wrap(w, "proc_exit", |_: Caller<'_, Host>, code: i32| -> R<()> {
        Err(wasmtime::Error::msg(format!("proc_exit({code})")))
    })?;
    l.func_wrap(
        w,
        "clock_time_get",
        |mut c: Caller<'_, Host>, _id: i32, _prec: i64, ret: i32| -> R<i32> {
            let now = c.data().unix_nanos();
            Ok(if put(&mut c, ret, &now.to_le_bytes()) {
                SUCCESS
            } else {
                INVAL
            })
        },
    )?;
    l.func_wrap(
        w,
        "random_get",
        |mut c: Caller<'_, Host>, p: i32, n: i32| -> R<i32> {
            let mut buf = vec![0u8; n.max(0) as usize];
            // Seeded by the standard library's per-process random keys.
            let mut seed = {
                use std::hash::{BuildHasher, Hasher};
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish()
                    | 1
            };
            for b in &mut buf {
                // xorshift: filters' hash seeds, not secrets.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            Ok(if put(&mut c, p, &buf) { SUCCESS } else { INVAL })
        },
    )?;
    for name in ["environ_sizes_get", "args_sizes_get"] {
        l.func_wrap(
            w,
            name,
            |mut c: Caller<'_, Host>, count: i32, size: i32| -> R<i32> {
                let ok = put(&mut c, count, &0u32.to_le_bytes())
                    && put(&mut c, size, &0u32.to_le_bytes());
                Ok(if ok { SUCCESS } else { INVAL })
            },
        )?;
    }
    for name in ["environ_get", "args_get"] {
        l.func_wrap(w, name, |_: Caller<'_, Host>, _: i32, _: i32| -> R<i32> {
            Ok(SUCCESS)
        })?;
    }
    l.func_wrap(w, "fd_close", |_: Caller<'_, Host>, _: i32| -> R<i32> {
        Ok(BADF)
    })?;
    l.func_wrap(
        w,
        "fd_fdstat_get",
        |_: Caller<'_, Host>, _: i32, _: i32| -> R<i32> { Ok(BADF) },
    )?;
    l.func_wrap(
        w,
        "fd_prestat_get",
        |_: Caller<'_, Host>, _: i32, _: i32| -> R<i32> { Ok(BADF) },
    )?;
    l.func_wrap(
        w,
        "fd_prestat_dir_name",
        |_: Caller<'_, Host>, _: i32, _: i32, _: i32| -> R<i32> { Ok(BADF) },
    )?;
    l.func_wrap(
        w,
        "fd_read",
        |_: Caller<'_, Host>, _: i32, _: i32, _: i32, _: i32| -> R<i32> { Ok(BADF) },
    )?;
    l.func_wrap(
        w,
        "fd_seek",
        |_: Caller<'_, Host>, _: i32, _: i64, _: i32, _: i32| -> R<i32> { Ok(BADF) },
    )?;
    l.func_wrap(w, "sched_yield", |_: Caller<'_, Host>| -> R<i32> {
        Ok(SUCCESS)
    })?;
    Ok(())
}
