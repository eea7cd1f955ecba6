//! DELIBERATELY BROKEN behaviour, for the "can fail" runs of the fault-injection suite only.
//!
//! A check that has never failed proves nothing. Each bug here breaks one promise steward makes,
//! so CI can show that the jepsen/ workload meant to guard that promise says INVALID, with the
//! anomaly it should name (.ci/run, README "Fault injection").
//!
//! Compiled in only with the `unsafe-bugs` Cargo feature; even then nothing is broken until the
//! environment variable `STEWARD_UNSAFE_BUG` names bugs (comma-separated). A build without the
//! feature never reads the variable, so no production binary can be broken by its environment.

/// Names the bugs to turn on, comma-separated (`local-reads`, ...).
pub const ENV: &str = "STEWARD_UNSAFE_BUG";

/// One deliberate bug and the promise it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// "Linearizable" reads are served from local state without ReadIndex: a deposed leader or
    /// a lagging follower answers stale values (register workload).
    LocalReads,
    /// A WRITE acquire is granted beside the one WRITE holder a lock has (no third), instead of
    /// waiting: two holders at once, breaking mutual exclusion (lock workload: overlapping
    /// WRITE holders). Fenced writes of both pass, since both tokens are live WRITE holders.
    DoubleWriteGrant,
    /// Apply answers every create at a log index that is a multiple of 10 as created, at the
    /// next revision, without storing it: an acknowledged write is lost (set workload: lost
    /// acknowledged adds).
    LostCreates,
    /// The watch hub does not send live watchers the events at revisions that are multiples of
    /// 10 (replays from its history still have them): a stream then covers a revision whose
    /// event it never sent (watch workload: a gap).
    WatchGap,
    /// An assignment stream also sends its worker the runs of other workers' operations whose
    /// id is a multiple of 4: one (operation, epoch) reaches two workers (operations workload:
    /// delivered twice).
    OpDoubleDispatch,
    /// A pool acquire that finds nothing free takes a resource already in its destination state
    /// from its owner, without waiting for a release or the reaper: one resource leased to two
    /// owners at once (lease workload: overlapping leases).
    PoolDoubleLease,
    /// A background task panics `PANIC_IN_TASK_AFTER` after the node starts. Breaks "a
    /// panicking task never leaves a half-alive node" (the panic policy, src/main.rs): the
    /// process must abort, and jepsen's node watcher and log scan (any workload) call the run
    /// INVALID, naming the node and the panic.
    PanicInTask,
}

/// How long after start the `panic-in-task` bug panics: after a jepsen cluster has usually
/// formed, so the crash lands mid-run.
pub const PANIC_IN_TASK_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

impl Bug {
    /// Every bug, in the order `STEWARD_UNSAFE_BUG` documents them.
    pub const ALL: &'static [Bug] = &[
        Bug::LocalReads,
        Bug::DoubleWriteGrant,
        Bug::LostCreates,
        Bug::WatchGap,
        Bug::OpDoubleDispatch,
        Bug::PoolDoubleLease,
        Bug::PanicInTask,
    ];

    /// The name `STEWARD_UNSAFE_BUG` uses.
    pub fn name(self) -> &'static str {
        match self {
            Bug::LocalReads => "local-reads",
            Bug::DoubleWriteGrant => "double-write-grant",
            Bug::LostCreates => "lost-creates",
            Bug::WatchGap => "watch-gap",
            Bug::OpDoubleDispatch => "op-double-dispatch",
            Bug::PoolDoubleLease => "pool-double-lease",
            Bug::PanicInTask => "panic-in-task",
        }
    }

    fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.iter().copied().find(|b| b.name() == name)
    }
}

/// Whether `bug` is on in this process. Always false without the `unsafe-bugs` feature.
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "unsafe-bugs")]
    {
        enabled().contains(&bug)
    }
    #[cfg(not(feature = "unsafe-bugs"))]
    {
        let _ = bug;
        false
    }
}

/// Checks `STEWARD_UNSAFE_BUG` once at start-up: an unknown name, or any name in a build without
/// the feature, is an error (a "can fail" run against the wrong binary must not pass quietly);
/// every bug turned on is logged loudly, and those that are tasks of their own are started
/// (call it inside the node's tokio runtime). Returns the bugs turned on.
pub fn check_env() -> anyhow::Result<Vec<Bug>> {
    let Ok(raw) = std::env::var(ENV) else {
        return Ok(vec![]);
    };
    let bugs = parse_list(&raw)?;
    if !bugs.is_empty() && !cfg!(feature = "unsafe-bugs") {
        anyhow::bail!(
            "{ENV}={raw}: this steward was built without the `unsafe-bugs` feature, so it cannot \
             run deliberately broken"
        );
    }
    for bug in &bugs {
        tracing::warn!(
            bug = bug.name(),
            "DELIBERATELY BROKEN: test-only bug turned on"
        );
    }
    if active(Bug::PanicInTask) {
        tokio::spawn(panic_in_task());
    }
    Ok(bugs)
}

/// The `panic-in-task` bug: a spawned task that panics, as a bug in any background loop would.
async fn panic_in_task() {
    tokio::time::sleep(PANIC_IN_TASK_AFTER).await;
    #[allow(clippy::panic)] // The deliberate bug itself (unsafe-bugs builds only).
    {
        panic!("deliberate bug panic-in-task: a background task panics");
    }
}

fn parse_list(raw: &str) -> anyhow::Result<Vec<Bug>> {
    raw.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            Bug::parse(n).ok_or_else(|| {
                let known: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                anyhow::anyhow!("{ENV}: unknown bug {n:?} (known: {})", known.join(", "))
            })
        })
        .collect()
}

#[cfg(feature = "unsafe-bugs")]
fn enabled() -> &'static [Bug] {
    static ENABLED: std::sync::OnceLock<Vec<Bug>> = std::sync::OnceLock::new();
    ENABLED.get_or_init(|| {
        std::env::var(ENV)
            .ok()
            .and_then(|raw| parse_list(&raw).ok())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for bug in Bug::ALL {
            assert_eq!(Bug::parse(bug.name()), Some(*bug));
        }
        assert_eq!(parse_list(" local-reads ,").unwrap(), vec![Bug::LocalReads]);
        let err = parse_list("local-reads,nope").unwrap_err().to_string();
        assert!(err.contains("unknown bug \"nope\""), "{err}");
    }
}
