//! Commands a follower hands to the leader, batched: one `ForwardBatch` RPC carries every command
//! that queued up for the same leader while the previous batches were on the wire.
//!
//! One forward RPC per client write cost a follower and the leader an HTTP/2 stream, a task and a
//! serialization round each; under load most writes reach followers (clients talk to every node),
//! and forwarding was the largest cost of a write after the log fsync. Batching is adaptive: a
//! lone command is sent at once (a batch of one, no added latency); while
//! `FORWARD_BATCHES_IN_FLIGHT` batches are outstanding, later commands wait and leave together.
//! The leader proposes the commands of a batch concurrently, so Raft appends them as one group
//! and they share one fsync, and answers each in the batch's order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::Status;
use tracing::{debug, warn};

use crate::proto::raft_v1::RaftMessage;
use crate::raft::network::{decode, encode, PeerChannels};
use crate::raft::types::NodeAddr;
use crate::server::errors;
use crate::server::node::LocalProposeError;
use crate::state::{Command, Response};
use crate::wire;

/// Commands in one batch at most.
pub const FORWARD_BATCH_COMMANDS_MAX: usize = 256;
/// Encoded bytes of commands in one batch at most (a single larger command still goes, alone).
pub const FORWARD_BATCH_BYTES_MAX: usize = 4 << 20;
/// Batches on the wire to one leader at once; more commands queue and form the next batch.
pub const FORWARD_BATCHES_IN_FLIGHT: usize = 4;

/// The leader's answer to one forwarded command.
#[derive(Debug, Serialize, Deserialize)]
pub enum ForwardReply {
    Applied(Box<Response>),
    /// The node reached was not the leader when the command arrived and refused it before
    /// appending it to its log: the command did not take effect, so it may be sent again, to the
    /// leader named here if one is known.
    NotLeader {
        message: String,
        leader: Option<NodeAddr>,
    },
    /// Any other answer, as a gRPC status (code as i32, message, leader hint). The command must
    /// not be sent again: an Unavailable here may mean its outcome is unknown (its entry was
    /// discarded by a leader change and may still commit).
    Failed {
        code: i32,
        message: String,
        leader: Option<NodeAddr>,
        /// The leader refused it before appending it (its admission, `Node::admit`): the client
        /// is told it was not applied (`wire::NOT_APPLIED`). Absent from an older leader's
        /// answer, which never said so.
        #[serde(default)]
        not_applied: bool,
        /// The status's encoded `google.rpc.Status` details (its ErrorInfo reason and
        /// RetryInfo), so the client sees the leader's reason. Absent from an older leader's
        /// answer (`errors::from_parts` then derives a reason from the code).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        details: Vec<u8>,
    },
}

impl ForwardReply {
    /// The leader's answer to a command it proposed (or refused to propose).
    pub fn answer(result: Result<Response, LocalProposeError>) -> ForwardReply {
        match result {
            Ok(r) => ForwardReply::Applied(Box::new(r)),
            Err(LocalProposeError::NotLeader(s)) => ForwardReply::NotLeader {
                message: s.message().to_string(),
                leader: leader_hint(&s),
            },
            Err(LocalProposeError::Other(s)) => ForwardReply::Failed {
                code: s.code() as i32,
                message: s.message().to_string(),
                leader: leader_hint(&s),
                not_applied: s.metadata().get(wire::NOT_APPLIED).is_some(),
                details: s.details().to_vec(),
            },
        }
    }

    /// What the forwarding node does with the answer: `Ok` is the write's final result,
    /// `Err` the status to remember while sending the command again (to the new leader).
    pub fn outcome(self) -> Result<Result<Response, Status>, Status> {
        match self {
            ForwardReply::Applied(r) => Ok(Ok(*r)),
            ForwardReply::NotLeader { message, leader } => {
                Err(errors::unavailable(message, leader.as_ref()))
            }
            // Never sent again: an Unavailable here can mean the entry was appended and then
            // discarded by a leader change, and may still commit.
            ForwardReply::Failed {
                code,
                message,
                leader,
                not_applied,
                details,
            } => {
                let code = tonic::Code::from_i32(code);
                let status = errors::from_parts(code, message, &details, leader.as_ref());
                Ok(Err(if not_applied {
                    errors::not_applied(status)
                } else {
                    status
                }))
            }
        }
    }
}

/// The leader's client address a status names in its metadata, if any (a forwarded answer's
/// hint carries no peer address).
fn leader_hint(status: &Status) -> Option<NodeAddr> {
    status
        .metadata()
        .get(wire::LEADER_HINT)
        .and_then(|v| v.to_str().ok())
        .map(|client_addr| NodeAddr {
            peer_addr: String::new(),
            client_addr: client_addr.to_string(),
        })
}

/// `command` as it travels in a batch, or Internal marked not applied: nothing was sent, so the
/// client may send it again (a failure here is steward's, never the client's input).
fn encode_forwarded<T: Serialize>(command: &T) -> Result<Vec<u8>, Status> {
    encode(command).map_err(|e| {
        errors::not_applied(errors::internal(
            "cannot encode the command to forward to the leader",
            e,
        ))
    })
}

/// Why a forwarded command got no answer from the leader.
#[derive(Clone, Debug)]
pub enum ForwardError {
    /// No byte of it reached the leader: the connection could not be made (refused, a name
    /// that no longer resolves, unreachable, connect timeout) or could not even be set up. It
    /// was not applied and cannot be later, so the node may hold it and send it to the next
    /// leader (`Node::propose`).
    NotSent(Status),
    /// Refused on this node before it was sent, for a reason sending again would not change
    /// (this node is shutting down, the batch is over the peer message limit): not applied,
    /// and final.
    Refused(Status),
    /// It was sent and the answer was lost (reset, timeout, a reply that does not decode): the
    /// leader may have appended it, so its outcome is unknown and it is never sent again.
    Unknown(Status),
}

impl ForwardError {
    /// The status the caller gets when this is the last word.
    pub fn status(&self) -> &Status {
        match self {
            ForwardError::NotSent(s) | ForwardError::Refused(s) | ForwardError::Unknown(s) => s,
        }
    }

    /// `status`, owned.
    pub fn into_status(self) -> Status {
        match self {
            ForwardError::NotSent(s) | ForwardError::Refused(s) | ForwardError::Unknown(s) => s,
        }
    }
}

/// Where the answer to one forwarded command goes.
type ReplyTx = oneshot::Sender<Result<ForwardReply, ForwardError>>;

/// A command waiting to be forwarded: its encoded form and where its answer goes.
struct Queued {
    encoded: Vec<u8>,
    reply: ReplyTx,
}

/// Per-leader queues of commands to forward, each drained by its own batching task.
pub struct Forwarder {
    channels: PeerChannels,
    rpc_timeout: Duration,
    /// Leader peer address -> the queue of its batching task. Looked up by key only.
    queues: Mutex<BTreeMap<String, mpsc::UnboundedSender<Queued>>>,
}

impl Forwarder {
    pub fn new(channels: PeerChannels, rpc_timeout: Duration) -> Forwarder {
        Forwarder {
            channels,
            rpc_timeout,
            queues: Mutex::default(),
        }
    }

    /// Forwards `command` to `leader` with whatever else is queued for it, and waits for the
    /// leader's answer; `ForwardError` says whether it may have been applied without one.
    pub async fn forward(
        &self,
        leader: &NodeAddr,
        command: &Command,
    ) -> Result<ForwardReply, ForwardError> {
        let (tx, rx) = oneshot::channel();
        let queued = Queued {
            encoded: encode_forwarded(command).map_err(ForwardError::Refused)?,
            reply: tx,
        };
        self.queue(leader).send(queued).map_err(|_| {
            ForwardError::Refused(errors::not_applied(errors::unavailable(
                "this node is shutting down",
                Some(leader),
            )))
        })?;
        rx.await.map_err(|_| {
            ForwardError::Unknown(errors::outcome_unknown(
                "forwarding to the leader was cut off; the write's outcome is unknown",
                Some(leader),
            ))
        })?
    }

    /// The queue for `leader`, starting its batching task on first use (the number of queues is
    /// bounded by the leaders this node has seen).
    fn queue(&self, leader: &NodeAddr) -> mpsc::UnboundedSender<Queued> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = queues.get(&leader.peer_addr).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let sender = BatchSender {
            channels: self.channels.clone(),
            leader: leader.clone(),
            rpc_timeout: self.rpc_timeout,
            in_flight: Arc::new(Semaphore::new(FORWARD_BATCHES_IN_FLIGHT)),
        };
        tokio::spawn(sender.run(rx));
        queues.insert(leader.peer_addr.clone(), tx.clone());
        tx
    }
}

/// The batching task of one leader. It holds no reference to the node, so it ends when the
/// `Forwarder` (and with it every queue sender) is dropped.
struct BatchSender {
    channels: PeerChannels,
    leader: NodeAddr,
    rpc_timeout: Duration,
    in_flight: Arc<Semaphore>,
}

impl BatchSender {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Queued>) {
        let mut carry: Option<Queued> = None;
        loop {
            // Wait for a free slot first, so commands arriving meanwhile join this batch.
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                return;
            };
            let first = match carry.take() {
                Some(q) => q,
                None => match rx.recv().await {
                    Some(q) => q,
                    None => return,
                },
            };
            let mut bytes = first.encoded.len();
            let mut batch = vec![first];
            while batch.len() < FORWARD_BATCH_COMMANDS_MAX {
                match rx.try_recv() {
                    Ok(q) if bytes + q.encoded.len() > FORWARD_BATCH_BYTES_MAX => {
                        carry = Some(q);
                        break;
                    }
                    Ok(q) => {
                        bytes += q.encoded.len();
                        batch.push(q);
                    }
                    Err(_) => break,
                }
            }
            let send = self.send(batch);
            tokio::spawn(async move {
                send.await;
                drop(permit);
            });
        }
    }

    /// Sends one batch and hands each command its answer (or the RPC's failure).
    fn send(&self, batch: Vec<Queued>) -> impl std::future::Future<Output = ()> + Send + 'static {
        let client = self.channels.peer(&self.leader.peer_addr);
        let channels = self.channels.clone();
        let (leader, timeout) = (self.leader.clone(), self.rpc_timeout);
        async move {
            let (payload, replies) = join_encoded(batch);
            let count = replies.len();
            let size = channels.check_size("a forwarded batch", payload.len());
            let result = match (client, size) {
                // Below the floor `Config::validate` enforces this cannot happen; nothing was
                // sent, so the writes were not applied.
                (_, Err(refused)) => Err(ForwardError::Refused(errors::not_applied(
                    errors::limit("limits.peer_message_bytes_max", refused),
                ))),
                (Err(e), _) => Err(ForwardError::NotSent(errors::not_applied(
                    errors::unavailable(
                        format!("cannot reach the leader, so the write was not sent: {e}"),
                        Some(&leader),
                    ),
                ))),
                (Ok(mut client), Ok(())) => {
                    let mut req = tonic::Request::new(RaftMessage { data: payload });
                    req.set_timeout(timeout);
                    match client.forward_batch(req).await {
                        Err(s) if never_connected(&s) => Err(ForwardError::NotSent(
                            errors::not_applied(errors::unavailable(
                                format!(
                                    "could not connect to the leader, so the write was not sent \
                                     (it may have just stopped): {}",
                                    s.message()
                                ),
                                Some(&leader),
                            )),
                        )),
                        Err(s) => Err(ForwardError::Unknown(errors::outcome_unknown(
                            format!(
                                "forwarding to the leader failed; the write's outcome is unknown: {}",
                                s.message()
                            ),
                            Some(&leader),
                        ))),
                        Ok(reply) => decode::<Vec<ForwardReply>>(&reply.into_inner().data)
                            .map_err(|e| {
                                ForwardError::Unknown(errors::internal(
                                    "bad forward reply from the leader",
                                    e,
                                ))
                            })
                            .and_then(|answers| {
                                if answers.len() == count {
                                    Ok(answers)
                                } else {
                                    Err(ForwardError::Unknown(errors::internal_message(format!(
                                        "the leader answered {} of {count} forwarded commands",
                                        answers.len()
                                    ))))
                                }
                            }),
                    }
                }
            };
            debug!(leader = %leader.peer_addr, count, ok = result.is_ok(), "forwarded batch");
            match result {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(error) => {
                    warn!(leader = %leader.peer_addr, count, error = %error.status().message(), "forwarding a batch failed");
                    for reply in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}

/// Whether the call failed before a connection to the leader existed: tonic's connector failed
/// (`tonic::ConnectError`: the port refused it, the name did not resolve, as for a stopped
/// Compose container, the host was unreachable, the connect timed out), or the socket reported
/// the refusal itself. Then no byte of the batch left this node, its commands were certainly
/// not appended, and they may be sent again. Any later failure (reset, timeout) may come after
/// the leader appended them: their outcome is unknown.
fn never_connected(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some()
            || err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// The batch as one JSON array built from the commands' own encodings (no second encode), and
/// the reply senders in the same order.
fn join_encoded(batch: Vec<Queued>) -> (Vec<u8>, Vec<ReplyTx>) {
    let bytes: usize = batch.iter().map(|q| q.encoded.len() + 1).sum();
    let mut payload = Vec::with_capacity(bytes + 2);
    let mut replies = Vec::with_capacity(batch.len());
    payload.push(b'[');
    for (i, q) in batch.into_iter().enumerate() {
        if i > 0 {
            payload.push(b',');
        }
        payload.extend_from_slice(&q.encoded);
        replies.push(q.reply);
    }
    payload.push(b']');
    (payload, replies)
}

/// Decodes a `ForwardBatch` payload (the leader's side).
pub fn decode_batch(data: &[u8]) -> Result<Vec<Command>, serde_json::Error> {
    decode(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ObjectKey;

    #[test]
    fn a_joined_batch_decodes_to_the_commands_in_order() {
        let commands: Vec<Command> = (0..3)
            .map(|i| {
                Command::Objects(crate::state::ObjectCommand::Delete {
                    key: ObjectKey::new("Thing", "default", &format!("t{i}")),
                    expected_revision: Some(i),
                    fence: None,
                })
            })
            .collect();
        let batch = commands
            .iter()
            .map(|c| Queued {
                encoded: encode(c).expect("a command encodes"),
                reply: oneshot::channel().0,
            })
            .collect();
        let (payload, replies) = join_encoded(batch);
        assert_eq!(replies.len(), 3);
        let decoded = decode_batch(&payload).expect("a JSON array of commands");
        assert_eq!(
            encode(&decoded).expect("encodes"),
            encode(&commands).expect("encodes")
        );
    }

    /// A value serde_json cannot write (a map with non-string keys) is an Internal answer marked
    /// not applied, never a panic of the node.
    #[test]
    fn an_unencodable_command_is_an_error_not_a_panic() {
        let unwritable: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
        let status = encode_forwarded(&unwritable).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(
            status
                .message()
                .starts_with("cannot encode the command to forward"),
            "{status:?}"
        );
        assert_eq!(
            status
                .metadata()
                .get(wire::NOT_APPLIED)
                .and_then(|v| v.to_str().ok()),
            Some("true")
        );
    }

    /// Only a refusal before the entry was appended is sent again; a write whose entry a leader
    /// change discarded (it may still commit) ends with Unavailable and its leader hint.
    #[test]
    fn only_a_refusal_before_appending_is_sent_again() {
        use crate::raft::types::{ClientWriteError, ForwardToLeader, NodeAddr as Addr, RaftError};
        let leader = Addr {
            peer_addr: "127.0.0.1:1".into(),
            client_addr: "127.0.0.1:2".into(),
        };
        let to_leader = ForwardToLeader::new(2, leader.clone());

        let refused = errors::client_write(&RaftError::APIError(
            ClientWriteError::ForwardToLeader(to_leader.clone()),
        ));
        let reply = ForwardReply::answer(Err(LocalProposeError::NotLeader(refused)));
        assert!(matches!(
            reply,
            ForwardReply::NotLeader {
                leader: Some(_),
                ..
            }
        ));
        let retry = reply.outcome().expect_err("sent again");
        assert_eq!(retry.code(), tonic::Code::Unavailable);

        let discarded = errors::client_write(&RaftError::APIError(
            ClientWriteError::LogEntryDiscarded(to_leader),
        ));
        let reply = ForwardReply::answer(Err(LocalProposeError::Other(discarded)));
        let fin = reply.outcome().expect("final, never sent again");
        let status = fin.expect_err("a failure");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(
            status.message().contains("outcome is unknown"),
            "{status:?}"
        );
        assert_eq!(
            status
                .metadata()
                .get(wire::LEADER_HINT)
                .and_then(|v| v.to_str().ok()),
            Some("127.0.0.1:2")
        );

        let refused = Status::failed_precondition("resourceVersion: 3 is not the current 4");
        let reply = ForwardReply::answer(Err(LocalProposeError::Other(refused)));
        let status = reply.outcome().expect("final").expect_err("a failure");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    }

    /// A forwarder whose leader is `peer_addr`, and a command for it.
    fn forwarding_to(peer_addr: String) -> (Forwarder, NodeAddr, Command) {
        let limit = crate::config::Limits::default().peer_message_bytes_max;
        let channels = PeerChannels::new(Duration::from_secs(1), None, limit);
        let leader = NodeAddr {
            peer_addr,
            client_addr: "127.0.0.1:1".into(),
        };
        let command = Command::Objects(crate::state::ObjectCommand::Delete {
            key: ObjectKey::new("Thing", "default", "t"),
            expected_revision: None,
            fence: None,
        });
        (
            Forwarder::new(channels, Duration::from_secs(1)),
            leader,
            command,
        )
    }

    /// A leader killed a moment ago refuses connections until the others elect a new one: the
    /// write never left, so it is marked for the client to send again (it had failed at once
    /// with "outcome unknown", and `steward dev`'s kill -9 of the leader with it), and
    /// `Node::propose` may hold it for the next leader.
    #[tokio::test]
    async fn a_leader_refusing_the_connection_leaves_the_write_not_sent() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let (forwarder, dead, command) = forwarding_to(format!("127.0.0.1:{port}"));
        let error = forwarder
            .forward(&dead, &command)
            .await
            .expect_err("nobody listens");
        let ForwardError::NotSent(status) = error else {
            panic!("a refused connection sends nothing: {error:?}");
        };
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(
            status.metadata().get(wire::NOT_APPLIED).is_some(),
            "{status:?}"
        );
    }

    /// A stopped Compose container's name stops resolving: the README's walkthrough saw
    /// "forwarding to the leader failed; the write's outcome is unknown: dns error" for writes
    /// that never left. A name that does not resolve is a connect failure: not sent.
    #[tokio::test]
    async fn a_leader_whose_name_does_not_resolve_leaves_the_write_not_sent() {
        let (forwarder, gone, command) = forwarding_to("steward-gone.invalid:7101".into());
        let error = forwarder
            .forward(&gone, &command)
            .await
            .expect_err("nobody by that name");
        assert!(
            matches!(error, ForwardError::NotSent(_)),
            "a name that does not resolve sends nothing: {error:?}"
        );
    }

    /// A leader that takes the connection and then never answers may have appended the batch:
    /// the write's outcome is unknown, never "not sent".
    #[tokio::test]
    async fn a_leader_that_never_answers_leaves_the_outcome_unknown() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = silent.local_addr().expect("its address").port();
        let (forwarder, mute, command) = forwarding_to(format!("127.0.0.1:{port}"));
        let error = forwarder
            .forward(&mute, &command)
            .await
            .expect_err("no answer within the forward timeout");
        assert!(
            matches!(error, ForwardError::Unknown(_)),
            "a connection taken, then silence: {error:?}"
        );
        drop(silent);
    }
}
