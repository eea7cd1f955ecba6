//! Each node's clocks, as `steward::server::time::Clock`: a monotonic clock that drifts (runs
//! up to [`DRIFT_MAX`] fast or slow) and stalls (stands still a while, as under a VM pause, and
//! goes on from where it stopped), and a wall clock that steps either way by up to an hour.
//!
//! Both are counted from tokio's paused clock, the simulation's one real time, so a run's
//! clocks are a function of its seed. The monotonic clock never goes back; the wall clock may.
//! steward promises that nothing expires early while monotonic clocks keep to real time within
//! their drift (README "Time"), so the lock workload's check allows exactly [`DRIFT_MAX`].

use std::sync::Mutex;

use steward::server::time::Clock;
use tokio::time::Instant;

/// How far a node's monotonic clock may run from real time: 1 %, three orders of magnitude
/// more than a real quartz clock drifts, so that drift shows within seconds.
pub const DRIFT_MAX: f64 = 0.01;

/// Where every node's wall clock starts (2023-11-14), before steps.
const WALL_EPOCH_MS: i64 = 1_700_000_000_000;

struct Inner {
    /// The simulation's start: real time counts from here.
    origin: Instant,
    /// The monotonic reading at `base`, and the real instant of it.
    mono_base_ms: f64,
    base: Instant,
    /// Monotonic ms per real ms now (0 while stalled).
    rate: f64,
    /// A stall: when it ends, and the rate after it.
    stall: Option<(Instant, f64)>,
    /// How far the wall clock has been stepped, in total.
    wall_offset_ms: i64,
}

impl Inner {
    /// Ends a stall that is over, at the instant it ended.
    fn catch_up(&mut self, now: Instant) {
        if let Some((until, rate)) = self.stall {
            if now >= until {
                self.mono_base_ms = self.reading(until);
                self.base = until;
                self.rate = rate;
                self.stall = None;
            }
        }
    }

    fn reading(&self, at: Instant) -> f64 {
        self.mono_base_ms + at.saturating_duration_since(self.base).as_secs_f64() * 1e3 * self.rate
    }

    /// Starts counting at `rate` from now on.
    fn rebase(&mut self, now: Instant, rate: f64) {
        self.catch_up(now);
        self.mono_base_ms = self.reading(now);
        self.base = now;
        self.rate = rate;
    }
}

/// One node's clocks; kept across its crashes (a restart does not reset the machine's clock).
pub struct SimClock {
    inner: Mutex<Inner>,
}

impl SimClock {
    /// Monotonic time starts at `origin_ms` and runs at `1 + drift` (`drift` within
    /// ±[`DRIFT_MAX`]).
    pub fn new(origin_ms: u64, drift: f64) -> SimClock {
        let now = Instant::now();
        SimClock {
            inner: Mutex::new(Inner {
                origin: now,
                mono_base_ms: origin_ms as f64,
                base: now,
                rate: 1.0 + drift.clamp(-DRIFT_MAX, DRIFT_MAX),
                stall: None,
                wall_offset_ms: 0,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs at `1 + drift` from now on.
    pub fn set_drift(&self, drift: f64) {
        let mut inner = self.inner();
        let rate = 1.0 + drift.clamp(-DRIFT_MAX, DRIFT_MAX);
        match inner.stall {
            // The new rate takes over once the stall ends.
            Some((until, _)) => inner.stall = Some((until, rate)),
            None => inner.rebase(Instant::now(), rate),
        }
    }

    /// Stands still until `until` (real), then goes on at its rate from where it stopped.
    pub fn stall(&self, until: Instant) {
        let mut inner = self.inner();
        let now = Instant::now();
        inner.catch_up(now);
        let rate = match inner.stall {
            Some((_, rate)) => rate,
            None => inner.rate,
        };
        inner.rebase(now, 0.0);
        let until = match inner.stall {
            Some((old, _)) => old.max(until),
            None => until,
        };
        inner.stall = Some((until, rate));
    }

    /// Steps the wall clock by `by_ms` (either way).
    pub fn step_wall(&self, by_ms: i64) {
        let mut inner = self.inner();
        inner.wall_offset_ms = inner.wall_offset_ms.saturating_add(by_ms);
    }
}

impl Clock for SimClock {
    fn wall_ms(&self) -> u64 {
        let inner = self.inner();
        let real = i64::try_from(Instant::now().duration_since(inner.origin).as_millis())
            .unwrap_or(i64::MAX);
        let wall = WALL_EPOCH_MS
            .saturating_add(real)
            .saturating_add(inner.wall_offset_ms);
        u64::try_from(wall).unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        let mut inner = self.inner();
        let now = Instant::now();
        inner.catch_up(now);
        inner.reading(now) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn drift_stall_and_steps() {
        let clock = SimClock::new(1_000, 0.01);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(clock.monotonic_ms(), 2_010);
        clock.stall(Instant::now() + Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(clock.monotonic_ms(), 2_010, "stands still while stalled");
        clock.set_drift(-0.01);
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        // 200 ms of the stall left, then 1 000 ms at 0.99.
        assert_eq!(clock.monotonic_ms(), 3_000);
        let wall = clock.wall_ms();
        clock.step_wall(-3_600_000);
        assert_eq!(clock.wall_ms(), wall - 3_600_000);
        assert_eq!(
            clock.monotonic_ms(),
            3_000,
            "a wall step moves nothing monotonic"
        );
    }
}
