//! The lock checker on hand-made histories, and on histories a correct sequential mutex (random
//! TTLs, lost and refused releases, unknown outcomes) generates, which must always pass.

use proptest::prelude::*;

use super::*;
use crate::rng::Rng;

fn call(outcome: Outcome, invoke_ns: u64, complete_ns: u64) -> Call {
    Call {
        outcome,
        invoke_ns,
        complete_ns,
        error: String::new(),
    }
}

/// A WRITE hold acquired over `acquired`, its increment (value read, outcome, invoke, complete)
/// and its release (outcome, invoke, complete).
fn writer(
    process: u64,
    token: u64,
    acquired: (u64, u64),
    write: Option<(i64, Outcome, u64, u64)>,
    release: (Outcome, u64, u64),
) -> Hold {
    Hold {
        process,
        mode: Mode::Write,
        token,
        ttl_ms: 5_000,
        acquire_invoke_ns: acquired.0,
        acquire_complete_ns: acquired.1,
        write: write.map(|(read, outcome, i, c)| Increment {
            read,
            call: call(outcome, i, c),
        }),
        reads: vec![],
        release: call(release.0, release.1, release.2),
    }
}

fn reader(
    process: u64,
    token: u64,
    acquired: (u64, u64),
    reads: Vec<i64>,
    release: (Outcome, u64, u64),
) -> Hold {
    Hold {
        mode: Mode::Read,
        reads,
        ..writer(process, token, acquired, None, release)
    }
}

use Outcome::{Fail, Ok as Acked, Unknown};

#[test]
fn sequential_holders_pass() {
    let holds = [
        writer(0, 1, (0, 10), Some((0, Acked, 12, 14)), (Acked, 15, 17)),
        writer(1, 2, (5, 18), Some((1, Acked, 20, 22)), (Acked, 23, 25)),
        reader(3, 3, (19, 26), vec![2, 2], (Acked, 30, 31)),
        reader(7, 4, (20, 27), vec![2, 2], (Acked, 29, 33)),
        writer(0, 5, (16, 34), Some((2, Acked, 35, 36)), (Acked, 37, 38)),
    ];
    let report = check(&holds, 3);
    assert!(report.valid(), "{report:?}");
    assert_eq!(report.mutex.proven, 5);
}

#[test]
fn two_writers_at_once_are_flagged_even_when_the_counter_agrees() {
    // Both acquired and released with success; the second's increment lost the CAS race, so
    // the counter and its bounds alone see nothing wrong.
    let holds = [
        writer(0, 1, (0, 10), Some((0, Acked, 12, 14)), (Acked, 30, 32)),
        writer(1, 2, (5, 11), Some((0, Fail, 13, 15)), (Acked, 20, 21)),
    ];
    let report = check(&holds, 1);
    assert_eq!(report.overlaps.get("overlapping WRITE holders"), Some(&1));
    assert!(!report.valid());
    assert_eq!((report.lost, report.unexplained), (0, 0));
    let finding = finding_of(&holds, 1);
    assert_eq!(finding.code, crate::finding::EXIT_INVALID);
    assert!(
        finding
            .summary
            .ends_with("anomalies 1 (1 overlapping WRITE holders): INVALID"),
        "{}",
        finding.summary
    );
    assert!(
        finding
            .report
            .starts_with("overlapping WRITE holders: process 0 (token 1, WRITE"),
        "{}",
        finding.report
    );
}

#[test]
fn a_release_not_acknowledged_proves_nothing_past_the_last_fenced_write() {
    // The first release timed out: it may have been applied at once, so the second holder,
    // granted while it was pending, is no overlap.
    let unknown = [
        writer(0, 1, (0, 10), Some((0, Acked, 12, 14)), (Unknown, 15, 40)),
        writer(1, 2, (5, 20), Some((1, Acked, 22, 24)), (Acked, 25, 26)),
    ];
    assert!(check(&unknown, 2).valid(), "{:?}", check(&unknown, 2));
    // Refused (the grant had expired): the same.
    let refused = [
        writer(0, 1, (0, 10), Some((0, Fail, 12, 14)), (Fail, 15, 16)),
        writer(1, 2, (5, 11), Some((0, Acked, 22, 24)), (Acked, 25, 26)),
    ];
    let report = check(&refused, 1);
    assert!(report.valid(), "{report:?}");
    assert_eq!(report.mutex.proven, 1);
    // But an acknowledged fenced write proves the grant live until it was sent.
    let written = [
        writer(0, 1, (0, 10), Some((0, Acked, 30, 31)), (Unknown, 32, 40)),
        writer(1, 2, (5, 20), Some((1, Acked, 22, 24)), (Unknown, 25, 26)),
    ];
    let report = check(&written, 2);
    assert_eq!(report.overlaps.values().sum::<usize>(), 1, "{report:?}");
}

#[test]
fn readers_share_and_exclude_writers() {
    let readers = [
        reader(3, 1, (0, 10), vec![0, 0], (Acked, 30, 31)),
        reader(7, 2, (2, 12), vec![0, 0], (Acked, 25, 26)),
    ];
    assert!(check(&readers, 0).valid());
    let mixed = [
        reader(3, 1, (0, 10), vec![0, 0], (Acked, 30, 31)),
        writer(0, 2, (2, 12), Some((0, Acked, 14, 15)), (Acked, 16, 17)),
    ];
    let report = check(&mixed, 1);
    assert_eq!(
        report.overlaps.get("overlapping READ and WRITE holders"),
        Some(&1),
        "{report:?}"
    );
    // A value that changed under a READ hold released with success is flagged by itself.
    let changed = [reader(3, 1, (0, 10), vec![4, 5], (Acked, 30, 31))];
    assert_eq!(check(&changed, 5).changed_under_read.len(), 1);
    // Not when the release failed: the grant may have expired between the reads.
    let expired = [reader(3, 1, (0, 10), vec![4, 5], (Fail, 30, 31))];
    assert!(check(&expired, 5).changed_under_read.is_empty());
}

#[test]
fn the_counter_is_bounded_both_ways() {
    let holds = [
        writer(0, 1, (0, 1), Some((0, Acked, 2, 3)), (Acked, 4, 5)),
        writer(0, 2, (6, 7), Some((1, Unknown, 8, 9)), (Acked, 10, 11)),
        writer(0, 3, (12, 13), Some((1, Acked, 14, 15)), (Acked, 16, 17)),
    ];
    // Two acknowledged, one unknown: 2 and 3 are both possible.
    assert!(check(&holds, 2).valid(), "{:?}", check(&holds, 2));
    // 1 and 2 both read 1, so the unknown one cannot have applied: duplicate reads are fine
    // here only because the unknown is not acknowledged.
    assert!(check(&holds, 3).duplicate_writes.is_empty());
    let below = check(&holds, 1);
    assert_eq!((below.lost, below.unexplained), (1, 0));
    assert!(!below.valid());
    let above = check(&holds, 4);
    assert_eq!((above.lost, above.unexplained), (0, 1));
    assert!(!above.valid());
    assert!(above
        .details()
        .contains("counter 4 above the 2 acknowledged + 1 unknown"));
}

#[test]
fn values_read_twice_and_tokens_backwards_are_flagged() {
    let inc = |process, token, read| {
        writer(
            process,
            token,
            (0, 1),
            Some((read, Acked, 2, 3)),
            (Unknown, 4, 5),
        )
    };
    // Two holders both read 1 and both wrote 2.
    let twice = [inc(0, 1, 0), inc(1, 2, 1), inc(2, 3, 1)];
    assert_eq!(check(&twice, 2).duplicate_writes, vec![2]);
    // The same holder twice under one grant (its release was lost, its re-acquire refreshed).
    let regrant = [inc(0, 7, 0), inc(0, 7, 1)];
    assert!(check(&regrant, 2).valid(), "{:?}", check(&regrant, 2));
    // Two holders under one token.
    let shared = [inc(0, 7, 0), inc(1, 7, 1)];
    assert_eq!(check(&shared, 2).token_order_violations, 1);
    // A later write under an older token.
    let order = [inc(0, 5, 0), inc(1, 4, 1)];
    assert_eq!(check(&order, 2).token_order_violations, 1);
}

#[test]
fn the_summary_keeps_the_shape_matrix_sh_reads() {
    let holds = [writer(
        0,
        1,
        (0, 10),
        Some((0, Acked, 12, 14)),
        (Acked, 15, 17),
    )];
    let f = finding_of(&holds, 1);
    assert_eq!(
        f.summary,
        "lock: 1 holds, 1 fenced increments (1 ok, 0 failed, 0 unknown), 0 READ holds, \
         counter 1, anomalies 0: VALID"
    );
    assert_eq!(f.code, 0);
    assert!(
        !f.report.contains("overlapping"),
        "a VALID report must not match the can-fail regex: {}",
        f.report
    );
}

fn finding_of(holds: &[Hold], final_value: i64) -> Finding {
    let dir = std::env::temp_dir().join(format!("lockrmw-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!(
        "{}.jsonl",
        holds.len() * 1000 + final_value as usize
    ));
    let f = finding("lock", holds, final_value, &file).unwrap();
    let _ = std::fs::remove_file(&file);
    f
}

/// A correct lock service, simulated in one time line: the lock passes from epoch to epoch
/// (one WRITE holder, or a few READ holders), each grant ending at its release or at its
/// expiry, whichever the server applies first. Expiry comes a random time after the grant,
/// unrelated to the TTL the client asked for (a leader whose clock runs fast). Clients see
/// their calls take effect somewhere between invoke and complete; replies get lost, requests
/// get lost, releases arrive after expiry, and a holder whose release was lost may re-acquire
/// and refresh the same token. Fenced writes carry the revision guard, as the workload's do.
struct Sim {
    rng: Rng,
    /// When the lock is free of every earlier grant (server time).
    free_at: u64,
    /// When each process is done with its last call.
    idle_at: Vec<u64>,
    last_token: u64,
    /// Times of the fenced writes the server applied.
    applied: Vec<u64>,
    /// Per hold, the times its reads took effect (WRITE: one, READ: those recorded).
    read_at: Vec<Vec<u64>>,
    holds: Vec<Hold>,
    /// A WRITE grant whose release was lost: (process, token, expiry).
    lingering: Option<(u64, u64, u64)>,
    /// Per mille of WRITE grants made without waiting for the lock to be free: a broken
    /// service, to show the checker sees what this simulation makes (0 in a correct one).
    double_grants_per_mille: u64,
}

const WRITERS: u64 = 4;
const READERS: u64 = 3;
const LAT: u64 = 50;

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim {
            rng: Rng::new(seed),
            free_at: 0,
            idle_at: vec![0; (WRITERS + READERS) as usize],
            last_token: 0,
            applied: vec![],
            read_at: vec![],
            holds: vec![],
            lingering: None,
            double_grants_per_mille: 0,
        }
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.rng.below(1000) < per_mille
    }

    fn lat(&mut self) -> u64 {
        1 + self.rng.below(LAT)
    }

    fn epoch(&mut self) {
        if let Some((process, token, expires)) = self.lingering.take() {
            let idle = self.idle_at[process as usize];
            if idle + 1 < expires && self.chance(500) {
                // Its re-acquire reaches the server before the sweep: the same grant, refreshed.
                let granted = idle + 1 + self.rng.below(expires - idle - 1);
                self.grant(process, Mode::Write, Some(token), granted);
                return;
            }
        }
        if self.chance(700) {
            let process = self.rng.below(WRITERS);
            let free_at = match self.chance(self.double_grants_per_mille) {
                true => 0,
                false => self.free_at,
            };
            let at = free_at.max(self.idle_at[process as usize]) + self.rng.below(LAT);
            self.grant(process, Mode::Write, None, at);
        } else {
            let mut joining = vec![];
            for process in WRITERS..WRITERS + READERS {
                if self.chance(600) {
                    let at = self.free_at.max(self.idle_at[process as usize]);
                    joining.push((at + self.rng.below(LAT), process));
                }
            }
            // In grant order, so tokens grow with time as the server issues them.
            joining.sort();
            let ends: Vec<u64> = joining
                .into_iter()
                .map(|(at, process)| self.grant(process, Mode::Read, None, at))
                .collect();
            self.free_at = ends.into_iter().max().unwrap_or(self.free_at);
        }
    }

    /// Grants the lock to `process` at `granted` (a new token, or `refresh`ed), runs its hold,
    /// and returns when the server ended the grant. Sets `free_at` for a WRITE grant.
    fn grant(&mut self, process: u64, mode: Mode, refresh: Option<u64>, granted: u64) -> u64 {
        let idle = self.idle_at[process as usize];
        let acquire_invoke_ns = idle + self.rng.below(granted - idle + 1);
        let acquire_complete_ns = granted + self.lat();
        let expires = granted + 1 + self.rng.below(8 * LAT);
        let token = refresh.unwrap_or_else(|| {
            self.last_token += 1;
            self.last_token
        });
        let mut hold = Hold {
            process,
            mode,
            token,
            ttl_ms: 5_000,
            acquire_invoke_ns,
            acquire_complete_ns,
            write: None,
            reads: vec![],
            release: call(Unknown, 0, 0),
        };
        let mut now = acquire_complete_ns;
        let mut reads_at = vec![];
        if self.chance(60) {
            // The acquire's reply was lost: the client records nothing and tries again later;
            // the grant lives on until it expires.
            self.idle_at[process as usize] = now;
            if mode == Mode::Write {
                self.free_at = expires;
            }
            return expires;
        }
        let read_count = match mode {
            Mode::Write => 1,
            Mode::Read => 2,
        };
        for _ in 0..read_count {
            let at = now + self.lat();
            now = at + self.lat();
            if self.chance(900) {
                reads_at.push(at);
            }
        }
        if mode == Mode::Write && reads_at.len() == 1 {
            let invoke = now + self.lat();
            let at = invoke + self.lat();
            now = at + self.lat();
            let delivered = self.chance(900);
            let applied = delivered && at < expires;
            if applied {
                self.applied.push(at);
            }
            let outcome = match (applied, self.chance(850)) {
                (_, false) => Unknown,
                (true, true) => Acked,
                (false, true) if delivered => Fail,
                (false, true) => Unknown,
            };
            hold.write = Some(Increment {
                read: 0,
                call: call(outcome, invoke, now),
            });
        }
        let invoke = now + self.lat();
        let at = invoke + self.lat();
        now = at + self.lat();
        let delivered = self.chance(880);
        let released = delivered && at < expires;
        let outcome = match (released, self.chance(880)) {
            (_, false) => Unknown,
            (true, true) => Acked,
            (false, true) if delivered => Fail,
            (false, true) => Unknown,
        };
        hold.release = call(outcome, invoke, now);
        self.idle_at[process as usize] = now;
        let ended = if released { at } else { expires };
        if mode == Mode::Write {
            self.free_at = ended;
            if !delivered && now < expires {
                self.lingering = Some((process, token, expires));
            }
        }
        self.holds.push(hold);
        self.read_at.push(reads_at);
        ended
    }

    /// The values each read saw (the applied writes before it), and the final value.
    fn finish(mut self) -> (Vec<Hold>, i64) {
        self.applied.sort();
        let value = |at: u64| self.applied.partition_point(|&w| w < at) as i64;
        for (hold, reads) in self.holds.iter_mut().zip(&self.read_at) {
            match hold.write.as_mut() {
                Some(inc) => inc.read = value(reads[0]),
                None => hold.reads = reads.iter().map(|&at| value(at)).collect(),
            }
        }
        (self.holds, self.applied.len() as i64)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_correct_mutex_always_passes(seed in any::<u64>(), epochs in 1usize..300) {
        let mut sim = Sim::new(seed);
        for _ in 0..epochs {
            sim.epoch();
        }
        let (holds, final_value) = sim.finish();
        let report = check(&holds, final_value);
        prop_assert!(report.valid(), "{}\n{report:?}", report.details());
    }
}

/// The simulation is not vacuous: it makes proven intervals, refreshes, unknown and refused
/// releases, and READ holders sharing the lock.
#[test]
fn the_simulation_covers_what_the_checker_must_tolerate() {
    let mut sim = Sim::new(7);
    for _ in 0..3000 {
        sim.epoch();
    }
    let (holds, final_value) = sim.finish();
    let report = check(&holds, final_value);
    assert!(report.valid(), "{}", report.details());
    let grants: Vec<Grant> = holds.iter().map(Hold::grant).collect();
    let refreshed = grants
        .windows(2)
        .filter(|w| w[0].token == w[1].token)
        .count();
    let outcome_count = |o: Outcome| holds.iter().filter(|h| h.release.outcome == o).count();
    let readers_shared = grants.iter().any(|a| {
        grants.iter().any(|b| {
            a.mode == Mode::Read
                && b.mode == Mode::Read
                && a.process != b.process
                && matches!((a.definite(), b.definite()), (Some(x), Some(y)) if x.0 < y.1 && y.0 < x.1)
        })
    });
    assert!(refreshed > 0, "no refresh");
    assert!(outcome_count(Unknown) > 0 && outcome_count(Fail) > 0);
    assert!(readers_shared, "no two READ holders at once");
    assert!(report.increments_unknown > 0 && report.mutex.proven > holds.len() / 2);
}

/// The same simulation, broken to grant WRITE without waiting now and then: flagged.
#[test]
fn a_simulated_double_grant_is_flagged() {
    let mut sim = Sim::new(7);
    sim.double_grants_per_mille = 20;
    for _ in 0..3000 {
        sim.epoch();
    }
    let (holds, final_value) = sim.finish();
    let report = check(&holds, final_value);
    assert!(
        report.overlaps.contains_key("overlapping WRITE holders"),
        "{report:?}"
    );
}
