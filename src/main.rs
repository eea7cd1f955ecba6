//! The `steward` binary: parse the command line, start tracing, run the command, and turn an
//! error into one line on stderr (`error: <Code>: <message>`) and exit code 1. Usage errors are
//! clap's (exit code 2). Everything else lives in `steward::cli`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use steward::cli::{self, Cli};

/// jemalloc rather than glibc's malloc: a create costs ~8% less CPU over a 3-node cluster
/// (`target/release/steward-bench create --clients 64`: 187 vs 205 us of server CPU per write),
/// allocation being a tenth of a write's cost. Peak RSS was ~6% higher (mostly live objects
/// either way; jemalloc's decay settings made no difference).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.default_log_filter());
    match cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", cli::describe_error(&err));
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr, filtered by RUST_LOG, else by the command's default level.
fn init_tracing(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
