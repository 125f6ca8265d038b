//! `bulwark`: the command-line entry point. It parses arguments and configuration, sets
//! up logging, and calls each role's `start(config, shutdown)`; nothing else lives here.

mod cli_config;
mod local;
mod local_security;
mod probe;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// mimalloc instead of glibc's malloc: routers and shards allocate and free buffers per
/// message on many threads, and with 100 KiB insert batches glibc's malloc and free
/// (chunk consolidation included) took about a fifth of the CPU in `perf` on
/// `crud-bench`. mongod links tcmalloc for the same reason.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "bulwark",
    version,
    about = "A MongoDB-compatible distributed database"
)]
struct Cli {
    /// Log format: human-readable text or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    role: Role,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Role {
    /// A local cluster in one process: a router and a shard node.
    Local(Box<local::LocalArgs>),
    /// A router (mongos): clients connect here.
    Router(RoleArgs),
    /// A shard node: stores data in WiredTiger and serves routers over gRPC.
    Shard(RoleArgs),
    /// A config server member (a shard config whose replica set is named `config`).
    Configsvr(RoleArgs),
    /// Run a chaos scenario: a workload, a fault and checkers; writes a JSON report and a
    /// timeline plot, and exits non-zero when a checker fails.
    Chaos(chaos::run::ChaosArgs),
    /// Whether a member takes a call made with the given credentials (exit 0) or refuses
    /// it (exit 1): checks that a member refuses callers outside its cluster.
    Probe(probe::ProbeArgs),
}

#[derive(clap::Args)]
struct RoleArgs {
    /// TOML configuration file; `BULWARK_*` environment variables override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the default configuration as TOML and exit.
    #[arg(long)]
    print_default_config: bool,
}

fn init_tracing(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Every event is also kept for `getLog`.
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(router::log_buffer::Recorder);
    // Colour only for a person at a terminal: escape codes make a log file unreadable.
    let text = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => registry.with(text).init(),
        LogFormat::Json => registry.with(text.json()).init(),
    }
}

/// Cancels the token on Ctrl-C or SIGTERM so every role shuts down cleanly.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        t.cancel();
    });
    token
}

/// A failure to start (a bad config key, an address in use) is one line a person can act
/// on, with its causes, not a debug dump with a stack trace.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bulwark: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Role::Router(a) | Role::Shard(a) | Role::Configsvr(a) = &cli.role {
        if a.print_default_config {
            let text = match &cli.role {
                Role::Router(_) => toml::to_string_pretty(&router::RouterConfig::default())?,
                _ => toml::to_string_pretty(&shard::ShardConfig::default())?,
            };
            print!("{text}");
            return Ok(());
        }
    }
    init_tracing(cli.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = shutdown_on_signal();
        match cli.role {
            Role::Local(args) => local::run(*args, shutdown).await,
            Role::Chaos(args) => {
                // The cluster's processes are this same binary in other roles.
                let bin = std::env::current_exe().context("locating the bulwark binary")?;
                if chaos::run::run(args, &bin).await? {
                    Ok(())
                } else {
                    anyhow::bail!("a checker failed (see the report)")
                }
            }
            Role::Probe(args) => {
                if probe::run(args).await? {
                    Ok(())
                } else {
                    std::process::exit(1)
                }
            }
            Role::Router(a) => {
                let config: router::RouterConfig = cli_config::load(a.config.as_deref())?;
                config
                    .validate()
                    .map_err(anyhow::Error::msg)
                    .context("invalid router config")?;
                router::start(config, shutdown)
                    .await
                    .context("router failed")
            }
            Role::Shard(a) => {
                let config: shard::ShardConfig = cli_config::load(a.config.as_deref())?;
                config
                    .validate()
                    .map_err(anyhow::Error::msg)
                    .context("invalid shard config")?;
                shard::start(config, shutdown).await.context("shard failed")
            }
            Role::Configsvr(a) => {
                let config: shard::ShardConfig = cli_config::load(a.config.as_deref())?;
                configsvr::start(config, shutdown)
                    .await
                    .map_err(anyhow::Error::msg)
                    .context("config server failed")
            }
        }
    })
}
