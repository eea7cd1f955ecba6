//! `steward dev`: a local loopback cluster, one child process per node, until Ctrl-C.
//!
//! Writes `<data-dir>/node<N>.toml` (rewritten identically on every run, so a second run resumes
//! with the data already there), starts `steward serve --config ...` for each node with its
//! output in `<data-dir>/node<N>.log`, waits for a leader, prints how to use the cluster (with
//! each node's pid), then supervises the nodes (supervisor.rs) and on Ctrl-C / SIGTERM stops
//! every child with SIGTERM and waits for it.
//!
//! Before the cluster is first ready, a child that exits is a start-up problem (a port taken, a
//! bad config, a data dir of another cluster) that a restart would only repeat: everything stops
//! with an error naming the node and showing the end of its log. Once it is ready, a node that
//! dies is one node failing, which is what a user of a Raft cluster wants to see survived: the
//! others keep running and the supervisor restarts it (or, with `--no-restart`, leaves it down).

mod supervisor;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::node_config::{self, BASE_PORT_MAX, LOOPBACK_NODES_MAX};
use super::GlobalOpts;
use crate::client::Client;
use crate::tls::{CertFiles, ClientTls, GeneratedPki};
use supervisor::{DevNode, RestartPolicy};

/// How long the nodes get to elect a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How often the leader wait asks the cluster.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Raft timing of the dev cluster: loopback round trips take microseconds, so it can notice a
/// dead leader sooner than a cluster across machines (the defaults: etcd's 100 ms heartbeat,
/// elections 1.5-2 s after a leader's last heartbeat). The others start an election 0.9-1.2 s
/// after the dead leader's last heartbeat (its lease of half the max, then the random rest), and
/// a write lands on the new one soon after. The random rest, at least 300 ms, holds a heartbeat
/// six times: room for a loaded machine before a follower calls an election.
const DEV_HEARTBEAT_INTERVAL_MS: u64 = 50;
const DEV_ELECTION_TIMEOUT_MIN_MS: u64 = 900;
const DEV_ELECTION_TIMEOUT_MAX_MS: u64 = 1200;
/// The first restart delay: more than the longest election timeout plus a vote, so a killed
/// leader comes back after the others elected a new one and rejoins as a follower (back sooner,
/// openraft resumes its leadership of the old term and there is no failover to see).
const DEFAULT_RESTART_DELAY_MS: u64 = 2_000;
// Checked when compiling: a killed leader is restarted after the others elected one (the
// longest election timeout, then a margin of half of it for the vote), and the random rest of
// the shortest election timeout after the lease holds the heartbeat six times.
const _: () = assert!(2 * DEFAULT_RESTART_DELAY_MS >= 3 * DEV_ELECTION_TIMEOUT_MAX_MS);
const _: () = assert!(
    DEV_ELECTION_TIMEOUT_MIN_MS - DEV_ELECTION_TIMEOUT_MAX_MS / 2 >= 6 * DEV_HEARTBEAT_INTERVAL_MS
);
/// A restarted node that stays up this long is healthy again: its next crash is restarted after
/// the first delay, not after a doubled one.
const RESTART_STABLE_AFTER: Duration = Duration::from_secs(60);
/// Log lines shown when a node dies early.
const LOG_TAIL_LINES: usize = 8;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Number of nodes (1 to 9; odd numbers make sense).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=LOOPBACK_NODES_MAX))]
    pub nodes: u64,
    /// Where node configs, data and logs go; an existing one is resumed.
    #[arg(long, default_value = "./steward-data")]
    pub data_dir: PathBuf,
    /// Serve over mutual TLS with a throw-away CA and certificates made in <data-dir>/certs
    /// (kept for the next run): one per node, and an `admin` client certificate for the CLI.
    #[arg(long)]
    pub tls: bool,
    /// Client port of node N is BASE_PORT+N, its peer port BASE_PORT+100+N, its metrics port
    /// BASE_PORT+200+N, its web console BASE_PORT+300+N (by default 7001.., 7101.., 7201..,
    /// 7301..).
    #[arg(long, default_value_t = node_config::DEFAULT_BASE_PORT,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(BASE_PORT_MAX)))]
    pub base_port: u16,
    /// Leave a node that dies down instead of restarting it (the others keep running).
    #[arg(long)]
    pub no_restart: bool,
    /// Delay before restarting a node that died, in ms; it doubles each time the node dies again
    /// within a minute of its restart, up to --restart-delay-max-ms. The default leaves the others
    /// time to elect a new leader first (their election starts up to 1.2 s after a leader dies).
    #[arg(long, default_value_t = DEFAULT_RESTART_DELAY_MS, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub restart_delay_ms: u64,
    /// Most a restart delay may grow to, in ms (at least --restart-delay-ms).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub restart_delay_max_ms: u64,
}

impl DevArgs {
    /// The restart policy of the flags, `None` with `--no-restart`.
    fn restart_policy(&self) -> anyhow::Result<Option<RestartPolicy>> {
        if self.restart_delay_max_ms < self.restart_delay_ms {
            anyhow::bail!(
                "--restart-delay-max-ms ({}) must be at least --restart-delay-ms ({})",
                self.restart_delay_max_ms,
                self.restart_delay_ms
            );
        }
        Ok((!self.no_restart).then(|| RestartPolicy {
            first_delay: Duration::from_millis(self.restart_delay_ms),
            max_delay: Duration::from_millis(self.restart_delay_max_ms),
            stable_after: RESTART_STABLE_AFTER,
        }))
    }
}

/// The client certificate `steward dev --tls` makes for the CLI.
pub const DEV_CLIENT_NAME: &str = "admin";

/// `steward dev`.
pub async fn run(args: DevArgs, _global: &GlobalOpts) -> anyhow::Result<()> {
    let policy = args.restart_policy()?;
    for id in 1..=args.nodes {
        let config =
            node_config::loopback_config_at(args.base_port, id, args.nodes, &args.data_dir);
        ensure_free(&config.client_addr)?;
        ensure_free(&config.peer_addr)?;
        if let Some(addr) = &config.metrics_addr {
            ensure_free(addr)?;
        }
        if let Some(addr) = &config.console.addr {
            ensure_free(addr)?;
        }
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let pki = match args.tls {
        true => Some(dev_certificates(&args)?),
        false => None,
    };
    let mut nodes = Vec::new();
    for id in 1..=args.nodes {
        match start_node(&args, id, pki.as_ref()) {
            Ok(node) => nodes.push(node),
            Err(err) => {
                supervisor::stop_all(&mut nodes).await;
                return Err(err);
            }
        }
    }
    let endpoints: Vec<String> = nodes.iter().map(|n| n.client_addr.clone()).collect();
    let client_tls = match &pki {
        Some(pki) => {
            let admin = &pki.clients[0].1;
            Some(ClientTls::from_files(
                &pki.ca,
                Some(&admin.cert),
                Some(&admin.key),
            )?)
        }
        None => None,
    };
    let client = Client::connect_with(&endpoints, Duration::from_secs(1), client_tls.as_ref())?;

    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    let leader = tokio::select! {
        _ = &mut shutdown => None,
        leader = wait_for_leader(&client, &mut nodes) => Some(leader),
    };
    let leader = match leader {
        None => return stop_and_exit(&mut nodes).await,
        Some(Ok(leader)) => leader,
        Some(Err(err)) => {
            supervisor::stop_all(&mut nodes).await;
            return Err(err);
        }
    };
    print_banner(&args, &nodes, leader, pki.as_ref());

    let respawn = |id| start_child(&args, id, pki.as_ref()).map(|(child, _)| child);
    supervisor::supervise(&mut nodes, policy, &respawn, shutdown).await;
    stop_and_exit(&mut nodes).await
}

/// Fails with one clear line if `addr` cannot be bound (another node or program has it).
fn ensure_free(addr: &str) -> anyhow::Result<()> {
    match std::net::TcpListener::bind(addr) {
        Ok(_) => Ok(()),
        Err(err) => anyhow::bail!(
            "{addr} is already in use ({err}); is another steward dev or node running? stop it first"
        ),
    }
}

/// The certificates in <data-dir>/certs: those of an earlier run when they are all there (their
/// CA's key is gone, so a missing one means a new set), else a new throw-away CA and set.
fn dev_certificates(args: &DevArgs) -> anyhow::Result<GeneratedPki> {
    let dir = args.data_dir.join("certs");
    let ids: Vec<u64> = (1..=args.nodes).collect();
    let files = |name: &str| CertFiles {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}-key.pem")),
    };
    let existing = GeneratedPki {
        ca: dir.join("ca.pem"),
        ca_key: None,
        nodes: ids
            .iter()
            .map(|&id| (id, files(&crate::tls::node_common_name(id))))
            .collect(),
        clients: vec![(DEV_CLIENT_NAME.to_string(), files(DEV_CLIENT_NAME))],
    };
    let all_there = existing.ca.exists()
        && existing
            .nodes
            .iter()
            .map(|(_, f)| f)
            .chain(existing.clients.iter().map(|(_, f)| f))
            .all(|f| f.cert.exists() && f.key.exists());
    if all_there {
        return Ok(existing);
    }
    let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    crate::tls::generate(&dir, &ids, &hosts, &[DEV_CLIENT_NAME.to_string()])
}

/// Starts node `id` for the first time.
fn start_node(args: &DevArgs, id: u64, pki: Option<&GeneratedPki>) -> anyhow::Result<DevNode> {
    let (child, config) = start_child(args, id, pki)?;
    Ok(DevNode {
        id,
        client_addr: config.client_addr,
        metrics_addr: config.metrics_addr,
        console_url: config.console.addr.map(|addr| match pki {
            Some(_) => format!("https://{addr}"),
            None => format!("http://{addr}"),
        }),
        log_path: log_path(args, id),
        pid: child.id().unwrap_or(0),
        child: Some(child),
        started_at: Instant::now(),
        restart_at: None,
        last_delay: None,
    })
}

fn log_path(args: &DevArgs, id: u64) -> PathBuf {
    args.data_dir.join(format!("node{id}.log"))
}

/// Writes node `id`'s config and starts `steward serve` for it, output appended to its log; the
/// same on a restart, so the node comes back on its config and data dir.
fn start_child(
    args: &DevArgs,
    id: u64,
    pki: Option<&GeneratedPki>,
) -> anyhow::Result<(Child, crate::config::Config)> {
    let mut config =
        node_config::loopback_config_at(args.base_port, id, args.nodes, &args.data_dir);
    config.raft.heartbeat_interval_ms = DEV_HEARTBEAT_INTERVAL_MS;
    config.raft.election_timeout_ms_min = DEV_ELECTION_TIMEOUT_MIN_MS;
    config.raft.election_timeout_ms_max = DEV_ELECTION_TIMEOUT_MAX_MS;
    if let Some(pki) = pki {
        let files = pki
            .nodes
            .iter()
            .find(|(n, _)| *n == id)
            .map(|(_, f)| f.clone())
            .ok_or_else(|| anyhow::anyhow!("no certificate made for node {id}"))?;
        config.tls = crate::config::TlsConfig {
            plaintext: false,
            ca_file: Some(pki.ca.clone()),
            cert_file: Some(files.cert),
            key_file: Some(files.key),
            client_cert_required: true,
        };
    }
    let title = format!(
        "Written by `steward dev` for node {id} of {}; rewritten on every run.",
        args.nodes
    );
    let config_path = args.data_dir.join(format!("node{id}.toml"));
    std::fs::write(&config_path, node_config::render(&config, &title)?)
        .with_context(|| format!("cannot write {}", config_path.display()))?;

    let log_path = log_path(args, id);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    writeln!(
        log,
        "==== steward dev: starting node {id} at {} ====",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )?;
    let stderr = log.try_clone()?;

    let exe = own_executable()?;
    let child = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(stderr))
        // Own process group: a terminal Ctrl-C reaches only this parent, which stops the
        // nodes in order; kill_on_drop is the backstop if this process errors out.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start node {id}"))?;
    Ok((child, config))
}

/// The running binary. On Linux `/proc/self/exe`, which still works after the file on disk was
/// replaced (e.g. by a rebuild) and keeps every node on the same build; elsewhere its path.
fn own_executable() -> anyhow::Result<PathBuf> {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if proc_exe.exists() {
        return Ok(proc_exe);
    }
    std::env::current_exe().context("cannot find the steward executable")
}

/// Polls cluster status until there is a leader and every node serves (its health probe can
/// answer a linearizable read, so a first `cluster status` shows no warning); fails if a child
/// exits or the deadline passes.
async fn wait_for_leader(client: &Client, nodes: &mut [DevNode]) -> anyhow::Result<u64> {
    let deadline = Instant::now() + LEADER_WAIT;
    loop {
        for node in nodes.iter_mut() {
            if let Some(status) = node
                .child
                .as_mut()
                .map(Child::try_wait)
                .transpose()?
                .flatten()
            {
                return Err(early_exit_error(node, status));
            }
        }
        let waiting_for = match client.cluster_status().await {
            Ok(status) => {
                let silent: Vec<String> = nodes
                    .iter()
                    .filter(|n| {
                        !status
                            .nodes
                            .iter()
                            .any(|s| s.id == n.id && s.state != "unreachable" && s.serving)
                    })
                    .map(|n| format!("node {} to serve", n.id))
                    .collect();
                match (status.leader_id, silent.is_empty()) {
                    (0, _) => "a leader".to_string(),
                    (leader, true) => return Ok(leader),
                    (_, false) => silent.join(", "),
                }
            }
            Err(status) => format!("an answer ({})", super::describe_status(&status)),
        };
        if Instant::now() >= deadline {
            let logs = nodes
                .first()
                .and_then(|n| n.log_path.parent())
                .unwrap_or(Path::new("."));
            anyhow::bail!(
                "cluster not ready within {}: still waiting for {waiting_for}; see the logs in {}",
                humantime::format_duration(LEADER_WAIT),
                logs.display()
            );
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn early_exit_error(node: &DevNode, status: impl std::fmt::Display) -> anyhow::Error {
    let tail = log_tail(&node.log_path, LOG_TAIL_LINES);
    if !tail.is_empty() {
        eprintln!("last lines of {}:", node.log_path.display());
        for line in tail {
            eprintln!("  | {line}");
        }
    }
    anyhow::anyhow!(
        "node {} exited early ({status}); see its log: {}",
        node.id,
        node.log_path.display()
    )
}

fn log_tail(path: &Path, lines: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

fn print_banner(args: &DevArgs, nodes: &[DevNode], leader: u64, pki: Option<&GeneratedPki>) {
    let endpoints: Vec<&str> = nodes.iter().map(|n| n.client_addr.as_str()).collect();
    println!(
        "steward dev: {} node(s) running, leader is node {leader}{}",
        nodes.len(),
        if pki.is_some() { ", mutual TLS" } else { "" }
    );
    for n in nodes {
        println!(
            "  node {}  pid {}  client {}  metrics http://{}/metrics  console {}  log {}",
            n.id,
            n.pid,
            n.client_addr,
            n.metrics_addr.as_deref().unwrap_or("-"),
            n.console_url.as_deref().unwrap_or("-"),
            n.log_path.display()
        );
    }
    println!();
    if endpoints.join(",") != super::DEFAULT_ENDPOINTS {
        println!(
            "In another shell:\n  export STEWARD_ENDPOINTS={}",
            endpoints.join(",")
        );
    } else {
        println!(
            "In another shell (endpoints default to {}):",
            super::DEFAULT_ENDPOINTS
        );
    }
    if let Some(pki) = pki {
        let abs = |p: &Path| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        };
        let admin = &pki.clients[0].1;
        println!("  export STEWARD_CACERT={}", abs(&pki.ca));
        println!(
            "  export STEWARD_CERT={} STEWARD_KEY={}",
            abs(&admin.cert),
            abs(&admin.key)
        );
    }
    println!("  steward cluster status");
    println!("  steward member list");
    println!(
        "  echo '{{\"apiVersion\":\"v1\",\"kind\":\"Director\",\"metadata\":{{\"name\":\"d1\"}},\"spec\":{{\"replicas\":3}}}}' | steward apply -f -"
    );
    println!("  steward get Director");
    println!("  steward watch Director -o json");
    println!();
    match args.no_restart {
        false => println!(
            "A node that dies (try kill -9 on the leader's pid) is restarted after {}ms.",
            args.restart_delay_ms
        ),
        true => println!("A node that dies stays down (--no-restart); the others keep running."),
    }
    println!(
        "Ctrl-C stops the cluster; its data stays in {} for the next run.",
        args.data_dir.display()
    );
}

async fn stop_and_exit(nodes: &mut [DevNode]) -> anyhow::Result<()> {
    eprintln!("stopping {} node(s)...", nodes.len());
    supervisor::stop_all(nodes).await;
    Ok(())
}
