//! Core WAL API traits.

pub mod state_machine;
pub mod wal;
pub mod wal_types;
