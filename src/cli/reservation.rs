//! `steward reservation counters`: what is reserved on each node (ThreeFold's counters of
//! workloads and resource units), as a table or as exact JSON.

use serde_json::{json, Value};

use super::render::{self, Table};
use super::{GlobalOpts, OutputFormat};
use crate::client::{Consistency, NodeReservations, ReservationCountersReply, ReservedUnits};

#[derive(Debug, clap::Subcommand)]
pub enum ReservationCommand {
    /// Workloads and units (CRU, MRU, HRU, SRU) reserved per node, with the total.
    Counters(CountersArgs),
}

#[derive(Debug, clap::Args)]
pub struct CountersArgs {
    /// Only this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

pub async fn run(cmd: ReservationCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let ReservationCommand::Counters(args) = cmd;
    let consistency = match args.serializable {
        true => Consistency::Serializable,
        false => Consistency::Linearizable,
    };
    let client = global.client()?;
    let node = args.node.as_deref().unwrap_or("");
    let reply = client.reservation_counters(node, consistency).await?;
    let text = match global.output {
        OutputFormat::Table if reply.nodes.is_empty() => {
            eprintln!("No reservations");
            String::new()
        }
        OutputFormat::Table => counters_table(&reply).render(),
        format => render::structured(&counters_json(&reply), format)?,
    };
    print!("{text}");
    Ok(())
}

fn row(name: &str, n: &NodeReservations) -> Vec<String> {
    let units = n.units.unwrap_or_default();
    let kinds: Vec<String> = n
        .workloads_by_kind
        .iter()
        .map(|(kind, count)| format!("{kind}={count}"))
        .collect();
    vec![
        name.to_string(),
        n.workloads.to_string(),
        units.cru.to_string(),
        units.mru.to_string(),
        units.hru.to_string(),
        units.sru.to_string(),
        kinds.join(","),
    ]
}

/// One row per node, then the total when there is more than one node.
pub fn counters_table(reply: &ReservationCountersReply) -> Table {
    let headers = ["NODE", "WORKLOADS", "CRU", "MRU", "HRU", "SRU", "KINDS"];
    let mut table = Table::new(&headers);
    for n in &reply.nodes {
        table.row(row(&n.node_id, n));
    }
    if let (Some(total), true) = (&reply.total, reply.nodes.len() > 1) {
        table.row(row("(total)", total));
    }
    table
}

fn units_json(u: Option<&ReservedUnits>) -> Value {
    let u = u.copied().unwrap_or_default();
    json!({ "cru": u.cru, "mru": u.mru, "hru": u.hru, "sru": u.sru })
}

fn node_json(n: &NodeReservations) -> Value {
    json!({
        "nodeId": n.node_id,
        "workloads": n.workloads,
        "workloadsByKind": n.workloads_by_kind,
        "units": units_json(n.units.as_ref()),
    })
}

pub fn counters_json(reply: &ReservationCountersReply) -> Value {
    let total = reply.total.clone().unwrap_or_default();
    json!({
        "nodes": reply.nodes.iter().map(node_json).collect::<Vec<_>>(),
        "total": {
            "workloads": total.workloads,
            "workloadsByKind": total.workloads_by_kind,
            "units": units_json(total.units.as_ref()),
        },
        "pendingDecommission": reply.pending_decommission,
        "revision": reply.revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, workloads: u64, cru: u64) -> NodeReservations {
        NodeReservations {
            node_id: id.into(),
            workloads,
            workloads_by_kind: [("Container".to_string(), workloads)].into(),
            units: Some(ReservedUnits {
                cru,
                mru: 2,
                hru: 0,
                sru: 5,
            }),
        }
    }

    #[test]
    fn table_has_a_row_per_node_and_a_total_and_json_is_exact() {
        let reply = ReservationCountersReply {
            nodes: vec![node("n1", 2, 3), node("n2", 1, 1)],
            total: Some(NodeReservations {
                node_id: String::new(),
                ..node("", 3, 4)
            }),
            pending_decommission: 2,
            revision: 41,
        };
        let text = counters_table(&reply).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("NODE"));
        assert!(
            lines[1].starts_with("n1 ") && lines[1].contains("Container=2"),
            "{text}"
        );
        assert!(lines[3].starts_with("(total)"), "{text}");
        let json = counters_json(&reply);
        assert_eq!(
            json["nodes"][0]["units"],
            json!({"cru": 3, "mru": 2, "hru": 0, "sru": 5})
        );
        assert_eq!(json["total"]["workloads"], 3);
        assert_eq!(json["pendingDecommission"], 2);
        assert_eq!(json["revision"], 41);
        // One node: no total row.
        let one = ReservationCountersReply {
            nodes: vec![node("n1", 2, 3)],
            ..reply
        };
        assert_eq!(counters_table(&one).render().lines().count(), 2);
    }
}
