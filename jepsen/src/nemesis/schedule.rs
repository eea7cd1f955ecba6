//! A run's fault timeline, drawn from its seed: which kinds are allowed for how many nodes, the
//! schedule of faults and heals, and which kinds a timeline left out.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Fault, TimelineEntry, KINDS, LEADER};
use crate::rng::Rng;

/// The large wall-clock step of the clock nemesis, in seconds (either way): an hour, as in
/// issue 24's "steps up to ±1 h".
pub const CLOCK_STEP_LARGE_S: i64 = 3_600;

/// Checks command-line nemesis kinds against `KINDS` (call before `schedule`).
pub fn check_kinds(kinds: &[&str]) -> anyhow::Result<()> {
    match kinds.iter().find(|k| !KINDS.contains(k)) {
        Some(k) => anyhow::bail!("unknown nemesis {k:?}; known: {}", KINDS.join(", ")),
        None => Ok(()),
    }
}

/// Checks that a cluster of `nodes` can have every fault of `kinds` (partitions and loss need
/// two nodes, membership three: removing one of two would leave a single voter).
pub fn check_kinds_for(kinds: &[&str], nodes: u64) -> anyhow::Result<()> {
    for kind in kinds {
        let needs = match *kind {
            "membership" => 3,
            "partition" | "loss" => 2,
            _ => 1,
        };
        anyhow::ensure!(
            nodes >= needs,
            "--nemesis {kind} needs at least {needs} nodes (--nodes {nodes})"
        );
    }
    Ok(())
}

/// The requested kinds (duplicates ignored) of which no fault took effect on `timeline`: a run
/// that lacks one did not test what its command line says (too short for its slots, a slot
/// skipped at the end, or a fault that found nothing to do).
pub fn kinds_missing(kinds: &[&str], timeline: &[TimelineEntry]) -> Vec<String> {
    let applied: BTreeSet<&str> = timeline
        .iter()
        .filter_map(|e| e.nemesis.as_deref())
        .collect();
    let mut missing: Vec<String> = Vec::new();
    for kind in kinds {
        if !applied.contains(kind) && !missing.iter().any(|m| m == kind) {
            missing.push(kind.to_string());
        }
    }
    missing
}

/// A seeded schedule: `(start, fault, length)` in time order, never overlapping, each ending
/// by `duration`. Time is cut into slots of `interval`; the first slot is quiet (a baseline),
/// then each slot starts one fault within its first tenth, lasting 40-60% of the slot, so the
/// cluster has at least 30% of every slot to recover. Kinds come in rounds: each round is a
/// seeded shuffle of `kinds` (duplicates ignored), so every kind runs once before any runs
/// twice, and a run of at least `kinds.len()` slots (`duration >= (kinds + 1) * interval`
/// always is) has every kind. The same seed, kinds and nodes give the same schedule.
///
/// - partition: isolate the leader, isolate a random node, random halves (minority |
///   majority), bridge, or one-way between two random nodes;
/// - kill: the leader or a random node (half each); pause: the leader two times in three;
/// - loss: 20-60% on the link between two random nodes;
/// - clock: on the leader two times in three (the leader is the node whose clocks decide cluster
///   time), else a random node: a step either way (one in three of an hour, `CLOCK_STEP_LARGE_S`,
///   the others 2-60 s), or a rate of 0.25x, 0.5x, 2x or 4x;
/// - membership: remove the leader (one time in three) or a random node, and add a fresh one.
///
/// Panics on a kind not in `KINDS` (see `check_kinds`). Partitions and loss need two nodes,
/// bridges and membership three (`check_kinds_for`); slots whose fault cannot be made stay
/// quiet.
pub fn schedule(
    seed: u64,
    kinds: &[&str],
    node_ids: &[u64],
    duration: Duration,
    interval: Duration,
) -> Vec<(Duration, Fault, Duration)> {
    if let Err(e) = check_kinds(kinds) {
        panic!("{e}");
    }
    let mut ids = node_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    if kinds.is_empty() || ids.is_empty() || interval.is_zero() {
        return out;
    }
    let mut distinct: Vec<&str> = Vec::new();
    for kind in kinds {
        if !distinct.contains(kind) {
            distinct.push(kind);
        }
    }
    let mut rng = Rng::new(seed);
    let slot_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    // The kinds left in this round; refilled with a fresh shuffle when empty.
    let mut round: Vec<&str> = Vec::new();
    for slot in 1u32.. {
        let jitter = Duration::from_nanos(rng.below(slot_ns / 10 + 1));
        let length = Duration::from_nanos(slot_ns / 100 * (40 + rng.below(21)));
        let start = interval
            .checked_mul(slot)
            .and_then(|slot_start| slot_start.checked_add(jitter));
        match start.and_then(|s| s.checked_add(length)) {
            Some(end) if end <= duration => {}
            _ => break,
        }
        let start = start.unwrap_or_default();
        if round.is_empty() {
            round = shuffled(&mut rng, &distinct);
        }
        let Some(kind) = round.pop() else {
            break;
        };
        if let Some(fault) = pick(&mut rng, kind, &ids) {
            out.push((start, fault, length));
        }
    }
    out
}

/// One fault of `kind` among `ids` (sorted), or `None` if there are too few nodes for it.
fn pick(rng: &mut Rng, kind: &str, ids: &[u64]) -> Option<Fault> {
    let n = ids.len();
    let any = |rng: &mut Rng| ids[rng.below(n as u64) as usize];
    match kind {
        "kill" => Some(Fault::Kill(if rng.below(2) == 0 {
            LEADER
        } else {
            any(rng)
        })),
        "pause" => Some(Fault::Pause(if rng.below(3) < 2 {
            LEADER
        } else {
            any(rng)
        })),
        "clock" => {
            let id = if rng.below(3) < 2 { LEADER } else { any(rng) };
            Some(if rng.below(2) == 0 {
                // One step in three is an hour: NTP fixing a badly set clock, or a VM resumed
                // from a snapshot; the rest are the drift-sized steps of a clock that slipped.
                let secs = match rng.below(3) {
                    0 => CLOCK_STEP_LARGE_S,
                    _ => 2 + rng.below(59) as i64,
                };
                let sign = if rng.below(2) == 0 { 1 } else { -1 };
                Fault::ClockJump {
                    node: id,
                    delta_ms: sign * secs * 1000,
                }
            } else {
                Fault::ClockRate {
                    node: id,
                    percent: [25, 50, 200, 400][rng.below(4) as usize],
                }
            })
        }
        // Removing one of two would leave a single voter: not a fault a real operator makes.
        "membership" if n >= 3 => Some(Fault::Replace(if rng.below(3) == 0 {
            LEADER
        } else {
            any(rng)
        })),
        "loss" if n >= 2 => {
            let s = shuffled(rng, ids);
            let percent = 20 + 10 * rng.below(5) as u8;
            Some(Fault::PacketLoss {
                a: s[0],
                b: s[1],
                percent,
            })
        }
        "partition" if n >= 2 => {
            let s = shuffled(rng, ids);
            let sorted = |v: &[u64]| {
                let mut v = v.to_vec();
                v.sort_unstable();
                v
            };
            let variants = if n >= 3 { 5 } else { 4 };
            Some(match rng.below(variants) {
                0 => Fault::PartitionIsolate(LEADER),
                1 => Fault::PartitionIsolate(s[0]),
                2 => Fault::PartitionHalves(sorted(&s[..n / 2]), sorted(&s[n / 2..])),
                3 => Fault::PartitionOneWay {
                    from: s[0],
                    to: s[1],
                },
                _ => {
                    let half = (n - 1) / 2;
                    Fault::PartitionBridge {
                        left: sorted(&s[1..1 + half]),
                        middle: s[0],
                        right: sorted(&s[1 + half..]),
                    }
                }
            })
        }
        _ => None,
    }
}

/// Fisher-Yates over a copy.
fn shuffled<T: Clone>(rng: &mut Rng, items: &[T]) -> Vec<T> {
    let mut v = items.to_vec();
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}
