//! What the operations workload records (one `Record` per line of `history.jsonl`) and what the
//! final reads return, for `check`.

use std::fmt;

use serde::{Deserialize, Serialize};
use steward::client::{OperationInfo, OperationState};

use crate::history::Outcome;

/// One submit call (an unknown outcome is followed by another call with the same key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitEvent {
    pub process: u64,
    pub key: String,
    pub target: String,
    pub verb: String,
    pub outcome: Outcome,
    /// Ok: the operation the server answered.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Ok: whether this call created it.
    pub created: bool,
    /// Sent again on purpose after an acknowledged submit with this key.
    pub repeat: bool,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortEvent {
    pub process: u64,
    pub id: String,
    pub outcome: Outcome,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// One item of a worker's assignment stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub worker: String,
    pub op: String,
    pub target: String,
    pub attempt: u32,
    pub epoch: u64,
    /// An abort request (else: run it).
    pub abort: bool,
    /// This worker had it already (a re-opened stream repeats current assignments).
    pub repeat: bool,
    pub at_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectResult {
    /// The fenced write was acknowledged.
    Ok,
    /// After an unknown write: the log already held this effect.
    Found,
    /// FailedPrecondition: the fence no longer held (the assignment was taken back or ended).
    FenceRefused,
    Unknown,
}

/// One effect write (or the read that found an earlier unknown one applied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectEvent {
    pub worker: String,
    pub op: String,
    pub target: String,
    pub attempt: u32,
    pub epoch: u64,
    pub result: EffectResult,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    Started,
    Succeeded,
    Failed,
    Aborted,
}

/// One report call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportEvent {
    pub worker: String,
    pub op: String,
    pub attempt: u32,
    pub epoch: u64,
    pub report: ReportKind,
    pub outcome: Outcome,
    /// Refused with Aborted: the assignment was no longer this worker's.
    pub stale: bool,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerLife {
    Started,
    /// Removed by steward (its heartbeats lapsed) and registered again under the same id.
    Reregistered,
    /// Crashed: everything dropped, nothing reported.
    Vanished,
    /// Crashed: no heartbeats or streams, but its runs go on late.
    Zombied,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEvent {
    pub worker: String,
    pub event: WorkerLife,
    pub at_ns: u64,
}

/// One line of `history.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Submit(SubmitEvent),
    Abort(AbortEvent),
    Delivery(Delivery),
    Effect(EffectEvent),
    Report(ReportEvent),
    Worker(WorkerEvent),
}

/// One entry of a target's effect log (`spec.effects` of its `JepsenEffects` object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectEntry {
    pub op: String,
    pub attempt: u32,
    pub epoch: u64,
    pub worker: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum FinalState {
    Succeeded,
    Failed,
    Aborted,
    /// Not final (the proto name).
    Other(String),
}

impl FinalState {
    pub fn is_final(&self) -> bool {
        !matches!(self, FinalState::Other(_))
    }

    fn of(state: i32) -> FinalState {
        match OperationState::try_from(state) {
            Ok(OperationState::Succeeded) => FinalState::Succeeded,
            Ok(OperationState::Failed) => FinalState::Failed,
            Ok(OperationState::Aborted) => FinalState::Aborted,
            Ok(s) => FinalState::Other(s.as_str_name().to_string()),
            Err(_) => FinalState::Other(format!("unknown state {state}")),
        }
    }
}

impl fmt::Display for FinalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinalState::Other(s) => f.write_str(s),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// An operation as the final list showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinalOp {
    pub id: String,
    pub key: String,
    pub target: String,
    pub verb: String,
    pub state: FinalState,
    pub attempt: u32,
    pub epoch: u64,
    pub worker: String,
}

impl FinalOp {
    pub(super) fn of(o: &OperationInfo) -> FinalOp {
        FinalOp {
            id: o.id.clone(),
            key: o.idempotency_key.clone(),
            target: o.name.clone(),
            verb: o.verb.clone(),
            state: FinalState::of(o.state),
            attempt: o.attempt,
            epoch: o.epoch,
            worker: o.worker.clone(),
        }
    }
}
