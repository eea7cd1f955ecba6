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

use super::locks::{Fence, LockHolder, LockLimits, LockMode};
use super::resource::{ObjectKey, Resource};

/// The payload of one replicated log entry. The leader stamps `time_ms` when it proposes, so every
/// replica applies the same time (see `State::time_ms`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    /// Leader wall-clock time in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What to do.
    pub command: Command,
}

impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @{}", self.command, self.time_ms)
    }
}

/// A state change a client asked for. Applied by `apply`, which re-checks everything.
///
/// Every resource write may carry a `fence`: it is applied only if that lock token is, at that
/// point of the log, a live WRITE holder of that lock (see `locks`), else it is refused with
/// `Rejection::FenceRejected` and changes nothing.
// The large variants are the common ones; boxing would change the shape other layers build.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Store a new object; rejected if its key exists.
    Create {
        object: Resource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Replace apiVersion, spec, labels and annotations; status and server-set metadata are kept.
    /// `generation` grows only if spec changed; an update that changes nothing is a no-op.
    Update {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Replace status only; generation unchanged.
    UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Remove an object.
    Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// All-or-nothing sequence of object ops, each seeing the effects of the earlier ones. One
    /// fence covers the whole txn.
    Txn {
        ops: Vec<TxnOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    /// Record that a node id left the cluster, so it is never admitted again.
    RetireNode { node_id: u64 },
    /// Take lock `name` in `mode` for `holder`: granted at once, or (when `wait_ms` > 0) queued
    /// until granted, cancelled, or past `wait_ms`. `limits` are the leader's configured limits,
    /// carried in the entry so every replica judges with the same ones.
    LockAcquire {
        name: String,
        holder: String,
        mode: LockMode,
        /// `None`: held until released.
        ttl_ms: Option<u64>,
        /// `lockedResourceDetails` or any JSON object; null for none.
        details: serde_json::Value,
        wait_ms: u64,
        limits: LockLimits,
    },
    /// Extend a grant: new expiry = now + ttl. `ttl_ms: None` keeps the grant's ttl.
    LockRefresh {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: Option<u64>,
    },
    /// Give a grant back.
    LockRelease {
        name: String,
        holder: String,
        token: u64,
    },
    /// The waiter of `wait_id` gave up (its deadline passed or its caller went away): remove it,
    /// or, if it was granted meanwhile, release that grant. Unknown waits are a no-op.
    LockCancelWait {
        name: String,
        holder: String,
        wait_id: u64,
    },
    /// Proposed by the leader's expiry task for the names `State::locks_due` gave it: expire
    /// holders and waiters past their time, apply lock-delay, grant the queue. Apply re-checks
    /// everything, including the grace after a leader change.
    LockSweep {
        names: Vec<String>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
}

/// One step of a `Command::Txn`; same meaning as the `Command` of the same name.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum TxnOp {
    Create {
        object: Resource,
    },
    Update {
        object: Resource,
        expected_revision: Option<u64>,
    },
    UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
    },
    Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
    },
}

impl TxnOp {
    /// The key this op touches.
    pub fn key(&self) -> ObjectKey {
        match self {
            TxnOp::Create { object }
            | TxnOp::Update { object, .. }
            | TxnOp::UpdateStatus { object, .. } => object.key(),
            TxnOp::Delete { key, .. } => key.clone(),
        }
    }

    /// The same op as a single command, under `fence`.
    pub fn into_command(self, fence: Option<Fence>) -> Command {
        match self {
            TxnOp::Create { object } => Command::Create { object, fence },
            TxnOp::Update {
                object,
                expected_revision,
            } => Command::Update {
                object,
                expected_revision,
                fence,
            },
            TxnOp::UpdateStatus {
                object,
                expected_revision,
            } => Command::UpdateStatus {
                object,
                expected_revision,
                fence,
            },
            TxnOp::Delete {
                key,
                expected_revision,
            } => Command::Delete {
                key,
                expected_revision,
                fence,
            },
        }
    }

    fn verb(&self) -> &'static str {
        match self {
            TxnOp::Create { .. } => "create",
            TxnOp::Update { .. } => "update",
            TxnOp::UpdateStatus { .. } => "update-status",
            TxnOp::Delete { .. } => "delete",
        }
    }
}

impl fmt::Display for TxnOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb(), self.key())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Create { object, .. } => write!(f, "create {}", object.key()),
            Command::Update { object, .. } => write!(f, "update {}", object.key()),
            Command::UpdateStatus { object, .. } => write!(f, "update-status {}", object.key()),
            Command::Delete { key, .. } => write!(f, "delete {key}"),
            Command::Txn { ops, .. } => {
                write!(f, "txn [")?;
                for (i, op) in ops.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{op}")?;
                }
                write!(f, "]")
            }
            Command::RetireNode { node_id } => write!(f, "retire-node {node_id}"),
            Command::LockAcquire {
                name, holder, mode, ..
            } => write!(f, "lock-acquire {name} {mode} by {holder}"),
            Command::LockRefresh {
                name,
                holder,
                token,
                ..
            } => write!(f, "lock-refresh {name} by {holder} token {token}"),
            Command::LockRelease {
                name,
                holder,
                token,
            } => write!(f, "lock-release {name} by {holder} token {token}"),
            Command::LockCancelWait {
                name,
                holder,
                wait_id,
            } => write!(f, "lock-cancel-wait {name} by {holder} wait {wait_id}"),
            Command::LockSweep { names, .. } => write!(f, "lock-sweep {} locks", names.len()),
        }?;
        match self.fence() {
            Some(fence) => write!(f, " fenced by {fence}"),
            None => Ok(()),
        }
    }
}

impl Command {
    /// The fence of a resource write, if it carries one.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            Command::Create { fence, .. }
            | Command::Update { fence, .. }
            | Command::UpdateStatus { fence, .. }
            | Command::Delete { fence, .. }
            | Command::Txn { fence, .. } => fence.as_ref(),
            _ => None,
        }
    }
}

/// What `apply` answers for one command. `revision` is always the store revision after the
/// command (unchanged for a no-op update).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Response {
    /// Create/update/update-status: the object as stored. Delete: the object as deleted, its
    /// resourceVersion set to the deletion revision.
    Object { object: Resource, revision: u64 },
    /// One object per op, as `Object` would have returned it.
    Txn {
        objects: Vec<Resource>,
        revision: u64,
    },
    /// RetireNode, blank or membership entries, and lock commands that found nothing to do.
    Done { revision: u64 },
    /// LockAcquire granted at once (or re-acquired: refreshed, upgraded, downgraded).
    LockGranted { holder: LockHolder },
    /// LockAcquire queued; `position` is 1-based (1: next in line). The grant, if it comes,
    /// is a `LockEvent` of type `Granted` carrying this `wait_id`.
    LockQueued { wait_id: u64, position: u32 },
    /// LockRelease: this token is no longer valid.
    LockReleased { token: u64 },
    /// LockRefresh: the grant with its new expiry.
    LockRefreshed { holder: LockHolder },
    /// LockCancelWait: the waiter is gone; `released_token` is the grant it had already been
    /// given, now released.
    LockWaitCancelled { released_token: Option<u64> },
    /// LockSweep: holders expired, waiters timed out, waiters granted.
    LockSwept {
        expired: u32,
        waiters_expired: u32,
        granted: u32,
    },
    /// The command changed nothing (except, possibly, the state's time).
    Rejected(Rejection),
}

/// Why a command was refused. These are answers, not failures: they are replicated like any
/// other response, and each message names the field and the rule.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("{key} already exists")]
    AlreadyExists { key: ObjectKey },
    #[error("{key} not found")]
    NotFound { key: ObjectKey },
    #[error("conflict on {key}: expected resourceVersion {expected}, found {actual}")]
    Conflict {
        key: ObjectKey,
        expected: u64,
        actual: u64,
    },
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    #[error("{field}: {rule}")]
    TooLarge { field: String, rule: String },
    #[error("txn op {index}: {cause}")]
    TxnOpFailed { index: usize, cause: Box<Rejection> },
    #[error("node id {node_id} was removed from the cluster and cannot be reused")]
    NodeRetired { node_id: u64 },
    /// `wait_ms` was 0 and the lock cannot be granted now.
    #[error(
        "lock {name} is busy: held in {mode_held} mode by {holders} holder(s) with {waiters} \
         waiting before you; pass wait_ms > 0 to queue"
    )]
    LockBusy {
        name: String,
        /// The mode of the current holders (of the first waiter when nobody holds it).
        mode_held: LockMode,
        holders: u32,
        waiters: u32,
    },
    /// `wait_ms` was 0 and the lock is in lock-delay after a WRITE holder expired.
    #[error(
        "lock {name} is in lock-delay until {until_ms} ms (a WRITE holder expired without \
         releasing it); pass wait_ms > 0 to queue"
    )]
    LockDelayed { name: String, until_ms: u64 },
    /// Refresh or release named a holder and token that hold no grant: a stale or wrong token.
    #[error(
        "lock {name}: holder {holder} holds no grant with token {token} (released, expired, \
         superseded by an upgrade or downgrade, or never granted)"
    )]
    LockNotHeld {
        name: String,
        holder: String,
        token: u64,
    },
    /// A fenced write whose token is not a live WRITE holder of its lock.
    #[error("fence {lock}:{token} refused: {reason}")]
    FenceRejected {
        lock: String,
        token: u64,
        reason: String,
    },
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposal_display_names_verb_key_and_time() {
        let obj = Resource::new("v1", "Director", "default", "x");
        let p = Proposal {
            time_ms: 1234,
            command: Command::Create {
                object: obj.clone(),
                fence: None,
            },
        };
        assert_eq!(p.to_string(), "create Director/default/x @1234");
        let txn = Command::Txn {
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
        };
        assert_eq!(
            txn.to_string(),
            "txn [update-status Director/default/x, delete Lock/ns/l] fenced by deploy/x:7"
        );
        assert_eq!(
            Command::RetireNode { node_id: 7 }.to_string(),
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
        let p = Proposal {
            time_ms: 9,
            command: Command::Update {
                object: obj.clone(),
                expected_revision: Some(5),
                fence: None,
            },
        };
        let back: Proposal =
            serde_json::from_str(&serde_json::to_string(&p).expect("ser")).expect("de");
        match back.command {
            Command::Update {
                object,
                expected_revision,
                fence: None,
            } => assert_eq!((object, expected_revision), (obj.clone(), Some(5))),
            other => panic!("{other:?}"),
        }
        for r in [
            Response::Object {
                object: obj,
                revision: 5,
            },
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
