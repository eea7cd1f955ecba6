use super::*;
use std::time::Duration;

fn ids() -> Vec<u64> {
    vec![1, 2, 3, 4, 5]
}

fn dropped(rules: &BTreeMap<u64, Vec<DropRule>>, at: u64) -> Vec<u64> {
    rules
        .get(&at)
        .map(|d| d.iter().map(|r| r.from).collect())
        .unwrap_or_default()
}

#[test]
fn isolate_cuts_one_node_from_all_others_both_ways() {
    let r = rules(&Fault::PartitionIsolate(2), &ids());
    assert_eq!(dropped(&r, 2), vec![1, 3, 4, 5]);
    for other in [1, 3, 4, 5] {
        assert_eq!(dropped(&r, other), vec![2]);
    }
}

#[test]
fn halves_and_bridge_follow_the_grudge() {
    let r = rules(&Fault::PartitionHalves(vec![1, 2], vec![3, 4, 5]), &ids());
    assert_eq!(dropped(&r, 1), vec![3, 4, 5]);
    assert_eq!(dropped(&r, 4), vec![1, 2]);
    let fault = Fault::PartitionBridge {
        left: vec![1, 2],
        middle: 3,
        right: vec![4, 5],
    };
    let r = rules(&fault, &ids());
    assert_eq!(
        dropped(&r, 3),
        Vec::<u64>::new(),
        "the bridge sees everyone"
    );
    assert_eq!(dropped(&r, 1), vec![4, 5]);
    assert_eq!(dropped(&r, 5), vec![1, 2]);
}

#[test]
fn one_way_drops_in_one_direction_and_loss_in_both() {
    let r = rules(&Fault::PartitionOneWay { from: 1, to: 2 }, &ids());
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[&2],
        vec![DropRule {
            from: 1,
            percent: 100,
            to_listeners_only: true
        }],
        "only node 2 drops, and only node 1's requests"
    );
    let fault = Fault::PacketLoss {
        a: 1,
        b: 3,
        percent: 30,
    };
    let r = rules(&fault, &ids());
    assert_eq!(
        r[&1],
        vec![DropRule {
            from: 3,
            percent: 30,
            to_listeners_only: false
        }]
    );
    assert_eq!(
        r[&3],
        vec![DropRule {
            from: 1,
            percent: 30,
            to_listeners_only: false
        }]
    );
    assert!(rules(&Fault::Kill(1), &ids()).is_empty());
    assert!(rules(&Fault::Replace(1), &ids()).is_empty());
    let jump = Fault::ClockJump {
        node: 1,
        delta_ms: 5_000,
    };
    assert!(rules(&jump, &ids()).is_empty());
}

#[test]
fn validate_refuses_unknown_and_overlapping_nodes() {
    let ids = ids();
    assert!(validate(&Fault::Kill(9), &ids).is_err());
    assert!(validate(&Fault::PartitionHalves(vec![1, 2], vec![2, 3]), &ids).is_err());
    assert!(validate(&Fault::PartitionHalves(vec![], vec![2, 3]), &ids).is_err());
    assert!(validate(&Fault::PartitionOneWay { from: 1, to: 1 }, &ids).is_err());
    let loss = Fault::PacketLoss {
        a: 1,
        b: 2,
        percent: 0,
    };
    assert!(validate(&loss, &ids).is_err());
    assert!(validate(&Fault::PartitionHalves(vec![1, 2], vec![3, 4, 5]), &ids).is_ok());
    let still = Fault::ClockRate {
        node: 1,
        percent: 100,
    };
    assert!(validate(&still, &ids).is_err());
    let no_step = Fault::ClockJump {
        node: 2,
        delta_ms: 0,
    };
    assert!(validate(&no_step, &ids).is_err());
    assert!(validate(&Fault::Replace(6), &ids).is_err());
    assert!(validate(&Fault::Replace(5), &ids).is_ok());
}

#[test]
fn schedule_is_seeded_ordered_disjoint_and_within_the_run() {
    let kinds = KINDS;
    let duration = Duration::from_secs(400);
    let interval = Duration::from_secs(8);
    let a = schedule(7, &kinds, &ids(), duration, interval);
    let b = schedule(7, &kinds, &[5, 4, 3, 2, 1], duration, interval);
    assert_eq!(
        a, b,
        "same seed, same schedule (node order does not matter)"
    );
    assert_ne!(a, schedule(8, &kinds, &ids(), duration, interval));
    assert!(a.len() >= 30, "{} faults", a.len());
    assert!(a[0].0 >= interval, "the first slot is quiet");
    for w in a.windows(2) {
        assert!(w[0].0 + w[0].2 < w[1].0, "faults do not overlap");
    }
    let (start, _, length) = a.last().expect("faults");
    assert!(*start + *length <= duration);
    for (_, fault, _) in &a {
        let resolved = match fault.clone() {
            Fault::PartitionIsolate(LEADER) => Fault::PartitionIsolate(1),
            Fault::Kill(LEADER) => Fault::Kill(1),
            Fault::Pause(LEADER) => Fault::Pause(1),
            Fault::Replace(LEADER) => Fault::Replace(1),
            Fault::ClockJump {
                node: LEADER,
                delta_ms,
            } => Fault::ClockJump { node: 1, delta_ms },
            Fault::ClockRate {
                node: LEADER,
                percent,
            } => Fault::ClockRate { node: 1, percent },
            f => f,
        };
        validate(&resolved, &ids()).expect("scheduled faults are valid");
    }
    let seen: BTreeSet<&str> = a
        .iter()
        .map(|(_, f, _)| match f {
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::PacketLoss { .. } => "loss",
            Fault::ClockJump { .. } | Fault::ClockRate { .. } => "clock",
            Fault::Replace(_) => "membership",
            _ => "partition",
        })
        .collect();
    assert_eq!(seen.len(), KINDS.len(), "every kind appears: {seen:?}");
}

#[test]
fn schedule_uses_only_the_kinds_asked_for() {
    let s = schedule(
        1,
        &["pause"],
        &[1, 2, 3],
        Duration::from_secs(60),
        Duration::from_secs(5),
    );
    assert!(!s.is_empty());
    assert!(s.iter().all(|(_, f, _)| matches!(f, Fault::Pause(_))));
    assert!(schedule(
        1,
        &[],
        &[1, 2, 3],
        Duration::from_secs(60),
        Duration::from_secs(5)
    )
    .is_empty());
    assert!(check_kinds(&["partition", "clock", "membership"]).is_ok());
    assert!(check_kinds(&["partition", "bitflip"]).is_err());
}

#[test]
fn timeline_kind_reads_as_its_json_name() {
    let e = TimelineEntry {
        at_ns: 5,
        what: "x".into(),
        kind: TimelineKind::Heal,
        nemesis: None,
    };
    assert!(e.kind == "heal");
    let json = serde_json::to_string(&e).expect("json");
    assert_eq!(json, r#"{"at_ns":5,"what":"x","kind":"heal"}"#);
    let f = TimelineEntry {
        kind: TimelineKind::Fault,
        nemesis: Some("kill".into()),
        ..e
    };
    let json = serde_json::to_string(&f).expect("json");
    assert_eq!(
        json,
        r#"{"at_ns":5,"what":"x","kind":"fault","nemesis":"kill"}"#
    );
}

/// Every non-empty subset of `KINDS`, in `KINDS` order.
fn kind_sets() -> Vec<Vec<&'static str>> {
    (1u32..1 << KINDS.len())
        .map(|bits| {
            KINDS
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, k)| *k)
                .collect()
        })
        .collect()
}

#[test]
fn every_round_of_the_schedule_has_every_kind_once() {
    let interval = Duration::from_secs(6);
    for nodes in [vec![1, 2, 3], vec![1, 2, 3, 4, 5]] {
        for kinds in kind_sets() {
            let k = kinds.len();
            // Two full rounds fit: the quiet slot, then 2k slots of at most 70% each.
            let duration = interval * (2 * k as u32 + 1);
            for seed in 0..200 {
                let s = schedule(seed, &kinds, &nodes, duration, interval);
                assert!(
                    s.len() >= 2 * k,
                    "seed {seed} {kinds:?}: {} faults",
                    s.len()
                );
                for (r, round) in s.chunks(k).enumerate() {
                    let mut seen: Vec<&str> =
                        round.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
                    seen.sort_unstable();
                    let mut want = kinds.clone();
                    want.sort_unstable();
                    if round.len() == k {
                        assert_eq!(seen, want, "seed {seed}, round {r}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_shortest_run_that_fits_the_kinds_has_them_all() {
    let interval = Duration::from_secs(6);
    for kinds in kind_sets() {
        let duration = interval * (kinds.len() as u32 + 1);
        for seed in 0..200 {
            let s = schedule(seed, &kinds, &[1, 2, 3], duration, interval);
            let seen: BTreeSet<&str> = s.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
            assert_eq!(seen.len(), kinds.len(), "seed {seed} {kinds:?}: {s:?}");
        }
    }
    // Duplicates count once: "kill,kill,pause" is two kinds in rounds of two.
    let s = schedule(
        3,
        &["kill", "kill", "pause"],
        &[1, 2, 3],
        interval * 3,
        interval,
    );
    let mut seen: Vec<&str> = s.iter().map(|(_, f, _)| f.nemesis_kind()).collect();
    seen.sort_unstable();
    assert_eq!(seen, vec!["kill", "pause"]);
}

fn entry(kind: TimelineKind, nemesis: Option<&str>) -> TimelineEntry {
    TimelineEntry {
        at_ns: 0,
        what: String::new(),
        kind,
        nemesis: nemesis.map(str::to_string),
    }
}

#[test]
fn a_timeline_without_a_requested_kind_is_flagged() {
    let timeline = vec![
        entry(TimelineKind::Fault, Some("partition")),
        entry(TimelineKind::Heal, None),
        // A kill that found its node not running: it tested nothing.
        entry(TimelineKind::Fault, None),
        entry(TimelineKind::Heal, None),
        entry(TimelineKind::Fault, Some("pause")),
        entry(TimelineKind::Heal, None),
    ];
    assert_eq!(
        kinds_missing(&["partition", "kill", "pause", "kill"], &timeline),
        vec!["kill".to_string()]
    );
    assert_eq!(
        kinds_missing(&["pause", "partition"], &timeline),
        Vec::<String>::new()
    );
    assert_eq!(
        kinds_missing(&["membership"], &[]),
        vec!["membership".to_string()]
    );
    assert!(check_kinds_for(&["membership"], 2).is_err());
    assert!(check_kinds_for(&["partition", "loss"], 1).is_err());
    assert!(check_kinds_for(&KINDS, 3).is_ok());
}

/// Clock faults: steps either way, a third of them an hour, the rest 2-60 s; rates among the
/// four; on the leader about two times in three and on followers too.
#[test]
fn clock_faults_step_up_to_an_hour_either_way_on_leader_and_followers() {
    let interval = Duration::from_secs(6);
    let mut steps: Vec<i64> = Vec::new();
    let mut rates: BTreeSet<u32> = BTreeSet::new();
    let (mut on_leader, mut on_other) = (0, 0);
    for seed in 0..300 {
        for (_, fault, _) in schedule(seed, &["clock"], &[1, 2, 3], interval * 10, interval) {
            let node = match fault {
                Fault::ClockJump { node, delta_ms } => {
                    steps.push(delta_ms);
                    node
                }
                Fault::ClockRate { node, percent } => {
                    rates.insert(percent);
                    node
                }
                f => panic!("not a clock fault: {f}"),
            };
            match node {
                LEADER => on_leader += 1,
                _ => on_other += 1,
            }
        }
    }
    let hour_ms = CLOCK_STEP_LARGE_S * 1000;
    assert!(steps
        .iter()
        .all(|d| d.abs() == hour_ms || (2_000..=60_000).contains(&d.abs())));
    let hours = steps.iter().filter(|d| d.abs() == hour_ms).count();
    assert!(
        steps.contains(&hour_ms) && steps.contains(&-hour_ms),
        "an hour both ways"
    );
    assert!(steps.iter().any(|d| (2_000..=60_000).contains(d)));
    assert!(steps.iter().any(|d| (-60_000..=-2_000).contains(d)));
    // A third of the steps, within sampling noise.
    let share = hours as f64 / steps.len() as f64;
    assert!(
        (0.25..0.42).contains(&share),
        "{hours} of {} steps",
        steps.len()
    );
    assert_eq!(rates, BTreeSet::from([25, 50, 200, 400]));
    let leader_share = f64::from(on_leader) / f64::from(on_leader + on_other);
    assert!(
        (0.58..0.76).contains(&leader_share),
        "{on_leader} on the leader, {on_other} not"
    );
}
