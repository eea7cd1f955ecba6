//! Table-driven lock sequences through `apply_effects`, with made-up leader times and terms:
//! grants, sharing and exclusion, FIFO fairness, upgrade/downgrade, refresh, release, cancel,
//! tokens, limits, input rules and wire forms. The harness here is shared with `expiry_tests`.

use crate::command::LockReply;
use crate::command::{LockCommand, ObjectCommand};
use serde_json::json;

use super::*;
use crate::apply::{apply_blank, apply_effects};
use crate::command::{Command, Response};
use crate::effects::{ApplyContext, Effects};
use crate::objects::resource::Resource;
use crate::state::State;

pub(super) const R: LockMode = LockMode::Read;
pub(super) const W: LockMode = LockMode::Write;
pub(super) const LIMITS: LockLimits = LockLimits {
    holders_max: 4,
    waiters_max: 4,
    locks_max: 8,
    details_bytes_max: 256,
};
/// Waits long enough never to time out in a test unless it means to.
pub(super) const LONG: u64 = 100_000;

/// Runs commands as consecutive log entries; `new_term` models a leader change (a blank entry).
pub(super) struct Log {
    pub(super) state: State,
    pub(super) effects: Effects,
    index: u64,
    term: u64,
}

impl Log {
    pub(super) fn new() -> Log {
        Log {
            state: State::new(),
            effects: Effects::default(),
            index: 0,
            term: 1,
        }
    }

    pub(super) fn ctx(&mut self, time_ms: u64) -> ApplyContext {
        self.index += 1;
        ApplyContext {
            log_index: self.index,
            term: self.term,
            time_ms,
            stamped: true,
            wall_ms: None,
        }
    }

    pub(super) fn run(&mut self, time_ms: u64, cmd: Command) -> Response {
        let ctx = self.ctx(time_ms);
        apply_effects(&mut self.state, &ctx, &cmd, &mut self.effects)
    }

    /// Runs `proposal` as the next entry, in the log's current term, as the state machine
    /// does: its time counts only if it was measured in this term.
    pub(super) fn propose(&mut self, proposal: &crate::command::Proposal) -> Response {
        self.index += 1;
        let ctx = ApplyContext::of_proposal(self.index, self.term, proposal);
        apply_effects(&mut self.state, &ctx, &proposal.command, &mut self.effects)
    }

    /// The term new entries get.
    pub(super) fn term(&self) -> u64 {
        self.term
    }

    /// A new leader's blank entry (it carries no leader time of its own).
    pub(super) fn new_term(&mut self) {
        self.term += 1;
        let ctx = self.ctx(self.state.time_ms());
        apply_blank(&mut self.state, &ctx);
    }

    pub(super) fn granted(&mut self, time_ms: u64, cmd: Command) -> LockHolder {
        match self.run(time_ms, cmd) {
            Response::Locks(LockReply::Granted { holder }) => holder,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// Runs an acquire that must queue; returns its wait id (the entry's log index).
    pub(super) fn queued(&mut self, time_ms: u64, cmd: Command, position: u32) -> u64 {
        let got = self.run(time_ms, cmd);
        let want = Response::Locks(LockReply::Queued {
            wait_id: self.index,
            position,
        });
        assert_eq!(got, want);
        self.index
    }

    /// Runs a command that must be refused with `want`, changing nothing but the clock.
    pub(super) fn rejected(&mut self, time_ms: u64, cmd: Command, want: Rejection) {
        let before = self.state.clone();
        let effects_before = self.effects.clone();
        assert_eq!(self.run(time_ms, cmd), Response::Rejected(want));
        assert_eq!(self.effects, effects_before, "a rejection had effects");
        let after = self.state.with_clock_of(&before);
        assert_eq!(after, before, "a rejection changed the state");
    }

    /// Runs a command that must be rejected in a way `check` accepts; returns the message.
    pub(super) fn rejected_with(
        &mut self,
        time_ms: u64,
        cmd: Command,
        check: fn(&Rejection) -> bool,
    ) {
        let before = self.state.clone();
        match self.run(time_ms, cmd) {
            Response::Rejected(r) => assert!(check(&r), "{r:?}"),
            other => panic!("expected a rejection, got {other:?}"),
        }
        assert_eq!(self.state.with_clock_of(&before), before);
    }

    /// The lock events so far, as (type, holder, token, wait id), and forgets them.
    pub(super) fn events(&mut self) -> Vec<(LockEventType, String, u64, Option<u64>)> {
        let events = std::mem::take(&mut self.effects.lock_events);
        let summary = events.into_iter();
        summary
            .map(|e| (e.event_type, e.holder, e.token, e.wait_id))
            .collect()
    }

    /// Holders of `name` as (holder, mode, token).
    pub(super) fn holders(&self, name: &str) -> Vec<(String, LockMode, u64)> {
        let holders = self.state.lock(name).map(|l| l.holders.clone());
        let summary = holders.unwrap_or_default().into_iter();
        summary.map(|h| (h.holder, h.mode, h.token)).collect()
    }

    pub(super) fn waiters(&self, name: &str) -> Vec<(String, LockMode)> {
        let waiters = self.state.lock(name).map(|l| l.waiters.clone());
        let summary = waiters.unwrap_or_default().into_iter();
        summary.map(|w| (w.holder, w.mode)).collect()
    }
}

pub(super) fn acquire(
    name: &str,
    holder: &str,
    mode: LockMode,
    ttl_ms: Option<u64>,
    wait_ms: u64,
) -> Command {
    Command::Locks(LockCommand::Acquire {
        name: name.into(),
        holder: holder.into(),
        mode,
        ttl_ms,
        details: serde_json::Value::Null,
        wait_ms,
        limits: LIMITS,
    })
}

pub(super) fn acquire_limited(
    name: &str,
    holder: &str,
    mode: LockMode,
    wait_ms: u64,
    limits: LockLimits,
) -> Command {
    Command::Locks(LockCommand::Acquire {
        name: name.into(),
        holder: holder.into(),
        mode,
        ttl_ms: None,
        details: serde_json::Value::Null,
        wait_ms,
        limits,
    })
}

pub(super) fn with_details(mut cmd: Command, value: serde_json::Value) -> Command {
    if let Command::Locks(LockCommand::Acquire { details, .. }) = &mut cmd {
        *details = value;
    }
    cmd
}

pub(super) fn refresh(name: &str, holder: &str, token: u64, ttl_ms: Option<u64>) -> Command {
    Command::Locks(LockCommand::Refresh {
        name: name.into(),
        holder: holder.into(),
        token,
        ttl_ms,
    })
}

pub(super) fn release(name: &str, holder: &str, token: u64) -> Command {
    Command::Locks(LockCommand::Release {
        name: name.into(),
        holder: holder.into(),
        token,
    })
}

pub(super) fn cancel(name: &str, holder: &str, wait_id: u64) -> Command {
    Command::Locks(LockCommand::CancelWait {
        name: name.into(),
        holder: holder.into(),
        wait_id,
    })
}

pub(super) fn sweep(names: &[&str], grace_ms: u64, lock_delay_ms: u64) -> Command {
    Command::Locks(LockCommand::Sweep {
        names: names.iter().map(|n| n.to_string()).collect(),
        grace_ms,
        lock_delay_ms,
    })
}

pub(super) fn swept(expired: u32, waiters_expired: u32, granted: u32) -> Response {
    Response::Locks(LockReply::Swept {
        expired,
        waiters_expired,
        granted,
    })
}

pub(super) fn fence(lock: &str, token: u64) -> Option<Fence> {
    Some(Fence {
        lock: lock.into(),
        token,
    })
}

pub(super) fn director(name: &str) -> Resource {
    Resource::new(
        "deployment.servicefabrik.io/v1alpha1",
        "Director",
        "default",
        name,
    )
}

pub(super) fn fenced_create(name: &str, lock: &str, token: u64) -> Command {
    Command::Objects(ObjectCommand::Create {
        object: director(name),
        fence: fence(lock, token),
    })
}

pub(super) fn busy(name: &str, mode_held: LockMode, holders: u32, waiters: u32) -> Rejection {
    Rejection::LockBusy {
        name: name.into(),
        mode_held,
        holders,
        waiters,
    }
}

pub(super) fn not_held(name: &str, holder: &str, token: u64) -> Rejection {
    Rejection::LockNotHeld {
        name: name.into(),
        holder: holder.into(),
        token,
    }
}

pub(super) fn s(text: &str) -> String {
    text.to_string()
}

use LockEventType::{Granted, Released, WaitCancelled};

#[test]
fn readers_share_and_a_writer_is_alone() {
    let mut log = Log::new();
    let h1 = log.granted(1_000, acquire("d", "h1", R, None, 0));
    assert_eq!(
        (h1.token, h1.granted_at_ms, h1.expires_at_ms),
        (1, 1_000, None)
    );
    let h2 = log.granted(1_001, acquire("d", "h2", R, Some(5_000), 0));
    assert_eq!((h2.token, h2.expires_at_ms), (2, Some(6_001)));
    assert_eq!(log.holders("d"), [(s("h1"), R, 1), (s("h2"), R, 2)]);
    log.rejected(1_002, acquire("d", "h3", W, None, 0), busy("d", R, 2, 0));

    assert_eq!(
        log.run(1_003, release("d", "h1", 1)),
        Response::Locks(LockReply::Released { token: 1 })
    );
    log.run(1_004, release("d", "h2", 2));
    assert!(
        log.state.lock("d").is_none(),
        "an idle lock entry is dropped"
    );
    assert_eq!(log.granted(1_005, acquire("d", "h3", W, None, 0)).token, 3);
    log.rejected(1_006, acquire("d", "h1", R, None, 0), busy("d", W, 1, 0));
    log.rejected(1_007, acquire("d", "h1", W, None, 0), busy("d", W, 1, 0));
    assert_eq!(
        log.events(),
        [
            (Granted, s("h1"), 1, None),
            (Granted, s("h2"), 2, None),
            (Released, s("h1"), 1, None),
            (Released, s("h2"), 2, None),
            (Granted, s("h3"), 3, None),
        ]
    );
    // Locks are not objects: no revision, no object events.
    assert_eq!(log.state.revision(), 0);
    assert!(log.effects.events.is_empty());
    assert_eq!(log.state.lock_count(), 1);
    let listed: Vec<&str> = log.state.locks().map(|l| l.name.as_str()).collect();
    assert_eq!(listed, ["d"]);
}

#[test]
fn the_queue_is_fifo_and_a_queued_writer_keeps_later_readers_behind() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "r1", R, None, 0));
    let w = log.queued(1_001, acquire("d", "w", W, None, LONG), 1);
    // A reader that could share with r1 must not jump the waiting writer.
    log.rejected(1_002, acquire("d", "r2", R, None, 0), busy("d", R, 1, 1));
    let r2 = log.queued(1_003, acquire("d", "r2", R, None, LONG), 2);
    let r3 = log.queued(1_004, acquire("d", "r3", R, Some(50), LONG), 3);
    assert_eq!(log.waiters("d"), [(s("w"), W), (s("r2"), R), (s("r3"), R)]);
    log.events();

    log.run(2_000, release("d", "r1", 1));
    assert_eq!(log.holders("d"), [(s("w"), W, 2)]);
    assert_eq!(
        log.events(),
        [(Released, s("r1"), 1, None), (Granted, s("w"), 2, Some(w))]
    );
    let granted = log.state.lock("d").map(|l| l.holders[0].clone());
    assert_eq!(
        granted.map(|h| (h.granted_at_ms, h.wait_id)),
        Some((2_000, Some(w)))
    );

    // Consecutive readers at the front are granted together.
    log.run(3_000, release("d", "w", 2));
    assert_eq!(log.holders("d"), [(s("r2"), R, 3), (s("r3"), R, 4)]);
    assert_eq!(
        log.events(),
        [
            (Released, s("w"), 2, Some(w)),
            (Granted, s("r2"), 3, Some(r2)),
            (Granted, s("r3"), 4, Some(r3)),
        ]
    );
    let r3_grant = log.state.lock("d").map(|l| l.holders[1].expires_at_ms);
    assert_eq!(
        r3_grant,
        Some(Some(3_050)),
        "a waiter's ttl runs from its grant"
    );
}

#[test]
fn upgrade_and_downgrade_take_new_tokens() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", R, None, 0));
    let up = log.granted(1_100, acquire("d", "h1", W, Some(500), 0));
    assert_eq!((up.mode, up.token, up.granted_at_ms), (W, 2, 1_100));
    assert_eq!(
        log.events(),
        [(Granted, s("h1"), 1, None), (Granted, s("h1"), 2, None)]
    );
    log.rejected_with(1_101, fenced_create("x", "d", 1), |r| {
        matches!(r, Rejection::FenceRejected { token: 1, .. })
    });
    log.run(1_102, fenced_create("x", "d", 2));
    assert_eq!(log.state.revision(), 1);

    // Downgrade: readers at the front of the queue join at once.
    let r2 = log.queued(1_200, acquire("d", "h2", R, None, LONG), 1);
    let w3 = log.queued(1_201, acquire("d", "h3", W, None, LONG), 2);
    let down = log.granted(1_300, acquire("d", "h1", R, None, 0));
    assert_eq!((down.mode, down.token, down.expires_at_ms), (R, 3, None));
    assert_eq!(log.holders("d"), [(s("h1"), R, 3), (s("h2"), R, 4)]);
    assert_eq!(log.waiters("d"), [(s("h3"), W)]);
    assert_eq!(
        log.events(),
        [(Granted, s("h1"), 3, None), (Granted, s("h2"), 4, Some(r2))]
    );

    // Upgrade while others read: refused without wait, else queued like anyone (behind h3).
    log.rejected(1_400, acquire("d", "h1", W, None, 0), busy("d", R, 2, 1));
    let up1 = log.queued(1_401, acquire("d", "h1", W, None, LONG), 2);
    log.run(1_500, release("d", "h2", 4));
    assert_eq!(
        log.holders("d"),
        [(s("h1"), R, 3)],
        "h3 waits for h1's read"
    );
    log.run(1_501, cancel("d", "h3", w3));
    // h3 gone: h1's queued upgrade is at the front and h1 is the only reader.
    assert_eq!(log.holders("d"), [(s("h1"), W, 5)]);
    let h1 = log.state.lock("d").map(|l| l.holders[0].clone());
    assert_eq!(
        h1.map(|h| (h.wait_id, h.granted_at_ms)),
        Some((Some(up1), 1_501))
    );
    assert!(log.waiters("d").is_empty());
}

#[test]
fn reacquire_in_the_same_mode_and_refresh_extend_the_grant() {
    let mut log = Log::new();
    let first = log.granted(1_000, acquire("d", "h1", W, Some(1_000), 0));
    assert_eq!(first.expires_at_ms, Some(2_000));
    let details = json!({ "resourceGroup": "backup", "operation": "backup" });
    let again = log.granted(
        1_500,
        with_details(acquire("d", "h1", W, Some(2_000), 0), details.clone()),
    );
    let want = LockHolder {
        ttl_ms: Some(2_000),
        expires_at_ms: Some(3_500),
        details,
        ..first.clone()
    };
    assert_eq!(again, want, "same token, same grant time");
    assert_eq!(log.events().len(), 1, "a refresh is not a grant");

    let kept_ttl = refresh("d", "h1", 1, None);
    let got = log.run(1_800, kept_ttl);
    let refreshed = LockHolder {
        expires_at_ms: Some(3_800),
        ..want.clone()
    };
    assert_eq!(
        got,
        Response::Locks(LockReply::Refreshed {
            holder: refreshed.clone()
        })
    );
    let shorter = log.run(1_900, refresh("d", "h1", 1, Some(100)));
    let want = LockHolder {
        ttl_ms: Some(100),
        expires_at_ms: Some(2_000),
        ..refreshed
    };
    assert_eq!(
        shorter,
        Response::Locks(LockReply::Refreshed { holder: want })
    );

    log.rejected(2_000, refresh("d", "h1", 7, None), not_held("d", "h1", 7));
    log.rejected(2_000, refresh("d", "h2", 1, None), not_held("d", "h2", 1));
    log.rejected(2_000, refresh("e", "h1", 1, None), not_held("e", "h1", 1));
    // Past its expiry but not yet swept, the holder may still refresh (one log order decides).
    let late = log.run(5_000, refresh("d", "h1", 1, None));
    assert!(
        matches!(late, Response::Locks(LockReply::Refreshed { .. })),
        "{late:?}"
    );
    assert!(log.events().is_empty());
}

#[test]
fn release_needs_the_live_token() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, None, 0));
    log.rejected(1_001, release("d", "h1", 9), not_held("d", "h1", 9));
    log.rejected(1_002, release("d", "h2", 1), not_held("d", "h2", 1));
    log.rejected(1_003, release("nope", "h1", 1), not_held("nope", "h1", 1));
    log.granted(1_004, acquire("d", "h1", R, None, 0)); // downgrade: token 2
    log.rejected(1_005, release("d", "h1", 1), not_held("d", "h1", 1));
    log.run(1_006, release("d", "h1", 2));
    log.rejected(1_007, release("d", "h1", 2), not_held("d", "h1", 2));
    assert_eq!(log.state.lock_count(), 0);
}

#[test]
fn cancel_wait_removes_the_waiter_or_releases_its_grant() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, None, 0));
    let w2 = log.queued(1_001, acquire("d", "h2", R, None, LONG), 1);
    let w3 = log.queued(1_002, acquire("d", "h3", R, None, LONG), 2);
    log.events();
    let cancelled = Response::Locks(LockReply::WaitCancelled {
        released_token: None,
    });
    assert_eq!(log.run(1_003, cancel("d", "h2", w2)), cancelled);
    assert_eq!(log.events(), [(WaitCancelled, s("h2"), 0, Some(w2))]);
    let done = Response::Locks(LockReply::Done { revision: 0 });
    assert_eq!(log.run(1_004, cancel("d", "h2", w2)), done, "idempotent");
    assert_eq!(log.run(1_005, cancel("d", "h2", w3)), done, "not h2's wait");
    assert_eq!(log.run(1_006, cancel("nope", "h2", w3)), done);
    assert!(log.events().is_empty());

    log.run(1_007, release("d", "h1", 1));
    assert_eq!(log.holders("d"), [(s("h3"), R, 2)]);
    log.events();
    let got = log.run(1_008, cancel("d", "h3", w3));
    let released = Response::Locks(LockReply::WaitCancelled {
        released_token: Some(2),
    });
    assert_eq!(got, released);
    assert_eq!(log.events(), [(Released, s("h3"), 2, Some(w3))]);
    assert_eq!(log.state.lock_count(), 0);

    // Cancelling the writer at the front lets the readers behind it join the reader holding.
    log.granted(2_000, acquire("d", "r1", R, None, 0));
    let w = log.queued(2_001, acquire("d", "w", W, None, LONG), 1);
    log.queued(2_002, acquire("d", "r2", R, None, LONG), 2);
    log.run(2_003, cancel("d", "w", w));
    assert_eq!(log.holders("d"), [(s("r1"), R, 3), (s("r2"), R, 4)]);

    // An explicit re-acquire owns the grant: a late cancel of its wait no longer releases it.
    let w5 = log.queued(2_004, acquire("d", "h5", W, None, LONG), 1);
    log.run(2_005, release("d", "r1", 3));
    log.run(2_006, release("d", "r2", 4));
    assert_eq!(log.holders("d"), [(s("h5"), W, 5)]);
    log.granted(2_007, acquire("d", "h5", W, None, 0));
    assert_eq!(log.run(2_008, cancel("d", "h5", w5)), done);
    assert_eq!(log.holders("d"), [(s("h5"), W, 5)]);
}

#[test]
fn tokens_grow_across_locks_and_dropped_entries() {
    let mut log = Log::new();
    let mut tokens = vec![];
    for (name, holder) in [("a", "h1"), ("b", "h1"), ("a", "h2"), ("c", "h3")] {
        tokens.push(log.granted(1_000, acquire(name, holder, R, None, 0)).token);
    }
    for (name, holder, token) in [
        ("a", "h1", 1),
        ("b", "h1", 2),
        ("a", "h2", 3),
        ("c", "h3", 4),
    ] {
        log.run(1_001, release(name, holder, token));
    }
    assert_eq!(log.state.lock_count(), 0);
    assert_eq!(log.state.last_lock_token(), 4);
    tokens.push(log.granted(1_002, acquire("a", "h1", W, None, 0)).token);
    assert_eq!(tokens, [1, 2, 3, 4, 5]);
}

#[test]
fn limits_hold_at_the_limit_and_refuse_one_past() {
    let limits = LockLimits {
        holders_max: 2,
        waiters_max: 2,
        locks_max: 2,
        details_bytes_max: 30,
    };
    let too_large = |field: &'static str, limit: &'static str| move |r: &Rejection| matches!(r, Rejection::TooLarge { field: f, rule } if f == field && rule.contains(limit));
    let mut log = Log::new();
    log.granted(1_000, acquire_limited("a", "h1", R, 0, limits));
    log.granted(1_000, acquire_limited("a", "h2", R, 0, limits));
    let cmd = acquire_limited("a", "h3", R, 0, limits);
    let check = too_large("holders", "locks.holders_max = 2");
    let got = log.run(1_001, cmd);
    assert!(matches!(&got, Response::Rejected(r) if check(r)), "{got:?}");
    // Waiting for a slot is allowed, and the grant keeps within the limit.
    let w3 = log.queued(1_002, acquire_limited("a", "h3", R, LONG, limits), 1);
    log.queued(1_003, acquire_limited("a", "h4", R, LONG, limits), 2);
    let got = log.run(1_004, acquire_limited("a", "h5", R, LONG, limits));
    let check = too_large("waiters", "locks.waiters_max = 2");
    assert!(matches!(&got, Response::Rejected(r) if check(r)), "{got:?}");
    log.events();
    log.run(1_005, release("a", "h1", 1));
    assert_eq!(log.events()[1], (Granted, s("h3"), 3, Some(w3)));
    assert_eq!(log.holders("a").len(), 2);
    assert_eq!(log.waiters("a"), [(s("h4"), R)]);

    log.granted(1_006, acquire_limited("b", "h1", W, 0, limits));
    let got = log.run(1_007, acquire_limited("c", "h1", W, LONG, limits));
    let check = too_large("name", "locks.locks_max = 2");
    assert!(matches!(&got, Response::Rejected(r) if check(r)), "{got:?}");
    // Existing locks still take holders and waiters.
    log.queued(1_008, acquire_limited("b", "h2", W, LONG, limits), 1);

    // details: 30 bytes as JSON is at the limit, 31 is one past.
    let at = json!({ "resourceId": "0123456789abc" });
    assert_eq!(at.to_string().len(), 30);
    log.run(1_009, release("b", "h1", 4));
    log.events();
    let cmd = with_details(acquire_limited("b", "h3", R, LONG, limits), at);
    log.queued(1_010, cmd, 1);
    let past = json!({ "resourceId": "0123456789abcd" });
    let cmd = with_details(acquire_limited("b", "h4", R, LONG, limits), past);
    let got = log.run(1_011, cmd);
    let check = too_large("details", "locks.details_bytes_max = 30");
    assert!(matches!(&got, Response::Rejected(r) if check(r)), "{got:?}");
}

#[test]
fn bad_input_names_the_field() {
    let mut log = Log::new();
    let long = "a".repeat(254);
    let cases: Vec<(&str, Command)> = vec![
        ("name", acquire("", "h", R, None, 0)),
        ("name", acquire(&long, "h", R, None, 0)),
        ("name", acquire("a b", "h", R, None, 0)),
        ("name", acquire("dé", "h", R, None, 0)),
        ("holder", acquire("d", "", R, None, 0)),
        ("holder", acquire("d", "a b", R, None, 0)),
        ("holder", acquire("d", "tab\t", R, None, 0)),
        ("holder", acquire("d", &long, R, None, 0)),
        ("ttl_ms", acquire("d", "h", R, Some(0), 0)),
        ("ttl_ms", acquire("d", "h", R, Some(LOCK_TTL_MS_MAX + 1), 0)),
        ("wait_ms", acquire("d", "h", R, None, LOCK_WAIT_MS_MAX + 1)),
        (
            "details",
            with_details(acquire("d", "h", R, None, 0), json!([1])),
        ),
        (
            "details",
            with_details(acquire("d", "h", R, None, 0), json!("x")),
        ),
        ("name", release("a b", "h", 1)),
        ("holder", release("d", " ", 1)),
        ("ttl_ms", refresh("d", "h", 1, Some(0))),
        ("name", refresh("", "h", 1, None)),
        ("holder", cancel("d", "", 1)),
        ("name", cancel("a\nb", "h", 1)),
        ("lock_delay_ms", sweep(&["d"], 0, LOCK_DELAY_MS_MAX + 1)),
    ];
    for (field, cmd) in cases {
        let text = cmd.to_string();
        let got = log.run(1_000, cmd);
        assert!(
            matches!(&got, Response::Rejected(Rejection::Invalid { field: f, .. }) if f == field),
            "{text}: {got:?}"
        );
    }
    let many: Vec<String> = (0..=LOCK_SWEEP_NAMES_MAX)
        .map(|i| format!("l{i}"))
        .collect();
    let names: Vec<&str> = many.iter().map(String::as_str).collect();
    let got = log.run(1_000, sweep(&names, 0, 0));
    assert!(
        matches!(&got, Response::Rejected(Rejection::TooLarge { field, .. }) if field == "names"),
        "{got:?}"
    );
    assert!(log.effects.is_empty());
    assert_eq!(log.state.lock_count(), 0);

    // The edges that are allowed.
    let name = format!("{}a.b_c:d@e/f-G9", "x".repeat(LOCK_NAME_CHARS_MAX - 14));
    assert_eq!(name.len(), LOCK_NAME_CHARS_MAX);
    let holder = format!("{}~!", "h".repeat(LOCK_HOLDER_CHARS_MAX - 2));
    let cmd = acquire(&name, &holder, R, Some(LOCK_TTL_MS_MAX), LOCK_WAIT_MS_MAX);
    log.granted(1_000, cmd);
    log.granted(
        1_000,
        acquire("backup-manager@10.0.2.2", "x", R, Some(1), 0),
    );
}

#[test]
fn wire_forms_and_messages() {
    // Old log entries (no fence) still parse; a fence round-trips.
    let old = r#"{"Create":{"object":{"kind":"Director","metadata":{"name":"a"}}}}"#;
    let cmd: Command = serde_json::from_str(old).expect("an entry without fence parses");
    assert!(matches!(
        cmd,
        Command::Objects(ObjectCommand::Create { fence: None, .. })
    ));
    let cmd = fenced_create("a", "deploy/x", 4);
    let text = serde_json::to_string(&cmd).expect("ser");
    assert!(
        text.contains(r#""fence":{"lock":"deploy/x","token":4}"#),
        "{text}"
    );
    assert_eq!(
        cmd.to_string(),
        "create Director/default/a fenced by deploy/x:4"
    );
    let acquire_text = serde_json::to_string(&acquire("d", "h", W, None, 0)).expect("ser");
    assert!(acquire_text.contains(r#""mode":"WRITE""#), "{acquire_text}");
    let back: Command = serde_json::from_str(&acquire_text).expect("de");
    assert_eq!(back.to_string(), "lock-acquire d WRITE by h");
    for (cmd, want) in [
        (refresh("d", "h", 3, None), "lock-refresh d by h token 3"),
        (release("d", "h", 3), "lock-release d by h token 3"),
        (cancel("d", "h", 9), "lock-cancel-wait d by h wait 9"),
        (sweep(&["a", "b"], 1, 2), "lock-sweep 2 locks"),
    ] {
        assert_eq!(cmd.to_string(), want);
    }

    let holder = LockHolder {
        holder: "backup-manager@10.0.2.2".into(),
        mode: R,
        token: 7,
        granted_at_ms: 1,
        ttl_ms: None,
        expires_at_ms: None,
        details: json!({ "resourceGroup": "backup" }),
        wait_id: None,
        operation: None,
    };
    let text = serde_json::to_string(&holder).expect("ser");
    assert!(
        text.contains(r#""mode":"READ","token":7,"grantedAtMs":1"#),
        "{text}"
    );
    let response = Response::Locks(LockReply::Granted { holder });
    let text = serde_json::to_string(&response).expect("ser");
    assert_eq!(
        serde_json::from_str::<Response>(&text).expect("de"),
        response
    );

    for (r, want) in [
        (
            busy("d", R, 2, 1),
            "lock d is busy: held in READ mode by 2 holder(s) with 1 waiting before you; \
             pass wait_ms > 0 to queue",
        ),
        (
            Rejection::LockDelayed {
                name: "d".into(),
                until_ms: 9,
                remaining_ms: 4,
            },
            "lock d is in lock-delay until 9 ms (a WRITE holder expired without releasing it); \
             pass wait_ms > 0 to queue",
        ),
        (
            not_held("d", "h", 3),
            "lock d: holder h holds no grant with token 3 (released, expired, superseded by an \
             upgrade or downgrade, or never granted)",
        ),
        (
            Rejection::FenceRejected {
                lock: "d".into(),
                token: 3,
                reason: "the lock is not held by anyone".into(),
            },
            "fence d:3 refused: the lock is not held by anyone",
        ),
    ] {
        assert_eq!(r.to_string(), want);
        let text = serde_json::to_string(&Response::Rejected(r.clone())).expect("ser");
        assert_eq!(
            serde_json::from_str::<Response>(&text).expect("de"),
            Response::Rejected(r)
        );
    }
}

#[test]
fn apply_wrapper_keeps_resource_events_and_drops_lock_events() {
    let mut state = State::new();
    let mut events = Vec::new();
    let ctx = ApplyContext {
        log_index: 1,
        term: 1,
        time_ms: 10,
        stamped: true,
        wall_ms: None,
    };
    let got = crate::apply(
        &mut state,
        &ctx,
        &acquire("d", "h", W, None, 0),
        &mut events,
    );
    assert!(
        matches!(got, Response::Locks(LockReply::Granted { .. })),
        "{got:?}"
    );
    let create = Command::Objects(ObjectCommand::Create {
        object: director("a"),
        fence: fence("d", 1),
    });
    crate::apply(&mut state, &ctx, &create, &mut events);
    assert_eq!(events.len(), 1);
    assert_eq!(state.lock("d").map(|l| l.holders.len()), Some(1));
}
