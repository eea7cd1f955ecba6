//! The queue: who may be granted now (compatible modes, lock-delay, holders_max), the grant of
//! waiters in order after any change, and the waiters whose wait has ended.

use super::*;

/// Queue an acquire at the back. `no_room`: the lock entry would be new and the table is full.
pub(super) fn enqueue(
    lock: &mut Lock,
    req: &Acquire<'_>,
    ctx: &LockContext,
    no_room: Option<Rejection>,
    events: &mut Vec<LockEvent>,
) -> Result<Response, Rejection> {
    if let Some(rejection) = no_room {
        return Err(rejection);
    }
    let now = ctx.now_ms;
    let waiters_max = req.limits.waiters_max;
    let waiting = live_waiters(lock, now);
    if waiting >= usize_of(waiters_max) {
        let what = format!("lock {} already has {waiting} waiters", lock.name);
        return Err(at_limit("waiters", what, "locks.waiters_max", waiters_max));
    }
    // The ended ones leave first (they hold no place, see `blocker`), with their events.
    drop_ended_waiters(lock, now, events);
    lock.waiters.push_back(LockWaiter {
        wait_id: ctx.log_index,
        holder: req.holder.to_string(),
        mode: req.mode,
        ttl_ms: req.ttl_ms,
        details: req.details.clone(),
        queued_at_ms: now,
        wait_until_ms: now.saturating_add(req.wait_ms),
        holders_max: req.limits.holders_max,
    });
    Ok(Response::Locks(LockReply::Queued {
        wait_id: ctx.log_index,
        position: u32_of(lock.waiters.len()),
    }))
}

/// `LockBusy`, counting only the waiters whose wait has not ended at `now` (the others are
/// dropped at the next grant point and hold no place in the queue).
pub(super) fn busy(lock: &Lock, now: u64) -> Rejection {
    let live = lock
        .waiters
        .iter()
        .filter(|w| !wait_ended(w.wait_until_ms, now));
    let front = live.clone().next().map(|w| w.mode);
    Rejection::LockBusy {
        name: lock.name.clone(),
        mode_held: lock.mode().or(front).unwrap_or(LockMode::Write),
        holders: u32_of(lock.holders.len()),
        waiters: u32_of(live.count()),
    }
}

/// How many waiters have not ended their wait at `now`.
pub(super) fn live_waiters(lock: &Lock, now: u64) -> usize {
    let live = lock
        .waiters
        .iter()
        .filter(|w| !wait_ended(w.wait_until_ms, now));
    live.count()
}

/// Removes every waiter whose wait has ended at `now`, each with the `WaitExpired` event the
/// sweep emits (the acquire call waiting on it, if still there, answers Aborted, LOCK_WAIT_EXPIRED).
/// Returns how many went.
pub(super) fn drop_ended_waiters(lock: &mut Lock, now: u64, events: &mut Vec<LockEvent>) -> u32 {
    if live_waiters(lock, now) == lock.waiters.len() {
        return 0;
    }
    let (ended, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut lock.waiters)
        .into_iter()
        .partition(|w| wait_ended(w.wait_until_ms, now));
    lock.waiters = waiting.into();
    for w in &ended {
        events.push(waiter_event(LockEventType::WaitExpired, lock, w, now));
    }
    u32_of(ended.len())
}

/// Whether a new holder in `mode` is compatible with the current holders.
pub(super) fn compatible(lock: &Lock, mode: LockMode) -> bool {
    match mode {
        LockMode::Read => lock.mode() != Some(LockMode::Write),
        LockMode::Write => lock.holders.is_empty() || second_writer_allowed(lock),
    }
}

/// `Bug::DoubleWriteGrant` (test builds only): a second WRITE holder beside a lone WRITE
/// holder. Decided from the lock alone, so every replica grants the same.
pub(super) fn second_writer_allowed(lock: &Lock) -> bool {
    crate::bugs::active(crate::bugs::Bug::DoubleWriteGrant)
        && lock.holders.len() == 1
        && lock.mode() == Some(LockMode::Write)
}

/// Where the front waiter's grant goes.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    /// A new holder.
    New,
    /// The waiter's holder holds the lock already: refresh, upgrade or downgrade it.
    Existing(usize),
}

pub(super) fn grant_slot(lock: &Lock, w: &LockWaiter) -> Option<Slot> {
    match lock.holders.iter().position(|h| h.holder == w.holder) {
        // Never happens (nobody queues under the name of an operation's grant, since the name
        // is refused while that grant exists and an operation is never granted over a queue),
        // but if it did, the operation's grant must not change: the waiter waits for its end.
        Some(i) if lock.holders[i].operation.is_some() => None,
        Some(i) => {
            let upgrade = lock.holders[i].mode == LockMode::Read && w.mode == LockMode::Write;
            (!upgrade || lock.holders.len() == 1).then_some(Slot::Existing(i))
        }
        None => {
            let fits = lock.holders.len() < usize_of(w.holders_max);
            (fits && compatible(lock, w.mode)).then_some(Slot::New)
        }
    }
}

/// Grants from the front of the queue while the front can be granted: consecutive READs
/// together, a WRITE only alone; nothing while lock-delay is in force (a passed delay is
/// cleared). Waiters whose wait has ended are dropped first, never granted. Returns how many
/// waiters were granted.
pub(super) fn grant_queue(
    lock: &mut Lock,
    now: u64,
    last_token: &mut u64,
    events: &mut Vec<LockEvent>,
) -> u32 {
    drop_ended_waiters(lock, now, events);
    if lock.delay_active(now) {
        return 0;
    }
    lock.delay_until_ms = None;
    let mut granted = 0;
    while let Some(slot) = lock.waiters.front().and_then(|w| grant_slot(lock, w)) {
        let same_mode = |i: usize, w: &LockWaiter| lock.holders[i].mode == w.mode;
        let token = match (slot, lock.waiters.front()) {
            (Slot::Existing(i), Some(w)) if same_mode(i, w) => Ok(lock.holders[i].token),
            _ => next_token(last_token),
        };
        let (Ok(token), Some(w)) = (token, lock.waiters.pop_front()) else {
            break;
        };
        let i = match slot {
            Slot::New => {
                lock.holders.push(LockHolder {
                    holder: w.holder,
                    mode: w.mode,
                    token,
                    granted_at_ms: now,
                    ttl_ms: w.ttl_ms,
                    expires_at_ms: expiry(now, w.ttl_ms),
                    details: w.details,
                    wait_id: Some(w.wait_id),
                    operation: None,
                });
                lock.holders.len() - 1
            }
            Slot::Existing(i) => {
                let h = &mut lock.holders[i];
                regrant(h, w.mode, token, w.ttl_ms, &w.details, Some(w.wait_id), now);
                i
            }
        };
        events.push(holder_event(
            LockEventType::Granted,
            lock,
            &lock.holders[i],
            now,
        ));
        granted += 1;
    }
    granted
}

/// Re-grants an existing holder in `mode`: the same mode is a refresh (same token and grant
/// time), another mode an upgrade or downgrade (the new `token`, granted now).
pub(super) fn regrant(
    h: &mut LockHolder,
    mode: LockMode,
    token: u64,
    ttl_ms: Option<u64>,
    details: &Value,
    wait_id: Option<u64>,
    now: u64,
) {
    if h.mode != mode {
        h.granted_at_ms = now;
    }
    h.mode = mode;
    h.token = token;
    h.ttl_ms = ttl_ms;
    h.expires_at_ms = expiry(now, ttl_ms);
    h.details = details.clone();
    h.wait_id = wait_id;
}
