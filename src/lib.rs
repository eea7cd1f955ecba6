//! steward: a Raft-replicated coordinator for control planes.
//!
//! Components, from the wire inwards:
//! - `server`: gRPC services (client API and peer service), forwarding, watch hub, membership,
//!   auth and client limits, and the tasks that propose: leader-only (lock sweeper, operation
//!   scheduler and sweeper, reservation decommissions, pool reaper, Mason) and per node (the
//!   space monitor's NOSPACE alarm).
//! - `raft`: openraft adapters: type config, redb log store, state machine, tonic peer network.
//! - `state`: the PURE domain, the `steward-core` crate (core/), re-exported under this name:
//!   `apply_effects(&mut State, &ApplyContext, &Command, &mut Effects)`; resources, the lock
//!   table, operations and workers, reservations, leased pools and Mason, deployment status,
//!   users and roles, alarms; no I/O, no clock, no randomness, and no dependency that could
//!   bring any (the compiler keeps it so: it cannot name tokio, tonic or openraft).
//! - `client`: the Rust client used by the CLI, workers, tests, jepsen/ and bench/.
//! - `cli`: the `steward` command line.
//! - `wire`: the metadata keys and ErrorInfo domain the server sets and the client reads, once.
//!
//! Write flow: client -> any node's `Resources` service -> validate -> (follower: forward to the
//! leader over the peer service) -> leader stamps time and proposes a `Proposal` -> majority fsync
//! -> every node applies it in log order -> the response goes back; watchers get the events.
//!
//! Operation flow: `Operations.Submit` on any node -> `OpSubmit` (with the server's per-verb
//! policy) -> the leader's scheduler proposes `OpAssign` for what `State::ops_dispatchable`
//! offers -> every node applies it and its `Workers.Assignments` streams send it to the worker
//! -> the worker's `Workers.Report` (with the assignment's attempt and epoch) -> `OpReport`.
//!
//! Read flow: linearizable reads take a read index from the leader (ReadIndex), wait until the
//! local state machine has applied it, then read locally; serializable reads read locally.

pub mod bugs;
pub mod cli;
pub mod client;
pub mod config;
pub mod metrics;
pub mod proto;
#[cfg(test)]
mod proto_lint;
pub mod raft;
pub mod seam;
pub mod server;
pub use steward_core as state;
pub mod tls;
pub mod wire;
