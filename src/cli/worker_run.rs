//! `steward worker run`: a real worker. It registers, heartbeats within its TTL, streams its
//! assignments (from any node, re-opening the stream elsewhere when a node goes away), and runs
//! PROGRAM once per assignment with the operation JSON on stdin: exit code 0 is success (JSON
//! on stdout becomes the response; other text becomes `{"output": text}`), anything else a
//! failure (stderr, or the exit status, becomes the error). An abort request kills PROGRAM and
//! reports Aborted. A report refused with Aborted means the assignment was lost: the worker
//! drops it. Ctrl-C deregisters the worker (its running operations go back to the queue).

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
use crate::client::{AssignmentKind, Client, OpReport, OperationInfo};

/// Pause before re-opening an assignment stream or retrying a call that found no leader.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

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
                Err(e) if e.code() == Code::NotFound => {
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
                Err(e) if e.code() == Code::NotFound => {
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
                            Err(_) => tracing::warn!(kind = a.kind, "unknown assignment kind"),
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
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                return OpReport::Failed(format!("cannot run {}: {e}", self.args.exec.display()))
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            let input = op_render::op_json(op).to_string();
            let _ = stdin.write_all(input.as_bytes()).await;
        }
        tokio::select! {
            out = child.wait_with_output() => match out {
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
            _ = abort => OpReport::Aborted,
        }
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
