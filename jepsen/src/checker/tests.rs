//! Known histories, each with the verdict it must get, plus property tests against histories
//! generated from a real register. Times in the tables are milliseconds.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::history::{Outcome, RegisterEvent, RegisterOp};

const LIMIT: Duration = Duration::from_secs(10);

fn event(process: u64, op: RegisterOp, invoke_ms: u64, complete_ms: u64) -> RegisterEvent {
    RegisterEvent {
        process,
        key: "k".to_string(),
        op,
        value: None,
        expected: None,
        read: None,
        outcome: Outcome::Ok,
        invoke_ns: invoke_ms * 1_000_000,
        complete_ns: complete_ms * 1_000_000,
        error: String::new(),
    }
}

fn write(process: u64, value: i64, invoke_ms: u64, complete_ms: u64) -> RegisterEvent {
    RegisterEvent {
        value: Some(value),
        ..event(process, RegisterOp::Write, invoke_ms, complete_ms)
    }
}

/// A read that returned `read` (`None`: absent).
fn read(process: u64, read: Option<i64>, invoke_ms: u64, complete_ms: u64) -> RegisterEvent {
    RegisterEvent {
        read: Some(read),
        ..event(process, RegisterOp::Read, invoke_ms, complete_ms)
    }
}

fn cas(process: u64, expected: i64, value: i64, invoke_ms: u64, complete_ms: u64) -> RegisterEvent {
    RegisterEvent {
        expected: Some(expected),
        value: Some(value),
        ..event(process, RegisterOp::Cas, invoke_ms, complete_ms)
    }
}

fn unknown(e: RegisterEvent) -> RegisterEvent {
    let read = if e.op == RegisterOp::Read {
        None
    } else {
        e.read
    };
    RegisterEvent {
        outcome: Outcome::Unknown,
        read,
        error: "deadline exceeded".into(),
        ..e
    }
}

fn failed(e: RegisterEvent) -> RegisterEvent {
    RegisterEvent {
        outcome: Outcome::Fail,
        error: "aborted: precondition".into(),
        ..e
    }
}

fn on(key: &str, e: RegisterEvent) -> RegisterEvent {
    RegisterEvent {
        key: key.to_string(),
        ..e
    }
}

fn verdict(history: &[RegisterEvent]) -> Verdict {
    check_register(history, LIMIT).0
}

#[track_caller]
fn assert_valid(history: &[RegisterEvent]) {
    let v = verdict(history);
    assert_eq!(v, Verdict::Valid, "expected VALID:\n{}", render(&v));
}

#[track_caller]
fn assert_invalid(history: &[RegisterEvent]) {
    let v = verdict(history);
    assert!(
        matches!(v, Verdict::Invalid { .. }),
        "expected INVALID, got:\n{}",
        render(&v)
    );
}

// ---- Known non-linearizable histories ----

#[test]
fn stale_read_is_invalid() {
    // The write completed before the read started, yet the read saw the initial (absent) value.
    assert_invalid(&[write(1, 1, 0, 10), read(2, None, 20, 30)]);
    // The same with an older value instead of absent.
    assert_invalid(&[
        write(1, 1, 0, 10),
        write(1, 2, 20, 30),
        read(2, Some(1), 40, 50),
        read(3, Some(2), 35, 45),
    ]);
    // Control: the read overlapping the write may see either.
    assert_valid(&[write(1, 1, 0, 10), read(2, None, 5, 30)]);
}

#[test]
fn lost_write_is_invalid() {
    assert_invalid(&[
        write(1, 1, 0, 10),
        write(2, 2, 20, 30),
        read(3, Some(1), 40, 50),
    ]);
    // Control: overlapping writes may land in either order.
    assert_valid(&[
        write(1, 1, 0, 25),
        write(2, 2, 20, 30),
        read(3, Some(1), 40, 50),
    ]);
}

#[test]
fn write_reordering_is_invalid() {
    // w1 precedes w2; the first read overlaps w2 and sees 2, the later read sees 1 again.
    let w1 = write(1, 1, 0, 10);
    let w2 = write(2, 2, 20, 100);
    let r2 = read(3, Some(2), 30, 40);
    let r1 = read(3, Some(1), 50, 60);
    assert_invalid(&[w1.clone(), w2.clone(), r2.clone(), r1.clone()]);
    // Each read alone is fine; only together do they order the writes backwards.
    assert_valid(&[w1.clone(), w2.clone(), r2]);
    assert_valid(&[w1, w2, r1]);
}

#[test]
fn cas_against_a_value_never_current_is_invalid() {
    assert_invalid(&[write(1, 1, 0, 10), cas(2, 5, 6, 20, 30)]);
    // 1 was current once, but no longer when the CAS ran.
    assert_invalid(&[
        write(1, 1, 0, 10),
        write(1, 2, 20, 30),
        cas(2, 1, 3, 40, 50),
    ]);
    // Control: against the current value it is fine.
    assert_valid(&[
        write(1, 1, 0, 10),
        write(1, 2, 20, 30),
        cas(2, 2, 3, 40, 50),
        read(1, Some(3), 60, 70),
    ]);
}

#[test]
fn read_of_a_value_never_written_is_invalid() {
    assert_invalid(&[write(1, 1, 0, 10), read(2, Some(7), 5, 15)]);
    // Not even a failed write or an unknown read makes a value readable.
    assert_invalid(&[
        failed(write(1, 7, 0, 10)),
        unknown(read(3, None, 0, 5)),
        read(2, Some(7), 20, 30),
    ]);
}

#[test]
fn a_tie_between_complete_and_invoke_counts_as_concurrent() {
    // a precedes b iff a.complete < b.invoke: equal times are concurrent.
    assert_valid(&[write(1, 1, 0, 10), read(2, None, 10, 20)]);
    assert_invalid(&[write(1, 1, 0, 10), read(2, None, 11, 20)]);
}

// ---- Known linearizable histories ----

#[test]
fn concurrent_writes_may_be_seen_in_either_order() {
    for (first, second) in [(1, 2), (2, 1)] {
        assert_valid(&[
            write(1, 1, 0, 100),
            write(2, 2, 0, 100),
            read(3, Some(first), 10, 20),
            read(3, Some(second), 30, 40),
            read(4, Some(second), 200, 210),
        ]);
    }
    // But once both are done and one was seen last, it stays.
    assert_invalid(&[
        write(1, 1, 0, 100),
        write(2, 2, 0, 100),
        read(3, Some(2), 150, 160),
        read(3, Some(1), 170, 180),
    ]);
}

#[test]
fn an_unknown_write_may_have_taken_effect() {
    assert_valid(&[
        write(1, 1, 0, 10),
        unknown(write(2, 2, 20, 30)),
        read(3, Some(2), 40, 50),
    ]);
}

#[test]
fn an_unknown_write_may_never_take_effect() {
    assert_valid(&[
        write(1, 1, 0, 10),
        unknown(write(2, 2, 20, 30)),
        read(3, Some(1), 40, 50),
    ]);
    // The same with its value observed elsewhere, so it stays in the search.
    assert_valid(&[
        write(1, 1, 0, 10),
        unknown(write(2, 2, 20, 30)),
        read(3, Some(1), 40, 50),
        write(1, 2, 60, 70),
        read(3, Some(2), 80, 90),
    ]);
    // Control: the same history with the write acknowledged is a lost write.
    assert_invalid(&[
        write(1, 1, 0, 10),
        write(2, 2, 20, 30),
        read(3, Some(1), 40, 50),
    ]);
}

#[test]
fn an_unknown_write_may_take_effect_after_its_complete_time() {
    let history = [
        write(1, 1, 0, 10),
        unknown(write(2, 2, 20, 30)),
        read(3, Some(1), 40, 50),
        read(3, Some(2), 1_000, 1_010),
    ];
    assert_valid(&history);
    // Control: an acknowledged write cannot land after its completion.
    let mut acked = history.clone();
    acked[1].outcome = Outcome::Ok;
    assert_invalid(&acked);
}

#[test]
fn an_unknown_cas_may_take_effect_or_not() {
    let history = |seen| {
        [
            write(1, 1, 0, 10),
            unknown(cas(2, 1, 2, 20, 30)),
            read(3, Some(seen), 40, 50),
        ]
    };
    assert_valid(&history(1));
    assert_valid(&history(2));
    // But only if its precondition could hold.
    assert_invalid(&[
        write(1, 1, 0, 10),
        unknown(cas(2, 9, 2, 20, 30)),
        read(3, Some(2), 40, 50),
    ]);
}

#[test]
fn failed_cas_is_ignored() {
    assert_valid(&[
        write(1, 1, 0, 10),
        failed(cas(2, 1, 2, 20, 30)),
        read(3, Some(1), 40, 50),
    ]);
    assert_valid(&[
        write(1, 1, 0, 10),
        failed(cas(2, 5, 6, 20, 30)),
        read(3, Some(1), 40, 50),
    ]);
    // Control: had it succeeded, the read would be stale.
    assert_invalid(&[
        write(1, 1, 0, 10),
        cas(2, 1, 2, 20, 30),
        read(3, Some(1), 40, 50),
    ]);
}

#[test]
fn keys_are_independent() {
    let history = [
        on("a", write(1, 1, 0, 10)),
        on("b", write(2, 2, 0, 10)),
        on("b", read(1, None, 0, 5)),
        on("a", read(2, Some(1), 20, 30)),
        on("b", read(1, Some(2), 20, 30)),
        on("c", read(3, None, 40, 50)),
    ];
    assert_valid(&history);
    let (_, stats) = check_register(&history, LIMIT);
    assert_eq!((stats.keys, stats.events), (3, 6));
    // A value written only to `a` is never readable on `b`.
    assert_invalid(&[
        on("a", write(1, 1, 0, 10)),
        on("b", read(2, Some(1), 20, 30)),
    ]);
}

#[test]
fn the_smallest_failing_key_is_reported_with_its_longest_linearization() {
    let history = [
        on("big", write(1, 1, 0, 10)),
        on("big", write(1, 2, 20, 30)),
        on("big", read(2, Some(1), 40, 50)),
        on("big", read(2, Some(2), 60, 70)),
        on("small", write(1, 1, 0, 10)),
        on("small", write(1, 5, 20, 30)),
        on("small", read(2, Some(7), 40, 50)),
    ];
    let Verdict::Invalid {
        key,
        history,
        longest_linearization,
    } = verdict(&history)
    else {
        panic!("expected INVALID")
    };
    assert_eq!(key, "small");
    assert_eq!(history.len(), 3);
    assert_eq!(
        longest_linearization,
        vec![0, 1],
        "both writes, then stuck at the read of 7"
    );
}

#[test]
fn malformed_or_oversized_histories_are_unknown() {
    let backwards = write(1, 1, 10, 0);
    assert!(matches!(
        verdict(std::slice::from_ref(&backwards)),
        Verdict::Unknown { .. }
    ));
    let ok_read_without_value = RegisterEvent {
        read: None,
        ..read(1, None, 0, 10)
    };
    assert!(matches!(
        verdict(&[ok_read_without_value]),
        Verdict::Unknown { .. }
    ));
    let history = [write(1, 1, 0, 10), read(2, Some(1), 20, 30)];
    assert_eq!(verdict(&history), Verdict::Valid);
    assert!(matches!(
        check_with(&history, LIMIT, 1, CACHE_BYTES_MAX).0,
        Verdict::Unknown { .. }
    ));
    assert!(matches!(
        check_with(&history, LIMIT, KEY_EVENTS_MAX, 0).0,
        Verdict::Unknown { .. }
    ));
    // A definite failure on a larger key still wins over an undecided smaller one.
    let mixed = [
        on("a", backwards),
        on("b", write(1, 1, 0, 10)),
        on("b", read(2, None, 20, 30)),
    ];
    let (v, _) = check_register(&mixed, LIMIT);
    assert!(
        matches!(&v, Verdict::Invalid { key, .. } if key == "b"),
        "{}",
        render(&v)
    );
}

#[test]
fn an_observed_unknown_write_of_a_unique_value_is_required_before_its_first_observer() {
    let history = [
        write(1, 1, 0, 10),
        unknown(write(2, 5, 20, 30)),
        read(3, Some(5), 60, 70),
        cas(4, 5, 6, 40, 80),
        unknown(write(2, 7, 20, 30)),
        unknown(write(5, 7, 20, 30)),
        read(3, Some(7), 90, 100),
    ];
    let refs: Vec<&RegisterEvent> = history.iter().collect();
    let ops = model::prepare(&refs).unwrap();
    let window = |index: usize| {
        ops.iter()
            .find(|op| op.index == index)
            .map(|op| op.complete_ns)
    };
    assert_eq!(
        window(1),
        Some(Some(70_000_000)),
        "bounded by the read, the earlier of its observers"
    );
    assert_eq!(
        window(4),
        Some(None),
        "7 has two writers: either may be the one seen, both optional"
    );
    assert_eq!(window(5), Some(None));
    assert_valid(&history);
    // Seen before it was even invoked: only it writes 5, so this is invalid.
    assert_invalid(&[read(3, Some(5), 0, 10), unknown(write(2, 5, 20, 30))]);
    // Absent is the initial state, so "unique writer of absent" does not hold: still optional.
    let refs = [&history[0]];
    assert_eq!(model::prepare(&refs).unwrap().len(), 1);
}

/// Many concurrent writes of distinct values, then a read of a value nobody wrote: deciding it
/// needs every order of the writes (2^n sets x n states), far beyond the limit.
fn pathological(writes: u64) -> Vec<RegisterEvent> {
    let mut history: Vec<RegisterEvent> =
        (0..writes).map(|i| write(i, i as i64, 0, 1_000)).collect();
    history.extend((0..writes).map(|i| read(writes + i, Some(i as i64), 1 + i, 999)));
    history.push(read(0, Some(-1), 2_000, 2_010));
    history
}

#[test]
fn a_search_past_its_time_limit_is_unknown_never_valid() {
    let started = Instant::now();
    let (v, stats) = check_register(&pathological(40), Duration::from_millis(200));
    let Verdict::Unknown { reason } = &v else {
        panic!("expected UNKNOWN, got:\n{}", render(&v))
    };
    assert!(reason.contains("time limit"), "{reason}");
    assert!(stats.states_explored > 0);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the limit was not enforced: {:?}",
        started.elapsed()
    );
    // A zero limit on a large history never passes either.
    let mut many = pathological(40);
    many.extend((0..50).map(|i| on(&format!("k{i}"), write(1, 1, 0, 1))));
    assert!(!check_register(&many, Duration::ZERO).0.is_valid());
}

#[test]
fn render_shows_the_key_the_ops_and_the_linearization() {
    let history = [
        on("r7", write(1, 1, 0, 10)),
        on("r7", failed(cas(4, 3, 4, 1, 2))),
        on("r7", unknown(write(3, 9, 5, 6))),
        on("r7", read(2, None, 20, 30)),
    ];
    let v = verdict(&history);
    let text = render(&v);
    assert!(text.starts_with("INVALID"), "{text}");
    for needle in [
        "\"r7\"",
        "write",
        "read",
        "cas",
        "-> absent",
        "3 -> 4",
        "fail (ignored)",
        "unknown",
        "20.000",
        "register = 1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(
        text.contains("#3 read -> absent"),
        "the stuck op is named:\n{text}"
    );
    assert!(render(&Verdict::Valid).starts_with("VALID"));
    assert!(render(&Verdict::Unknown {
        reason: "why".into()
    })
    .contains("why"));
}

#[test]
fn verdicts_round_trip_as_json() {
    // (A read of absent, `read: Some(None)`, would come back as `None` — serde_json writes both
    // as null — so this history reads a value.)
    let v = verdict(&[
        write(1, 1, 0, 10),
        write(1, 2, 20, 30),
        read(2, Some(1), 40, 50),
    ]);
    let json = serde_json::to_string(&v).unwrap();
    assert!(json.contains("\"verdict\":\"invalid\""), "{json}");
    assert_eq!(serde_json::from_str::<Verdict>(&json).unwrap(), v);
}

// ---- Generated histories ----

/// A tiny deterministic generator for the histories below (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// How a generated op took effect on the real register.
struct Planned {
    event: RegisterEvent,
    /// When it took effect (ns), or `None`: never (unknown and lost).
    effect_ns: Option<u64>,
}

/// The values a generated history writes.
#[derive(Clone, Copy, Debug)]
enum Values {
    /// Every write a new value, and CAS expecting what it read, as the register workload does.
    Unique,
    /// Values drawn from `0..n`: many writers per value, the hard case for the search.
    Few(i64),
}

/// A concurrent history of real registers: every key is created with 0 at time 0, then
/// `processes` clients run ops back to back on random keys; each op takes effect at a random
/// point inside its interval (1 in 25 is unknown: at a random point after invoke, possibly after
/// complete, or never). Reads and CAS results come from applying the effects in time order, so
/// the history is linearizable by construction.
fn generate(
    seed: u64,
    keys: u64,
    ops: usize,
    processes: u64,
    values: Values,
) -> Vec<RegisterEvent> {
    let mut rng = Rng(seed);
    let mut clocks = vec![0u64; processes as usize];
    let mut planned: Vec<Planned> = (0..keys)
        .map(|k| Planned {
            event: on(&format!("r{k}"), write(processes, 0, 0, 0)),
            effect_ns: Some(0),
        })
        .collect();
    let mut next_value = 0;
    for _ in 0..ops {
        let process = rng.below(processes);
        let invoke_ns = clocks[process as usize] + 1 + rng.below(2_000_000);
        let complete_ns = invoke_ns + 100_000 + rng.below(10_000_000);
        clocks[process as usize] = complete_ns;
        let op = match rng.below(10) {
            0..=4 => RegisterOp::Read,
            5..=7 => RegisterOp::Write,
            _ => RegisterOp::Cas,
        };
        next_value += 1;
        let (value, expected) = match values {
            // The expected value of a CAS is settled when it takes effect.
            Values::Unique => (next_value, -1),
            Values::Few(n) => (rng.below(n as u64) as i64, rng.below(n as u64) as i64),
        };
        let (outcome, effect_ns) = if rng.below(25) == 0 {
            let effect =
                (rng.below(2) == 0).then(|| invoke_ns + rng.below(5 * (complete_ns - invoke_ns)));
            (Outcome::Unknown, effect)
        } else {
            (
                Outcome::Ok,
                Some(invoke_ns + rng.below(complete_ns - invoke_ns + 1)),
            )
        };
        let event = RegisterEvent {
            process,
            key: format!("r{}", rng.below(keys)),
            op,
            value: (op != RegisterOp::Read).then_some(value),
            expected: (op == RegisterOp::Cas).then_some(expected),
            read: None,
            outcome,
            invoke_ns,
            complete_ns,
            error: String::new(),
        };
        planned.push(Planned { event, effect_ns });
    }
    apply_in_effect_order(&mut planned, values, &mut rng);
    planned.into_iter().map(|p| p.event).collect()
}

/// Runs the effects against one real register per key and records what the reads saw and whether
/// each CAS held (a CAS whose precondition did not hold is a definite failure).
fn apply_in_effect_order(planned: &mut [Planned], values: Values, rng: &mut Rng) {
    let mut order: Vec<usize> = (0..planned.len())
        .filter(|&i| planned[i].effect_ns.is_some())
        .collect();
    order.sort_by_key(|&i| planned[i].effect_ns);
    let mut registers: std::collections::HashMap<String, Option<i64>> = Default::default();
    for i in order {
        let e = &mut planned[i].event;
        let current = registers.entry(e.key.clone()).or_default();
        if let (RegisterOp::Cas, Values::Unique, Some(v)) = (e.op, values, *current) {
            // Mostly the value it read; sometimes a stale one, a CAS that must fail.
            e.expected = Some(if rng.below(5) == 0 { v - 1 } else { v });
        }
        match e.op {
            RegisterOp::Read if e.outcome == Outcome::Ok => e.read = Some(*current),
            RegisterOp::Read => {}
            RegisterOp::Write => *current = e.value,
            RegisterOp::Cas if *current == e.expected => *current = e.value,
            RegisterOp::Cas if e.outcome == Outcome::Ok => e.outcome = Outcome::Fail,
            RegisterOp::Cas => {} // unknown and its precondition did not hold: no effect either way
        }
    }
}

#[derive(Clone, Debug)]
enum Gen {
    Read,
    Write(i64),
    Cas(i64, i64),
}

fn gen_op() -> impl Strategy<Value = (Gen, u64, u64, u64, u8)> {
    let op = prop_oneof![
        Just(Gen::Read),
        (0..4i64).prop_map(Gen::Write),
        (0..4i64, 0..4i64).prop_map(|(e, v)| Gen::Cas(e, v)),
    ];
    // (op, process, gap ms, duration ms, fate: 0..8 ok, 8 unknown+applied, 9 unknown+lost)
    (op, 0..4u64, 0..3u64, 0..5u64, 0..10u8)
}

/// A sequential history (no two ops overlap) of one real register, ending with an ok read.
fn sequential(ops: Vec<(Gen, u64, u64, u64, u8)>) -> Vec<RegisterEvent> {
    let mut current: Option<i64> = None;
    let mut now = 0;
    let mut history = Vec::new();
    let last = (Gen::Read, 0, 1, 1, 0);
    for (op, process, gap, duration, fate) in ops.into_iter().chain([last]) {
        let invoke = now + gap;
        now = invoke + duration;
        let e = match op {
            Gen::Read => read(process, current, invoke, now),
            Gen::Write(v) => write(process, v, invoke, now),
            Gen::Cas(expected, v) => cas(process, expected, v, invoke, now),
        };
        let takes_effect = fate != 9;
        let e = match &op {
            _ if fate >= 8 => unknown(e),
            Gen::Cas(expected, _) if current != Some(*expected) => failed(e),
            _ => e,
        };
        if takes_effect && e.outcome != Outcome::Fail {
            match op {
                Gen::Read => {}
                Gen::Write(v) => current = Some(v),
                Gen::Cas(expected, v) if current == Some(expected) => current = Some(v),
                Gen::Cas(..) => {}
            }
        }
        history.push(e);
    }
    history
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sequential_histories_of_a_real_register_are_valid(ops in prop::collection::vec(gen_op(), 0..40)) {
        let history = sequential(ops);
        let v = verdict(&history);
        prop_assert_eq!(&v, &Verdict::Valid, "{}", render(&v));
    }

    #[test]
    fn one_read_of_a_never_written_value_is_invalid(
        ops in prop::collection::vec(gen_op(), 0..40),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut history = sequential(ops);
        let reads: Vec<usize> = (0..history.len())
            .filter(|&i| history[i].op == RegisterOp::Read && history[i].outcome == Outcome::Ok)
            .collect();
        history[reads[pick.index(reads.len())]].read = Some(Some(1_000));
        let v = verdict(&history);
        prop_assert!(matches!(v, Verdict::Invalid { .. }), "{}", render(&v));
    }

    #[test]
    fn concurrent_histories_of_real_registers_are_valid(seed in any::<u64>(), processes in 1..6u64) {
        for values in [Values::Unique, Values::Few(4)] {
            let history = generate(seed, 3, 150, processes, values);
            let v = verdict(&history);
            prop_assert_eq!(&v, &Verdict::Valid, "{}", render(&v));
        }
    }
}

/// The definition, by brute force: some order of all ok ops and any subset of the unknown
/// writes / CAS, respecting real time (`a` before `b` if `a` completed before `b` was invoked;
/// unknown ops never complete), is a legal run of the register. Only for a handful of ops.
fn brute_force_linearizable(history: &[RegisterEvent]) -> bool {
    let ops: Vec<&RegisterEvent> = history
        .iter()
        .filter(|e| {
            e.outcome == Outcome::Ok || (e.outcome == Outcome::Unknown && e.op != RegisterOp::Read)
        })
        .collect();
    fn extend(ops: &[&RegisterEvent], placed: &mut Vec<bool>, state: Option<i64>) -> bool {
        let all_ok_placed = ops
            .iter()
            .zip(placed.iter())
            .all(|(e, &p)| p || e.outcome != Outcome::Ok);
        if all_ok_placed {
            return true;
        }
        for i in 0..ops.len() {
            let blocked = (0..ops.len()).any(|j| {
                !placed[j] && ops[j].outcome == Outcome::Ok && ops[j].complete_ns < ops[i].invoke_ns
            });
            if placed[i] || blocked {
                continue;
            }
            let e = ops[i];
            let next = match e.op {
                RegisterOp::Read => (e.read == Some(state)).then_some(state),
                RegisterOp::Write => Some(e.value),
                RegisterOp::Cas => (e.expected == state).then_some(e.value),
            };
            if let Some(next) = next {
                placed[i] = true;
                let found = extend(ops, placed, next);
                placed[i] = false;
                if found {
                    return true;
                }
            }
        }
        false
    }
    extend(&ops, &mut vec![false; ops.len()], None)
}

/// `order` (indexes into `history`) is a legal run of the register that respects real time: no
/// op in it is preceded by an ok op left out or placed later.
fn is_legal_prefix(history: &[RegisterEvent], order: &[usize]) -> bool {
    let mut state = None;
    for (position, &i) in order.iter().enumerate() {
        let e = &history[i];
        let placed_before = &order[..position];
        let overtaken = history.iter().enumerate().any(|(j, other)| {
            other.outcome == Outcome::Ok
                && other.complete_ns < e.invoke_ns
                && !placed_before.contains(&j)
        });
        let next = match e.op {
            RegisterOp::Read => (e.read == Some(state)).then_some(state),
            RegisterOp::Write => Some(e.value),
            RegisterOp::Cas => (e.expected == state).then_some(e.value),
        };
        match next {
            Some(next) if !overtaken && e.outcome != Outcome::Fail => state = next,
            _ => return false,
        }
    }
    true
}

fn small_event() -> impl Strategy<Value = RegisterEvent> {
    let value = || prop_oneof![Just(None), (0..3i64).prop_map(Some)];
    let outcome =
        prop_oneof![6 => Just(Outcome::Ok), 1 => Just(Outcome::Fail), 3 => Just(Outcome::Unknown)];
    (
        0..3u8,
        value(),
        value(),
        value(),
        outcome,
        0..20u64,
        0..10u64,
    )
        .prop_map(
            |(op, value, expected, seen, outcome, invoke_ms, duration_ms)| {
                let mut e = match op {
                    0 => read(1, seen, invoke_ms, invoke_ms + duration_ms),
                    1 => write(1, 0, invoke_ms, invoke_ms + duration_ms),
                    _ => cas(1, 0, 0, invoke_ms, invoke_ms + duration_ms),
                };
                if e.op != RegisterOp::Read {
                    e.value = value;
                }
                if e.op == RegisterOp::Cas {
                    e.expected = expected;
                }
                match outcome {
                    Outcome::Ok => e,
                    Outcome::Fail => failed(e),
                    Outcome::Unknown => unknown(e),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The search, its pruning of unknown ops and the tie rule agree with the definition.
    #[test]
    fn agrees_with_brute_force_on_small_histories(history in prop::collection::vec(small_event(), 0..7)) {
        let expected = brute_force_linearizable(&history);
        let v = verdict(&history);
        prop_assert_eq!(v.is_valid(), expected, "{}", render(&v));
        prop_assert!(!matches!(v, Verdict::Unknown { .. }), "undecided: {}", render(&v));
        if let Verdict::Invalid { history, longest_linearization, .. } = &v {
            prop_assert!(is_legal_prefix(history, longest_linearization), "{}", render(&v));
        }
    }
}

/// Speed: `cargo test -p jepsen --release checker::tests::speed -- --ignored --nocapture`.
/// Unique values (as the workload writes) must be decided both ways; with few values (many
/// writers per value, unknown writes that stay optional) it prints whatever it got in 20 s.
#[test]
#[ignore = "timing, run in release mode by hand"]
fn speed() {
    let processes = 8;
    for (keys, ops, values) in [
        (10, 20_000, Values::Unique),
        (1, 2_000, Values::Unique),
        (1, 20_000, Values::Unique),
        (1, 200_000, Values::Unique),
        (10, 20_000, Values::Few(50)),
        (1, 2_000, Values::Few(50)),
    ] {
        let label = format!(
            "{keys} key(s) x {} ops, {processes} processes, {values:?}",
            ops / keys as usize
        );
        let decisive = matches!(values, Values::Unique);
        for seed in 1..=3 {
            let history = generate(seed, keys, ops, processes, values);
            let unknown = history
                .iter()
                .filter(|e| e.outcome == Outcome::Unknown)
                .count();
            let (v, stats) = check_register(&history, Duration::from_secs(20));
            println!(
                "{label}, seed {seed}: {} in {:?} ({} events, {unknown} unknown, {} configurations)",
                v.label(),
                stats.elapsed,
                stats.events,
                stats.states_explored
            );
            assert!(!matches!(v, Verdict::Invalid { .. }), "{}", render(&v));
            assert!(v.is_valid() || !decisive, "{}", render(&v));
            // The same with one ok read in the second half reading a value nobody wrote: the
            // search must exhaust every configuration before that read to say INVALID.
            let mut corrupted = history;
            let middle = (corrupted.len() / 2..corrupted.len())
                .find(|&i| {
                    corrupted[i].op == RegisterOp::Read && corrupted[i].outcome == Outcome::Ok
                })
                .expect("an ok read in the second half");
            corrupted[middle].read = Some(Some(1_000_000_000));
            let (v, stats) = check_register(&corrupted, Duration::from_secs(20));
            println!(
                "  with one corrupted read: {} in {:?} ({} configurations)",
                v.label(),
                stats.elapsed,
                stats.states_explored
            );
            assert!(!v.is_valid(), "{}", render(&v));
            assert!(
                matches!(v, Verdict::Invalid { .. }) || !decisive,
                "{}",
                render(&v)
            );
        }
    }
}
