//! A node process watched for its whole life: one thread per process owns its `Child`, waits for
//! it to end, and records every exit (when, how, the tail of its log, and whether the harness
//! asked for it) in the cluster's exit record. Nothing else reaps node processes, so no later
//! kill, restart or replacement of the slot can throw an exit status away.
//!
//! Who calls it: `cluster::NetCluster` only (start, signal, kill, stop); the runner reads the
//! record through `NetCluster::exits` and judges it with `life`.
//!
//! An exit counts as asked for only if the harness asked *before* the process died and the
//! process ended the way the request ends it (a SIGKILL request: killed by SIGKILL). Signals are
//! sent under the same lock the watcher holds while it reaps, after checking (`waitid` with
//! `WNOWAIT`, which does not reap) that the process has not already exited; so a request
//! cannot claim a crash that came first, and a PID is never signalled after it was reaped (when
//! the kernel may give it to another process).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long `kill_and_reap` waits for the watcher to reap a SIGKILLed process (a process in
/// uninterruptible sleep dies only when its I/O returns).
const REAP_WAIT: Duration = Duration::from_secs(10);

/// What the harness asked of a process, which decides which ends are the ones it asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// SIGKILL (the kill nemesis, the membership nemesis stopping a removed member, `Drop`).
    Kill,
    /// SIGTERM, then SIGKILL after a grace period (the end of a run).
    Stop,
}

impl Ask {
    /// Whether `status` is how this request ends a process. A node asked to stop may exit 0,
    /// die of the SIGTERM (before steward's handler is installed) or of the SIGKILL that
    /// follows the grace period; anything else (exit 1, SIGABRT) is a failure of its own.
    pub fn expects(self, status: ExitStatus) -> bool {
        match self {
            Ask::Kill => status.signal() == Some(libc::SIGKILL),
            Ask::Stop => {
                status.code() == Some(0)
                    || matches!(status.signal(), Some(libc::SIGTERM | libc::SIGKILL))
            }
        }
    }

    /// A second request on top of `self`: a stop accepts everything a kill does, so it stays.
    fn and(self, later: Ask) -> Ask {
        match (self, later) {
            (Ask::Stop, _) | (_, Ask::Stop) => Ask::Stop,
            (Ask::Kill, Ask::Kill) => Ask::Kill,
        }
    }
}

/// One process exit, as its watcher saw it.
#[derive(Clone, Debug)]
pub struct Exit {
    /// The slot (node number) it ran in.
    pub slot: u64,
    /// The Raft id of the member it ran.
    pub raft_id: u64,
    pub pid: u32,
    /// When the watcher saw it end.
    pub at: Instant,
    /// How it ended, e.g. "signal: 6 (SIGABRT) (core dumped)" or "exit status: 1".
    pub how: String,
    /// What the harness had asked for, when the exit is what it asked for; `None`: the process
    /// ended on its own (a crash, a panic, a fatal error), which is a finding.
    pub asked: Option<Ask>,
    /// The last lines of the slot's log when it ended.
    pub log_tail: String,
}

/// Every exit of every node process of a cluster, in the order they happened.
pub type ExitRecord = Arc<Mutex<Vec<Exit>>>;

/// Who ran where, for the record.
#[derive(Clone, Debug)]
pub struct Identity {
    pub slot: u64,
    pub raft_id: u64,
    pub log_path: PathBuf,
}

#[derive(Debug, Default)]
struct Life {
    exited: bool,
    asked: Option<Ask>,
}

/// A running (or ended) node process and its watcher.
#[derive(Debug)]
pub struct Watched {
    pid: u32,
    life: Arc<(Mutex<Life>, Condvar)>,
}

impl Watched {
    /// Hands `child` to a watcher thread, which records its exit in `record`, with
    /// `tail_lines` lines of its log.
    pub fn start(
        child: Child,
        who: Identity,
        record: ExitRecord,
        tail_lines: usize,
    ) -> std::io::Result<Watched> {
        let pid = child.id();
        let life = Arc::new((Mutex::new(Life::default()), Condvar::new()));
        let theirs = life.clone();
        std::thread::Builder::new()
            .name(format!("jepsen-watch-{}", who.slot))
            .spawn(move || watch(child, who, &theirs, &record, tail_lines))?;
        Ok(Watched { pid, life })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process has not been seen to end (a zombie not yet reaped counts as running
    /// for a moment; `signal` checks for that itself).
    pub fn is_running(&self) -> bool {
        !self.lock().exited
    }

    /// Sends `sig`, recording `ask` first when the signal is meant to end the process. Sends
    /// nothing (and returns false) when the process has already ended, so a request made after
    /// a crash does not make that crash look asked for.
    pub fn signal(&self, sig: libc::c_int, ask: Option<Ask>) -> bool {
        let mut life = self.lock();
        if life.exited || has_exited(self.pid) {
            return false;
        }
        if let Some(ask) = ask {
            life.asked = Some(life.asked.map_or(ask, |a| a.and(ask)));
        }
        if let Ok(pid) = libc::pid_t::try_from(self.pid) {
            // SAFETY: kill(2) on our child, which is not reaped: reaping happens only under
            // this lock, which we hold; no memory is shared with the call.
            unsafe { libc::kill(pid, sig) };
        }
        true
    }

    /// SIGKILL (as `ask`) and wait until the watcher has reaped the process. Returns whether it
    /// was still running when asked.
    pub fn kill_and_reap(&self, ask: Ask) -> bool {
        let sent = self.signal(libc::SIGKILL, Some(ask));
        let (_, reaped) = &*self.life;
        let guard = self.lock();
        let waited = reaped.wait_timeout_while(guard, REAP_WAIT, |life| !life.exited);
        if waited.is_ok_and(|(_, timeout)| timeout.timed_out()) {
            tracing::warn!(pid = self.pid, "a SIGKILLed node was not reaped in time");
        }
        sent
    }

    fn lock(&self) -> MutexGuard<'_, Life> {
        self.life.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The watcher: wait for the end without reaping, take the log tail while nothing can be
/// appended by the process any more, then reap and record under the lock `signal` takes.
fn watch(
    mut child: Child,
    who: Identity,
    life: &(Mutex<Life>, Condvar),
    record: &ExitRecord,
    tail_lines: usize,
) {
    let pid = child.id();
    wait_exited(pid);
    let log_tail = log_tail(&who.log_path, tail_lines);
    let (lock, reaped) = life;
    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
    let (how, asked) = match child.wait() {
        Ok(status) => (
            status.to_string(),
            state.asked.filter(|ask| ask.expects(status)),
        ),
        // Cannot happen for our own unreaped child; if it does, nobody can say it was asked for.
        Err(e) => (format!("unknown (wait failed: {e})"), None),
    };
    record.lock().unwrap_or_else(|p| p.into_inner()).push(Exit {
        slot: who.slot,
        raft_id: who.raft_id,
        pid,
        at: Instant::now(),
        how,
        asked,
        log_tail,
    });
    state.exited = true;
    reaped.notify_all();
}

/// Blocks until process `pid` (our child) has ended, leaving it unreaped.
fn wait_exited(pid: u32) {
    let id: libc::id_t = pid;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value; waitid writes into it and we read
        // nothing back.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) with a pointer to a live, writable siginfo_t.
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Whether process `pid` (our child) has ended but is not reaped yet. Never blocks.
fn has_exited(pid: u32) -> bool {
    let id: libc::id_t = pid;
    // SAFETY: as in `wait_exited`.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) with a pointer to a live, writable siginfo_t; WNOHANG returns at once.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        )
    };
    // With WNOHANG, si_pid stays 0 while the process runs.
    // SAFETY: waitid returned 0, so `info` is initialised (zeroed or filled in).
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// The last `lines` lines of the log at `path`, indented, for a report.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n  ");
    format!("last lines of {}:\n  {tail}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn record() -> ExitRecord {
        Arc::new(Mutex::new(Vec::new()))
    }

    fn who(dir: &Path) -> Identity {
        let log_path = dir.join("node1.log");
        std::fs::write(&log_path, "line one\nline two\n").expect("log");
        Identity {
            slot: 1,
            raft_id: 1,
            log_path,
        }
    }

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().expect("sleep")
    }

    fn wait_for_exit(rec: &ExitRecord) -> Exit {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = rec.lock().expect("record").first().cloned() {
                return e;
            }
            assert!(Instant::now() < deadline, "no exit recorded");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("jepsen-process-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn a_kill_asked_for_is_recorded_as_asked() {
        let dir = tempdir("asked");
        let rec = record();
        let w = Watched::start(sleeper(), who(&dir), rec.clone(), 6).expect("watch");
        assert!(w.is_running());
        assert!(w.kill_and_reap(Ask::Kill));
        assert!(!w.is_running());
        let exit = wait_for_exit(&rec);
        assert_eq!(exit.asked, Some(Ask::Kill));
        assert!(exit.how.contains("SIGKILL"), "{}", exit.how);
        assert!(exit.log_tail.contains("line two"), "{}", exit.log_tail);
    }

    #[test]
    fn a_death_before_the_request_is_not_asked_for_even_with_the_same_signal() {
        let dir = tempdir("unasked");
        let rec = record();
        let child = sleeper();
        let pid = libc::pid_t::try_from(child.id()).expect("pid");
        let w = Watched::start(child, who(&dir), rec.clone(), 6).expect("watch");
        // Killed behind the harness's back, with the very signal a Kill would send.
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let exit = wait_for_exit(&rec);
        assert!(!w.kill_and_reap(Ask::Kill), "nothing left to kill");
        assert_eq!(exit.asked, None, "the crash came first: {exit:?}");
        assert_eq!(rec.lock().expect("record").len(), 1, "one exit, once");
    }

    #[test]
    fn a_stop_that_ends_in_another_way_is_not_what_was_asked() {
        let dir = tempdir("abort");
        let rec = record();
        // A process that dies of SIGABRT after being asked to stop (as a panicking shutdown).
        let ready = dir.join("trap-ready");
        let _ = std::fs::remove_file(&ready);
        let script = format!(
            "trap 'kill -ABRT $$' TERM; touch {}; while :; do sleep 0.05; done",
            ready.display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .spawn()
            .expect("sh");
        let w = Watched::start(child, who(&dir), rec.clone(), 6).expect("watch");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "sh never installed its trap");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(w.signal(libc::SIGTERM, Some(Ask::Stop)));
        let exit = wait_for_exit(&rec);
        assert!(exit.how.contains("SIGABRT"), "{}", exit.how);
        assert_eq!(exit.asked, None);
        assert!(Ask::Stop.expects(ExitStatus::from_raw(0)), "exit 0");
        assert!(Ask::Stop.expects(ExitStatus::from_raw(libc::SIGKILL)));
        assert!(!Ask::Stop.expects(ExitStatus::from_raw(1 << 8)), "exit 1");
        assert!(!Ask::Kill.expects(ExitStatus::from_raw(libc::SIGABRT)));
        assert_eq!(Ask::Stop.and(Ask::Kill), Ask::Stop);
    }
}
