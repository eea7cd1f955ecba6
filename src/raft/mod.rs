//! openraft adapters: the type configuration, the redb-backed log store and state machine, the
//! snapshot file, and the tonic peer transport.
//!
//! Only `server` builds these (at node start-up) and hands them to `openraft::Raft`; everything
//! else talks to Raft through `types::Raft` and reads the state via `StateMachine::state`.

pub mod backup;
pub mod log_store;
pub mod message_size;
pub mod network;
pub mod snapshot;
pub mod state_machine;
pub mod types;
