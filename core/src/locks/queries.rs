//! Reads of the lock table, and what the leader's lock sweeper asks.

use crate::locks::Lock;
use crate::state::State;

impl State {
    /// One lock by name.
    pub fn lock(&self, name: &str) -> Option<&Lock> {
        self.locks.get(name)
    }

    /// All locks in name order.
    pub fn locks(&self) -> impl Iterator<Item = &Lock> {
        self.locks.iter()
    }

    /// Number of lock entries (what `locks.locks_max` bounds).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// The last fencing token issued, for any lock (0 before the first grant).
    pub fn last_lock_token(&self) -> u64 {
        self.locks.last_token()
    }

    /// Lock names with something for a `LockSweep` to do at `now_ms` (a holder past its expiry,
    /// a waiter past its deadline, or a lock-delay that has ended), earliest first, at most
    /// `LOCK_SWEEP_NAMES_MAX`. For the leader's expiry task; apply re-checks everything.
    pub fn locks_due(&self, now_ms: u64) -> Vec<String> {
        self.locks.due(now_ms)
    }
}
