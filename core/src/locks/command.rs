//! The lock commands: acquire, refresh, release, cancel a wait, and the leader's sweep.

use serde::{Deserialize, Serialize};

use crate::locks::{LockLimits, LockMode};

/// A lock command (`Command::Locks`), applied by `locks/apply.rs`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LockCommand {
    /// Take lock `name` in `mode` for `holder`: granted at once, or (when `wait_ms` > 0) queued
    /// until granted, cancelled, or past `wait_ms`. `limits` are the leader's configured limits,
    /// carried in the entry so every replica judges with the same ones.
    Acquire {
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
    Refresh {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: Option<u64>,
    },
    /// Give a grant back.
    Release {
        name: String,
        holder: String,
        token: u64,
    },
    /// The waiter of `wait_id` gave up (its deadline passed or its caller went away): remove it,
    /// or, if it was granted meanwhile, release that grant. Unknown waits are a no-op.
    CancelWait {
        name: String,
        holder: String,
        wait_id: u64,
    },
    /// Proposed by the leader's expiry task for the names `State::locks_due` gave it: expire
    /// holders and waiters past their time, apply lock-delay, grant the queue. Apply re-checks
    /// everything, including the grace after a leader change.
    Sweep {
        names: Vec<String>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
}
