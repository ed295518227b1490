//! Whether a byte range of a file is in the page cache, without reading it:
//! the `cachestat` system call (Linux 6.5). A disk hit is sent with
//! `sendfile` only when every page it sends is resident, because `sendfile`
//! on a page that is not would wait for the device on a serving thread.
//!
//! Where the kernel has no `cachestat`, [`resident`] answers `false` (after
//! the first `ENOSYS`, without asking again) and bodies are read through
//! user space as before.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set after the kernel answered `ENOSYS` (or `EPERM` from a seccomp filter).
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

const PAGE: u64 = 4096;

/// `cachestat`'s number: 451 in the unified system call table every Linux
/// architecture has used for new calls since 5.x (not in `libc` for all
/// targets yet).
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// True if every page of `off..off + len` of `file` is in the page cache.
pub fn resident(file: &std::fs::File, off: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return false;
    }
    let range = CachestatRange { off, len };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat(2) reads `range` and writes `stat`, two live,
    // properly aligned `repr(C)` values of the kernel's layout, and touches
    // no other memory; the descriptor is borrowed from a live `File`.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error().raw_os_error();
        if matches!(e, Some(libc::ENOSYS) | Some(libc::EPERM)) {
            UNSUPPORTED.store(true, Ordering::Relaxed);
        }
        return false;
    }
    let pages = (off + len - 1) / PAGE - off / PAGE + 1;
    stat.nr_cache >= pages
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_just_written_is_resident() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 3 * PAGE as usize + 10]).unwrap();
        // Unless the kernel has no cachestat: then nothing is.
        if !UNSUPPORTED.load(Ordering::Relaxed) {
            assert!(resident(&f, 0, 3 * PAGE + 10) || UNSUPPORTED.load(Ordering::Relaxed));
        }
        // Past the end of the file nothing is cached.
        assert!(!resident(&f, 100 * PAGE, PAGE));
    }
}
