//! The replicated vocabulary: `Proposal` (one log entry's payload), `Command` and `TxnOp` (what a
//! client asks), `Response` (what `apply` answers), `Rejection` (the domain "no", which is data,
//! not an error), and `Event` (what watchers see).
//!
//! Everything here is serialized into the Raft log or sent back to clients, so renaming a variant
//! or field is a wire change. Servers build `Command`s, the leader wraps them in a `Proposal` with
//! its own clock, and only `apply.rs` interprets them.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

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
// The large variants are the common ones; boxing would change the shape other layers build.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Store a new object; rejected if its key exists.
    Create { object: Resource },
    /// Replace apiVersion, spec, labels and annotations; status and server-set metadata are kept.
    /// `generation` grows only if spec changed; an update that changes nothing is a no-op.
    Update {
        object: Resource,
        expected_revision: Option<u64>,
    },
    /// Replace status only; generation unchanged.
    UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
    },
    /// Remove an object.
    Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
    },
    /// All-or-nothing sequence of object ops, each seeing the effects of the earlier ones.
    Txn { ops: Vec<TxnOp> },
    /// Record that a node id left the cluster, so it is never admitted again.
    RetireNode { node_id: u64 },
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
            Command::Create { object } => write!(f, "create {}", object.key()),
            Command::Update { object, .. } => write!(f, "update {}", object.key()),
            Command::UpdateStatus { object, .. } => write!(f, "update-status {}", object.key()),
            Command::Delete { key, .. } => write!(f, "delete {key}"),
            Command::Txn { ops } => {
                write!(f, "txn [")?;
                for (i, op) in ops.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{op}")?;
                }
                write!(f, "]")
            }
            Command::RetireNode { node_id } => write!(f, "retire-node {node_id}"),
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
    /// RetireNode, and blank or membership entries.
    Done { revision: u64 },
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
        };
        assert_eq!(
            txn.to_string(),
            "txn [update-status Director/default/x, delete Lock/ns/l]"
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
            },
        };
        let back: Proposal =
            serde_json::from_str(&serde_json::to_string(&p).expect("ser")).expect("de");
        match back.command {
            Command::Update {
                object,
                expected_revision,
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
