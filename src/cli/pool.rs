//! `steward pool ...`: Boskos' operations on the replicated pool (acquire, update, release, list,
//! metrics) and `sync -f CONFIG`, which reads Boskos' own resources config.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{json, Value};

use super::apply::read_input;
use super::render::{self, Table};
use super::{GlobalOpts, OutputFormat};
use crate::client::{Consistency, PoolMetricsReply, PoolResource};
use crate::proto::v1 as pb;

#[derive(Debug, clap::Subcommand)]
pub enum PoolCommand {
    /// Lease the oldest-updated unowned resource of a type in a state (NotFound when none).
    Acquire(AcquireArgs),
    /// The owner's heartbeat; --data KEY=VALUE merges into the user data (empty value: remove).
    Update(UpdateArgs),
    /// Give a lease back.
    Release(ReleaseArgs),
    /// Pool resources, by name.
    List(ListArgs),
    /// Resources by state and leases by owner (Boskos' /metric).
    Metrics(MetricsArgs),
    /// Make the pool hold what a Boskos resources config lists.
    Sync(SyncArgs),
}

#[derive(Debug, clap::Args)]
pub struct AcquireArgs {
    #[arg(long = "type")]
    pub rtype: String,
    #[arg(long)]
    pub state: String,
    #[arg(long)]
    pub dest: String,
    #[arg(long)]
    pub owner: String,
    /// Repeating an acquire with the same id (and owner) answers the same lease.
    #[arg(long, default_value = "")]
    pub request_id: String,
    /// Wait up to this long (e.g. 30s) in a fair queue when nothing is free; 0: NotFound at once.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    pub name: String,
    #[arg(long)]
    pub owner: String,
    /// The resource's current state.
    #[arg(long)]
    pub state: String,
    /// KEY=VALUE (repeatable).
    #[arg(long = "data")]
    pub data: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    pub name: String,
    #[arg(long)]
    pub owner: String,
    #[arg(long)]
    pub dest: String,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long = "type", default_value = "")]
    pub rtype: String,
    #[arg(long, default_value = "")]
    pub state: String,
    #[arg(long, default_value = "")]
    pub owner: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    #[arg(long = "type", default_value = "")]
    pub rtype: String,
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// Boskos' resources config (YAML or JSON), `-` for standard input.
    #[arg(short = 'f', long)]
    pub file: PathBuf,
}

fn consistency(serializable: bool) -> Consistency {
    match serializable {
        true => Consistency::Serializable,
        false => Consistency::Linearizable,
    }
}

pub async fn run(cmd: PoolCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let resources: Vec<PoolResource> = match cmd {
        PoolCommand::Acquire(a) => {
            // The request must outlive the wait.
            let client = if a.wait.is_zero() {
                client
            } else {
                let endpoints = crate::client::split_endpoints(&global.endpoints);
                let timeout = global.timeout.max(a.wait + Duration::from_secs(5));
                crate::client::Client::connect_with_timeout(&endpoints, timeout)?
            };
            let reply = client
                .pool_acquire_wait(&a.rtype, &a.state, &a.dest, &a.owner, &a.request_id, a.wait)
                .await?;
            reply.resource.into_iter().collect()
        }
        PoolCommand::Update(a) => {
            let mut user_data = std::collections::HashMap::new();
            for d in &a.data {
                let (k, v) = d
                    .split_once('=')
                    .with_context(|| format!("--data {d:?}: expected KEY=VALUE"))?;
                user_data.insert(k.to_string(), v.to_string());
            }
            let msg = pb::PoolUpdateRequest {
                name: a.name,
                owner: a.owner,
                state: a.state,
                user_data,
            };
            client
                .pool_update(msg)
                .await?
                .resource
                .into_iter()
                .collect()
        }
        PoolCommand::Release(a) => client
            .pool_release(&a.name, &a.owner, &a.dest)
            .await?
            .resource
            .into_iter()
            .collect(),
        PoolCommand::List(a) => {
            let reply = client
                .pool_list(&a.rtype, &a.state, &a.owner, consistency(a.serializable))
                .await?;
            if reply.resources.is_empty() && global.output == OutputFormat::Table {
                eprintln!("No pool resources found.");
                return Ok(());
            }
            reply.resources
        }
        PoolCommand::Metrics(a) => {
            let reply = client
                .pool_metrics(&a.rtype, consistency(a.serializable))
                .await?;
            let text = match global.output {
                OutputFormat::Table => metrics_table(&reply).render(),
                format => render::structured(&metrics_json(&reply), format)?,
            };
            print!("{text}");
            return Ok(());
        }
        PoolCommand::Sync(a) => {
            let text = read_input(&a.file)?;
            let msg =
                parse_boskos_config(&text).with_context(|| format!("{}", a.file.display()))?;
            let n = msg.resources.len();
            let reply = client.pool_sync(msg).await?;
            if global.output == OutputFormat::Table {
                println!(
                    "pool synced: {n} resources in the config, {} changed",
                    reply.resources.len()
                );
                return Ok(());
            }
            reply.resources
        }
    };
    let text = match global.output {
        OutputFormat::Table => resources_table(&resources).render(),
        format => render::structured(
            &Value::Array(resources.iter().map(resource_json).collect()),
            format,
        )?,
    };
    print!("{text}");
    Ok(())
}

pub fn resources_table(resources: &[PoolResource]) -> Table {
    let mut table = Table::new(&["NAME", "TYPE", "STATE", "OWNER", "USERDATA"]);
    for r in resources {
        let data: BTreeMap<&String, &String> = r.user_data.iter().collect();
        let data: Vec<String> = data.iter().map(|(k, v)| format!("{k}={v}")).collect();
        table.row(vec![
            r.name.clone(),
            r.r#type.clone(),
            r.state.clone(),
            if r.owner.is_empty() {
                "-".into()
            } else {
                r.owner.clone()
            },
            data.join(","),
        ]);
    }
    table
}

pub fn resource_json(r: &PoolResource) -> Value {
    let data: BTreeMap<&String, &String> = r.user_data.iter().collect();
    json!({
        "name": r.name,
        "type": r.r#type,
        "state": r.state,
        "owner": r.owner,
        "userData": data,
        "lastUpdateMs": r.last_update_ms,
    })
}

fn sorted(m: &std::collections::HashMap<String, u64>) -> BTreeMap<&String, &u64> {
    m.iter().collect()
}

pub fn metrics_table(reply: &PoolMetricsReply) -> Table {
    let mut table = Table::new(&["STATE", "COUNT"]);
    for (state, n) in sorted(&reply.current) {
        table.row(vec![state.clone(), n.to_string()]);
    }
    for (owner, n) in sorted(&reply.owners) {
        table.row(vec![format!("owner:{owner}"), n.to_string()]);
    }
    table.row(vec!["(total)".into(), reply.total.to_string()]);
    table
}

pub fn metrics_json(reply: &PoolMetricsReply) -> Value {
    json!({
        "type": reply.r#type,
        "current": sorted(&reply.current),
        "owners": sorted(&reply.owners),
        "total": reply.total,
        "revision": reply.revision,
    })
}

/// Boskos' resources config: `resources: [{type, state, names, min-count, max-count}]`, and
/// steward's optional `expiry: {STATE: DURATION}` per entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BoskosConfig {
    resources: Vec<BoskosEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct BoskosEntry {
    #[serde(rename = "type")]
    rtype: String,
    state: String,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    min_count: Option<u64>,
    #[serde(default)]
    max_count: Option<u64>,
    /// How long a lease may go without an update in a state (e.g. `busy: 30m`).
    #[serde(default)]
    expiry: BTreeMap<String, String>,
}

pub fn parse_boskos_config(text: &str) -> anyhow::Result<pb::PoolSyncRequest> {
    let config: BoskosConfig =
        serde_yaml::from_str(text).context("not a Boskos resources config")?;
    let mut msg = pb::PoolSyncRequest::default();
    let mut seen = BTreeSet::new();
    for (i, e) in config.resources.into_iter().enumerate() {
        if e.min_count.is_some() || e.max_count.is_some() {
            anyhow::bail!(
                "resources[{i}] (type {}): dynamic pools (min-count/max-count) are not supported \
                 yet; list the names",
                e.rtype
            );
        }
        if e.names.is_empty() {
            anyhow::bail!("resources[{i}] (type {}): names is empty", e.rtype);
        }
        let mut expiry = std::collections::HashMap::new();
        for (state, d) in &e.expiry {
            let d: Duration = humantime::parse_duration(d)
                .with_context(|| format!("resources[{i}].expiry.{state}: {d:?}"))?;
            expiry.insert(
                state.clone(),
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            );
        }
        if !expiry.is_empty() {
            let entry = msg.expiry.entry(e.rtype.clone()).or_default();
            entry.expiry_ms.extend(expiry);
        }
        for name in e.names {
            if !seen.insert(name.clone()) {
                anyhow::bail!("resources[{i}]: {name} is listed twice");
            }
            msg.resources.push(pb::PoolSyncEntry {
                name,
                r#type: e.rtype.clone(),
                state: e.state.clone(),
            });
        }
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boskos_config_expands_names_and_expiries_and_refuses_dynamic_pools() {
        let text = "resources:\n- type: gce-project\n  state: dirty\n  names: [p1, p2]\n  expiry: {busy: 30m}\n- type: gke\n  state: free\n  names: [g1]\n";
        let msg = parse_boskos_config(text).expect("config");
        let names: Vec<(&str, &str, &str)> = msg
            .resources
            .iter()
            .map(|e| (e.name.as_str(), e.r#type.as_str(), e.state.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("p1", "gce-project", "dirty"),
                ("p2", "gce-project", "dirty"),
                ("g1", "gke", "free")
            ]
        );
        assert_eq!(msg.expiry["gce-project"].expiry_ms["busy"], 1_800_000);
        let dynamic = "resources:\n- type: gke\n  state: dirty\n  min-count: 1\n  max-count: 3\n";
        let err = parse_boskos_config(dynamic).expect_err("dynamic");
        assert!(err.to_string().contains("min-count"), "{err}");
        let twice = "resources:\n- {type: a, state: free, names: [x]}\n- {type: b, state: free, names: [x]}\n";
        assert!(parse_boskos_config(twice).is_err());
    }
}
