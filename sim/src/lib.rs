//! steward's deterministic simulator: a whole cluster in one thread, driven by one seed.
//!
//! Each run builds 3 or 5 nodes from the real parts (openraft, steward's log store and state
//! machine, the core's apply) over a simulated disk (`disk`), a simulated network (`net`) and
//! tokio's paused clock, runs clients against them while the nemesis (`nemesis`) injects faults,
//! checks invariants as it goes (`check`), and checks the clients' history at the end.
//!
//! Why a hand-made simulation on tokio rather than turmoil or madsim: steward's nodes already
//! meet the outside world at three seams that can be swapped in-process: openraft's network
//! trait, steward's `Wal` (the log store's disk), and tokio's clock, which `start_paused`
//! hands to the simulator (it jumps to the next timer whenever every task waits). A
//! current-thread runtime polls tasks in an order fixed by the program, so with openraft's
//! randomness drawn from the seed (`steward::seam`) and tokio's own seeded (`rng_seed`), a run
//! is a function of its seed. turmoil simulates TCP, which would also carry the gRPC layer,
//! but it runs hosts on one shared clock and does nothing for the disk; madsim replaces tokio
//! itself, and Xline had to patch it for tonic. What had to be seamed: openraft's randomness
//! (`StewardRuntime`), blocking work (`seam::blocking`: in place on a simulation thread), the
//! WAL (`raft::log_store::Wal`), redb (`RaftDb::open_in_memory`), and the clocks
//! (`server::time::Clock`).
//!
//! Each machine's clocks drift, stall and step (`clock`); each node counts cluster time on them
//! with steward's own `ClusterClock`, stamps its proposals with it, and its leader sweeps locks
//! with the server's own sweeper round, and ends etcd leases as the node's lease sweeper does.
//! Workloads: a register (`register`), locks (`locks`), etcd leases (`leases`), etcd
//! watches (`watches`, over steward's own Watch session on each node's hub) and lifecycle
//! operations run by crashing workers (`operations`, judged by jepsen's operations checker).
//!
//! Snapshots are built every `Options::snapshot_every` entries and sent whole (`net`).
//! Replication runs on append streams made of steward's own halves over simulated connections
//! (`net`), and the membership changes under a nemesis of its own (`nemesis::members`).
//!
//! A client's write goes the way steward's own `server::route` sends it (the same function:
//! proposed on the leader, forwarded from a follower over the simulated network, held across an
//! election, never sent again once a leader may have it).
//!
//! Not simulated yet (README "Simulation"): the gRPC servers themselves (forwarding's batching,
//! the leader loops beyond the scheduler's and sweepers' rounds), and lock waits.

pub mod check;
pub mod clock;
pub mod cluster;
pub mod disk;
pub mod leases;
pub mod locks;
pub mod nemesis;
pub mod net;
pub mod operations;
pub mod register;
pub mod trace;
pub mod watches;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::checker::{check_register, Verdict};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use steward::bugs::Bug;

use crate::check::{fingerprint, Invariants};
use crate::cluster::Cluster;
use crate::disk::DiskFaults;
use crate::net::{Net, NetFaults, VoterCrash};
use crate::register::Histories;
use crate::trace::Trace;

/// One run.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    /// 3 or 5.
    pub nodes: u64,
    /// Simulated time the clients and the nemesis run.
    pub duration: Duration,
    /// Register clients.
    pub clients: u64,
    pub keys: u64,
    /// Lock clients.
    pub lock_clients: u64,
    /// etcd lease clients.
    pub lease_clients: u64,
    /// etcd watch clients.
    pub watch_clients: u64,
    /// Clients submitting lifecycle operations.
    pub op_clients: u64,
    /// Worker slots running them (each a succession of crashing workers).
    pub workers: u64,
    /// Whether the clock nemesis runs: drifting, stalling and stepping each node's clocks.
    pub clock_faults: bool,
    /// Whether the membership nemesis runs: voters removed, machines replaced, learners added
    /// back and promoted.
    pub membership_changes: bool,
    /// Planted bugs turned on for this run (only in a build with `unsafe-bugs`).
    pub bugs: Vec<Bug>,
    /// Keep every trace line (else the newest few).
    pub trace_all: bool,
    /// openraft's leader restore, as steward had it until this simulator's first hunt found it
    /// unsafe (`raft::types::raft_settings`): only for the regression test showing the
    /// simulator still catches it.
    pub leader_restore: bool,
    /// A snapshot every this many log entries (`raft.snapshot_logs_since_last`); `None`: never,
    /// and the whole log is kept.
    pub snapshot_every: Option<u64>,
}

impl Options {
    pub fn new(seed: u64) -> Options {
        Options {
            seed,
            nodes: 3,
            duration: Duration::from_secs(5),
            clients: 5,
            keys: 3,
            lock_clients: 3,
            lease_clients: 2,
            watch_clients: 2,
            op_clients: 2,
            workers: 2,
            clock_faults: true,
            membership_changes: true,
            bugs: Vec::new(),
            trace_all: false,
            leader_restore: false,
            snapshot_every: Some(SNAPSHOT_EVERY),
        }
    }
}

/// What one run found.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub violations: Vec<String>,
    /// The hash of the whole trace: the same seed must give the same hash.
    pub trace_hash: String,
    /// The clients' history as JSON lines (the other half of the determinism proof).
    pub history: String,
    pub ops: usize,
    /// Simulated time the run took, start to last check.
    pub simulated: Duration,
    /// The trace lines kept (all, or the newest).
    pub trace: Vec<String>,
}

/// Log entries between snapshots by default: a run of 5 simulated seconds writes some hundreds.
pub const SNAPSHOT_EVERY: u64 = 100;

/// How long, after the faults end, the cluster has to catch up before its nodes are compared.
const SETTLE: Duration = Duration::from_secs(10);
/// How often invariants are checked.
const OBSERVE_EVERY: Duration = Duration::from_millis(5);

/// A seed of its own for each part of the run, so that a change in one part's draws leaves the
/// others' alone.
fn part(seed: u64, part: u64) -> u64 {
    let mut z = seed ^ part.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs one seed on the calling thread, which becomes a simulation thread for the while.
pub fn run(opts: &Options) -> anyhow::Result<Report> {
    steward::seam::enter_simulation(part(opts.seed, 1));
    steward::state::bugs::turn_on_for_thread(Some(&opts.bugs));
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(
        &part(opts.seed, 2).to_le_bytes(),
    ));
    catch_panics();
    PANICS.with(|p| p.borrow_mut().clear());
    let mut kept: Option<Trace> = None;
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rt = builder.build()?;
        // Made on the paused clock, so its times are simulated ones.
        let trace = rt.block_on(async { Trace::new(opts.trace_all) });
        kept = Some(trace.clone());
        rt.block_on(scenario(opts, trace))
    }));
    steward::state::bugs::turn_on_for_thread(None);
    steward::seam::leave_simulation();
    let panics = PANICS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let mut report = match ran {
        Ok(result) => result?,
        // The run itself stopped (a node's start replays its log and panicked again): what
        // the trace holds so far is the report.
        Err(_) => {
            let trace = kept.unwrap_or_else(|| Trace::new(opts.trace_all));
            Report {
                seed: opts.seed,
                violations: Vec::new(),
                trace_hash: trace.hash(),
                history: String::new(),
                ops: 0,
                simulated: Duration::ZERO,
                trace: trace.lines(),
            }
        }
    };
    // A node never panics on anything a client or a peer sends (even where tokio caught it
    // in a task of its own and the run went on).
    for p in panics.into_iter().take(3) {
        report.violations.push(format!("a node panicked: {p}"));
    }
    Ok(report)
}

thread_local! {
    /// Panics on this simulation thread, as "location: message".
    static PANICS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records a panic on a simulation thread, where the run reports it as a violation, instead of
/// printing it; on any other thread the hook that was there runs.
fn catch_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !steward::seam::simulated() {
                return before(info);
            }
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            PANICS.with(|p| p.borrow_mut().push(format!("{at}: {message}")));
        }));
    });
}

async fn scenario(opts: &Options, trace: Trace) -> anyhow::Result<Report> {
    let started = tokio::time::Instant::now();
    trace.log(
        "SIM",
        format!(
            "seed {} nodes {} bugs {:?}",
            opts.seed, opts.nodes, opts.bugs
        ),
    );
    let net = Net::new(part(opts.seed, 3), NetFaults::default());
    let disk = DiskFaults::default();
    let cluster = Arc::new(Cluster::new(
        opts.nodes,
        part(opts.seed, 4),
        net,
        disk,
        trace.clone(),
        opts.leader_restore,
        opts.snapshot_every,
    )?);
    for &id in &cluster.ids {
        cluster.start(id).await?;
    }
    cluster.initialize().await?;

    let (crashes, mut crash_requests) = tokio::sync::mpsc::unbounded_channel();
    cluster.net.set_crash_sink(crashes);
    let crasher = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            while let Some(VoterCrash { voter, candidate }) = crash_requests.recv().await {
                if cluster.net.healed() {
                    // Asked for before the final heal, and too late to matter: nothing is cut
                    // or crashed after it.
                    continue;
                }
                cluster.trace.log(
                    "NEM",
                    format!(
                        "crash n{voter} as it grants n{candidate} a vote; n{candidate} is cut off"
                    ),
                );
                cluster.crash(voter);
                // Back within a millisecond, as under a supervisor, so it hears the term it
                // voted in again; and the leader it made is cut off, so the others elect
                // another while it still leads. A vote the voter lost can then make two
                // leaders of one term whose quorums overlap only in the voter, and the one
                // with the greater id overwrites what the other committed (README:
                // vote-not-persisted). With the vote on disk, the voter refuses the second.
                nemesis::restart_later(&cluster, voter, Duration::from_millis(1));
                nemesis::isolate(&cluster, candidate);
            }
        })
    };

    let invariants = Arc::new(Mutex::new(Invariants::default()));
    let observer = {
        let (cluster, invariants) = (cluster.clone(), invariants.clone());
        tokio::spawn(async move {
            loop {
                let views = cluster.views();
                for v in &views {
                    if let Err(e) = &v.metrics.running_state {
                        cluster
                            .trace
                            .log(&format!("n{}", v.node), format!("raft stopped: {e}"));
                        // The log store refused an append that would leave a hole: openraft
                        // handed one over, which its contract forbids (README, the log store).
                        let e = e.to_string();
                        if e.contains("would leave a hole") {
                            let violation = format!("n{}: {e}", v.node);
                            cluster.trace.log("CHK", format!("VIOLATION: {violation}"));
                            invariants
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .violations
                                .push(violation);
                        }
                        // As a supervisor would: the process ends, and is started again.
                        cluster.crash(v.node);
                        nemesis::restart_later(&cluster, v.node, Duration::from_millis(200));
                    }
                }
                invariants
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .observe(&views, &cluster.trace);
                tokio::time::sleep(OBSERVE_EVERY).await;
            }
        })
    };

    let until = tokio::time::Instant::now() + opts.duration;
    let histories = Arc::new(Mutex::new(Histories::default()));
    let mut tasks = Vec::new();
    for p in 0..opts.clients {
        tasks.push(tokio::spawn(register::client(
            cluster.clone(),
            p,
            SmallRng::seed_from_u64(part(opts.seed, 100 + p)),
            opts.keys,
            until,
            histories.clone(),
        )));
    }
    let grants = Arc::new(Mutex::new(locks::LockHistory::default()));
    for p in 0..opts.lock_clients {
        tasks.push(tokio::spawn(locks::client(
            cluster.clone(),
            1_000 + p,
            SmallRng::seed_from_u64(part(opts.seed, 200 + p)),
            until,
            grants.clone(),
        )));
    }
    let leases = Arc::new(Mutex::new(Vec::new()));
    for p in 0..opts.lease_clients {
        tasks.push(tokio::spawn(leases::client(
            cluster.clone(),
            2_000 + p,
            SmallRng::seed_from_u64(part(opts.seed, 300 + p)),
            until,
            leases.clone(),
        )));
    }
    let watched = Arc::new(Mutex::new(Vec::new()));
    for p in 0..opts.watch_clients {
        tasks.push(tokio::spawn(watches::client(
            cluster.clone(),
            3_000 + p,
            SmallRng::seed_from_u64(part(opts.seed, 400 + p)),
            opts.keys,
            until,
            watched.clone(),
        )));
    }
    let ops = Arc::new(operations::Ops::default());
    for p in 0..opts.op_clients {
        tasks.push(tokio::spawn(operations::submitter(
            cluster.clone(),
            4_000 + p,
            p,
            SmallRng::seed_from_u64(part(opts.seed, 500 + p)),
            until,
            ops.clone(),
        )));
    }
    for slot in 0..opts.workers {
        let worker = tokio::spawn(operations::worker_slot(
            cluster.clone(),
            slot,
            part(opts.seed, 600 + slot),
            ops.clone(),
        ));
        ops.keep(&worker);
    }
    let nemesis = tokio::spawn(nemesis::run(
        cluster.clone(),
        SmallRng::seed_from_u64(part(opts.seed, 5)),
        until,
    ));
    let clocks = opts.clock_faults.then(|| {
        tokio::spawn(nemesis::clocks(
            cluster.clone(),
            SmallRng::seed_from_u64(part(opts.seed, 6)),
            until,
        ))
    });
    let members = opts.membership_changes.then(|| {
        tokio::spawn(nemesis::members(
            cluster.clone(),
            SmallRng::seed_from_u64(part(opts.seed, 8)),
            until,
        ))
    });
    for t in tasks {
        t.await?;
    }
    nemesis.await?;
    if let Some(clocks) = clocks {
        clocks.await?;
    }
    if let Some(members) = members {
        members.await?;
    }

    // The faults end; the workers stop crashing and end every operation; then every node must
    // catch up and hold the same state.
    ops.stop_crashing();
    nemesis::heal(&cluster).await;
    if opts.workers > 0 {
        operations::finish(&cluster).await;
    }
    let op_records = ops.halt();
    let settled = settle(&cluster).await;
    observer.abort();
    crasher.abort();
    let mut violations = {
        let mut inv = invariants.lock().unwrap_or_else(|p| p.into_inner());
        inv.observe(&cluster.views(), &trace);
        std::mem::take(&mut inv.violations)
    };
    match &settled {
        Err(e) => {
            trace.log("CHK", format!("VIOLATION: {e}"));
            violations.push(e.clone());
        }
        Ok(()) => {
            let prints: Vec<(u64, String)> = cluster
                .views()
                .iter()
                .map(|v| {
                    let state = v.state.read().unwrap_or_else(|p| p.into_inner());
                    (v.node, fingerprint(&state))
                })
                .collect();
            if let Some((first, print)) = prints.first() {
                for (node, other) in &prints[1..] {
                    if other != print {
                        let e = format!(
                            "n{first} and n{node} applied the same log but hold different \
                             states: {print} | {other}"
                        );
                        trace.log("CHK", format!("VIOLATION: {e}"));
                        violations.push(e);
                    }
                }
            }
        }
    }
    // Every watch client catches up to the revision the healed cluster settled at; then each is
    // checked against the keyspace of the node furthest ahead (the leader's sweeps go on).
    let mut watched = std::mem::take(&mut *watched.lock().unwrap_or_else(|p| p.into_inner()));
    if settled.is_ok() {
        let top = cluster
            .views()
            .iter()
            .map(|v| v.revision)
            .max()
            .unwrap_or(0);
        let rng = SmallRng::seed_from_u64(part(opts.seed, 7));
        watches::catch_up(&cluster, &mut watched, rng, top).await;
        let furthest = cluster.views().into_iter().max_by_key(|v| v.revision);
        if let Some(view) = furthest {
            let state = view.state.read().unwrap_or_else(|p| p.into_inner()).clone();
            for e in watches::check(&watched, &state) {
                trace.log("CHK", format!("VIOLATION: {e}"));
                violations.push(e);
            }
            if opts.op_clients > 0 {
                let (found, summary) = operations::check(&op_records, &state);
                trace.log("CHK", summary);
                for e in found {
                    trace.log("CHK", format!("VIOLATION: {e}"));
                    violations.push(e);
                }
            }
        }
    }
    cluster.shutdown().await;

    let histories = std::mem::take(&mut *histories.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some(e) = register::check_revisions(&histories.writes) {
        trace.log("CHK", format!("VIOLATION: {e}"));
        violations.push(e);
    }
    let grants = std::mem::take(&mut *grants.lock().unwrap_or_else(|p| p.into_inner()));
    for e in locks::check(&grants) {
        trace.log("CHK", format!("VIOLATION: {e}"));
        violations.push(e);
    }
    let leases = std::mem::take(&mut *leases.lock().unwrap_or_else(|p| p.into_inner()));
    for e in leases::check(&leases) {
        trace.log("CHK", format!("VIOLATION: {e}"));
        violations.push(e);
    }
    let watch_events: usize = watched.iter().map(|w| w.events.len()).sum();
    let (verdict, _) = check_register(&histories.events, Duration::from_secs(30));
    match &verdict {
        Verdict::Valid => {}
        other => {
            let e = format!(
                "register history {}: {}",
                other.label(),
                jepsen::checker::render::render(other)
            );
            trace.log("CHK", format!("VIOLATION: {}", other.label()));
            violations.push(e);
        }
    }
    let history: Vec<String> = histories
        .events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect();
    trace.log(
        "SIM",
        format!(
            "done: {} ops, {} lock grants, {} leases, {} watch events, {} violations",
            history.len(),
            grants.grants.len(),
            leases.len(),
            watch_events,
            violations.len()
        ),
    );
    Ok(Report {
        seed: opts.seed,
        violations,
        trace_hash: trace.hash(),
        ops: history.len() + grants.grants.len() + grants.fenced.len() + leases.len(),
        history: history.join("\n"),
        simulated: started.elapsed(),
        trace: trace.lines(),
    })
}

/// Waits until every node runs and has applied what the leader committed; an error if that
/// does not happen within [`SETTLE`] of a healed cluster (a liveness failure).
async fn settle(cluster: &Cluster) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let views = cluster.views();
        let leader = views
            .iter()
            .find(|v| v.metrics.state == steward::raft::types::ServerState::Leader);
        if let Some(leader) = leader {
            let committed = leader.metrics.local_committed.map(|c| c.index);
            let caught_up = views.len() == cluster.ids.len()
                && views
                    .iter()
                    .all(|v| v.metrics.last_applied.map(|a| a.index) == committed);
            if caught_up {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            let seen: Vec<String> = views
                .iter()
                .map(|v| {
                    format!(
                        "n{} {:?} term {} applied {:?}",
                        v.node,
                        v.metrics.state,
                        v.metrics.current_term,
                        v.metrics.last_applied.map(|a| a.index)
                    )
                })
                .collect();
            return Err(format!(
                "the healed cluster did not settle within {SETTLE:?}: {}",
                seen.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
