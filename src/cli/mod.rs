//! The `steward` command line: clap definitions, dispatch to one module per command group, and
//! the one-line error report. Called only by src/main.rs.
//!
//! - `serve`, `dev`: run nodes (serve.rs, dev.rs; dev writes configs with node_config.rs)
//! - `apply`, `get`, `delete`, `watch`: resources (apply.rs, resource.rs, watch.rs); writes take
//!   `--fence NAME:TOKEN` (fence.rs)
//! - `count KIND --by label:KEY|status:PATH`: objects per value (count.rs)
//! - `lock ...`: locks (lock.rs, printed by lock_render.rs)
//! - `op ...`, `worker list`: lifecycle operations and workers (op.rs, printed by op_render.rs);
//!   `worker run`: a worker that runs a program per assignment (worker_run.rs)
//! - `reservation counters`: what reservations hold per node (reservation.rs)
//! - `pool ...`: leased resource pools, Boskos' API and config (pool.rs)
//! - `status`, `deployment ...`: deployed applications' status and its reports (deployment.rs)
//! - `member ...`, `cluster status|health`: membership and health (member.rs)
//! - `certs create`: a CA and certificates for a cluster's nodes and clients (certs.rs)
//! - `auth ...`, `user ...`: authentication on and off, users and roles (auth.rs)
//! - `alarm list|disarm`, `compact`: the NOSPACE alarm and winning disk space back (alarm.rs)
//! - render.rs: tables, JSON and YAML output shared by all of them.

mod alarm;
mod apply;
mod auth;
mod certs;
mod count;
mod deployment;
mod dev;
mod fence;
mod lock;
mod lock_render;
mod member;
pub mod node_config;
mod op;
mod op_render;
mod pool;
mod render;
mod reservation;
mod resource;
mod serve;
mod snapshot;
mod watch;
mod worker_run;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::client::{split_endpoints, Client};
use crate::tls::ClientTls;

pub use render::OutputFormat;

/// The default endpoints: the loopback cluster of `steward dev` and cluster-configs/3-node.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

/// steward: a Raft-replicated coordinator for control planes.
#[derive(Debug, Parser)]
#[command(name = "steward", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts.
#[derive(Debug, clap::Args)]
pub struct GlobalOpts {
    /// Comma-separated client endpoints (host:port); any node serves any request.
    #[arg(long, global = true, env = "STEWARD_ENDPOINTS", default_value = DEFAULT_ENDPOINTS)]
    pub endpoints: String,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Deadline of one request, retries included (e.g. 10s, 500ms).
    #[arg(long, global = true, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// CA certificate (PEM) that signed the nodes' certificates: talk TLS to the endpoints.
    #[arg(long, global = true, env = "STEWARD_CACERT")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, global = true, env = "STEWARD_CERT", requires = "cacert")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true, env = "STEWARD_KEY", requires = "cacert")]
    pub key: Option<PathBuf>,
    /// Bearer token of your user (from `steward user add` or `steward user token`).
    #[arg(long, global = true, env = "STEWARD_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one node.
    Serve(serve::ServeArgs),
    /// Run a local cluster (one process per node) until Ctrl-C.
    Dev(dev::DevArgs),
    /// Certificates for a cluster: a CA, one per node, one per client.
    #[command(subcommand, alias = "cert")]
    Certs(certs::CertsCommand),
    /// Create or update objects from a JSON or YAML file.
    Apply(apply::ApplyArgs),
    /// Show one object or list objects of a kind.
    Get(resource::GetArgs),
    /// Delete one object.
    Delete(resource::DeleteArgs),
    /// Print changes to objects of a kind as they happen.
    Watch(watch::WatchArgs),
    /// Count objects of a kind by a label's or a status field's value.
    Count(count::CountArgs),
    /// Replicated READ/WRITE locks with TTLs, fair waiting and fencing tokens.
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Lifecycle operations on resources, run by registered workers.
    #[command(subcommand)]
    Op(op::OpCommand),
    /// Workers that run operations.
    #[command(subcommand)]
    Worker(op::WorkerCommand),
    /// What reservations hold on each node (reservations are resources with a `reservation`).
    #[command(subcommand, alias = "reservations")]
    Reservation(reservation::ReservationCommand),
    /// Leased resource pools (Boskos): acquire, update, release, list, metrics, sync.
    #[command(subcommand, alias = "pools")]
    Pool(pool::PoolCommand),
    /// Where a deployment stands: states, rsync/cluster/readiness counts, its resources.
    Status(deployment::StatusArgs),
    /// Deployments (EMCO deployment intent groups): life cycle and status reports.
    #[command(subcommand, alias = "deployments")]
    Deployment(deployment::DeploymentCommand),
    /// Cluster membership.
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// Cluster state.
    #[command(subcommand)]
    Cluster(member::ClusterCommand),
    /// Backups of the whole state: save from a cluster, restore into new data dirs, check.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Authentication: on, off, and who you are.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// Users and their roles (admin, read-only, read-write:NAMESPACE, worker).
    #[command(subcommand, alias = "users")]
    User(auth::UserCommand),
    /// Alarms nodes raised (NOSPACE: a data dir over limits.quota_bytes), and disarming them.
    #[command(subcommand, alias = "alarms")]
    Alarm(alarm::AlarmCommand),
    /// Snapshot, purge the Raft log and compact the database on every node (or --node), to give
    /// disk space back after deletes (admin).
    Compact(alarm::CompactArgs),
}

impl Cli {
    /// The tracing filter to use when RUST_LOG is not set: nodes log their life, client commands
    /// only trouble.
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Serve(_) | Command::Dev(_) => "info",
            Command::Worker(op::WorkerCommand::Run(_)) => "info",
            _ => "warn",
        }
    }
}

impl GlobalOpts {
    /// A client of `--endpoints` with `--timeout` per request.
    pub fn client(&self) -> anyhow::Result<Client> {
        let endpoints = split_endpoints(&self.endpoints);
        if endpoints.is_empty() {
            anyhow::bail!("--endpoints is empty");
        }
        Client::connect_with(&endpoints, self.timeout, self.tls()?.as_ref())?
            .with_token(self.auth_token.as_deref())
    }

    /// The TLS `--cacert`, `--cert` and `--key` ask for; None for plaintext.
    pub fn tls(&self) -> anyhow::Result<Option<ClientTls>> {
        match &self.cacert {
            None => Ok(None),
            Some(ca) => Ok(Some(ClientTls::from_files(
                ca,
                self.cert.as_deref(),
                self.key.as_deref(),
            )?)),
        }
    }
}

/// Runs the command. Errors are reported by the caller with `describe_error`.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let global = &cli.global;
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Dev(args) => dev::run(args, global).await,
        Command::Certs(cmd) => certs::run(cmd, global),
        Command::Apply(args) => apply::run(args, global).await,
        Command::Get(args) => resource::get(args, global).await,
        Command::Delete(args) => resource::delete(args, global).await,
        Command::Watch(args) => watch::run(args, global).await,
        Command::Count(args) => count::run(args, global).await,
        Command::Lock(cmd) => lock::run(cmd, global).await,
        Command::Op(cmd) => op::run(cmd, global).await,
        Command::Worker(cmd) => op::run_worker(cmd, global).await,
        Command::Reservation(cmd) => reservation::run(cmd, global).await,
        Command::Pool(cmd) => pool::run(cmd, global).await,
        Command::Status(args) => deployment::status(args, global).await,
        Command::Deployment(cmd) => deployment::run(cmd, global).await,
        Command::Member(cmd) => member::run_member(cmd, global).await,
        Command::Cluster(cmd) => member::run_cluster(cmd, global).await,
        Command::Snapshot(cmd) => snapshot::run(cmd, global).await,
        Command::Auth(cmd) => auth::run_auth(cmd, global).await,
        Command::User(cmd) => auth::run_user(cmd, global).await,
        Command::Alarm(cmd) => alarm::run_alarm(cmd, global).await,
        Command::Compact(args) => alarm::run_compact(args, global).await,
    }
}

/// Resolves on the first Ctrl-C (SIGINT) or SIGTERM. If a handler cannot be installed, that
/// signal keeps its default action (the process ends), so waiting forever is right.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

/// The error as one line: `<Code>: <message>` for a gRPC status (`NotFound: Director/default/x
/// not found`), the plain message chain otherwise.
pub fn describe_error(err: &anyhow::Error) -> String {
    if let Some(status) = err.chain().find_map(|e| e.downcast_ref::<tonic::Status>()) {
        let context: Vec<String> = err
            .chain()
            .take_while(|e| e.downcast_ref::<tonic::Status>().is_none())
            .map(|e| e.to_string())
            .collect();
        let line = describe_status(status);
        return if context.is_empty() {
            line
        } else {
            format!("{}: {line}", context.join(": "))
        };
    }
    // An error that shows its source in its own message (thiserror's `{source}`) is followed
    // in the chain by that source: say it once.
    let mut parts: Vec<String> = Vec::new();
    for text in err.chain().map(|e| e.to_string()) {
        if !parts.last().is_some_and(|prev| prev.ends_with(&text)) {
            parts.push(text);
        }
    }
    one_line(&parts.join(": "))
}

/// `<Code>: <message>`, with the code as its gRPC name.
pub fn describe_status(status: &tonic::Status) -> String {
    let mut message = if status.message().is_empty() {
        status.code().description().to_string()
    } else {
        one_line(status.message())
    };
    // A transport failure says little itself ("transport error"); its causes say what failed
    // (a refused connection, a TLS alert).
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let text = one_line(&cause.to_string());
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = cause.source();
    }
    if let Some(hint) = tls_hint(&message) {
        message = format!("{message} ({hint})");
    }
    format!("{:?}: {message}", status.code())
}

/// What to do about a failure that looks like a TLS mismatch between client and server.
fn tls_hint(message: &str) -> Option<&'static str> {
    if message.contains("CertificateRequired") {
        Some("the server requires a client certificate: pass --cert and --key")
    } else if message.contains("UnknownIssuer") || message.contains("BadCertificate") {
        Some(
            "the certificate is not signed by the CA the other side trusts: check --cacert, --cert",
        )
    } else if message.contains("InvalidContentType") {
        Some("client and server disagree on TLS: a TLS server needs --cacert, a plaintext one none")
    } else if ["h2 protocol error", "broken pipe", "connection reset"]
        .iter()
        .any(|m| message.contains(m))
    {
        Some("the node closed the connection: if it serves TLS, pass --cacert, and --cert and --key when it requires client certificates")
    } else {
        None
    }
}

/// Folds newlines so an error stays on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_errors_read_code_then_message() {
        let err = anyhow::Error::new(tonic::Status::not_found("Director/default/x not found"));
        assert_eq!(
            describe_error(&err),
            "NotFound: Director/default/x not found"
        );
        let err =
            anyhow::Error::new(tonic::Status::aborted("stale\nrevision")).context("Director/a");
        assert_eq!(describe_error(&err), "Director/a: Aborted: stale revision");
    }

    #[test]
    fn plain_errors_keep_their_chain() {
        let err = anyhow::anyhow!("no such file").context("cannot read x.yaml");
        assert_eq!(describe_error(&err), "cannot read x.yaml: no such file");
    }

    #[test]
    fn a_source_the_message_already_shows_is_said_once() {
        let err = anyhow::Error::new(crate::config::ConfigError::Read {
            path: "/nonexistent".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
        assert_eq!(
            describe_error(&err),
            "cannot read config /nonexistent: no such file"
        );
    }

    #[test]
    fn the_command_line_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "steward",
            "get",
            "Director",
            "-n",
            "prod",
            "-o",
            "json",
            "--timeout",
            "2s",
        ])
        .expect("parse");
        assert_eq!(cli.global.output, OutputFormat::Json);
        assert_eq!(cli.global.timeout, Duration::from_secs(2));
        assert_eq!(cli.default_log_filter(), "warn");
    }
}
