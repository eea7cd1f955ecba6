//! `steward worker run`: a real worker. It registers, heartbeats within its TTL, streams its
//! assignments (from any node, re-opening the stream elsewhere when a node goes away), and runs
//! PROGRAM once per assignment with the operation JSON on stdin and the id, verb and target in
//! `STEWARD_OPERATION_ID`, `STEWARD_OPERATION_VERB`, `STEWARD_TARGET_KIND`,
//! `STEWARD_TARGET_NAMESPACE` and `STEWARD_TARGET_NAME` (so a shell script can route without a
//! JSON parser): exit code 0 is success (JSON on stdout becomes the response; other text becomes
//! `{"output": text}`), anything else a failure (stderr, or the exit status, becomes the error).
//!
//! PROGRAM runs in a process group of its own, so stopping it stops what it started too (a
//! shell script's `sleep`, a backup tool). An abort request sends the group SIGTERM, gives it
//! `ABORT_GRACE` to clean up (the operation shows `aborting` meanwhile), then SIGKILL, and
//! reports Aborted. A report refused with Aborted means the assignment was lost: the worker
//! drops it. Ctrl-C deregisters the worker (its running operations go back to the queue) and
//! kills the groups of the programs still running.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tonic::Code;

use super::op_render;
use super::GlobalOpts;
use crate::client::{reason, AssignmentKind, Client, ErrorReason, OpReport, OperationInfo};

/// Pause before re-opening an assignment stream or retrying a call that found no leader.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long an aborted PROGRAM has between SIGTERM and SIGKILL.
const ABORT_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct WorkerRunArgs {
    /// This worker's id, e.g. bosh-manager@10.0.2.2.
    #[arg(long)]
    pub id: String,
    /// The Kind:verb pairs it handles, comma-separated (Director:create,Director:delete).
    #[arg(long, value_delimiter = ',', required = true)]
    pub handles: Vec<String>,
    /// The program run for each assignment (operation JSON on stdin).
    #[arg(long)]
    pub exec: PathBuf,
    /// Most operations run at once.
    #[arg(long, default_value_t = 1)]
    pub capacity: u32,
    /// The worker is presumed dead this long after its last heartbeat (heartbeats every third).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

/// Abort senders of the operations running now, by id.
type Running = Arc<Mutex<BTreeMap<String, oneshot::Sender<()>>>>;

struct Worker {
    client: Client,
    args: WorkerRunArgs,
    running: Running,
}

/// `steward worker run`.
pub async fn run(args: WorkerRunArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let worker = Arc::new(Worker {
        client: global.client()?,
        args,
        running: Arc::default(),
    });
    worker.register().await?;
    tracing::info!(worker = %worker.args.id, "registered");
    let heartbeats = tokio::spawn(worker.clone().heartbeat());
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    tokio::select! {
        _ = &mut shutdown => {}
        result = worker.clone().assignments() => result?,
    }
    heartbeats.abort();
    worker.client.worker_deregister(&worker.args.id).await?;
    eprintln!("worker {} deregistered", worker.args.id);
    Ok(())
}

impl Worker {
    async fn register(&self) -> anyhow::Result<()> {
        let handles: Vec<&str> = self.args.handles.iter().map(String::as_str).collect();
        loop {
            match self
                .client
                .worker_register(&self.args.id, &handles, self.args.capacity, self.args.ttl)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.code() == Code::Unavailable => tokio::time::sleep(RETRY_PAUSE).await,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Heartbeats every third of the TTL; registers again if the worker was removed.
    async fn heartbeat(self: Arc<Self>) {
        let every = (self.args.ttl / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            match self.client.worker_heartbeat(&self.args.id).await {
                Err(e) if reason(&e) == Some(ErrorReason::NotFound) => {
                    tracing::warn!("this worker was removed; registering again");
                    if let Err(e) = self.register().await {
                        tracing::warn!(error = %e, "register");
                    }
                }
                Err(e) => tracing::warn!(error = %super::describe_status(&e), "heartbeat"),
                Ok(_) => {}
            }
        }
    }

    /// Runs assignments until an error that retrying cannot fix.
    async fn assignments(self: Arc<Self>) -> anyhow::Result<()> {
        loop {
            let mut stream = match self.client.worker_assignments(&self.args.id).await {
                Ok(s) => s,
                Err(e) if reason(&e) == Some(ErrorReason::NotFound) => {
                    self.register().await?;
                    continue;
                }
                Err(e) if e.code() == Code::Unavailable => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            while let Some(item) = stream.next().await {
                match item {
                    Ok(a) => {
                        let Some(op) = a.operation else { continue };
                        match AssignmentKind::try_from(a.kind) {
                            Ok(AssignmentKind::Run) => self.start(op),
                            Ok(AssignmentKind::Abort) => self.abort(op),
                            Ok(AssignmentKind::Unspecified) | Err(_) => {
                                tracing::warn!(kind = a.kind, "unknown assignment kind")
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %super::describe_status(&e), "assignment stream ended; re-opening");
                        break;
                    }
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Starts PROGRAM for `op` unless it already runs (a re-opened stream repeats assignments).
    fn start(self: &Arc<Self>, op: OperationInfo) {
        let (abort_tx, abort_rx) = oneshot::channel();
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            if running.contains_key(&op.id) {
                return;
            }
            running.insert(op.id.clone(), abort_tx);
        }
        let worker = self.clone();
        tokio::spawn(async move {
            let report = worker.execute(&op, abort_rx).await;
            worker.report(&op, report).await;
            worker
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&op.id);
        });
    }

    /// Kills PROGRAM for `op`, or confirms at once when it does not run here.
    fn abort(self: &Arc<Self>, op: OperationInfo) {
        let sender = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&op.id);
        match sender {
            Some(tx) => {
                let _ = tx.send(());
            }
            None => {
                let worker = self.clone();
                tokio::spawn(async move { worker.report(&op, OpReport::Aborted).await });
            }
        }
    }

    /// Reports Started, runs PROGRAM, and says what to report at the end.
    async fn execute(&self, op: &OperationInfo, abort: oneshot::Receiver<()>) -> OpReport {
        self.report(op, OpReport::Started).await;
        let mut child = match tokio::process::Command::new(&self.args.exec)
            .env("STEWARD_OPERATION_ID", &op.id)
            .env("STEWARD_OPERATION_VERB", &op.verb)
            .env("STEWARD_TARGET_KIND", &op.kind)
            .env("STEWARD_TARGET_NAMESPACE", &op.namespace)
            .env("STEWARD_TARGET_NAME", &op.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                return OpReport::Failed(format!("cannot run {}: {e}", self.args.exec.display()))
            }
        };
        let mut group = ProcessGroup::of(&child);
        if let Some(mut stdin) = child.stdin.take() {
            let input = op_render::op_json(op).to_string();
            let _ = stdin.write_all(input.as_bytes()).await;
        }
        let output = child.wait_with_output();
        tokio::pin!(output);
        let report = tokio::select! {
            out = &mut output => match out {
                Ok(out) if out.status.success() => {
                    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
                    OpReport::Succeeded(match text.as_str() {
                        "" => Value::Null,
                        t => serde_json::from_str(t).unwrap_or_else(|_| json!({"output": t})),
                    })
                }
                Ok(out) => {
                    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
                    OpReport::Failed(if err.is_empty() { format!("{}", out.status) } else { err })
                }
                Err(e) => OpReport::Failed(format!("waiting for {}: {e}", self.args.exec.display())),
            },
            _ = abort => {
                group.signal(libc::SIGTERM);
                if tokio::time::timeout(ABORT_GRACE, &mut output).await.is_err() {
                    tracing::warn!(id = %op.id, "the aborted program outlived its grace; killing it");
                }
                group.signal(libc::SIGKILL);
                OpReport::Aborted
            }
        };
        // Whatever PROGRAM left running after it ended on its own is its business.
        group.disarm();
        report
    }

    /// Sends a report, retrying while no leader answers; a lost assignment is dropped.
    async fn report(&self, op: &OperationInfo, report: OpReport) {
        loop {
            match self
                .client
                .worker_report(&self.args.id, op, report.clone())
                .await
            {
                Ok(_) => return,
                Err(e) if e.code() == Code::Unavailable => tokio::time::sleep(RETRY_PAUSE).await,
                Err(e) => {
                    tracing::warn!(id = %op.id, error = %super::describe_status(&e), "report refused; dropping the assignment");
                    return;
                }
            }
        }
    }
}

/// The process group of one PROGRAM run (its id is PROGRAM's pid). Dropped while armed (the
/// worker stops, or the task is cancelled mid-run), it kills the whole group, which
/// `kill_on_drop` alone would not: that reaches only PROGRAM, not what it started.
struct ProcessGroup(Option<libc::pid_t>);

impl ProcessGroup {
    fn of(child: &tokio::process::Child) -> ProcessGroup {
        ProcessGroup(child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()))
    }

    /// Sends `signal` to every process of the group.
    fn signal(&self, signal: libc::c_int) {
        let Some(pgid) = self.0.filter(|&p| p > 0) else {
            return;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. The group is the
        // one PROGRAM was started in (`process_group(0)`); its id is not given to another
        // process while the group has a member. Once it is empty this is called at most once
        // more, right away, so a reuse would need the pid counter to wrap in that moment.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }

    /// Leaves the group alone from now on.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}
