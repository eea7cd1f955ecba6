//! The snapshot file end to end: built and read back through the streaming reader, sent in
//! chunks and installed on another node, and no temporary file left behind by a failure.

use crate::state::ObjectCommand;
use std::sync::Arc;
use std::time::Duration;

use futures::{stream, StreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use tempfile::TempDir;
use tonic::Status;

use super::*;
use crate::proto::raft_v1::SnapshotChunk;
use crate::raft::log_store::RaftDb;
use crate::raft::network::{encode, receive_snapshot, snapshot_chunks};
use crate::raft::state_machine::{NoopObserver, StateMachine};
use crate::raft::types::{Entry, LeaderId, LogId, Vote};
use crate::state::{Command, Proposal, Resource};

fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

fn create(index: u64) -> Entry {
    // Escapes and non-ASCII text in the spec, so the body is more than plain ASCII.
    let spec = format!(r#"{{"plan":"p-{index}","note":"a \"quoted\" ü"}}"#);
    let json = format!(
        r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"d-{index}"}},"spec":{spec}}}"#
    );
    let object = Resource::from_json(&json).expect("valid test object");
    let command = Command::Objects(ObjectCommand::Create {
        object,
        fence: None,
    });
    Entry::new_normal(
        log_id(index),
        Proposal::new(index * 10, None, None, command),
    )
}

/// A state machine in a fresh directory with `objects` objects applied.
async fn node_with(objects: u64) -> io::Result<(TempDir, StateMachine)> {
    let dir = tempfile::tempdir()?;
    let mut sm = StateMachine::open(RaftDb::open(dir.path())?, Arc::new(NoopObserver))?;
    let entries = (1..=objects).map(|i| Ok((create(i), None)));
    sm.apply(stream::iter(entries)).await?;
    Ok((dir, sm))
}

async fn empty_node() -> io::Result<(TempDir, StateMachine)> {
    node_with(0).await
}

fn state_of(sm: &StateMachine) -> State {
    sm.state().read().expect("state lock").clone()
}

fn temp_files(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).expect("read dir").map(|e| {
        let name = e.expect("dir entry").file_name();
        name.to_string_lossy().into_owned()
    });
    names.filter(|n| n.ends_with(TEMP_SUFFIX)).collect()
}

/// Temporary files of dropped handles are removed on the blocking pool: wait for it.
async fn wait_no_temp_files(dir: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !temp_files(dir).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "temporary files left: {:?}",
            temp_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A built snapshot is the layout earlier versions wrote (so their files still load) and decodes
/// to an equal state through the streaming reader: from the stored file, from the handle the
/// build returned, and on restart.
#[tokio::test]
async fn built_snapshot_round_trips_through_the_streaming_reader() -> io::Result<()> {
    let (dir, mut sm) = node_with(300).await?;
    let built = sm.get_snapshot_builder().await.build_snapshot().await?;
    let state = state_of(&sm);
    assert_eq!(built.meta.last_log_id, Some(log_id(300)));

    let body = state.to_snapshot_bytes();
    let meta = serde_json::to_vec(&built.meta)?;
    let mut expected = SNAPSHOT_MAGIC.to_vec();
    expected.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    expected.extend_from_slice(&meta);
    expected.extend_from_slice(&(body.len() as u64).to_le_bytes());
    expected.extend_from_slice(&body);
    let file = std::fs::read(dir.path().join(SNAPSHOT_FILE))?;
    assert!(file == expected, "snapshot file differs from the layout");

    let (stored_meta, mut stored) = open(dir.path())?.expect("a stored snapshot");
    assert_eq!(stored_meta, built.meta);
    assert_eq!(stored.body_len(), body.len() as u64);
    assert_eq!(stored.decode()?, state);
    let mut returned = built.snapshot;
    assert_eq!(returned.decode()?, state);

    drop(sm);
    let sm = StateMachine::open(RaftDb::open(dir.path())?, Arc::new(NoopObserver))?;
    assert_eq!(state_of(&sm), state);
    assert!(temp_files(dir.path()).is_empty());
    Ok(())
}

/// A snapshot sent in many small chunks is received into a temporary file, installed (moved into
/// place, not copied) and gives the follower the leader's state and snapshot file.
#[tokio::test]
async fn snapshot_sent_in_small_chunks_installs_on_another_node() -> io::Result<()> {
    let (leader_dir, mut leader) = node_with(40).await?;
    leader.get_snapshot_builder().await.build_snapshot().await?;
    let current = leader.get_current_snapshot().await?.expect("stored");
    let body_len = current.snapshot.body_len();
    let vote = Vote::new(1, 1);
    let header = encode(&(vote, current.meta.clone())).expect("encodes");
    let (chunks, _failure) = snapshot_chunks(current.snapshot, header, 100);
    let chunks: Vec<SnapshotChunk> = chunks.collect().await;
    assert_eq!(chunks.len() as u64, body_len.div_ceil(100));
    assert!(chunks.len() > 20, "{} chunks", chunks.len());
    assert!(chunks[1..].iter().all(|c| c.meta.is_empty()));

    let (follower_dir, mut follower) = empty_node().await?;
    let arriving = stream::iter(chunks.into_iter().map(Ok));
    let (got_vote, received) = receive_snapshot(follower_dir.path(), arriving)
        .await
        .map_err(io::Error::other)?;
    assert_eq!((got_vote, &received.meta), (vote, &current.meta));
    assert!(received
        .snapshot
        .is_temp_in(follower_dir.path(), &received.meta));
    assert_eq!(temp_files(follower_dir.path()).len(), 1);

    follower
        .install_snapshot(&received.meta, received.snapshot)
        .await?;
    assert_eq!(state_of(&follower), state_of(&leader));
    assert_eq!(follower.applied_state().await?.0, Some(log_id(40)));
    assert!(temp_files(follower_dir.path()).is_empty());
    let snapshot_of = |dir: &TempDir| std::fs::read(dir.path().join(SNAPSHOT_FILE));
    assert!(snapshot_of(&follower_dir)? == snapshot_of(&leader_dir)?);
    Ok(())
}

/// A transfer cut off midway, and a received snapshot dropped without being installed (openraft
/// turns down a stale one), leave no temporary file.
#[tokio::test]
async fn failed_transfers_leave_no_temporary_file() -> io::Result<()> {
    let (_leader_dir, mut leader) = node_with(20).await?;
    let built = leader.get_snapshot_builder().await.build_snapshot().await?;
    let header = encode(&(Vote::new(1, 1), built.meta.clone())).expect("encodes");
    let (dir, _follower) = empty_node().await?;

    let (chunks, _failure) = snapshot_chunks(built.snapshot, header.clone(), 64);
    let cut = chunks
        .take(3)
        .map(Ok)
        .chain(stream::iter([Err(Status::cancelled("leader went away"))]));
    let err = receive_snapshot(dir.path(), Box::pin(cut)).await;
    assert_eq!(
        err.map(|_| ()).map_err(|s| s.code()),
        Err(tonic::Code::Cancelled)
    );
    wait_no_temp_files(dir.path()).await;

    let current = leader.get_current_snapshot().await?.expect("stored");
    let (chunks, _failure) = snapshot_chunks(current.snapshot, header, 64);
    let (_, received) = receive_snapshot(dir.path(), Box::pin(chunks.map(Ok)))
        .await
        .map_err(io::Error::other)?;
    assert_eq!(temp_files(dir.path()).len(), 1);
    drop(received);
    wait_no_temp_files(dir.path()).await;
    Ok(())
}

/// A read failure while sending does not end the chunk stream (the peer would take that for a
/// short snapshot): the stream stops and the failure says why.
#[tokio::test]
async fn a_read_failure_stops_the_chunks_and_is_reported() -> io::Result<()> {
    let (dir, mut sm) = node_with(20).await?;
    sm.get_snapshot_builder().await.build_snapshot().await?;
    let path = dir.path().join(SNAPSHOT_FILE);
    let (_, snapshot) = open(dir.path())?.expect("stored");
    let header_len = std::fs::metadata(&path)?.len() - snapshot.body_len();
    // Truncated under the open handle: 10 body bytes are left of the length the header gives.
    OpenOptions::new()
        .write(true)
        .open(&path)?
        .set_len(header_len + 10)?;

    let (chunks, failure) = snapshot_chunks(snapshot, Vec::new(), 4);
    let mut chunks = Box::pin(chunks);
    let mut sent = 0;
    let drain = async {
        while chunks.next().await.is_some() {
            sent += 1;
        }
    };
    let error = tokio::select! {
        e = failure => e,
        () = drain => panic!("the chunk stream ended on a read failure"),
    };
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(sent, 2, "the two whole chunks before the end");
    Ok(())
}
