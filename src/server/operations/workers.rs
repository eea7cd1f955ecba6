//! The `Workers` gRPC service: registration, heartbeats, reports, and the stream of a worker's
//! assignments, which any node serves.
//!
//! An assignment stream subscribes to this node's operation events BEFORE it reads the worker's
//! current assignments (after a read barrier), so nothing assigned in between is missed; what
//! both paths see is sent once, keyed by (operation, epoch, run or abort). A lagging subscription
//! and a periodic tick re-read the state, which also covers a snapshot installed under the
//! stream; a rescan that finds the worker gone ends the stream with NotFound. Whether an
//! assignment is still the worker's is the state machine's call: a report of a lost one is
//! refused with Aborted.

use crate::state::OperationCommand;
use crate::state::OperationReply;
use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::workers_server::Workers;
use crate::proto::v1::*;
use crate::server::auth;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::operations::{
    json_or_null, op_limits, operation_info, operation_reply, parse_id,
};
use crate::server::resources::consistency;
use crate::state::auth::Access;
use crate::state::{self, Handle, OpState, OperationId, Rejection, WorkerReport};

/// How often an assignment stream re-reads the worker's assignments from the state.
const ASSIGNMENTS_RESCAN: Duration = Duration::from_secs(1);

pub struct WorkersService {
    node: Arc<Node>,
}

impl WorkersService {
    pub fn new(node: Arc<Node>) -> Self {
        WorkersService { node }
    }
}

pub fn worker_info(w: &state::Worker, now_ms: u64) -> WorkerInfo {
    WorkerInfo {
        id: w.id.clone(),
        handles: w.handles.iter().map(|h| h.to_string()).collect(),
        capacity: w.capacity,
        ttl_ms: w.ttl_ms,
        registered_ms: w.registered_ms,
        last_heartbeat_ms: w.last_heartbeat_ms,
        expires_at_ms: w.expires_at_ms(),
        alive: w.is_alive(now_ms),
        assigned: w.assigned.iter().map(|id| id.to_string()).collect(),
    }
}

fn worker_reply(
    node: &Node,
    what: &str,
    r: OperationReply,
) -> Result<GrpcResponse<WorkerInfo>, Status> {
    match r {
        OperationReply::Worker { worker } => {
            let now_ms = node.state().time_ms();
            Ok(GrpcResponse::new(worker_info(&worker, now_ms)))
        }
        other => Err(errors::internal(
            what,
            format!("unexpected response {other:?}"),
        )),
    }
}

fn report_from_proto(req: &ReportRequest) -> Result<WorkerReport, Status> {
    match ReportKind::try_from(req.kind) {
        Ok(ReportKind::Started) => Ok(WorkerReport::Started),
        Ok(ReportKind::Succeeded) => Ok(WorkerReport::Succeeded {
            response: json_or_null("response_json", &req.response_json)?,
        }),
        Ok(ReportKind::Failed) => Ok(WorkerReport::Failed {
            error: req.error.clone(),
        }),
        Ok(ReportKind::Aborted) => Ok(WorkerReport::Aborted),
        Ok(ReportKind::Unspecified) => Err(errors::invalid(
            "kind",
            "required; REPORT_KIND_STARTED, REPORT_KIND_SUCCEEDED, REPORT_KIND_FAILED or \
             REPORT_KIND_ABORTED",
        )),
        Err(_) => Err(errors::invalid(
            "kind",
            format!(
                "unknown value {}; REPORT_KIND_STARTED, REPORT_KIND_SUCCEEDED, \
                 REPORT_KIND_FAILED or REPORT_KIND_ABORTED",
                req.kind
            ),
        )),
    }
}

/// What `op` asks of `worker` now, if anything: run it, or stop it.
fn assignment_of(op: &state::Operation, worker: &str) -> Option<(AssignmentKind, Assignment)> {
    let kind = match op.state {
        OpState::Dispatched | OpState::InProgress => AssignmentKind::Run,
        OpState::Aborting => AssignmentKind::Abort,
        _ => return None,
    };
    // DELIBERATE BUG (src/bugs.rs, test-only builds): every 4th operation's run also goes to
    // every other worker that streams its assignments.
    let double_dispatch = crate::bugs::active(crate::bugs::Bug::OpDoubleDispatch)
        && kind == AssignmentKind::Run
        && op.worker.is_some()
        && op.id.0 % 4 == 0;
    if op.worker.as_deref() != Some(worker) && !double_dispatch {
        return None;
    }
    Some((
        kind,
        Assignment {
            kind: kind as i32,
            operation: Some(operation_info(op)),
        },
    ))
}

/// Sends each (operation, epoch, kind) once.
struct AssignmentSender {
    worker: String,
    sent: BTreeSet<(OperationId, u64, i32)>,
    out: mpsc::Sender<Result<Assignment, Status>>,
}

impl AssignmentSender {
    /// False when the client went away.
    async fn offer(&mut self, op: &state::Operation) -> bool {
        let Some((kind, assignment)) = assignment_of(op, &self.worker) else {
            return true;
        };
        if !self.sent.insert((op.id, op.epoch, kind as i32)) {
            return true;
        }
        self.out.send(Ok(assignment)).await.is_ok()
    }

    /// Offers every current assignment of the worker, and forgets what it no longer holds.
    /// Ends the stream with NotFound once the worker is no longer registered (deregistered, or
    /// removed by a sweep after its heartbeat expired): it must register again.
    async fn rescan(&mut self, node: &Node) -> bool {
        let ops: Option<Vec<state::Operation>> = {
            let state = node.state();
            let assigned = state.worker(&self.worker).map(|w| w.assigned.clone());
            assigned.map(|ids| {
                ids.into_iter()
                    .filter_map(|id| state.operation(id).cloned())
                    .collect()
            })
        };
        let Some(ops) = ops else {
            let gone = Rejection::WorkerNotFound {
                worker: self.worker.clone(),
            };
            let _ = self.out.send(Err(errors::rejection(&gone))).await;
            return false;
        };
        let held: BTreeSet<OperationId> = ops.iter().map(|op| op.id).collect();
        self.sent.retain(|(id, _, _)| held.contains(id));
        for op in &ops {
            if !self.offer(op).await {
                return false;
            }
        }
        true
    }
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<Assignment, Status>> + Send>>;

#[tonic::async_trait]
impl Workers for WorkersService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn register(
        &self,
        request: Request<RegisterWorkerRequest>,
    ) -> Result<GrpcResponse<WorkerInfo>, Status> {
        let caller = auth::caller(&request);
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Worker(&request.get_ref().worker),
        )?;
        let req = request.into_inner();
        let handles = req
            .handles
            .iter()
            .enumerate()
            .map(|(i, h)| {
                h.parse::<Handle>()
                    .map_err(|e| errors::invalid(&format!("handles[{i}]"), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let command = OperationCommand::RegisterWorker {
            worker: req.worker,
            handles,
            capacity: req.capacity,
            ttl_ms: req.ttl_ms,
            limits: op_limits(self.node.config.operations()),
        };
        let r = self.node.propose(command).await?;
        worker_reply(&self.node, "worker register", r)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<GrpcResponse<WorkerInfo>, Status> {
        let caller = auth::caller(&request);
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Worker(&request.get_ref().worker),
        )?;
        let worker = request.into_inner().worker;
        let r = self
            .node
            .propose(OperationCommand::Heartbeat { worker })
            .await?;
        worker_reply(&self.node, "worker heartbeat", r)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn deregister(
        &self,
        request: Request<DeregisterWorkerRequest>,
    ) -> Result<GrpcResponse<DeregisterWorkerReply>, Status> {
        let caller = auth::caller(&request);
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Worker(&request.get_ref().worker),
        )?;
        let command = OperationCommand::DeregisterWorker {
            worker: request.into_inner().worker,
            limits: op_limits(self.node.config.operations()),
        };
        match self.node.propose(command).await? {
            OperationReply::WorkerDeregistered { tally } => {
                Ok(GrpcResponse::new(DeregisterWorkerReply {
                    requeued: tally.requeued,
                    failed: tally.failed,
                    aborted: tally.aborted,
                }))
            }
            other => Err(errors::internal(
                "worker deregister",
                format!("unexpected response {other:?}"),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(
        &self,
        request: Request<ListWorkersRequest>,
    ) -> Result<GrpcResponse<ListWorkersReply>, Status> {
        let req = request.into_inner();
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        let now_ms = state.time_ms();
        Ok(GrpcResponse::new(ListWorkersReply {
            workers: state.workers().map(|w| worker_info(w, now_ms)).collect(),
            now_ms,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<GrpcResponse<OperationInfo>, Status> {
        let caller = auth::caller(&request);
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Worker(&request.get_ref().worker),
        )?;
        let req = request.into_inner();
        let command = OperationCommand::Report {
            id: parse_id("id", &req.id)?,
            report: report_from_proto(&req)?,
            worker: req.worker,
            attempt: req.attempt,
            epoch: req.epoch,
            limits: op_limits(self.node.config.operations()),
        };
        operation_reply("operation report", self.node.propose(command).await?)
    }

    type AssignmentsStream = AssignmentStream;

    #[tracing::instrument(level = "debug", skip_all, fields(worker = %request.get_ref().worker))]
    async fn assignments(
        &self,
        request: Request<AssignmentsRequest>,
    ) -> Result<GrpcResponse<AssignmentStream>, Status> {
        let access = auth::StreamAccess::Worker(request.get_ref().worker.clone());
        let mut allowed = auth::StreamAuth::open(&self.node, &request, access)?;
        let worker = request.into_inner().worker;
        // Subscribe first: an assignment applied after the read below still arrives.
        let mut events = self.node.hub.subscribe_ops();
        self.node.read_barrier(Consistency::Linearizable).await?;
        if self.node.state().worker(&worker).is_none() {
            return Err(errors::rejection(&Rejection::WorkerNotFound { worker }));
        }
        let (out, out_rx) = mpsc::channel::<Result<Assignment, Status>>(64);
        let node = self.node.clone();
        let mut sender = AssignmentSender {
            worker,
            sent: BTreeSet::new(),
            out,
        };
        tokio::spawn(async move {
            if !sender.rescan(&node).await {
                return;
            }
            let mut tick = tokio::time::interval(ASSIGNMENTS_RESCAN);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let alive = tokio::select! {
                    // Nothing more goes out to a caller who lost the worker role meanwhile.
                    ev = events.recv() => match allowed.recheck().map(|()| ev) {
                        Err(status) => {
                            let _ = sender.out.send(Err(status)).await;
                            false
                        }
                        Ok(ev) => match ev {
                        Ok(e) => sender.offer(&e.operation).await,
                        Err(RecvError::Lagged(_)) => sender.rescan(&node).await,
                        Err(RecvError::Closed) => {
                            let _ = sender.out.send(Err(errors::shutting_down())).await;
                            false
                        }
                        },
                    },
                    _ = tick.tick() => match allowed.recheck() {
                        Ok(()) => sender.rescan(&node).await,
                        Err(status) => {
                            let _ = sender.out.send(Err(status)).await;
                            false
                        }
                    },
                    _ = sender.out.closed() => false,
                };
                if !alive {
                    return;
                }
            }
        });
        Ok(GrpcResponse::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }
}
