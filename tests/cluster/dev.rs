//! `steward dev` as a newcomer uses it: the real binary (not the harness) on a free port range
//! in a temp dir, a node killed with kill -9 or stopped with SIGSTOP, then Ctrl-C (SIGINT).
//! The supervisor's lines are read from the dev process's stderr, pids from
//! `steward cluster status -o json`; every wait is on a condition with a deadline.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use steward::client::Client;
use steward::proto::v1::Consistency;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::*;

/// The banner, a leader, a failover, a restarted node catching up: each gets this long.
const STEP_WAIT: Duration = Duration::from_secs(20);
/// The dev process must be gone this soon after SIGINT, even with a node SIGSTOPped: well
/// under its 15 s grace, which only a node that never acts on SIGTERM would need.
const STOP_WAIT: Duration = Duration::from_secs(8);

/// A base port whose 3-node client, peer and metrics ports are all free now, in 20000..30000
/// (under the ephemeral range that `free_port` and the kernel hand out to the other tests),
/// a different one for each call in this process.
fn free_base_port() -> u16 {
    static NEXT_SLOT: AtomicU16 = AtomicU16::new(0);
    const SLOTS: u16 = 40;
    let first = (std::process::id() % u32::from(SLOTS)) as u16;
    for _ in 0..SLOTS {
        let slot = (first + NEXT_SLOT.fetch_add(1, Ordering::Relaxed)) % SLOTS;
        let base = 20_000 + slot * 250;
        let free = (1..=3u16)
            .flat_map(|n| [n, 100 + n, 200 + n])
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", base + p)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free port range for steward dev in 20000..30000");
}

/// A running `steward dev`, its output collected line by line. On drop it kills the dev process
/// and every node pid it was told of, so a failed test leaves nothing running.
struct Dev {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    endpoints: Vec<String>,
    /// Every node pid seen in a status: none may outlive the dev process.
    pids: Mutex<BTreeSet<u32>>,
    _dir: tempfile::TempDir,
}

impl Dev {
    fn start(extra: &[&str]) -> Dev {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = free_base_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_steward"))
            .arg("dev")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--base-port", &base.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start steward dev");
        let collect = |pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sink = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    sink.lock().expect("lines").push(line);
                }
            });
            lines
        };
        let stdout = collect(Box::new(child.stdout.take().expect("stdout")));
        let stderr = collect(Box::new(child.stderr.take().expect("stderr")));
        let endpoints = (1..=3).map(|n| format!("127.0.0.1:{}", base + n)).collect();
        Dev {
            child,
            stdout,
            stderr,
            endpoints,
            pids: Mutex::default(),
            _dir: dir,
        }
    }

    fn stdout(&self) -> Vec<String> {
        self.stdout.lock().expect("lines").clone()
    }

    fn stderr(&self) -> Vec<String> {
        self.stderr.lock().expect("lines").clone()
    }

    /// The first stderr line containing `text`, waited for.
    async fn wait_stderr(&self, text: &str) -> String {
        wait_for(
            &format!("{text:?} on steward dev's stderr"),
            STEP_WAIT,
            || async { self.stderr().into_iter().find(|l| l.contains(text)) },
        )
        .await
    }

    /// `steward cluster status -o json` through node `id`: each node's (state, pid) by id.
    async fn status(&self, id: u64) -> Vec<(u64, String, u32)> {
        let out = steward_cli(
            &self.endpoints[id as usize - 1],
            None,
            &["cluster", "status", "-o", "json"],
        )
        .await;
        let nodes: Vec<(u64, String, u32)> = parse(&out)["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                let pid = n["pid"].as_u64().expect("pid") as u32;
                (
                    n["id"].as_u64().expect("id"),
                    n["state"].as_str().expect("state").to_string(),
                    pid,
                )
            })
            .collect();
        self.pids
            .lock()
            .expect("pids")
            .extend(nodes.iter().map(|n| n.2).filter(|p| *p != 0));
        nodes
    }

    /// Waits for the banner, then for every node to be up with a leader: (leader id, pids by id).
    async fn wait_ready(&self) -> (u64, Vec<u32>) {
        wait_for("the steward dev banner", STEP_WAIT, || async {
            self.stdout()
                .iter()
                .any(|l| l.contains("leader is node"))
                .then_some(())
        })
        .await;
        let nodes = self.status(1).await;
        let leader = nodes.iter().find(|n| n.1 == "leader").expect("a leader").0;
        let pids: Vec<u32> = nodes.iter().map(|n| n.2).collect();
        for (id, pid) in (1..).zip(&pids) {
            let banner = format!("node {id}  pid {pid}  client");
            assert!(
                self.stdout().iter().any(|l| l.contains(&banner)),
                "{banner:?} in {:?}",
                self.stdout()
            );
        }
        (leader, pids)
    }

    /// SIGINT, as Ctrl-C in its terminal; asserts it exits 0 within `STOP_WAIT` leaving no node.
    /// Returns its stderr.
    async fn interrupt(mut self) -> Vec<String> {
        signal(self.child.id().expect("dev pid"), libc::SIGINT);
        let status = tokio::time::timeout(STOP_WAIT, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "steward dev still running {STOP_WAIT:?} after SIGINT; stderr: {:?}",
                    self.stderr()
                )
            })
            .expect("wait");
        assert!(
            status.success(),
            "steward dev: {status}; stderr: {:?}",
            self.stderr()
        );
        let mut pids = self.pids.lock().expect("pids").clone();
        // Also any pid it printed (banner, restarts): a node restarted unseen must be gone too.
        pids.extend(pids_in(&self.stdout()).chain(pids_in(&self.stderr())));
        let alive: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
        assert!(alive.is_empty(), "nodes left running: {alive:?}");
        self.stderr()
    }
}

/// The numbers after "pid " in `lines`.
fn pids_in(lines: &[String]) -> impl Iterator<Item = u32> + '_ {
    lines.iter().flat_map(|l| {
        l.split("pid ").skip(1).filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
    })
}

impl Drop for Dev {
    fn drop(&mut self) {
        for pid in self.pids.lock().map(|p| p.clone()).unwrap_or_default() {
            signal(pid, libc::SIGKILL);
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers. The pids are the dev process and its nodes, seen
    // alive by this test moments ago.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// Creates Director `name` through `client`, retrying until it is acknowledged.
async fn write(client: &Client, name: &str) -> Duration {
    let started = Instant::now();
    let object: serde_json::Value = serde_json::from_str(&director(name, &[])).expect("json");
    wait_for(&format!("a write of {name}"), STEP_WAIT, || async {
        // A try whose outcome was unknown may have created it: then the retry finds it there.
        match client.create(&object).await {
            Err(status) if status.code() != tonic::Code::AlreadyExists => None,
            _ => Some(()),
        }
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_restarts_a_killed_leader_and_survives_a_stopped_follower() {
    let dev = Dev::start(&[]);
    let (leader, pids) = dev.wait_ready().await;
    let old_pid = pids[leader as usize - 1];
    let client =
        Client::connect_with_timeout(&dev.endpoints, Duration::from_secs(2)).expect("client");

    signal(old_pid, libc::SIGKILL);
    let took = write(&client, "after-failover").await;
    eprintln!("steward dev: a write was acknowledged {took:?} after kill -9 of the leader");
    dev.wait_stderr(&format!(
        "node {leader} (pid {old_pid}) was killed by signal 9 (SIGKILL); restarting it in"
    ))
    .await;
    let back = dev
        .wait_stderr(&format!("node {leader} restarted (pid "))
        .await;

    // Back as a follower with a new pid, and it has the write (read on that node only).
    let pinned = client
        .with_endpoint_index(leader as usize - 1)
        .expect("endpoint");
    wait_for(
        "the old leader back as a follower with the write",
        STEP_WAIT,
        || async {
            let nodes = dev.status(1 + leader % 3).await;
            let me = nodes.iter().find(|n| n.0 == leader)?.clone();
            let read = pinned.get(
                "Director",
                "default",
                "after-failover",
                Consistency::Serializable,
            );
            (me.1 == "follower"
                && me.2 != old_pid
                && back.contains(&format!("pid {})", me.2))
                && read.await.is_ok())
            .then_some(())
        },
    )
    .await;

    // A stopped follower is neither restarted nor in the way of a write.
    let nodes = dev.status(1).await;
    let follower = nodes
        .iter()
        .find(|n| n.1 == "follower")
        .expect("a follower")
        .clone();
    let seen = dev.stderr().len();
    signal(follower.2, libc::SIGSTOP);
    write(&client, "while-stopped").await;
    wait_for(
        "the stopped follower reported unreachable",
        STEP_WAIT,
        || async {
            let nodes = dev.status(1 + follower.0 % 3).await;
            nodes
                .iter()
                .any(|n| n.0 == follower.0 && n.1 == "unreachable")
                .then_some(())
        },
    )
    .await;
    signal(follower.2, libc::SIGCONT);
    let lines = dev.stderr().split_off(seen);
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(&format!("node {} ", follower.0))),
        "the stopped follower was reported: {lines:?}"
    );

    // Ctrl-C while a node waits out its restart delay ends everything too, and it stays down.
    let seen = dev.stderr().len();
    signal(follower.2, libc::SIGKILL);
    dev.wait_stderr(&format!(
        "node {} (pid {}) was killed by signal 9 (SIGKILL); restarting it in",
        follower.0, follower.2
    ))
    .await;
    let lines = dev.interrupt().await.split_off(seen);
    assert!(
        !lines.iter().any(|l| l.contains("restarted")),
        "restarted after Ctrl-C: {lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_no_restart_leaves_a_node_down_and_ctrl_c_stops_a_stopped_one() {
    let dev = Dev::start(&["--no-restart"]);
    let (leader, pids) = dev.wait_ready().await;
    let client =
        Client::connect_with_timeout(&dev.endpoints, Duration::from_secs(2)).expect("client");
    let [down, stopped] = [1 + leader % 3, 1 + (leader + 1) % 3];

    signal(pids[down as usize - 1], libc::SIGKILL);
    dev.wait_stderr(&format!(
        "node {down} (pid {}) was killed by signal 9 (SIGKILL); --no-restart: leaving it down",
        pids[down as usize - 1]
    ))
    .await;
    write(&client, "one-down").await;
    let nodes = dev.status(leader).await;
    assert!(
        nodes.iter().any(|n| n.0 == down && n.1 == "unreachable"),
        "{nodes:?}"
    );
    let lines = dev.stderr();
    assert!(!lines.iter().any(|l| l.contains("restarted")), "{lines:?}");

    // Ctrl-C while a node is stopped (SIGSTOP) still ends everything, without the grace period.
    signal(pids[stopped as usize - 1], libc::SIGSTOP);
    dev.interrupt().await;
}
