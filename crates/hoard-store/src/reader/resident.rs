//! Whether a byte range of a file is in the page cache, without reading it:
//! the `cachestat` system call (Linux 6.5). A disk hit is sent with
//! `sendfile` only when every page it sends is resident, because `sendfile`
//! on a page that is not would wait for the device on a serving thread.
//!
//! Where the kernel has no `cachestat`, [`resident`] answers `false` (after
//! the first `ENOSYS`, without asking again) and bodies are read through
//! user space as before.
//!
//! [`read_resident`] reads a range on the calling thread only if every page
//! of it is resident (`preadv2` with `RWF_NOWAIT`, Linux 4.14): a small disk
//! hit is then copied at once instead of sent by `sendfile` or read on the
//! I/O pool, and a read that would wait for the device is not made.
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

/// Set after `preadv2` answered that it cannot do `RWF_NOWAIT` here.
static NOWAIT_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Bytes `off..off + len` of `file`, read on this thread, if the page cache
/// holds all of them; `None` if any page would have to come from the device
/// (nothing waits for it) or the kernel cannot tell.
pub fn read_resident(file: &std::fs::File, off: u64, len: usize) -> Option<Vec<u8>> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if NOWAIT_UNSUPPORTED.load(Ordering::Relaxed) {
            return None;
        }
        let mut buf = Vec::<u8>::with_capacity(len);
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        // SAFETY: the one iovec points at `len` bytes of `buf`'s own,
        // unused capacity, which preadv2(2) fills and nothing else reads
        // until `set_len` below covers exactly the bytes it wrote; the
        // descriptor is borrowed from a live `File`.
        let n = unsafe {
            libc::preadv2(
                file.as_raw_fd(),
                &iov,
                1,
                off as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if matches!(
                e,
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
            ) {
                NOWAIT_UNSUPPORTED.store(true, Ordering::Relaxed);
            }
            return None;
        }
        if n as usize != len {
            // Part of it is not resident (or the file is shorter).
            return None;
        }
        // SAFETY: preadv2 initialised the first `n` == `len` bytes.
        unsafe { buf.set_len(len) };
        Some(buf)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (file, off, len, &NOWAIT_UNSUPPORTED);
        None
    }
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

    #[test]
    fn resident_bytes_are_read_and_a_short_file_is_not() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3 * PAGE as usize).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        if let Some(got) = read_resident(&f, 100, 5000) {
            assert_eq!(got, &data[100..5100]);
        }
        // Past the end: never a short read handed out as whole.
        assert_eq!(read_resident(&f, 3 * PAGE - 10, 100), None);
    }
}
