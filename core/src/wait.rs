//! When a wait or a deadline has ended: the one rule every fair queue and deadline in the pure
//! core uses (lock waiters, pool claims, operation deadlines), called by apply at each point that
//! could grant or assign, by the sweeps that remove what ended, and by the leader's plans that
//! propose those sweeps, so no two of them ever disagree about the same entry.

/// Whether something that may wait until `until_ms` has ended at leader time `now_ms`. It ends
/// *at* its time, not after: a caller that asked to wait `wait_ms` from `t` has been answered
/// (Aborted, LOCK_WAIT_EXPIRED or POOL_WAIT_EXPIRED) by `t + wait_ms`, so a grant at that
/// instant could go to nobody.
pub(crate) fn wait_ended(until_ms: u64, now_ms: u64) -> bool {
    until_ms <= now_ms
}
