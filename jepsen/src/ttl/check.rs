//! The ttl checker: pure, over the holds of a run and the windows of its faults.
//!
//! **Early loss** (promise 1; definite, never a false alarm). A hold's *deadline* at a moment is
//! the latest (sending of an acknowledged acquire or refresh) + TTL among the calls that ended
//! before it: cluster time never runs faster than real time and the leader stamps a refresh after
//! it was sent, so no correct cluster takes the hold before then. Flagged, each with its kind,
//! holder and times:
//! - a refresh, fenced write or release refused because the hold is gone, or a linearizable read
//!   not showing it held, that *completed* (the refusal or the read happened no later) before
//!   the deadline;
//! - the same lock or resource held by two holders at one instant: each hold is surely held over
//!   [completion, sending + TTL) of each of its acknowledged acquires and refreshes, cut at the
//!   sending of its release; two of these that overlap mean one was given to the other early.
//!
//! A loss counts as early only when it is more than `EARLY_TOLERANCE_NS` before the deadline:
//! cluster time is counted in whole milliseconds, which can gain a fraction of one per count.
//!
//! **Lateness** (promise 2), for each silent hold: the leader stamped its last acknowledged
//! refresh somewhere between that refresh's sending and its answer, so its true deadline is
//! between sending + TTL and answer + TTL, and its release between the invocation of the last
//! read that still showed it (or the last refresh's sending) and the first sign it is gone (a
//! read showing it released, or another holder's acquire of the same lock or resource sent
//! after it went silent, acknowledged). Upper bound: that sign's completion minus (sending +
//! TTL); lower bound: the last read that still showed it minus (answer + TTL). A refresh that
//! took seconds to answer (a fault) widens the two apart. Holds with a refresh of unknown
//! outcome are left out (that refresh may have landed later and moved the deadline).
//!
//! **Late release**: a silent hold whose lower bound, counted from the *completion* of its last
//! acknowledged refresh (the leader stamped it somewhere between sending and completion), is
//! more than one election timeout (`Bounds::election_ms`) + the kind's sweep interval +
//! `Bounds::slack_ms`. The promise holds while a quorum is up, so a hold is judged when its
//! silence (last acknowledged refresh to gone) overlaps no fault that may leave no quorum, nor
//! the `settle_ms` after such a fault's heal (`Bounds::judged_faults`): in a cluster of 3 or 5
//! nodes none may, since the nemesis runs one fault at a time and each leaves a connected
//! majority up. The rest are measured (`lateness`) but not judged (`lateness_judged` is what is).
//!
//! The report's types and how they read: `report.rs`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::report::{EarlyLoss, KindLateness, LateRelease, Stats, TtlReport};
use super::{End, Hold, Kind, Op, Step};
use crate::finding::{self, write_jsonl, Counts, Finding};
use crate::history::Outcome;
use crate::nemesis::TimelineEntry;

/// A loss less early than this is not counted (milliseconds rounding in cluster time).
pub const EARLY_TOLERANCE_NS: u64 = 5_000_000;
/// Anomalies of each kind written out in full (the counts are always complete).
const SHOWN: usize = 30;

/// The cluster's timing, as the harness starts the nodes: what promise 2 allows.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bounds {
    /// `raft.election_timeout_ms_max`: the longest a follower hears no leader before it
    /// campaigns (`election_ms`).
    pub election_timeout_max_ms: u64,
    /// `locks.sweep_interval_ms`, `pools.reap_interval_ms`, `operations.sweep_interval_ms`.
    pub lock_sweep_ms: u64,
    pub pool_reap_ms: u64,
    pub worker_sweep_ms: u64,
    /// Allowed beyond the bound: the sweep's own commit and the read that sees it.
    pub slack_ms: u64,
    /// How long after the heal of a fault not judged its window is still excused.
    pub settle_ms: u64,
    /// The cluster's size at the start: which faults leave a quorum up (`judged_faults`).
    pub nodes: u64,
}

impl Bounds {
    /// The bounds of `nodes` nodes started with these settings.
    pub fn of(
        nodes: u64,
        raft: &steward::config::RaftConfig,
        locks: &steward::config::LocksConfig,
        operations: &steward::config::OperationsConfig,
        pools: &steward::config::PoolsConfig,
    ) -> Bounds {
        Bounds {
            election_timeout_max_ms: raft.election_timeout_ms_max,
            lock_sweep_ms: locks.sweep_interval_ms,
            pool_reap_ms: pools.reap_interval_ms,
            worker_sweep_ms: operations.sweep_interval_ms,
            slack_ms: 500,
            settle_ms: raft.election_timeout_ms_max,
            nodes,
        }
    }

    /// The faults under which promise 2 is judged all the same: those that leave a quorum up.
    /// Wall clocks decide nothing, anywhere. With an odd number of nodes, 3 or more, every
    /// fault of the nemesis (one at a time) leaves a connected majority: a kill or pause stops
    /// one node; a partition isolates one, splits into unequal halves, cuts one pair one way,
    /// or bridges two sides through a middle node that reaches both; lost packets are between
    /// one pair; a membership change removes one member and adds a fresh one before it heals.
    /// With an even number, halves may be equal; with fewer than 3, one node down is no
    /// quorum.
    pub fn judged_faults(&self) -> &'static [&'static str] {
        match self.nodes {
            n if n >= 3 && n % 2 == 1 => &crate::nemesis::KINDS,
            n if n >= 3 => &["clock", "kill", "pause"],
            _ => &["clock"],
        }
    }

    pub fn sweep_ms(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Lock => self.lock_sweep_ms,
            Kind::Pool => self.pool_reap_ms,
            Kind::Worker => self.worker_sweep_ms,
        }
    }

    /// One election timeout: a follower campaigns at most `raft.election_timeout_ms_max` after
    /// the dead leader's last heartbeat (steward gives openraft half of it as the leader lease in
    /// which followers refuse to vote, and half as the top of its random timeout).
    pub fn election_ms(&self) -> u64 {
        self.election_timeout_max_ms
    }

    /// Promise 2's allowance past the TTL for `kind`, slack included, in ms.
    pub fn late_ms(&self, kind: Kind) -> u64 {
        self.election_ms() + self.sweep_ms(kind) + self.slack_ms
    }
}

/// The windows (ns) in which promise 2 is excused: each fault not in `judged` that took
/// effect, from its start to its heal + `settle_ms` (to the end of time if never healed).
pub fn excused_windows(
    timeline: &[TimelineEntry],
    judged: &[&str],
    settle_ms: u64,
) -> Vec<(u64, u64)> {
    let mut out = vec![];
    let mut open: Option<u64> = None;
    for e in timeline {
        match (e.kind == "fault", e.nemesis.as_deref()) {
            (true, Some(kind)) if !judged.contains(&kind) => {
                open.get_or_insert(e.at_ns);
            }
            (true, _) => {}
            (false, _) => {
                if let Some(at) = open.take() {
                    out.push((at, e.at_ns.saturating_add(settle_ms * 1_000_000)));
                }
            }
        }
    }
    if let Some(at) = open {
        out.push((at, u64::MAX));
    }
    out
}

fn acked_refresh(s: &Step) -> bool {
    s.outcome == Outcome::Ok && matches!(s.op, Op::Acquire | Op::Refresh)
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// The first step that shows `hold` lost before its deadline at that step, if any.
fn early_in_hold(hold: &Hold) -> Option<EarlyLoss> {
    let ttl_ns = hold.ttl_ms * 1_000_000;
    let mut deadline: Option<u64> = None;
    for s in &hold.steps {
        let shows_lost = s.lost
            && match s.op {
                Op::Read => s.outcome == Outcome::Ok,
                _ => s.outcome == Outcome::Fail,
            };
        if let Some(d) = deadline.filter(|_| shows_lost) {
            if s.complete_ns.saturating_add(EARLY_TOLERANCE_NS) < d {
                let how = match s.op {
                    Op::Read => "a linearizable read showed it gone".to_string(),
                    Op::Write => format!("fenced write refused ({})", s.error),
                    Op::Release => format!("release refused ({})", s.error),
                    Op::Acquire | Op::Refresh => format!("refresh refused ({})", s.error),
                };
                return Some(EarlyLoss {
                    kind: hold.kind,
                    holder: hold.holder.clone(),
                    target: hold.target.clone(),
                    how,
                    at_ns: s.complete_ns,
                    deadline_ns: d,
                    early_ms: ms(i128::from(d) - i128::from(s.complete_ns)),
                });
            }
        }
        if acked_refresh(s) {
            let d = s.invoke_ns.saturating_add(ttl_ns);
            deadline = Some(deadline.map_or(d, |old| old.max(d)));
        }
    }
    None
}

/// The intervals over which `hold` is surely held, merged, in order.
fn held(hold: &Hold) -> Vec<(u64, u64)> {
    let ttl_ns = hold.ttl_ms * 1_000_000;
    let cut = hold
        .steps
        .iter()
        .find(|s| s.op == Op::Release)
        .map_or(u64::MAX, |s| s.invoke_ns);
    let mut spans: Vec<(u64, u64)> = hold
        .steps
        .iter()
        .filter(|s| acked_refresh(s))
        .map(|s| (s.complete_ns, s.invoke_ns.saturating_add(ttl_ns).min(cut)))
        .filter(|(a, b)| a < b)
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = vec![];
    for (a, b) in spans {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

fn acquire_complete(hold: &Hold) -> u64 {
    hold.steps
        .iter()
        .find(|s| s.op == Op::Acquire && s.outcome == Outcome::Ok)
        .map_or(u64::MAX, |s| s.complete_ns)
}

/// Two holders of one lock or resource at one instant: the earlier one lost it early.
fn early_between(holds: &[&Hold]) -> Vec<EarlyLoss> {
    let mut sorted: Vec<(&Hold, Vec<(u64, u64)>)> = holds.iter().map(|h| (*h, held(h))).collect();
    sorted.sort_by_key(|(h, _)| acquire_complete(h));
    let mut out = vec![];
    for (i, (b, b_spans)) in sorted.iter().enumerate() {
        for (a, a_spans) in &sorted[..i] {
            if a.holder == b.holder {
                continue;
            }
            let overlap = a_spans.iter().find_map(|&(a0, a1)| {
                b_spans.iter().find_map(|&(b0, b1)| {
                    let (from, to) = (a0.max(b0), a1.min(b1));
                    (to > from.saturating_add(EARLY_TOLERANCE_NS)).then_some((from, a1))
                })
            });
            if let Some((from, a_until)) = overlap {
                out.push(EarlyLoss {
                    kind: a.kind,
                    holder: a.holder.clone(),
                    target: a.target.clone(),
                    how: format!(
                        "given to {} (its acquire acknowledged at {} ns) while still held",
                        b.holder,
                        acquire_complete(b)
                    ),
                    at_ns: from,
                    deadline_ns: a_until,
                    early_ms: ms(i128::from(a_until) - i128::from(from)),
                });
            }
        }
    }
    out
}

/// What a silent hold's release looked like.
struct Silence {
    /// Last acknowledged acquire or refresh: sent + TTL, completed + TTL.
    deadline_sent_ns: u64,
    deadline_acked_ns: u64,
    /// When it went silent (the last acknowledged refresh's sending).
    from_ns: u64,
    /// The first sign it was gone, if seen.
    gone_ns: Option<u64>,
    /// The last sign it was there.
    there_ns: u64,
    /// A refresh or acquire of unknown outcome: the deadline is not certain.
    uncertain: bool,
}

fn silence(hold: &Hold, others: &[&Hold]) -> Option<Silence> {
    let ttl_ns = hold.ttl_ms * 1_000_000;
    let last = hold.steps.iter().rev().find(|s| acked_refresh(s))?;
    let first_gone = hold
        .steps
        .iter()
        .find(|s| s.op == Op::Read && s.outcome == Outcome::Ok && s.released);
    let taken = others
        .iter()
        .filter(|o| o.holder != hold.holder)
        .filter_map(|o| o.steps.iter().find(|s| s.op == Op::Acquire))
        .filter(|s| s.outcome == Outcome::Ok && s.invoke_ns >= last.complete_ns)
        .map(|s| s.complete_ns)
        .min();
    let gone_ns = match (first_gone.map(|s| s.complete_ns), taken) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let there_ns = hold
        .steps
        .iter()
        .filter(|s| s.op == Op::Read && s.outcome == Outcome::Ok && !s.released)
        .filter(|s| gone_ns.is_none_or(|g| s.invoke_ns < g))
        .map(|s| s.invoke_ns)
        .max()
        .unwrap_or(last.invoke_ns)
        .max(last.invoke_ns);
    let uncertain = hold
        .steps
        .iter()
        .any(|s| matches!(s.op, Op::Acquire | Op::Refresh) && s.outcome == Outcome::Unknown);
    Some(Silence {
        deadline_sent_ns: last.invoke_ns.saturating_add(ttl_ns),
        deadline_acked_ns: last.complete_ns.saturating_add(ttl_ns),
        from_ns: last.invoke_ns,
        gone_ns,
        there_ns,
        uncertain,
    })
}

fn overlaps(windows: &[(u64, u64)], from: u64, to: u64) -> bool {
    windows.iter().any(|&(a, b)| a <= to && from <= b)
}

/// Judges `holds` against both promises; `excused` are the fault windows in which promise 2
/// is not judged (`excused_windows`).
pub fn check(holds: &[Hold], excused: &[(u64, u64)], bounds: &Bounds) -> TtlReport {
    let mut report = TtlReport {
        holds: holds.len(),
        bounds: Some(*bounds),
        ..TtlReport::default()
    };
    let mut early = vec![];
    let mut by_target: BTreeMap<(Kind, &str), Vec<&Hold>> = BTreeMap::new();
    let mut samples = Samples::default();
    let mut samples_judged = Samples::default();
    for h in holds {
        *report.by_kind.entry(h.kind).or_default() += 1;
        *report.ends.entry(h.end).or_default() += 1;
        let refreshes = h.steps.iter().filter(|s| s.op == Op::Refresh);
        let counts = Counts::of(refreshes.map(|s| s.outcome));
        report.refreshes.ok += counts.ok;
        report.refreshes.failed += counts.failed;
        report.refreshes.unknown += counts.unknown;
        let refused = |s: &&Step| s.lost && s.op != Op::Read && s.outcome == Outcome::Fail;
        report.refused_as_lost += h.steps.iter().filter(refused).count();
        early.extend(early_in_hold(h));
        if h.kind != Kind::Worker {
            by_target.entry((h.kind, &h.target)).or_default().push(h);
        }
    }
    for holds in by_target.values() {
        early.extend(early_between(holds));
    }
    for h in holds
        .iter()
        .filter(|h| matches!(h.end, End::Silent | End::Unresolved))
    {
        let others = by_target
            .get(&(h.kind, h.target.as_str()))
            .map_or(&[][..], Vec::as_slice);
        let Some(s) = silence(h, others) else {
            continue;
        };
        if s.uncertain {
            report.uncertain += 1;
            continue;
        }
        samples.add(h.kind, &s);
        if overlaps(excused, s.from_ns, s.gone_ns.unwrap_or(s.there_ns)) {
            report.excused_by_fault += 1;
            continue;
        }
        samples_judged.add(h.kind, &s);
        report.judged += 1;
        let late_ns = i128::from(s.there_ns) - i128::from(s.deadline_acked_ns);
        let bound_ms = bounds.late_ms(h.kind);
        if late_ns > i128::from(bound_ms) * 1_000_000 {
            report.late_count += 1;
            if report.late.len() < SHOWN {
                report.late.push(LateRelease {
                    kind: h.kind,
                    holder: h.holder.clone(),
                    target: h.target.clone(),
                    deadline_ns: s.deadline_acked_ns,
                    late_ms_at_least: ms(late_ns),
                    bound_ms,
                });
            }
        }
    }
    report.early_count = early.len();
    early.truncate(SHOWN);
    report.early = early;
    report.lateness = samples.lateness();
    report.lateness_judged = samples_judged.lateness();
    report
}

/// Lateness samples (upper and lower bounds, ms) by kind.
#[derive(Default)]
struct Samples(BTreeMap<Kind, (Vec<f64>, Vec<f64>)>);

impl Samples {
    /// Adds a silence whose release was seen.
    fn add(&mut self, kind: Kind, s: &Silence) {
        if let Some(gone) = s.gone_ns {
            let (upper, lower) = self.0.entry(kind).or_default();
            upper.push(ms(i128::from(gone) - i128::from(s.deadline_sent_ns)));
            lower.push(ms(i128::from(s.there_ns) - i128::from(s.deadline_acked_ns)));
        }
    }

    fn lateness(mut self) -> Vec<KindLateness> {
        Kind::ALL
            .iter()
            .map(|&kind| {
                let (upper, lower) = self.0.remove(&kind).unwrap_or_default();
                KindLateness {
                    kind,
                    measured: upper.len(),
                    upper: Stats::of(&upper),
                    lower: Stats::of(&lower),
                }
            })
            .collect()
    }
}

/// Writes the holds to `history_file` and checks them against both promises.
pub fn finding(
    holds: &[Hold],
    timeline: &[TimelineEntry],
    bounds: &Bounds,
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, holds)?;
    let excused = excused_windows(timeline, bounds.judged_faults(), bounds.settle_ms);
    let report = check(holds, &excused, bounds);
    let (_, code) = finding::verdict(report.valid(), true);
    let steps: Vec<&Step> = holds
        .iter()
        .flat_map(|h| h.steps.iter().filter(|s| s.op != Op::Read))
        .collect();
    Ok(Finding {
        summary: report.summary(),
        report: report.text()?,
        code,
        points: finding::points(&steps, |s| (s.invoke_ns, s.complete_ns, s.outcome)),
    })
}
