//! The leader's admission holds for forwarded writes too: a write sent to a follower passes its
//! own admission there and the leader's again, and a refusal by the leader's comes back to the
//! client as such, marked not applied (it may be sent again).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use steward::config::Limits;
use tokio::sync::mpsc;

use steward::proto::v1::Consistency;

use crate::harness::{create, director, get, rv, test_raft, TestCluster};

#[tokio::test(flavor = "multi_thread")]
async fn forwarded_writes_pass_the_leaders_pending_bound() {
    // One proposal in flight per node: two followers forwarding at once exceed the leader's.
    let limits = Limits {
        pending_proposals_max: 1,
        ..Limits::default()
    };
    let cluster = TestCluster::start_with(3, test_raft(10_000, 1_000), limits).await;
    let leader = cluster.wait_leader().await;
    let needle = format!("on node {leader} (limits.pending_proposals_max = 1)");
    let stop = Arc::new(AtomicBool::new(false));
    let (found, mut refusals) = mpsc::unbounded_channel();
    for follower in cluster.followers().await {
        for writer in 0..2 {
            let (mut client, stop, found, needle) = (
                cluster.res(follower).await,
                stop.clone(),
                found.clone(),
                needle.clone(),
            );
            tokio::spawn(async move {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let name = format!("f{follower}-w{writer}-{i}");
                    if let Err(status) = create(&mut client, director(&name, &[])).await {
                        if status.message().contains(&needle) {
                            let _ = found.send((name, status));
                        }
                    }
                }
            });
        }
    }
    let refused = tokio::time::timeout(Duration::from_secs(60), refusals.recv()).await;
    stop.store(true, Ordering::Relaxed);
    let (name, status) = refused
        .expect("the leader refused a forwarded write within 60 s")
        .expect("writers running");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get(steward::server::errors::NOT_APPLIED)
            .and_then(|v| v.to_str().ok()),
        Some("true"),
        "{status:?}"
    );
    // Not applied indeed: the object is nowhere, read through the leader.
    let mut reader = cluster.res(leader).await;
    let missing = get(
        &mut reader,
        &name,
        steward::proto::v1::Consistency::Linearizable,
    )
    .await
    .expect_err("never created");
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
}

/// Small limits whose peer message floor is the forwarded batch's (~4 MiB): entries of at most
/// 64 KiB, 16 to a message, one object to a list page.
/// A plaintext connection to node `id`'s peer port, as another node would open.
async fn peer_port(cluster: &TestCluster, id: u64) -> tonic::transport::Channel {
    let peer_addr = cluster.nodes[&id].config.peer_addr.clone();
    tonic::transport::Endpoint::from_shared(format!("http://{peer_addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to the peer port")
}

fn small_limits() -> (steward::config::RaftConfig, Limits) {
    let raft = steward::config::RaftConfig {
        payload_entries_max: 16,
        ..test_raft(10_000, 1_000)
    };
    let mut limits = Limits {
        object_bytes_max: 32 * 1024,
        request_bytes_max: 64 * 1024,
        command_bytes_max: 64 * 1024,
        list_page_max: 1,
        list_page_default: 1,
        ..Limits::default()
    };
    limits.peer_message_bytes_max = steward::raft::message_size::peer_message_bytes_floor(
        limits.command_bytes_max,
        raft.payload_entries_max,
        limits.list_page_max,
    );
    (raft, limits)
}

/// A Director whose spec is `numbers` copies of 1e15: 5 bytes each as sent, 19 as written in
/// the log (`1000000000000000.0`), so the command outgrows the request nearly fourfold.
fn expanding(name: &str, numbers: usize) -> String {
    let spec = vec!["1e15"; numbers].join(",");
    format!(
        r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"{name}"}},"spec":{{"n":[{spec}]}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_over_its_limit_is_refused_on_every_path_and_peers_over_theirs_too() {
    let (raft, limits) = small_limits();
    let peer_limit = limits.peer_message_bytes_max;
    let cluster = TestCluster::start_with(3, raft, limits).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    // ~30 KiB as sent (under object_bytes_max and request_bytes_max), ~114 KiB as a command.
    for (id, name) in [(leader, "big-l"), (follower, "big-f")] {
        let mut client = cluster.res(id).await;
        let status = create(&mut client, expanding(name, 6_000))
            .await
            .expect_err("over limits.command_bytes_max");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status
                .message()
                .contains("over limits.command_bytes_max = 65536"),
            "{status:?}"
        );
        assert!(
            status
                .metadata()
                .get(steward::server::errors::NOT_APPLIED)
                .is_some(),
            "{status:?}"
        );
    }
    // Under the limit (~57 KiB as a command), the same kind of object is written.
    let mut client = cluster.res(follower).await;
    create(&mut client, expanding("small", 3_000))
        .await
        .expect("a command under the limit");

    // A peer message one byte over the leader's limit is refused by its peer port, and the node
    // goes on: the next write through it succeeds.
    let mut peer = steward::proto::raft_v1::raft_peer_client::RaftPeerClient::new(
        peer_port(&cluster, leader).await,
    )
    .max_encoding_message_size(usize::MAX);
    let over = steward::proto::raft_v1::RaftMessage {
        // The protobuf framing adds a tag and a length: this payload alone is over.
        data: vec![b' '; peer_limit + 1],
    };
    let status = peer
        .forward_batch(over)
        .await
        .expect_err("over limits.peer_message_bytes_max");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
    let mut client = cluster.res(leader).await;
    create(&mut client, director("after", &[]))
        .await
        .expect("the leader still serves");
}

/// A peer's append stream that carries something other than an AppendEntries request: what came
/// before it is answered, then the stream ends with InvalidArgument naming the field, and the
/// node goes on replicating (a write through it succeeds, and every node applies it).
#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_append_stream_message_ends_that_stream_only() {
    use steward::proto::raft_v1::raft_peer_client::RaftPeerClient;
    use steward::proto::raft_v1::RaftMessage;
    use tokio_stream::StreamExt;

    let cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let follower = cluster.followers().await[0];
    let channel = peer_port(&cluster, follower).await;
    let messages = tokio_stream::iter(vec![RaftMessage {
        data: b"{\"not\":\"an append\"}".to_vec(),
    }]);
    let mut answers = RaftPeerClient::new(channel)
        .append_stream(messages)
        .await
        .expect("the stream opens")
        .into_inner();
    let status = match answers.next().await {
        Some(Err(status)) => status,
        other => panic!("expected the stream to end with an error, got {other:?}"),
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("undecodable peer message"),
        "{status:?}"
    );
    assert!(answers.next().await.is_none(), "the stream ended");

    let mut client = cluster.res(follower).await;
    let created = create(&mut client, director("after-bad-stream", &[]))
        .await
        .expect("the follower still forwards writes, and the leader replicates");
    for id in [leader, follower] {
        let mut c = cluster.res(id).await;
        let got = get(&mut c, "after-bad-stream", Consistency::Linearizable)
            .await
            .expect("a linearizable get");
        assert_eq!(rv(&got), rv(&created), "node {id}");
    }
}

/// A connection to the peer port whose other end stops answering (a node killed or cut off
/// while its append stream waits) is closed by the node's HTTP/2 pings, not kept until the node
/// stops: a client that sends HTTP/2's preface and settings and then never answers sees the
/// connection end within the ping interval and timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_peer_connection_that_stops_answering_pings_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let cluster = TestCluster::start(1).await;
    let id = cluster.wait_leader().await;
    let peer_addr = cluster.nodes[&id].config.peer_addr.clone();
    let mut tcp = tokio::net::TcpStream::connect(&peer_addr)
        .await
        .expect("connect to the peer port");
    // The client preface and an empty SETTINGS frame; then silence.
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("send the preface");
    let limit = steward::raft::network::KEEPALIVE_INTERVAL
        + steward::raft::network::KEEPALIVE_TIMEOUT
        + Duration::from_secs(10);
    let started = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the connection was still open after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= steward::raft::network::KEEPALIVE_INTERVAL,
        "closed after {:?}, before any ping could go unanswered",
        started.elapsed()
    );
}
