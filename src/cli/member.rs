//! `steward member ...`, `steward cluster status` and `steward cluster health`: membership
//! changes, the Raft view of the cluster, and each endpoint's grpc.health.v1 answer (what
//! readiness probes run), as tables or JSON/YAML (proto field names in lowerCamelCase).

use serde_json::{json, Value};

use super::render::{self, OutputFormat, Table};
use super::GlobalOpts;
use crate::client::{Client, ClusterStatusReply, MemberListReply, NodeStatus};
use crate::server::space::bytes;
use tonic_health::pb::health_check_response::ServingStatus;

#[derive(Debug, clap::Subcommand)]
pub enum MemberCommand {
    /// List members with the leader's view of their replication.
    List,
    /// Add a running node (started with `steward serve --id N ...` and no initial members) as a
    /// learner; returns once it has caught up.
    AddLearner {
        #[command(flatten)]
        id: MemberId,
        /// Its peer (Raft) address, host:port.
        #[arg(long)]
        peer_addr: String,
        /// Its client API address, host:port.
        #[arg(long)]
        client_addr: String,
    },
    /// Make a learner a voter.
    Promote {
        #[command(flatten)]
        id: MemberId,
    },
    /// Remove a voter or learner; its id is retired.
    Remove {
        #[command(flatten)]
        id: MemberId,
    },
    /// Hand leadership to another voter.
    TransferLeader {
        #[command(flatten)]
        id: NewLeaderId,
    },
}

/// A member id, given the way etcdctl takes it (`member remove 4`) or as `--id 4`: every member
/// command accepts both, so a habit from one command never fails on another.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct MemberId {
    /// The member's id.
    #[arg(value_name = "ID")]
    positional: Option<u64>,
    /// The member's id, as a flag (the same as the positional ID).
    #[arg(long = "id", value_name = "ID")]
    flag: Option<u64>,
}

impl MemberId {
    fn get(&self) -> u64 {
        // The group is required and takes one of the two, so one is set; 0 is no member id and
        // the server refuses it with a message naming the field.
        self.positional.or(self.flag).unwrap_or(0)
    }
}

/// `transfer-leader`'s optional target: positional or `--id`, at most one; none picks the most
/// up-to-date other voter.
#[derive(Debug, clap::Args)]
#[group(required = false, multiple = false)]
pub struct NewLeaderId {
    /// The new leader; omit to pick the most up-to-date other voter.
    #[arg(value_name = "ID")]
    positional: Option<u64>,
    /// The new leader, as a flag (the same as the positional ID).
    #[arg(long = "id", value_name = "ID")]
    flag: Option<u64>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Every node's Raft state: role, term, log indexes, applied revision.
    Status,
    /// Whether each of --endpoints is SERVING (grpc.health.v1: it can answer a linearizable
    /// read); exits 1 unless all are. A readiness probe over TLS:
    /// steward --endpoints 127.0.0.1:7000 --cacert ca.pem --cert c.pem --key c-key.pem cluster health
    Health,
}

/// `steward member ...`.
pub async fn run_member(cmd: MemberCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let (reply, done) = match cmd {
        MemberCommand::List => (client.member_list().await?, None),
        MemberCommand::AddLearner {
            id,
            peer_addr,
            client_addr,
        } => {
            let id = id.get();
            let reply = client.add_learner(id, &peer_addr, &client_addr).await?;
            (reply, Some(format!("Member {id} added as a learner")))
        }
        MemberCommand::Promote { id } => (
            client.promote(id.get()).await?,
            Some(format!("Member {} promoted to voter", id.get())),
        ),
        MemberCommand::Remove { id } => (
            client.remove_member(id.get()).await?,
            Some(format!("Member {} removed", id.get())),
        ),
        MemberCommand::TransferLeader { id } => {
            let target = id.positional.or(id.flag);
            let reply = client.transfer_leader(target.unwrap_or(0)).await?;
            let leader = reply.leader_id;
            (reply, Some(format!("Leader is now member {leader}")))
        }
    };
    match global.output {
        OutputFormat::Table => {
            if let Some(line) = done {
                println!("{line}");
            }
            print!("{}", member_table(&reply).render());
        }
        format => print!("{}", render::structured(&member_list_json(&reply), format)?),
    }
    Ok(())
}

/// `steward cluster ...`.
pub async fn run_cluster(cmd: ClusterCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    match cmd {
        ClusterCommand::Status => {
            let reply = client.cluster_status().await?;
            match global.output {
                OutputFormat::Table => {
                    print!("{}", status_table(&reply).render());
                    for w in &reply.warnings {
                        println!("WARNING: {w}");
                    }
                }
                format => print!(
                    "{}",
                    render::structured(&cluster_status_json(&reply), format)?
                ),
            }
        }
        ClusterCommand::Health => {
            let results = endpoint_health(&client).await;
            match global.output {
                OutputFormat::Table => print!("{}", health_table(&results).render()),
                format => print!("{}", render::structured(&health_json(&results), format)?),
            }
            let bad = results
                .iter()
                .filter(|(_, r)| !matches!(r, Ok(ServingStatus::Serving)))
                .count();
            if bad > 0 {
                anyhow::bail!("{bad} of {} endpoint(s) not serving", results.len());
            }
        }
    }
    Ok(())
}

/// What each endpoint's health service answers, asked of all at once, each on its own (no
/// failover); an error is the one-line description of why it did not answer.
async fn endpoint_health(client: &Client) -> Vec<(String, Result<ServingStatus, String>)> {
    let checks = client
        .endpoints()
        .into_iter()
        .enumerate()
        .map(|(i, endpoint)| {
            let pinned = client.with_endpoint_index(i);
            async move {
                let answer = match pinned {
                    Some(node) => node
                        .health()
                        .await
                        .map_err(|status| super::describe_status(&status)),
                    None => Err("no such endpoint".to_string()),
                };
                (endpoint, answer)
            }
        });
    futures::future::join_all(checks).await
}

/// `serving`, `not-serving`, ... as the health table writes them.
fn health_word(status: ServingStatus) -> &'static str {
    match status {
        ServingStatus::Serving => "serving",
        ServingStatus::NotServing => "not-serving",
        ServingStatus::ServiceUnknown => "service-unknown",
        ServingStatus::Unknown => "unknown",
    }
}

/// ENDPOINT HEALTH ERROR, one row per endpoint.
pub fn health_table(results: &[(String, Result<ServingStatus, String>)]) -> Table {
    let mut table = Table::new(&["ENDPOINT", "HEALTH", "ERROR"]);
    for (endpoint, answer) in results {
        let (health, error) = match answer {
            Ok(status) => (health_word(*status), String::new()),
            Err(error) => ("unreachable", error.clone()),
        };
        table.row(vec![endpoint.clone(), health.to_string(), error]);
    }
    table
}

/// The health answers as `[{endpoint, health, error}]`.
pub fn health_json(results: &[(String, Result<ServingStatus, String>)]) -> Value {
    let endpoints: Vec<Value> = results
        .iter()
        .map(|(endpoint, answer)| match answer {
            Ok(status) => {
                json!({"endpoint": endpoint, "health": health_word(*status), "error": ""})
            }
            Err(error) => json!({"endpoint": endpoint, "health": "unreachable", "error": error}),
        })
        .collect();
    json!({ "endpoints": endpoints })
}

/// ID PEER CLIENT ROLE LEADER TERM MATCHED APPLIED LAG REACHABLE, leader marked with `*`.
pub fn member_table(reply: &MemberListReply) -> Table {
    let mut table = Table::new(&[
        "ID",
        "PEER",
        "CLIENT",
        "ROLE",
        "LEADER",
        "TERM",
        "MATCHED",
        "APPLIED",
        "LAG",
        "REACHABLE",
    ]);
    for m in &reply.members {
        table.row(vec![
            m.id.to_string(),
            m.peer_addr.clone(),
            m.client_addr.clone(),
            if m.voter { "voter" } else { "learner" }.to_string(),
            if m.leader { "*" } else { "" }.to_string(),
            m.term.to_string(),
            m.matched_index.to_string(),
            m.applied_index.to_string(),
            m.lag.to_string(),
            if m.reachable { "yes" } else { "no" }.to_string(),
        ]);
    }
    table
}

/// One row per node: how it sees itself (or why it did not answer).
pub fn status_table(reply: &ClusterStatusReply) -> Table {
    let mut table = Table::new(&[
        "ID",
        "PID",
        "CLIENT",
        "STATE",
        "LEADER",
        "TERM",
        "LAST-LOG",
        "COMMITTED",
        "APPLIED",
        "SNAPSHOT",
        "PURGED",
        "REVISION",
        "HEALTH",
        "DATA/QUOTA",
        "DISK",
        "ERROR",
    ]);
    for n in &reply.nodes {
        let marker = if n.id == reply.leader_id && reply.leader_id != 0 {
            "*"
        } else {
            ""
        };
        table.row(vec![
            n.id.to_string(),
            match n.pid {
                0 => "-".to_string(),
                pid => pid.to_string(),
            },
            n.client_addr.clone(),
            n.state.clone(),
            format!("{}{marker}", n.leader_id),
            n.term.to_string(),
            n.last_log_index.to_string(),
            n.committed_index.to_string(),
            n.applied_index.to_string(),
            n.snapshot_index.to_string(),
            n.purged_index.to_string(),
            n.revision.to_string(),
            match (n.state.as_str(), n.serving) {
                ("unreachable", _) => "-",
                (_, true) => "serving",
                (_, false) => "not-serving",
            }
            .to_string(),
            data_cell(n),
            disk_cell(n),
            n.error.clone(),
        ]);
    }
    table
}

/// "1.2 MiB/2.0 GiB" (data dir, limits.quota_bytes), or "-" when the node did not say.
fn data_cell(n: &NodeStatus) -> String {
    if n.quota_bytes == 0 {
        return "-".to_string();
    }
    format!("{}/{}", bytes(n.data_bytes), bytes(n.quota_bytes))
}

/// "37% of 250G used", or "-" when the node did not say.
fn disk_cell(n: &NodeStatus) -> String {
    if n.disk_total_bytes == 0 {
        return "-".to_string();
    }
    let used = n.disk_total_bytes.saturating_sub(n.disk_free_bytes);
    format!(
        "{}% of {}G used",
        used.saturating_mul(100) / n.disk_total_bytes,
        n.disk_total_bytes >> 30
    )
}

/// The member list in proto3 JSON naming.
pub fn member_list_json(reply: &MemberListReply) -> Value {
    let members: Vec<Value> = reply
        .members
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "peerAddr": m.peer_addr,
                "clientAddr": m.client_addr,
                "voter": m.voter,
                "leader": m.leader,
                "term": m.term,
                "matchedIndex": m.matched_index,
                "appliedIndex": m.applied_index,
                "lag": m.lag,
                "reachable": m.reachable,
            })
        })
        .collect();
    json!({
        "leaderId": reply.leader_id,
        "term": reply.term,
        "lastLogIndex": reply.last_log_index,
        "members": members,
    })
}

/// The cluster status in proto3 JSON naming.
pub fn cluster_status_json(reply: &ClusterStatusReply) -> Value {
    let nodes: Vec<Value> = reply
        .nodes
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "peerAddr": n.peer_addr,
                "clientAddr": n.client_addr,
                "state": n.state,
                "term": n.term,
                "leaderId": n.leader_id,
                "lastLogIndex": n.last_log_index,
                "committedIndex": n.committed_index,
                "appliedIndex": n.applied_index,
                "snapshotIndex": n.snapshot_index,
                "purgedIndex": n.purged_index,
                "revision": n.revision,
                "error": n.error,
                "serving": n.serving,
                "voter": n.voter,
                "diskTotalBytes": n.disk_total_bytes,
                "diskFreeBytes": n.disk_free_bytes,
                "dataBytes": n.data_bytes,
                "quotaBytes": n.quota_bytes,
                "pid": n.pid,
                "wallMs": n.wall_ms,
                "clusterMs": n.cluster_ms,
            })
        })
        .collect();
    json!({
        "leaderId": reply.leader_id,
        "nodes": nodes,
        "warnings": reply.warnings,
        "alarms": super::alarm::alarms_json(&reply.alarms)["alarms"],
    })
}

#[cfg(test)]
mod tests;
