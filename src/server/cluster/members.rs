//! Membership changes, on the leader: add a learner, promote it, remove a member, hand the
//! leadership to another voter; one at a time, under the node's membership lock.

use crate::state::MemberCommand;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tonic::{Request, Response as GrpcResponse, Status};

use super::ClusterService;
use crate::proto::v1::*;
use crate::raft::types::{may_change_membership, ChangeMembers, NodeAddr, NodeId, WatchReceiver};
use crate::server::auth;
use crate::server::errors;
use crate::state::Rejection;

impl ClusterService {
    pub(crate) fn members(&self) -> BTreeMap<NodeId, (NodeAddr, bool)> {
        let m = self.node.raft.metrics();
        let m = m.borrow_watched();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, addr)| (*id, (addr.clone(), voters.contains(id))))
            .collect()
    }

    pub(super) async fn member_list_local(&self) -> MemberListReply {
        let views = self.all_views().await;
        let (term, last_log, leader, replication) = {
            let m = self.node.raft.metrics();
            let m = m.borrow_watched();
            let replication: BTreeMap<NodeId, u64> = m
                .replication
                .as_ref()
                .map(|r| {
                    r.iter()
                        .map(|(id, l)| (*id, l.as_ref().map(|l| l.index).unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default();
            (
                m.current_term,
                m.last_log_index.unwrap_or(0),
                m.current_leader,
                replication,
            )
        };
        let members = views
            .into_iter()
            .map(|(id, addr, voter, view)| {
                let matched = if id == self.node.id {
                    last_log
                } else {
                    replication.get(&id).copied().unwrap_or(0)
                };
                Member {
                    id,
                    peer_addr: addr.peer_addr,
                    client_addr: addr.client_addr,
                    voter,
                    leader: leader == Some(id),
                    term: view.as_ref().map(|v| v.term).unwrap_or(0),
                    matched_index: matched,
                    applied_index: view.as_ref().map(|v| v.applied_index).unwrap_or(0),
                    lag: last_log.saturating_sub(matched),
                    reachable: view.is_ok(),
                }
            })
            .collect();
        MemberListReply {
            members,
            leader_id: leader.unwrap_or(0),
            term,
            last_log_index: last_log,
        }
    }

    /// How long AddLearner waits for the new learner to catch up.
    pub(super) fn catch_up_timeout(&self) -> Duration {
        Duration::from_millis(self.node.config.raft.election_timeout_ms_max * 10)
    }

    /// Refuses a membership change on a leader that is not a voter of its own membership: it
    /// removed itself, and leads only until that removal is committed or another node is
    /// elected. Called under the membership lock, so no change of this node's moves it meanwhile.
    fn leading_voter(&self) -> Result<(), Status> {
        let m = self.node.raft.metrics();
        if may_change_membership(&m.borrow_watched(), self.node.id) {
            return Ok(());
        }
        Err(errors::unavailable(
            format!(
                "node {} is not a leading voter (it removed itself and leads only until another \
                 node is elected); retry",
                self.node.id
            ),
            None,
        ))
    }

    pub(super) fn busy() -> Status {
        errors::change_in_progress(
            "another membership change is in progress; retry when it has finished",
        )
    }

    /// `AddLearner` on the leader (the service has proxied it here when another node leads).
    pub(super) async fn add_learner_here(
        &self,
        r: Request<AddLearnerRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        let req = r.into_inner();
        if req.id == 0 {
            return Err(errors::invalid("id", "must be >= 1"));
        }
        for (field, addr) in [
            ("peer_addr", &req.peer_addr),
            ("client_addr", &req.client_addr),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(errors::invalid(
                    field,
                    format!("must be ip:port, got {addr:?}"),
                ));
            }
        }
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        self.leading_voter()?;
        if self.node.state().is_retired(req.id) {
            return Err(errors::rejection(&Rejection::NodeRetired {
                node_id: req.id,
            }));
        }
        if self.members().contains_key(&req.id) {
            return Err(errors::already_exists(
                "member",
                req.id,
                format!("node {} is already a member", req.id),
            ));
        }
        let addr = NodeAddr {
            peer_addr: req.peer_addr,
            client_addr: req.client_addr,
        };
        tracing::info!(id = req.id, %addr, "adding learner");
        let added = self
            .node
            .raft
            .add_learner(req.id, addr, false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        // Return once the learner holds the log up to its own membership entry. Bounded, so a
        // learner that never answers cannot hold the membership lock for ever.
        let target = added.log_id.index;
        let id = req.id;
        self.node
            .raft
            .wait(Some(self.catch_up_timeout()))
            .metrics(
                |m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&id))
                        .is_some_and(|l| l.as_ref().is_some_and(|l| l.index >= target))
                },
                "learner caught up",
            )
            .await
            .map_err(|_| {
                errors::not_settled(
                    id,
                    format!(
                        "node {id} was added as a learner but has not caught up with the log \
                         within {:?}; check that it runs and that its peer_addr is reachable",
                        self.catch_up_timeout()
                    ),
                )
            })?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    /// `Promote` on the leader (the service has proxied it here when another node leads).
    pub(super) async fn promote_here(
        &self,
        r: Request<PromoteRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        let id = r.into_inner().id;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        self.leading_voter()?;
        match self.members().get(&id) {
            None => {
                return Err(errors::not_found(
                    "member",
                    id,
                    format!("node {id} is not a member; add it as a learner first"),
                ))
            }
            Some((_, true)) => {
                return Err(errors::already_exists(
                    "voter",
                    id,
                    format!("node {id} is already a voter"),
                ))
            }
            Some((_, false)) => {}
        }
        tracing::info!(id, "promoting learner to voter");
        self.node
            .raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    /// `RemoveMember` on the leader (the service has proxied it here when another node leads).
    pub(super) async fn remove_member_here(
        &self,
        r: Request<RemoveMemberRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        let id = r.into_inner().id;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        self.leading_voter()?;
        let members = self.members();
        let voter = match members.get(&id) {
            None => {
                return Err(errors::not_found(
                    "member",
                    id,
                    format!("node {id} is not a member"),
                ))
            }
            Some((_, voter)) => *voter,
        };
        if voter && members.values().filter(|(_, v)| *v).count() == 1 {
            return Err(errors::membership(
                Some(id),
                format!("node {id} is the last voter; it cannot be removed"),
            ));
        }
        // Retire the id first: even if the removal below fails half-way, the id is never reused.
        self.node
            .propose(MemberCommand::Retire { node_id: id })
            .await?;
        tracing::info!(id, voter, "removing member");
        let change = if voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.node
            .raft
            .change_membership(change, false)
            .await
            .map_err(|e| errors::client_write(&e))?;
        Ok(GrpcResponse::new(self.member_list_local().await))
    }

    /// `TransferLeader` on the leader (the service has proxied it here when another node leads).
    pub(super) async fn transfer_leader_here(
        &self,
        r: Request<TransferLeaderRequest>,
    ) -> Result<GrpcResponse<MemberListReply>, Status> {
        let list_request = auth::delegated(&r, MemberListRequest {});
        let mut to = r.into_inner().to;
        let _guard = self
            .node
            .membership_lock
            .try_lock()
            .map_err(|_| Self::busy())?;
        let members = self.members();
        if to == 0 {
            // The most up-to-date other voter.
            let list = self.member_list_local().await;
            to = list
                .members
                .iter()
                .filter(|m| m.voter && m.id != self.node.id)
                .max_by_key(|m| (m.matched_index, std::cmp::Reverse(m.id)))
                .map(|m| m.id)
                .ok_or_else(|| {
                    errors::membership(None, "there is no other voter to transfer leadership to")
                })?;
        }
        match members.get(&to) {
            Some((_, true)) => {}
            _ => {
                return Err(errors::membership(
                    Some(to),
                    format!("node {to} is not a voter"),
                ))
            }
        }
        if to == self.node.id {
            return Ok(GrpcResponse::new(self.member_list_local().await));
        }
        tracing::info!(to, "transferring leadership");
        self.node
            .raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| errors::unavailable(format!("raft stopped: {e}"), None))?;
        let timeout = Duration::from_millis(self.node.config.raft.election_timeout_ms_max * 5 / 2);
        self.node
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader == Some(to), "leader transferred")
            .await
            .map_err(|e| {
                errors::not_settled(to, format!("leadership did not move to node {to}: {e}"))
            })?;
        drop(_guard);
        // This node is no longer the leader: answer with the new leader's view.
        if let Some(mut leader) = self.leader_proxy().await? {
            return leader.member_list(list_request).await;
        }
        Ok(GrpcResponse::new(self.member_list_local().await))
    }
}
