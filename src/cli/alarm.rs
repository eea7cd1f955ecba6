//! `steward alarm list|disarm` and `steward compact`: the NOSPACE alarm a node raises when its
//! data dir outgrows `limits.quota_bytes` (or its disk runs short of `limits.disk_reserve_bytes`),
//! and winning the space back, as etcdctl's `alarm list|disarm` and `compact` + `defrag` do.

use std::time::Duration;

use serde_json::{json, Value};

use super::render::{self, Table};
use super::{GlobalOpts, OutputFormat};
use crate::client::{Alarm, CompactReply};
use crate::server::space::bytes;

/// The least time `steward compact` gives the cluster, whatever `--timeout` says: each node
/// builds a snapshot and rewrites its database file.
pub const COMPACT_TIMEOUT_MIN: Duration = Duration::from_secs(600);

#[derive(Debug, clap::Subcommand)]
pub enum AlarmCommand {
    /// The raised alarms.
    #[command(alias = "ls")]
    List,
    /// Clear alarms (admin). A node still over its quota raises its alarm again within
    /// limits.space_check_interval_ms: free space first (delete, `steward compact`).
    Disarm(DisarmArgs),
}

#[derive(Debug, clap::Args)]
pub struct DisarmArgs {
    /// Only this node's alarms (default: every node's).
    #[arg(long)]
    pub node: Option<u64>,
    /// Only alarms of this kind: NOSPACE (default: every kind).
    #[arg(long)]
    pub kind: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// Compact only this node (repeat for more; default: every member, one after another).
    #[arg(long = "node")]
    pub nodes: Vec<u64>,
}

/// `steward alarm ...`.
pub async fn run_alarm(cmd: AlarmCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let reply = match cmd {
        AlarmCommand::List => client.alarms().await?,
        AlarmCommand::Disarm(args) => {
            let kind = args.kind.unwrap_or_default();
            let reply = client.alarm_disarm(args.node.unwrap_or(0), &kind).await?;
            if global.output == OutputFormat::Table {
                println!("Disarmed; {} alarm(s) still raised", reply.alarms.len());
            }
            reply
        }
    };
    match global.output {
        OutputFormat::Table if reply.alarms.is_empty() => println!("No alarms."),
        OutputFormat::Table => print!("{}", alarm_table(&reply.alarms).render()),
        format => print!(
            "{}",
            render::structured(&alarms_json(&reply.alarms), format)?
        ),
    }
    Ok(())
}

/// `steward compact`: exits 1 if any node could not be compacted.
pub async fn run_compact(args: CompactArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global
        .client()?
        .with_timeout(global.timeout.max(COMPACT_TIMEOUT_MIN));
    let reply = client.compact(&args.nodes).await?;
    match global.output {
        OutputFormat::Table => print!("{}", compact_table(&reply).render()),
        format => print!("{}", render::structured(&compact_json(&reply), format)?),
    }
    let failed = reply.nodes.iter().filter(|n| !n.error.is_empty()).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} node(s) not compacted", reply.nodes.len());
    }
    Ok(())
}

/// NODE KIND RAISED REASON.
pub fn alarm_table(alarms: &[Alarm]) -> Table {
    let mut table = Table::new(&["NODE", "KIND", "RAISED", "REASON"]);
    for a in alarms {
        table.row(vec![
            a.node_id.to_string(),
            a.kind.clone(),
            rfc3339(a.raised_ms),
            a.reason.clone(),
        ]);
    }
    table
}

/// `{"alarms": [{nodeId, kind, raisedMs, reason}]}` (proto3 JSON naming).
pub fn alarms_json(alarms: &[Alarm]) -> Value {
    let alarms: Vec<Value> = alarms
        .iter()
        .map(|a| {
            json!({
                "nodeId": a.node_id,
                "kind": a.kind,
                "raisedMs": a.raised_ms,
                "reason": a.reason,
            })
        })
        .collect();
    json!({ "alarms": alarms })
}

/// NODE SNAPSHOT PURGED BEFORE AFTER TOOK ERROR.
pub fn compact_table(reply: &CompactReply) -> Table {
    let mut table = Table::new(&[
        "NODE", "SNAPSHOT", "PURGED", "BEFORE", "AFTER", "TOOK", "ERROR",
    ]);
    for n in &reply.nodes {
        if n.error.is_empty() {
            table.row(vec![
                n.node_id.to_string(),
                n.snapshot_index.to_string(),
                n.purged_index.to_string(),
                bytes(n.data_bytes_before),
                bytes(n.data_bytes_after),
                format!("{} ms", n.duration_ms),
                String::new(),
            ]);
        } else {
            let dash = || "-".to_string();
            table.row(vec![
                n.node_id.to_string(),
                dash(),
                dash(),
                dash(),
                dash(),
                dash(),
                n.error.clone(),
            ]);
        }
    }
    table
}

/// `{"nodes": [...]}` (proto3 JSON naming).
pub fn compact_json(reply: &CompactReply) -> Value {
    let nodes: Vec<Value> = reply
        .nodes
        .iter()
        .map(|n| {
            json!({
                "nodeId": n.node_id,
                "snapshotIndex": n.snapshot_index,
                "purgedIndex": n.purged_index,
                "dataBytesBefore": n.data_bytes_before,
                "dataBytesAfter": n.data_bytes_after,
                "durationMs": n.duration_ms,
                "error": n.error,
            })
        })
        .collect();
    json!({ "nodes": nodes })
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::NodeCompaction;

    #[test]
    fn alarms_render_as_table_and_json() {
        let alarms = vec![Alarm {
            node_id: 2,
            kind: "NOSPACE".into(),
            raised_ms: 1_764_064_800_000,
            reason: "data dir holds 9.0 MiB".into(),
        }];
        assert_eq!(
            alarm_table(&alarms).render(),
            "NODE   KIND      RAISED                 REASON\n\
             2      NOSPACE   2025-11-25T10:00:00Z   data dir holds 9.0 MiB\n"
        );
        assert_eq!(
            alarms_json(&alarms),
            json!({"alarms": [{"nodeId": 2, "kind": "NOSPACE", "raisedMs": 1_764_064_800_000u64,
                               "reason": "data dir holds 9.0 MiB"}]})
        );
    }

    #[test]
    fn compactions_show_sizes_or_the_error() {
        let reply = CompactReply {
            nodes: vec![
                NodeCompaction {
                    node_id: 1,
                    snapshot_index: 40,
                    purged_index: 40,
                    data_bytes_before: 9 << 20,
                    data_bytes_after: 1536 << 10,
                    duration_ms: 12,
                    error: String::new(),
                },
                NodeCompaction {
                    node_id: 3,
                    error: "connection refused".into(),
                    ..Default::default()
                },
            ],
        };
        assert_eq!(
            compact_table(&reply).render(),
            "NODE   SNAPSHOT   PURGED   BEFORE    AFTER     TOOK    ERROR\n\
             1      40         40       9.0 MiB   1.5 MiB   12 ms\n\
             3      -          -        -         -         -       connection refused\n"
        );
        assert_eq!(
            compact_json(&reply)["nodes"][1]["error"],
            "connection refused"
        );
    }
}
