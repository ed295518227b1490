//! The `hoard` binary: command line, logging, runtime, signals.

mod cli;
mod service;

/// mimalloc: threads free each other's allocations without taking a lock
/// (a purge dropping 100k objects on a blocking thread must not stall the
/// serving threads' allocations, as glibc's arena locks do), and small
/// allocations are faster.
#[cfg(not(feature = "count-allocs"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "count-allocs")]
mod alloc_count;
#[cfg(feature = "count-allocs")]
#[global_allocator]
static GLOBAL: alloc_count::Counting = alloc_count::Counting;

use std::process::ExitCode;
use std::sync::Arc;

use hoard_proxy::{Config, Proxy, SystemClock};

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
    if let Some(pid_file) = cli.reload() {
        return match service::send_reload(pid_file) {
            Ok(pid) => {
                println!(
                    "reload requested (process {pid}); the outcome is logged and shown in /status"
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hoard: reload: {e}");
                ExitCode::FAILURE
            }
        };
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

fn purge(p: &cli::PurgeArgs) -> ExitCode {
    let token = match &p.token_file {
        Some(f) => match hoard_proxy::config::ops::read_token(&f.display().to_string()) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("hoard: --token-file: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hoard: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(hoard_proxy::admin::client::purge(
        &p.admin,
        token.as_deref(),
        &p.request(),
    ));
    match result {
        Ok(answer) => {
            println!("{}", answer.purged);
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

fn run(
    config: Config,
    pid_file: Option<&std::path::Path>,
    config_file: Option<&std::path::Path>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if config.server.threads > 0 {
        rt.worker_threads(config.server.threads);
    }
    let rt = rt.build()?;
    rt.block_on(async move {
        let run_as = config.server.run_as.clone();
        let needed = hoard_proxy::privileges::needs(&config);
        // Bound and opened as root: serve as `server.user` from here on.
        let drop = move || match &run_as {
            Some(r) => service::drop_privileges(r, &needed),
            None => Ok(()),
        };
        let proxy = Proxy::start_with(config, Arc::new(SystemClock), drop).await?;
        let signals = wait_for_signal(&proxy, config_file);
        let _pid = pid_file
            .map(|p| {
                service::PidFile::write(p).map_err(|e| format!("--pid-file {}: {e}", p.display()))
            })
            .transpose()?;
        // Listeners are bound: ready for systemd (`Type=notify`).
        service::notify("READY=1");
        tracing::info!(pid = std::process::id(), "ready");
        signals.await;
        tracing::info!("shutting down");
        service::notify("STOPPING=1");
        proxy.shutdown().await;
        Ok(())
    })
}

/// Re-reads the configuration file and applies it (SIGHUP, `POST /reload`).
/// An invalid file is refused with the text `hoard check` prints; the
/// running one stays.
fn reload(proxy: &Proxy, file: Option<&std::path::Path>) -> Result<hoard_proxy::Reloaded, String> {
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

/// Waits for SIGINT or SIGTERM; on SIGHUP (or the admin API's `POST
/// /reload`) the configuration is reloaded, on SIGUSR1 the access log
/// reopens its file.
fn wait_for_signal<'a>(
    proxy: &'a Proxy,
    config_file: Option<&'a std::path::Path>,
) -> impl std::future::Future<Output = ()> + 'a {
    // The handlers are installed now, before the pid file and readiness
    // tell anyone to send signals (SIGHUP's default action would end us).
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let install = |kind: SignalKind| signal(kind).expect("invariant: signal handler installs");
        let mut int = install(SignalKind::interrupt());
        let mut term = install(SignalKind::terminate());
        let mut usr1 = install(SignalKind::user_defined1());
        let mut hup = install(SignalKind::hangup());
        async move {
            loop {
                tokio::select! {
                    _ = int.recv() => return,
                    _ = term.recv() => return,
                    _ = hup.recv() => {
                        let _ = reload(proxy, config_file);
                    }
                    ask = proxy.reload_asked() => ask.respond(reload(proxy, config_file)),
                    _ = usr1.recv() => {
                        tracing::info!("SIGUSR1: reopening the access log");
                        proxy.reopen_logs();
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (proxy, config_file);
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
