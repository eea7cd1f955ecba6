//! The ttl checker on hand-made histories: holds kept to their deadline pass; every way of
//! losing one early is flagged, and so is a release later than promise 2 outside faults.

use super::*;
use crate::nemesis::{TimelineEntry, TimelineKind};

const MS: u64 = 1_000_000;

fn step(op: Op, outcome: Outcome, invoke_ms: u64, complete_ms: u64) -> Step {
    Step {
        op,
        outcome,
        invoke_ns: invoke_ms * MS,
        complete_ns: complete_ms * MS,
        lost: false,
        released: false,
        error: String::new(),
    }
}

fn ok(op: Op, invoke_ms: u64, complete_ms: u64) -> Step {
    step(op, Outcome::Ok, invoke_ms, complete_ms)
}

/// A refusal that says the hold is gone.
fn refused(op: Op, invoke_ms: u64, complete_ms: u64) -> Step {
    Step {
        lost: true,
        error: "FailedPrecondition: not held".into(),
        ..step(op, Outcome::Fail, invoke_ms, complete_ms)
    }
}

/// A read that showed the hold held (`None`), gone (`Some(true)`), or a worker listed but not
/// alive (`Some(false)`).
fn read(invoke_ms: u64, complete_ms: u64, gone: Option<bool>) -> Step {
    Step {
        lost: gone.is_some(),
        released: gone == Some(true),
        ..ok(Op::Read, invoke_ms, complete_ms)
    }
}

fn hold(kind: Kind, holder: &str, target: &str, steps: Vec<Step>, end: End) -> Hold {
    Hold {
        process: 0,
        kind,
        holder: holder.into(),
        target: target.into(),
        token: 7,
        ttl_ms: 3_000,
        steps,
        end,
    }
}

/// Acquired at 0-10 ms, refreshed at 10, 600 and 1200 ms (deadline 4200 ms, or 4230 ms from
/// the last refresh's completion), then `tail`.
fn refreshed(kind: Kind, holder: &str, target: &str, tail: Vec<Step>, end: End) -> Hold {
    refreshed_at(0, kind, holder, target, tail, end)
}

/// `refreshed`, everything before `tail` `t0` ms later.
fn refreshed_at(
    t0: u64,
    kind: Kind,
    holder: &str,
    target: &str,
    tail: Vec<Step>,
    end: End,
) -> Hold {
    let mut steps = vec![
        ok(Op::Acquire, t0, t0 + 10),
        ok(Op::Refresh, t0 + 10, t0 + 20),
        ok(Op::Refresh, t0 + 600, t0 + 615),
        ok(Op::Refresh, t0 + 1_200, t0 + 1_230),
    ];
    steps.extend(tail);
    hold(kind, holder, target, steps, end)
}

fn bounds() -> Bounds {
    Bounds {
        election_timeout_max_ms: 2_000,
        lock_sweep_ms: 100,
        pool_reap_ms: 1_000,
        worker_sweep_ms: 200,
        slack_ms: 500,
        settle_ms: 2_000,
        nodes: 3,
    }
}

fn checked(holds: &[Hold]) -> TtlReport {
    check(holds, &[], &bounds())
}

#[test]
fn holds_kept_to_their_deadline_are_valid() {
    let holds = vec![
        // Released while held.
        refreshed(
            Kind::Lock,
            "a",
            "l0",
            vec![ok(Op::Write, 1_230, 1_240), ok(Op::Release, 1_300, 1_310)],
            End::Released,
        ),
        // Granted l0 as a's release went out; silent: deadline 5490 ms (5520 from the last
        // completion), still there at 5590, gone at 5700.
        refreshed_at(
            1_290,
            Kind::Lock,
            "b",
            "l0",
            vec![
                read(5_490, 5_500, None),
                read(5_590, 5_600, None),
                read(5_690, 5_700, Some(true)),
            ],
            End::Silent,
        ),
        // A refresh refused just after the deadline: lost on time.
        refreshed(
            Kind::Pool,
            "c",
            "r0",
            vec![refused(Op::Refresh, 4_190, 4_201)],
            End::Lost,
        ),
        // A worker shown dead at 4250, removed at 4500.
        refreshed(
            Kind::Worker,
            "w",
            "w",
            vec![
                read(4_100, 4_110, None),
                read(4_240, 4_250, Some(false)),
                read(4_490, 4_500, Some(true)),
            ],
            End::Silent,
        ),
    ];
    let report = checked(&holds);
    assert!(report.valid(), "{}", report.text().expect("text"));
    assert!(
        report.summary().ends_with(": VALID"),
        "{}",
        report.summary()
    );
    assert_eq!(report.judged, 2);
    let lock = &report.lateness[0];
    assert_eq!((lock.kind, lock.measured), (Kind::Lock, 1));
    let upper = lock.upper.expect("a sample");
    assert_eq!(upper.max_ms, 210.0, "gone at 5700, deadline 5490");
    assert_eq!(
        lock.lower.expect("a sample").max_ms,
        70.0,
        "there at 5590, deadline 5520 from the answer"
    );
    let worker = &report.lateness[2];
    assert_eq!(
        worker.upper.expect("a sample").p50_ms,
        300.0,
        "removed, not dead, ends it"
    );
    assert_eq!(
        worker.lower.expect("a sample").p50_ms,
        10.0,
        "listed (dead) at 4240, deadline 4230 from the answer"
    );
}

#[test]
fn a_refusal_as_lost_before_the_deadline_is_an_early_loss() {
    for op in [Op::Refresh, Op::Write, Op::Release] {
        let h = refreshed(
            Kind::Lock,
            "a",
            "l0",
            vec![refused(op, 1_800, 1_850)],
            End::Lost,
        );
        let report = checked(&[h]);
        assert!(!report.valid());
        assert_eq!(report.early_count, 1, "{op:?}");
        let e = &report.early[0];
        assert_eq!(
            (e.kind, e.holder.as_str(), e.target.as_str()),
            (Kind::Lock, "a", "l0")
        );
        assert_eq!((e.at_ns, e.deadline_ns), (1_850 * MS, 4_200 * MS));
        assert_eq!(e.early_ms, 2_350.0);
        assert!(
            report.summary().contains("1 early losses"),
            "{}",
            report.summary()
        );
        assert!(report.summary().ends_with(": INVALID"));
        let text = report.text().expect("text");
        assert!(
            text.starts_with("early loss: lock l0 of a: "),
            "verdict.txt names the anomaly: {text}"
        );
    }
}

#[test]
fn a_loss_is_early_only_past_the_tolerance_and_only_if_definite() {
    // 2 ms before the deadline: within the rounding of cluster time.
    let close = refreshed(
        Kind::Pool,
        "a",
        "r0",
        vec![refused(Op::Refresh, 4_150, 4_198)],
        End::Lost,
    );
    assert!(checked(&[close]).valid());
    // A refusal that does not say the hold is gone (NOT_APPLIED, say), or an unknown outcome.
    let mut other = refused(Op::Refresh, 1_800, 1_850);
    other.lost = false;
    let unknown = Step {
        outcome: Outcome::Unknown,
        ..refused(Op::Refresh, 2_400, 2_450)
    };
    let h = refreshed(Kind::Pool, "a", "r0", vec![other, unknown], End::Released);
    assert!(checked(&[h]).valid());
    // A read that failed shows nothing.
    let failed_read = Step {
        outcome: Outcome::Unknown,
        ..read(1_900, 1_950, Some(true))
    };
    let h = refreshed(Kind::Lock, "a", "l0", vec![failed_read], End::Unresolved);
    assert!(checked(&[h]).valid());
    // The deadline counts from the sending of acknowledged refreshes only: one sent at 1800
    // whose answer was lost moves nothing, so a refusal at 4250 is on time.
    let lost_answer = step(Op::Refresh, Outcome::Unknown, 1_800, 3_000);
    let h = refreshed(
        Kind::Lock,
        "a",
        "l0",
        vec![lost_answer, refused(Op::Refresh, 4_200, 4_250)],
        End::Lost,
    );
    assert!(checked(&[h]).valid());
}

#[test]
fn a_read_showing_the_hold_gone_before_the_deadline_is_an_early_loss() {
    let h = refreshed(
        Kind::Pool,
        "a",
        "r0",
        vec![read(3_000, 3_020, Some(true))],
        End::Silent,
    );
    let report = checked(&[h]);
    assert_eq!(report.early_count, 1);
    assert_eq!(report.early[0].how, "a linearizable read showed it gone");
    // A worker listed but not alive before its deadline has lost it too.
    let w = refreshed(
        Kind::Worker,
        "w",
        "w",
        vec![read(2_000, 2_010, Some(false))],
        End::Silent,
    );
    assert_eq!(checked(&[w]).early_count, 1);
}

#[test]
fn a_lock_or_lease_given_to_another_while_held_is_an_early_loss() {
    // a's deadline is 4200; b's acquire of the same resource is acknowledged at 3000.
    let a = refreshed(
        Kind::Pool,
        "a",
        "r0",
        vec![read(3_100, 3_110, None)],
        End::Unresolved,
    );
    let b = hold(
        Kind::Pool,
        "b",
        "r0",
        vec![ok(Op::Acquire, 2_500, 3_000), ok(Op::Refresh, 3_000, 3_010)],
        End::Released,
    );
    let report = checked(&[a.clone(), b.clone()]);
    assert_eq!(report.early_count, 1, "{:?}", report.early);
    let e = &report.early[0];
    assert_eq!(e.holder, "a");
    assert!(e
        .how
        .starts_with("given to b (its acquire acknowledged at 3000000000 ns)"));
    assert_eq!((e.at_ns, e.deadline_ns), (3_000 * MS, 4_200 * MS));
    // Another resource, or after a's release was sent: no anomaly.
    let elsewhere = Hold {
        target: "r1".into(),
        ..b.clone()
    };
    assert!(checked(&[a.clone(), elsewhere]).valid());
    let released = refreshed(
        Kind::Pool,
        "a",
        "r0",
        vec![ok(Op::Release, 2_400, 2_410)],
        End::Released,
    );
    assert!(checked(&[released, b.clone()]).valid());
    // Workers are never given to another: each has its own id.
    let wa = Hold {
        kind: Kind::Worker,
        ..a
    };
    let wb = Hold {
        kind: Kind::Worker,
        ..b
    };
    assert!(checked(&[wa, wb]).valid());
}

#[test]
fn a_silent_hold_released_past_the_bound_outside_faults_is_late() {
    // Lock: bound 2000 + 100 + 500 ms past the last refresh's completion + TTL (4330).
    let late = refreshed(
        Kind::Lock,
        "a",
        "l0",
        vec![read(7_000, 7_010, None), read(7_100, 7_110, Some(true))],
        End::Silent,
    );
    let report = checked(std::slice::from_ref(&late));
    assert_eq!(
        (report.late_count, report.early_count, report.judged),
        (1, 0, 1)
    );
    assert_eq!(report.late[0].late_ms_at_least, 2_770.0);
    assert_eq!(report.late[0].bound_ms, 2_600);
    assert!(report
        .summary()
        .contains("1 late releases of 1 judged): INVALID"));
    assert!(report
        .text()
        .expect("text")
        .starts_with("late release: lock l0 of a: "));
    // Within the bound: valid (there at 6800 is 2470 ms past 4330).
    let mut in_time = late.clone();
    in_time.steps[4] = read(6_800, 6_810, None);
    in_time.steps[5] = read(6_900, 6_910, Some(true));
    assert!(checked(&[in_time]).valid());
    // A fault (other than clock) during the silence excuses it.
    let report = check(
        std::slice::from_ref(&late),
        &[(5_000 * MS, 5_500 * MS)],
        &bounds(),
    );
    assert!(report.valid());
    assert_eq!((report.judged, report.excused_by_fault), (0, 1));
    assert_eq!(report.lateness[0].measured, 1, "measured all the same");
    assert_eq!(report.lateness_judged[0].measured, 0, "but not judged");
    // A refresh of unknown outcome makes the deadline uncertain: not judged, not measured.
    let mut uncertain = late;
    uncertain
        .steps
        .insert(4, step(Op::Refresh, Outcome::Unknown, 1_800, 3_000));
    let report = checked(&[uncertain]);
    assert!(report.valid());
    assert_eq!((report.uncertain, report.lateness[0].measured), (1, 0));
}

#[test]
fn only_faults_that_may_leave_no_quorum_excuse_lateness_until_they_settle() {
    let entry = |at_ms: u64, kind: TimelineKind, nemesis: Option<&str>| TimelineEntry {
        at_ns: at_ms * MS,
        what: String::new(),
        kind,
        nemesis: nemesis.map(str::to_string),
    };
    let timeline = vec![
        entry(1_000, TimelineKind::Fault, Some("clock")),
        entry(3_000, TimelineKind::Heal, None),
        entry(4_000, TimelineKind::Fault, Some("kill")),
        entry(5_000, TimelineKind::Heal, None),
        entry(5_500, TimelineKind::Fault, Some("pause")),
        entry(5_800, TimelineKind::Heal, None),
        entry(6_000, TimelineKind::Fault, Some("membership")),
        entry(8_000, TimelineKind::Heal, None),
        // A fault that found nothing to do excuses nothing.
        entry(12_000, TimelineKind::Fault, None),
        entry(14_000, TimelineKind::Heal, None),
        entry(20_000, TimelineKind::Fault, Some("partition")),
    ];
    let judged = |nodes| Bounds { nodes, ..bounds() }.judged_faults();
    // Three or five nodes: every fault leaves a quorum up.
    for nodes in [3, 5] {
        assert_eq!(excused_windows(&timeline, judged(nodes), 2_000), vec![]);
    }
    // Four: halves may be equal, so partitions and membership changes are excused.
    assert_eq!(
        excused_windows(&timeline, judged(4), 2_000),
        vec![(6_000 * MS, 10_000 * MS), (20_000 * MS, u64::MAX)]
    );
    // Two: a kill or pause is no quorum either; a clock fault still is one.
    assert_eq!(
        excused_windows(&timeline, judged(2), 2_000),
        vec![
            (4_000 * MS, 7_000 * MS),
            (5_500 * MS, 7_800 * MS),
            (6_000 * MS, 10_000 * MS),
            (20_000 * MS, u64::MAX)
        ]
    );
}

#[test]
fn percentiles_are_nearest_rank() {
    assert_eq!(Stats::of(&[]), None);
    let values: Vec<f64> = (1..=200).map(f64::from).collect();
    let s = Stats::of(&values).expect("values");
    assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (100.0, 198.0, 200.0));
    let one = Stats::of(&[-3.0]).expect("one");
    assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (-3.0, -3.0, -3.0));
}

#[test]
fn holds_survive_json() {
    let h = refreshed(
        Kind::Worker,
        "w",
        "w",
        vec![read(4_300, 4_310, Some(false))],
        End::Unresolved,
    );
    let back: Hold =
        serde_json::from_str(&serde_json::to_string(&h).expect("json")).expect("parse");
    assert_eq!(back, h);
    assert_eq!(kind_of(0), Kind::Lock);
    assert_eq!(kind_of(4), Kind::Pool);
    assert_eq!(kind_of(8), Kind::Worker);
}
