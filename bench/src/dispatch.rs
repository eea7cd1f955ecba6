//! The `dispatch` workload: lifecycle operations through the leader's scheduler. `--workers`
//! workers register (kind `Bench`, verb `run`), each with room for its share of the clients'
//! operations, and open their assignment streams on the connections in turn, so every node
//! serves some; every client submits one operation after another (on a new `Bench` object,
//! created in the same step), with its send time in the params. An operation counts once its
//! worker receives it: its latency is submit sent -> assignment received; the worker then
//! reports success from a task of its own, which frees the room (and the target's lock).
//!
//! Throughput is deliveries per second of the measured time. When the clients stop, the run
//! waits until the workers have received every acknowledged submit, or [`DRAIN_TIMEOUT`]; what
//! never arrived counts as `Missed`. The workers deregister at the end.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use steward::proto::v1::operations_client::OperationsClient;
use steward::proto::v1::workers_client::WorkersClient;
use steward::proto::v1::{
    AssignmentKind, AssignmentsRequest, DeregisterWorkerRequest, HeartbeatRequest,
    OperationInfo, RegisterWorkerRequest, ReportKind, ReportRequest, SubmitOperationRequest,
};
use tokio::sync::{watch, Notify};
use tonic::transport::Channel;

use crate::args::Plan;
use crate::names::{self, RunId, KIND};
use crate::report::{code_name, Recorder};
use crate::runner::{Measured, Until};
use crate::servers::Probe;

/// How long workers may take, after the clients stop, to receive what was submitted.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// The verb the workers handle.
pub const VERB: &str = "run";
/// Worker heartbeat TTL; they heartbeat at a fifth of it.
const WORKER_TTL: Duration = Duration::from_secs(30);

/// What every worker shares: deliveries so far, and a wake-up for the drain.
#[derive(Default)]
struct Deliveries {
    received: AtomicU64,
    changed: Notify,
}

pub async fn run(
    plan: &Plan,
    run: &RunId,
    channels: &[Channel],
    probe: &Probe,
) -> anyhow::Result<Measured> {
    let ns = run.namespace();
    let base = Instant::now();
    let deliveries = Arc::new(Deliveries::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    // Room for every client's operation in flight, spread over the workers.
    let capacity = u32::try_from(plan.clients.div_ceil(plan.workers)).unwrap_or(u32::MAX);
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
            base,
            deliveries: deliveries.clone(),
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
                base,
            };
            tokio::spawn(s.run(until.clone(), acked.clone()))
        })
        .collect();
    let mut all = Recorder::default();
    for s in submitters {
        all.merge(&s.await.context("a client task panicked")?);
    }
    let submitted = acked.load(Ordering::Relaxed);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        loop {
            let notified = deliveries.changed.notified();
            if deliveries.received.load(Ordering::Relaxed) >= submitted {
                return;
            }
            notified.await;
        }
    })
    .await;
    let elapsed = start.elapsed();
    let servers = probe.finish()?;
    stop_tx.send_replace(true);
    for (id, task) in workers {
        all.merge(&task.await.context("a worker task panicked")?);
        let mut client = WorkersClient::new(channels[0].clone());
        let _ = client.deregister(DeregisterWorkerRequest { worker: id }).await;
    }
    if drained.is_err() {
        let received = deliveries.received.load(Ordering::Relaxed);
        all.errors_n("Missed", submitted.saturating_sub(received));
    }
    Ok(Measured {
        all,
        elapsed,
        writes: Some(submitted),
        servers,
    })
}

struct Submitter {
    ops: OperationsClient<Channel>,
    ns: String,
    client: usize,
    value_size: usize,
    base: Instant,
}

impl Submitter {
    /// Submits until the run stops; records only errors (latencies are the workers').
    async fn run(mut self, until: Until, acked: Arc<AtomicU64>) -> Recorder {
        let mut rec = Recorder::default();
        let mut seq = 0u64;
        while until.more() {
            seq += 1;
            let name = format!("op-{}-{seq}", self.client);
            let sent_us = self.base.elapsed().as_micros() as u64;
            let request = SubmitOperationRequest {
                kind: KIND.into(),
                namespace: self.ns.clone(),
                name: name.clone(),
                verb: VERB.into(),
                params_json: format!(r#"{{"sent_us":{sent_us}}}"#),
                create_object_json: names::object_json(
                    &self.ns,
                    &name,
                    false,
                    self.value_size,
                    None,
                ),
                ..SubmitOperationRequest::default()
            };
            match self.ops.submit(request).await {
                Ok(_) => {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(s) => rec.error(&code_name(&s)),
            }
        }
        rec
    }
}

struct Worker {
    client: WorkersClient<Channel>,
    id: String,
    base: Instant,
    deliveries: Arc<Deliveries>,
}

impl Worker {
    /// Records each new assignment's dispatch latency and reports it done, heartbeating, until
    /// told to stop or the stream ends.
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
                        if !seen.insert(op.id.clone()) {
                            continue;
                        }
                        match sent_us(&op) {
                            Some(sent) => {
                                let now = self.base.elapsed().as_micros() as u64;
                                rec.ok(Duration::from_micros(now.saturating_sub(sent)));
                            }
                            None => rec.error("WrongResult"),
                        }
                        self.deliveries.received.fetch_add(1, Ordering::Relaxed);
                        self.deliveries.changed.notify_waiters();
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

/// The send time the submitter put in the params.
fn sent_us(op: &OperationInfo) -> Option<u64> {
    let params: serde_json::Value = serde_json::from_str(&op.params_json).ok()?;
    params.get("sent_us")?.as_u64()
}
