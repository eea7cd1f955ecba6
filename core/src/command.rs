//! The replicated vocabulary: `Proposal` (one log entry's payload), `Command` and `TxnOp` (what a
//! client asks), `Response` (what `apply` answers), `Rejection` (the domain "no", which is data,
//! not an error), and `Event` (what watchers see).
//!
//! Everything here is serialized into the Raft log or sent back to clients, so renaming a variant
//! or field is a wire change; fields added later carry `#[serde(default)]` so older log entries
//! still parse. Servers build `Command`s, the leader wraps them in a `Proposal` with its own clock,
//! and only `apply.rs` (and `locks`, for the lock commands) interprets them.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alarms::AlarmAction;
use crate::auth::AuthAction;
use crate::deployments::DeploymentAction;
use crate::locks::Fence;
use crate::objects::resource::Resource;
use crate::pools::PoolAction;

pub use crate::alarms::AlarmReply;
pub use crate::auth::AuthReply;
pub use crate::deployments::command::DeploymentCommand;
pub use crate::kv::{KvCommand, KvReply};
pub use crate::locks::command::LockCommand;
pub use crate::locks::command::LockReply;
pub use crate::objects::command::{ObjectCommand, ObjectReply, TxnOp};
pub use crate::operations::command::{OperationCommand, OperationReply, WorkerReport};
pub use crate::pools::command::PoolCommand;
pub use crate::proposal::Proposal;
pub use crate::rejection::Rejection;
pub use crate::reservations::command::ReservationCommand;

/// A state change, by capability: each family is applied by its capability's own apply, behind
/// the cross-cutting guard of `apply_effects`. Written in log format 2 (`format.rs`): the family
/// tags are snake_case (`{"locks":{"Acquire":{..}}}`); format-1 entries (one flat enum of
/// PascalCase commands) are still read and become the same commands.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", from = "crate::format::AnyCommand")]
pub enum Command {
    /// Create, update, update-status, delete and txns of objects.
    Objects(ObjectCommand),
    /// Lock acquires, refreshes, releases, cancelled waits and sweeps.
    Locks(LockCommand),
    /// Workers and the operations they run.
    Operations(OperationCommand),
    /// The decommission of a reservation that is due.
    Reservations(ReservationCommand),
    /// Deployment status (EMCO).
    Deployments(DeploymentCommand),
    /// Leased pool resources (Boskos, Mason).
    Pools(PoolCommand),
    /// A change to users, roles, or whether authentication is on.
    Auth(AuthAction),
    /// A node raises an alarm, or an operator disarms alarms.
    Alarms(AlarmAction),
    /// Cluster membership as the state machine keeps it.
    Members(MemberCommand),
    /// etcd's keyspace: txns (puts and deletes alone are txns of one) and compactions.
    Kv(KvCommand),
    /// A client's command, authorized against users and roles at `auth_revision`: applied only
    /// if they have not changed since, else refused with `Rejection::AuthChanged`.
    Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
}

/// What the state machine keeps of cluster membership (`Command::Members`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum MemberCommand {
    /// Record that a node id left the cluster, so it is never admitted again.
    Retire { node_id: u64 },
}

macro_rules! family {
    ($($family:ty => $variant:ident),* $(,)?) => {
        $(impl From<$family> for Command {
            fn from(command: $family) -> Command {
                Command::$variant(command)
            }
        })*
    };
}

family! {
    ObjectCommand => Objects,
    LockCommand => Locks,
    OperationCommand => Operations,
    ReservationCommand => Reservations,
    DeploymentCommand => Deployments,
    PoolCommand => Pools,
    AuthAction => Auth,
    AlarmAction => Alarms,
    MemberCommand => Members,
    KvCommand => Kv,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Objects(ObjectCommand::Create { object, .. }) => {
                write!(f, "create {}", object.key())
            }
            Command::Objects(ObjectCommand::Update { object, .. }) => {
                write!(f, "update {}", object.key())
            }
            Command::Objects(ObjectCommand::UpdateStatus { object, .. }) => {
                write!(f, "update-status {}", object.key())
            }
            Command::Objects(ObjectCommand::Delete { key, .. }) => write!(f, "delete {key}"),
            Command::Objects(ObjectCommand::Txn { ops, .. }) => {
                write!(f, "txn [")?;
                for (i, op) in ops.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{op}")?;
                }
                write!(f, "]")
            }
            Command::Members(MemberCommand::Retire { node_id }) => {
                write!(f, "retire-node {node_id}")
            }
            Command::Auth(action) => write!(f, "{action}"),
            Command::Alarms(action) => write!(f, "{action}"),
            Command::Kv(KvCommand::Txn(txn)) => write!(
                f,
                "kv-txn ({} compares, {}/{} requests)",
                txn.compare.len(),
                txn.success.len(),
                txn.failure.len()
            ),
            Command::Kv(KvCommand::Compact { revision }) => write!(f, "kv-compact {revision}"),
            Command::Kv(KvCommand::LeaseGrant { id, ttl_ms }) => {
                write!(f, "kv-lease-grant {id:x} ttl {ttl_ms} ms")
            }
            Command::Kv(KvCommand::LeaseRevoke { id }) => write!(f, "kv-lease-revoke {id:x}"),
            Command::Kv(KvCommand::LeaseKeepAlive { id }) => {
                write!(f, "kv-lease-keep-alive {id:x}")
            }
            Command::Kv(KvCommand::LeaseKeepAlives { ids }) => {
                write!(f, "kv-lease-keep-alive {} leases", ids.len())
            }
            Command::Kv(KvCommand::LeaseExpire { ids, .. }) => {
                write!(f, "kv-lease-expire {} leases", ids.len())
            }
            Command::Guarded {
                auth_revision,
                command,
            } => write!(f, "{command} (auth revision {auth_revision})"),
            Command::Locks(LockCommand::Acquire {
                name, holder, mode, ..
            }) => write!(f, "lock-acquire {name} {mode} by {holder}"),
            Command::Locks(LockCommand::Refresh {
                name,
                holder,
                token,
                ..
            }) => write!(f, "lock-refresh {name} by {holder} token {token}"),
            Command::Locks(LockCommand::Release {
                name,
                holder,
                token,
            }) => write!(f, "lock-release {name} by {holder} token {token}"),
            Command::Locks(LockCommand::CancelWait {
                name,
                holder,
                wait_id,
            }) => write!(f, "lock-cancel-wait {name} by {holder} wait {wait_id}"),
            Command::Locks(LockCommand::Sweep { names, .. }) => {
                write!(f, "lock-sweep {} locks", names.len())
            }
            Command::Operations(OperationCommand::RegisterWorker {
                worker, handles, ..
            }) => write!(f, "worker-register {worker} ({} handles)", handles.len()),
            Command::Operations(OperationCommand::Heartbeat { worker }) => {
                write!(f, "worker-heartbeat {worker}")
            }
            Command::Operations(OperationCommand::DeregisterWorker { worker, .. }) => {
                write!(f, "worker-deregister {worker}")
            }
            Command::Operations(OperationCommand::Submit { target, verb, .. }) => {
                write!(f, "op-submit {verb} {target}")
            }
            Command::Operations(OperationCommand::Assign { id, worker, .. }) => {
                write!(f, "op-assign {id} to {worker}")
            }
            Command::Operations(OperationCommand::Report {
                id,
                worker,
                epoch,
                report,
                ..
            }) => write!(
                f,
                "op-report {id} {} by {worker} epoch {epoch}",
                report.state()
            ),
            Command::Operations(OperationCommand::Abort { id, .. }) => write!(f, "op-abort {id}"),
            Command::Operations(OperationCommand::Sweep {
                workers,
                operations,
                ..
            }) => write!(
                f,
                "op-sweep {} workers {} operations",
                workers.len(),
                operations.len()
            ),
            Command::Reservations(ReservationCommand::Decommission { target, verb, .. }) => {
                write!(f, "decommission {target} by {verb}")
            }
            Command::Deployments(DeploymentCommand { key, action, .. }) => {
                write!(f, "deployment-{} {key}", action.verb())
            }
            Command::Pools(PoolCommand { action, .. }) => write!(f, "pool-{}", action.verb()),
        }?;
        match self.fence() {
            Some(fence) => write!(f, " fenced by {fence}"),
            None => Ok(()),
        }
    }
}

impl Command {
    /// Whether this command may make the state bigger: it adds an object, a lock, a worker, an
    /// operation, a deployment, or replaces an object with one that may be larger. While a
    /// NOSPACE alarm is raised these are refused (`Rejection::NoSpace`); deletes, releases,
    /// heartbeats, reports, sweeps and administration pass, so space can be won back and work
    /// already under way can finish. Exhaustive on purpose: a new command must choose.
    pub fn may_grow(&self) -> bool {
        match self {
            Command::Objects(ObjectCommand::Create { .. })
            | Command::Objects(ObjectCommand::Update { .. })
            | Command::Objects(ObjectCommand::UpdateStatus { .. }) => true,
            Command::Objects(ObjectCommand::Txn { ops, .. }) => {
                ops.iter().any(|op| !matches!(op, TxnOp::Delete { .. }))
            }
            Command::Locks(LockCommand::Acquire { .. })
            | Command::Operations(OperationCommand::RegisterWorker { .. })
            | Command::Operations(OperationCommand::Submit { .. }) => true,
            Command::Deployments(DeploymentCommand { action, .. }) => matches!(
                action,
                DeploymentAction::Create { .. } | DeploymentAction::AddResources { .. }
            ),
            Command::Pools(PoolCommand { action, .. }) => matches!(
                action,
                PoolAction::Acquire { .. }
                    | PoolAction::AcquireByState { .. }
                    | PoolAction::Sync { .. }
                    | PoolAction::SyncVirtual { .. }
            ),
            Command::Guarded { command, .. } => command.may_grow(),
            Command::Kv(command) => command.may_grow(),
            Command::Objects(ObjectCommand::Delete { .. })
            | Command::Members(MemberCommand::Retire { .. })
            | Command::Locks(LockCommand::Refresh { .. })
            | Command::Locks(LockCommand::Release { .. })
            | Command::Locks(LockCommand::CancelWait { .. })
            | Command::Locks(LockCommand::Sweep { .. })
            | Command::Operations(OperationCommand::Heartbeat { .. })
            | Command::Operations(OperationCommand::DeregisterWorker { .. })
            | Command::Operations(OperationCommand::Assign { .. })
            | Command::Operations(OperationCommand::Report { .. })
            | Command::Operations(OperationCommand::Abort { .. })
            | Command::Operations(OperationCommand::Sweep { .. })
            | Command::Reservations(ReservationCommand::Decommission { .. })
            | Command::Auth(_)
            | Command::Alarms(_) => false,
        }
    }

    /// The fence of a resource write, if it carries one.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Command::Objects(command) => command.fence(),
            Command::Locks(_)
            | Command::Operations(_)
            | Command::Reservations(_)
            | Command::Deployments(_)
            | Command::Pools(_)
            | Command::Auth(_)
            | Command::Alarms(_)
            | Command::Members(_)
            | Command::Kv(_)
            | Command::Guarded { .. } => None,
        }
    }
}

/// What `apply` answers for one command. `revision` is always the store revision after the
/// command (unchanged for a no-op update).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Response {
    /// Object commands, and the deployment and pool commands (which answer the objects they
    /// wrote).
    Objects(ObjectReply),
    /// Lock commands.
    Locks(LockReply),
    /// Operation, worker and reservation commands.
    Operations(OperationReply),
    /// Auth commands.
    Auth(AuthReply),
    /// Alarm commands.
    Alarms(AlarmReply),
    /// Keyspace commands (etcd's API).
    Kv(KvReply),
    /// Member commands, blank or membership entries.
    Done { revision: u64 },
    /// The command changed nothing (except, possibly, the state's time).
    Rejected(Rejection),
}

/// A command family and the reply its apply gives: `Node::propose` takes a family's command and
/// returns its reply (or the rejection, or an error for any other reply, which is a bug).
pub trait Family: Into<Command> {
    /// What an applied command of this family answers.
    type Reply;
    /// The family's reply in `response`; `Err` gives back a reply of another family (boxed:
    /// only a bug takes that path).
    fn reply(response: Response) -> Result<Self::Reply, Box<Response>>;
}

macro_rules! replies {
    ($($family:ty => $variant:ident($reply:ty)),* $(,)?) => {
        $(impl Family for $family {
            type Reply = $reply;
            fn reply(response: Response) -> Result<$reply, Box<Response>> {
                match response {
                    Response::$variant(reply) => Ok(reply),
                    other => Err(Box::new(other)),
                }
            }
        })*
    };
}

replies! {
    ObjectCommand => Objects(ObjectReply),
    DeploymentCommand => Objects(ObjectReply),
    PoolCommand => Objects(ObjectReply),
    LockCommand => Locks(LockReply),
    OperationCommand => Operations(OperationReply),
    ReservationCommand => Operations(OperationReply),
    AuthAction => Auth(AuthReply),
    AlarmAction => Alarms(AlarmReply),
    KvCommand => Kv(KvReply),
}

/// What a member command answers: the store revision after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub revision: u64,
}

impl Family for MemberCommand {
    type Reply = Done;
    fn reply(response: Response) -> Result<Done, Box<Response>> {
        match response {
            Response::Done { revision } => Ok(Done { revision }),
            other => Err(Box::new(other)),
        }
    }
}

/// What a change did to one object, for watchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One object change. `revision` equals the object's resourceVersion (for `Deleted`, the
/// deletion revision); events of one command come out in revision order.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub event_type: EventType,
    pub revision: u64,
    /// Shared so that fanning one event out to many watchers does not copy the object.
    pub object: Arc<Resource>,
    /// The object under the same key just before this change: `None` for `Added`, the stored
    /// object for `Modified` and `Deleted` (the very `Arc` the store held, so no copy). A list
    /// page pinned to an earlier revision is the current state with the later events undone,
    /// newest first (`State::list_as_of`); this is what undoing puts back. Never persisted.
    pub prev: Option<Arc<Resource>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::resource::ObjectKey;

    #[test]
    fn proposal_display_names_verb_key_and_time() {
        let obj = Resource::new("v1", "Director", "default", "x");
        let p = Proposal::new(
            1234,
            None,
            None,
            Command::Objects(ObjectCommand::Create {
                object: obj.clone(),
                fence: None,
            }),
        );
        assert_eq!(p.to_string(), "create Director/default/x @1234");
        let txn = Command::Objects(ObjectCommand::Txn {
            ops: vec![
                TxnOp::UpdateStatus {
                    object: obj,
                    expected_revision: None,
                },
                TxnOp::Delete {
                    key: ObjectKey::new("Lock", "ns", "l"),
                    expected_revision: Some(3),
                },
            ],
            fence: Some(Fence {
                lock: "deploy/x".into(),
                token: 7,
            }),
        });
        assert_eq!(
            txn.to_string(),
            "txn [update-status Director/default/x, delete Lock/ns/l] fenced by deploy/x:7"
        );
        assert_eq!(
            Command::Members(MemberCommand::Retire { node_id: 7 }).to_string(),
            "retire-node 7"
        );
    }

    #[test]
    fn rejection_messages() {
        let key = ObjectKey::new("Lock", "default", "l");
        let nested = Rejection::TxnOpFailed {
            index: 2,
            cause: Box::new(Rejection::Conflict {
                key,
                expected: 4,
                actual: 9,
            }),
        };
        assert_eq!(
            nested.to_string(),
            "txn op 2: conflict on Lock/default/l: expected resourceVersion 4, found 9"
        );
        assert_eq!(
            Rejection::NodeRetired { node_id: 3 }.to_string(),
            "node id 3 was removed from the cluster and cannot be reused"
        );
    }

    #[test]
    fn proposal_and_response_round_trip_through_json() {
        let mut obj = Resource::new("v1", "Director", "default", "x");
        obj.metadata.resource_version = 5;
        let p = Proposal::new(
            9,
            None,
            None,
            Command::Objects(ObjectCommand::Update {
                object: obj.clone(),
                expected_revision: Some(5),
                fence: None,
            }),
        );
        let back: Proposal =
            serde_json::from_str(&serde_json::to_string(&p).expect("ser")).expect("de");
        match &*back.command {
            Command::Objects(ObjectCommand::Update {
                object,
                expected_revision,
                fence: None,
            }) => assert_eq!((object, *expected_revision), (&obj, Some(5))),
            other => panic!("{other:?}"),
        }
        for r in [
            Response::Objects(ObjectReply::Object {
                object: obj,
                revision: 5,
            }),
            Response::Done { revision: 1 },
            Response::Rejected(Rejection::TxnOpFailed {
                index: 0,
                cause: Box::new(Rejection::NotFound {
                    key: ObjectKey::new("A", "b", "c"),
                }),
            }),
        ] {
            let text = serde_json::to_string(&r).expect("ser");
            assert_eq!(serde_json::from_str::<Response>(&text).expect("de"), r);
        }
    }
}
