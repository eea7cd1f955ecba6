//! `steward dev`: a local loopback cluster, one child process per node, until Ctrl-C.
//!
//! Writes `<data-dir>/node<N>.toml` (rewritten identically on every run, so a second run resumes
//! with the data already there), starts `steward serve --config ...` for each node with its
//! output in `<data-dir>/node<N>.log`, waits for a leader, prints how to use the cluster, and on
//! Ctrl-C / SIGTERM stops every child with SIGTERM and waits for it. A child that dies early stops
//! the whole cluster with an error naming it and its log.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::node_config::{self, LOOPBACK_NODES_MAX};
use super::GlobalOpts;
use crate::client::Client;
use crate::tls::{CertFiles, ClientTls, GeneratedPki};

/// How long the nodes get to elect a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How often the leader wait asks the cluster.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How long a node gets to shut down after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);
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
}

/// The client certificate `steward dev --tls` makes for the CLI.
pub const DEV_CLIENT_NAME: &str = "admin";

/// A running child node.
struct DevNode {
    id: u64,
    client_addr: String,
    metrics_addr: Option<String>,
    log_path: PathBuf,
    child: Child,
}

/// `steward dev`.
pub async fn run(args: DevArgs, _global: &GlobalOpts) -> anyhow::Result<()> {
    let members: Vec<_> = (1..=args.nodes).map(node_config::loopback_member).collect();
    for m in &members {
        ensure_free(&m.client_addr)?;
        ensure_free(&m.peer_addr)?;
        if let Some(addr) =
            node_config::loopback_config(m.id, args.nodes, &args.data_dir).metrics_addr
        {
            ensure_free(&addr)?;
        }
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let pki = match args.tls {
        true => Some(dev_certificates(&args)?),
        false => None,
    };
    let mut nodes = Vec::new();
    for m in &members {
        match start_node(&args, m.id, pki.as_ref()).await {
            Ok(node) => nodes.push(node),
            Err(err) => {
                stop_all(&mut nodes).await;
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
            stop_all(&mut nodes).await;
            return Err(err);
        }
    };
    print_banner(&args, &nodes, leader, pki.as_ref());

    let died = tokio::select! {
        _ = &mut shutdown => None,
        died = first_exit(&mut nodes) => Some(died),
    };
    match died {
        None => stop_and_exit(&mut nodes).await,
        Some((index, status)) => {
            let status = match status {
                Ok(status) => status.to_string(),
                Err(err) => err.to_string(),
            };
            let err = early_exit_error(&nodes[index], status);
            stop_all(&mut nodes).await;
            Err(err)
        }
    }
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

/// Writes node `id`'s config and starts `steward serve` for it, output appended to its log.
async fn start_node(
    args: &DevArgs,
    id: u64,
    pki: Option<&GeneratedPki>,
) -> anyhow::Result<DevNode> {
    let mut config = node_config::loopback_config(id, args.nodes, &args.data_dir);
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

    let log_path = args.data_dir.join(format!("node{id}.log"));
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
    Ok(DevNode {
        id,
        client_addr: config.client_addr,
        metrics_addr: config.metrics_addr,
        log_path,
        child,
    })
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

/// Polls cluster status until there is a leader and every node answers; fails if a child exits
/// or the deadline passes.
async fn wait_for_leader(client: &Client, nodes: &mut [DevNode]) -> anyhow::Result<u64> {
    let deadline = Instant::now() + LEADER_WAIT;
    loop {
        for node in nodes.iter_mut() {
            if let Some(status) = node.child.try_wait()? {
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
                            .any(|s| s.id == n.id && s.state != "unreachable")
                    })
                    .map(|n| format!("node {}", n.id))
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

/// Resolves when the first child exits: its index and exit status.
async fn first_exit(nodes: &mut [DevNode]) -> (usize, std::io::Result<ExitStatus>) {
    if nodes.is_empty() {
        // select_all panics on nothing; with no children there is nothing to wait for.
        std::future::pending::<()>().await;
    }
    let waits = nodes.iter_mut().map(|n| Box::pin(n.child.wait()));
    let (status, index, _) = futures::future::select_all(waits).await;
    (index, status)
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
            "  node {}  client {}  metrics http://{}/metrics  log {}",
            n.id,
            n.client_addr,
            n.metrics_addr.as_deref().unwrap_or("-"),
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
    println!(
        "Ctrl-C stops the cluster; its data stays in {} for the next run.",
        args.data_dir.display()
    );
}

async fn stop_and_exit(nodes: &mut [DevNode]) -> anyhow::Result<()> {
    eprintln!("stopping {} node(s)...", nodes.len());
    stop_all(nodes).await;
    Ok(())
}

/// SIGTERM to every running child, then wait for each; one that outlives `STOP_GRACE` is killed.
async fn stop_all(nodes: &mut [DevNode]) {
    for node in nodes.iter_mut() {
        if matches!(node.child.try_wait(), Ok(None)) {
            if let Some(pid) = node.child.id() {
                terminate(pid);
            }
        }
    }
    for node in nodes.iter_mut() {
        match tokio::time::timeout(STOP_GRACE, node.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "node {} did not stop within {}; killing it",
                    node.id,
                    humantime::format_duration(STOP_GRACE)
                );
                let _ = node.child.kill().await;
            }
        }
    }
}

/// Sends SIGTERM to `pid`.
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours. `pid` is a child we
    // have not reaped yet (its `Child` is held and `try_wait` just said it is running), so it
    // cannot name a recycled process.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}
