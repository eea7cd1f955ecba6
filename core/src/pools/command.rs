//! The pool command: a lease, heartbeat, release, reset or sync of pool resources.

use serde::{Deserialize, Serialize};

use crate::pools::PoolAction;

/// A pool command (`Command::Pools`), applied by `pools/apply.rs`. `grace_ms` is the grace after
/// a leader change during which a reset resets nothing (as for lock sweeps).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolCommand {
    pub action: PoolAction,
    #[serde(default)]
    pub grace_ms: u64,
}
