//! The lock commands: acquire, refresh, release, cancel a wait, and the leader's sweep.

use serde::{Deserialize, Serialize};

use crate::locks::{LockHolder, LockLimits, LockMode};

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

/// What a lock command answers.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum LockReply {
    /// Acquire granted at once (or re-acquired: refreshed, upgraded, downgraded).
    Granted { holder: LockHolder },
    /// Acquire queued; `position` is 1-based (1: next in line). The grant, if it comes, is a
    /// `LockEvent` of type `Granted` carrying this `wait_id`.
    Queued { wait_id: u64, position: u32 },
    /// Release: this token is no longer valid.
    Released { token: u64 },
    /// Refresh: the grant with its new expiry.
    Refreshed { holder: LockHolder },
    /// CancelWait: the waiter is gone; `released_token` is the grant it had already been given,
    /// now released.
    WaitCancelled { released_token: Option<u64> },
    /// Sweep: holders expired, waiters timed out, waiters granted.
    Swept {
        expired: u32,
        waiters_expired: u32,
        granted: u32,
    },
    /// A command that found nothing to do; the store revision.
    Done { revision: u64 },
}
