//! The binary's only unsafe code: leaving descriptors open across `exec`
//! for a new process (a binary upgrade), and taking ownership of those a
//! previous process left open for this one. Everything else about the
//! upgrade is in `upgrade.rs`.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// Spawns `cmd` with the descriptors `keep` open in it under the same
/// numbers; every other descriptor of this process stays closed on exec.
pub fn spawn_keeping(cmd: &mut Command, keep: &[BorrowedFd<'_>]) -> io::Result<Child> {
    let fds: Vec<RawFd> = keep.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls may be made: it allocates nothing (it
    // walks a vector made before the fork) and makes only fcntl(2) system
    // calls. Each descriptor is open: `keep` borrows them for this whole
    // call, which spans the fork, and the child's descriptor table is a
    // copy of ours at the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Takes ownership of the descriptors numbered `fds`, which the process
/// that started this one left open for it (named in the environment); a
/// number that is not an open descriptor, a standard stream, or a number
/// given twice yields `None`. Called once, at start, before this process
/// opens or closes any descriptor of its own.
pub fn adopt(fds: &[RawFd]) -> Vec<Option<OwnedFd>> {
    let mut taken = HashSet::new();
    fds.iter()
        .map(|&fd| {
            if fd < 3 || !taken.insert(fd) {
                return None;
            }
            // SAFETY: F_GETFD reads flags and changes nothing; on a number
            // that is not open it fails with EBADF.
            let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1;
            // SAFETY: the descriptor is open, is not a standard stream, and
            // no other owner exists in this process: nothing here opened
            // it (it came across exec), and each number is taken once.
            open.then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        })
        .collect()
}
