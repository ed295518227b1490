//! Running as a service: the pid file, systemd readiness (`sd_notify`),
//! `hoard reload`, `hoard upgrade`, and serving as `server.user`.

use std::io;
use std::path::{Path, PathBuf};

/// The pid file, removed when dropped (a clean stop).
#[derive(Debug)]
pub struct PidFile {
    /// The name given (`--pid-file`).
    path: PathBuf,
    /// Where it is now: `path`, or `path.oldbin` during and after a binary
    /// upgrade (the new process writes `path`).
    now: PathBuf,
}

impl PidFile {
    /// Writes this process's id to `path` (through a temporary name, so a
    /// reader never sees a partial file).
    pub fn write(path: &Path) -> io::Result<PidFile> {
        let tmp = path.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
        std::fs::rename(&tmp, path)?;
        Ok(PidFile {
            path: path.to_path_buf(),
            now: path.to_path_buf(),
        })
    }

    /// Renames the file `NAME.oldbin` (as nginx does), leaving its name to
    /// the new process of a binary upgrade.
    pub fn set_aside(&mut self) -> io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".oldbin");
        std::fs::rename(&self.path, &old)?;
        self.now = old.into();
        Ok(())
    }

    /// Gives the file its name back (the new process failed).
    pub fn restore(&mut self) {
        if self.now != self.path {
            match std::fs::rename(&self.now, &self.path) {
                Ok(()) => self.now = self.path.clone(),
                Err(e) => {
                    tracing::warn!(error = %e, file = %self.now.display(), "pid file: cannot restore its name")
                }
            }
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.now);
    }
}

/// Tells systemd (`Type=notify`) about a state change, e.g. `READY=1`;
/// nothing when not started by systemd (no `NOTIFY_SOCKET`).
pub fn notify(state: &str) {
    #[cfg(unix)]
    {
        let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
            return;
        };
        let sent = std::os::unix::net::UnixDatagram::unbound()
            .and_then(|s| s.send_to(state.as_bytes(), &socket).map(|_| ()));
        if let Err(e) = sent {
            tracing::warn!(error = %e, state, "could not notify systemd");
        }
    }
    #[cfg(not(unix))]
    let _ = state;
}

/// `hoard reload` (SIGHUP) and `hoard upgrade` (SIGUSR2): sends `signal`
/// to the process named in `pid_file`.
pub fn send_signal(pid_file: &Path, signal: rustix::process::Signal) -> Result<i32, String> {
    let text =
        std::fs::read_to_string(pid_file).map_err(|e| format!("{}: {e}", pid_file.display()))?;
    let pid: i32 = text.trim().parse().map_err(|_| {
        format!(
            "{}: not a process id: {:?}",
            pid_file.display(),
            text.trim()
        )
    })?;
    let target = rustix::process::Pid::from_raw(pid)
        .filter(|_| pid > 0)
        .ok_or_else(|| format!("{}: not a process id: {pid}", pid_file.display()))?;
    rustix::process::kill_process(target, signal).map_err(|e| format!("process {pid}: {e}"))?;
    Ok(pid)
}

/// `hoard check`'s line for `server.user`: who serves and what it must
/// be able to write.
pub fn run_as_needs(r: &hoard_config::privileges::RunAs, cfg: &hoard_server::Config) -> String {
    let needed = hoard_config::privileges::needs(cfg);
    if needed.is_empty() {
        return format!("runs as {r}; needs write access to nothing");
    }
    let list: Vec<String> = needed.iter().map(|p| p.display().to_string()).collect();
    format!("runs as {r}; needs write access to {}", list.join(", "))
}

/// Drops root for `r` once the proxy has bound and opened what needs root
/// (see `hoard_config::privileges`), and logs it.
pub fn drop_privileges(
    r: &hoard_config::privileges::RunAs,
    needed: &[std::path::PathBuf],
) -> Result<(), String> {
    let given = hoard_config::privileges::drop_to(r, needed)?;
    tracing::info!(user = %r.user, group = %r.group, uid = r.uid, gid = r.gid, given_to_user = given, "serving as an unprivileged user");
    Ok(())
}
