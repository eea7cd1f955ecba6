//! The cluster page: members, roles, leader and term, each node's commit and apply lag,
//! health, disk against its quota, alarms, and the leader changes this node saw.

use maud::{html, Markup};

use super::parts::{since, LeaderChange};
use crate::proto::v1::ClusterStatusReply;

pub(super) fn cluster(reply: &ClusterStatusReply, leaders: &[LeaderChange], now: u64) -> Markup {
    let committed = reply
        .nodes
        .iter()
        .map(|n| n.committed_index)
        .max()
        .unwrap_or(0);
    html! {
        h1 { "Cluster" }
        p.summary {
            @match reply.leader_id {
                0 => { strong.bad { "No leader" } " known to this node." }
                id => { "Leader: " strong #leader { "node " (id) } }
            }
            " · " (reply.nodes.len()) " members"
        }
        @if !reply.warnings.is_empty() {
            section aria-labelledby="warnings" {
                h2 #warnings { "Warnings" }
                ul.warnings { @for w in &reply.warnings { li { (w) } } }
            }
        }
        table #members {
            caption { "Members" }
            thead { tr {
                th { "Node" } th { "Role" } th { "Health" } th { "Term" } th { "Applied" }
                th { "Behind commit" } th { "Data / quota" } th { "Disk free" } th { "Client address" }
            } }
            tbody {
                @for n in &reply.nodes {
                    @let down = n.state == "unreachable";
                    @let health = if down { "down" } else if n.serving { "serving" } else { "not-serving" };
                    tr data-node=(n.id) data-state=(n.state) data-health=(health) {
                        td { (n.id) }
                        td { (n.state) @if !n.voter { " (learner)" } }
                        td {
                            @if down { span.bad { "down" } " " span.detail { (n.error) } }
                            @else if n.serving { span.good { "serving" } }
                            @else { span.bad { "not serving" } }
                        }
                        td { @if !down { (n.term) } }
                        td { @if !down { (n.applied_index) } }
                        td { @if !down { (committed.saturating_sub(n.applied_index)) } }
                        td { @if !down { (bytes(n.data_bytes)) " / " (bytes(n.quota_bytes)) } }
                        td { @if !down { (bytes(n.disk_free_bytes)) } }
                        td { (n.client_addr) }
                    }
                }
            }
        }
        @if !reply.alarms.is_empty() {
            table #alarms {
                caption { "Alarms" }
                thead { tr { th { "Node" } th { "Alarm" } th { "Reason" } } }
                tbody { @for a in &reply.alarms { tr { td { (a.node_id) } td { (a.kind) } td { (a.reason) } } } }
            }
        }
        table #leaders {
            caption { "Leader changes seen by this node (newest first)" }
            thead { tr { th { "Term" } th { "Leader" } th { "When" } } }
            tbody {
                @for c in leaders {
                    tr {
                        td { (c.term) }
                        td { @match c.leader { Some(id) => { "node " (id) }, None => { "none" } } }
                        td { (since(now.saturating_sub(c.at.elapsed().as_millis() as u64), now)) " ago" }
                    }
                }
            }
        }
    }
}

/// `n` bytes as KiB, MiB, GiB.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}
