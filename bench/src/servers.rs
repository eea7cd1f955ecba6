//! `--server-pids`: the CPU time and peak RSS of the server processes (on this machine) during
//! the measured interval, read from /proc (Linux). The parsers are pure and unit-tested; [`Probe`]
//! does the reading, called by the drivers at the start signal and at the end.
//!
//! Peak RSS is the kernel's high-water mark (`VmHWM`); at the start it is reset by writing 5 to
//! `/proc/<pid>/clear_refs` (needs to own the process or root). When the reset is refused the
//! figure is the peak since the process started, and `peak_rss_reset` says so.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// What the servers used while the clients ran; sums over the given processes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerUsage {
    pub pids: Vec<u32>,
    /// User + system CPU seconds.
    pub cpu_s: f64,
    /// `cpu_s` per wall-clock second, in percent (200 = two cores busy).
    pub cpu_pct: f64,
    /// Sum of each process's peak resident set, MiB.
    pub peak_rss_mib: f64,
    /// False if a peak could not be reset at the start (then it is the peak since start-up).
    pub peak_rss_reset: bool,
}

/// User + system CPU ticks from the text of `/proc/<pid>/stat` (fields 14 and 15; the command
/// name in field 2 may hold spaces and parentheses, so count from the last `)`).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so fields 14 and 15 are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `VmHWM` (peak RSS) in KiB from the text of `/proc/<pid>/status`.
pub fn peak_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples the server processes at the start and at the end of the measured interval.
pub struct Probe {
    pids: Vec<u32>,
    begin: Mutex<Option<(Instant, u64, bool)>>,
}

impl Probe {
    pub fn new(pids: Vec<u32>) -> Probe {
        Probe {
            pids,
            begin: Mutex::new(None),
        }
    }

    /// At the start signal: resets the peaks and notes the CPU ticks so far.
    pub fn start(&self) -> anyhow::Result<()> {
        if self.pids.is_empty() {
            return Ok(());
        }
        let mut reset = true;
        for pid in &self.pids {
            reset &= std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
        }
        let ticks = self.ticks()?;
        *self.begin.lock().expect("probe") = Some((Instant::now(), ticks, reset));
        Ok(())
    }

    /// At the end: what was used since [`Probe::start`]; `None` without pids.
    pub fn finish(&self) -> anyhow::Result<Option<ServerUsage>> {
        let Some((at, ticks0, reset)) = *self.begin.lock().expect("probe") else {
            return Ok(None);
        };
        let wall_s = at.elapsed().as_secs_f64();
        let cpu_s = self.ticks()?.saturating_sub(ticks0) as f64 / clock_ticks_per_s();
        let mut rss_kib = 0;
        for pid in &self.pids {
            let status = read_proc(*pid, "status")?;
            rss_kib += peak_rss_kib(&status)
                .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/status: no VmHWM"))?;
        }
        let round1 = |x: f64| (x * 10.0).round() / 10.0;
        Ok(Some(ServerUsage {
            pids: self.pids.clone(),
            cpu_s: (cpu_s * 1000.0).round() / 1000.0,
            cpu_pct: if wall_s > 0.0 {
                round1(cpu_s / wall_s * 100.0)
            } else {
                0.0
            },
            peak_rss_mib: round1(rss_kib as f64 / 1024.0),
            peak_rss_reset: reset,
        }))
    }

    fn ticks(&self) -> anyhow::Result<u64> {
        let mut total = 0;
        for pid in &self.pids {
            let stat = read_proc(*pid, "stat")?;
            total += cpu_ticks(&stat)
                .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat: cannot read CPU times"))?;
        }
        Ok(total)
    }
}

fn read_proc(pid: u32, file: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .map_err(|e| anyhow::anyhow!("--server-pids: /proc/{pid}/{file}: {e}"))
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_skip_odd_command_names() {
        let stat = "4242 (steward (a) b) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 75 0 0 20 0 9 0 12345 1000000 5000 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("1 (x) S 1"), None);
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn peak_rss_from_status() {
        let status =
            "Name:\tsteward\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(peak_rss_kib(status), Some(51200));
        assert_eq!(peak_rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn probes_this_process() {
        let probe = Probe::new(vec![std::process::id()]);
        probe.start().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let usage = probe.finish().unwrap().unwrap();
        assert_eq!(usage.pids, [std::process::id()]);
        assert!(usage.peak_rss_mib > 0.0, "{usage:?}");
        assert!(usage.cpu_s >= 0.0 && usage.cpu_pct >= 0.0, "{usage:?}");
        assert_eq!(Probe::new(vec![]).finish().unwrap(), None);
    }
}
