//! Serving as an unprivileged user (`[server] user`, `group`).
//!
//! ## Model
//!
//! Started as root, hoard binds its listeners (ports below 1024 included),
//! creates its disk zones and opens its access log; then, before it serves
//! a request, [`drop_to`] gives root up for good: the supplementary groups
//! (the user's, from the group database), then the group, then the user, in
//! that order (once the user is not root, it could change neither), and
//! checks that root cannot be taken back. What hoard made as root in the
//! directories it writes to is given to the user first ([`give_to`]), so a
//! zone created by root is usable after the drop. The binary runs both
//! through `Proxy::start_with`, between binding and serving.
//!
//! Started as another user with `user` set, hoard refuses to start unless
//! it already is that user and group.
//!
//! Names are looked up with the C library (`/etc/passwd`, `/etc/group`,
//! or NSS). This module holds the crate's only `unsafe` code: those calls
//! and the credential changes.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::path::{Path, PathBuf};

use crate::{Config, LogTarget};

/// Who hoard serves as, resolved from `server.user` and `server.group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// The user's name.
    pub user: String,
    /// The group's name (the user's primary group unless `group` names one).
    pub group: String,
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
    /// The supplementary groups: every group the user belongs to.
    pub groups: Vec<u32>,
}

impl std::fmt::Display for RunAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.user, self.group)
    }
}

/// Grows a buffer for the `_r` lookups until the entry fits (1 MiB at most).
fn lookup<T>(
    mut call: impl FnMut(&mut [u8]) -> Result<Option<T>, i32>,
) -> Result<Option<T>, String> {
    let mut buf = vec![0u8; 1024];
    loop {
        match call(&mut buf) {
            Ok(x) => return Ok(x),
            Err(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            Err(e) => return Err(io::Error::from_raw_os_error(e).to_string()),
        }
    }
}

fn c_name(name: &str) -> Result<CString, String> {
    CString::new(name).map_err(|_| format!("{name:?}: contains a NUL byte"))
}

/// The user id and primary group id of user `name`.
///
/// # Errors
/// No such user, or the lookup failed.
pub fn user(name: &str) -> Result<(u32, u32), String> {
    let c = c_name(name)?;
    let found = lookup(|buf| {
        // SAFETY: every pointer is valid for the call; `buf` outlives it
        // and its length is passed; `pwd` is plain data.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                c.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            )
        };
        match rc {
            0 if out.is_null() => Ok(None),
            0 => Ok(Some((pwd.pw_uid, pwd.pw_gid))),
            e => Err(e),
        }
    })?;
    found.ok_or_else(|| format!("no user {name:?} on this system"))
}

/// The id of group `name`.
///
/// # Errors
/// No such group, or the lookup failed.
pub fn group(name: &str) -> Result<u32, String> {
    let c = c_name(name)?;
    let found = lookup(|buf| {
        // SAFETY: as in `user`.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        let rc = unsafe {
            libc::getgrnam_r(
                c.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            )
        };
        match rc {
            0 if out.is_null() => Ok(None),
            0 => Ok(Some(grp.gr_gid)),
            e => Err(e),
        }
    })?;
    found.ok_or_else(|| format!("no group {name:?} on this system"))
}

/// The name of group `gid` (its number when it has none).
pub fn group_name(gid: u32) -> String {
    let found = lookup(|buf| {
        // SAFETY: as in `user`; the name is copied out before `buf` is reused.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        let rc = unsafe {
            libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr().cast(), buf.len(), &mut out)
        };
        match rc {
            0 if out.is_null() => Ok(None),
            0 => Ok(Some(
                unsafe { CStr::from_ptr(grp.gr_name) }
                    .to_string_lossy()
                    .into_owned(),
            )),
            e => Err(e),
        }
    })
    .ok()
    .flatten();
    found.unwrap_or_else(|| gid.to_string())
}

/// Every group `user` belongs to, `gid` included.
pub fn group_list(user: &str, gid: u32) -> Vec<u32> {
    let Ok(c) = c_name(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut got = n;
        // SAFETY: `groups` holds `got` entries; the call writes at most that
        // many and says how many it needs otherwise.
        let rc = unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut got) };
        if rc >= 0 {
            groups.truncate(got.max(0) as usize);
            return groups;
        }
        if got <= n || n >= 65536 {
            return vec![gid];
        }
        n = got;
    }
}

/// Resolves `server.user` and `server.group`.
///
/// # Errors
/// The key at fault and the message.
pub fn resolve(
    user_name: &str,
    group_name_given: Option<&str>,
) -> Result<RunAs, (&'static str, String)> {
    let (uid, primary) = user(user_name).map_err(|m| ("server.user", m))?;
    let (gid, group) = match group_name_given {
        Some(g) => (group(g).map_err(|m| ("server.group", m))?, g.to_string()),
        None => (primary, group_name(primary)),
    };
    Ok(RunAs {
        user: user_name.to_string(),
        group,
        uid,
        gid,
        groups: group_list(user_name, gid),
    })
}

/// What the user must be able to write: each disk zone's directories, the
/// access log file, and the ACME directory when a listener uses ACME.
pub fn needs(cfg: &Config) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = cfg
        .cache
        .zones
        .iter()
        .flat_map(|z| z.dirs.iter().map(|d| d.path.clone()))
        .collect();
    if let LogTarget::File(f) = &cfg.access_log.target {
        out.push(f.clone());
    }
    if cfg.listeners.iter().any(|l| !l.acme.is_empty()) {
        out.push(
            cfg.acme
                .dir
                .clone()
                .unwrap_or_else(|| cfg.cache.dir.join("acme")),
        );
    }
    out
}

/// Gives `path`, and what is under it when it is a directory, to the user
/// where root owns it (what hoard made as root); symbolic links are not
/// followed. Returns how many entries changed owner.
///
/// # Errors
/// When an owner cannot be changed (the message names the path).
pub fn give_to(path: &Path, run: &RunAs) -> Result<usize, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut n = 0;
    use std::os::unix::fs::MetadataExt;
    if meta.uid() == 0 {
        std::os::unix::fs::lchown(path, Some(run.uid), Some(run.gid))
            .map_err(|e| format!("{}: cannot give it to {run}: {e}", path.display()))?;
        n += 1;
    }
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for e in entries.flatten() {
            n += give_to(&e.path(), run)?;
        }
    }
    Ok(n)
}

/// Gives the user what it needs (see [`give_to`]; only as root), then
/// drops to it for good: supplementary groups, group, user. Returns how
/// many entries changed owner.
///
/// # Errors
/// Started as neither root nor that user; a change that fails; root
/// still reachable afterwards; a needed path the user cannot write.
pub fn drop_to(run: &RunAs, needed: &[PathBuf]) -> Result<usize, String> {
    // SAFETY (every call in this function): the credential calls take and
    // return plain integers; `setgroups` reads `groups.len()` entries of a
    // live vector.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid != 0 {
        if euid == run.uid && egid == run.gid {
            return Ok(0);
        }
        return Err(format!(
            "server.user = {:?}: started as uid {euid} gid {egid}, which is neither root nor {run} (uid {} gid {}); start as root, or as that user",
            run.user, run.uid, run.gid
        ));
    }
    let mut given = 0;
    if run.uid != 0 {
        for p in needed {
            given += give_to(p, run)?;
        }
    }
    let groups: Vec<libc::gid_t> = run.groups.clone();
    let fail = |what: &str| format!("{what} failed: {}", io::Error::last_os_error());
    if unsafe { libc::setgroups(groups.len() as _, groups.as_ptr()) } != 0 {
        return Err(fail("setgroups"));
    }
    if unsafe { libc::setgid(run.gid) } != 0 {
        return Err(fail("setgid"));
    }
    if unsafe { libc::setuid(run.uid) } != 0 {
        return Err(fail("setuid"));
    }
    let now = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    if now != (run.uid, run.uid, run.gid, run.gid) {
        return Err(format!(
            "after the switch to {run}: uid {}/{} gid {}/{} (real/effective)",
            now.0, now.1, now.2, now.3
        ));
    }
    if run.uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(format!(
            "after the switch to {run}, root could be taken back"
        ));
    }
    for p in needed {
        check_writable(p, run)?;
    }
    Ok(given)
}

/// After the drop: the user can write `path` (a directory: create files in
/// it), or it does not exist yet and its directory is writable.
fn check_writable(path: &Path, run: &RunAs) -> Result<(), String> {
    let target = if path.exists() {
        path
    } else {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    };
    let c = CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: contains a NUL byte", target.display()))?;
    let mode = if target.is_dir() {
        libc::W_OK | libc::X_OK
    } else {
        libc::W_OK
    };
    // SAFETY: a valid C string and a mode.
    if unsafe { libc::access(c.as_ptr(), mode) } != 0 {
        return Err(format!(
            "{}: {run} cannot write it ({}); give it to {} or make it writable by group {}",
            target.display(),
            io::Error::last_os_error(),
            run.user,
            run.group
        ));
    }
    Ok(())
}
