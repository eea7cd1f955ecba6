//! The shown time: what a leader stamps as the wall-clock time of what happens (README "Time",
//! promise 5). Wall clocks are for display only; nothing that expires reads this.
//!
//! - Every node reads every other node's wall clock now and then (`record`, from the clock
//!   probe in `server/time/probe.rs`), and takes the middle (median) of all the clocks it knows,
//!   its own included: one node whose clock is wrong, by a step or a rate, moves nothing.
//! - It does not jump to that middle: it moves toward it by at most `slew_ms_per_s` per second
//!   of its monotonic clock (slewing), so even a step of every clock at once moves the shown time
//!   by a bounded amount per second. A process that starts takes the middle as it is: after a
//!   whole-cluster restart the shown time is right at once.
//! - A node further than `offset_ms_max` from the middle is reported (`offsets`, `cluster
//!   status`, metrics, one log line when it starts and stops).
//!
//! Apply takes the stamp only forward and never behind cluster time (core `State::shown_ms`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Clock;

/// Readings of another node's wall clock older than this many probe intervals are not used.
const READING_AGE_PROBES_MAX: u64 = 3;

/// What this node last read of another node's wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reading {
    /// The peer's wall clock when it answered.
    wall_ms: u64,
    /// This node's monotonic clock halfway through the round trip (when the peer most
    /// likely read its clock).
    at_monotonic_ms: u64,
    /// The round trip, which bounds the reading's error.
    rtt_ms: u64,
}

/// The shown time as a distance from the monotonic clock, and when it was last moved.
#[derive(Clone, Copy, Debug)]
struct Slewed {
    offset_ms: i64,
    at_monotonic_ms: u64,
}

#[derive(Debug, Default)]
struct Inner {
    readings: BTreeMap<u64, Reading>,
    slewed: Option<Slewed>,
}

/// How far one node's wall clock is from this one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerOffset {
    pub node_id: u64,
    /// The peer's wall clock minus this node's, in ms (positive: the peer is ahead).
    pub offset_ms: i64,
    /// The round trip of the reading: the offset is known to about half of it.
    pub rtt_ms: u64,
}

/// This node's view of the nodes' wall clocks and the shown time it stamps while it leads.
pub struct ShownClock {
    clock: Arc<dyn Clock>,
    offset_ms_max: u64,
    slew_ms_per_s: u64,
    reading_age_ms_max: u64,
    inner: Mutex<Inner>,
}

impl ShownClock {
    /// `offset_ms_max`, `probe_interval_ms` and `slew_ms_per_s` are `time.*` of the config.
    pub fn new(
        clock: Arc<dyn Clock>,
        offset_ms_max: u64,
        probe_interval_ms: u64,
        slew_ms_per_s: u64,
    ) -> ShownClock {
        ShownClock {
            clock,
            offset_ms_max,
            slew_ms_per_s,
            reading_age_ms_max: probe_interval_ms.saturating_mul(READING_AGE_PROBES_MAX),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The largest distance of a node's clock from the middle that is not reported.
    pub fn offset_ms_max(&self) -> u64 {
        self.offset_ms_max
    }

    /// Node `node_id` answered `wall_ms` to a probe sent at `sent_monotonic_ms` (this node's
    /// monotonic clock) and answered now.
    pub fn record(&self, node_id: u64, sent_monotonic_ms: u64, wall_ms: u64) {
        let now = self.clock.monotonic_ms();
        let rtt_ms = now.saturating_sub(sent_monotonic_ms);
        let reading = Reading {
            wall_ms,
            at_monotonic_ms: sent_monotonic_ms.saturating_add(rtt_ms / 2),
            rtt_ms,
        };
        self.inner().readings.insert(node_id, reading);
    }

    /// The nodes this node has a reading of, fresh or not.
    pub fn known(&self) -> Vec<u64> {
        self.inner().readings.keys().copied().collect()
    }

    /// Forgets node `node_id` (no longer a member).
    pub fn forget(&self, node_id: u64) {
        self.inner().readings.remove(&node_id);
    }

    /// Every other node's wall clock now, as this node last read it: its reading moved on by
    /// this node's monotonic clock. Readings too old to trust are left out.
    fn peer_walls(inner: &Inner, now_monotonic_ms: u64, age_ms_max: u64) -> Vec<(u64, u64, u64)> {
        inner
            .readings
            .iter()
            .filter_map(|(id, r)| {
                let age = now_monotonic_ms.saturating_sub(r.at_monotonic_ms);
                (age <= age_ms_max).then(|| (*id, r.wall_ms.saturating_add(age), r.rtt_ms))
            })
            .collect()
    }

    /// How far every node this node has a fresh reading of is from its own clock.
    pub fn offsets(&self) -> Vec<PeerOffset> {
        let now = self.clock.monotonic_ms();
        let own = self.clock.wall_ms();
        let inner = self.inner();
        Self::peer_walls(&inner, now, self.reading_age_ms_max)
            .into_iter()
            .map(|(node_id, wall, rtt_ms)| PeerOffset {
                node_id,
                offset_ms: signed_difference(wall, own),
                rtt_ms,
            })
            .collect()
    }

    /// The middle of the wall clocks this node knows now, its own included (the lower of
    /// the two middles when they are even: never the higher of two disagreeing clocks).
    pub fn middle_ms(&self) -> u64 {
        let now = self.clock.monotonic_ms();
        let own = self.clock.wall_ms();
        let inner = self.inner();
        middle(own, &Self::peer_walls(&inner, now, self.reading_age_ms_max))
    }

    /// The node ids (this one is `own_id`) whose clocks are further than `offset_ms_max`
    /// from the middle, with how far (positive: ahead).
    pub fn outliers(&self, own_id: u64) -> Vec<(u64, i64)> {
        let now = self.clock.monotonic_ms();
        let own = self.clock.wall_ms();
        let inner = self.inner();
        let peers = Self::peer_walls(&inner, now, self.reading_age_ms_max);
        let mid = middle(own, &peers);
        std::iter::once((own_id, own))
            .chain(peers.iter().map(|(id, wall, _)| (*id, *wall)))
            .map(|(id, wall)| (id, signed_difference(wall, mid)))
            .filter(|(_, d)| d.unsigned_abs() > self.offset_ms_max)
            .collect()
    }

    /// The shown time now: the middle of the clocks, reached by slewing (see the module doc).
    pub fn now(&self) -> u64 {
        let now = self.clock.monotonic_ms();
        let own = self.clock.wall_ms();
        let mut inner = self.inner();
        let target = middle(own, &Self::peer_walls(&inner, now, self.reading_age_ms_max));
        let target_offset = signed_difference(target, now);
        let offset_ms = match inner.slewed {
            None => target_offset,
            Some(s) => {
                let elapsed = now.saturating_sub(s.at_monotonic_ms);
                let step = i64::try_from(elapsed.saturating_mul(self.slew_ms_per_s) / 1_000)
                    .unwrap_or(i64::MAX);
                let gap = target_offset.saturating_sub(s.offset_ms);
                s.offset_ms.saturating_add(gap.clamp(-step, step))
            }
        };
        inner.slewed = Some(Slewed {
            offset_ms,
            at_monotonic_ms: now,
        });
        add_signed(now, offset_ms)
    }
}

/// The median of `own` and the peers' walls (the lower middle of an even count).
fn middle(own: u64, peers: &[(u64, u64, u64)]) -> u64 {
    let mut walls: Vec<u64> = std::iter::once(own)
        .chain(peers.iter().map(|(_, wall, _)| *wall))
        .collect();
    walls.sort_unstable();
    walls.get((walls.len() - 1) / 2).copied().unwrap_or(own)
}

fn signed_difference(a: u64, b: u64) -> i64 {
    let d = i128::from(a) - i128::from(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

fn add_signed(a: u64, d: i64) -> u64 {
    if d >= 0 {
        a.saturating_add(d.unsigned_abs())
    } else {
        a.saturating_sub(d.unsigned_abs())
    }
}

#[cfg(test)]
#[path = "wall_tests.rs"]
mod tests;
