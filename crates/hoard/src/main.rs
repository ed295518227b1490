//! The `hoard` binary: command line, logging, runtime, signals.

mod ask_reload;
mod cli;
mod fdpass;
mod service;
mod sign;
mod upgrade;

/// mimalloc: threads free each other's allocations without taking a lock
/// (a purge dropping 100k objects on a blocking thread must not stall the
/// serving threads' allocations, as glibc's arena locks do), and small
/// allocations are faster. Counted, for the memory `/status` reports.
#[cfg(not(feature = "count-allocs"))]
#[global_allocator]
static GLOBAL: hoard_heap::Accounted = hoard_heap::Accounted;

#[cfg(feature = "count-allocs")]
mod alloc_count;
#[cfg(feature = "count-allocs")]
#[global_allocator]
static GLOBAL: alloc_count::Counting = alloc_count::Counting;

use std::process::ExitCode;
use std::sync::Arc;

use hoard_server::{Config, Proxy, SystemClock};

fn main() -> ExitCode {
    let cli = cli::parse();
    #[cfg(feature = "count-allocs")]
    alloc_count::report();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOARD_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_target(false)
        // Logs go to standard error (the journal under systemd).
        .with_writer(std::io::stderr)
        // Colours only on a terminal: logs piped to a file stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    hoard_proxy::build_info::set_commit(env!("HOARD_COMMIT"));
    if let Some(p) = cli.purge() {
        return purge(p);
    }
    if let Some(a) = cli.sign() {
        return sign::run(a);
    }
    if let Some(u) = cli.upstream() {
        return upstream(u);
    }
    if let Some(t) = cli.trace() {
        return trace(t);
    }
    if let Some(pid_file) = cli.upgrade() {
        return match service::send_signal(pid_file, rustix::process::Signal::USR2) {
            Ok(pid) => {
                println!(
                    "upgrade requested (process {pid}); the new process writes its pid to the pid file once it serves, the old one's is renamed .oldbin"
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hoard: upgrade: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(r) = cli.reload() {
        return ask_reload::run(r);
    }
    let config = match cli.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hoard: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_only() {
        println!("configuration is valid");
        if let Some(r) = &config.server.run_as {
            println!("{}", service::run_as_needs(r, &config));
        }
        return ExitCode::SUCCESS;
    }
    match run(config, cli.pid_file(), cli.config_file()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hoard: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a command that talks to the admin API needs: the bearer token of
/// `--token-file` (exit 2 when it cannot be read) and a runtime.
pub(crate) fn admin_client(
    token_file: Option<&std::path::Path>,
) -> Result<(Option<String>, tokio::runtime::Runtime), ExitCode> {
    let token = match token_file {
        Some(f) => match hoard_config::ops::read_token(&f.display().to_string()) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("hoard: --token-file: {e}");
                return Err(ExitCode::from(2));
            }
        },
        None => None,
    };
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Ok((token, rt)),
        Err(e) => {
            eprintln!("hoard: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

fn purge(p: &cli::PurgeArgs) -> ExitCode {
    let (token, rt) = match admin_client(p.token_file.as_deref()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let result = rt.block_on(hoard_admin::client::purge(
        &p.admin,
        token.as_deref(),
        &p.request(),
    ));
    match result {
        Ok(answer) => {
            println!("{}", answer.purged);
            // In a cluster: one line per member, `NODE STATE COUNT` (`-`:
            // the member did not say).
            for m in &answer.members {
                let n = m.purged.map_or("-".to_string(), |n| n.to_string());
                println!("{} {} {n}", m.node, m.state);
            }
            if let Some(pending) = answer.pending_bans {
                eprintln!("ban added: what it selects is no longer served; {pending} ban(s) pending, swept in the background");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hoard: purge: {e}");
            ExitCode::FAILURE
        }
    }
}

fn trace(t: &cli::Command) -> ExitCode {
    let cli::Command::Trace {
        admin,
        token_file,
        url,
        status,
        outcome,
        limit,
    } = t
    else {
        return ExitCode::FAILURE;
    };
    let (token, rt) = match admin_client(token_file.as_deref()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let enc = |v: &str| {
        v.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let mut query = Vec::new();
    if let Some(u) = url {
        query.push(format!("url={}", enc(u)));
    }
    if let Some(s) = status {
        query.push(format!("status={s}"));
    }
    if let Some(o) = outcome {
        query.push(format!("outcome={}", enc(o)));
    }
    if let Some(l) = limit {
        query.push(format!("limit={l}"));
    }
    let result = rt.block_on(hoard_admin::client::trace(
        admin,
        token.as_deref(),
        &query.join("&"),
        |line| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
        },
    ));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hoard: trace: {e}");
            ExitCode::FAILURE
        }
    }
}

fn upstream(u: &cli::UpstreamCommand) -> ExitCode {
    let cli::UpstreamCommand::Set {
        admin,
        token_file,
        upstream,
        server,
        state,
    } = u;
    let (token, rt) = match admin_client(token_file.as_deref()) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match rt.block_on(hoard_admin::client::set_server(
        admin,
        token.as_deref(),
        upstream,
        server,
        state,
    )) {
        Ok(now) => {
            println!("{upstream} {server} {state} ({now})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hoard: upstream set: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    config: Config,
    pid_file: Option<&std::path::Path>,
    config_file: Option<&std::path::Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    // Read first: the sockets a previous process passed on (a binary
    // upgrade), before anything opens a descriptor of its own.
    let exe = upgrade::Exe::current();
    let mut handover = upgrade::received()?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    // Pages freed by parked connections go back to the system when the
    // worker has nothing else to do (see `hoard_heap::on_idle`).
    #[cfg(not(feature = "count-allocs"))]
    rt.on_thread_park(hoard_heap::on_idle);
    if config.server.threads > 0 {
        rt.worker_threads(config.server.threads);
    }
    let rt = rt.build()?;
    rt.block_on(async move {
        let signals = Signals::install();
        let inherited = std::mem::take(&mut handover.inherited);
        let run_as = config.server.run_as.clone();
        let needed = hoard_config::privileges::needs(&config);
        // Bound and opened as root: serve as `server.user` from here on (a
        // process started by a binary upgrade is that user already).
        let drop_root = move || match &run_as {
            Some(r) => service::drop_privileges(r, &needed),
            None => Ok(()),
        };
        let proxy = Proxy::start_with(config, Arc::new(SystemClock), inherited, drop_root).await?;
        let mut pid = pid_file
            .map(|p| {
                service::PidFile::write(p).map_err(|e| format!("--pid-file {}: {e}", p.display()))
            })
            .transpose()?;
        // Listeners are bound: ready for systemd (`Type=notify`); after an
        // upgrade this process is the service's main one (the unit needs
        // `NotifyAccess=all` for systemd to take that from it).
        if handover.upgrading() {
            service::notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
        } else {
            service::notify("READY=1");
        }
        tracing::info!(pid = std::process::id(), "ready");
        handover.ready();
        let stop = signals.wait(&proxy, config_file, &exe, pid.as_mut()).await;
        tracing::info!(why = stop.as_str(), "shutting down: stop accepting, drain");
        if !matches!(stop, Stop::Upgraded) {
            service::notify("STOPPING=1");
        }
        proxy.shutdown().await;
        drop(pid);
        tracing::info!("stopped");
        Ok(())
    })
}

/// Re-reads the configuration file and applies it (SIGHUP, `POST /reload`).
/// An invalid file is refused with the text `hoard check` prints; the
/// running one stays.
fn reload(proxy: &Proxy, file: Option<&std::path::Path>) -> Result<hoard_server::Reloaded, String> {
    let Some(file) = file else {
        let e = "no configuration file to re-read (started without --config)".to_string();
        tracing::warn!("reload: {e}");
        return Err(e);
    };
    service::notify("RELOADING=1");
    let outcome = match Config::from_file(file) {
        Err(e) => {
            proxy.reload_refused(&e.to_string());
            Err(e.to_string())
        }
        Ok(cfg) => proxy.reload(cfg).map_err(|e| e.to_string()),
    };
    match &outcome {
        Ok(r) => {
            tracing::info!(
                generation = r.generation,
                opened = ?r.opened,
                closed = ?r.closed,
                "configuration reloaded"
            );
            if !r.restart_needed.is_empty() {
                tracing::warn!(keys = ?r.restart_needed, "these settings changed but take effect only after a restart");
            }
        }
        Err(e) => tracing::error!("reload refused, the running configuration stays: {e}"),
    }
    service::notify("READY=1");
    outcome
}

/// Why the process stops; each way drains (see [`Proxy::shutdown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Interrupt,
    Terminate,
    /// `nginx -s quit`'s signal.
    Quit,
    /// A new process took over (SIGUSR2).
    Upgraded,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Interrupt => "SIGINT",
            Stop::Terminate => "SIGTERM",
            Stop::Quit => "SIGQUIT",
            Stop::Upgraded => "upgraded",
        }
    }
}

/// The signals hoard acts on, caught from [`Signals::install`] on.
struct Signals {
    #[cfg(unix)]
    streams: [tokio::signal::unix::Signal; 6],
}

impl Signals {
    /// Installs the handlers; call it before the pid file and readiness
    /// tell anyone to send signals (SIGHUP's default action would end us).
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let install =
                |kind: SignalKind| signal(kind).expect("invariant: signal handler installs");
            Signals {
                streams: [
                    install(SignalKind::interrupt()),
                    install(SignalKind::terminate()),
                    install(SignalKind::quit()),
                    install(SignalKind::hangup()),
                    install(SignalKind::user_defined1()),
                    install(SignalKind::user_defined2()),
                ],
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Waits for SIGINT, SIGTERM or SIGQUIT (each drains), or a binary
    /// upgrade that succeeds (SIGUSR2, see `upgrade`); on SIGHUP (or the
    /// admin API's `POST /reload`) the configuration is reloaded, on
    /// SIGUSR1 the access log reopens its file. A binary upgrade runs to
    /// its end (the new process ready or failed) before the next signal is
    /// looked at.
    async fn wait(
        self,
        proxy: &Proxy,
        config_file: Option<&std::path::Path>,
        exe: &upgrade::Exe,
        mut pid_file: Option<&mut service::PidFile>,
    ) -> Stop {
        #[cfg(unix)]
        {
            let [mut int, mut term, mut quit, mut hup, mut usr1, mut usr2] = self.streams;
            loop {
                tokio::select! {
                    _ = int.recv() => return Stop::Interrupt,
                    _ = term.recv() => return Stop::Terminate,
                    _ = quit.recv() => return Stop::Quit,
                    _ = hup.recv() => {
                        let _ = reload(proxy, config_file);
                    }
                    ask = proxy.reload_asked() => ask.respond(reload(proxy, config_file)),
                    _ = usr1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access log");
                        proxy.reopen_logs();
                    }
                    _ = usr2.recv() => {
                        tracing::info!("SIGUSR2: binary upgrade");
                        match upgrade::start(exe, proxy, pid_file.as_deref_mut()).await {
                            Ok(pid) => {
                                tracing::info!(new_pid = pid, "upgrade: the new process is ready");
                                return Stop::Upgraded;
                            }
                            Err(e) => tracing::error!("upgrade failed, this process serves on: {e}"),
                        }
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (proxy, config_file, exe, pid_file);
            let _ = tokio::signal::ctrl_c().await;
            Stop::Interrupt
        }
    }
}
