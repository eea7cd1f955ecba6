//! Every workload of `steward-bench` for about a second against a real 3-node steward cluster on
//! 127.0.0.1 (free ports, a temp dir), through the binary with `-o json`: each must do work and
//! see no error. The same for every `--target etcd` workload, once against steward's etcd
//! endpoint (a steward cluster's client ports) and once against a real 3-node etcd where an
//! `etcd` binary is on the PATH (Debian's etcd-server, which `.ci/run` installs): without one
//! that test fails in CI and elsewhere prints a `SKIPPED:` line and passes.
//!
//! The steward binary is `$STEWARD_BIN` if set; otherwise this test runs `cargo build --bin
//! steward` in the workspace (a no-op when it is up to date) and takes it from the same target
//! directory as this test binary, so it works on a fresh clone and with `CARGO_TARGET_DIR`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use steward::config::{Config, MemberConfig, RaftConfig};
use steward::proto::v1::cluster_client::ClusterClient;
use steward::proto::v1::ClusterStatusRequest;

#[path = "../../tests/support/skip.rs"]
mod skip;
use skip::skip_or_fail;

/// A port nothing listens on now and no other call in this process was given, in 30000..32000:
/// under the kernel's ephemeral range (32768..), so no outgoing connection can take it before
/// the server binds it, and apart from tests/cluster's 10000..20000 and `steward dev`'s test's
/// 20000..30000. Ports from bind(:0) came from the ephemeral range, where a connection could
/// take one, or the same port could be handed out twice, and a node then never started (the
/// cluster tests' harness saw both).
fn free_port() -> u16 {
    const FIRST: u32 = 30_000;
    const COUNT: u32 = 2_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + (start + n) % COUNT).expect("under 32000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 30000..32000");
}

/// `target/<profile>/` of this test binary (it runs from `target/<profile>/deps/`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

fn steward_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("STEWARD_BIN") {
        return PathBuf::from(bin);
    }
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--bin",
            "steward",
            "--profile",
            &profile,
        ])
        .current_dir(&root)
        .status()
        .expect("run cargo build --bin steward");
    assert!(status.success(), "cargo build --bin steward failed");
    let bin = dir.join("steward");
    assert!(bin.is_file(), "no steward binary at {}", bin.display());
    bin
}

/// Three `steward serve` processes, killed on drop.
struct Cluster {
    _dir: tempfile::TempDir,
    children: Vec<Child>,
    client_addrs: Vec<String>,
}

impl Cluster {
    fn start(bin: &Path) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<MemberConfig> = (1..=3)
            .map(|id| MemberConfig {
                id,
                peer_addr: format!("127.0.0.1:{}", free_port()),
                client_addr: format!("127.0.0.1:{}", free_port()),
            })
            .collect();
        let raft = RaftConfig {
            heartbeat_interval_ms: 50,
            election_timeout_ms_min: 900,
            election_timeout_ms_max: 1200,
            ..RaftConfig::default()
        };
        let mut children = vec![];
        for m in &members {
            let config = Config {
                id: m.id,
                client_addr: m.client_addr.clone(),
                peer_addr: m.peer_addr.clone(),
                data_dir: dir.path().join(format!("node{}", m.id)),
                initial_members: members.clone(),
                raft: raft.clone(),
                limits: Default::default(),
                locks: Default::default(),
                operations: Default::default(),
                status: Default::default(),
                pools: Default::default(),
                time: Default::default(),
                etcd: Default::default(),
                console: Default::default(),
                tls: steward::config::TlsConfig::plaintext(),
                metrics_addr: None,
            };
            let path = dir.path().join(format!("node{}.toml", m.id));
            std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("write config");
            let log = std::fs::File::create(dir.path().join(format!("node{}.log", m.id)))
                .expect("log file");
            let child = Command::new(bin)
                .args(["serve", "--config"])
                .arg(&path)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn steward");
            children.push(child);
        }
        Cluster {
            _dir: dir,
            children,
            client_addrs: members.into_iter().map(|m| m.client_addr).collect(),
        }
    }

    /// Waits until every node names the same leader.
    async fn wait_leader(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut leaders = vec![];
            for (i, addr) in self.client_addrs.iter().enumerate() {
                let status = async {
                    let mut c = ClusterClient::connect(format!("http://{addr}"))
                        .await
                        .ok()?;
                    let s = c.status(ClusterStatusRequest {}).await.ok()?.into_inner();
                    s.nodes
                        .iter()
                        .find(|n| n.id == i as u64 + 1)
                        .map(|n| n.leader_id)
                };
                leaders.push(status.await.unwrap_or(0));
            }
            if leaders[0] != 0 && leaders.iter().all(|l| *l == leaders[0]) {
                return;
            }
            assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs one workload for a second with 4 clients and checks that it did work without errors.
fn run_clean(target: &str, workload: &str, endpoints: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_steward-bench"))
        .args([workload, "--target", target, "--endpoints", endpoints])
        .args([
            "--clients",
            "4",
            "--duration",
            "1s",
            "--value-size",
            "64",
            "-o",
            "json",
        ])
        .output()
        .expect("run steward-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{target} {workload}: {stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{workload}: one JSON object expected ({e}): {stdout}"));
    eprintln!("{target} {workload}: {stdout}");
    assert_eq!(report["workload"], workload);
    assert_eq!(report["target"], target);
    assert_eq!(report["clients"], 4);
    assert_eq!(report["conns"], 4);
    assert!(report["ops"].as_u64().unwrap() > 0, "{workload}: {stdout}");
    assert_eq!(report["errors_total"], 0, "{workload}: {stdout}");
    assert!(report["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    report
}

const REQUEST_WORKLOADS: [&str; 7] = [
    "create",
    "update",
    "get",
    "get-serializable",
    "list",
    "lock",
    "lock-contended",
];

/// What `--target etcd` runs: the request/response workloads of both targets, the etcd-only
/// ones, and `watch`.
const ETCD_WORKLOADS: [&str; 10] = [
    "create",
    "update",
    "txn",
    "get",
    "get-serializable",
    "list",
    "lock",
    "lock-contended",
    "lease-keep-alive",
    "watch",
];

/// A `watch` report: every watcher received every acknowledged write.
fn assert_every_write_delivered(report: &serde_json::Value) {
    let writes = report["writes"].as_u64().unwrap();
    assert!(writes > 0, "{report}");
    assert_eq!(report["ops"].as_u64().unwrap(), 4 * writes, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_runs_without_errors() {
    let bin = steward_bin();
    let cluster = Cluster::start(&bin);
    cluster.wait_leader().await;
    let endpoints = cluster.client_addrs.join(",");
    for workload in REQUEST_WORKLOADS.iter().chain(&["watch", "dispatch"]) {
        let workload = *workload;
        let report = run_clean("steward", workload, &endpoints);
        let stdout = report.to_string();
        if workload == "watch" {
            assert_every_write_delivered(&report);
        }
        if workload == "dispatch" {
            // Every acknowledged submit reached a worker, once.
            let submitted = report["writes"].as_u64().unwrap();
            assert!(submitted > 0);
            assert_eq!(report["ops"].as_u64().unwrap(), submitted, "{stdout}");
        }
    }

    // A dead endpoint fails the run with one line and exit 1.
    let dead = format!("127.0.0.1:{}", free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_steward-bench"))
        .args(["get", "--endpoints", &dead, "--duration", "1s"])
        .output()
        .expect("run steward-bench");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: connect to http://"), "{stderr}");
}

/// The etcd client of `steward-bench` at steward's client ports: what `bench/compare-etcd.sh
/// --api etcd` drives steward with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_etcd_workload_runs_against_stewards_etcd_endpoint() {
    let bin = steward_bin();
    let cluster = Cluster::start(&bin);
    cluster.wait_leader().await;
    let endpoints = cluster.client_addrs.join(",");
    for workload in ETCD_WORKLOADS {
        let report = run_clean("etcd", workload, &endpoints);
        if workload == "watch" {
            assert_every_write_delivered(&report);
        }
    }
}

/// Three `etcd` processes (fsyncing, as by default), killed on drop.
struct Etcd {
    dir: tempfile::TempDir,
    children: Vec<Child>,
    client_addrs: Vec<String>,
}

impl Etcd {
    fn start(bin: &Path) -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let peers: Vec<String> = (0..3)
            .map(|_| format!("http://127.0.0.1:{}", free_port()))
            .collect();
        let client_addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let cluster: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{i}={p}"))
            .collect();
        let children = (0..3)
            .map(|i| {
                let client = format!("http://{}", client_addrs[i]);
                let log =
                    std::fs::File::create(dir.path().join(format!("e{i}.log"))).expect("log file");
                Command::new(bin)
                    .arg(format!("--name=e{i}"))
                    .arg(format!(
                        "--data-dir={}",
                        dir.path().join(format!("e{i}")).display()
                    ))
                    .arg(format!("--listen-client-urls={client}"))
                    .arg(format!("--advertise-client-urls={client}"))
                    .arg(format!("--listen-peer-urls={}", peers[i]))
                    .arg(format!("--initial-advertise-peer-urls={}", peers[i]))
                    .arg(format!("--initial-cluster={}", cluster.join(",")))
                    .arg("--initial-cluster-state=new")
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawn etcd")
            })
            .collect();
        Etcd {
            dir,
            children,
            client_addrs,
        }
    }

    /// Waits until every member serves a linearizable read (so a leader is elected). `Err` with
    /// the members' log tails when one exits (a port taken between `free_port` and etcd's bind,
    /// by a process of the other test running beside this one) or 30 s pass.
    async fn wait_ready(&mut self) -> Result<(), String> {
        use steward_bench::etcd_proto::etcdserverpb::kv_client::KvClient;
        use steward_bench::etcd_proto::etcdserverpb::RangeRequest;
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..self.client_addrs.len() {
            let addr = self.client_addrs[i].clone();
            loop {
                let ready = async {
                    let mut kv = KvClient::connect(format!("http://{addr}")).await.ok()?;
                    let req = RangeRequest {
                        key: b"ready".to_vec().into(),
                        ..Default::default()
                    };
                    kv.range(req).await.ok()
                };
                if ready.await.is_some() {
                    break;
                }
                let exited = self
                    .children
                    .iter_mut()
                    .any(|c| !matches!(c.try_wait(), Ok(None)));
                if exited || Instant::now() >= deadline {
                    let why = if exited {
                        "a member exited"
                    } else {
                        "not ready in 30 s"
                    };
                    return Err(format!("etcd at {addr}: {why}\n{}", self.log_tails()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// The last lines of each member's log.
    fn log_tails(&self) -> String {
        (0..self.children.len())
            .map(|i| {
                let log = std::fs::read_to_string(self.dir.path().join(format!("e{i}.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                format!(
                    "--- e{i}.log\n{}",
                    lines[lines.len().saturating_sub(5)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A ready cluster, started again on fresh ports (up to 3 times) if a start fails.
    async fn start_ready(bin: &Path) -> Etcd {
        let mut failures = Vec::new();
        for _ in 0..3 {
            let mut etcd = Etcd::start(bin);
            match etcd.wait_ready().await {
                Ok(()) => return etcd,
                Err(e) => failures.push(e),
            }
        }
        panic!("etcd did not start in 3 tries:\n{}", failures.join("\n"));
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `etcd` on the PATH, if any.
fn etcd_bin() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("etcd"))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_etcd_workload_runs_without_errors() {
    let Some(bin) = etcd_bin() else {
        skip_or_fail(
            "every_etcd_workload_runs_without_errors",
            "no etcd on the PATH (apt-get install etcd-server)",
        );
        return;
    };
    let etcd = Etcd::start_ready(&bin).await;
    let endpoints = etcd.client_addrs.join(",");
    for workload in ETCD_WORKLOADS {
        let report = run_clean("etcd", workload, &endpoints);
        if workload == "watch" {
            assert_every_write_delivered(&report);
        }
    }
}
