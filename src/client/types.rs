//! The values the client hands out and takes in (pages, options, txn ops, watch events), and
//! their conversion from and to the wire types.

use std::pin::Pin;

use futures::Stream;
use serde_json::Value;
use tonic::Status;

use super::{parse_object, Consistency, EventType};
use crate::proto::v1 as pb;

/// One page of a list, or all pages of `list_all`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    pub items: Vec<Value>,
    /// The store revision the (first) page was read at; watch from `revision + 1` to see every
    /// later change.
    pub revision: u64,
    /// Empty on the last page.
    pub continue_token: String,
}

/// Everything a list request can say; `Default` is "all namespaces, no selector, server page
/// size, linearizable".
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Empty: all namespaces.
    pub namespace: String,
    pub label_selector: String,
    /// Page size; 0 = the server's default.
    pub limit: u32,
    pub continue_token: String,
    pub consistency: Consistency,
}

/// Everything a watch request can say.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Empty: all namespaces.
    pub namespace: String,
    pub label_selector: String,
    /// First revision delivered (inclusive); 0 = only changes after the watch starts.
    pub start_revision: u64,
    /// 0 = the server's default.
    pub bookmark_interval_ms: u32,
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TxnOp {
    Create(Value),
    Update {
        object: Value,
        expected_revision: u64,
    },
    UpdateStatus {
        object: Value,
        expected_revision: u64,
    },
    Delete {
        kind: String,
        namespace: String,
        name: String,
        expected_revision: u64,
    },
}

/// The outcome of a committed transaction: one object per op, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnResult {
    pub objects: Vec<Value>,
    pub revision: u64,
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub revision: u64,
    /// `None` for BOOKMARK.
    pub object: Option<Value>,
}

/// The events of one watch; ends with an error when the server cuts it off.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

/// Ops carry no fence of their own: the server ignores them; `TxnRequest.fence` guards the txn.
pub(super) fn txn_op_to_proto(op: TxnOp) -> pb::TxnOp {
    use pb::txn_op::Op;
    let op = match op {
        TxnOp::Create(object) => Op::Create(pb::CreateRequest {
            object_json: object.to_string(),
            fence: None,
        }),
        TxnOp::Update {
            object,
            expected_revision,
        } => Op::Update(pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
            fence: None,
        }),
        TxnOp::UpdateStatus {
            object,
            expected_revision,
        } => Op::UpdateStatus(pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
            fence: None,
        }),
        TxnOp::Delete {
            kind,
            namespace,
            name,
            expected_revision,
        } => Op::Delete(pb::DeleteRequest {
            kind,
            namespace,
            name,
            expected_revision,
            fence: None,
        }),
    };
    pb::TxnOp { op: Some(op) }
}

pub(super) fn watch_event_from_proto(event: pb::WatchEvent) -> Result<WatchEvent, Status> {
    let event_type = match EventType::try_from(event.r#type) {
        Ok(EventType::Unspecified) | Err(_) => {
            return Err(Status::internal(format!(
                "the server sent an unknown watch event type {}",
                event.r#type
            )))
        }
        Ok(t) => t,
    };
    let object = if event.object_json.is_empty() {
        None
    } else {
        Some(parse_object(&event.object_json)?)
    };
    Ok(WatchEvent {
        event_type,
        revision: event.revision,
        object,
    })
}
