//! Starting node processes: each node's config file, and the one long-lived spawner thread that
//! forks every node with `PR_SET_PDEATHSIG`; signals to a node, and marks in its log.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use steward::config::{Config, Limits, MemberConfig};

use super::{ClusterSpec, CLIENT_PORT, PEER_PORT, SIGNAL_WAIT};

/// Writes the config of member `raft_id` in slot `slot` at address `ip` (validated first, so a
/// bad spec fails here with the field named). Its data dir is `node<slot>` for the slot's first
/// member and `node<slot>-id<raft_id>` for a fresh one, so a replaced member's data stays for
/// reading after the run. `initial_members` is empty for a member that joins a running cluster.
pub(super) fn write_config(
    spec: &ClusterSpec,
    slot: u64,
    raft_id: u64,
    ip: &str,
    initial_members: &[MemberConfig],
    path: &Path,
) -> anyhow::Result<()> {
    let data_dir = match slot == raft_id {
        true => format!("node{slot}"),
        false => format!("node{slot}-id{raft_id}"),
    };
    let config = Config {
        id: raft_id,
        client_addr: format!("{ip}:{CLIENT_PORT}"),
        peer_addr: format!("{ip}:{PEER_PORT}"),
        data_dir: spec.work_dir.join(data_dir),
        initial_members: initial_members.to_vec(),
        raft: spec.raft.clone(),
        limits: Limits::default(),
        locks: spec.locks.clone(),
        operations: Default::default(),
        status: Default::default(),
        pools: Default::default(),
        time: Default::default(),
        etcd: Default::default(),
        console: Default::default(),
        tls: steward::config::TlsConfig::plaintext(),
        metrics_addr: None,
    };
    config.validate()?;
    let title = format!(
        "Written by the jepsen harness for node {slot} (member id {raft_id}); rewritten on every run."
    );
    let text = steward::cli::node_config::render(&config, &title)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

pub(super) fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) on a child we have not reaped (so the PID is still ours); no memory
    // is shared with the call.
    unsafe { libc::kill(pid, sig) };
}

/// Waits (up to `SIGNAL_WAIT`) until /proc says process `pid` is stopped (`T`), or is not.
/// A process that is gone counts as done either way.
pub(super) fn wait_until_stopped(pid: u32, stopped: bool) {
    let deadline = std::time::Instant::now() + SIGNAL_WAIT;
    while std::time::Instant::now() < deadline {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        // "pid (comm) S ...": the state follows the last ')'.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if matches!(state, Some('T') | Some('t')) == stopped {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    tracing::warn!(
        pid,
        stopped,
        "process did not reach the signalled state in time"
    );
}

/// A "==== jepsen: ... ====" line in a node's log, so a reader sees what the harness did.
pub(super) fn log_marker(path: &Path, what: &str) {
    let line = format!(
        "==== jepsen: {what} at {} ====\n",
        humantime::format_rfc3339_millis(std::time::SystemTime::now())
    );
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// What the spawner thread starts: `ip netns exec <ns> <bin> serve --config <config>`.
pub(super) struct SpawnRequest {
    pub(super) ns: String,
    pub(super) bin: PathBuf,
    pub(super) config: PathBuf,
    pub(super) log: PathBuf,
    pub(super) cwd: PathBuf,
    /// Extra environment (libfaketime).
    pub(super) env: Vec<(String, String)>,
}

pub(super) type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// Starts a node from the spawner thread, which lives as long as the process, so the
/// PR_SET_PDEATHSIG set in the child fires exactly when the harness process dies.
pub(super) fn spawn_from_spawner(request: SpawnRequest) -> anyhow::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(SpawnRequest, SpawnReply)>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(SpawnRequest, SpawnReply)>();
        std::thread::Builder::new()
            .name("jepsen-spawner".into())
            .spawn(move || {
                for (request, reply) in rx {
                    let _ = reply.send(spawn_now(&request));
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((request, reply_tx))
        .map_err(|_| anyhow::anyhow!("spawner thread is gone"))?;
    Ok(reply_rx.recv().context("spawner thread is gone")??)
}

/// `ip netns exec` enters the namespace and execs steward in the same process (no fork), so
/// the PID we get is the node's.
pub(super) fn spawn_now(request: &SpawnRequest) -> std::io::Result<Child> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&request.log)?;
    let log_err = log.try_clone()?;
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", &request.ns])
        .arg(&request.bin)
        .arg("serve")
        .arg("--config")
        .arg(&request.config)
        .current_dir(&request.cwd)
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: a terminal's Ctrl-C reaches only the harness, which then stops
        // the nodes itself (and records that it did).
        .process_group(0);
    let harness = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls prctl(2) and getppid(2),
    // both async-signal-safe, and compares a copied integer; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The harness died between fork and prctl: do not start an orphan.
            if u32::try_from(libc::getppid()).ok() != Some(harness) {
                return Err(std::io::Error::other("harness exited during spawn"));
            }
            Ok(())
        });
    }
    command.spawn()
}
