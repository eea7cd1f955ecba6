//! `cargo run -p jepsen --release -- --workload register --nemesis partition,kill,pause --time 60s --seed 7`
//!
//! Runs one workload against a fresh cluster in network namespaces under a seeded fault
//! schedule, checks the history, writes a run directory, prints one summary line, and exits 0
//! only when the verdict is VALID (1 INVALID, 2 UNKNOWN, 77 when namespaces cannot be made).
//! Whatever the history says, a node process that ended without the nemesis asking, or a node
//! log with a panic or a fatal Raft or storage error, makes the run INVALID (`jepsen::life`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use jepsen::cluster::{ClusterSpec, NetCluster, NodeExited};
use jepsen::finding::{Finding, EXIT_INVALID, EXIT_UNKNOWN};
use jepsen::history::RegisterEvent;
use jepsen::life;
use jepsen::nemesis::{self, Nemesis};
use jepsen::plot;
use jepsen::process::Exit;
use jepsen::{etcd, lease, lockrmw, operations, register, set, ttl, watch};
use steward::client::Client;

#[derive(Parser, Debug)]
#[command(about = "Fault-injection runs of real steward processes")]
struct Args {
    /// register | set | lock | watch | operations | lease | ttl | etcd-register | etcd-lock
    #[arg(long, default_value = "register")]
    workload: String,
    /// Comma-separated: partition, kill, pause, loss, clock, membership; or none. `clock` needs
    /// libfaketime (Debian package `faketime`).
    #[arg(long, default_value = "partition,kill,pause")]
    nemesis: String,
    /// How long the workload runs.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    time: Duration,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// 3 or 5.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Logical client processes (each bound to one node; watch: the first 3 watch, the rest write;
    /// operations: fixed numbers of submitters and workers, see jepsen/src/operations.rs).
    #[arg(long, default_value_t = 10)]
    concurrency: u64,
    /// Register keys.
    #[arg(long, default_value_t = 8)]
    keys: u64,
    /// Time between the start of two faults (each lasts up to about half of it).
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    fault_interval: Duration,
    /// Upper bound for the linearizability search; past it the verdict is UNKNOWN.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    check_time_limit: Duration,
    /// Where the run directory goes (default: jepsen-runs/<workload>-<seed>-<unix time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The steward binary (default: target/release/steward, else target/debug/steward).
    #[arg(long)]
    steward_bin: Option<PathBuf>,
    /// Nodes snapshot every N log entries and keep only N/10 behind the snapshot, so a node that
    /// restarts, falls behind or joins catches up by receiving a snapshot under the faults
    /// (default: the server's own settings, under which short runs never snapshot).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..))]
    snapshot_every: Option<u64>,
}

const EXIT_NO_NETNS: i32 = 77;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let code = match run(args).await {
        Ok(code) => code,
        Err(e) => {
            if let Some(no) = e.downcast_ref::<jepsen::netns::NetnsUnavailable>() {
                eprintln!("jepsen: cannot create network namespaces ({no}); run as root on Linux");
                EXIT_NO_NETNS
            } else {
                eprintln!("jepsen: {e:#}");
                EXIT_UNKNOWN
            }
        }
    };
    std::process::exit(code);
}

fn steward_bin(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = arg {
        return Ok(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for profile in ["release", "debug"] {
        let p = root.join("target").join(profile).join("steward");
        if p.exists() {
            return Ok(p);
        }
    }
    anyhow::bail!(
        "no steward binary: run `cargo build --release --bin steward` or pass --steward-bin"
    )
}

async fn run(args: Args) -> anyhow::Result<i32> {
    if ![
        "register",
        "set",
        "lock",
        "watch",
        "operations",
        "lease",
        "ttl",
        "etcd-register",
        "etcd-lock",
    ]
    .contains(&args.workload.as_str())
    {
        anyhow::bail!(
            "--workload: register, set, lock, watch, operations, lease, ttl, etcd-register or \
             etcd-lock"
        );
    }
    if args.workload == "watch" && args.concurrency <= watch::WATCHERS {
        anyhow::bail!(
            "--concurrency: the watch workload needs more than {} processes ({} watch, the rest write)",
            watch::WATCHERS,
            watch::WATCHERS
        );
    }
    let kinds: Vec<&str> = args
        .nemesis
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty() && *k != "none")
        .collect();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "jepsen-runs/{}-{}-{unix}",
            args.workload, args.seed
        ))
    });
    nemesis::check_kinds(&kinds)?;
    nemesis::check_kinds_for(&kinds, args.nodes)?;
    check_slots(&args, &kinds)?;
    std::fs::create_dir_all(&out)?;
    let faketime = match kinds.contains(&"clock") {
        true => Some(jepsen::clock::find_libfaketime().ok_or_else(|| {
            anyhow::anyhow!(
                "--nemesis clock needs libfaketime: apt-get install faketime (looked for libfaketimeMT.so.1)"
            )
        })?),
        false => None,
    };
    let spec = ClusterSpec {
        nodes: args.nodes,
        steward_bin: steward_bin(args.steward_bin.clone())?,
        work_dir: out.join("cluster"),
        raft: raft_config(args.snapshot_every),
        locks: locks_config(&args.workload),
        faketime,
    };
    jepsen::netns::cleanup_stale();
    let work_dir = spec.work_dir.clone();
    let starting = Instant::now();
    let mut cluster = match NetCluster::start(spec).await {
        Ok(cluster) => cluster,
        Err(e) => {
            // A node that dies while the cluster forms has crashed like any other.
            let Some(crash) = e.downcast_ref::<NodeExited>() else {
                return Err(e);
            };
            let checked = Err(anyhow::anyhow!("the cluster did not start: {e:#}"));
            return conclude(checked, &crash.exits, &work_dir, starting, &out);
        }
    };
    let result = tokio::select! {
        r = run_workload(&args, &mut cluster, &kinds, &out) => r,
        signal = jepsen::netns::interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    let epoch = cluster.epoch();
    // Stopped before judging: a node that fails at shutdown, and the last lines of every log,
    // count too.
    let exits = cluster.stop().await;
    conclude(result, &exits, &work_dir, epoch, &out)
}

/// Refuses a run whose schedule has no slot for some requested nemesis kind (too short for
/// its fault interval): it could only end UNKNOWN.
fn check_slots(args: &Args, kinds: &[&str]) -> anyhow::Result<()> {
    let ids: Vec<u64> = (1..=args.nodes).collect();
    let planned = nemesis::schedule(args.seed, kinds, &ids, args.time, args.fault_interval);
    let missing: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| !planned.iter().any(|(_, f, _)| f.nemesis_kind() == *k))
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "--time {} at --fault-interval {} leaves {} fault slot(s), none for {}; every requested \
         nemesis kind must run: make --time at least ({} kinds + 1) x --fault-interval",
        humantime::format_duration(args.time),
        humantime::format_duration(args.fault_interval),
        planned.len(),
        missing.join(", "),
        kinds.len()
    );
    Ok(())
}

/// The verdict of a run: the checker's, unless a node ended on its own or a node log shows a
/// panic or a fatal error, which makes it INVALID whatever the history says (also when the run
/// itself failed, e.g. a final read that never succeeded because the nodes were gone). Writes
/// verdict.txt and prints the summary line; a run that failed with nothing wrong in the nodes'
/// lives stays an error (UNKNOWN).
fn conclude(
    checked: anyhow::Result<Finding>,
    exits: &[Exit],
    work_dir: &std::path::Path,
    epoch: Instant,
    out: &std::path::Path,
) -> anyhow::Result<i32> {
    let hits = life::scan_dir(work_dir)?;
    let (summary, report, code) = match (checked, life::report(exits, &hits, epoch)) {
        (Ok(f), None) => (f.summary, f.report, f.code),
        (Ok(f), Some(lives)) => (
            format!("{}; {}: INVALID", f.summary, life::summary(exits, &hits)),
            format!("{lives}\n{}", f.report),
            EXIT_INVALID,
        ),
        (Err(e), Some(lives)) => (
            format!(
                "run failed ({e:#}); {}: INVALID",
                life::summary(exits, &hits)
            ),
            lives,
            EXIT_INVALID,
        ),
        (Err(e), None) => return Err(e),
    };
    std::fs::write(out.join("verdict.txt"), format!("{summary}\n\n{report}\n"))?;
    println!("{summary}  [{}]", out.display());
    Ok(code)
}

/// Runs the workload under the nemesis and checks its history; writes history.jsonl,
/// timeline.json and latency.svg. The verdict is written by `conclude`.
async fn run_workload(
    args: &Args,
    cluster: &mut NetCluster,
    kinds: &[&str],
    out: &std::path::Path,
) -> anyhow::Result<Finding> {
    let endpoints = cluster.client_endpoints();
    let all = Client::connect_with_timeout(&endpoints, Duration::from_secs(5))?;
    let mut register_history: Vec<RegisterEvent> = match args.workload.as_str() {
        "register" => register::init(&all, args.keys).await?,
        "etcd-register" => etcd::register::init(&endpoints[0], args.keys).await?,
        _ => vec![],
    };
    if args.workload == "etcd-lock" {
        etcd::lock::init(&endpoints[0]).await?;
    }
    if args.workload == "lock" {
        lockrmw::init(&all).await?;
    }
    if args.workload == "operations" {
        operations::init(&all).await?;
    }
    if args.workload == "lease" {
        lease::init(&all).await?;
    }
    if args.workload == "ttl" {
        ttl::init(&all).await?;
    }
    // watch: every watcher starts right after the revision of a list taken before any write.
    let watch_from = if args.workload == "watch" {
        watch::init(&all).await? + 1
    } else {
        1
    };
    let watch_target = Arc::new(AtomicU64::new(watch::NO_TARGET));
    let mut watchers = vec![];
    let start = Instant::now();
    cluster.set_epoch(start);
    let stop = Arc::new(AtomicBool::new(false));
    let reg_out = Arc::new(Mutex::new(Vec::new()));
    let set_out = Arc::new(Mutex::new(Vec::new()));
    let lock_out = Arc::new(Mutex::new(Vec::new()));
    let watch_out = Arc::new(Mutex::new(Vec::new()));
    let lease_out = Arc::new(Mutex::new(Vec::new()));
    let ttl_out = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = vec![];
    let ops_run = (args.workload == "operations")
        .then(|| operations::start(&endpoints, args.seed, start, stop.clone()));
    let processes = if ops_run.is_some() {
        0
    } else {
        args.concurrency
    };
    for p in 0..processes {
        if args.workload == "watch" && p < watch::WATCHERS {
            watchers.push(tokio::spawn(watch::watcher(watch::WatcherSetup {
                id: p,
                client: Client::connect_with_timeout(&endpoints, watch::SETUP_TIMEOUT)?,
                node_ids: cluster.node_ids(),
                from_revision: watch_from,
                seed: args.seed,
                start,
                target: watch_target.clone(),
            })));
            continue;
        }
        let ep = endpoints[(p as usize) % endpoints.len()].clone();
        let stop = stop.clone();
        // The etcd workloads speak etcd's API on the node's client port, with no steward client.
        match args.workload.as_str() {
            "etcd-register" => {
                tasks.push(tokio::spawn(etcd::register::process(
                    p,
                    ep,
                    args.keys,
                    args.seed,
                    start,
                    stop,
                    reg_out.clone(),
                )));
                continue;
            }
            "etcd-lock" => {
                tasks.push(tokio::spawn(etcd::lock::process(
                    p,
                    ep,
                    start,
                    stop,
                    lock_out.clone(),
                )));
                continue;
            }
            _ => {}
        }
        let client = Client::connect_with_timeout(&[ep], Duration::from_secs(5))?;
        tasks.push(if args.workload == "register" {
            tokio::spawn(register::process(
                p,
                client,
                args.keys,
                args.seed,
                start,
                stop,
                reg_out.clone(),
            ))
        } else if args.workload == "lock" {
            tokio::spawn(lockrmw::process(p, client, start, stop, lock_out.clone()))
        } else if args.workload == "lease" {
            tokio::spawn(lease::process(
                p,
                client,
                args.seed,
                start,
                stop,
                lease_out.clone(),
            ))
        } else if args.workload == "ttl" {
            tokio::spawn(ttl::process(
                p,
                client,
                args.seed,
                start,
                stop,
                ttl_out.clone(),
            ))
        } else if args.workload == "watch" {
            tokio::spawn(watch::writer(
                p,
                client,
                args.seed,
                start,
                stop,
                watch_out.clone(),
            ))
        } else {
            tokio::spawn(set::process(p, client, start, stop, set_out.clone()))
        });
    }

    // The nemesis: the seeded schedule, each fault healed after its length.
    let mut nemesis = Nemesis::new(start);
    let schedule = nemesis::schedule(
        args.seed,
        kinds,
        &cluster.node_ids(),
        args.time,
        args.fault_interval,
    );
    let end = start + args.time;
    for (at, fault, length) in schedule {
        tokio::time::sleep_until((start + at).into()).await;
        if Instant::now() >= end {
            break;
        }
        nemesis.apply(cluster, &fault).await?;
        tokio::time::sleep_until((Instant::now() + length).min(end).into()).await;
        nemesis.heal(cluster).await?;
    }
    tokio::time::sleep_until(end.into()).await;
    nemesis.heal(cluster).await?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    // A run that did not apply every kind it was asked for did not test what it claims.
    let missing = nemesis::kinds_missing(kinds, nemesis.timeline());
    let faults: Vec<(u64, u64, String)> = fault_windows(&nemesis);
    std::fs::write(
        out.join("timeline.json"),
        serde_json::to_string_pretty(nemesis.timeline())?,
    )?;

    let history_file = out.join("history.jsonl");
    let finding = if let Some(ops_run) = ops_run {
        let (records, report) = ops_run.finish(&all).await?;
        operations::finding(&records, &report, &history_file)?
    } else {
        match args.workload.as_str() {
            "register" | "etcd-register" => {
                register_history.extend(taken(&reg_out));
                register::finding(
                    &args.workload,
                    register_history,
                    args.check_time_limit,
                    &history_file,
                )?
            }
            "lock" => lockrmw::finding(
                "lock",
                &taken(&lock_out),
                final_counter(&all).await?,
                &history_file,
            )?,
            "etcd-lock" => lockrmw::finding(
                "etcd-lock",
                &taken(&lock_out),
                etcd::lock::final_counter(&endpoints).await?,
                &history_file,
            )?,
            "lease" => lease::finding(&taken(&lease_out), &history_file)?,
            "ttl" => {
                // The bounds of the nodes as spawn.rs configures them.
                let bounds = ttl::Bounds::of(
                    args.nodes,
                    &raft_config(args.snapshot_every),
                    &locks_config(&args.workload),
                    &steward::config::OperationsConfig::default(),
                    &steward::config::PoolsConfig::default(),
                );
                ttl::finding(&taken(&ttl_out), nemesis.timeline(), &bounds, &history_file)?
            }
            "watch" => {
                let writes = taken(&watch_out);
                let final_revision = watch::final_revision(&all).await?;
                let logs = watch::finish(final_revision, &watch_target, watchers).await?;
                watch::finding(watch_from, final_revision, &writes, &logs, &history_file)?
            }
            _ => set::finding(&taken(&set_out), &final_set(&all).await?, &history_file)?,
        }
    };
    let finding = finding.untested(&missing);
    let title = format!(
        "{} under {} (seed {})",
        args.workload, args.nemesis, args.seed
    );
    std::fs::write(
        out.join("latency.svg"),
        plot::svg(&finding.points, &faults, &title),
    )?;
    Ok(finding)
}

/// What the clients recorded, taken out of their shared vector.
fn taken<T>(out: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *out.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Fault windows from the timeline: each fault until the next heal.
fn fault_windows(n: &Nemesis) -> Vec<(u64, u64, String)> {
    let mut out = vec![];
    let mut open: Option<(u64, String)> = None;
    for e in n.timeline() {
        if e.kind == "fault" {
            open = Some((e.at_ns, e.what.clone()));
        } else if let Some((a, what)) = open.take() {
            out.push((a, e.at_ns, what));
        }
    }
    out
}

/// The final linearizable read of the lock workload's counter, retried until the cluster answers.
async fn final_counter(client: &Client) -> anyhow::Result<i64> {
    let obj = final_read(|| {
        client.get(
            lockrmw::KIND,
            "default",
            lockrmw::NAME,
            steward::client::Consistency::Linearizable,
        )
    })
    .await?;
    Ok(obj["spec"]["value"].as_i64().unwrap_or(0))
}

/// The final linearizable read of the set, retried until the healed cluster answers.
async fn final_set(client: &Client) -> anyhow::Result<BTreeSet<String>> {
    let page = final_read(|| client.list_all(set::KIND, "", "")).await?;
    Ok(page
        .items
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect())
}

/// A final read after the heal, retried for up to a minute until the cluster answers.
async fn final_read<T, F, Fut>(mut read: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "final read failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => anyhow::bail!("final read: {e}"),
        }
    }
}

/// The nodes' lock settings: the defaults, except for the ttl workload, whose silent holders
/// would otherwise leave each lock to its 5 s lock-delay after every expiry (`ttl::LOCK_DELAY`).
fn locks_config(workload: &str) -> steward::config::LocksConfig {
    let mut locks = steward::config::LocksConfig::default();
    if workload == "ttl" {
        locks.lock_delay_ms = ttl::LOCK_DELAY.as_millis() as u64;
    }
    locks
}

/// The nodes' Raft settings: the defaults, with `--snapshot-every` applied.
fn raft_config(snapshot_every: Option<u64>) -> steward::config::RaftConfig {
    let mut raft = steward::config::RaftConfig::default();
    if let Some(every) = snapshot_every {
        raft.snapshot_logs_since_last = every;
        raft.log_behind_snapshot_max = every / 10;
    }
    raft
}
