//! The linearizability checker for register histories (the register workload's verdict).
//!
//! Keys are independent registers, so the history is split per key and each key is checked on its
//! own (P-compositionality), smallest first, by a Wing–Gong search with memoization (`search`)
//! over the register model (`model`), under one time limit for the whole check. A check that
//! runs out of time or memory, or meets a malformed event, says `Unknown` — never `Valid`.
//!
//! How outcomes are read (the contract is in `history`): `Ok` ops take effect exactly once between
//! invoke and complete; `Fail` ops never took effect and are dropped; `Unknown` reads are dropped;
//! `Unknown` writes and CAS may take effect at any time after invoke, or never.
//!
//! Called by the runner after a register run; `render` turns the verdict into the report text.

mod cache;
mod model;
pub mod render;
mod search;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::history::RegisterEvent;
use search::{Budget, SearchResult};

pub use render::render;

/// Keys with more events than this are not searched (the verdict is `Unknown`): a bound on one
/// search's working set (the entry list, and the bitset of unknown ops every memoized
/// configuration carries), so a runaway history is refused up front rather than exhausting memory.
pub const KEY_EVENTS_MAX: usize = 1_000_000;

/// Memory the memo cache of one key's search may use before the check gives up with `Unknown`.
pub const CACHE_BYTES_MAX: usize = 1 << 30;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    Valid,
    /// The smallest failing key (fewest events), its history in invoke order, and the longest
    /// prefix of operations that could be linearized before the search got stuck (as indexes into
    /// that history), for the report.
    Invalid {
        key: String,
        history: Vec<RegisterEvent>,
        longest_linearization: Vec<usize>,
    },
    /// The search hit its time limit (or a key's history was too large, or malformed) before
    /// deciding; never reported as a pass.
    Unknown {
        reason: String,
    },
}

impl Verdict {
    /// `VALID` / `INVALID` / `UNKNOWN`, for summary lines.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Valid => "VALID",
            Verdict::Invalid { .. } => "INVALID",
            Verdict::Unknown { .. } => "UNKNOWN",
        }
    }

    pub fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckStats {
    /// Distinct keys in the history.
    pub keys: usize,
    /// Events in the history (all outcomes).
    pub events: usize,
    /// New (linearized set, state) configurations the searches reached, over all keys checked.
    pub states_explored: u64,
    pub elapsed: Duration,
}

/// Checks a register history (many keys; keys are independent and checked separately — per-key
/// partitioning). `time_limit` bounds the whole check.
pub fn check_register(history: &[RegisterEvent], time_limit: Duration) -> (Verdict, CheckStats) {
    check_with(history, time_limit, KEY_EVENTS_MAX, CACHE_BYTES_MAX)
}

fn check_with(
    history: &[RegisterEvent],
    time_limit: Duration,
    key_events_max: usize,
    cache_bytes_max: usize,
) -> (Verdict, CheckStats) {
    let started = Instant::now();
    // A limit too large to add is no limit (a century is as good as forever here).
    let deadline = started
        .checked_add(time_limit)
        .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 24 * 3600));
    let budget = Budget {
        deadline,
        cache_bytes_max,
    };
    let keys = split_by_key(history);
    let mut stats = CheckStats {
        keys: keys.len(),
        events: history.len(),
        ..CheckStats::default()
    };
    // Reasons some keys went undecided; an invalid key elsewhere still wins (it is definite).
    let mut undecided: Vec<String> = Vec::new();

    for (position, (key, events)) in keys.iter().enumerate() {
        if Instant::now() >= deadline {
            undecided.push(format!(
                "time limit of {time_limit:?} reached with {} of {} keys unchecked",
                keys.len() - position,
                keys.len()
            ));
            break;
        }
        if events.len() > key_events_max {
            undecided.push(format!(
                "key {key:?} has {} events, over the limit of {key_events_max} (KEY_EVENTS_MAX)",
                events.len()
            ));
            continue;
        }
        let ops = match model::prepare(events) {
            Ok(ops) => ops,
            Err(malformed) => {
                undecided.push(format!("key {key:?}: malformed history: {malformed}"));
                continue;
            }
        };
        match search::search(&ops, &budget, &mut stats.states_explored) {
            SearchResult::Linearizable => {}
            SearchResult::NotLinearizable { longest } => {
                stats.elapsed = started.elapsed();
                let verdict = Verdict::Invalid {
                    key: key.to_string(),
                    history: events.iter().map(|&e| e.clone()).collect(),
                    longest_linearization: longest.into_iter().map(|op| ops[op].index).collect(),
                };
                return (verdict, stats);
            }
            SearchResult::Aborted { reason } => {
                undecided.push(format!("key {key:?} ({} events): {reason}", events.len()))
            }
        }
    }
    stats.elapsed = started.elapsed();
    let verdict = if undecided.is_empty() {
        Verdict::Valid
    } else {
        Verdict::Unknown {
            reason: undecided.join("; "),
        }
    };
    (verdict, stats)
}

/// Each key's events in invoke order (ties: complete time, then process), keys ordered by event
/// count then name — so the first failing key found is the smallest.
fn split_by_key(history: &[RegisterEvent]) -> Vec<(&str, Vec<&RegisterEvent>)> {
    let mut by_key: BTreeMap<&str, Vec<&RegisterEvent>> = BTreeMap::new();
    for event in history {
        by_key.entry(event.key.as_str()).or_default().push(event);
    }
    let mut keys: Vec<(&str, Vec<&RegisterEvent>)> = by_key.into_iter().collect();
    for (_, events) in &mut keys {
        events.sort_by_key(|e| (e.invoke_ns, e.complete_ns, e.process));
    }
    // Stable: equal sizes stay in name order.
    keys.sort_by_key(|(_, events)| events.len());
    keys
}
