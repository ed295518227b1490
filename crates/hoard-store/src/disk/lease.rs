//! Whether a handle is the only open one of its file.
//!
//! Linux grants a write lease (`F_SETLEASE` with `F_WRLCK`) only while no
//! other descriptor has the file open, in this process or any other. An
//! evicted object's file is overwritten in place for a new object (a
//! reservation with `Victims::Reuse`, in [`super::zone::DiskZone`]) only
//! when the lease is granted, so a reader still streaming the old object
//! (through user space or with `sendfile`) never sees the new object's
//! bytes: its open descriptor makes the lease fail, and the file is
//! unlinked instead.
//!
//! The lease is given back at once. It is not needed afterwards: the file
//! was renamed to a temporary name before the check, so no reader can open
//! it again. Where the kernel or the file system refuses leases (`EINVAL`,
//! `leases-enable` off), nothing is recycled.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// True when `file` (open for writing) is the file's only open handle.
pub fn sole_handle(file: &File) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: `fcntl` with `F_SETLEASE` takes an open descriptor (borrowed
    // from `file` for the duration of the call) and an integer argument; it
    // touches no memory of ours.
    let granted = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) } == 0;
    if granted {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn a_second_open_handle_refuses_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"body").unwrap();
        let rw = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        };
        let mine = rw();
        let reader = File::open(&path).unwrap();
        assert!(!sole_handle(&mine), "a reader holds the file");
        drop(reader);
        assert!(sole_handle(&mine), "nobody else holds it");
        assert!(sole_handle(&mine), "the lease was given back");
        let other = rw();
        assert!(!sole_handle(&mine), "another writer holds it");
        drop(other);
    }
}
