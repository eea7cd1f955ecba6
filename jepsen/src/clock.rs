//! Wall-clock faults with libfaketime (Debian's `faketime` package).
//!
//! When a run uses the clock nemesis, every node is started with libfaketime preloaded and a
//! per-node settings file (`FAKETIME_TIMESTAMP_FILE`) that libfaketime re-reads once a second.
//! Writing that file moves the node's wall clock: a step (`+30` = 30 s ahead) or a rate
//! (`x2` = running twice as fast). Only `CLOCK_REALTIME` is faked
//! (`FAKETIME_DONT_FAKE_MONOTONIC`), as on a real machine where NTP steps and a drifting wall
//! clock leave the monotonic clock alone: Raft's timers keep real time, and what moves is the
//! time a leader stamps on the entries it proposes, which is what decides lock expiry.
//!
//! libfaketime scales time since the *process started* by the rate, so switching the rate on a
//! running process would step its clock by `elapsed * (new - old)`; `FakeClock::at_rate`
//! cancels that step with the offset so a rate fault is a drift, not a jump.

use std::path::{Path, PathBuf};

/// Where Debian and a source install put libfaketime; the multi-threaded build (steward is a
/// multi-threaded process).
const LIBFAKETIME_PATHS: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
];

/// How often (seconds) libfaketime re-reads a node's settings file: a clock fault takes effect
/// within this time.
pub const REREAD_SECS: u32 = 1;

/// The installed libfaketime, if any.
pub fn find_libfaketime() -> Option<PathBuf> {
    LIBFAKETIME_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// The environment that makes a process read its wall clock through libfaketime `lib`,
/// with the settings in `file`.
pub fn env(lib: &Path, file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_CACHE_DURATION".into(), REREAD_SECS.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        // File times stay real (redb and the logs do not care, but nothing should be surprised).
        ("NO_FAKE_STAT".into(), "1".into()),
    ]
}

/// A node's wall clock as libfaketime fakes it: real time since the process started, times
/// `rate`, plus `offset_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FakeClock {
    pub offset_s: f64,
    pub rate: f64,
}

impl FakeClock {
    /// The real clock.
    pub const REAL: FakeClock = FakeClock {
        offset_s: 0.0,
        rate: 1.0,
    };

    /// The same clock stepped by `delta_s` seconds (negative: back).
    pub fn jumped(self, delta_s: f64) -> FakeClock {
        FakeClock {
            offset_s: self.offset_s + delta_s,
            ..self
        }
    }

    /// The clock running at `rate` from now on, without a step, in a process that started
    /// `elapsed_s` seconds ago.
    pub fn at_rate(self, rate: f64, elapsed_s: f64) -> FakeClock {
        FakeClock {
            offset_s: self.offset_s + elapsed_s * (self.rate - rate),
            rate,
        }
    }

    /// How far ahead of real time (seconds; negative: behind) the process reads its clock at
    /// `elapsed_s` seconds after it started.
    pub fn skew_s(self, elapsed_s: f64) -> f64 {
        elapsed_s * (self.rate - 1.0) + self.offset_s
    }

    /// The settings file's one line, e.g. `+30.000 x1.0000` (always a sign: libfaketime
    /// requires one for an offset; '.' as the decimal point, as in the C locale steward runs in).
    pub fn render(self) -> String {
        format!("{:+.3} x{:.4}\n", self.offset_s, self.rate)
    }
}

/// Writes `clock` to a node's settings file, atomically (libfaketime may read it at any time).
pub fn write(file: &Path, clock: FakeClock) -> anyhow::Result<()> {
    let tmp = file.with_extension("faketime.tmp");
    std::fs::write(&tmp, clock.render())?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_rate_change_is_continuous_and_then_drifts() {
        let elapsed = 100.0;
        let fast = FakeClock::REAL.at_rate(2.0, elapsed);
        assert!(close(fast.skew_s(elapsed), 0.0), "no step when it starts");
        assert!(
            close(fast.skew_s(elapsed + 10.0), 10.0),
            "10 s later it is 10 s ahead"
        );
        // From fast to slow at 110 s: still continuous from the skew it had.
        let slow = fast.at_rate(0.5, elapsed + 10.0);
        assert!(close(slow.skew_s(elapsed + 10.0), 10.0));
        assert!(close(slow.skew_s(elapsed + 30.0), 0.0));
    }

    #[test]
    fn a_jump_steps_by_its_delta_on_top_of_a_drift() {
        let c = FakeClock::REAL.at_rate(2.0, 5.0).jumped(-30.0);
        assert!(close(c.skew_s(5.0), -30.0));
        assert!(close(c.skew_s(6.0), -29.0));
    }

    #[test]
    fn renders_what_libfaketime_parses() {
        assert_eq!(FakeClock::REAL.render(), "+0.000 x1.0000\n");
        assert_eq!(FakeClock::REAL.jumped(-12.5).render(), "-12.500 x1.0000\n");
        let fast = FakeClock::REAL.at_rate(4.0, 1.0);
        assert_eq!(fast.render(), "-3.000 x4.0000\n");
    }
}
