//! The pure domain core of steward: what is stored, what may be asked, and how a committed
//! command changes the store.
//!
//! Flow: a server parses and validates a request (`Resource::from_json`, `validate_object`,
//! `Selector::parse`, each domain's `rules`), builds a `Command`, and the leader proposes it as a
//! `Proposal` stamped with its clock. Once committed, the Raft state machine calls
//! [`apply_effects`] on every replica, in log order: the one entry point that changes `State`. It
//! returns the `Response` to the proposer and fills the `Effects` (object `Event`s, `LockEvent`s,
//! `OpEvent`s, pool events) for watchers, waiting acquires and worker streams. ([`apply`] is a
//! resource-only wrapper of it for tests and tools; [`apply_blank`] applies a blank or membership
//! entry, which only advances time and term.) Reads are `State` queries (`get`, `list`, `lock`,
//! `operation`, `workers`, pools, deployments, reservations, counts) after the read barrier.
//!
//! Nothing in this crate does I/O, reads a clock, draws randomness or depends on hash order, so
//! replicas that apply the same log reach the same `State` (and the same snapshot bytes).
//!
//! One module per capability, each owning its types, rules, indexes, queries and its apply:
//! - `objects`: the typed, Kubernetes-style resources (`Resource`, `ObjectKey`, `RawJson`),
//!   their validation, label selectors, counts, and the object ops (create, update,
//!   update-status, delete, txn) in `objects/apply.rs`.
//! - `locks`: READ/WRITE locks with TTLs, fair queues, lock-delay and fencing tokens; the lock
//!   commands in `locks/apply.rs`.
//! - `operations`: lifecycle operations on resources and the workers that run them, assigned
//!   under the target's lock with the grant's token as epoch; applied in `operations/apply/`.
//! - `reservations`: resources that reserve units on a node until they expire into a
//!   decommission operation, and the per-node counters.
//! - `pools`: Boskos' leased resource pools (fair waiting acquires, request ids, expiry by
//!   state), dynamic pools, and Mason's virtual resources built from leased ones; applied in
//!   `pools/apply/`.
//! - `deployments`: EMCO's deployment status (AppContext, rsync and cluster status), the
//!   k8splugin's readiness of raw Kubernetes objects; applied in `deployments/apply.rs`.
//! - `auth`: users, roles, and what each role may do.
//! - `alarms`: alarms nodes raise through the log (NOSPACE) and what they refuse.
//! - `kv`: etcd's multi-version keyspace (byte keys, versions kept until compaction), on the
//!   store's revisions; txns and compactions in `kv/apply.rs`.
//!
//! And what they share:
//! - `command`: `Command` and its families, `Response` and the family replies, `Event`;
//!   `proposal`: `Proposal`, one log entry's payload, whose JSON is written once and copied by
//!   the log and every AppendEntries; `rejection`: `Rejection`, the domain's "no".
//! - `state`: `State`, what every capability keeps in it, and the accessors of no one capability.
//! - `effects`: `ApplyContext` and `Effects`, what every apply is given and gives back.
//! - `apply`: `apply_effects`, the cross-cutting guard (time, term, auth revision,
//!   space, mirrors) in front of each capability's apply.
//! - `snapshot`: the snapshot body and its format versions; `format`: every format in one place.
//! - `invariants`: what every entry must keep (revisions, one event each, tokens, time), checked
//!   in release builds too.
//! - `wait`: when a wait or deadline has ended (`wait_ended`), for every queue and deadline.
//! - `bugs`: deliberate bugs for the fault-injection suite's "can fail" runs (test builds only).

pub mod alarms;
pub mod apply;
pub mod auth;
pub mod bugs;
pub mod command;
pub mod deployments;
pub mod effects;
pub mod format;
pub mod invariants;
pub mod kv;
pub mod locks;
pub mod objects;
pub mod operations;
pub mod pools;
mod proposal;
pub mod rejection;
pub mod reservations;
mod snapshot;
pub mod state;
pub mod wait;

pub use alarms::AlarmReply;
pub use apply::{apply, apply_blank, apply_effects, ApplyContext, Effects, SNAPSHOT_FORMAT};
pub use auth::AuthReply;
pub use command::{
    Command, Done, Event, EventType, Family, MemberCommand, Proposal, Rejection, Response,
};
pub use deployments::command::DeploymentCommand;
pub use locks::command::{LockCommand, LockReply};
pub use locks::{
    Fence, Lock, LockEvent, LockEventType, LockHolder, LockLimits, LockMode, LockWaiter,
    LOCK_DELAY_MS_MAX, LOCK_HOLDER_CHARS_MAX, LOCK_NAME_CHARS_MAX, LOCK_SWEEP_NAMES_MAX,
    LOCK_TTL_MS_MAX, LOCK_WAIT_MS_MAX,
};
pub use objects::command::{ObjectCommand, ObjectReply, TxnOp, TXN_OPS_MAX};
pub use objects::queries::ListPage;
pub use objects::raw_json::RawJson;
pub use objects::resource::{ObjectKey, ObjectMeta, Resource, DEFAULT_NAMESPACE};
pub use objects::selector::{Requirement, Selector};
pub use objects::validate::{
    validate_api_version, validate_key, validate_kind, validate_label_key, validate_label_value,
    validate_object, validate_object_size, ANNOTATIONS_BYTES_MAX, OBJECT_BYTES_MAX,
};
pub use operations::command::{OperationCommand, OperationReply, WorkerReport};
pub use operations::{
    Dispatch, Handle, OpEvent, OpFilter, OpLimits, OpLock, OpPolicy, OpResult, OpState, OpTally,
    Operation, OperationId, OpsDue, Transition, Worker, OP_IDEMPOTENCY_KEY_CHARS_MAX,
    OP_SWEEP_ITEMS_MAX, OP_VERB_CHARS_MAX, WORKER_ID_CHARS_MAX, WORKER_TTL_MS_MAX,
};
pub use pools::command::PoolCommand;
pub use reservations::command::ReservationCommand;
pub use reservations::{
    NodeReservations, Reservation, ReservationIndex, Units, DECOMMISSION_ITEMS_MAX,
    DECOMMISSION_KEY_PREFIX,
};
pub use state::State;
