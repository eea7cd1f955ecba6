//! A quick benchmark: N concurrent clients through every endpoint for a fixed time; prints ops/s
//! and latency percentiles. Workloads: `create` (distinct 256-byte-spec objects), `lock` (WRITE
//! acquire + release, each client on its own lock name), `lock-contended` (all clients on one
//! name, waiting in line).
//!
//! `cargo run --release --example quick_bench -- [--workload create] [--clients 64] [--secs 10] [--endpoints a,b,c]`
//! against a running cluster (e.g. `steward dev`). The full load generator is `steward bench`
//! (issue 5); this one only gives the foundation's figures.

use std::time::{Duration, Instant};

use steward::proto::v1::locks_client::LocksClient;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::{AcquireRequest, CreateRequest, LockMode, ReleaseRequest};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let clients: usize = arg(&args, "--clients", "64").parse()?;
    let workload = arg(&args, "--workload", "create");
    if !["create", "lock", "lock-contended"].contains(&workload.as_str()) {
        anyhow::bail!("--workload: create, lock or lock-contended");
    }
    let secs: u64 = arg(&args, "--secs", "10").parse()?;
    let endpoints: Vec<String> = arg(
        &args,
        "--endpoints",
        "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
    )
    .split(',')
    .map(|e| format!("http://{e}"))
    .collect();
    let channels: Vec<_> = endpoints
        .iter()
        .map(|e| tonic::transport::Endpoint::from_shared(e.clone()).map(|ep| ep.connect_lazy()))
        .collect::<Result<_, _>>()?;
    let spec = "s".repeat(256);
    let run = format!("{}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let channel = channels[c % channels.len()].clone();
            let mut client = ResourcesClient::new(channel.clone());
            let mut locks = LocksClient::new(channel);
            let (spec, run, workload) = (spec.clone(), run.clone(), workload.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                let mut seq = 0u64;
                let lock_name = if workload == "lock" {
                    format!("bench-{run}-{c}")
                } else {
                    format!("bench-{run}")
                };
                let holder = format!("bench-{run}-{c}");
                while Instant::now() < deadline {
                    seq += 1;
                    let t = Instant::now();
                    let ok = if workload == "create" {
                        let body = serde_json::json!({
                            "kind": "Bench", "apiVersion": "v1",
                            "metadata": {"name": format!("b{run}-{c}-{seq}")},
                            "spec": {"data": spec},
                        })
                        .to_string();
                        client
                            .create(CreateRequest {
                                object_json: body,
                                ..Default::default()
                            })
                            .await
                            .is_ok()
                    } else {
                        let acquired = locks
                            .acquire(AcquireRequest {
                                name: lock_name.clone(),
                                mode: LockMode::Write as i32,
                                holder: holder.clone(),
                                ttl_ms: 30_000,
                                details_json: String::new(),
                                wait_ms: 60_000,
                            })
                            .await;
                        match acquired.ok().and_then(|g| g.into_inner().holder) {
                            Some(h) => locks
                                .release(ReleaseRequest {
                                    name: lock_name.clone(),
                                    holder: holder.clone(),
                                    token: h.token,
                                })
                                .await
                                .is_ok(),
                            None => false,
                        }
                    };
                    if ok {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await?;
        all.extend(lat);
        errors += e;
    }
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
    };
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .unwrap_or("-".into())
    };
    println!(
        "{workload}: {} ok, {errors} errors in {secs}s = {:.0} ops/s; latency ms p50 {} p90 {} p99 {} p99.9 {} max {}",
        all.len(),
        all.len() as f64 / secs as f64,
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(0.999)),
        ms(all.last().copied()),
    );
    Ok(())
}
