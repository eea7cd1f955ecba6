//! DELIBERATELY BROKEN behaviour, for the "can fail" runs of the fault-injection suite only.
//!
//! The list of deliberate bugs lives here, in the core, because three of them break apply itself
//! (a double WRITE grant, a lost create, a double pool lease). The core never decides to turn one
//! on: it reads no environment and no file. The node process does, once at start-up (steward's
//! `bugs::check_env`), and hands the list to [`turn_on`]. Without the `unsafe-bugs` Cargo feature
//! [`turn_on`] keeps nothing and [`active`] is a constant false, so no production build can be
//! broken.

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
    /// The watch hubs (steward's and etcd's) do not send live watchers the events at revisions
    /// that are multiples of 10 (replays from history or the store still have them): a stream
    /// then covers a revision whose event it never sent (watch workload: a gap; the simulator's
    /// etcd watch clients: a gap).
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
    /// The node's cluster clock counts on the wall clock instead of the monotonic one, as
    /// steward did before issue 24: a forward step of the leader's wall clock expires locks,
    /// leases and workers early by the step (jepsen ttl: early losses; tests/cluster/time.rs:
    /// each holder loses what it holds).
    WallClockTime,
    /// Apply takes an entry's time stamp whatever term measured it: a held-up leader's stamp
    /// moves time and expires what the current leader's count has not reached
    /// (steward's src/server/time/model_tests.rs: a lock lost early).
    StaleTermTime,
    /// A new leader's sweeps carry a grace of two election timeouts after its term's first
    /// stamped entry, as a design that distrusted the new leader's count might: what fell due
    /// during an election ends that much later (jepsen ttl under kill: late releases).
    TakeoverGrace,
    /// etcd's Lock RPC (v3lockpb) answers as soon as the contender's key is in, without waiting
    /// for the keys created before it: two holders at once (jepsen etcd-lock: overlapping
    /// WRITE holders; their fenced Txns pass, since each one's key exists).
    EtcdLockNoWait,
    /// The log store tells openraft an append is durable as soon as it is handed to the WAL,
    /// before the fsync: a leader counts itself in a quorum for entries a crash then loses, and
    /// a follower acknowledges them (the simulator, sim/: an acknowledged write lost after
    /// crashes that drop unsynced data).
    AckBeforeFsync,
    /// A vote is written to the WAL but not fsynced before openraft is told it is saved: a node
    /// that crashes forgets it voted and can vote twice in one term (the simulator: two leaders
    /// of one term, or a lost acknowledged write).
    VoteNotPersisted,
    /// A follower sends a forwarded write to the leader again after the forward's answer was
    /// lost (a timeout, a reset), as steward did before jepsen caught it on 11-22: the leader
    /// may have appended the first copy, so the write can take effect twice (the simulator: a
    /// register history that is not linearizable, a compare-and-set answered as failed that
    /// took effect).
    ResendUnknown,
    /// Apply takes a worker's end report (succeeded or failed) for an earlier assignment of an
    /// operation that has been taken back and assigned again, as if the epoch check were
    /// forgotten: a worker presumed dead ends an operation its successor runs (the simulator's
    /// operations workload: a report accepted after its fence was refused, a success without
    /// an effect in its epoch).
    StaleReport,
}

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
        Bug::WallClockTime,
        Bug::StaleTermTime,
        Bug::TakeoverGrace,
        Bug::EtcdLockNoWait,
        Bug::AckBeforeFsync,
        Bug::VoteNotPersisted,
        Bug::ResendUnknown,
        Bug::StaleReport,
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
            Bug::WallClockTime => "wall-clock-time",
            Bug::StaleTermTime => "stale-term-time",
            Bug::TakeoverGrace => "takeover-grace",
            Bug::EtcdLockNoWait => "etcd-lock-no-wait",
            Bug::AckBeforeFsync => "ack-before-fsync",
            Bug::VoteNotPersisted => "vote-not-persisted",
            Bug::ResendUnknown => "resend-unknown",
            Bug::StaleReport => "stale-report",
        }
    }

    /// The bug `STEWARD_UNSAFE_BUG` names `name`, if any.
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.iter().copied().find(|b| b.name() == name)
    }
}

/// Turns `bugs` on for this process; the first call wins (a node starts once). A no-op without
/// the `unsafe-bugs` feature.
pub fn turn_on(bugs: &[Bug]) {
    #[cfg(feature = "unsafe-bugs")]
    {
        let _ = ENABLED.set(bugs.to_vec());
    }
    #[cfg(not(feature = "unsafe-bugs"))]
    {
        let _ = bugs;
    }
}

/// Turns `bugs` on for the calling thread only, over what [`turn_on`] set for the process
/// (`None`: back to the process's list). The simulator (sim/) runs a whole cluster on one thread
/// and plants a different bug in each run. A no-op without the `unsafe-bugs` feature.
pub fn turn_on_for_thread(bugs: Option<&[Bug]>) {
    #[cfg(feature = "unsafe-bugs")]
    {
        THREAD.with(|t| *t.borrow_mut() = bugs.map(<[Bug]>::to_vec));
    }
    #[cfg(not(feature = "unsafe-bugs"))]
    {
        let _ = bugs;
    }
}

/// Whether `bug` is on in this process (or, when set, on this thread). Always false without the
/// `unsafe-bugs` feature.
pub fn active(bug: Bug) -> bool {
    #[cfg(feature = "unsafe-bugs")]
    {
        THREAD
            .with(|t| t.borrow().as_ref().map(|on| on.contains(&bug)))
            .unwrap_or_else(|| ENABLED.get().is_some_and(|on| on.contains(&bug)))
    }
    #[cfg(not(feature = "unsafe-bugs"))]
    {
        let _ = bug;
        false
    }
}

#[cfg(feature = "unsafe-bugs")]
static ENABLED: std::sync::OnceLock<Vec<Bug>> = std::sync::OnceLock::new();

#[cfg(feature = "unsafe-bugs")]
thread_local! {
    static THREAD: std::cell::RefCell<Option<Vec<Bug>>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for bug in Bug::ALL {
            assert_eq!(Bug::parse(bug.name()), Some(*bug));
        }
        assert_eq!(Bug::parse("nope"), None);
    }
}
