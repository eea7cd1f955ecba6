//! Replicated READ/WRITE locks with TTLs, fair waiting, lock-delay and fencing tokens.
//!
//! A `Lock` is a named entry with holders (many READ or one WRITE) and a FIFO queue of waiters.
//! Only `apply` changes locks (through `LockTable`'s `apply_*` methods in `ops`), on every
//! replica in log order, with the leader-stamped time of the entry (`State::time_ms`): there is
//! no clock here, no I/O, no randomness, and every decision iterates ordered collections.
//!
//! Safety rests on three rules:
//! - **One log order for expiry and fencing.** A holder past its expiry is still a holder until a
//!   `LockSweep` entry removes it, so "is token T a live WRITE holder?" (the fence check a
//!   resource write makes in the same apply step) and "may somebody else be granted?" are always
//!   answered by the same state at the same log position.
//! - **Tokens only grow.** Every grant (and every upgrade or downgrade) takes the next value of
//!   one store-wide counter, so a token is greater than every token ever issued for any lock,
//!   even after an idle lock's entry was dropped.
//! - **No early expiry across leader changes.** A sweep expires nothing until `grace_ms` of
//!   leader time has passed since the first time-stamped entry of the current term (see
//!   `State::term_started_ms`), so a new leader whose clock runs ahead cannot cut a grant short
//!   by more than that grace, and a deposed leader's sweeps never commit in a newer term. After a
//!   WRITE holder expires, the lock stays closed for `lock_delay_ms` (Chubby's lock-delay) so a
//!   paused holder has time to notice before anyone else can write.
//!
//! A grant an operation's assignment takes (`LockHolder::operation`, see `operations`) belongs
//! to that assignment: it has no ttl, no client command may refresh, release or re-acquire it
//! (`LockOwnedByOperation`), and it ends in the step that ends or takes back the assignment.
//!
//! Queries (`State::lock`, `State::locks`, `State::locks_due`) read the same table; the leader's
//! expiry task uses `locks_due` to decide which names to put in a `LockSweep`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::operations::OperationId;
use crate::rejection::Rejection;

mod apply;
pub mod command;
#[cfg(test)]
mod expiry_tests;
#[cfg(test)]
mod proptests;
mod queries;
mod rules;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod time_tests;
#[cfg(test)]
mod wait_tests;

pub(crate) use apply::{LockContext, OperationGrant};
pub(crate) use rules::check_name;

/// Longest lock name (a deployment id fits with room to spare).
pub const LOCK_NAME_CHARS_MAX: usize = 253;
/// Longest holder id.
pub const LOCK_HOLDER_CHARS_MAX: usize = 253;
/// Longest ttl a grant may ask for: 24 h. Longer holds should be released and re-taken, or held
/// without ttl (until released).
pub const LOCK_TTL_MS_MAX: u64 = 86_400_000;
/// Longest an acquire may wait in the queue: 1 h.
pub const LOCK_WAIT_MS_MAX: u64 = 3_600_000;
/// Longest lock-delay a sweep may impose: 1 h.
pub const LOCK_DELAY_MS_MAX: u64 = 3_600_000;
/// Most names `State::locks_due` returns, and most names one `LockSweep` may carry, so one sweep
/// entry stays small and quick to apply.
pub const LOCK_SWEEP_NAMES_MAX: usize = 1000;

/// READ holders share a lock; a WRITE holder has it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum LockMode {
    Read,
    Write,
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockMode::Read => "READ",
            LockMode::Write => "WRITE",
        })
    }
}

/// One grant of a lock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockHolder {
    /// Client-chosen id, e.g. `backup-manager@10.0.2.2`; unique among a lock's holders.
    pub holder: String,
    pub mode: LockMode,
    /// Fencing token of this grant; a new one for every grant, upgrade and downgrade.
    pub token: u64,
    /// Leader time of the grant (a refresh keeps it).
    pub granted_at_ms: u64,
    /// `None`: held until released.
    pub ttl_ms: Option<u64>,
    /// Grant or last refresh time + ttl. Past it, the holder is still a holder until a sweep
    /// expires it (see the module doc for why).
    pub expires_at_ms: Option<u64>,
    /// `lockedResourceDetails` {resourceGroup, resourceType, resourceId, operation}, any JSON
    /// object, or null.
    pub details: serde_json::Value,
    /// The queued acquire this grant came from, if it waited; `LockCancelWait` finds it by this.
    pub wait_id: Option<u64>,
    /// The operation whose assignment took this grant (see `operations`). Such a grant has no
    /// ttl and ends with the assignment; no client command may refresh, release or re-acquire
    /// it, so the operation's lock cannot be taken away while its worker runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationId>,
}

/// One queued acquire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockWaiter {
    /// Log index of the acquire entry: unique, and increasing along the queue.
    pub wait_id: u64,
    pub holder: String,
    pub mode: LockMode,
    pub ttl_ms: Option<u64>,
    pub details: serde_json::Value,
    pub queued_at_ms: u64,
    /// From this time on (`wait::wait_ended`) its caller has given up: it is never granted, and
    /// a sweep or the next grant point removes it (`WaitExpired`).
    pub wait_until_ms: u64,
    /// `locks.holders_max` when it was queued: it is granted only while fewer hold the
    /// lock, so waiting never lets a lock exceed the limit it was admitted under.
    pub holders_max: u32,
}

/// A named lock: its holders, its queue and its lock-delay. Kept in the table while any of them
/// is non-empty; dropped when idle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lock {
    pub name: String,
    /// In grant order. Either all READ, or exactly one WRITE.
    pub holders: Vec<LockHolder>,
    /// FIFO: only the front may be granted, so a queued WRITE keeps later READs behind it.
    pub waiters: VecDeque<LockWaiter>,
    /// Set when a WRITE holder expired; nobody is granted before it.
    pub delay_until_ms: Option<u64>,
}

/// The leader's configured limits, carried in each `LockAcquire` so every replica applies the
/// same ones. Each has a `TooLarge` rejection naming its config key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockLimits {
    /// `locks.holders_max`: holders of one lock.
    pub holders_max: u32,
    /// `locks.waiters_max`: waiters of one lock.
    pub waiters_max: u32,
    /// `locks.locks_max`: lock entries in the store.
    pub locks_max: u32,
    /// `locks.details_bytes_max`: `details` as compact JSON.
    pub details_bytes_max: u32,
}

/// "Apply this write only while `token` is a live WRITE holder of `lock`."
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub lock: String,
    pub token: u64,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.lock, self.token)
    }
}

/// What happened to a grant or a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockEventType {
    /// A grant, upgrade, downgrade, or a queued re-acquire satisfied by a refresh.
    Granted,
    Released,
    /// A sweep removed a holder past its expiry.
    Expired,
    WaitCancelled,
    /// A waiter's wait ended before it was granted: removed by a sweep, or by the grant point
    /// (release, cancel, acquire, downgrade) that found it ended.
    WaitExpired,
}

/// One lock change, for watchers and for the acquire calls waiting on their `wait_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LockEvent {
    pub event_type: LockEventType,
    pub name: String,
    pub holder: String,
    pub mode: LockMode,
    /// The grant's token; 0 for wait events.
    pub token: u64,
    pub wait_id: Option<u64>,
    /// Leader time of the entry that caused it.
    pub time_ms: u64,
}

impl Lock {
    fn new(name: &str) -> Lock {
        Lock {
            name: name.to_string(),
            holders: Vec::new(),
            waiters: VecDeque::new(),
            delay_until_ms: None,
        }
    }

    /// The grant of `holder`, if it holds the lock.
    pub fn holder(&self, holder: &str) -> Option<&LockHolder> {
        self.holders.iter().find(|h| h.holder == holder)
    }

    /// WRITE if a WRITE holder has it, READ if READ holders do, `None` if nobody holds it.
    pub fn mode(&self) -> Option<LockMode> {
        self.holders.iter().map(|h| h.mode).max()
    }

    /// Whether lock-delay still blocks grants at `now_ms`.
    pub fn delay_active(&self, now_ms: u64) -> bool {
        self.delay_until_ms.is_some_and(|until| until > now_ms)
    }

    /// The earliest time a sweep has something to do here: a holder's expiry, a waiter's
    /// deadline, or the end of lock-delay (then the queue can move, or the entry can go).
    pub fn next_due_ms(&self) -> Option<u64> {
        let expiries = self.holders.iter().filter_map(|h| h.expires_at_ms);
        let deadlines = self.waiters.iter().map(|w| w.wait_until_ms);
        expiries.chain(deadlines).chain(self.delay_until_ms).min()
    }

    /// Nothing held, nobody waiting, no lock-delay in force: the entry can be dropped.
    fn is_idle(&self, now_ms: u64) -> bool {
        self.holders.is_empty() && self.waiters.is_empty() && !self.delay_active(now_ms)
    }

    /// The structural invariants every lock keeps after every apply (and a snapshot must obey).
    fn check_invariants(&self, last_token: u64) -> Result<(), String> {
        let name = &self.name;
        let writers = self.holders.iter().filter(|h| h.mode == LockMode::Write);
        // Bug::DoubleWriteGrant breaks this rule on purpose (two WRITE holders, and what
        // they become: one may downgrade to READ beside the other): without the exception a
        // debug build would stop at the assertion, not show the checker the overlap.
        let shared_by_bug =
            crate::bugs::active(crate::bugs::Bug::DoubleWriteGrant) && self.holders.len() >= 2;
        if writers.count() > 0 && self.holders.len() != 1 && !shared_by_bug {
            return Err(format!("lock {name}: a WRITE holder shares the lock"));
        }
        let mut holders = BTreeSet::new();
        let mut tokens = BTreeSet::new();
        for h in &self.holders {
            if !holders.insert(&h.holder) {
                return Err(format!("lock {name}: holder {} holds it twice", h.holder));
            }
            if h.token == 0 || h.token > last_token || !tokens.insert(h.token) {
                return Err(format!(
                    "lock {name}: token {} is 0, repeated, or above the last issued {last_token}",
                    h.token
                ));
            }
        }
        let ids = self.waiters.iter().map(|w| w.wait_id);
        if !ids.clone().zip(ids.skip(1)).all(|(a, b)| a < b) {
            return Err(format!(
                "lock {name}: wait ids are not increasing along the queue"
            ));
        }
        Ok(())
    }
}

/// All locks, the token counter, and a deadline index. Owned by `State`; changed only by the
/// `apply_*` methods (called from `apply`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LockTable {
    /// By name, so listings and sweeps are in a deterministic order.
    locks: BTreeMap<String, Lock>,
    /// `(next_due_ms, name)` of every lock that has one. Derived from `locks` (rebuilt on
    /// restore, not stored) so `locks_due` reads only what is due, not the whole table.
    due: BTreeSet<(u64, String)>,
    /// The last fencing token issued, for any lock; 0 before the first grant.
    last_token: u64,
}

impl LockTable {
    pub(crate) fn get(&self, name: &str) -> Option<&Lock> {
        self.locks.get(name)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lock> {
        self.locks.values()
    }

    pub(crate) fn len(&self) -> usize {
        self.locks.len()
    }

    pub(crate) fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Sets the token counter, for tests of the invariant checks.
    #[cfg(test)]
    pub(crate) fn set_last_token_for_test(&mut self, token: u64) {
        self.last_token = token;
    }

    /// Names with something for a sweep to do at `now_ms`, earliest due first, at most
    /// `LOCK_SWEEP_NAMES_MAX`.
    /// The earliest time any lock has something for a sweep to do.
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        self.due.first().map(|(at, _)| *at)
    }

    pub(crate) fn due(&self, now_ms: u64) -> Vec<String> {
        let range = match now_ms.checked_add(1) {
            Some(end) => self.due.range(..(end, String::new())),
            None => self.due.range(..),
        };
        range
            .take(LOCK_SWEEP_NAMES_MAX)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// `Ok` if `fence.token` is a live WRITE holder of `fence.lock`, else `FenceRejected`
    /// saying which part failed.
    pub(crate) fn check_fence(&self, fence: &Fence) -> Result<(), Rejection> {
        let reason = match self.locks.get(&fence.lock) {
            None => "the lock is not held by anyone".to_string(),
            Some(lock) => match lock.holders.iter().find(|h| h.token == fence.token) {
                None => format!(
                    "no holder of lock {} has this token (it was released, expired, or \
                     superseded; the lock is {})",
                    fence.lock,
                    match lock.mode() {
                        Some(mode) => format!("held in {mode} mode"),
                        None => "free".to_string(),
                    }
                ),
                Some(h) if h.mode != LockMode::Write => format!(
                    "{} holds this token in READ mode; fenced writes need a WRITE holder",
                    h.holder
                ),
                Some(_) => return Ok(()),
            },
        };
        Err(Rejection::FenceRejected {
            lock: fence.lock.clone(),
            token: fence.token,
            reason,
        })
    }

    /// The snapshot body's view: locks in name order and the token counter.
    pub(crate) fn parts(&self) -> (Vec<&Lock>, u64) {
        (self.locks.values().collect(), self.last_token)
    }

    /// Rebuilds a table from `parts`, checking every invariant.
    pub(crate) fn from_parts(locks: Vec<Lock>, last_token: u64) -> Result<LockTable, String> {
        let mut table = LockTable {
            last_token,
            ..LockTable::default()
        };
        for lock in locks {
            lock.check_invariants(last_token)?;
            if let Some(due) = lock.next_due_ms() {
                table.due.insert((due, lock.name.clone()));
            }
            let name = lock.name.clone();
            if table.locks.insert(name.clone(), lock).is_some() {
                return Err(format!("snapshot holds lock {name} twice"));
            }
        }
        Ok(table)
    }

    /// Runs `change` on lock `name` (a fresh empty lock if absent) and then keeps the table's
    /// rules: the entry is dropped when idle, its deadline re-indexed, its invariants asserted.
    /// `change` must run all its checks before its first mutation, so that on `Err` the lock
    /// (and the token counter, handed in as a copy) is exactly as it was; nothing is stored then.
    fn with_lock<T>(
        &mut self,
        name: &str,
        now_ms: u64,
        change: impl FnOnce(&mut Lock, &mut u64) -> Result<T, Rejection>,
    ) -> Result<T, Rejection> {
        let mut fresh = None;
        let (existed, lock) = match self.locks.get_mut(name) {
            Some(lock) => (true, lock),
            None => (false, fresh.insert(Lock::new(name))),
        };
        let due_before = lock.next_due_ms();
        let mut token = self.last_token;
        let out = change(lock, &mut token)?;
        debug_assert!(token >= self.last_token, "the token counter went backwards");
        debug_assert_eq!(lock.check_invariants(token), Ok(()));
        let (due_after, idle) = (lock.next_due_ms(), lock.is_idle(now_ms));
        self.last_token = token;
        if let Some(due) = due_before {
            self.due.remove(&(due, name.to_string()));
        }
        if idle {
            self.locks.remove(name);
            return Ok(out);
        }
        if let Some(due) = due_after {
            self.due.insert((due, name.to_string()));
        }
        if let (false, Some(lock)) = (existed, fresh) {
            self.locks.insert(name.to_string(), lock);
        }
        Ok(out)
    }
}
