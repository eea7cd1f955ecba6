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
use crate::state::{Command, Response};

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
    /// A gRPC status the leader answered with (code as i32, message, leader hint).
    Failed {
        code: i32,
        message: String,
        leader: Option<NodeAddr>,
    },
}

/// A command waiting to be forwarded: its encoded form and where its answer goes.
struct Queued {
    encoded: Vec<u8>,
    reply: oneshot::Sender<Result<ForwardReply, Status>>,
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
    /// leader's answer. An error means the outcome is unknown (the batch may have been applied).
    pub async fn forward(
        &self,
        leader: &NodeAddr,
        command: &Command,
    ) -> Result<ForwardReply, Status> {
        let (tx, rx) = oneshot::channel();
        let queued = Queued {
            encoded: encode(command),
            reply: tx,
        };
        self.queue(leader)
            .send(queued)
            .map_err(|_| errors::unavailable("this node is shutting down", Some(leader)))?;
        rx.await.map_err(|_| {
            errors::unavailable(
                "forwarding to the leader was cut off; the write's outcome is unknown",
                Some(leader),
            )
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
        let (leader, timeout) = (self.leader.clone(), self.rpc_timeout);
        async move {
            let (payload, replies) = join_encoded(batch);
            let count = replies.len();
            let result = match client {
                Err(e) => Err(errors::unavailable(
                    format!("cannot reach the leader: {e}"),
                    Some(&leader),
                )),
                Ok(mut client) => {
                    let mut req = tonic::Request::new(RaftMessage { data: payload });
                    req.set_timeout(timeout);
                    match client.forward_batch(req).await {
                        Err(s) => Err(errors::unavailable(
                            format!(
                                "forwarding to the leader failed; the write's outcome is unknown: {}",
                                s.message()
                            ),
                            Some(&leader),
                        )),
                        Ok(reply) => decode::<Vec<ForwardReply>>(&reply.into_inner().data)
                            .map_err(|e| errors::internal("bad forward reply from the leader", e))
                            .and_then(|answers| {
                                if answers.len() == count {
                                    Ok(answers)
                                } else {
                                    Err(Status::internal(format!(
                                        "the leader answered {} of {count} forwarded commands",
                                        answers.len()
                                    )))
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
                Err(status) => {
                    warn!(leader = %leader.peer_addr, count, error = %status.message(), "forwarding a batch failed");
                    for reply in replies {
                        let _ = reply.send(Err(status.clone()));
                    }
                }
            }
        }
    }
}

/// The batch as one JSON array built from the commands' own encodings (no second encode), and
/// the reply senders in the same order.
fn join_encoded(
    batch: Vec<Queued>,
) -> (Vec<u8>, Vec<oneshot::Sender<Result<ForwardReply, Status>>>) {
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
            .map(|i| Command::Delete {
                key: ObjectKey::new("Thing", "default", &format!("t{i}")),
                expected_revision: Some(i),
                fence: None,
            })
            .collect();
        let batch = commands
            .iter()
            .map(|c| Queued {
                encoded: encode(c),
                reply: oneshot::channel().0,
            })
            .collect();
        let (payload, replies) = join_encoded(batch);
        assert_eq!(replies.len(), 3);
        let decoded = decode_batch(&payload).expect("a JSON array of commands");
        assert_eq!(encode(&decoded), encode(&commands));
    }
}
