//! Cluster time: the one clock every TTL is measured on (issue 24; README "Time").
//!
//! The state's `time_ms` moves only by what leaders measure on their monotonic clocks, never by
//! a wall clock, so a wall clock stepped or running fast on any node expires nothing early:
//! - Every node keeps an anchor: the state's cluster time after the last entry it applied, and
//!   the monotonic instant that entry reached this node's log (the log store tells, as it
//!   accepts each batch; when it cannot, the instant it was applied). That instant is after
//!   every stamp in the state was made (an entry is stamped before it is appended anywhere, and
//!   the entries before it were in the log no later), so `anchor.cluster_ms + (monotonic now -
//!   anchor.at)` never counts ahead of any deadline's own count: not past a refresh's time +
//!   TTL before TTL has really passed since the refresh. Counting from arrival rather than
//!   apply credits what a follower waits to learn an entry is committed, and, for the old
//!   leader's last entries, which a follower applies only once a new leader commits them, the
//!   whole election.
//! - A node that becomes leader of a term waits until it has applied an entry of that term (its
//!   blank entry: everything before it is applied), then freezes its anchor and stamps every
//!   proposal of the term with the anchor's count. The time since the last entry reached it is
//!   credited, so neither a quiet spell before the old leader died nor the election is lost;
//!   what is lost is how late that entry reached this node after it was stamped, which makes
//!   expiries that much late, never early. What fell due while nobody led ends once the new
//!   leader sweeps: late by at most about one election timeout.
//! - While it leads it keeps its frozen anchor: re-anchoring on its own entries would lose
//!   their commit latency each time.
//! - A new cluster (nothing ever stamped) starts cluster time at its first leader's wall clock,
//!   so shown times start right; from then on only monotonic clocks move it.
//! - A proposal carries the term its time was measured in; apply moves time, and expires
//!   anything, only with a stamp of the entry's own term (core's `ApplyContext::stamped`).
//!
//! The monotonic clock and the wall clock come through `Clock`, a seam for tests and the
//! simulator. Wall time is for display only (`wall_ms`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::raft::log_store::LogObserver;
use crate::raft::state_machine::ApplyObserver;
use crate::raft::types::{RaftMetrics, ServerState};
use crate::server::watch::WatchHub;
use crate::state::Effects;

pub mod probe;
pub mod wall;

/// Where time comes from. Nothing replicated depends on `wall_ms`.
pub trait Clock: Send + Sync + 'static {
    /// Wall-clock time in milliseconds since the Unix epoch (display, certificates, logs).
    fn wall_ms(&self) -> u64;
    /// Milliseconds on a clock that only moves forward at the rate of real time, from an
    /// arbitrary origin fixed for the process (CLOCK_MONOTONIC: not stepped by NTP or by hand).
    fn monotonic_ms(&self) -> u64;
}

/// The machine's clocks.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A cluster time and the monotonic instant from which it may be counted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Anchor {
    cluster_ms: u64,
    at_monotonic_ms: u64,
}

impl Anchor {
    fn now(&self, monotonic_ms: u64) -> u64 {
        self.cluster_ms
            .saturating_add(monotonic_ms.saturating_sub(self.at_monotonic_ms))
    }
}

/// Arrivals remembered at most (batches not applied yet); beyond it the oldest are forgotten,
/// and entries of a forgotten batch count from the next batch's arrival (later: never early).
const ARRIVALS_MAX: usize = 4_096;

#[derive(Debug, Default)]
struct Inner {
    /// The last cluster time apply reached on this node, and when.
    applied: Option<Anchor>,
    /// The term this node leads and the anchor it froze for it.
    leading: Option<(u64, Anchor)>,
    /// The monotonic instant each batch the log accepted arrived, by its last index. An entry
    /// arrived with the batch of the smallest last index at or after its own.
    arrivals: BTreeMap<u64, u64>,
}

/// This node's view of cluster time: what apply last reached, and, while it leads, the count
/// it stamps proposals with.
pub struct ClusterClock {
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
}

impl ClusterClock {
    pub fn new(clock: Arc<dyn Clock>) -> ClusterClock {
        ClusterClock {
            clock,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The clocks underneath (wall time for display).
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The clocks underneath, shared.
    pub fn clock_handle(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The monotonic clock cluster time is counted on.
    fn monotonic_ms(&self) -> u64 {
        // DELIBERATE BUG (src/bugs.rs, test-only builds): time that wall-clock steps move.
        if crate::bugs::active(crate::bugs::Bug::WallClockTime) {
            return self.clock.wall_ms();
        }
        self.clock.monotonic_ms()
    }

    /// Apply reached `cluster_ms` (the state's time after a batch of proposals, or a snapshot
    /// install): the anchor is now, even when the time did not move. Crediting the time since an older anchor instead would count
    /// ahead of a leader whose count lags more than this node's did: a refresh it stamped
    /// without moving the state's time sets a deadline this node would reach early
    /// (`model_tests.rs` found it). From the last entry applied, a count is never ahead of
    /// any deadline's own count (README "Time").
    ///
    /// `last_index`: the batch's last entry, whose arrival in this node's log is the anchor's
    /// instant when the log store told it (`appended`); `None` (a snapshot, the state a node
    /// starts with), or an arrival not known: now.
    pub fn applied(&self, cluster_ms: u64, last_index: Option<u64>) {
        let now = self.monotonic_ms();
        let mut inner = self.inner();
        let arrived = last_index.and_then(|i| {
            let (&end, &at) = inner.arrivals.range(i..).next()?;
            // Batches wholly applied are done with; the one holding `i` may go on.
            inner.arrivals = inner.arrivals.split_off(&end);
            Some(at)
        });
        let cluster_ms = inner
            .applied
            .map_or(cluster_ms, |a| a.cluster_ms.max(cluster_ms));
        inner.applied = Some(Anchor {
            cluster_ms,
            at_monotonic_ms: arrived.map_or(now, |at| at.min(now)),
        });
    }

    /// The log accepted a batch of entries ending at `last_index`, now.
    pub fn appended(&self, last_index: u64) {
        let now = self.monotonic_ms();
        let mut inner = self.inner();
        inner.arrivals.insert(last_index, now);
        while inner.arrivals.len() > ARRIVALS_MAX {
            inner.arrivals.pop_first();
        }
    }

    /// The log dropped its entries after `after` (a new leader's log replaces them): their
    /// arrivals are forgotten, so entries appended in their place count from their own.
    pub fn truncated(&self, after: Option<u64>) {
        let mut inner = self.inner();
        match after.map(|a| a.checked_add(1)) {
            Some(Some(from)) => drop(inner.arrivals.split_off(&from)),
            Some(None) => {}
            None => inner.arrivals.clear(),
        }
    }

    /// The cluster time to stamp a proposal of `term` with, when this node leads `term` and has
    /// applied an entry of it (`caught_up`); `None` otherwise, and then the proposal carries no
    /// time. The first call of a term freezes the anchor the term counts from.
    pub fn leader_now(&self, term: u64, caught_up: bool) -> Option<u64> {
        let now = self.monotonic_ms();
        let mut inner = self.inner();
        match inner.leading {
            Some((t, anchor)) if t == term => return Some(anchor.now(now)),
            _ => {}
        }
        if !caught_up {
            return None;
        }
        let mut anchor = inner.applied?;
        if anchor.cluster_ms == 0 {
            // Nothing was ever stamped (a new cluster): no deadline exists yet, so cluster time
            // may start anywhere, and it starts at this leader's wall clock, for display.
            anchor = Anchor {
                cluster_ms: self.clock.wall_ms(),
                at_monotonic_ms: now,
            };
        }
        inner.leading = Some((term, anchor));
        Some(anchor.now(now))
    }

    /// `leader_now` for the node whose Raft reports `metrics`: the time and term to stamp a
    /// proposal with, `None` unless it leads and has applied an entry of its term.
    pub fn leader_stamp(&self, metrics: &RaftMetrics) -> Option<(u64, u64)> {
        if metrics.state != ServerState::Leader {
            return None;
        }
        let term = metrics.current_term;
        let caught_up = metrics
            .last_applied
            .is_some_and(|l| l.leader_id.term == term);
        self.leader_now(term, caught_up).map(|now| (now, term))
    }

    /// How long ago (monotonic ms) this node last applied a time-stamped entry or installed a
    /// snapshot; `None` before it did. On the leader: how long the log has had no checkpoint of
    /// cluster time.
    pub fn quiet_ms(&self) -> Option<u64> {
        let now = self.monotonic_ms();
        self.inner()
            .applied
            .map(|a| now.saturating_sub(a.at_monotonic_ms))
    }

    /// This node's best estimate of cluster time now (any role): the applied anchor's count.
    /// Never ahead of what a leader of the current term could stamp; for display and metrics.
    pub fn estimate(&self) -> Option<u64> {
        let now = self.monotonic_ms();
        self.inner().applied.map(|a| a.now(now))
    }
}

/// Waits up to `timeout` until `raft` either does not lead or has applied an entry of the term
/// it leads, when its cluster clock can stamp (`ClusterClock::leader_stamp`); whether that
/// happened in time.
pub async fn term_clock_ready(
    raft: &crate::raft::types::Raft,
    timeout: std::time::Duration,
) -> bool {
    raft.wait(Some(timeout))
        .metrics(
            |m| {
                m.state != ServerState::Leader
                    || m.last_applied
                        .is_some_and(|l| l.leader_id.term == m.current_term)
            },
            "leader clock ready",
        )
        .await
        .is_ok()
}

/// What a node's state machine tells: the watch hub everything, the cluster clock the time.
pub struct Observers {
    pub hub: Arc<WatchHub>,
    pub time: Arc<ClusterClock>,
}

impl ApplyObserver for Observers {
    fn on_applied(&self, effects: &Effects, revision: u64) {
        self.hub.on_applied(effects, revision);
    }

    fn on_reset(&self, revision: u64) {
        self.hub.on_reset(revision);
    }

    fn on_auth(&self, auth_revision: u64) {
        self.hub.on_auth(auth_revision);
    }

    fn on_time(&self, time_ms: u64, last_index: Option<u64>) {
        self.time.applied(time_ms, last_index);
    }
}

impl LogObserver for Observers {
    fn on_appended(&self, last_index: u64) {
        self.time.appended(last_index);
    }

    fn on_truncated(&self, after: Option<u64>) {
        self.time.truncated(after);
    }
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
