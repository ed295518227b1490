//! `hoard reload`: asks a running hoard to re-read its configuration and
//! waits, within `--wait`, for the outcome its admin API reports.
//!
//! | arguments | asks with | learns the outcome from |
//! |---|---|---|
//! | `--admin` | `POST /reload` | its answer |
//! | `--pid-file --admin` | SIGHUP | `GET /status`: a `last_reload` whose `number` grew |
//! | `--pid-file` | SIGHUP | nothing: says so, exits 0 once the signal is sent |
//!
//! Exit status: 0 once the new configuration is in effect; 1 when it was
//! refused (the reason on standard error: the `hoard check` text), when no
//! outcome came within `--wait`, or when the process or its admin listener
//! cannot be reached; 2 for an unreadable token file.

use std::process::ExitCode;
use std::time::Duration;

use hoard_admin::client::{self, ReloadOutcome};

use crate::cli::ReloadArgs;
use crate::service;

/// How often `/status` is read while waiting.
const POLL: Duration = Duration::from_millis(50);

/// Why `hoard reload` did not see the new configuration in effect.
enum Failed {
    /// The running hoard refused the file: its reason.
    Refused(String),
    /// No outcome within `--wait`.
    Timeout(Duration),
    /// The process or its admin listener could not be reached.
    Unreachable(String),
}

impl Failed {
    fn as_str(&self) -> &'static str {
        match self {
            Failed::Refused(_) => "refused",
            Failed::Timeout(_) => "timeout",
            Failed::Unreachable(_) => "unreachable",
        }
    }
}

/// Runs `hoard reload`.
pub fn run(r: &ReloadArgs) -> ExitCode {
    let Some(admin) = &r.admin else {
        let pid_file = r.pid_file.as_deref().expect("invariant: clap requires one");
        return match service::send_signal(pid_file, rustix::process::Signal::HUP) {
            Ok(pid) => {
                println!(
                    "reload requested (process {pid}); not waiting for the outcome (give --admin to wait for it; it is logged and shown in /status)"
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hoard: reload: {e}");
                ExitCode::FAILURE
            }
        };
    };
    let (token, rt) = match crate::admin_client(r.token_file.as_deref()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let outcome = rt.block_on(ask(r, admin, token.as_deref()));
    match outcome {
        Ok((generation, restart_needed)) => {
            println!("configuration reloaded (generation {generation})");
            if !restart_needed.is_empty() {
                eprintln!(
                    "hoard: reload: these settings changed but take effect only after a restart: {}",
                    restart_needed.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            match &f {
                Failed::Refused(why) => eprintln!(
                    "hoard: reload refused, the running configuration stays: {why}"
                ),
                Failed::Timeout(wait) => eprintln!(
                    "hoard: reload: no outcome within {wait:?} (--wait); the running hoard logs it and /status shows it when it comes"
                ),
                Failed::Unreachable(e) => eprintln!("hoard: reload: {e}"),
            }
            tracing::debug!(outcome = f.as_str(), "reload");
            ExitCode::FAILURE
        }
    }
}

/// Asks for the reload and waits for its outcome: the new generation and
/// the settings that wait for a restart.
async fn ask(
    r: &ReloadArgs,
    admin: &str,
    token: Option<&str>,
) -> Result<(u64, Vec<String>), Failed> {
    let outcome = match &r.pid_file {
        None => tokio::time::timeout(r.wait, client::reload(admin, token))
            .await
            .map_err(|_| Failed::Timeout(r.wait))?
            .map_err(Failed::Unreachable)?,
        Some(pid_file) => {
            // The reload before this one, so that its outcome is not taken
            // for this one's.
            let before = client::last_reload(admin, token)
                .await
                .map_err(Failed::Unreachable)?
                .map_or(0, |(n, _)| n);
            service::send_signal(pid_file, rustix::process::Signal::HUP)
                .map_err(Failed::Unreachable)?;
            tokio::time::timeout(r.wait, async {
                loop {
                    match client::last_reload(admin, token).await {
                        Ok(Some((n, outcome))) if n > before => return Ok(outcome),
                        Ok(_) => {}
                        Err(e) => return Err(Failed::Unreachable(e)),
                    }
                    tokio::time::sleep(POLL).await;
                }
            })
            .await
            .map_err(|_| Failed::Timeout(r.wait))??
        }
    };
    match outcome {
        ReloadOutcome::Applied {
            generation,
            restart_needed,
        } => Ok((generation, restart_needed)),
        ReloadOutcome::Refused(why) => Err(Failed::Refused(why)),
    }
}
