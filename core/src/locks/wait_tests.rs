//! Table-driven lock sequences about waits that ended without a sweep (issue 20): the waiter's
//! cancel was never proposed, so the next grant point finds it in the queue. It must never be
//! granted, must leave with the `WaitExpired` event a sweep would emit, and must not make a new
//! acquire queue behind it or be refused because of it.

use super::tests::*;
use super::*;
use crate::command::{Command, Response};
use LockEventType::{Granted, Released, WaitCancelled, WaitExpired};

#[derive(Clone, Copy, PartialEq)]
enum Live {
    None,
    Ahead,
    Behind,
}

/// One grant point run at the end of a late waiter's wait.
struct GrantPoint {
    what: &'static str,
    /// The holder `h1` takes first (no ttl, so nothing but the grant point frees it).
    held: LockMode,
    /// The late waiter `h2`'s mode (its wait of 100 ms ends at 1,100).
    late: LockMode,
    /// Where a live waiter `h3` (WRITE, long wait) queues, if at all.
    live: Live,
    /// The command at 1,100 (`w3`: h3's wait id, if queued).
    command: fn(w3: u64) -> Command,
    /// The events it must emit, as (type, holder).
    events: &'static [(LockEventType, &'static str)],
    /// The holders after it.
    holders: &'static [(&'static str, LockMode)],
}

const POINTS: &[GrantPoint] = &[
    GrantPoint {
        what: "release, nobody else waits: the lock is free",
        held: W,
        late: W,
        live: Live::None,
        command: |_| release("d", "h1", 1),
        events: &[(Released, "h1"), (WaitExpired, "h2")],
        holders: &[],
    },
    GrantPoint {
        what: "release, a live waiter behind: it gets the lock",
        held: W,
        late: W,
        live: Live::Behind,
        command: |_| release("d", "h1", 1),
        events: &[(Released, "h1"), (WaitExpired, "h2"), (Granted, "h3")],
        holders: &[("h3", W)],
    },
    GrantPoint {
        what: "the live WRITE waiter ahead of a late READ cancels; the READ would join h1",
        held: R,
        late: R,
        live: Live::Ahead,
        command: |w3| cancel("d", "h3", w3),
        events: &[(WaitCancelled, "h3"), (WaitExpired, "h2")],
        holders: &[("h1", R)],
    },
    GrantPoint {
        what: "the WRITE holder downgrades to READ, which a late READ would join",
        held: W,
        late: R,
        live: Live::None,
        command: |_| acquire("d", "h1", R, None, 0),
        events: &[(Granted, "h1"), (WaitExpired, "h2")],
        holders: &[("h1", R)],
    },
    GrantPoint {
        what: "a sweep at the waiter's deadline (the rule the others now share)",
        held: W,
        late: W,
        live: Live::None,
        command: |_| sweep(&["d"], 0, 0),
        events: &[(WaitExpired, "h2")],
        holders: &[("h1", W)],
    },
];

#[test]
fn a_waiter_whose_wait_ended_is_never_granted() {
    for point in POINTS {
        let mut log = Log::new();
        log.granted(1_000, acquire("d", "h1", point.held, None, 0));
        let mut w3 = 0;
        if point.live == Live::Ahead {
            w3 = log.queued(1_000, acquire("d", "h3", W, None, LONG), 1);
        }
        let ahead = u32::from(point.live == Live::Ahead);
        log.queued(1_000, acquire("d", "h2", point.late, None, 100), ahead + 1);
        if point.live == Live::Behind {
            w3 = log.queued(1_000, acquire("d", "h3", W, None, LONG), 2);
        }
        log.events();
        // Exactly at the end of h2's wait: its caller has been answered LOCK_WAIT_EXPIRED.
        let response = log.run(1_100, (point.command)(w3));
        assert!(
            !matches!(response, Response::Rejected(_)),
            "{}: {response:?}",
            point.what
        );
        let events: Vec<_> = log.events().into_iter().map(|e| (e.0, e.1)).collect();
        let want: Vec<_> = point.events.iter().map(|&(t, h)| (t, s(h))).collect();
        assert_eq!(events, want, "{}", point.what);
        let holders: Vec<_> = log.holders("d").into_iter().map(|h| (h.0, h.1)).collect();
        let want: Vec<_> = point.holders.iter().map(|&(h, m)| (s(h), m)).collect();
        assert_eq!(holders, want, "{}", point.what);
        let late_left = log.waiters("d").iter().any(|w| w.0 == "h2");
        assert!(!late_left, "{}: the late waiter stayed", point.what);
    }
}

#[test]
fn a_waiter_is_still_granted_one_ms_before_its_wait_ends() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, None, 0));
    let w = log.queued(1_000, acquire("d", "h2", W, None, 100), 1);
    log.events();
    log.run(1_099, release("d", "h1", 1));
    assert_eq!(log.events()[1], (Granted, s("h2"), 2, Some(w)));
}

#[test]
fn a_new_acquire_does_not_queue_behind_an_ended_wait() {
    // READ holder h1, WRITE waiter h2 whose wait ended at 1,100 with no sweep since.
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", R, None, 0));
    let w2 = log.queued(1_000, acquire("d", "h2", W, None, 100), 1);
    log.events();
    // A refusal still changes nothing (h2 stays until a grant point), and counts no ended wait.
    log.rejected(1_100, acquire("d", "h3", W, None, 0), busy("d", R, 1, 0));
    assert_eq!(log.waiters("d"), [(s("h2"), W)]);
    // A READ joins h1 at once instead of queueing behind a WRITE nobody waits for.
    let h3 = log.granted(1_200, acquire("d", "h3", R, None, 0));
    assert_eq!(
        log.events(),
        [
            (WaitExpired, s("h2"), 0, Some(w2)),
            (Granted, s("h3"), h3.token, None)
        ]
    );
    assert!(log.waiters("d").is_empty());
    // A queued acquire is first in line, not behind the ended wait.
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, None, 0));
    log.queued(1_000, acquire("d", "h2", W, None, 100), 1);
    log.events();
    let w3 = log.queued(1_100, acquire("d", "h3", W, None, LONG), 1);
    assert_eq!(log.waiters("d"), [(s("h3"), W)]);
    assert_eq!(log.events(), [(WaitExpired, s("h2"), 0, Some(2))]);
    log.run(1_200, release("d", "h1", 1));
    assert_eq!(log.events()[1], (Granted, s("h3"), 2, Some(w3)));
}

#[test]
fn ended_waits_do_not_count_against_the_waiters_limit() {
    // LIMITS.waiters_max is 4: four waits of 100 ms fill the queue.
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h0", W, None, 0));
    for (i, holder) in ["h1", "h2", "h3", "h4"].into_iter().enumerate() {
        log.queued(1_000, acquire("d", holder, W, None, 100), i as u32 + 1);
    }
    log.events();
    // At the limit while they wait: refused, naming the limit.
    log.rejected_with(1_099, acquire("d", "h5", W, None, LONG), |r| {
        matches!(r, Rejection::TooLarge { field, rule }
            if field == "waiters" && rule.contains("locks.waiters_max = 4"))
    });
    // Once their waits ended, the queue is empty: the new one is first, the four leave.
    log.queued(1_100, acquire("d", "h5", W, None, LONG), 1);
    let events: Vec<_> = log.events().into_iter().map(|e| (e.0, e.1)).collect();
    let ended = ["h1", "h2", "h3", "h4"].map(|h| (WaitExpired, s(h)));
    assert_eq!(events, ended);
    assert_eq!(log.waiters("d"), [(s("h5"), W)]);
}

#[test]
fn after_lock_delay_an_ended_wait_does_not_keep_the_lock_closed() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    log.run(2_000, sweep(&["d"], 0, 500));
    let w2 = log.queued(2_100, acquire("d", "h2", W, None, 100), 1);
    log.events();
    // The delay ended at 2,500 and h2's wait at 2,200; no sweep came. h3 gets the lock.
    let h3 = log.granted(2_600, acquire("d", "h3", W, None, 0));
    assert_eq!(
        log.events(),
        [
            (WaitExpired, s("h2"), 0, Some(w2)),
            (Granted, s("h3"), h3.token, None)
        ]
    );
    assert_eq!(log.holders("d"), [(s("h3"), W, h3.token)]);
}
