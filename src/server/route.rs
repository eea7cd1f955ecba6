//! A write's way to the leader, and the one rule that keeps it from taking effect twice.
//!
//! Any node takes any write (`Node::propose_command`): it proposes the write itself while it
//! leads, forwards it to the leader otherwise, and holds it across an election, sending it to
//! the next leader, for as long as the caller waits. A write is sent again only when it is
//! certain that no leader appended it: the node asked was not the leader and said so, or the
//! forward never reached a leader at all (`ForwardError::NotSent`). Once a leader may have it
//! (the forward's answer was lost, or the leader discarded the entry in a change of leader) the
//! write's outcome is unknown, and it is never sent again: the first copy may still commit.
//!
//! The loop is generic over [`Route`], how one node proposes and forwards, so that the
//! simulator (sim/) runs this same code over its simulated network: `Node` routes over gRPC
//! (`forward::Forwarder`), the simulator hands the leader its proposal in a simulated message.

use std::future::Future;
use std::time::Duration;

use tonic::Status;

use crate::raft::types::{
    ClientWriteError, ForwardToLeader, NodeAddr, NodeId, Raft, RaftError, WatchReceiver,
};
use crate::server::errors;
use crate::server::forward::{ForwardError, ForwardReply};
use crate::server::node::LocalProposeError;
use crate::server::time::ClusterClock;
use crate::state::{Command, Proposal, Response};

/// The first pause before a write that no leader took is sent again (doubling, up to
/// `RESEND_PAUSE_MAX`), unless the leader changes sooner.
pub const RESEND_PAUSE_MIN: Duration = Duration::from_millis(25);
pub const RESEND_PAUSE_MAX: Duration = Duration::from_millis(500);

/// How one node proposes a write and reaches the leader.
pub trait Route {
    /// This node.
    fn id(&self) -> NodeId;
    /// Its Raft, for who leads.
    fn raft(&self) -> &Raft;
    /// Proposes on this node, which believes it leads.
    fn propose_local(
        &self,
        command: Command,
    ) -> impl Future<Output = Result<Response, LocalProposeError>> + Send;
    /// Hands `command` to `leader` and waits for its answer.
    fn forward(
        &self,
        leader: &NodeAddr,
        command: &Command,
    ) -> impl Future<Output = Result<ForwardReply, ForwardError>> + Send;
    /// A write no leader took is sent again (counted by `Node`).
    fn resent(&self) {}
    /// A write no leader took is given up at the deadline, answered not applied.
    fn unsent(&self) {}
}

/// Routes `command` until a leader answers it or `until` comes (see the module's rule).
///
/// A write no leader has taken (no leader yet, the one asked was no longer it, or it could not
/// even be sent: a leader just killed refuses the connection, a stopped container's name stops
/// resolving) is held here and sent to the next leader, so a client sees an election as
/// latency, not as an error. Every failure that ends the loop at `until` proves the command was
/// refused before any leader appended it: it is marked not applied, so clients may send it
/// again.
pub async fn route<R: Route + Sync>(
    via: &R,
    command: Command,
    until: tokio::time::Instant,
) -> Result<Response, Status> {
    let mut pause = RESEND_PAUSE_MIN;
    loop {
        let term = via.raft().metrics().borrow_watched().current_term;
        let (leader_id, leader_addr) = leader_until(via.raft(), via.id(), until)
            .await
            .map_err(errors::not_applied)?;
        let not_taken = if leader_id == via.id() {
            match via.propose_local(command.clone()).await {
                Err(LocalProposeError::NotLeader(status)) => status,
                Err(LocalProposeError::Other(status)) => return Err(status),
                Ok(r) => return Ok(r),
            }
        } else {
            match via.forward(&leader_addr, &command).await {
                Ok(reply) => match reply.outcome() {
                    Ok(result) => return result,
                    Err(status) => status,
                },
                Err(ForwardError::NotSent(status)) => status,
                // The deliberate bug (src/bugs.rs): an unknown outcome taken for "not sent".
                Err(ForwardError::Unknown(status))
                    if crate::bugs::active(crate::bugs::Bug::ResendUnknown) =>
                {
                    status
                }
                Err(e @ (ForwardError::Refused(_) | ForwardError::Unknown(_))) => {
                    return Err(e.into_status())
                }
            }
        };
        if !await_other_leader(via.raft(), leader_id, term, pause, until).await {
            via.unsent();
            return Err(errors::not_applied(not_taken));
        }
        via.resent();
        tracing::debug!(leader = leader_id, error = %not_taken.message(), "a write no leader took is sent again");
        pause = (pause * 2).min(RESEND_PAUSE_MAX);
    }
}

/// The current leader as node `id` sees it, and its addresses, waiting for one until
/// `deadline`. Refused when `id` is not a member (of a cluster whose membership it knows).
pub async fn leader_until(
    raft: &Raft,
    id: NodeId,
    deadline: tokio::time::Instant,
) -> Result<(NodeId, NodeAddr), Status> {
    let mut rx = raft.metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            let membership = m.membership_config.membership();
            if membership.nodes().next().is_some() && membership.get_node(&id).is_none() {
                return Err(errors::unavailable(
                    format!("node {id} is not a member of the cluster; ask another node"),
                    None,
                ));
            }
            if let Some(leader) = m.current_leader {
                if let Some(addr) = membership.get_node(&leader) {
                    return Ok((leader, addr.clone()));
                }
            }
        }
        match tokio::time::timeout_at(deadline, rx.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return Err(errors::shutting_down()),
            Err(_) => return Err(errors::no_leader()),
        }
    }
}

/// Waits until the leader is no longer `leader` of `term` (an election ended, or this node
/// learned of the new leader) or `pause` passed, whichever comes first, but never past
/// `deadline`. False when the deadline has come.
pub async fn await_other_leader(
    raft: &Raft,
    leader: NodeId,
    term: u64,
    pause: Duration,
    deadline: tokio::time::Instant,
) -> bool {
    let until = deadline.min(tokio::time::Instant::now() + pause);
    let mut rx = raft.metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            if m.current_term > term || m.current_leader.is_some_and(|id| id != leader) {
                break;
            }
        }
        match tokio::time::timeout_at(until, rx.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return false,
            Err(_) => break,
        }
    }
    tokio::time::Instant::now() < deadline
}

/// The cluster time and term node `id` stamps a proposal with while it leads. A new leader has
/// no time until it has applied an entry of its term (its blank entry, moments after the
/// election): wait for that, up to `wait`. An entry proposed without a time of its term would
/// be refused by apply (`Rejection::NotStamped`).
pub async fn stamp(
    raft: &Raft,
    time: &ClusterClock,
    id: NodeId,
    wait: Duration,
) -> Result<(u64, u64), LocalProposeError> {
    let now = || time.leader_stamp(&raft.metrics().borrow_watched());
    if let Some(stamp) = now() {
        return Ok(stamp);
    }
    let ready = crate::server::time::term_clock_ready(raft, wait).await;
    if let Some(stamp) = now() {
        return Ok(stamp);
    }
    if ready {
        // Not (or no longer) the leader: refused as openraft would, with the leader it knows.
        let m = raft.metrics();
        let m = m.borrow_watched();
        let leader = m.current_leader.filter(|l| *l != id).and_then(|l| {
            let node = m.membership_config.membership().get_node(&l).cloned()?;
            Some(ForwardToLeader::new(l, node))
        });
        let f = leader.unwrap_or_else(ForwardToLeader::empty);
        return Err(LocalProposeError::NotLeader(errors::forward_to_leader(&f)));
    }
    Err(LocalProposeError::NotLeader(errors::not_applied(
        errors::unavailable(
            "this node leads but has not applied an entry of its term yet, so it has no time \
             to stamp the proposal with",
            None,
        ),
    )))
}

/// Proposes `command` on node `id`, which believes it leads, stamped with its cluster time
/// (`stamp`, waiting up to `wait` for its term's clock) and the shown time `wall_ms` gives
/// then.
pub async fn propose_here(
    raft: &Raft,
    time: &ClusterClock,
    id: NodeId,
    wait: Duration,
    wall_ms: impl FnOnce() -> Option<u64>,
    command: Command,
) -> Result<Response, LocalProposeError> {
    let (time_ms, term) = stamp(raft, time, id, wait).await?;
    let proposal = Proposal::new(time_ms, Some(term), wall_ms(), command);
    match raft.client_write(proposal).await {
        Ok(resp) => Ok(resp.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Err(LocalProposeError::NotLeader(errors::forward_to_leader(&f)))
        }
        Err(e) => Err(LocalProposeError::Other(errors::client_write(&e))),
    }
}
