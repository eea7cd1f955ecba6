//! The `Operations` and `Workers` service calls of `Client`. Submit, abort, register, heartbeat,
//! deregister and report are writes (repeated at another node only when the request provably
//! never left this process); get and list are reads; a watch and an assignment stream are set up
//! like a read and then run until the server cuts them off.
//!
//! A worker embeds this client: `worker_register`, then `worker_assignments` (from any node),
//! `worker_report` with the (attempt, epoch) of each assignment, and `worker_heartbeat` within
//! its TTL. A report refused with `Aborted` means the assignment was lost: stop, do not retry.

use std::pin::Pin;
use std::time::Duration;

use crate::client::Transport;
use futures::Stream;
use serde_json::Value;
use tonic::{Request, Status};

use super::{request, Client, Consistency, Retry, MAX_REPLY_BYTES};
use crate::proto::v1 as pb;
use crate::proto::v1::operations_client::OperationsClient;
use crate::proto::v1::reservations_client::ReservationsClient;
use crate::proto::v1::workers_client::WorkersClient;
use crate::proto::v1::{
    Assignment, DeregisterWorkerReply, ListOperationsReply, ListWorkersReply, OperationInfo,
    OperationState, SubmitOperationReply, WorkerInfo,
};

/// Changes of operations from the moment the watch was set up; ends with the error that cut it
/// off.
pub type OpWatchStream = Pin<Box<dyn Stream<Item = Result<OperationInfo, Status>> + Send>>;
/// A worker's assignments: the current ones first, then new ones and abort requests.
pub type AssignmentStream = Pin<Box<dyn Stream<Item = Result<Assignment, Status>> + Send>>;

/// The optional parts of a submit.
#[derive(Clone, Debug, Default)]
pub struct SubmitOptions {
    /// A JSON object for the worker.
    pub params: Option<Value>,
    /// A repeated submit with this key answers the first operation.
    pub idempotency_key: Option<String>,
    /// The target object, created in the same step (it must not exist yet).
    pub create: Option<Value>,
    /// `None`: the server's default (operations.attempts_default).
    pub max_attempts: Option<u32>,
    /// `None`: the server's default (operations.deadline_ms_default).
    pub deadline: Option<Duration>,
    /// (kind, name) of the resource whose lock the operation takes instead of its target's, in
    /// the target's namespace (a backup locks its deployment).
    pub lock: Option<(String, String)>,
}

/// Which operations a list or watch returns (every given filter must match).
#[derive(Clone, Debug, Default)]
pub struct OpListOptions {
    pub state: Option<OperationState>,
    /// (kind, namespace, name); an empty namespace is "default".
    pub target: Option<(String, String, String)>,
    pub worker: Option<String>,
    /// 0: the server's default page size.
    pub limit: u32,
    pub continue_token: String,
    pub consistency: Consistency,
}

/// What a worker says about its assignment.
#[derive(Clone, Debug, PartialEq)]
pub enum OpReport {
    Started,
    /// The JSON becomes the target's `status.response`.
    Succeeded(Value),
    /// The message becomes the target's `status.error`.
    Failed(String),
    /// Stopped as asked.
    Aborted,
}

impl Client {
    /// Queues `verb` on `kind/namespace/name`.
    pub async fn op_submit(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        verb: &str,
        opts: &SubmitOptions,
    ) -> Result<SubmitOperationReply, Status> {
        let msg = pb::SubmitOperationRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            verb: verb.to_string(),
            params_json: opts
                .params
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            idempotency_key: opts.idempotency_key.clone().unwrap_or_default(),
            create_object_json: opts
                .create
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            max_attempts: opts.max_attempts.unwrap_or(0),
            deadline_ms: opts.deadline.map_or(0, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
            }),
            lock_kind: opts.lock.as_ref().map(|l| l.0.clone()).unwrap_or_default(),
            lock_name: opts.lock.as_ref().map(|l| l.1.clone()).unwrap_or_default(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { ops(ch).submit(request(msg, t)).await }
        })
        .await
    }

    /// One operation by id (`op-17`); `NotFound` if never submitted or no longer retained.
    pub async fn op_get(
        &self,
        id: &str,
        consistency: Consistency,
    ) -> Result<OperationInfo, Status> {
        let msg = pb::GetOperationRequest {
            id: id.to_string(),
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { ops(ch).get(request(msg, t)).await }
        })
        .await
    }

    /// One page of retained operations in submit order.
    pub async fn op_list(&self, opts: &OpListOptions) -> Result<ListOperationsReply, Status> {
        let (kind, namespace, name) = opts.target.clone().unwrap_or_default();
        let msg = pb::ListOperationsRequest {
            state: opts.state.map_or(0, |s| s as i32),
            kind,
            namespace,
            name,
            worker: opts.worker.clone().unwrap_or_default(),
            limit: opts.limit,
            continue_token: opts.continue_token.clone(),
            consistency: opts.consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { ops(ch).list(request(msg, t)).await }
        })
        .await
    }

    /// Aborts `id`: a queued operation ends ABORTED, an assigned one becomes ABORTING.
    pub async fn op_abort(&self, id: &str) -> Result<OperationInfo, Status> {
        let msg = pb::AbortOperationRequest { id: id.to_string() };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { ops(ch).abort(request(msg, t)).await }
        })
        .await
    }

    /// Live changes of the operations `opts` matches (its target and worker; state, paging and
    /// consistency are ignored).
    pub async fn op_watch(&self, opts: &OpListOptions) -> Result<OpWatchStream, Status> {
        let (kind, namespace, name) = opts.target.clone().unwrap_or_default();
        let msg = pb::WatchOperationsRequest {
            kind,
            namespace,
            name,
            worker: opts.worker.clone().unwrap_or_default(),
        };
        let stream = self
            .call(Retry::Read, |ch, _t| {
                let msg = msg.clone();
                async move { ops(ch).watch(Request::new(msg)).await }
            })
            .await?;
        Ok(Box::pin(stream))
    }

    /// Registers (or re-registers) `worker` handling `handles` (`Kind:verb`).
    pub async fn worker_register(
        &self,
        worker: &str,
        handles: &[&str],
        capacity: u32,
        ttl: Duration,
    ) -> Result<WorkerInfo, Status> {
        let msg = pb::RegisterWorkerRequest {
            worker: worker.to_string(),
            handles: handles.iter().map(|h| h.to_string()).collect(),
            capacity,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { workers(ch).register(request(msg, t)).await }
        })
        .await
    }

    pub async fn worker_heartbeat(&self, worker: &str) -> Result<WorkerInfo, Status> {
        let msg = pb::HeartbeatRequest {
            worker: worker.to_string(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { workers(ch).heartbeat(request(msg, t)).await }
        })
        .await
    }

    pub async fn worker_deregister(&self, worker: &str) -> Result<DeregisterWorkerReply, Status> {
        let msg = pb::DeregisterWorkerRequest {
            worker: worker.to_string(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { workers(ch).deregister(request(msg, t)).await }
        })
        .await
    }

    /// Workloads and units reserved per node (`node_id` empty: every node).
    pub async fn reservation_counters(
        &self,
        node_id: &str,
        consistency: Consistency,
    ) -> Result<pb::ReservationCountersReply, Status> {
        let msg = pb::ReservationCountersRequest {
            node_id: node_id.to_string(),
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| {
            let msg = msg.clone();
            async move { ReservationsClient::new(ch).counters(request(msg, t)).await }
        })
        .await
    }

    pub async fn worker_list(&self, consistency: Consistency) -> Result<ListWorkersReply, Status> {
        let msg = pb::ListWorkersRequest {
            consistency: consistency as i32,
        };
        self.call(Retry::Read, |ch, t| async move {
            workers(ch).list(request(msg, t)).await
        })
        .await
    }

    /// Reports on the assignment `op` (its id, attempt and epoch) as `worker`.
    pub async fn worker_report(
        &self,
        worker: &str,
        op: &OperationInfo,
        report: OpReport,
    ) -> Result<OperationInfo, Status> {
        let (kind, response_json, error) = match report {
            OpReport::Started => (pb::ReportKind::Started, String::new(), String::new()),
            OpReport::Succeeded(v) => (pb::ReportKind::Succeeded, v.to_string(), String::new()),
            OpReport::Failed(e) => (pb::ReportKind::Failed, String::new(), e),
            OpReport::Aborted => (pb::ReportKind::Aborted, String::new(), String::new()),
        };
        let msg = pb::ReportRequest {
            id: op.id.clone(),
            worker: worker.to_string(),
            attempt: op.attempt,
            epoch: op.epoch,
            kind: kind as i32,
            response_json,
            error,
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { workers(ch).report(request(msg, t)).await }
        })
        .await
    }

    /// The stream of `worker`'s assignments; `NotFound` if it is not registered.
    pub async fn worker_assignments(&self, worker: &str) -> Result<AssignmentStream, Status> {
        let msg = pb::AssignmentsRequest {
            worker: worker.to_string(),
        };
        let stream = self
            .call(Retry::Read, |ch, _t| {
                let msg = msg.clone();
                async move { workers(ch).assignments(Request::new(msg)).await }
            })
            .await?;
        Ok(Box::pin(stream))
    }
}

fn ops(channel: Transport) -> OperationsClient<Transport> {
    OperationsClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

fn workers(channel: Transport) -> WorkersClient<Transport> {
    WorkersClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}
