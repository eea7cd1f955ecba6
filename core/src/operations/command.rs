//! The operation commands: workers register, heartbeat and leave; operations are submitted,
//! assigned, reported on, aborted and swept.

use serde::{Deserialize, Serialize};

use crate::locks::LockLimits;
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::{
    Handle, OpLimits, OpPolicy, OpState, OpTally, Operation, OperationId, Worker,
};

/// An operation or worker command (`Command::Operations`), applied by `operations/apply.rs`.
// The large variants are the common ones; boxing would change the shape other layers build.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum OperationCommand {
    /// Register `worker`, or re-register it: handles, capacity and ttl are replaced, its
    /// assignments kept. Counts as a heartbeat.
    RegisterWorker {
        worker: String,
        handles: Vec<Handle>,
        capacity: u32,
        ttl_ms: u64,
        limits: OpLimits,
    },
    /// `worker` is alive: it expires `ttl_ms` from now.
    Heartbeat { worker: String },
    /// `worker` leaves: its assignments are taken back as if it had died, and it is removed.
    DeregisterWorker { worker: String, limits: OpLimits },
    /// Queue `verb` on `target` (which must exist, unless `create` carries it: then it is
    /// created in the same step and must not exist). `policy` is the server's decision for this
    /// (kind, verb). With an `idempotency_key` already used, answers the first operation and
    /// changes nothing.
    Submit {
        target: ObjectKey,
        verb: String,
        /// A JSON object or null, for the worker.
        params: serde_json::Value,
        idempotency_key: Option<String>,
        create: Option<Resource>,
        policy: OpPolicy,
        limits: OpLimits,
    },
    /// Proposed by the leader's scheduler for a pair `State::ops_dispatchable` gave it: assign
    /// queued operation `id` to `worker` and take its lock. Apply re-checks everything.
    Assign {
        id: OperationId,
        worker: String,
        lock_limits: LockLimits,
    },
    /// A worker's progress or result, for the assignment (attempt, epoch) it was given.
    Report {
        id: OperationId,
        worker: String,
        attempt: u32,
        epoch: u64,
        report: WorkerReport,
        limits: OpLimits,
    },
    /// Abort `id`: a queued operation ends `Aborted`, an assigned one becomes `Aborting` until
    /// its worker confirms.
    Abort { id: OperationId, limits: OpLimits },
    /// Proposed by the leader's expiry task for what `State::ops_due` gave it: take back the
    /// work of dead workers and remove them, and act on passed deadlines. Apply re-checks
    /// everything, including the grace after a leader change.
    Sweep {
        workers: Vec<String>,
        operations: Vec<OperationId>,
        grace_ms: u64,
        limits: OpLimits,
    },
}

/// What a worker says about its assignment (`OperationCommand::Report`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkerReport {
    /// It began: Dispatched -> InProgress.
    Started,
    /// It is done; `response` (any JSON) becomes the target's `status.response`.
    Succeeded { response: serde_json::Value },
    /// It failed for good; `error` becomes the target's `status.error`.
    Failed { error: String },
    /// It stopped as asked (the operation is `Aborting`).
    Aborted,
}

impl WorkerReport {
    /// The state this report ends in (Started: InProgress).
    pub fn state(&self) -> OpState {
        match self {
            WorkerReport::Started => OpState::InProgress,
            WorkerReport::Succeeded { .. } => OpState::Succeeded,
            WorkerReport::Failed { .. } => OpState::Failed,
            WorkerReport::Aborted => OpState::Aborted,
        }
    }
}

/// What an operation, worker or reservation command answers.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum OperationReply {
    /// Submit (and a decommission): the operation as stored; `created` is false when the
    /// idempotency key named an existing one (then nothing changed).
    Submitted { operation: Operation, created: bool },
    /// Assign, Report, Abort: the operation after the command.
    Operation { operation: Operation },
    /// RegisterWorker, Heartbeat: the worker after the command.
    Worker { worker: Worker },
    /// DeregisterWorker: what became of its assignments.
    WorkerDeregistered { tally: OpTally },
    /// Sweep: workers removed, assignments taken back, operations ended or aborting.
    Swept { tally: OpTally },
}
