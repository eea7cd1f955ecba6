//! The `dispatch` workload: lifecycle operations through the leader's scheduler. `--workers`
//! workers register (kind `Bench`, verb `run`) with room for twice their share of the clients,
//! and open their assignment streams on the connections in turn, so every node serves some.
//! Every client submits an operation (on a new `Bench` object, created in the same step) and
//! waits until a worker has received it, then submits the next: one operation in flight per
//! client, so the latency is the dispatch path's (submit sent -> assignment received), not a
//! queue's. The worker reports success from a task of its own, which frees its room and the
//! target's lock.
//!
//! Throughput is deliveries per second. A submit whose operation no worker receives within
//! [`DELIVERY_TIMEOUT`] counts as `Missed`. The workers deregister at the end.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use steward::proto::v1::operations_client::OperationsClient;
use steward::proto::v1::workers_client::WorkersClient;
use steward::proto::v1::{
    AssignmentKind, AssignmentsRequest, DeregisterWorkerRequest, HeartbeatRequest, OperationInfo,
    RegisterWorkerRequest, ReportKind, ReportRequest, SubmitOperationRequest,
};
use tokio::sync::{oneshot, watch};
use tonic::transport::Channel;

use crate::args::Plan;
use crate::names::{self, RunId, KIND};
use crate::report::{code_name, Recorder};
use crate::runner::{Measured, Until};
use crate::servers::Probe;

/// How long a client waits for a worker to receive its operation.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The verb the workers handle.
pub const VERB: &str = "run";
/// Worker heartbeat TTL; they heartbeat at a fifth of it.
const WORKER_TTL: Duration = Duration::from_secs(30);

/// The clients waiting for their operation to reach a worker, by target name: the worker sends
/// the instant it received the assignment.
type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Instant>>>>;

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let ns = run.namespace();
    let waiting = Waiting::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    // Room for every client's operation, and as many whose reports are still on their way.
    let capacity = u32::try_from(2 * plan.clients.div_ceil(plan.workers)).unwrap_or(u32::MAX);
    let mut workers = Vec::with_capacity(plan.workers);
    for w in 0..plan.workers {
        let id = format!("bench-{}-w{w}", run.namespace());
        let mut client = WorkersClient::new(channels[w % channels.len()].clone());
        client
            .register(RegisterWorkerRequest {
                worker: id.clone(),
                handles: vec![format!("{KIND}:{VERB}")],
                capacity,
                ttl_ms: WORKER_TTL.as_millis() as u64,
            })
            .await
            .with_context(|| format!("register worker {id}"))?;
        let stream = client
            .assignments(AssignmentsRequest { worker: id.clone() })
            .await
            .with_context(|| format!("open the assignments of {id}"))?
            .into_inner();
        let worker = Worker {
            client,
            id,
            waiting: waiting.clone(),
        };
        workers.push((
            worker.id.clone(),
            tokio::spawn(worker.run(stream, stop_rx.clone())),
        ));
    }

    probe.start()?;
    let start = Instant::now();
    let until = Until::new(plan.stop, start);
    let acked = Arc::new(AtomicU64::new(0));
    let submitters: Vec<_> = (0..plan.clients)
        .map(|c| {
            let s = Submitter {
                ops: OperationsClient::new(channels[plan.conn_of_client(c)].clone()),
                ns: ns.clone(),
                client: c,
                value_size: plan.value_size,
                waiting: waiting.clone(),
            };
            tokio::spawn(s.run(until.clone(), acked.clone()))
        })
        .collect();
    let mut all = Recorder::default();
    for s in submitters {
        all.merge(&s.await.context("a client task panicked")?);
    }
    let submitted = acked.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    let servers = probe.finish()?;
    stop_tx.send_replace(true);
    for (id, task) in workers {
        all.merge(&task.await.context("a worker task panicked")?);
        let mut client = WorkersClient::new(channels[0].clone());
        let _ = client
            .deregister(DeregisterWorkerRequest { worker: id })
            .await;
    }
    Ok(Measured {
        all,
        elapsed,
        writes: Some(submitted),
        servers,
        warmup: None,
    })
}

struct Submitter {
    ops: OperationsClient<Channel>,
    ns: String,
    client: usize,
    value_size: usize,
    waiting: Waiting,
}

impl Submitter {
    /// Submits, waits for the delivery, records its latency; until the run stops.
    async fn run(mut self, until: Until, acked: Arc<AtomicU64>) -> Recorder {
        let mut rec = Recorder::default();
        let mut seq = 0u64;
        while until.more() {
            seq += 1;
            let name = format!("op-{}-{seq}", self.client);
            let (tx, rx) = oneshot::channel();
            lock(&self.waiting).insert(name.clone(), tx);
            let request = SubmitOperationRequest {
                kind: KIND.into(),
                namespace: self.ns.clone(),
                name: name.clone(),
                verb: VERB.into(),
                create_object_json: names::object_json(
                    &self.ns,
                    &name,
                    false,
                    self.value_size,
                    None,
                ),
                ..SubmitOperationRequest::default()
            };
            let sent = Instant::now();
            if let Err(s) = self.ops.submit(request).await {
                lock(&self.waiting).remove(&name);
                rec.error(&code_name(&s));
                continue;
            }
            acked.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(DELIVERY_TIMEOUT, rx).await {
                Ok(Ok(received)) => rec.ok(received.saturating_duration_since(sent)),
                _ => {
                    lock(&self.waiting).remove(&name);
                    rec.error("Missed");
                }
            }
        }
        rec
    }
}

fn lock(waiting: &Waiting) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Instant>>> {
    waiting.lock().unwrap_or_else(|e| e.into_inner())
}

struct Worker {
    client: WorkersClient<Channel>,
    id: String,
    waiting: Waiting,
}

impl Worker {
    /// Tells each new assignment's client that it arrived and reports it done, heartbeating,
    /// until told to stop or the stream ends. Records only errors.
    async fn run(
        self,
        mut stream: tonic::Streaming<steward::proto::v1::Assignment>,
        mut stop: watch::Receiver<bool>,
    ) -> Recorder {
        let mut rec = Recorder::default();
        let mut seen = BTreeSet::new();
        let mut heartbeat = tokio::time::interval(WORKER_TTL / 5);
        let (report_tx, mut report_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        loop {
            tokio::select! {
                msg = stream.message() => match msg {
                    Ok(Some(a)) if a.kind == AssignmentKind::Run as i32 => {
                        let Some(op) = a.operation else { continue };
                        let received = Instant::now();
                        if !seen.insert(op.id.clone()) {
                            continue;
                        }
                        if let Some(client) = lock(&self.waiting).remove(&op.name) {
                            let _ = client.send(received);
                        }
                        self.report(op, report_tx.clone());
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        rec.error("Unavailable");
                        break;
                    }
                    Err(s) => {
                        rec.error(&code_name(&s));
                        break;
                    }
                },
                Some(code) = report_rx.recv() => rec.error(&code),
                _ = heartbeat.tick() => {
                    let mut client = self.client.clone();
                    let worker = self.id.clone();
                    tokio::spawn(async move {
                        let _ = client.heartbeat(HeartbeatRequest { worker }).await;
                    });
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        rec
    }

    /// Reports `op` succeeded from its own task; a failure goes back as an error code.
    fn report(&self, op: OperationInfo, errors: tokio::sync::mpsc::UnboundedSender<String>) {
        let mut client = self.client.clone();
        let request = ReportRequest {
            id: op.id,
            worker: self.id.clone(),
            attempt: op.attempt,
            epoch: op.epoch,
            kind: ReportKind::Succeeded as i32,
            response_json: String::new(),
            error: String::new(),
        };
        tokio::spawn(async move {
            if let Err(s) = client.report(request).await {
                let _ = errors.send(format!("Report{}", code_name(&s)));
            }
        });
    }
}
