//! The verdict on the nodes' own lives, whatever the history says: a node process that ended
//! without the harness asking (`process::Exit::asked` is `None`), or a node log that shows a
//! panic or a fatal error of Raft or of storage, makes a run INVALID. A checker that only reads
//! client histories cannot see a node that crashed and was restarted by the next fault, nor a
//! task that panicked while the process lived on.
//!
//! Who calls it: the runner (main.rs), after `NetCluster::stop`, with every exit and the run's
//! cluster directory (every slot's log, appended across restarts and replacements, so removed
//! and replaced members are read too).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::process::Exit;

/// Lines that mean a node is broken even if it still answers, with why each one counts. Kept
/// to lines that never appear in a healthy run (every ERROR line of openraft and steward was
/// read for this; network errors and leadership changes are WARN and are not here).
pub const FATAL_MARKERS: &[(&str, &str)] = &[
    // std's panic message ("thread 'x' panicked at src/..:L:C:"); steward's panic hook then
    // aborts (src/main.rs), but a panic is a finding even where it would not.
    (PANIC_MARKER, "a panic"),
    // openraft `RaftCore::main` logs this when the core stops with a Fatal other than a normal
    // stop (a storage error, or the core panicked): the node keeps its ports and stops serving.
    (
        "RaftCore::main error",
        "openraft's core stopped with a fatal error",
    ),
    // openraft `handle_notification`: a storage error reached the core, which then stops.
    (
        "Notification::StorageError",
        "openraft was told of a storage error",
    ),
    // openraft `storage/callback.rs`: a log flush or a state-machine apply failed.
    ("IOFlushed error", "a Raft log write failed (openraft)"),
    (
        "LogApplied error",
        "a state-machine apply failed (openraft)",
    ),
    // steward's log store (src/raft/log_store.rs).
    ("raft log write failed", "a Raft log write failed (steward)"),
    (
        "cannot start the raft log writer thread",
        "the Raft log writer did not start (steward)",
    ),
    // steward's state machine (src/raft/state_machine.rs): its lock is poisoned, so an apply
    // panicked.
    ("state lock poisoned", "an apply panicked (steward)"),
    (
        "cannot capture the state for a snapshot",
        "the state machine could not be read for a snapshot (steward)",
    ),
];

/// What std's panic message says (`FATAL_MARKERS`' first entry).
const PANIC_MARKER: &str = "panicked at";

/// The harness's own marker lines in node logs ("==== jepsen: killed node 2 ..."), never
/// a finding.
const HARNESS_MARKER: &str = "==== jepsen:";

/// A line of a node log that matches a `FATAL_MARKERS` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogHit {
    pub file: PathBuf,
    /// 1-based.
    pub line_no: usize,
    pub line: String,
    pub why: &'static str,
}

/// The `FATAL_MARKERS` hits in one log's text, as (line number, line, why). A panic's line is
/// followed by its message (std prints it on the next line), so that comes along after " | ".
pub fn scan_text(text: &str) -> Vec<(usize, String, &'static str)> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| !line.starts_with(HARNESS_MARKER))
        .filter_map(|(i, line)| {
            let (marker, why) = FATAL_MARKERS.iter().find(|(m, _)| line.contains(m))?;
            let quoted = match (*marker == PANIC_MARKER, lines.get(i + 1)) {
                (true, Some(message)) => format!("{line} | {message}"),
                _ => line.to_string(),
            };
            Some((i + 1, quoted, *why))
        })
        .collect()
}

/// Every hit in every `*.log` file directly under `dir` (the run's cluster directory), in file
/// name order. A log that cannot be read is an error: an unread log is not a clean one.
pub fn scan_dir(dir: &Path) -> anyhow::Result<Vec<LogHit>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut hits = Vec::new();
    for file in logs {
        let bytes = std::fs::read(&file)?;
        let text = String::from_utf8_lossy(&bytes);
        hits.extend(
            scan_text(&text)
                .into_iter()
                .map(|(line_no, line, why)| LogHit {
                    file: file.clone(),
                    line_no,
                    line,
                    why,
                }),
        );
    }
    Ok(hits)
}

/// Most log hits quoted in a report (all are counted).
const HITS_QUOTED_MAX: usize = 20;

/// What the nodes' lives come to: `None` when every exit was asked for and no log has a hit;
/// else a report for verdict.txt naming each unasked exit (node, member, time in ns since
/// `epoch`, the run's start as on the timeline, how it ended, its log tail) and each hit.
pub fn report(exits: &[Exit], hits: &[LogHit], epoch: Instant) -> Option<String> {
    let crashes: Vec<&Exit> = exits.iter().filter(|e| e.asked.is_none()).collect();
    if crashes.is_empty() && hits.is_empty() {
        return None;
    }
    let mut out = String::new();
    for e in &crashes {
        out.push_str(&format!(
            "node {} (member {}, pid {}) ended on its own at {} ns ({}); {}\n",
            e.slot,
            e.raft_id,
            e.pid,
            ns_since(epoch, e.at),
            e.how,
            e.log_tail
        ));
    }
    for h in hits.iter().take(HITS_QUOTED_MAX) {
        out.push_str(&format!(
            "{} in {}:{}: {}\n",
            h.why,
            h.file.display(),
            h.line_no,
            h.line
        ));
    }
    if hits.len() > HITS_QUOTED_MAX {
        out.push_str(&format!(
            "... and {} more such log lines\n",
            hits.len() - HITS_QUOTED_MAX
        ));
    }
    Some(out)
}

/// One line for the summary: how many nodes ended on their own, and which; how many log hits.
pub fn summary(exits: &[Exit], hits: &[LogHit]) -> String {
    let crashed: Vec<String> = exits
        .iter()
        .filter(|e| e.asked.is_none())
        .map(|e| format!("node {} ({})", e.slot, e.how))
        .collect();
    let mut parts = Vec::new();
    if !crashed.is_empty() {
        parts.push(format!("ended on their own: {}", crashed.join(", ")));
    }
    if !hits.is_empty() {
        let mut whys: Vec<&str> = hits.iter().map(|h| h.why).collect();
        whys.sort_unstable();
        whys.dedup();
        parts.push(format!(
            "{} fatal log line(s): {}",
            hits.len(),
            whys.join(", ")
        ));
    }
    format!("nodes {}", parts.join("; "))
}

/// Signed ns from `epoch` to `at` (negative: before the run's start, e.g. during start-up).
pub fn ns_since(epoch: Instant, at: Instant) -> i128 {
    match at.checked_duration_since(epoch) {
        Some(d) => d.as_nanos() as i128,
        None => -(epoch.duration_since(at).as_nanos() as i128),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Ask;
    use std::time::Duration;

    /// A healthy node's log, as a real run writes it (WARN lines of network trouble included).
    const CLEAN: &str = "\
==== jepsen: starting node 2 in stw1a-n2 at 2026-11-26T14:00:00.000Z ====
2026-11-26T14:00:00.1Z  INFO steward::cli::serve: starting node id=2
2026-11-26T14:00:03.2Z  WARN openraft::replication: ReplicationCore recv RPCError: NetworkError: Timeout expired
2026-11-26T14:00:04.0Z  WARN openraft::core::raft_core: A message will be ignored because this node is no longer Leader
==== jepsen: killed node 2 (SIGKILL) at 2026-11-26T14:00:05.000Z ====
2026-11-26T14:00:09.9Z  INFO steward::server: node stopped
";

    #[test]
    fn a_clean_log_has_no_hits() {
        assert_eq!(scan_text(CLEAN), vec![]);
    }

    #[test]
    fn panics_and_fatal_raft_errors_are_flagged_with_their_line() {
        let log = format!(
            "{CLEAN}\
thread 'tokio-runtime-worker' panicked at src/server/locks.rs:88:9:
index out of bounds
2026-11-26T14:00:10Z ERROR openraft::core::raft_core: RaftCore::main error: storage error: write log
"
        );
        let hits = scan_text(&log);
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert_eq!(hits[0].0, 7);
        assert_eq!(hits[0].2, "a panic");
        assert!(
            hits[0].1.ends_with(":88:9: | index out of bounds"),
            "{:?}",
            hits[0]
        );
        assert!(hits[1].1.contains("RaftCore::main error"));
        for (marker, _) in FATAL_MARKERS {
            let one = format!("2026 ERROR x: {marker}: details\n");
            assert_eq!(scan_text(&one).len(), 1, "{marker}");
        }
    }

    fn exit(slot: u64, asked: Option<Ask>, at: Instant) -> Exit {
        Exit {
            slot,
            raft_id: slot,
            pid: 100 + slot as u32,
            at,
            how: match asked {
                Some(_) => "signal: 9 (SIGKILL)".into(),
                None => "signal: 6 (SIGABRT) (core dumped)".into(),
            },
            asked,
            log_tail: format!("last lines of node{slot}.log:\n  boom"),
        }
    }

    #[test]
    fn only_exits_nobody_asked_for_and_log_hits_make_a_report() {
        let epoch = Instant::now();
        let later = epoch + Duration::from_millis(1500);
        let asked = [
            exit(1, Some(Ask::Kill), later),
            exit(3, Some(Ask::Stop), later),
        ];
        assert_eq!(report(&asked, &[], epoch), None, "asked-for exits are fine");
        let mut all = asked.to_vec();
        all.push(exit(2, None, later));
        let text = report(&all, &[], epoch).expect("a crash is reported");
        assert!(
            text.contains("node 2 (member 2, pid 102) ended on its own at 1500000000 ns"),
            "{text}"
        );
        assert!(text.contains("SIGABRT") && text.contains("boom"), "{text}");
        assert!(!text.contains("node 1 "), "{text}");
        assert_eq!(
            summary(&all, &[]),
            "nodes ended on their own: node 2 (signal: 6 (SIGABRT) (core dumped))"
        );
        let hit = LogHit {
            file: "node3.log".into(),
            line_no: 9,
            line: "thread 'main' panicked at x.rs:1:1:".into(),
            why: "a panic",
        };
        let text = report(&asked, std::slice::from_ref(&hit), epoch).expect("a hit is reported");
        assert!(
            text.contains("a panic in node3.log:9: thread 'main'"),
            "{text}"
        );
        assert_eq!(ns_since(later, epoch), -1_500_000_000);
    }

    #[test]
    fn scan_dir_reads_every_log_and_only_logs() {
        let dir = std::env::temp_dir().join(format!("jepsen-life-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("node1.log"), CLEAN).expect("write");
        std::fs::write(
            dir.join("node2.log"),
            "x\nthread 'a' panicked at y.rs:2:3:\n",
        )
        .expect("write");
        std::fs::write(dir.join("node2.toml"), "panicked at = 1\n").expect("write");
        let hits = scan_dir(&dir).expect("scan");
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0].file, dir.join("node2.log"));
        assert_eq!(hits[0].line_no, 2);
        let _ = std::fs::remove_dir_all(dir);
    }
}
