//! A quick write benchmark: N concurrent clients creating distinct 256-byte-spec Directors
//! through every endpoint for a fixed time; prints ops/s and latency percentiles.
//!
//! `cargo run --release --example quick_bench -- [--clients 64] [--secs 10] [--endpoints a,b,c]`
//! against a running cluster (e.g. `steward dev`). The full load generator is `steward bench`
//! (issue 5); this one only gives the foundation's figures.

use std::time::{Duration, Instant};

use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::CreateRequest;

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
            let mut client = ResourcesClient::new(channels[c % channels.len()].clone());
            let (spec, run) = (spec.clone(), run.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                let mut seq = 0u64;
                while Instant::now() < deadline {
                    let body = serde_json::json!({
                        "kind": "Bench", "apiVersion": "v1",
                        "metadata": {"name": format!("b{run}-{c}-{seq}")},
                        "spec": {"data": spec},
                    })
                    .to_string();
                    seq += 1;
                    let t = Instant::now();
                    match client
                        .create(CreateRequest {
                            object_json: body,
                            ..Default::default()
                        })
                        .await
                    {
                        Ok(_) => lat.push(t.elapsed()),
                        Err(_) => errors += 1,
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
        "creates: {} ok, {errors} errors in {secs}s = {:.0} ops/s; latency ms p50 {} p90 {} p99 {} p99.9 {} max {}",
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
