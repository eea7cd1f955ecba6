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
    /// Wait up to this long (e.g. 30s) in a fair queue when nothing is free (then Aborted,
    /// POOL_WAIT_EXPIRED); 0: NotFound (POOL_EMPTY) at once.
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
    /// Boskos' resources config (`resources:`) and/or Mason's virtual resource configs
    /// (`configs:`), YAML or JSON, `-` for standard input.
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Keep the pool in sync with the file: read it again this often (e.g. 30s) and sync when
    /// it changed, until Ctrl-C, as Boskos does with its config. A file that does not parse is
    /// reported and skipped; the pool keeps the last good config.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub every: Option<Duration>,
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
                client.with_timeout(global.timeout.max(a.wait + Duration::from_secs(5)))
            };
            let reply = client
                .pool_acquire_wait(&a.rtype, &a.state, &a.dest, &a.owner, &a.request_id, a.wait)
                .await?;
            // A virtual resource, then the resources leased with it.
            reply.resource.into_iter().chain(reply.leased).collect()
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
            let reply = client.pool_update(msg).await?;
            reply.resource.into_iter().chain(reply.leased).collect()
        }
        PoolCommand::Release(a) => {
            let reply = client.pool_release(&a.name, &a.owner, &a.dest).await?;
            reply.resource.into_iter().chain(reply.leased).collect()
        }
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
        PoolCommand::Sync(a) if a.every.is_some() => {
            return sync_every(&client, &a.file, a.every.unwrap_or_default()).await;
        }
        PoolCommand::Sync(a) => {
            let text = read_input(&a.file)?;
            let config =
                parse_pool_config(&text).with_context(|| format!("{}", a.file.display()))?;
            let (line, resources) = sync_config(&client, config).await?;
            if global.output == OutputFormat::Table {
                println!("{line}");
                return Ok(());
            }
            resources
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

/// `pool sync --every`: syncs at once, then whenever the file's text changes, until Ctrl-C or
/// SIGTERM. One line per sync; a bad file or a failed sync is one line on stderr and retried at
/// the next tick.
async fn sync_every(
    client: &crate::client::Client,
    file: &PathBuf,
    every: Duration,
) -> anyhow::Result<()> {
    if every.is_zero() {
        anyhow::bail!("--every must be more than 0");
    }
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    let mut synced: Option<String> = None;
    loop {
        match read_input(file) {
            Ok(text) if synced.as_deref() != Some(text.as_str()) => {
                match parse_pool_config(&text) {
                    Ok(config) => match sync_config(client, config).await {
                        Ok((line, _)) => {
                            println!("{line}");
                            synced = Some(text);
                        }
                        Err(e) => eprintln!("pool sync failed: {}", super::describe_status(&e)),
                    },
                    Err(e) => eprintln!("{}: {e:#}; keeping the last good config", file.display()),
                }
            }
            Ok(_) => {}
            Err(e) => eprintln!("{e:#}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut shutdown => return Ok(()),
        }
    }
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
        "parent": r.parent,
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

/// A config file for `pool sync`: Boskos' `resources:` (`[{type, state, names, min-count,
/// max-count}]`, with steward's optional `expiry: {STATE: DURATION}` per entry), Mason's
/// `configs:`, or both.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolConfigFile {
    #[serde(default)]
    resources: Option<Vec<BoskosEntry>>,
    #[serde(default)]
    configs: Option<Vec<MasonEntry>>,
}

/// Mason's config: `configs: [{name, needs: {TYPE: COUNT}, config: {type, content}}]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MasonEntry {
    name: String,
    needs: BTreeMap<String, u32>,
    #[serde(default)]
    config: Option<MasonBody>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MasonBody {
    #[serde(rename = "type", default)]
    config_type: String,
    #[serde(default)]
    content: String,
}

/// What one `pool sync` file asks: the resources (if it has `resources:`) and the virtual
/// resource configs (if it has `configs:`).
#[derive(Debug, Default)]
pub struct PoolConfig {
    pub resources: Option<pb::PoolSyncRequest>,
    pub virtuals: Option<pb::PoolSyncVirtualRequest>,
}

/// Parses a `pool sync` file: Boskos' resources config and/or Mason's virtual resource configs.
pub fn parse_pool_config(text: &str) -> anyhow::Result<PoolConfig> {
    let file: PoolConfigFile =
        serde_yaml::from_str(text).context("not a Boskos resources or Mason config")?;
    if file.resources.is_none() && file.configs.is_none() {
        anyhow::bail!("neither resources: (Boskos) nor configs: (Mason) is given");
    }
    let (resources, mut virtuals) = match file.resources.map(boskos_request).transpose()? {
        Some((msg, virtuals)) => (Some(msg), virtuals),
        None => (None, Vec::new()),
    };
    // Mason's configs: from `configs:` and from the dynamic entries with needs. Synced when
    // either is there (an empty list would remove every config).
    let any = file.configs.is_some() || !virtuals.is_empty();
    for c in file.configs.unwrap_or_default() {
        let body = c.config.unwrap_or_default();
        virtuals.push(pb::VirtualConfig {
            name: c.name,
            needs: c.needs.into_iter().collect(),
            config_type: body.config_type,
            config_content: body.content,
        });
    }
    let virtuals = any.then_some(pb::PoolSyncVirtualRequest { configs: virtuals });
    Ok(PoolConfig {
        resources,
        virtuals,
    })
}

/// Syncs what `config` holds: the virtual configs first (so the virtual resources the same
/// file adds are built at once), then the resources. One line saying what changed, and the
/// resources that did.
async fn sync_config(
    client: &crate::client::Client,
    config: PoolConfig,
) -> Result<(String, Vec<PoolResource>), tonic::Status> {
    let mut parts = Vec::new();
    if let Some(msg) = config.virtuals {
        let n = msg.configs.len();
        let reply = client.pool_sync_virtual(msg).await?;
        parts.push(format!(
            "{n} virtual configs in the config, {} changed",
            reply.changed
        ));
    }
    let mut resources = Vec::new();
    if let Some(msg) = config.resources {
        let n = msg.resources.len();
        let reply = client.pool_sync(msg).await?;
        parts.push(format!(
            "{n} resources in the config, {} changed",
            reply.resources.len()
        ));
        resources = reply.resources;
    }
    Ok((format!("pool synced: {}", parts.join("; ")), resources))
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
    /// A dynamic resource's life (e.g. `48h`).
    #[serde(default)]
    lifespan: Option<String>,
    /// What each resource of the type is built from (Mason), and its constructor's config.
    #[serde(default)]
    needs: BTreeMap<String, u32>,
    #[serde(default)]
    config: Option<MasonBody>,
}

/// The sync request of Boskos' `resources:` entries.
fn boskos_request(
    entries: Vec<BoskosEntry>,
) -> anyhow::Result<(pb::PoolSyncRequest, Vec<pb::VirtualConfig>)> {
    let mut msg = pb::PoolSyncRequest::default();
    let mut virtuals = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, e) in entries.into_iter().enumerate() {
        let mut expiry = std::collections::HashMap::new();
        for (state, d) in &e.expiry {
            expiry.insert(
                state.clone(),
                millis(&format!("resources[{i}].expiry.{state}"), d)?,
            );
        }
        if !expiry.is_empty() {
            let entry = msg.expiry.entry(e.rtype.clone()).or_default();
            entry.expiry_ms.extend(expiry);
        }
        if !e.needs.is_empty() {
            let body = e.config.unwrap_or_default();
            virtuals.push(pb::VirtualConfig {
                name: e.rtype.clone(),
                needs: e.needs.into_iter().collect(),
                config_type: body.config_type,
                config_content: body.content,
            });
        } else if e.config.is_some() {
            anyhow::bail!(
                "resources[{i}] (type {}): a config without needs builds nothing",
                e.rtype
            );
        }
        let dynamic = e.min_count.is_some() || e.max_count.is_some();
        if dynamic {
            if !e.names.is_empty() {
                anyhow::bail!(
                    "resources[{i}] (type {}): a dynamic pool (min-count/max-count) names its \
                     own resources; drop names",
                    e.rtype
                );
            }
            let count = |v: Option<u64>, what: &str| {
                u32::try_from(v.unwrap_or(0))
                    .with_context(|| format!("resources[{i}].{what} is too large"))
            };
            let lifespan_ms = match &e.lifespan {
                Some(d) => millis(&format!("resources[{i}].lifespan"), d)?,
                None => 0,
            };
            msg.dynamic.push(pb::PoolDynamic {
                r#type: e.rtype.clone(),
                state: e.state.clone(),
                min_count: count(e.min_count, "min-count")?,
                max_count: count(e.max_count.or(e.min_count), "max-count")?,
                lifespan_ms,
            });
            continue;
        }
        if e.lifespan.is_some() {
            anyhow::bail!(
                "resources[{i}] (type {}): lifespan is for dynamic pools (min-count/max-count)",
                e.rtype
            );
        }
        if e.names.is_empty() {
            anyhow::bail!("resources[{i}] (type {}): names is empty", e.rtype);
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
    Ok((msg, virtuals))
}

/// A duration (`30m`, `48h`) in milliseconds.
fn millis(field: &str, text: &str) -> anyhow::Result<u64> {
    let d: Duration =
        humantime::parse_duration(text).with_context(|| format!("{field}: {text:?}"))?;
    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_boskos_config(text: &str) -> anyhow::Result<pb::PoolSyncRequest> {
        parse_pool_config(text)?
            .resources
            .context("no resources: in the config")
    }

    #[test]
    fn boskos_config_expands_names_and_expiries() {
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
        let dynamic = "resources:\n- type: gke\n  state: dirty\n  min-count: 1\n  max-count: 3\n  names: [g1]\n";
        let err = parse_boskos_config(dynamic).expect_err("dynamic with names");
        assert!(err.to_string().contains("drop names"), "{err}");
        let twice = "resources:\n- {type: a, state: free, names: [x]}\n- {type: b, state: free, names: [x]}\n";
        assert!(parse_boskos_config(twice).is_err());
    }
}

#[cfg(test)]
mod mason_config_tests {
    use super::*;

    #[test]
    fn dynamic_entries_become_dynamic_pools_and_their_needs_mason_configs() {
        let text = "resources:\n\
            - {type: aws-account, state: free, names: [account1, account2]}\n\
            - type: aws-cluster\n  state: dirty\n  min-count: 1\n  max-count: 2\n  lifespan: 48h\n  \
              needs: {aws-account: 1}\n  config: {type: AWSClusterCreator, content: '...'}\n";
        let config = parse_pool_config(text).expect("config");
        let msg = config.resources.expect("resources");
        assert_eq!(msg.resources.len(), 2);
        assert_eq!(
            msg.dynamic,
            [pb::PoolDynamic {
                r#type: "aws-cluster".into(),
                state: "dirty".into(),
                min_count: 1,
                max_count: 2,
                lifespan_ms: 48 * 3_600_000,
            }]
        );
        let virtuals = config.virtuals.expect("virtual configs").configs;
        assert_eq!(virtuals.len(), 1);
        assert_eq!(virtuals[0].name, "aws-cluster");
        assert_eq!(virtuals[0].needs["aws-account"], 1);
        assert_eq!(virtuals[0].config_type, "AWSClusterCreator");
        let static_lifespan = "resources:\n- {type: a, state: free, names: [x], lifespan: 1h}\n";
        assert!(parse_pool_config(static_lifespan).is_err());
    }

    #[test]
    fn mason_configs_parse_beside_or_without_resources() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/mason/pool.yaml"
        ))
        .expect("example");
        let config = parse_pool_config(&text).expect("config");
        assert_eq!(config.resources.expect("resources").resources.len(), 8);
        let virtuals = config.virtuals.expect("configs").configs;
        assert_eq!(virtuals.len(), 1);
        assert_eq!(virtuals[0].name, "gke-cluster");
        assert_eq!(virtuals[0].needs["gcp-project"], 2);
        assert_eq!(virtuals[0].config_type, "GCPResourceConfig");
        assert!(virtuals[0].config_content.contains("numnodes: 4"));
        // Only Mason's configs: the resources are left alone (no empty sync removing them all).
        let only = "configs:\n- name: v\n  needs: {a: 1}\n";
        let config = parse_pool_config(only).expect("configs only");
        assert!(config.resources.is_none());
        assert!(parse_pool_config("other: 1\n").is_err());
        assert!(parse_pool_config("{}\n").is_err());
    }
}
