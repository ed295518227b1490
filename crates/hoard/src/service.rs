//! Running as a service: the pid file, systemd readiness (`sd_notify`),
//! `hoard reload`, and serving as `server.user`.

use std::io;
use std::path::{Path, PathBuf};

/// The pid file, removed when dropped (a clean stop).
#[derive(Debug)]
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes this process's id to `path` (through a temporary name, so a
    /// reader never sees a partial file).
    pub fn write(path: &Path) -> io::Result<PidFile> {
        let tmp = path.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))?;
        std::fs::rename(&tmp, path)?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
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

/// `hoard reload`: sends SIGHUP to the process named in `pid_file`.
pub fn send_reload(pid_file: &Path) -> Result<i32, String> {
    let text =
        std::fs::read_to_string(pid_file).map_err(|e| format!("{}: {e}", pid_file.display()))?;
    let pid: i32 = text.trim().parse().map_err(|_| {
        format!(
            "{}: not a process id: {:?}",
            pid_file.display(),
            text.trim()
        )
    })?;
    // kill(1) rather than an unsafe libc call: this runs once, by hand.
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    if !status.success() {
        return Err(format!("process {pid}: kill -HUP failed ({status})"));
    }
    Ok(pid)
}

/// `hoard check`'s line for `server.user`: who serves and what it must
/// be able to write.
pub fn run_as_needs(r: &hoard_proxy::privileges::RunAs, cfg: &hoard_proxy::Config) -> String {
    let needed = hoard_proxy::privileges::needs(cfg);
    if needed.is_empty() {
        return format!("runs as {r}; needs write access to nothing");
    }
    let list: Vec<String> = needed.iter().map(|p| p.display().to_string()).collect();
    format!("runs as {r}; needs write access to {}", list.join(", "))
}

/// Drops root for `r` once the proxy has bound and opened what needs root
/// (see `hoard_proxy::privileges`), and logs it.
pub fn drop_privileges(
    r: &hoard_proxy::privileges::RunAs,
    needed: &[std::path::PathBuf],
) -> Result<(), String> {
    let given = hoard_proxy::privileges::drop_to(r, needed)?;
    tracing::info!(user = %r.user, group = %r.group, uid = r.uid, gid = r.gid, given_to_user = given, "serving as an unprivileged user");
    Ok(())
}
