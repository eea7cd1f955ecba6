//! The lock commands as `LockTable` methods: acquire, refresh, release, cancel-wait and sweep,
//! plus the queue grant that follows every change to holders, waiters or lock-delay.
//!
//! Each command runs its checks before its first mutation (inside `LockTable::with_lock`), so a
//! `Rejection` leaves the table, the token counter and the event list exactly as they were.
//!
//! A waiter whose wait has ended (`wait_ended` at the entry's time) is never granted, even when
//! its cancel was never proposed (no leader, pending full, auth changed): its caller was already
//! told LOCK_WAIT_EXPIRED, so a grant would go to nobody and, without a ttl, hold the lock for
//! ever. Every grant point (`grant_queue`, in `queue.rs`) first drops such waiters with the `WaitExpired` event
//! the sweep emits, and they are no queue for a new acquire (`blocker`, `enqueue`).

use crate::command::LockReply;
use serde_json::Value;

use super::rules::{
    at_limit, check_details, check_holder, check_name, check_sweep, check_ttl, check_wait, u32_of,
    usize_of,
};
use super::{
    Lock, LockEvent, LockEventType, LockHolder, LockLimits, LockMode, LockTable, LockWaiter,
};
use crate::command::{LockCommand, Response};
use crate::operations::OperationId;
use crate::rejection::Rejection;
use crate::wait::wait_ended;

mod queue;

use queue::{busy, compatible, drop_ended_waiters, enqueue, grant_queue, live_waiters, regrant};

/// What a lock command needs to know about the entry being applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockContext {
    /// `State::time_ms` including this entry: the leader time every decision uses.
    pub(crate) now_ms: u64,
    /// Log index of the entry: the wait id of an acquire it queues.
    pub(crate) log_index: u64,
    /// `State::term_started_ms`: leader time of the current term's first stamped entry.
    pub(crate) term_started_ms: Option<u64>,
    /// The store revision, for `LockReply::Done` (lock commands never change it).
    pub(crate) revision: u64,
}

/// A borrowed `Command::LockAcquire`.
struct Acquire<'a> {
    name: &'a str,
    holder: &'a str,
    mode: LockMode,
    ttl_ms: Option<u64>,
    details: &'a Value,
    wait_ms: u64,
    limits: LockLimits,
    /// Set when an operation's assignment takes the grant (never by a client command).
    operation: Option<OperationId>,
}

/// An operation's assignment asking for its target's lock: see
/// `LockTable::acquire_for_operation`.
pub(crate) struct OperationGrant<'a> {
    pub(crate) name: &'a str,
    /// `op-17@worker-1`: one holder per assignment, so two assignments never share a grant.
    pub(crate) holder: &'a str,
    pub(crate) mode: LockMode,
    /// `lockedResourceDetails` of the operation.
    pub(crate) details: &'a Value,
    pub(crate) limits: LockLimits,
    pub(crate) operation: OperationId,
}

impl LockTable {
    /// For an operation's assignment: grants `grant.name` to `grant.holder` now, without ttl,
    /// owned by `grant.operation`, by the rules of a `LockAcquire` that does not wait (so
    /// `LockBusy`, `LockDelayed` or a limit when it cannot be granted now; a holder of that name
    /// already on the lock is `LockBusy`). A `Rejection` changes nothing.
    pub(crate) fn acquire_for_operation(
        &mut self,
        ctx: &LockContext,
        grant: &OperationGrant<'_>,
        events: &mut Vec<LockEvent>,
    ) -> Result<LockHolder, Rejection> {
        let req = Acquire {
            name: grant.name,
            holder: grant.holder,
            mode: grant.mode,
            ttl_ms: None,
            details: grant.details,
            wait_ms: 0,
            limits: grant.limits,
            operation: Some(grant.operation),
        };
        match self.acquire(ctx, &req, events)? {
            Response::Locks(LockReply::Granted { holder }) => Ok(holder),
            // An acquire with wait_ms 0 is granted or refused, never queued.
            other => Err(Rejection::Invalid {
                field: "wait_ms".to_string(),
                rule: format!("an operation's acquire must not wait (answered {other:?})"),
            }),
        }
    }

    /// For an operation's assignment that ends or is taken back: releases the grant
    /// `operation` holds as `holder` with `token`, then serves the queue.
    pub(crate) fn release_for_operation(
        &mut self,
        ctx: &LockContext,
        name: &str,
        holder: &str,
        token: u64,
        operation: OperationId,
        events: &mut Vec<LockEvent>,
    ) -> Result<(), Rejection> {
        self.release(ctx, name, holder, token, Some(operation), events)
            .map(|_| ())
    }

    /// Takes the next store-wide token without granting anything: the epoch of an assignment
    /// that locks nothing, from the same counter so epochs and tokens never repeat.
    pub(crate) fn issue_token(&mut self) -> Result<u64, Rejection> {
        next_token(&mut self.last_token)
    }

    /// Whether a new holder in `mode` would be granted `name` at `now` (free, compatible, no
    /// queue, no lock-delay, under `holders_max`). For the leader's dispatch plan; apply
    /// decides again.
    pub(crate) fn grantable(&self, name: &str, mode: LockMode, holders_max: u32, now: u64) -> bool {
        self.locks
            .get(name)
            .is_none_or(|lock| blocker(lock, mode, holders_max, now).is_none())
    }

    /// Applies one lock command. Pushes a `LockEvent` per grant, release, expiry and removed
    /// waiter.
    pub(crate) fn apply_command(
        &mut self,
        ctx: &LockContext,
        cmd: &LockCommand,
        events: &mut Vec<LockEvent>,
    ) -> Response {
        let events_before = events.len();
        let result = match cmd {
            LockCommand::Acquire {
                name,
                holder,
                mode,
                ttl_ms,
                details,
                wait_ms,
                limits,
            } => {
                let req = Acquire {
                    name,
                    holder,
                    mode: *mode,
                    ttl_ms: *ttl_ms,
                    details,
                    wait_ms: *wait_ms,
                    limits: *limits,
                    operation: None,
                };
                self.acquire(ctx, &req, events)
            }
            LockCommand::Refresh {
                name,
                holder,
                token,
                ttl_ms,
            } => self.refresh(ctx, name, holder, *token, *ttl_ms),
            LockCommand::Release {
                name,
                holder,
                token,
            } => self.release(ctx, name, holder, *token, None, events),
            LockCommand::CancelWait {
                name,
                holder,
                wait_id,
            } => self.cancel_wait(ctx, name, holder, *wait_id, events),
            LockCommand::Sweep {
                names,
                grace_ms,
                lock_delay_ms,
            } => self.sweep(ctx, names, *grace_ms, *lock_delay_ms, events),
        };
        result.unwrap_or_else(|rejection| {
            debug_assert_eq!(events.len(), events_before, "a rejection emitted events");
            Response::Rejected(rejection)
        })
    }

    /// Grant at once if the lock is free for `mode` (or re-acquire by a holder: refresh, upgrade,
    /// downgrade); else queue when `wait_ms` > 0, or refuse.
    fn acquire(
        &mut self,
        ctx: &LockContext,
        req: &Acquire<'_>,
        events: &mut Vec<LockEvent>,
    ) -> Result<Response, Rejection> {
        check_name(req.name)?;
        check_holder(req.holder)?;
        check_ttl(req.ttl_ms)?;
        check_wait(req.wait_ms)?;
        check_details(req.details, &req.limits)?;
        let locks_max = req.limits.locks_max;
        let no_room = (!self.locks.contains_key(req.name)
            && self.locks.len() >= usize_of(locks_max))
        .then(|| {
            let what = format!(
                "{} locks exist and lock {} would be new",
                self.len(),
                req.name
            );
            at_limit("name", what, "locks.locks_max", locks_max)
        });
        let now = ctx.now_ms;
        self.with_lock(req.name, now, |lock, last_token| {
            if let Some(i) = lock.holders.iter().position(|h| h.holder == req.holder) {
                if req.operation.is_some() {
                    return Err(busy(lock, now));
                }
                check_owner(lock, &lock.holders[i], None)?;
                return reacquire(lock, i, req, ctx, last_token, events);
            }
            if let Some(blocker) = blocker(lock, req.mode, req.limits.holders_max, now) {
                if req.wait_ms == 0 {
                    return Err(blocker.rejection(lock, now));
                }
                return enqueue(lock, req, ctx, no_room, events);
            }
            if let Some(rejection) = no_room {
                return Err(rejection);
            }
            let token = next_token(last_token)?;
            // Not in force (or it would block), so it has passed.
            lock.delay_until_ms = None;
            drop_ended_waiters(lock, now, events);
            let holder = LockHolder {
                holder: req.holder.to_string(),
                mode: req.mode,
                token,
                granted_at_ms: now,
                ttl_ms: req.ttl_ms,
                expires_at_ms: expiry(now, req.ttl_ms),
                details: req.details.clone(),
                wait_id: None,
                operation: req.operation,
            };
            events.push(holder_event(LockEventType::Granted, lock, &holder, now));
            lock.holders.push(holder.clone());
            Ok(Response::Locks(LockReply::Granted { holder }))
        })
    }

    /// Extend the grant `holder` holds with `token`: expiry = now + ttl (`None`: keep its ttl).
    fn refresh(
        &mut self,
        ctx: &LockContext,
        name: &str,
        holder: &str,
        token: u64,
        ttl_ms: Option<u64>,
    ) -> Result<Response, Rejection> {
        check_name(name)?;
        check_holder(holder)?;
        check_ttl(ttl_ms)?;
        let now = ctx.now_ms;
        self.with_lock(name, now, |lock, _| {
            let i = grant_index(lock, holder, token)?;
            check_owner(lock, &lock.holders[i], None)?;
            let h = &mut lock.holders[i];
            h.ttl_ms = ttl_ms.or(h.ttl_ms);
            h.expires_at_ms = expiry(now, h.ttl_ms);
            Ok(Response::Locks(LockReply::Refreshed { holder: h.clone() }))
        })
    }

    /// Remove the grant `holder` holds with `token` (owned by `operation`, `None` for a
    /// client's), then serve the queue.
    fn release(
        &mut self,
        ctx: &LockContext,
        name: &str,
        holder: &str,
        token: u64,
        operation: Option<OperationId>,
        events: &mut Vec<LockEvent>,
    ) -> Result<Response, Rejection> {
        check_name(name)?;
        check_holder(holder)?;
        let now = ctx.now_ms;
        self.with_lock(name, now, |lock, last_token| {
            let i = grant_index(lock, holder, token)?;
            check_owner(lock, &lock.holders[i], operation)?;
            let released = lock.holders.remove(i);
            events.push(holder_event(LockEventType::Released, lock, &released, now));
            grant_queue(lock, now, last_token, events);
            Ok(Response::Locks(LockReply::Released { token }))
        })
    }

    /// The waiter `wait_id` of `holder` gave up: remove it, or release the grant it got
    /// meanwhile. Idempotent: an unknown wait is `Done`.
    fn cancel_wait(
        &mut self,
        ctx: &LockContext,
        name: &str,
        holder: &str,
        wait_id: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Response, Rejection> {
        check_name(name)?;
        check_holder(holder)?;
        let waiter_of = |w: &LockWaiter| w.wait_id == wait_id && w.holder == holder;
        let grant_of = |h: &LockHolder| h.wait_id == Some(wait_id) && h.holder == holder;
        let known = self.locks.get(name).is_some_and(|lock| {
            lock.waiters.iter().any(waiter_of) || lock.holders.iter().any(grant_of)
        });
        if !known {
            return Ok(done(ctx));
        }
        let now = ctx.now_ms;
        self.with_lock(name, now, |lock, last_token| {
            let mut released_token = None;
            if let Some(i) = lock.waiters.iter().position(waiter_of) {
                if let Some(w) = lock.waiters.remove(i) {
                    let event = waiter_event(LockEventType::WaitCancelled, lock, &w, now);
                    events.push(event);
                }
            } else if let Some(i) = lock.holders.iter().position(grant_of) {
                let released = lock.holders.remove(i);
                events.push(holder_event(LockEventType::Released, lock, &released, now));
                released_token = Some(released.token);
            }
            grant_queue(lock, now, last_token, events);
            Ok(Response::Locks(LockReply::WaitCancelled { released_token }))
        })
    }

    /// Expire what is past its time in the named locks, then serve their queues; nothing at all
    /// until `grace_ms` after the current term's first stamped entry.
    fn sweep(
        &mut self,
        ctx: &LockContext,
        names: &[String],
        grace_ms: u64,
        lock_delay_ms: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Response, Rejection> {
        check_sweep(names, lock_delay_ms)?;
        let now = ctx.now_ms;
        let past_grace = ctx
            .term_started_ms
            .is_some_and(|started| now >= started.saturating_add(grace_ms));
        if !past_grace {
            return Ok(done(ctx));
        }
        let mut tally = Tally::default();
        for name in names {
            if self.locks.contains_key(name) {
                self.with_lock(name, now, |lock, last_token| {
                    sweep_lock(lock, now, lock_delay_ms, last_token, events, &mut tally);
                    Ok(())
                })?;
            }
        }
        Ok(Response::Locks(LockReply::Swept {
            expired: tally.expired,
            waiters_expired: tally.waiters_expired,
            granted: tally.granted,
        }))
    }
}

/// What one sweep did, over all its locks.
#[derive(Default)]
struct Tally {
    expired: u32,
    waiters_expired: u32,
    granted: u32,
}

/// Expire holders and waiters due by `now`, start lock-delay if a WRITE holder expired, then
/// grant from the queue.
fn sweep_lock(
    lock: &mut Lock,
    now: u64,
    lock_delay_ms: u64,
    last_token: &mut u64,
    events: &mut Vec<LockEvent>,
    tally: &mut Tally,
) {
    let due = |at: u64| wait_ended(at, now);
    let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut lock.holders)
        .into_iter()
        .partition(|h| h.expires_at_ms.is_some_and(due));
    lock.holders = kept;
    for h in &expired {
        events.push(holder_event(LockEventType::Expired, lock, h, now));
        if h.mode == LockMode::Write && lock_delay_ms > 0 {
            lock.delay_until_ms = Some(now.saturating_add(lock_delay_ms));
        }
    }
    let late = drop_ended_waiters(lock, now, events);
    tally.expired = tally.expired.saturating_add(u32_of(expired.len()));
    tally.waiters_expired = tally.waiters_expired.saturating_add(late);
    let granted = grant_queue(lock, now, last_token, events);
    tally.granted = tally.granted.saturating_add(granted);
}

/// A holder asks again: the same mode refreshes the grant (same token; new ttl, details and
/// expiry); WRITE -> READ downgrades (new token; the queue is served, so waiting READs at its
/// front join); READ -> WRITE upgrades (new token) when it is the only holder, and otherwise
/// waits for the other readers like any acquire (refused when `wait_ms` is 0). An upgrade or
/// downgrade does not wait behind the queue: the holder already has the lock.
fn reacquire(
    lock: &mut Lock,
    i: usize,
    req: &Acquire<'_>,
    ctx: &LockContext,
    last_token: &mut u64,
    events: &mut Vec<LockEvent>,
) -> Result<Response, Rejection> {
    let held = lock.holders[i].mode;
    if held == LockMode::Read && req.mode == LockMode::Write && lock.holders.len() > 1 {
        if req.wait_ms == 0 {
            return Err(busy(lock, ctx.now_ms));
        }
        return enqueue(lock, req, ctx, None, events);
    }
    let token = if held == req.mode {
        lock.holders[i].token
    } else {
        next_token(last_token)?
    };
    let now = ctx.now_ms;
    // An explicit re-acquire owns the grant from now on: a late cancel of the wait it may have
    // come from must not release it.
    let h = &mut lock.holders[i];
    regrant(h, req.mode, token, req.ttl_ms, req.details, None, now);
    let holder = h.clone();
    if held != req.mode {
        events.push(holder_event(LockEventType::Granted, lock, &holder, now));
    }
    if held == LockMode::Write && req.mode == LockMode::Read {
        grant_queue(lock, now, last_token, events);
    }
    Ok(Response::Locks(LockReply::Granted { holder }))
}

/// Why an acquire by a new holder cannot be granted now, first reason first.
enum Blocker {
    /// Lock-delay is in force until then.
    Delayed(u64),
    /// Others wait already, and their waits have not ended (FIFO: no jumping the queue).
    Queue,
    /// The held mode excludes the asked one.
    Mode,
    /// The lock has `locks.holders_max` holders.
    HoldersMax(u32),
}

fn blocker(lock: &Lock, mode: LockMode, holders_max: u32, now: u64) -> Option<Blocker> {
    if let Some(until) = lock.delay_until_ms.filter(|&until| until > now) {
        Some(Blocker::Delayed(until))
    } else if live_waiters(lock, now) > 0 {
        Some(Blocker::Queue)
    } else if !compatible(lock, mode) {
        Some(Blocker::Mode)
    } else if lock.holders.len() >= usize_of(holders_max) {
        Some(Blocker::HoldersMax(holders_max))
    } else {
        None
    }
}

impl Blocker {
    fn rejection(&self, lock: &Lock, now: u64) -> Rejection {
        match self {
            Blocker::Delayed(until_ms) => Rejection::LockDelayed {
                name: lock.name.clone(),
                until_ms: *until_ms,
                remaining_ms: until_ms.saturating_sub(now),
            },
            Blocker::Queue | Blocker::Mode => busy(lock, now),
            Blocker::HoldersMax(max) => {
                let what = format!(
                    "lock {} already has {} holders",
                    lock.name,
                    lock.holders.len()
                );
                at_limit("holders", what, "locks.holders_max", *max)
            }
        }
    }
}

/// `LockOwnedByOperation` unless the grant belongs to `operation` (`None`: a client's grant).
fn check_owner(
    lock: &Lock,
    h: &LockHolder,
    operation: Option<OperationId>,
) -> Result<(), Rejection> {
    match h.operation {
        owner if owner == operation => Ok(()),
        Some(owner) => Err(Rejection::LockOwnedByOperation {
            name: lock.name.clone(),
            holder: h.holder.clone(),
            operation: owner,
        }),
        None => Err(Rejection::LockNotHeld {
            name: lock.name.clone(),
            holder: h.holder.clone(),
            token: h.token,
        }),
    }
}

/// The position of the grant `holder` holds with `token`, or `LockNotHeld`.
fn grant_index(lock: &Lock, holder: &str, token: u64) -> Result<usize, Rejection> {
    let found = lock
        .holders
        .iter()
        .position(|h| h.holder == holder && h.token == token);
    found.ok_or_else(|| Rejection::LockNotHeld {
        name: lock.name.clone(),
        holder: holder.to_string(),
        token,
    })
}

/// Takes the next store-wide token (only on success, so a failure leaves the counter as is).
fn next_token(last_token: &mut u64) -> Result<u64, Rejection> {
    let token = last_token
        .checked_add(1)
        .ok_or_else(|| Rejection::TooLarge {
            field: "token".to_string(),
            rule: "the lock token counter is exhausted".to_string(),
        })?;
    *last_token = token;
    Ok(token)
}

fn expiry(now: u64, ttl_ms: Option<u64>) -> Option<u64> {
    ttl_ms.map(|ttl| now.saturating_add(ttl))
}

fn done(ctx: &LockContext) -> Response {
    Response::Locks(LockReply::Done {
        revision: ctx.revision,
    })
}

fn holder_event(event_type: LockEventType, lock: &Lock, h: &LockHolder, now: u64) -> LockEvent {
    LockEvent {
        event_type,
        name: lock.name.clone(),
        holder: h.holder.clone(),
        mode: h.mode,
        token: h.token,
        wait_id: h.wait_id,
        time_ms: now,
    }
}

fn waiter_event(event_type: LockEventType, lock: &Lock, w: &LockWaiter, now: u64) -> LockEvent {
    LockEvent {
        event_type,
        name: lock.name.clone(),
        holder: w.holder.clone(),
        mode: w.mode,
        token: 0,
        wait_id: Some(w.wait_id),
        time_ms: now,
    }
}
