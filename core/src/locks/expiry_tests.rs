//! Table-driven lock sequences about time and safety: expiry only by sweep, the grace after a
//! leader change, lock-delay, waiter deadlines, `locks_due`, fencing, and snapshots.

use crate::command::{LockCommand, ObjectCommand};
use serde_json::json;

use super::tests::*;
use super::*;
use crate::apply::{apply_blank, apply_effects};
use crate::command::LockReply;
use crate::command::{Command, Response, TxnOp};
use crate::effects::{ApplyContext, Effects};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::ObjectKey;
use crate::state::State;
use LockEventType::{Expired, Granted, WaitExpired};

#[test]
fn holders_expire_only_in_a_sweep() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    log.granted(1_000, acquire("e", "h1", R, Some(100), 0));
    assert!(log.state.locks_due(1_099).is_empty());
    assert_eq!(log.state.locks_due(1_100), ["d", "e"]);
    log.events();

    // Long past its ttl, h1 still holds d: others are refused and h1's fenced writes apply.
    log.rejected(9_000, acquire("d", "h2", W, None, 0), busy("d", W, 1, 0));
    log.run(9_000, fenced_create("x", "d", 1));
    assert_eq!(log.state.revision(), 1);

    assert_eq!(log.run(9_001, sweep(&["d"], 0, 0)), swept(1, 0, 0));
    assert_eq!(log.events(), [(Expired, s("h1"), 1, None)]);
    assert!(log.state.lock("d").is_none());
    assert_eq!(log.holders("e").len(), 1, "locks not named are untouched");
    log.rejected_with(9_002, fenced_create("y", "d", 1), |r| {
        matches!(r, Rejection::FenceRejected { .. })
    });
    // Unknown and repeated names are harmless.
    assert_eq!(
        log.run(9_003, sweep(&["zz", "e", "e"], 0, 0)),
        swept(1, 0, 0)
    );
    assert_eq!(log.state.lock_count(), 0);
}

#[test]
fn no_lock_expires_within_the_grace_after_a_leader_change() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    assert_eq!(log.state.term_started_ms(), Some(1_000));
    log.new_term();
    assert_eq!(log.state.term_started_ms(), None);
    // The new leader's first stamped entry is a sweep: it expires nothing, whatever its grace,
    // and starts the grace.
    let done = Response::Locks(LockReply::Done { revision: 0 });
    assert!(
        log.state.sweep_may_act(5_000, 1_000),
        "a sweep starts the clock"
    );
    assert_eq!(log.run(5_000, sweep(&["d"], 0, 0)), done);
    assert_eq!(log.state.term_started_ms(), Some(5_000));
    // The sweeper skips what apply would refuse, and proposes again once the grace is over.
    assert!(!log.state.sweep_may_act(5_999, 1_000));
    assert_eq!(log.run(5_999, sweep(&["d"], 1_000, 0)), done);
    assert_eq!(log.holders("d").len(), 1);
    assert!(log.state.sweep_may_act(6_000, 1_000));
    assert_eq!(log.run(6_000, sweep(&["d"], 1_000, 0)), swept(1, 0, 0));

    // A leader whose clock is behind: the grace runs from the state's time, not its stamp.
    log.granted(6_000, acquire("d", "h2", W, Some(10), 0));
    log.new_term();
    log.run(3_000, acquire("e", "h3", R, None, 0));
    assert_eq!(log.state.term_started_ms(), Some(6_000));
    // Its clock says 3,500, but apply counts from the state's 6,000.
    assert!(!log.state.sweep_may_act(3_500, 1_000));
    assert_eq!(log.run(6_999, sweep(&["d"], 1_000, 0)), done);
    assert!(log.state.sweep_may_act(7_000, 1_000));
    assert_eq!(log.run(7_000, sweep(&["d"], 1_000, 0)), swept(1, 0, 0));

    // Entries of an older term (never, in a real log) do not restart the grace.
    let stale = ApplyContext {
        log_index: 99,
        term: 1,
        time_ms: 7_100,
        stamped: true,
        wall_ms: None,
    };
    apply_blank(&mut log.state, &stale);
    assert_eq!(log.state.term_started_ms(), Some(6_000));
}

#[test]
fn lock_delay_after_a_write_expires() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    log.run(2_000, sweep(&["d"], 0, 500));
    assert_eq!(
        log.state.lock("d").map(|l| l.delay_until_ms),
        Some(Some(2_500))
    );
    log.rejected(
        2_100,
        acquire("d", "h2", W, None, 0),
        Rejection::LockDelayed {
            name: "d".into(),
            until_ms: 2_500,
            remaining_ms: 400,
        },
    );
    log.rejected_with(2_100, acquire("d", "h2", R, None, 0), |r| {
        matches!(
            r,
            Rejection::LockDelayed {
                until_ms: 2_500,
                ..
            }
        )
    });
    let w = log.queued(2_200, acquire("d", "h2", W, None, LONG), 1);
    // The delay has passed, but a waiter is ahead.
    log.rejected(2_600, acquire("d", "h3", R, None, 0), busy("d", W, 0, 1));
    assert!(log.state.locks_due(2_499).is_empty());
    assert_eq!(log.state.locks_due(2_500), ["d"]);
    log.events();
    assert_eq!(log.run(2_600, sweep(&["d"], 0, 500)), swept(0, 0, 1));
    assert_eq!(log.events(), [(Granted, s("h2"), 2, Some(w))]);
    assert_eq!(log.state.lock("d").map(|l| l.delay_until_ms), Some(None));

    // A lock with only a delay left is dropped by the sweep after it.
    log.run(2_700, release("d", "h2", 2));
    log.granted(2_700, acquire("d", "h2", W, Some(10), 0));
    log.run(2_800, sweep(&["d"], 0, 500));
    assert_eq!(log.state.lock_count(), 1);
    assert_eq!(log.state.locks_due(3_300), ["d"]);
    log.run(3_300, sweep(&["d"], 0, 500));
    assert_eq!(log.state.lock_count(), 0);

    // An expired READ imposes no delay; with no delay configured the queue moves at once.
    log.granted(4_000, acquire("r", "h1", R, Some(10), 0));
    log.run(4_100, sweep(&["r"], 0, 500));
    assert!(log.state.lock("r").is_none());
    log.granted(4_200, acquire("w", "h1", W, Some(10), 0));
    log.queued(4_200, acquire("w", "h2", W, None, LONG), 1);
    assert_eq!(log.run(4_300, sweep(&["w"], 0, 0)), swept(1, 0, 1));
    assert_eq!(log.holders("w"), [(s("h2"), W, 6)]);
}

#[test]
fn waiters_time_out_in_a_sweep() {
    let mut log = Log::new();
    log.granted(1_000, acquire("d", "h1", W, None, 0));
    let w = log.queued(1_000, acquire("d", "h2", W, None, 500), 1);
    assert_eq!(
        log.state.lock("d").map(|l| l.waiters[0].wait_until_ms),
        Some(1_500)
    );
    assert!(log.state.locks_due(1_499).is_empty());
    assert_eq!(log.state.locks_due(1_500), ["d"]);
    log.events();
    assert_eq!(log.run(1_500, sweep(&["d"], 0, 0)), swept(0, 1, 0));
    assert_eq!(log.events(), [(WaitExpired, s("h2"), 0, Some(w))]);
    assert!(log.waiters("d").is_empty());

    // Before any sweep removes it, a late waiter is not granted either: the release that finds
    // it drops it (see `wait_tests`), and its caller's cancel, if it comes, has nothing to do.
    let late = log.queued(2_000, acquire("d", "h3", R, None, 500), 1);
    log.run(2_600, release("d", "h1", 1));
    assert_eq!(log.state.lock_count(), 0);
    let got = log.run(2_601, cancel("d", "h3", late));
    assert_eq!(got, Response::Locks(LockReply::Done { revision: 0 }));
}

#[test]
fn fences_admit_only_the_live_write_holder() {
    let mut log = Log::new();
    let rejected = |log: &mut Log, time: u64, cmd: Command, part: &str| {
        let before = log.state.clone();
        match log.run(time, cmd) {
            Response::Rejected(r @ Rejection::FenceRejected { .. }) => {
                assert!(r.to_string().contains(part), "{r}")
            }
            other => panic!("expected FenceRejected, got {other:?}"),
        }
        assert_eq!(log.state.with_clock_of(&before), before);
    };
    rejected(
        &mut log,
        1_000,
        fenced_create("x", "d", 1),
        "not held by anyone",
    );

    log.granted(1_000, acquire("d", "h1", W, Some(100), 0));
    log.ok_all(1_001, "d", 1);
    rejected(&mut log, 1_002, fenced_create("y", "d", 2), "no holder");
    log.granted(1_003, acquire("ro", "h2", R, None, 0));
    rejected(&mut log, 1_004, fenced_create("y", "ro", 2), "READ mode");

    // h1 pauses past its ttl; the lock expires, lock-delay passes, h3 gets it.
    log.run(5_000, sweep(&["d"], 0, 1_000));
    log.rejected_with(5_500, acquire("d", "h3", W, None, 0), |r| {
        matches!(r, Rejection::LockDelayed { .. })
    });
    let h3 = log.granted(6_000, acquire("d", "h3", W, None, 0));
    assert_eq!(h3.token, 3);
    rejected(&mut log, 6_001, fenced_create("y", "d", 1), "no holder");
    let txn = Command::Objects(ObjectCommand::Txn {
        ops: vec![TxnOp::Create {
            object: director("y"),
        }],
        fence: fence("d", 1),
    });
    rejected(&mut log, 6_002, txn, "fence d:1 refused");
    log.run(6_003, fenced_create("y", "d", 3));
    assert!(log
        .state
        .get(&ObjectKey::new("Director", "default", "y"))
        .is_some());
}

#[test]
fn locks_due_is_earliest_first_and_bounded() {
    let mut log = Log::new();
    let limits = LockLimits {
        locks_max: 2_000,
        ..LIMITS
    };
    for i in 0..=LOCK_SWEEP_NAMES_MAX as u64 {
        let cmd = Command::Locks(LockCommand::Acquire {
            name: format!("l{i:04}"),
            holder: "h".into(),
            mode: W,
            ttl_ms: Some(10_000 - i),
            details: serde_json::Value::Null,
            wait_ms: 0,
            limits,
        });
        log.granted(1_000, cmd);
    }
    let due = log.state.locks_due(u64::MAX);
    assert_eq!(due.len(), LOCK_SWEEP_NAMES_MAX);
    assert_eq!((due[0].as_str(), due[1].as_str()), ("l1000", "l0999"));
    assert_eq!(log.state.locks_due(1_000 + 9_000), ["l1000"]);
    let names: Vec<&str> = due.iter().map(String::as_str).collect();
    assert_eq!(log.run(20_000, sweep(&names, 0, 0)), swept(1_000, 0, 0));
    assert_eq!(log.state.locks_due(u64::MAX), ["l0000"]);
}

#[test]
fn snapshots_carry_locks_tokens_and_term_tracking() {
    let mut log = Log::new();
    log.granted(1_000, acquire("a", "h1", W, Some(100), 0));
    log.queued(1_001, acquire("a", "h2", R, None, LONG), 1);
    log.granted(1_002, acquire("b", "h3", R, None, 0));
    log.granted(1_003, acquire("c", "h4", W, Some(10), 0));
    log.run(2_000, sweep(&["c"], 0, 5_000));
    log.new_term();
    let bytes = log.state.to_snapshot_bytes();
    let mut back = State::from_snapshot_bytes(&bytes).expect("restores");
    assert_eq!(back, log.state);
    assert_eq!(back.to_snapshot_bytes(), bytes, "deterministic bytes");
    assert_eq!(back.locks_due(3_000), log.state.locks_due(3_000));
    assert_eq!(back.term_started_ms(), None);

    // The restored replica goes on exactly like the original: a expires into lock-delay, c's
    // delay ends and its entry goes, then h2's queued read is granted.
    let mut effects = Effects::default();
    for (time_ms, cmd) in [
        (7_500, acquire("d", "h9", W, None, 0)),
        (7_500, sweep(&["a", "c"], 0, 100)),
        (7_600, sweep(&["a"], 0, 100)),
    ] {
        let ctx = log.ctx(time_ms);
        let want = apply_effects(&mut log.state, &ctx, &cmd, &mut log.effects);
        assert_eq!(apply_effects(&mut back, &ctx, &cmd, &mut effects), want);
    }
    assert_eq!(back, log.state);
    assert_eq!(effects.lock_events.len(), 3);
    assert_eq!(log.holders("a"), [(s("h2"), R, 5)]);
    assert_eq!(back.lock_count(), 3);

    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    let restore = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = body.clone();
        f(&mut b);
        State::from_snapshot_bytes(&serde_json::to_vec(&b).expect("ser"))
    };
    let err = |r: Result<State, String>, part: &str| {
        assert!(r.as_ref().is_err_and(|e| e.contains(part)), "{part}: {r:?}");
    };
    err(
        restore(&|b| b["last_lock_token"] = json!(1)),
        "above the last issued 1",
    );
    let second_writer = |b: &mut serde_json::Value| {
        let mut h = b["locks"][1]["holders"][0].clone();
        h["holder"] = json!("other");
        h["token"] = json!(1);
        b["locks"][0]["holders"]
            .as_array_mut()
            .expect("array")
            .push(h);
    };
    err(restore(&second_writer), "a WRITE holder shares the lock");
    let twice = |b: &mut serde_json::Value| {
        let first = b["locks"][0].clone();
        b["locks"].as_array_mut().expect("array").push(first);
    };
    err(restore(&twice), "lock a twice");
    err(restore(&|b| b["format"] = json!(1)), "cannot hold locks");
    err(restore(&|b| b["format"] = json!(99)), "format 99");
}

#[test]
fn format_1_snapshots_restore_without_locks() {
    let old = json!({
        "format": 1,
        "revision": 0,
        "time_ms": 5,
        "objects": [],
        "retired": [3],
    });
    let state = State::from_snapshot_bytes(&serde_json::to_vec(&old).expect("ser"));
    let state = state.expect("a format 1 snapshot restores");
    assert_eq!((state.time_ms(), state.lock_count()), (5, 0));
    assert_eq!(
        (state.last_lock_token(), state.term_started_ms()),
        (0, None)
    );
    assert!(state.is_retired(3));
}

impl Log {
    /// Every resource write kind, fenced by `lock:token`, must apply.
    fn ok_all(&mut self, time_ms: u64, lock: &str, token: u64) {
        let mut object = director("fenced");
        let f = fence(lock, token);
        let key = object.key();
        let mut cmds = vec![Command::Objects(ObjectCommand::Create {
            object: object.clone(),
            fence: f.clone(),
        })];
        object.spec = RawJson::from_value(&json!({ "v": 2 }));
        cmds.push(Command::Objects(ObjectCommand::Update {
            object: object.clone(),
            expected_revision: None,
            fence: f.clone(),
        }));
        object.status = json!({ "state": "ok" });
        cmds.push(Command::Objects(ObjectCommand::UpdateStatus {
            object: object.clone(),
            expected_revision: None,
            fence: f.clone(),
        }));
        cmds.push(Command::Objects(ObjectCommand::Delete {
            key,
            expected_revision: None,
            fence: f.clone(),
        }));
        cmds.push(Command::Objects(ObjectCommand::Txn {
            ops: vec![TxnOp::Create { object }],
            fence: f,
        }));
        for cmd in cmds {
            let text = cmd.to_string();
            let got = self.run(time_ms, cmd);
            assert!(!matches!(got, Response::Rejected(_)), "{text}: {got:?}");
        }
    }
}
