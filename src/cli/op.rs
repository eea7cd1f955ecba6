//! `steward op ...` (submit, get, list, abort, watch lifecycle operations) and `steward worker
//! list`. Output is rendered by op_render.rs; this file parses arguments and talks to the
//! cluster.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::op_render;
use super::render::{self, OutputFormat};
use super::GlobalOpts;
use crate::client::{is_retryable_read, Consistency, OpListOptions, OperationState, SubmitOptions};

/// Pause before re-opening an operation watch that ended.
const RESUME_PAUSE: Duration = Duration::from_millis(200);

#[derive(Debug, clap::Subcommand)]
pub enum OpCommand {
    /// Queue an operation on a resource; prints it with its id.
    Submit(SubmitArgs),
    /// Show one operation and its transitions.
    Get(GetOpArgs),
    /// List operations in submit order.
    List(ListOpsArgs),
    /// Abort an operation (a queued one ends at once; a running one once its worker stops).
    Abort(AbortArgs),
    /// Print operation changes as they happen.
    Watch(WatchOpsArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum WorkerCommand {
    /// List registered workers.
    List(ListWorkersArgs),
    /// Run a worker: PROGRAM runs once per assignment (operation JSON on stdin).
    Run(super::worker_run::WorkerRunArgs),
}

/// `KIND/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetArg {
    pub kind: String,
    pub name: String,
}

pub fn parse_target(text: &str) -> Result<TargetArg, String> {
    match text.split_once('/') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(TargetArg {
                kind: kind.to_string(),
                name: name.to_string(),
            })
        }
        _ => Err(format!("{text:?} is not KIND/NAME (e.g. Director/d1)")),
    }
}

/// `--state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    Queued,
    Dispatched,
    InProgress,
    Aborting,
    Succeeded,
    Failed,
    Aborted,
}

impl From<StateArg> for OperationState {
    fn from(s: StateArg) -> OperationState {
        match s {
            StateArg::Queued => OperationState::Queued,
            StateArg::Dispatched => OperationState::Dispatched,
            StateArg::InProgress => OperationState::InProgress,
            StateArg::Aborting => OperationState::Aborting,
            StateArg::Succeeded => OperationState::Succeeded,
            StateArg::Failed => OperationState::Failed,
            StateArg::Aborted => OperationState::Aborted,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// What to do: create, update, delete, bind, backup, ...
    pub verb: String,
    /// The target resource, KIND/NAME.
    #[arg(value_parser = parse_target)]
    pub target: TargetArg,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Parameters for the worker, a JSON object.
    #[arg(long, value_parser = parse_json)]
    pub params: Option<Value>,
    /// A repeated submit with this key prints the first operation instead of queuing another.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Create the target in the same step from this object JSON (it must not exist yet).
    #[arg(long, value_parser = parse_json)]
    pub create: Option<Value>,
    /// Attempts before the operation fails (default: the server's operations.attempts_default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,
    /// Fail or abort the operation this long after submit (default: operations.deadline_ms_default).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub deadline: Option<Duration>,
    /// Take this resource's lock, KIND/NAME in the same namespace, instead of the target's
    /// (a backup locks its deployment).
    #[arg(long, value_parser = parse_target)]
    pub lock: Option<TargetArg>,
}

#[derive(Debug, clap::Args)]
pub struct GetOpArgs {
    /// The operation's id, op-<number>.
    pub id: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListOpsArgs {
    #[arg(long, value_enum)]
    pub state: Option<StateArg>,
    /// Only operations on this resource, KIND/NAME.
    #[arg(long, value_parser = parse_target)]
    pub target: Option<TargetArg>,
    /// The namespace of --target.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Only operations assigned to (or ended under) this worker.
    #[arg(long)]
    pub worker: Option<String>,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct AbortArgs {
    /// The operation's id, op-<number>.
    pub id: String,
}

#[derive(Debug, clap::Args)]
pub struct WatchOpsArgs {
    /// Only operations on this resource, KIND/NAME.
    #[arg(long, value_parser = parse_target)]
    pub target: Option<TargetArg>,
    /// The namespace of --target.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Only operations of this worker.
    #[arg(long)]
    pub worker: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ListWorkersArgs {
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

pub fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

fn consistency(serializable: bool) -> Consistency {
    if serializable {
        Consistency::Serializable
    } else {
        Consistency::Linearizable
    }
}

fn filter(target: &Option<TargetArg>, namespace: &str, worker: &Option<String>) -> OpListOptions {
    OpListOptions {
        target: target
            .as_ref()
            .map(|t| (t.kind.clone(), namespace.to_string(), t.name.clone())),
        worker: worker.clone(),
        ..OpListOptions::default()
    }
}

fn print_op(op: &crate::client::OperationInfo, format: OutputFormat) -> anyhow::Result<String> {
    match format {
        OutputFormat::Table => Ok(op_render::ops_table(std::slice::from_ref(op), 0).render()),
        format => render::structured(&op_render::op_json(op), format),
    }
}

/// `steward op ...`.
pub async fn run(cmd: OpCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let text = match cmd {
        OpCommand::Submit(args) => {
            let opts = SubmitOptions {
                params: args.params,
                idempotency_key: args.idempotency_key,
                create: args.create,
                max_attempts: args.max_attempts,
                deadline: args.deadline,
                lock: args.lock.map(|l| (l.kind, l.name)),
            };
            let reply = client
                .op_submit(
                    &args.target.kind,
                    &args.namespace,
                    &args.target.name,
                    &args.verb,
                    &opts,
                )
                .await?;
            let op = reply
                .operation
                .ok_or_else(|| anyhow::anyhow!("the server answered without the operation"))?;
            if !reply.created {
                eprintln!("{} already submitted with this idempotency key", op.id);
            }
            print_op(&op, global.output)?
        }
        OpCommand::Get(args) => {
            let op = client
                .op_get(&args.id, consistency(args.serializable))
                .await?;
            match global.output {
                OutputFormat::Table => op_render::op_text(&op),
                format => render::structured(&op_render::op_json(&op), format)?,
            }
        }
        OpCommand::List(args) => {
            let mut opts = filter(&args.target, &args.namespace, &args.worker);
            opts.state = args.state.map(OperationState::from);
            opts.consistency = consistency(args.serializable);
            let mut all = client.op_list(&opts).await?;
            while !all.continue_token.is_empty() {
                opts.continue_token = std::mem::take(&mut all.continue_token);
                let page = client.op_list(&opts).await?;
                all.operations.extend(page.operations);
                all.continue_token = page.continue_token;
                all.now_ms = page.now_ms;
            }
            match global.output {
                OutputFormat::Table if all.operations.is_empty() => {
                    eprintln!("No operations found");
                    String::new()
                }
                OutputFormat::Table => op_render::ops_table(&all.operations, all.now_ms).render(),
                format => render::structured(&op_render::ops_json(&all), format)?,
            }
        }
        OpCommand::Abort(args) => print_op(&client.op_abort(&args.id).await?, global.output)?,
        OpCommand::Watch(args) => return watch(&args, global).await,
    };
    print!("{text}");
    Ok(())
}

/// `steward worker ...`.
pub async fn run_worker(cmd: WorkerCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let args = match cmd {
        WorkerCommand::List(args) => args,
        WorkerCommand::Run(args) => return super::worker_run::run(args, global).await,
    };
    let client = global.client()?;
    let reply = client.worker_list(consistency(args.serializable)).await?;
    let text = match global.output {
        OutputFormat::Table if reply.workers.is_empty() => {
            eprintln!("No workers registered");
            String::new()
        }
        OutputFormat::Table => op_render::workers_table(&reply).render(),
        format => render::structured(&op_render::workers_json(&reply), format)?,
    };
    print!("{text}");
    Ok(())
}

/// `steward op watch`: prints changes until Ctrl-C. Like lock watches, operation watches carry
/// no revision: when the serving node goes away the watch re-opens on another node and says on
/// stderr that changes in between were not seen (`op list` shows where everything stands).
async fn watch(args: &WatchOpsArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let opts = filter(&args.target, &args.namespace, &args.worker);
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let mut stream = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            stream = client.op_watch(&opts) => stream?,
        };
        loop {
            let item = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                item = stream.next() => item,
            };
            match item {
                Some(Ok(op)) => print!(
                    "{}",
                    match global.output {
                        OutputFormat::Table => op_render::event_line(&op),
                        OutputFormat::Json => format!("{}\n", op_render::op_json(&op)),
                        OutputFormat::Yaml =>
                            format!("---\n{}", render::to_yaml(&op_render::op_json(&op))?),
                    }
                ),
                Some(Err(status)) if is_retryable_read(&status) => {
                    tracing::warn!(error = %super::describe_status(&status), "operation watch interrupted; resuming, changes until then are not shown");
                    break;
                }
                Some(Err(status)) => return Err(status.into()),
                None => {
                    tracing::warn!("operation watch ended by the server; resuming, changes until then are not shown");
                    break;
                }
            }
        }
        tokio::time::sleep(RESUME_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn targets_are_kind_slash_name() {
        assert_eq!(
            parse_target("Director/d1"),
            Ok(TargetArg {
                kind: "Director".into(),
                name: "d1".into()
            })
        );
        for bad in ["Director", "/d1", "Director/", "a/b/c", ""] {
            assert!(parse_target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn op_and_worker_commands_parse() {
        let cli = Cli::try_parse_from([
            "steward",
            "op",
            "submit",
            "create",
            "Director/d1",
            "--params",
            r#"{"plan":"small"}"#,
            "--idempotency-key",
            "k1",
            "--deadline",
            "10m",
        ])
        .expect("submit");
        let Command::Op(OpCommand::Submit(args)) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(
            (args.verb.as_str(), args.target.name.as_str()),
            ("create", "d1")
        );
        assert_eq!(args.deadline, Some(Duration::from_secs(600)));
        let cli = Cli::try_parse_from([
            "steward",
            "op",
            "list",
            "--state",
            "in-progress",
            "--target",
            "Director/d1",
        ])
        .expect("list");
        let Command::Op(OpCommand::List(args)) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(args.state, Some(StateArg::InProgress));
        assert!(Cli::try_parse_from(["steward", "worker", "list"]).is_ok());
        let cli = Cli::try_parse_from([
            "steward",
            "worker",
            "run",
            "--id",
            "w1",
            "--handles",
            "Director:create,Director:delete",
            "--exec",
            "/bin/true",
        ])
        .expect("worker run");
        let Command::Worker(WorkerCommand::Run(args)) = cli.command else {
            panic!("{:?}", cli.command)
        };
        assert_eq!(args.handles, ["Director:create", "Director:delete"]);
        assert_eq!((args.capacity, args.ttl), (1, Duration::from_secs(10)));
        for bad in [
            &["steward", "op", "submit", "create", "d1"][..],
            &[
                "steward",
                "op",
                "submit",
                "create",
                "Director/d1",
                "--params",
                "{",
            ],
            &["steward", "op", "list", "--state", "running"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
