//! etcd's Lease on a 3-node steward: etcdctl's lease commands, keys deleted with their lease
//! (revoked or expired), never early and late by at most the bound, and kept
//! through a change of leader.

use std::time::{Duration, Instant};

use bytes::Bytes;
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::lease_client::LeaseClient;
use steward::proto::etcd::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest,
    PutRequest, RangeRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Code;

use crate::etcd::ok;
use crate::harness::{have_etcdctl, TestCluster};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn exists(kv: &mut KvClient<Channel>, key: &str) -> bool {
    let range = kv
        .range(RangeRequest {
            key: b(key),
            ..RangeRequest::default()
        })
        .await
        .expect("range")
        .into_inner();
    !range.kvs.is_empty()
}

async fn leased_put(kv: &mut KvClient<Channel>, key: &str, lease: i64) {
    kv.put(PutRequest {
        key: b(key),
        value: b("v"),
        lease,
        ..PutRequest::default()
    })
    .await
    .expect("put");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_grants_attaches_keeps_alive_lists_and_revokes_leases() {
    if !have_etcdctl("etcdctl_grants_attaches_keeps_alive_lists_and_revokes_leases") {
        return;
    }
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let (one, two) = (cluster.client_addr(1), cluster.client_addr(2));
    let granted = ok(&one, &["lease", "grant", "60"]).await;
    // "lease 694d7a9b4a3c5e04 granted with TTL(60s)"
    let id = granted
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    assert!(granted.ends_with("granted with TTL(60s)\n"), "{granted}");
    ok(&two, &["put", "--lease", &id, "lk/a", "1"]).await;
    ok(&one, &["put", "--lease", &id, "lk/b", "2"]).await;
    let ttl = ok(&two, &["lease", "timetolive", &id, "--keys"]).await;
    assert!(ttl.contains("granted with TTL(60s)"), "{ttl}");
    assert!(ttl.contains("attached keys([lk/a lk/b])"), "{ttl}");
    let list = ok(&one, &["lease", "list"]).await;
    assert_eq!(list, format!("found 1 leases\n{id}\n"));
    let kept = ok(&two, &["lease", "keep-alive", "--once", &id]).await;
    assert_eq!(kept, format!("lease {id} keepalived with TTL(60)\n"));
    assert_eq!(
        ok(&one, &["lease", "revoke", &id]).await,
        format!("lease {id} revoked\n")
    );
    assert_eq!(ok(&two, &["get", "lk/", "--prefix"]).await, "");
    let gone = ok(&one, &["lease", "timetolive", &id]).await;
    assert_eq!(gone, format!("lease {id} already expired\n"));
    // A TTL under the cluster's minimum (1.5 election timeouts, in whole seconds) is raised.
    let short = ok(&one, &["lease", "grant", "1"]).await;
    assert!(short.ends_with("granted with TTL(2s)\n"), "{short}");
}

/// A lease kept alive once, then left: its keys stay through every read that completes before
/// TTL after the keep-alive was sent, and are gone within a second after that on a healthy
/// cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_ends_never_early_with_its_keys_deleted() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut leases = LeaseClient::new(cluster.channel(2).await);
    let mut kv = KvClient::new(cluster.channel(3).await);
    let ttl = 3;
    let id = leases
        .lease_grant(LeaseGrantRequest { ttl, id: 0 })
        .await
        .unwrap()
        .into_inner()
        .id;
    leased_put(&mut kv, "ttl/a", id).await;
    leased_put(&mut kv, "ttl/b", id).await;
    let (tx, rx) = mpsc::channel(1);
    let mut answers = leases
        .lease_keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let sent = Instant::now();
    tx.send(LeaseKeepAliveRequest { id }).await.unwrap();
    let kept = answers.message().await.unwrap().unwrap();
    assert_eq!((kept.id, kept.ttl), (id, ttl));
    drop(tx);
    let end = sent + Duration::from_secs(ttl as u64);
    loop {
        let asked = Instant::now();
        let present = exists(&mut kv, "ttl/a").await;
        let answered = Instant::now();
        if answered < end {
            assert!(
                present,
                "the lease ended early: gone {:?} after the keep-alive was sent (TTL {ttl} s)",
                asked - sent
            );
        } else if !present {
            let late = asked.saturating_duration_since(end);
            assert!(late < Duration::from_secs(1), "ended {late:?} late");
            break;
        }
        assert!(answered < end + Duration::from_secs(5), "never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!exists(&mut kv, "ttl/b").await);
    let ttl_left = leases
        .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ttl_left.ttl, -1);
    let revoked = leases.lease_revoke(LeaseRevokeRequest { id }).await;
    let status = revoked.expect_err("gone");
    assert_eq!(
        (status.code(), status.message()),
        (Code::NotFound, "etcdserver: requested lease not found")
    );
}

/// A lease outlives its leader: keep-alives go on through the next one, and the keys stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_lease_survives_a_change_of_leader() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let other = (1..=3).find(|id| *id != leader).unwrap();
    let mut leases = LeaseClient::new(cluster.channel(other).await);
    let mut kv = KvClient::new(cluster.channel(other).await);
    let id = leases
        .lease_grant(LeaseGrantRequest { ttl: 4, id: 42 })
        .await
        .unwrap()
        .into_inner()
        .id;
    assert_eq!(id, 42);
    let exists_already = leases
        .lease_grant(LeaseGrantRequest { ttl: 4, id: 42 })
        .await;
    let status = exists_already.expect_err("taken");
    assert_eq!(
        (status.code(), status.message()),
        (Code::FailedPrecondition, "etcdserver: lease already exists")
    );
    leased_put(&mut kv, "kept", id).await;
    cluster.kill(leader);
    let (tx, rx) = mpsc::channel(4);
    let mut answers = leases
        .lease_keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    // Keep it alive every second for 8 s (twice its TTL) across the election.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        tx.send(LeaseKeepAliveRequest { id }).await.unwrap();
        let answer = answers.message().await.unwrap().unwrap();
        assert_eq!(answer.ttl, 4);
        assert!(exists(&mut kv, "kept").await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The raft index a node reports in etcd's Status.
/// The node's committed index, once it has caught up with the leader: a linearizable read
/// first (a follower learns of the last commit only with the leader's next message).
async fn raft_index(channel: Channel) -> u64 {
    use steward::proto::etcd::maintenance_client::MaintenanceClient;
    KvClient::new(channel.clone())
        .range(RangeRequest {
            key: b("raft-index-catch-up"),
            ..RangeRequest::default()
        })
        .await
        .expect("a linearizable read");
    let status = MaintenanceClient::new(channel)
        .status(steward::proto::etcd::StatusRequest {})
        .await
        .expect("status")
        .into_inner();
    status.raft_index
}

/// Keep-alives arriving together on many streams share log entries, and each is still answered
/// on its own stream, in order, with its lease's TTL (0 for a lease that is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_from_many_streams_share_entries_and_each_gets_its_answer() {
    const STREAMS: usize = 32;
    const ROUNDS: usize = 3;
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let channel = cluster.channel(2).await;
    let mut leases = LeaseClient::new(channel.clone());
    let mut ids = vec![];
    for i in 0..STREAMS {
        let ttl = 10 + i as i64;
        let id = leases
            .lease_grant(LeaseGrantRequest { ttl, id: 0 })
            .await
            .unwrap()
            .into_inner()
            .id;
        ids.push((id, ttl));
    }
    // The last one is revoked: its keep-alives are answered with TTL 0.
    let (gone, _) = ids[STREAMS - 1];
    leases
        .lease_revoke(LeaseRevokeRequest { id: gone })
        .await
        .unwrap();
    let mut streams = vec![];
    for _ in 0..STREAMS {
        let (tx, rx) = mpsc::channel(ROUNDS);
        let answers = LeaseClient::new(channel.clone())
            .lease_keep_alive(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        streams.push((tx, answers));
    }
    let before = raft_index(channel.clone()).await;
    for _ in 0..ROUNDS {
        for ((tx, _), (id, _)) in streams.iter().zip(&ids) {
            tx.send(LeaseKeepAliveRequest { id: *id }).await.unwrap();
        }
        for ((_, answers), (id, ttl)) in streams.iter_mut().zip(&ids) {
            let kept = answers.message().await.unwrap().expect("an answer");
            let want = if *id == gone { 0 } else { *ttl };
            assert_eq!((kept.id, kept.ttl), (*id, want));
        }
    }
    let entries = raft_index(channel).await - before;
    let sent = (STREAMS * ROUNDS) as u64;
    assert!(
        entries <= sent / 2,
        "{sent} keep-alives sent together took {entries} log entries"
    );
}

/// At the keep-alive limits (one keep-alive queued, one per entry, one entry in flight) every
/// keep-alive is still answered, none refused: senders past the queue wait for room, each
/// keep-alive gets an entry of its own, and the metrics count the waits and the entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_past_the_queue_limit_wait_and_are_all_answered() {
    // Sent together, while each entry takes a disk write and a round to a follower: more
    // arrive than one queued slot holds.
    const STREAMS: usize = 16;
    let cluster = TestCluster::start_edited(3, |c| {
        c.etcd.keep_alives_queued_max = 1;
        c.etcd.keep_alives_per_entry_max = 1;
        c.etcd.keep_alive_entries_in_flight_max = 1;
    })
    .await;
    cluster.wait_leader().await;
    let channel = cluster.channel(2).await;
    let mut leases = LeaseClient::new(channel.clone());
    let mut streams = vec![];
    for _ in 0..STREAMS {
        let id = leases
            .lease_grant(LeaseGrantRequest { ttl: 30, id: 0 })
            .await
            .unwrap()
            .into_inner()
            .id;
        let (tx, rx) = mpsc::channel(1);
        let answers = LeaseClient::new(channel.clone())
            .lease_keep_alive(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        streams.push((id, tx, answers));
    }
    let before = raft_index(channel.clone()).await;
    for (id, tx, _) in &streams {
        tx.send(LeaseKeepAliveRequest { id: *id }).await.unwrap();
    }
    for (id, _, answers) in &mut streams {
        let kept = answers.message().await.unwrap().expect("an answer");
        assert_eq!((kept.id, kept.ttl), (*id, 30));
    }
    let entries = raft_index(channel).await - before;
    assert!(
        entries >= STREAMS as u64,
        "{STREAMS} keep-alives, one per entry, took {entries} entries"
    );
    let (_, text) = crate::observability::http_get(&cluster.metrics_addr(2), "/metrics").await;
    let metric = |name: &str| crate::observability::sample(&text, name).unwrap_or(0.0);
    assert_eq!(metric("steward_etcd_keep_alives_total"), STREAMS as f64);
    assert_eq!(
        metric("steward_etcd_keep_alive_entries_total"),
        STREAMS as f64
    );
    assert!(
        metric("steward_etcd_keep_alives_waited_total") >= 1.0,
        "no keep-alive waited for room:\n{text}"
    );
    assert_eq!(metric("steward_etcd_keep_alives_queued"), 0.0);
}
