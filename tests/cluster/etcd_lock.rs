//! Locks and elections on steward's etcd API: `etcdctl lock` and `etcdctl elect` (clientv3's
//! concurrency package over KV, Watch and Lease) with contenders that hand off when one is
//! killed, and etcd's Lock and Election services (v3lockpb, v3electionpb) on the wire.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use steward::proto::etcd::kv_client::KvClient;
use steward::proto::etcd::lease_client::LeaseClient;
use steward::proto::etcd::{LeaseGrantRequest, RangeRequest};
use steward::proto::v3electionpb::election_client::ElectionClient;
use steward::proto::v3electionpb::{
    CampaignRequest, LeaderRequest, ProclaimRequest, ResignRequest,
};
use steward::proto::v3lockpb::lock_client::LockClient;
use steward::proto::v3lockpb::{LockRequest, UnlockRequest};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::harness::{have_etcdctl, wait_for, TestCluster};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// An etcdctl process whose standard output is read line by line.
struct Etcdctl {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Etcdctl {
    fn spawn(endpoint: &str, args: &[&str]) -> Etcdctl {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Etcdctl {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (up to `timeout`) until it has printed `n` lines; returns them all.
    async fn lines(&mut self, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => self.seen.push(line),
                Ok(None) | Err(_) => panic!("etcdctl printed only {:?}", self.seen),
            }
        }
        self.seen.clone()
    }

    /// Lines printed so far without waiting.
    fn printed(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    /// Ctrl-C: etcdctl resigns or unlocks before it exits.
    fn interrupt(&mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(pid, libc::SIGINT) };
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Keys under `prefix`, in key order.
async fn keys(kv: &mut KvClient<Channel>, prefix: &str) -> Vec<String> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("prefix") += 1;
    kv.range(RangeRequest {
        key: b(prefix),
        range_end: Bytes::from(end),
        keys_only: true,
        ..RangeRequest::default()
    })
    .await
    .expect("range")
    .into_inner()
    .kvs
    .iter()
    .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_excludes_a_second_holder_and_hands_off_when_the_first_is_killed() {
    if !have_etcdctl("etcdctl_lock_excludes_a_second_holder_and_hands_off_when_the_first_is_killed")
    {
        return;
    }
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut kv = KvClient::new(cluster.channel(1).await);
    let mut first = Etcdctl::spawn(&cluster.client_addr(1), &["lock", "--ttl=2", "job"]);
    let held = first.lines(1, Duration::from_secs(10)).await;
    assert!(held[0].starts_with("job/"), "{held:?}");
    // The second contender, through another node, waits: its key is there, it prints nothing.
    let mut second = Etcdctl::spawn(&cluster.client_addr(2), &["lock", "--ttl=2", "job"]);
    wait_for(
        "the second contender's key",
        Duration::from_secs(10),
        || {
            let mut kv = kv.clone();
            async move { (keys(&mut kv, "job/").await.len() == 2).then_some(()) }
        },
    )
    .await;
    assert!(
        second.printed().is_empty(),
        "two holders: {:?}",
        second.printed()
    );
    // kill -9 the holder: its session's lease is no longer kept alive, ends, and the lock
    // passes to the second.
    let killed = Instant::now();
    first.kill();
    let got = second.lines(1, Duration::from_secs(10)).await;
    assert!(got[0].starts_with("job/") && got[0] != held[0], "{got:?}");
    // Never before the first's lease could have ended: TTL 2 s after its last keep-alive.
    assert!(
        killed.elapsed() >= Duration::from_millis(1300),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(keys(&mut kv, "job/").await, [got[0].clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_campaigns_observes_and_hands_off_when_the_leader_quits() {
    if !have_etcdctl("etcdctl_elect_campaigns_observes_and_hands_off_when_the_leader_quits") {
        return;
    }
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut one = Etcdctl::spawn(&cluster.client_addr(1), &["elect", "pick", "p1"]);
    let led = one.lines(2, Duration::from_secs(10)).await;
    assert!(led[0].starts_with("pick/") && led[1] == "p1", "{led:?}");
    let mut observer = Etcdctl::spawn(&cluster.client_addr(3), &["elect", "-l", "pick"]);
    let seen = observer.lines(2, Duration::from_secs(10)).await;
    assert_eq!(seen, led);
    let mut two = Etcdctl::spawn(&cluster.client_addr(2), &["elect", "pick", "p2"]);
    let kv = KvClient::new(cluster.channel(1).await);
    wait_for(
        "the second campaigner's key",
        Duration::from_secs(10),
        || {
            let mut kv = kv.clone();
            async move { (keys(&mut kv, "pick/").await.len() == 2).then_some(()) }
        },
    )
    .await;
    assert!(two.printed().is_empty(), "two leaders: {:?}", two.printed());
    // etcdctl elect (3.4) has no session TTL flag (60 s): Ctrl-C, and it resigns.
    one.interrupt();
    let next = two.lines(2, Duration::from_secs(10)).await;
    assert_eq!(next[1], "p2", "{next:?}");
    let observed = observer.lines(4, Duration::from_secs(10)).await;
    assert_eq!(observed[2..], next[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_lock_and_election_services_serve_mutual_exclusion_and_leadership() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let mut leases = LeaseClient::new(cluster.channel(2).await);
    let grant = || {
        let mut leases = leases.clone();
        async move {
            leases
                .lease_grant(LeaseGrantRequest { ttl: 30, id: 0 })
                .await
                .unwrap()
                .into_inner()
                .id
        }
    };
    let (l1, l2) = (grant().await, grant().await);
    let _ = &mut leases;

    // Lock: the second waits until the first unlocks.
    let mut locks = LockClient::new(cluster.channel(1).await);
    let first = locks
        .lock(LockRequest {
            name: b("svc"),
            lease: l1,
        })
        .await
        .unwrap()
        .into_inner()
        .key;
    assert_eq!(first, b(&format!("svc/{l1:x}")));
    let mut other = LockClient::new(cluster.channel(3).await);
    let second = tokio::spawn(async move {
        other
            .lock(LockRequest {
                name: b("svc"),
                lease: l2,
            })
            .await
            .map(|r| r.into_inner().key)
    });
    let mut kv = KvClient::new(cluster.channel(1).await);
    wait_for("the second waiter's key", Duration::from_secs(10), || {
        let mut kv = kv.clone();
        async move { (keys(&mut kv, "svc/").await.len() == 2).then_some(()) }
    })
    .await;
    assert!(!second.is_finished(), "the lock was held twice");
    locks.unlock(UnlockRequest { key: first }).await.unwrap();
    let key = second.await.unwrap().unwrap();
    assert_eq!(key, b(&format!("svc/{l2:x}")));
    assert_eq!(keys(&mut kv, "svc/").await, [format!("svc/{l2:x}")]);

    // Election: campaign, leader, proclaim, observe, resign, hand-off.
    let mut election = ElectionClient::new(cluster.channel(2).await);
    let leader = election
        .campaign(CampaignRequest {
            name: b("e"),
            lease: l1,
            value: b("v1"),
        })
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    let mut observe = election
        .observe(LeaderRequest { name: b("e") })
        .await
        .unwrap()
        .into_inner();
    let value = |r: steward::proto::v3electionpb::LeaderResponse| r.kv.unwrap().value;
    assert_eq!(value(observe.message().await.unwrap().unwrap()), b("v1"));
    election
        .proclaim(ProclaimRequest {
            leader: Some(leader.clone()),
            value: b("v2"),
        })
        .await
        .unwrap();
    assert_eq!(value(observe.message().await.unwrap().unwrap()), b("v2"));
    let now = election
        .leader(LeaderRequest { name: b("e") })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(now.kv.unwrap().value, b("v2"));
    let mut rival = ElectionClient::new(cluster.channel(3).await);
    let campaign = tokio::spawn(async move {
        rival
            .campaign(CampaignRequest {
                name: b("e"),
                lease: l2,
                value: b("w"),
            })
            .await
            .map(|r| r.into_inner().leader.unwrap())
    });
    wait_for("the rival's key", Duration::from_secs(10), || {
        let mut kv = kv.clone();
        async move { (keys(&mut kv, "e/").await.len() == 2).then_some(()) }
    })
    .await;
    assert!(!campaign.is_finished(), "two leaders");
    // A stale leader key proclaims nothing.
    let stale = steward::proto::v3electionpb::LeaderKey {
        rev: leader.rev + 1000,
        ..leader.clone()
    };
    let refused = election
        .proclaim(ProclaimRequest {
            leader: Some(stale),
            value: b("x"),
        })
        .await
        .expect_err("not the leader");
    assert_eq!(refused.message(), "election: not leader");
    election
        .resign(ResignRequest {
            leader: Some(leader),
        })
        .await
        .unwrap();
    let next = campaign.await.unwrap().unwrap();
    assert_eq!(next.key, b(&format!("e/{l2:x}")));
    assert_eq!(value(observe.message().await.unwrap().unwrap()), b("w"));
}
