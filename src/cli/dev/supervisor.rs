//! The supervisor of `steward dev` once its cluster is ready: it watches every child node until
//! Ctrl-C / SIGTERM, and a node that ends without being asked to (kill -9, crash, panic) is
//! reported in one line and restarted on the same config and data dir after a backoff, or left
//! down with `--no-restart`; the other nodes never notice beyond losing a peer. Called only by
//! `dev::run` (mod.rs), which starts the children and calls `stop_all` on every way out.
//!
//! A stopped child (SIGSTOP) is not an exit: `wait` does not return for it, so it is neither
//! restarted nor waited on; `stop_all` sends it SIGCONT after SIGTERM so that it can act on it.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

/// How long a node gets to shut down after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// A child node of `steward dev`, running or down.
pub(super) struct DevNode {
    pub id: u64,
    pub client_addr: String,
    pub metrics_addr: Option<String>,
    /// Where its web console is, as a browser opens it.
    pub console_url: Option<String>,
    pub log_path: PathBuf,
    /// `None` while the node is down: waiting out its restart delay, or left down.
    pub child: Option<Child>,
    /// The pid of the current (or, while down, the last) process: every line about the node
    /// names it so a user can tell one incarnation from the next.
    pub pid: u32,
    /// When the current process was started; its uptime at exit decides the next delay.
    pub started_at: Instant,
    /// Set while the node waits out a restart delay.
    pub restart_at: Option<Instant>,
    /// The delay before the latest restart, `None` before the first: repeated crashes double it.
    pub last_delay: Option<Duration>,
}

/// When a crashed node is started again. Every delay is at least `first_delay`, so a node that
/// dies at once is restarted at most once per `first_delay`, and after a few quick deaths once
/// per `max_delay`: there is no tight restart loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RestartPolicy {
    /// The delay after a node's first crash, or after one that had stayed up `stable_after`.
    pub first_delay: Duration,
    /// The cap on the doubling delay (`--restart-delay-max-ms`).
    pub max_delay: Duration,
    /// A node up this long is healthy again: its next crash starts over at `first_delay`.
    pub stable_after: Duration,
}

impl RestartPolicy {
    /// The delay before restarting a node that ended after `uptime`, its previous restart delay
    /// being `last` (`None`: it never crashed before).
    pub fn next_delay(&self, last: Option<Duration>, uptime: Duration) -> Duration {
        match last {
            Some(last) if uptime < self.stable_after => last
                .saturating_mul(2)
                .clamp(self.first_delay, self.max_delay.max(self.first_delay)),
            _ => self.first_delay,
        }
    }
}

/// Watches the nodes until `shutdown` resolves; restarts (`policy` given) or leaves down the
/// nodes that exit. `respawn` starts node `id` again and returns its child.
pub(super) async fn supervise(
    nodes: &mut [DevNode],
    policy: Option<RestartPolicy>,
    respawn: &dyn Fn(u64) -> anyhow::Result<Child>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let due = nodes.iter().filter_map(|n| n.restart_at).min();
        tokio::select! {
            _ = &mut shutdown => return,
            (index, status) = next_exit(nodes) => {
                let node = &mut nodes[index];
                node.child = None;
                report_exit(node, describe_exit(&status), policy);
            }
            _ = sleep_until(due) => {
                for node in nodes.iter_mut() {
                    if node.restart_at.is_some_and(|at| at <= Instant::now()) {
                        restart(node, policy, respawn);
                    }
                }
            }
        }
    }
}

/// Resolves when the first running child exits: its index and exit status. Cancel-safe
/// (`Child::wait` is), so the select in `supervise` may drop it.
async fn next_exit(nodes: &mut [DevNode]) -> (usize, std::io::Result<ExitStatus>) {
    let waits: Vec<_> = nodes
        .iter_mut()
        .enumerate()
        .filter_map(|(i, n)| {
            let child = n.child.as_mut()?;
            Some(Box::pin(async move { (i, child.wait().await) }))
        })
        .collect();
    if waits.is_empty() {
        // select_all panics on nothing; with no child running there is nothing to wait for.
        return std::future::pending().await;
    }
    futures::future::select_all(waits).await.0
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The one line about an exit nobody asked for, and the restart it schedules.
fn report_exit(node: &mut DevNode, how: String, policy: Option<RestartPolicy>) {
    let (id, pid, log) = (node.id, node.pid, node.log_path.display());
    let Some(policy) = policy else {
        eprintln!("steward dev: node {id} (pid {pid}) {how}; --no-restart: leaving it down (its log: {log})");
        return;
    };
    let delay = policy.next_delay(node.last_delay, node.started_at.elapsed());
    node.last_delay = Some(delay);
    node.restart_at = Some(Instant::now() + delay);
    eprintln!(
        "steward dev: node {id} (pid {pid}) {how}; restarting it in {} (its log: {log})",
        humantime::format_duration(delay)
    );
}

/// Starts a node whose delay is over; one that cannot be started counts as a crash at once.
fn restart(
    node: &mut DevNode,
    policy: Option<RestartPolicy>,
    respawn: &dyn Fn(u64) -> anyhow::Result<Child>,
) {
    node.restart_at = None;
    node.started_at = Instant::now();
    match respawn(node.id) {
        Ok(child) => {
            node.pid = child.id().unwrap_or(0);
            node.child = Some(child);
            eprintln!(
                "steward dev: node {} restarted (pid {}); it rejoins and catches up",
                node.id, node.pid
            );
        }
        Err(err) => report_exit(node, format!("could not be restarted ({err:#})"), policy),
    }
}

/// How a child ended, for the line that reports it: "was killed by signal 9 (SIGKILL)".
pub(super) fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => describe_status(status.code(), status.signal(), status.core_dumped()),
        Err(err) => format!("ended, but its exit status is unknown ({err})"),
    }
}

fn describe_status(code: Option<i32>, signal: Option<i32>, core_dumped: bool) -> String {
    match (code, signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!(
            "was killed by signal {signal}{}{}",
            signal_name(signal).map_or(String::new(), |n| format!(" ({n})")),
            if core_dumped { ", core dumped" } else { "" }
        ),
        (None, None) => "ended for an unknown reason".to_string(),
    }
}

fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// SIGTERM (then SIGCONT, for a node stopped with SIGSTOP) to every running child, then waits
/// for each; one that outlives `STOP_GRACE` is killed.
pub(super) async fn stop_all(nodes: &mut [DevNode]) {
    for node in nodes.iter_mut() {
        let Some(child) = node.child.as_mut() else {
            continue;
        };
        if matches!(child.try_wait(), Ok(None)) {
            if let Some(pid) = child.id() {
                signal(pid, libc::SIGTERM);
                signal(pid, libc::SIGCONT);
            }
        }
    }
    for node in nodes.iter_mut() {
        let Some(child) = node.child.as_mut() else {
            continue;
        };
        if tokio::time::timeout(STOP_GRACE, child.wait())
            .await
            .is_err()
        {
            eprintln!(
                "node {} did not stop within {}; killing it",
                node.id,
                humantime::format_duration(STOP_GRACE)
            );
            let _ = child.kill().await;
        }
    }
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours. `pid` is a child we
    // have not reaped yet (its `Child` is held and `try_wait` just said it is running), so it
    // cannot name a recycled process.
    unsafe {
        libc::kill(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RestartPolicy = RestartPolicy {
        first_delay: Duration::from_millis(500),
        max_delay: Duration::from_secs(30),
        stable_after: Duration::from_secs(60),
    };

    #[test]
    fn quick_crashes_double_the_delay_up_to_the_cap() {
        let mut last = None;
        let mut delays_ms = Vec::new();
        for _ in 0..10 {
            let delay = POLICY.next_delay(last, Duration::ZERO);
            delays_ms.push(delay.as_millis());
            last = Some(delay);
        }
        assert_eq!(
            delays_ms,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000]
        );
    }

    #[test]
    fn a_node_that_stayed_up_starts_over_at_the_first_delay() {
        let capped = Some(POLICY.max_delay);
        assert_eq!(
            POLICY.next_delay(capped, POLICY.stable_after),
            POLICY.first_delay
        );
        assert_eq!(
            POLICY.next_delay(capped, POLICY.stable_after - Duration::from_millis(1)),
            POLICY.max_delay
        );
        assert_eq!(POLICY.next_delay(None, Duration::ZERO), POLICY.first_delay);
    }

    #[test]
    fn no_delay_is_ever_under_the_first_nor_over_the_cap() {
        // Whatever the history, including a cap below the first delay: no tight loop.
        let odd = RestartPolicy {
            max_delay: Duration::from_millis(100),
            ..POLICY
        };
        for policy in [POLICY, odd] {
            for last_ms in [0, 1, 499, 500, 20_000, 30_000, u64::MAX] {
                for uptime_s in [0, 1, 59, 60, 3600] {
                    let delay = policy.next_delay(
                        Some(Duration::from_millis(last_ms)),
                        Duration::from_secs(uptime_s),
                    );
                    assert!(
                        delay >= policy.first_delay,
                        "{policy:?} {last_ms} {uptime_s}"
                    );
                    assert!(delay <= policy.max_delay.max(policy.first_delay));
                }
            }
        }
    }

    #[test]
    fn exits_are_described_with_their_signal() {
        assert_eq!(
            describe_status(None, Some(libc::SIGKILL), false),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            describe_status(None, Some(libc::SIGSEGV), true),
            "was killed by signal 11 (SIGSEGV), core dumped"
        );
        assert_eq!(
            describe_status(None, Some(64), false),
            "was killed by signal 64"
        );
        assert_eq!(
            describe_status(Some(101), None, false),
            "exited with code 101"
        );
    }
}
