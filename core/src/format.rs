//! The formats steward writes and still reads, in one place.
//!
//! - Log entries (`Proposal`, serde JSON inside openraft's entry): [`LOG_FORMAT`].
//!   - 1 (before issue 23): `Command` was one flat enum of PascalCase variants
//!     (`{"LockAcquire":{..}}`, `{"Create":{..}}`).
//!   - 2: `Command` is grouped by capability under snake_case tags
//!     (`{"locks":{"Acquire":{..}}}`, `{"objects":{"Create":{..}}}`).
//!
//!   Format 2 is written; both are read. An entry does not name its format: the two sets of tags
//!   cannot be confused (snake_case against PascalCase), so the tag says which, and a format-1
//!   entry becomes the very command format 2 would have written (the fields are the same).
//! - Snapshots: [`SNAPSHOT_FORMAT`] (the body's own `format` field; `snapshot.rs` reads every
//!   earlier one). Issue 23 did not change it.
//! - Responses and forwarded commands travel only between nodes of one build (no mixed-version
//!   cluster is supported yet), so they carry no format.

use serde::Deserialize;

use crate::alarms::AlarmAction;
use crate::auth::AuthAction;
use crate::command::{Command, MemberCommand};
use crate::deployments::command::DeploymentCommand;
use crate::deployments::{DeploymentAction, StatusLimits};
use crate::locks::command::LockCommand;
use crate::locks::{Fence, LockLimits, LockMode};
use crate::objects::command::{ObjectCommand, TxnOp};
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::command::{OperationCommand, WorkerReport};
use crate::operations::{Handle, OpLimits, OpPolicy, OperationId};
use crate::pools::command::PoolCommand;
use crate::pools::PoolAction;
use crate::reservations::command::ReservationCommand;

/// The log entry format written now.
pub const LOG_FORMAT: u32 = 2;

pub use crate::snapshot::SNAPSHOT_FORMAT;

/// Every command tag a log entry may hold: format 2's (snake_case) and format 1's (PascalCase,
/// frozen here as they were written: never change a field of these).
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
pub enum AnyCommand {
    #[serde(rename = "objects")]
    Objects(ObjectCommand),
    #[serde(rename = "locks")]
    Locks(LockCommand),
    #[serde(rename = "operations")]
    Operations(OperationCommand),
    #[serde(rename = "reservations")]
    Reservations(ReservationCommand),
    #[serde(rename = "deployments")]
    Deployments(DeploymentCommand),
    #[serde(rename = "pools")]
    Pools(PoolCommand),
    #[serde(rename = "auth")]
    Auth(AuthAction),
    #[serde(rename = "alarms")]
    Alarms(AlarmAction),
    #[serde(rename = "members")]
    Members(MemberCommand),
    #[serde(rename = "kv")]
    Kv(crate::kv::KvCommand),
    #[serde(rename = "guarded")]
    Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
    // Format 1.
    #[serde(rename = "Create")]
    V1Create {
        object: Resource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Update")]
    V1Update {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "UpdateStatus")]
    V1UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Delete")]
    V1Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Txn")]
    V1Txn {
        ops: Vec<TxnOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "RetireNode")]
    V1RetireNode { node_id: u64 },
    #[serde(rename = "LockAcquire")]
    V1LockAcquire {
        name: String,
        holder: String,
        mode: LockMode,
        ttl_ms: Option<u64>,
        details: serde_json::Value,
        wait_ms: u64,
        limits: LockLimits,
    },
    #[serde(rename = "LockRefresh")]
    V1LockRefresh {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: Option<u64>,
    },
    #[serde(rename = "LockRelease")]
    V1LockRelease {
        name: String,
        holder: String,
        token: u64,
    },
    #[serde(rename = "LockCancelWait")]
    V1LockCancelWait {
        name: String,
        holder: String,
        wait_id: u64,
    },
    #[serde(rename = "LockSweep")]
    V1LockSweep {
        names: Vec<String>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
    #[serde(rename = "WorkerRegister")]
    V1WorkerRegister {
        worker: String,
        handles: Vec<Handle>,
        capacity: u32,
        ttl_ms: u64,
        limits: OpLimits,
    },
    #[serde(rename = "WorkerHeartbeat")]
    V1WorkerHeartbeat { worker: String },
    #[serde(rename = "WorkerDeregister")]
    V1WorkerDeregister { worker: String, limits: OpLimits },
    #[serde(rename = "OpSubmit")]
    V1OpSubmit {
        target: ObjectKey,
        verb: String,
        params: serde_json::Value,
        idempotency_key: Option<String>,
        create: Option<Resource>,
        policy: OpPolicy,
        limits: OpLimits,
    },
    #[serde(rename = "OpAssign")]
    V1OpAssign {
        id: OperationId,
        worker: String,
        lock_limits: LockLimits,
    },
    #[serde(rename = "OpReport")]
    V1OpReport {
        id: OperationId,
        worker: String,
        attempt: u32,
        epoch: u64,
        report: WorkerReport,
        limits: OpLimits,
    },
    #[serde(rename = "OpAbort")]
    V1OpAbort { id: OperationId, limits: OpLimits },
    #[serde(rename = "OpSweep")]
    V1OpSweep {
        workers: Vec<String>,
        operations: Vec<OperationId>,
        grace_ms: u64,
        limits: OpLimits,
    },
    #[serde(rename = "Decommission")]
    V1Decommission {
        target: ObjectKey,
        verb: String,
        policy: OpPolicy,
        limits: OpLimits,
    },
    #[serde(rename = "Deployment")]
    V1Deployment {
        key: ObjectKey,
        action: DeploymentAction,
        limits: StatusLimits,
    },
    #[serde(rename = "Pool")]
    V1Pool {
        action: PoolAction,
        #[serde(default)]
        grace_ms: u64,
    },
    #[serde(rename = "Auth")]
    V1Auth { action: AuthAction },
    #[serde(rename = "Alarm")]
    V1Alarm { action: AlarmAction },
    #[serde(rename = "Guarded")]
    V1Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
}

impl AnyCommand {
    /// Whether it was read from format 1's tags (at the top: a format-2 writer never nests
    /// format-1 commands, and a format-1 guard is `V1Guarded`).
    pub fn is_format_1(&self) -> bool {
        !matches!(
            self,
            AnyCommand::Objects(_)
                | AnyCommand::Locks(_)
                | AnyCommand::Operations(_)
                | AnyCommand::Reservations(_)
                | AnyCommand::Deployments(_)
                | AnyCommand::Pools(_)
                | AnyCommand::Auth(_)
                | AnyCommand::Alarms(_)
                | AnyCommand::Members(_)
                | AnyCommand::Kv(_)
                | AnyCommand::Guarded { .. }
        )
    }
}

impl From<AnyCommand> for Command {
    fn from(any: AnyCommand) -> Command {
        match any {
            AnyCommand::Objects(c) => Command::Objects(c),
            AnyCommand::Locks(c) => Command::Locks(c),
            AnyCommand::Operations(c) => Command::Operations(c),
            AnyCommand::Reservations(c) => Command::Reservations(c),
            AnyCommand::Deployments(c) => Command::Deployments(c),
            AnyCommand::Pools(c) => Command::Pools(c),
            AnyCommand::Auth(c) => Command::Auth(c),
            AnyCommand::Alarms(c) => Command::Alarms(c),
            AnyCommand::Members(c) => Command::Members(c),
            AnyCommand::Kv(c) => Command::Kv(c),
            AnyCommand::Guarded {
                auth_revision,
                command,
            }
            | AnyCommand::V1Guarded {
                auth_revision,
                command,
            } => Command::Guarded {
                auth_revision,
                command,
            },
            AnyCommand::V1Create { object, fence } => {
                ObjectCommand::Create { object, fence }.into()
            }
            AnyCommand::V1Update {
                object,
                expected_revision,
                fence,
            } => ObjectCommand::Update {
                object,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1UpdateStatus {
                object,
                expected_revision,
                fence,
            } => ObjectCommand::UpdateStatus {
                object,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1Delete {
                key,
                expected_revision,
                fence,
            } => ObjectCommand::Delete {
                key,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1Txn { ops, fence } => ObjectCommand::Txn { ops, fence }.into(),
            AnyCommand::V1RetireNode { node_id } => MemberCommand::Retire { node_id }.into(),
            AnyCommand::V1LockAcquire {
                name,
                holder,
                mode,
                ttl_ms,
                details,
                wait_ms,
                limits,
            } => LockCommand::Acquire {
                name,
                holder,
                mode,
                ttl_ms,
                details,
                wait_ms,
                limits,
            }
            .into(),
            AnyCommand::V1LockRefresh {
                name,
                holder,
                token,
                ttl_ms,
            } => LockCommand::Refresh {
                name,
                holder,
                token,
                ttl_ms,
            }
            .into(),
            AnyCommand::V1LockRelease {
                name,
                holder,
                token,
            } => LockCommand::Release {
                name,
                holder,
                token,
            }
            .into(),
            AnyCommand::V1LockCancelWait {
                name,
                holder,
                wait_id,
            } => LockCommand::CancelWait {
                name,
                holder,
                wait_id,
            }
            .into(),
            AnyCommand::V1LockSweep {
                names,
                grace_ms,
                lock_delay_ms,
            } => LockCommand::Sweep {
                names,
                grace_ms,
                lock_delay_ms,
            }
            .into(),
            AnyCommand::V1WorkerRegister {
                worker,
                handles,
                capacity,
                ttl_ms,
                limits,
            } => OperationCommand::RegisterWorker {
                worker,
                handles,
                capacity,
                ttl_ms,
                limits,
            }
            .into(),
            AnyCommand::V1WorkerHeartbeat { worker } => {
                OperationCommand::Heartbeat { worker }.into()
            }
            AnyCommand::V1WorkerDeregister { worker, limits } => {
                OperationCommand::DeregisterWorker { worker, limits }.into()
            }
            AnyCommand::V1OpSubmit {
                target,
                verb,
                params,
                idempotency_key,
                create,
                policy,
                limits,
            } => OperationCommand::Submit {
                target,
                verb,
                params,
                idempotency_key,
                create,
                policy,
                limits,
            }
            .into(),
            AnyCommand::V1OpAssign {
                id,
                worker,
                lock_limits,
            } => OperationCommand::Assign {
                id,
                worker,
                lock_limits,
            }
            .into(),
            AnyCommand::V1OpReport {
                id,
                worker,
                attempt,
                epoch,
                report,
                limits,
            } => OperationCommand::Report {
                id,
                worker,
                attempt,
                epoch,
                report,
                limits,
            }
            .into(),
            AnyCommand::V1OpAbort { id, limits } => OperationCommand::Abort { id, limits }.into(),
            AnyCommand::V1OpSweep {
                workers,
                operations,
                grace_ms,
                limits,
            } => OperationCommand::Sweep {
                workers,
                operations,
                grace_ms,
                limits,
            }
            .into(),
            AnyCommand::V1Decommission {
                target,
                verb,
                policy,
                limits,
            } => ReservationCommand::Decommission {
                target,
                verb,
                policy,
                limits,
            }
            .into(),
            AnyCommand::V1Deployment {
                key,
                action,
                limits,
            } => DeploymentCommand {
                key,
                action,
                limits,
            }
            .into(),
            AnyCommand::V1Pool { action, grace_ms } => PoolCommand { action, grace_ms }.into(),
            AnyCommand::V1Auth { action } => Command::Auth(action),
            AnyCommand::V1Alarm { action } => Command::Alarms(action),
        }
    }
}

#[cfg(test)]
mod tests;
