//! The `hoard` binary: command line, logging, runtime, signals.

mod cli;

use std::process::ExitCode;
use std::sync::Arc;

use hoard_proxy::{Config, Proxy, SystemClock};

fn main() -> ExitCode {
    let cli = cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOARD_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_target(false)
        // Colours only on a terminal: logs piped to a file stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match cli.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hoard: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_only() {
        println!("configuration is valid");
        return ExitCode::SUCCESS;
    }
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hoard: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if config.server.threads > 0 {
        rt.worker_threads(config.server.threads);
    }
    let rt = rt.build()?;
    rt.block_on(async move {
        let proxy = Proxy::start(config, Arc::new(SystemClock)).await?;
        wait_for_signal().await;
        tracing::info!("shutting down");
        proxy.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term =
            signal(SignalKind::terminate()).expect("invariant: SIGTERM handler installs");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
