//! Binary upgrade (`SIGUSR2`, `hoard upgrade`), as nginx's, without a
//! dropped connection.
//!
//! ## The old process
//!
//! [`start`] renames the pid file `NAME.oldbin`, then starts the binary at
//! the path this process was started from (read at start: the file there
//! may since have been replaced by a new version) with the same arguments,
//! passing it every listening socket (client listeners over TCP, their
//! HTTP/3 UDP sockets, the admin listener) as open descriptors named in
//! `HOARD_INHERIT` (see `hoard_server::listeners::inherit`), and one end of a
//! socket pair named in [`READY_ENV`]. It keeps serving meanwhile. When the
//! new process writes `ready PID` on that pair, the old one stops accepting
//! and drains like on SIGQUIT; its pid file (`NAME.oldbin`) goes when it
//! exits. When the new process exits first, closes the pair without a word,
//! or says nothing within [`READY_TIMEOUT`] (it is then killed), the old
//! one logs why, gives the pid file its name back and goes on serving.
//!
//! ## The new process
//!
//! [`received`] takes the sockets at start; the proxy adopts those whose
//! kind and configured address match a listener of its configuration and
//! binds the others. Once every listener serves and its pid file is
//! written, [`Handover::ready`] tells the old process. While both accept
//! on the same sockets, each serves what it accepted; connections waiting
//! in a socket's queue when the old process stops accepting are the new
//! one's.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use hoard_server::listeners::inherit::{self, Entry, Inherited};
use hoard_server::Proxy;

use crate::fdpass;
use crate::service::PidFile;

/// The environment variable naming the descriptor on which the new
/// process says it is ready.
pub const READY_ENV: &str = "HOARD_UPGRADE_READY";

/// How long the old process waits for the new one to be ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How this process was started, read at start.
#[derive(Debug)]
pub struct Exe {
    path: PathBuf,
    args: Vec<OsString>,
}

impl Exe {
    /// This process's binary (`/proc/self/exe` resolved now, else
    /// `argv[0]`) and arguments.
    pub fn current() -> Exe {
        let mut argv = std::env::args_os();
        let argv0 = argv.next().unwrap_or_default();
        let path = std::env::current_exe().unwrap_or_else(|_| argv0.into());
        Exe {
            path,
            args: argv.collect(),
        }
    }
}

/// What the previous process passed on (nothing when started otherwise).
#[derive(Debug, Default)]
pub struct Handover {
    /// The listening sockets.
    pub inherited: Inherited,
    /// Where to say "ready".
    ready: Option<UnixStream>,
}

/// Takes the sockets and the ready channel named in the environment, and
/// clears those variables (a later upgrade names its own).
///
/// # Errors
/// When the variables are set but malformed.
pub fn received() -> Result<Handover, String> {
    let entries = match std::env::var(inherit::ENV) {
        Ok(v) => inherit::parse_env(&v)?,
        Err(_) => Vec::new(),
    };
    let ready_fd = match std::env::var(READY_ENV) {
        Ok(v) => Some(
            v.parse::<std::os::fd::RawFd>()
                .map_err(|_| format!("{READY_ENV}: not a descriptor: {v:?}"))?,
        ),
        Err(_) => None,
    };
    std::env::remove_var(inherit::ENV);
    std::env::remove_var(READY_ENV);
    let mut fds: Vec<_> = entries.iter().map(|e| e.fd).collect();
    fds.extend(ready_fd);
    let mut owned = fdpass::adopt(&fds).into_iter();
    let mut sockets = Vec::new();
    for (e, fd) in entries.iter().zip(owned.by_ref()) {
        match fd {
            Some(fd) => sockets.push((e.kind, e.addr, fd)),
            None => tracing::warn!(
                kind = e.kind.as_str(),
                fd = e.fd,
                "inherited descriptor is not open; ignored"
            ),
        }
    }
    let ready = owned.next().flatten().map(UnixStream::from);
    Ok(Handover {
        inherited: Inherited::new(sockets),
        ready,
    })
}

impl Handover {
    /// True when this process was started by a binary upgrade.
    pub fn upgrading(&self) -> bool {
        self.ready.is_some()
    }

    /// Tells the old process this one serves (it then drains and exits).
    pub fn ready(&mut self) {
        if let Some(mut s) = self.ready.take() {
            let said = s.write_all(format!("ready {}\n", std::process::id()).as_bytes());
            match said {
                Ok(()) => tracing::info!("upgrade: serving; the old process drains and exits"),
                Err(e) => tracing::warn!(error = %e, "upgrade: could not tell the old process"),
            }
        }
    }
}

/// Starts the new process and waits until it is ready; returns its pid.
/// On failure the new process is gone, the pid file has its name back,
/// and this process serves on.
///
/// # Errors
/// Why the new process did not take over.
pub async fn start(
    exe: &Exe,
    proxy: &Proxy,
    pid_file: Option<&mut PidFile>,
) -> Result<u32, String> {
    let sockets = proxy
        .inheritable()
        .map_err(|e| format!("listening sockets: {e}"))?;
    let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socket pair: {e}"))?;
    let entries: Vec<Entry> = sockets
        .iter()
        .map(|(kind, addr, fd)| Entry {
            kind: *kind,
            fd: fd.as_raw_fd(),
            addr: *addr,
        })
        .collect();
    let mut keep: Vec<_> = sockets.iter().map(|(_, _, fd)| fd.as_fd()).collect();
    keep.push(theirs.as_fd());
    let mut pid_file = pid_file;
    if let Some(p) = pid_file.as_deref_mut() {
        p.set_aside().map_err(|e| format!("pid file: {e}"))?;
    }
    let mut cmd = Command::new(&exe.path);
    cmd.args(&exe.args)
        .env(inherit::ENV, inherit::env_value(&entries))
        .env(READY_ENV, theirs.as_raw_fd().to_string())
        .stdin(Stdio::null());
    let spawned = fdpass::spawn_keeping(&mut cmd, &keep);
    drop(keep);
    drop(theirs);
    drop(sockets);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            if let Some(p) = pid_file {
                p.restore();
            }
            return Err(format!("cannot start {}: {e}", exe.path.display()));
        }
    };
    let pid = child.id();
    tracing::info!(pid, exe = %exe.path.display(), "upgrade: new process started; serving until it is ready");
    // A blocking read on a thread of its own: the runtime serves meanwhile.
    let said = tokio::task::spawn_blocking(move || {
        let mut ours = ours;
        ours.set_read_timeout(Some(READY_TIMEOUT))?;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while ours.read(&mut byte)? == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        Ok::<_, std::io::Error>(line)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    let why = match said {
        Ok(line) if line.starts_with(b"ready") => return Ok(pid),
        Ok(_) => "it closed the ready channel without saying ready".to_string(),
        Err(e) => format!("no word within {READY_TIMEOUT:?} ({e})"),
    };
    // Gone or stuck: make sure it is gone, and say how it ended.
    let status = match child.try_wait() {
        Ok(Some(s)) => s,
        _ => {
            let _ = child.kill();
            let waited = tokio::task::spawn_blocking(move || child.wait()).await;
            match waited {
                Ok(Ok(s)) => s,
                _ => return Err(format!("new process {pid}: {why}")),
            }
        }
    };
    if let Some(p) = pid_file {
        p.restore();
    }
    Err(format!("new process {pid}: {why}; it ended with {status}"))
}
