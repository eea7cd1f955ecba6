//! The object commands: create, update, update-status, delete, and a txn of them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::locks::Fence;
use crate::objects::resource::{ObjectKey, Resource};

/// Most ops in one `ObjectCommand::Txn` (etcd's default `--max-txn-ops`).
pub const TXN_OPS_MAX: usize = 128;

/// A change to stored objects (`Command::Objects`), applied by `objects/apply.rs`.
///
/// Every one may carry a `fence`: it is applied only if that lock token is, at that point of the
/// log, a live WRITE holder of that lock (see `locks`), else it is refused with
/// `Rejection::FenceRejected` and changes nothing.
// The large variants are the common ones; boxing would change the shape other layers build.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ObjectCommand {
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
}

impl ObjectCommand {
    /// The fence this write carries, if any.
    pub fn fence(&self) -> Option<&Fence> {
        match self {
            ObjectCommand::Create { fence, .. }
            | ObjectCommand::Update { fence, .. }
            | ObjectCommand::UpdateStatus { fence, .. }
            | ObjectCommand::Delete { fence, .. }
            | ObjectCommand::Txn { fence, .. } => fence.as_ref(),
        }
    }
}

/// One step of an `ObjectCommand::Txn`; same meaning as the `Command` of the same name.
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
            TxnOp::Create { object } => Command::Objects(ObjectCommand::Create { object, fence }),
            TxnOp::Update {
                object,
                expected_revision,
            } => Command::Objects(ObjectCommand::Update {
                object,
                expected_revision,
                fence,
            }),
            TxnOp::UpdateStatus {
                object,
                expected_revision,
            } => Command::Objects(ObjectCommand::UpdateStatus {
                object,
                expected_revision,
                fence,
            }),
            TxnOp::Delete {
                key,
                expected_revision,
            } => Command::Objects(ObjectCommand::Delete {
                key,
                expected_revision,
                fence,
            }),
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

/// What an object command answers (and a deployment or pool command: the objects it wrote).
/// `revision` is the store revision after the command (unchanged for a no-op update).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum ObjectReply {
    /// Create/update/update-status: the object as stored. Delete: the object as deleted, its
    /// resourceVersion set to the deletion revision.
    Object { object: Resource, revision: u64 },
    /// One object per op, as `Object` would have returned it.
    Txn {
        objects: Vec<Resource>,
        revision: u64,
    },
}
