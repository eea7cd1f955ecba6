//! The append stream's client side against a stand-in peer: a peer without `AppendStream` (an
//! older build) is sent unary AppendEntries from then on, a peer that stops answering ends the
//! stream in a timeout, and answers come back in the order of the requests.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, Stream, StreamExt};
use openraft::network::RPCOption;
use openraft::RaftNetworkV2;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

use super::*;
use crate::proto::raft_v1::raft_peer_server::{RaftPeer, RaftPeerServer};
use crate::proto::raft_v1::{
    CompactNodeRequest, NodeStatusRequest, ReadIndexReply, ReadIndexRequest,
};
use crate::raft::types::{LeaderId, LogId};

/// How the stand-in peer treats `AppendStream`.
#[derive(Clone, Copy)]
enum Peer {
    /// An older build: Unimplemented.
    Old,
    /// Takes the requests and never answers.
    Silent,
    /// Answers each request with its prev_log_id, in order.
    Answers,
}

struct StandIn {
    peer: Peer,
    unary: Arc<AtomicUsize>,
}

fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

/// An entry-less request whose prev_log_id is `index`: the stand-in answers that id.
fn request(index: u64) -> AppendEntriesRequest {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: Some(log_id(index)),
        leader_commit: None,
        entries: vec![],
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<RaftMessage, Status>> + Send>>;

fn bad(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

#[tonic::async_trait]
impl RaftPeer for StandIn {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.unary.fetch_add(1, Ordering::SeqCst);
        let req: AppendEntriesRequest = decode(&request.into_inner().data).map_err(bad)?;
        let answer: Result<AppendEntriesResponse, RaftError> =
            Ok(AppendEntriesResponse::PartialSuccess(req.prev_log_id));
        Ok(Response::new(RaftMessage {
            data: encode(&answer).map_err(bad)?,
        }))
    }

    type AppendStreamStream = Answers;

    async fn append_stream(
        &self,
        request: Request<Streaming<RaftMessage>>,
    ) -> Result<Response<Answers>, Status> {
        let mut requests = request.into_inner();
        match self.peer {
            Peer::Old => Err(Status::unimplemented("no AppendStream here")),
            Peer::Silent => {
                // Reads what comes and answers nothing.
                tokio::spawn(async move { while requests.next().await.is_some() {} });
                Ok(Response::new(Box::pin(stream::pending())))
            }
            Peer::Answers => Ok(Response::new(Box::pin(requests.map(|message| {
                let req: AppendEntriesRequest = decode(&message?.data).map_err(bad)?;
                let answer: Result<StreamAppendResult, RaftError> = Ok(Ok(req.prev_log_id));
                Ok(RaftMessage {
                    data: encode(&answer).map_err(bad)?,
                })
            })))),
        }
    }

    async fn vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn pre_vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn install_snapshot(
        &self,
        _: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn transfer_leader(
        &self,
        _: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn forward_batch(
        &self,
        _: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn read_index(
        &self,
        _: Request<ReadIndexRequest>,
    ) -> Result<Response<ReadIndexReply>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn node_status(
        &self,
        _: Request<NodeStatusRequest>,
    ) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
    async fn compact(
        &self,
        _: Request<CompactNodeRequest>,
    ) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("stand-in"))
    }
}

/// Starts a stand-in peer; returns the network to it and its count of unary AppendEntries.
async fn stand_in(peer: Peer) -> (PeerNetwork, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let unary = Arc::new(AtomicUsize::new(0));
    let service = RaftPeerServer::new(StandIn {
        peer,
        unary: unary.clone(),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let network = PeerNetwork {
        target: 2,
        addr,
        channels: PeerChannels::new(Duration::from_secs(2), None, 4 << 20),
        rpc_timeout: Duration::from_secs(2),
        streams: true,
    };
    (network, unary)
}

/// Several requests, so the stream is used (a single one goes as a unary call).
fn requests(indexes: &[u64]) -> impl Stream<Item = AppendEntriesRequest> + Send + Unpin {
    stream::iter(indexes.iter().map(|i| request(*i)).collect::<Vec<_>>())
}

#[tokio::test]
async fn answers_come_back_in_the_order_of_the_requests() {
    let (mut network, unary) = stand_in(Peer::Answers).await;
    let option = RPCOption::new(Duration::from_secs(2));
    let answers: Vec<_> = network
        .stream_append(requests(&[3, 4, 5]), option)
        .await
        .expect("the stream opens")
        .collect()
        .await;
    let matched: Vec<_> = answers
        .into_iter()
        .map(|a| a.expect("no transport error").expect("no append error"))
        .collect();
    assert_eq!(
        matched,
        vec![Some(log_id(3)), Some(log_id(4)), Some(log_id(5))]
    );
    assert_eq!(unary.load(Ordering::SeqCst), 0, "all went on the stream");
}

#[tokio::test]
async fn a_peer_without_the_stream_is_sent_unary_calls_from_then_on() {
    let (mut network, unary) = stand_in(Peer::Old).await;
    let option = RPCOption::new(Duration::from_secs(2));
    let refused = network
        .stream_append(requests(&[1, 2]), option.clone())
        .await
        .err()
        .expect("the first session fails: the peer has no stream");
    assert!(matches!(refused, RPCError::Unreachable(_)), "{refused:?}");

    let answers: Vec<_> = network
        .stream_append(requests(&[1, 2]), option)
        .await
        .expect("the second session goes by unary calls")
        .collect()
        .await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers.iter().all(|a| matches!(a, Ok(Ok(_)))),
        "{answers:?}"
    );
    assert_eq!(unary.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_peer_that_stops_answering_ends_the_stream_in_a_timeout() {
    let (mut network, _) = stand_in(Peer::Silent).await;
    let ttl = Duration::from_millis(300);
    // One request, then nothing more for now (an open replication session, whose length is
    // not known: a stream known to hold one request goes as a unary call).
    let input = stream::iter(vec![request(1)])
        .chain(stream::pending())
        .filter(|_| futures::future::ready(true));
    let started = Instant::now();
    let mut answers = network
        .stream_append(Box::pin(input), RPCOption::new(ttl))
        .await
        .expect("the stream opens");
    let first = tokio::time::timeout(Duration::from_secs(10), answers.next())
        .await
        .expect("the stream gives up before the test does");
    let waited = started.elapsed();
    match first {
        Some(Err(RPCError::Network(e))) => assert!(e.to_string().contains("no answer"), "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(waited >= ttl, "gave up after {waited:?}, before {ttl:?}");
    assert!(answers.next().await.is_none(), "the stream ended");
}

#[tokio::test]
async fn a_single_request_goes_as_a_unary_call() {
    let (mut network, unary) = stand_in(Peer::Answers).await;
    // openraft's heartbeat: a stream known to hold exactly one request.
    let answers: Vec<_> = network
        .stream_append(
            stream::once(async { request(7) }).boxed(),
            RPCOption::new(Duration::from_secs(2)),
        )
        .await
        .expect("sent")
        .collect()
        .await;
    assert!(
        matches!(answers.as_slice(), [Ok(Ok(Some(id)))] if *id == log_id(7)),
        "{answers:?}"
    );
    assert_eq!(unary.load(Ordering::SeqCst), 1);
}

/// A request after `prev` carrying blank entries at `indexes`.
fn carrying(prev: Option<u64>, indexes: &[u64]) -> AppendEntriesRequest {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: prev.map(log_id),
        leader_commit: None,
        entries: indexes
            .iter()
            .map(|i| Entry {
                log_id: log_id(*i),
                payload: openraft::EntryPayload::Blank,
            })
            .collect(),
    }
}

#[test]
fn an_append_must_follow_its_prev_log_id_without_a_hole() {
    for (prev, indexes, ok) in [
        (None, &[][..], true),
        (None, &[0, 1][..], true),
        (Some(3), &[][..], true),
        (Some(3), &[4, 5, 6][..], true),
        // What a stream resumed after the leader's purge reads: entries from later on.
        (Some(3), &[456, 457][..], false),
        (None, &[1][..], false),
        (Some(3), &[4, 6][..], false),
        (Some(3), &[3][..], false),
    ] {
        let checked = check_append(&carrying(prev, indexes));
        assert_eq!(
            checked.is_ok(),
            ok,
            "prev {prev:?} entries {indexes:?}: {checked:?}"
        );
        if let Err(why) = checked {
            assert!(why.contains("no longer holds"), "{why}");
        }
    }
}

#[tokio::test]
async fn an_append_with_a_hole_is_not_sent_and_ends_the_stream_in_a_network_error() {
    let (mut network, unary) = stand_in(Peer::Answers).await;
    let option = RPCOption::new(Duration::from_secs(2));
    let input = stream::iter(vec![carrying(Some(3), &[4, 5]), carrying(Some(3), &[456])]);
    let answers: Vec<_> = network
        .stream_append(input, option.clone())
        .await
        .expect("the stream opens")
        .collect()
        .await;
    match answers.as_slice() {
        [Ok(Ok(Some(first))), Err(RPCError::Network(e))] => {
            assert_eq!(*first, log_id(3));
            assert!(e.to_string().contains("no longer holds"), "{e}");
        }
        other => panic!("expected one answer, then the refusal: {other:?}"),
    }

    // openraft's unary path (a single request) refuses it too, before it reaches the peer.
    let refused = network
        .append_entries(carrying(Some(3), &[456]), option)
        .await
        .expect_err("refused");
    assert!(matches!(refused, RPCError::Network(_)), "{refused:?}");
    assert_eq!(
        unary.load(Ordering::SeqCst),
        0,
        "nothing reached the peer unary"
    );
}
