//! `steward status NAME`: where a deployment stands (EMCO's status query), as tables or as the
//! exact JSON; and `steward deployment ...`: its life cycle and the reports rsync and cluster
//! monitors send, from flags or JSON/YAML files.

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::apply::read_input;
use super::render::{self, Table};
use super::{GlobalOpts, OutputFormat};
use crate::client::{Consistency, DeploymentStatus, DeploymentVerb};
use crate::proto::v1 as pb;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The deployment (intent group) name.
    pub name: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// summary: states and counts; all: and every resource; detail: and each resource's
    /// metadata, spec and status from its cluster; rsync: the AppContext's view.
    #[arg(long, default_value = "summary", value_parser = ["summary", "all", "detail", "rsync"])]
    pub mode: String,
    /// Only these apps (repeatable).
    #[arg(long = "app")]
    pub apps: Vec<String>,
    /// Only these clusters (repeatable).
    #[arg(long = "cluster")]
    pub clusters: Vec<String>,
    /// Only resources of these names (repeatable).
    #[arg(long = "resource")]
    pub resources: Vec<String>,
    /// Only resources of these Kinds (repeatable).
    #[arg(long = "kind")]
    pub kinds: Vec<String>,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum DeploymentCommand {
    /// Create a deployment (user state Created).
    Create(CreateArgs),
    /// Define AppContext resources from a file (a list of {app, cluster, GVK, Name, metadata,
    /// spec}), before instantiating.
    AddResources(FileArgs),
    /// Created -> Approved.
    Approve(NameArgs),
    /// Approved -> Instantiated; the AppContext starts Instantiating.
    Instantiate(NameArgs),
    /// Instantiated -> Terminated; the AppContext goes PreTerminate or Terminating.
    Terminate(NameArgs),
    /// Remove the deployment (no AppContext, or Terminated or TerminateFailed).
    Delete(NameArgs),
    /// rsync-status changes from a file (a list of {app, cluster, [GVK, Name,] status}).
    ReportRsync(FileArgs),
    /// rsync moves the AppContext: Terminating (from PreTerminate), InstantiateFailed,
    /// TerminateFailed.
    ReportContext(ContextArgs),
    /// ResourceBundleStates from a file (a list of {app, cluster, kinds, resources: [{GVK,
    /// Name, metadata, spec, status}], partial}).
    ReportCluster(FileArgs),
}

#[derive(Debug, clap::Args)]
pub struct NameArgs {
    pub name: String,
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub target: NameArgs,
    #[arg(long)]
    pub project: String,
    #[arg(long)]
    pub composite_app: String,
    #[arg(long)]
    pub composite_app_version: String,
    #[arg(long)]
    pub composite_profile: String,
    /// Labels of the mirror object, KEY=VALUE (repeatable).
    #[arg(short = 'l', long = "label")]
    pub labels: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct FileArgs {
    #[command(flatten)]
    pub target: NameArgs,
    /// JSON or YAML file, `-` for standard input.
    #[arg(short = 'f', long)]
    pub file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ContextArgs {
    #[command(flatten)]
    pub target: NameArgs,
    /// The AppContext state rsync reports.
    pub state: String,
}

pub async fn status(args: StatusArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let consistency = match args.serializable {
        true => Consistency::Serializable,
        false => Consistency::Linearizable,
    };
    let msg = pb::DeploymentStatusRequest {
        namespace: args.namespace,
        name: args.name,
        output: args.mode,
        apps: args.apps,
        clusters: args.clusters,
        resources: args.resources,
        kinds: args.kinds,
        consistency: consistency as i32,
    };
    let answer = global.client()?.deployment_status(msg, consistency).await?;
    let text = match global.output {
        OutputFormat::Table => status_tables(&answer),
        OutputFormat::Json => pretty_in_order(&answer.text)?,
        OutputFormat::Yaml => render::to_yaml(&answer.status)?,
    };
    print!("{text}");
    Ok(())
}

/// The server's JSON, indented, in its own key order (the seed's), with a trailing newline.
fn pretty_in_order(text: &str) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let mut ser = serde_json::Serializer::pretty(&mut out);
    serde_transcode::transcode(&mut de, &mut ser).context("the server's status JSON")?;
    let mut text = String::from_utf8(out).context("the server's status JSON")?;
    text.push('\n');
    Ok(text)
}

fn counts(v: &Value) -> String {
    match v.as_object() {
        Some(m) if !m.is_empty() => m
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect::<Vec<_>>()
            .join(" "),
        Some(_) => "-".to_string(),
        None => String::new(),
    }
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// The header table (name, states, counts), then one row per listed resource.
pub fn status_tables(answer: &DeploymentStatus) -> String {
    let s = &answer.status;
    let mut head = Table::new(&[
        "NAME",
        "PROJECT",
        "APP",
        "VERSION",
        "PROFILE",
        "STATE",
        "STATUS",
        "RSYNC",
        "CLUSTER",
        "READINESS",
    ]);
    let or_dash = |t: &str| {
        if t.is_empty() {
            "-".to_string()
        } else {
            t.to_string()
        }
    };
    head.row(vec![
        text(s, "name").to_string(),
        text(s, "project").to_string(),
        text(s, "composite-app-name").to_string(),
        text(s, "composite-app-version").to_string(),
        text(s, "composite-profile-name").to_string(),
        text(s, "state").to_string(),
        or_dash(text(s, "status")),
        counts(&s["rsync-status"]),
        or_dash(&counts(&s["cluster-status"])),
        or_dash(&counts(&s["readiness"])),
    ]);
    let mut out = head.render();
    let Some(apps) = s.get("resources").and_then(Value::as_array) else {
        return out;
    };
    let mut rows = Table::new(&[
        "APP",
        "CLUSTER",
        "KIND",
        "NAME",
        "RSYNC",
        "CLUSTER-STATUS",
        "READINESS",
    ]);
    for app in apps {
        for cluster in app["clusters"].as_array().into_iter().flatten() {
            for r in cluster["resources"].as_array().into_iter().flatten() {
                rows.row(vec![
                    text(app, "app-name").to_string(),
                    text(cluster, "name").to_string(),
                    r["GVK"]["Kind"].as_str().unwrap_or("").to_string(),
                    text(r, "Name").to_string(),
                    or_dash(text(r, "rsync-status")),
                    or_dash(text(r, "cluster-status")),
                    or_dash(text(r, "readiness")),
                ]);
            }
        }
    }
    out.push('\n');
    out.push_str(&rows.render());
    out
}

/// The file's items: a JSON or YAML list (or one item).
fn read_items<T: for<'de> Deserialize<'de>>(path: &PathBuf) -> anyhow::Result<Vec<T>> {
    let text = read_input(path)?;
    let value: Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not JSON or YAML", path.display()))?;
    let list = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    list.into_iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::from_value(v).with_context(|| format!("{}: item {i}", path.display()))
        })
        .collect()
}

#[derive(Deserialize)]
struct GvkIn {
    #[serde(rename = "Group", default)]
    group: String,
    #[serde(rename = "Version")]
    version: String,
    #[serde(rename = "Kind")]
    kind: String,
}

impl From<GvkIn> for pb::Gvk {
    fn from(g: GvkIn) -> pb::Gvk {
        pb::Gvk {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

fn json_text(v: &Option<Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(v) => v.to_string(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppResourceIn {
    app: String,
    cluster: String,
    #[serde(rename = "GVK")]
    gvk: GvkIn,
    #[serde(rename = "Name")]
    name: String,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    spec: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RsyncIn {
    app: String,
    cluster: String,
    #[serde(rename = "GVK", default)]
    gvk: Option<GvkIn>,
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "rsync-status")]
    status: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterResourceIn {
    #[serde(rename = "GVK")]
    gvk: GvkIn,
    #[serde(rename = "Name")]
    name: String,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    status: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BundleIn {
    app: String,
    cluster: String,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    resources: Vec<ClusterResourceIn>,
    #[serde(default)]
    partial: bool,
}

pub async fn run(cmd: DeploymentCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let (target, object) = match cmd {
        DeploymentCommand::Create(a) => {
            let mut labels = std::collections::HashMap::new();
            for l in &a.labels {
                let (k, v) = l
                    .split_once('=')
                    .with_context(|| format!("--label {l:?}: expected KEY=VALUE"))?;
                labels.insert(k.to_string(), v.to_string());
            }
            let msg = pb::CreateDeploymentRequest {
                namespace: a.target.namespace.clone(),
                name: a.target.name.clone(),
                project: a.project,
                composite_app: a.composite_app,
                composite_app_version: a.composite_app_version,
                composite_profile: a.composite_profile,
                labels,
            };
            (a.target, client.deployment_create(msg).await?)
        }
        DeploymentCommand::AddResources(a) => {
            let items: Vec<AppResourceIn> = read_items(&a.file)?;
            let msg = pb::AddDeploymentResourcesRequest {
                namespace: a.target.namespace.clone(),
                name: a.target.name.clone(),
                resources: items
                    .into_iter()
                    .map(|r| pb::DeploymentAppResource {
                        metadata_json: json_text(&r.metadata),
                        spec_json: json_text(&r.spec),
                        app: r.app,
                        cluster: r.cluster,
                        gvk: Some(r.gvk.into()),
                        name: r.name,
                    })
                    .collect(),
            };
            (a.target, client.deployment_add_resources(msg).await?)
        }
        DeploymentCommand::Approve(t) => act(&client, t, DeploymentVerb::Approve).await?,
        DeploymentCommand::Instantiate(t) => act(&client, t, DeploymentVerb::Instantiate).await?,
        DeploymentCommand::Terminate(t) => act(&client, t, DeploymentVerb::Terminate).await?,
        DeploymentCommand::Delete(t) => act(&client, t, DeploymentVerb::Delete).await?,
        DeploymentCommand::ReportRsync(a) => {
            let items: Vec<RsyncIn> = read_items(&a.file)?;
            let msg = pb::RsyncReportRequest {
                namespace: a.target.namespace.clone(),
                name: a.target.name.clone(),
                updates: items
                    .into_iter()
                    .map(|u| pb::RsyncUpdate {
                        app: u.app,
                        cluster: u.cluster,
                        gvk: u.gvk.map(Into::into),
                        resource_name: u.name,
                        status: u.status,
                    })
                    .collect(),
            };
            (a.target, client.deployment_report_rsync(msg).await?)
        }
        DeploymentCommand::ReportContext(a) => {
            let t = &a.target;
            let object = client
                .deployment_report_context(&t.namespace, &t.name, &a.state)
                .await?;
            (a.target, object)
        }
        DeploymentCommand::ReportCluster(a) => {
            let items: Vec<BundleIn> = read_items(&a.file)?;
            let msg = pb::ClusterReportRequest {
                namespace: a.target.namespace.clone(),
                name: a.target.name.clone(),
                bundles: items
                    .into_iter()
                    .map(|b| pb::ResourceBundle {
                        app: b.app,
                        cluster: b.cluster,
                        kinds: b.kinds,
                        partial: b.partial,
                        resources: b
                            .resources
                            .into_iter()
                            .map(|r| pb::ClusterResource {
                                metadata_json: json_text(&r.metadata),
                                spec_json: json_text(&r.spec),
                                status_json: json_text(&r.status),
                                gvk: Some(r.gvk.into()),
                                name: r.name,
                            })
                            .collect(),
                    })
                    .collect(),
            };
            (a.target, client.deployment_report_cluster(msg).await?)
        }
    };
    match global.output {
        OutputFormat::Table => {
            let status = &object["status"];
            println!(
                "deployment {}/{}: {} {}",
                target.namespace,
                target.name,
                text(status, "state"),
                text(status, "status")
            );
        }
        format => print!("{}", render::structured(&object, format)?),
    }
    Ok(())
}

async fn act(
    client: &crate::client::Client,
    target: NameArgs,
    verb: DeploymentVerb,
) -> anyhow::Result<(NameArgs, Value)> {
    let object = client
        .deployment_act(&target.namespace, &target.name, verb)
        .await?;
    Ok((target, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_output_keeps_the_servers_key_order() {
        let text = r#"{"name":"d","project":"p","rsync-status":{"Applied":1}}"#;
        let pretty = pretty_in_order(text).expect("json");
        let name = pretty.find("\"name\"").expect("name");
        let project = pretty.find("\"project\"").expect("project");
        assert!(name < project, "{pretty}");
        assert!(pretty.ends_with("}\n"));
    }

    #[test]
    fn tables_show_counts_and_one_row_per_resource() {
        let status = json!({
            "name": "vfw", "project": "p", "composite-app-name": "a",
            "composite-app-version": "v1", "composite-profile-name": "prof",
            "state": "Instantiated", "status": "Instantiating",
            "rsync-status": {"Applied": 1, "Pending": 1}, "cluster-status": {"Present": 1, "Unknown": 1},
            "readiness": {"Ready": 1, "Unknown": 1},
            "resources": [{"app-name": "a1", "clusters": [{"name": "c1", "resources": [
                {"GVK": {"Group": "apps", "Version": "v1", "Kind": "Deployment"}, "Name": "web",
                 "rsync-status": "Applied", "cluster-status": "Present", "readiness": "Ready"},
                {"GVK": {"Group": "", "Version": "v1", "Kind": "Pod"}, "Name": "web-1",
                 "cluster-status": "Present", "readiness": "Ready"}
            ]}]}]
        });
        let answer = DeploymentStatus {
            text: status.to_string(),
            status,
            revision: 3,
        };
        let out = status_tables(&answer);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{out}");
        assert!(lines[1].contains("Applied=1 Pending=1"), "{out}");
        assert!(lines[1].contains("Instantiating"), "{out}");
        assert!(lines[3].starts_with("APP"), "{out}");
        assert!(
            lines[4].contains("Deployment") && lines[4].contains("Ready"),
            "{out}"
        );
        // A cluster-only resource has no rsync-status.
        assert!(
            lines[5].contains("Pod") && lines[5].contains(" - "),
            "{out}"
        );
    }
}
