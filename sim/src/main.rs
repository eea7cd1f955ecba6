//! `sim`: runs seeds of the deterministic simulator and reports what they found.
//!
//!     cargo run -p sim --release -- --seeds 1000            # the hunt
//!     cargo run -p sim --release -- --seed 42 --trace       # replay one seed, whole trace
//!     cargo run -p sim --release --features unsafe-bugs -- --bug ack-before-fsync --seeds 500
//!
//! Exit status: 0 when no seed broke a promise (with `--bug`: when a seed found the bug),
//! 1 otherwise, 2 on bad arguments.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use sim::{run, Options, Report};
use steward::bugs::Bug;

#[derive(Parser, Debug)]
#[command(
    about = "steward's deterministic simulator: seeded runs of a whole cluster in one thread"
)]
struct Args {
    /// How many seeds to run, from --first on.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run this one seed and print its whole trace (a failing seed's replay).
    #[arg(long)]
    seed: Option<u64>,
    /// Nodes in the cluster: 3 or 5.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=5))]
    nodes: u64,
    /// Simulated seconds of clients and faults per seed (then a heal and the final checks).
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Concurrent register clients.
    #[arg(long, default_value_t = 5)]
    clients: u64,
    /// Concurrent lock clients.
    #[arg(long, default_value_t = 3)]
    lock_clients: u64,
    /// Concurrent etcd lease clients.
    #[arg(long, default_value_t = 2)]
    lease_clients: u64,
    /// Concurrent etcd watch clients.
    #[arg(long, default_value_t = 2)]
    watch_clients: u64,
    /// Concurrent clients submitting lifecycle operations.
    #[arg(long, default_value_t = 2)]
    op_clients: u64,
    /// Worker slots running the operations (each a succession of crashing workers).
    #[arg(long, default_value_t = 2)]
    workers: u64,
    /// A snapshot every this many log entries; 0: never (the whole log is kept).
    #[arg(long, default_value_t = sim::SNAPSHOT_EVERY)]
    snapshot_every: u64,
    /// No clock faults (drift, stalls, wall-clock steps).
    #[arg(long)]
    no_clock_faults: bool,
    /// No membership changes (voters removed, machines replaced, learners added and promoted).
    #[arg(long)]
    no_membership_changes: bool,
    /// Register keys.
    #[arg(long, default_value_t = 3)]
    keys: u64,
    /// A planted bug to turn on (needs `--features unsafe-bugs`); the run then succeeds when a
    /// seed finds it, and stops at the first that does.
    #[arg(long)]
    bug: Option<String>,
    /// Threads running seeds side by side (each its own simulation).
    #[arg(long, default_value_t = 2)]
    threads: u64,
    /// Print every trace line of failing seeds (with --seed: of that seed).
    #[arg(long)]
    trace: bool,
}

fn replay_command(args: &Args, seed: u64) -> String {
    let features = if args.bug.is_some() {
        " --features unsafe-bugs"
    } else {
        ""
    };
    let bug = args
        .bug
        .as_ref()
        .map(|b| format!(" --bug {b}"))
        .unwrap_or_default();
    format!(
        "cargo run -p sim --release{features} -- --seed {seed} --nodes {} --secs {} --clients {} \
         --keys {} --lock-clients {} --lease-clients {} --watch-clients {} \
         --op-clients {} --workers {} --snapshot-every {}{}{}{bug} --trace",
        args.nodes,
        args.secs,
        args.clients,
        args.keys,
        args.lock_clients,
        args.lease_clients,
        args.watch_clients,
        args.op_clients,
        args.workers,
        args.snapshot_every,
        if args.no_clock_faults {
            " --no-clock-faults"
        } else {
            ""
        },
        if args.no_membership_changes {
            " --no-membership-changes"
        } else {
            ""
        }
    )
}

fn print_failure(args: &Args, report: &Report) {
    println!(
        "seed {}: {} violation(s)",
        report.seed,
        report.violations.len()
    );
    for v in &report.violations {
        println!("  {v}");
    }
    println!("  replay: {}", replay_command(args, report.seed));
    println!("  trace ({} lines kept):", report.trace.len());
    for line in &report.trace {
        println!("    {line}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let bugs = match &args.bug {
        None => Vec::new(),
        Some(name) => match Bug::parse(name) {
            Some(bug) if cfg!(feature = "unsafe-bugs") => vec![bug],
            Some(_) => {
                eprintln!("error: --bug needs a build with the planted bugs: cargo run -p sim --features unsafe-bugs");
                return ExitCode::from(2);
            }
            None => {
                let known: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                eprintln!(
                    "error: --bug: unknown bug {name:?} (known: {})",
                    known.join(", ")
                );
                return ExitCode::from(2);
            }
        },
    };
    let options = |seed| Options {
        seed,
        nodes: args.nodes,
        duration: Duration::from_secs(args.secs),
        clients: args.clients,
        keys: args.keys,
        lock_clients: args.lock_clients,
        lease_clients: args.lease_clients,
        watch_clients: args.watch_clients,
        op_clients: args.op_clients,
        workers: args.workers,
        clock_faults: !args.no_clock_faults,
        membership_changes: !args.no_membership_changes,
        snapshot_every: (args.snapshot_every > 0).then_some(args.snapshot_every),
        bugs: bugs.clone(),
        trace_all: args.trace,
        leader_restore: false,
    };

    if let Some(seed) = args.seed {
        return match run(&options(seed)) {
            Ok(report) => {
                for line in &report.trace {
                    println!("{line}");
                }
                println!("trace hash {}", report.trace_hash);
                if report.violations.is_empty() {
                    println!("seed {seed}: no violation ({} ops)", report.ops);
                    ExitCode::SUCCESS
                } else {
                    for v in &report.violations {
                        println!("VIOLATION: {v}");
                    }
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("error: seed {seed}: {e:#}");
                ExitCode::from(1)
            }
        };
    }

    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(args.first));
    let end = args.first + args.seeds;
    // With --bug: the smallest seed found to break a promise; no seed after it need run.
    let found = Arc::new(AtomicU64::new(u64::MAX));
    let reports: Arc<Mutex<Vec<Report>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop_early = args.bug.is_some();
    std::thread::scope(|scope| {
        for _ in 0..args.threads.max(1) {
            let (next, found, reports, errors) =
                (next.clone(), found.clone(), reports.clone(), errors.clone());
            let options = &options;
            scope.spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end || (stop_early && seed > found.load(Ordering::Relaxed)) {
                    return;
                }
                match run(&options(seed)) {
                    Ok(report) => {
                        if !report.violations.is_empty() {
                            found.fetch_min(seed, Ordering::Relaxed);
                        }
                        reports
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(report);
                    }
                    Err(e) => errors
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(format!("seed {seed}: {e:#}")),
                }
            });
        }
    });
    let wall = started.elapsed();
    let mut reports = std::mem::take(&mut *reports.lock().unwrap_or_else(|p| p.into_inner()));
    reports.sort_by_key(|r| r.seed);
    let errors = std::mem::take(&mut *errors.lock().unwrap_or_else(|p| p.into_inner()));
    let failing: Vec<&Report> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    let first_failing = failing.first().map(|r| r.seed);
    // With --bug, only the first finding matters; the seeds after it were not all run.
    let shown: Vec<&Report> = if stop_early {
        failing.iter().take(1).copied().collect()
    } else {
        failing.clone()
    };
    for report in &shown {
        print_failure(&args, report);
    }
    for e in &errors {
        println!("error: {e}");
    }
    let simulated: Duration = reports.iter().map(|r| r.simulated).sum();
    let ops: usize = reports.iter().map(|r| r.ops).sum();
    println!(
        "{} seeds ({}..), {} client ops, {:.0} simulated s in {:.1} wall s ({:.1} simulated s per wall s), {} failing",
        reports.len(),
        args.first,
        ops,
        simulated.as_secs_f64(),
        wall.as_secs_f64(),
        simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        failing.len(),
    );
    if !errors.is_empty() {
        return ExitCode::from(1);
    }
    match (&args.bug, first_failing) {
        (Some(bug), Some(seed)) => {
            println!(
                "planted bug {bug}: found by seed {seed}, after {} seeds",
                seed - args.first + 1
            );
            ExitCode::SUCCESS
        }
        (Some(bug), None) => {
            println!("planted bug {bug}: NOT found in {} seeds", args.seeds);
            ExitCode::from(1)
        }
        (None, Some(_)) => ExitCode::from(1),
        (None, None) => ExitCode::SUCCESS,
    }
}
