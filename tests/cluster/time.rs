//! Cluster time (README "Time", issue 24): every TTL runs on the leaders' monotonic clocks, so
//! a leader whose wall clock jumps an hour ahead takes no lock away early, and a lock whose
//! refreshes stop still ends within TTL + one election timeout + one sweep interval.
//!
//! The nodes run under libfaketime (Debian's `faketime`), as jepsen's clock nemesis does: only
//! `CLOCK_REALTIME` is faked, and each node re-reads its own settings file every second.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use steward::client::{Client, Consistency, LockMode};
use steward::proto::v1::ClusterStatusRequest;

use crate::harness::{skip_or_fail, wait_for, TestCluster};

const TTL: Duration = Duration::from_secs(10);
/// How often the holder refreshes: well inside the TTL.
const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// How long it keeps refreshing after the step: two TTLs and more.
const HOLD_FOR: Duration = Duration::from_secs(24);
/// The wall-clock step on the leader.
const STEP_S: u64 = 3_600;

/// Debian's libfaketime, multi-threaded build.
fn libfaketime() -> Option<PathBuf> {
    ["x86_64-linux-gnu", "aarch64-linux-gnu"]
        .iter()
        .map(|arch| PathBuf::from(format!("/usr/lib/{arch}/faketime/libfaketimeMT.so.1")))
        .find(|p| p.is_file())
}

fn faketime_env(lib: &Path, file: &Path) -> Vec<(String, String)> {
    [
        ("LD_PRELOAD", lib.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_CACHE_DURATION", "1".to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ("NO_FAKE_STAT", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn real_wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_outlives_a_one_hour_step_of_the_leaders_wall_clock_and_ends_in_bound() {
    let test = "a_lock_outlives_a_one_hour_step_of_the_leaders_wall_clock_and_ends_in_bound";
    let Some(lib) = libfaketime() else {
        skip_or_fail(test, "libfaketime is not installed (apt install faketime)");
        return;
    };
    let mut cluster = TestCluster::prepare(3);
    let ids: Vec<u64> = cluster.nodes.keys().copied().collect();
    for id in &ids {
        let file = cluster.dir.path().join(format!("faketime{id}"));
        std::fs::write(&file, "+0\n").expect("faketime file");
        cluster.nodes.get_mut(id).expect("node").env = faketime_env(&lib, &file);
        cluster.spawn(*id);
    }
    let leader = cluster.wait_leader().await;
    let endpoints: Vec<String> = ids.iter().map(|id| cluster.endpoint(*id)).collect();
    let client = Client::connect(&endpoints).expect("client");

    let grant = client
        .lock_acquire("t", LockMode::Write, "h1", Some(TTL), None, None)
        .await
        .expect("acquire");
    let token = grant.holder.expect("holder").token;

    // The leader's wall clock jumps an hour ahead; wait until its own status says so.
    let file = cluster.dir.path().join(format!("faketime{leader}"));
    std::fs::write(&file, format!("+{STEP_S}\n")).expect("step");
    let mut status = cluster.cluster(leader).await;
    wait_for(
        "the leader's wall clock to step",
        Duration::from_secs(10),
        || {
            let mut status = status.clone();
            async move {
                let reply = status.status(ClusterStatusRequest {}).await.ok()?;
                let me = reply
                    .into_inner()
                    .nodes
                    .into_iter()
                    .find(|n| n.id == leader)?;
                (me.wall_ms > real_wall_ms() + (STEP_S - 60) * 1_000).then_some(())
            }
        },
    )
    .await;
    let before = status
        .status(ClusterStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(
        before.leader_id, leader,
        "the leader did not change: {before:?}"
    );
    // Cluster time, which started at the first leader's wall clock, did not follow the step.
    let me = before
        .nodes
        .iter()
        .find(|n| n.id == leader)
        .expect("leader");
    let real = real_wall_ms();
    assert!(
        me.cluster_ms > real - 60_000 && me.cluster_ms < real + 60_000,
        "cluster time {} ms is not the real time {real} ms (wall {} ms)",
        me.cluster_ms,
        me.wall_ms
    );

    // Refreshing on time, the holder never loses the lock. The first refresh comes a full
    // period after the step, so a sweep by a leader that believed its wall clock would have
    // had its chance first.
    let holding = Instant::now();
    let mut last_sent = Instant::now();
    while holding.elapsed() < HOLD_FOR {
        tokio::time::sleep(REFRESH_EVERY).await;
        last_sent = Instant::now();
        let refreshed = client.lock_refresh("t", "h1", token, Some(TTL)).await;
        assert!(
            refreshed.is_ok(),
            "lost the lock {:?} after the step: {refreshed:?}",
            holding.elapsed()
        );
    }

    // Refreshes stop: the lock ends, not before TTL and not long after.
    let bound = TTL
        + Duration::from_millis(cluster.raft.election_timeout_ms_max)
        + Duration::from_millis(steward::config::LocksConfig::default().sweep_interval_ms);
    wait_for("the lock to end", bound + Duration::from_secs(10), || {
        let client = client.clone();
        async move {
            let info = client.lock_get("t", Consistency::Linearizable).await;
            match info {
                Ok(info) if info.holders.iter().any(|h| h.token == token) => None,
                _ => Some(()),
            }
        }
    })
    .await;
    let ended = last_sent.elapsed();
    assert!(
        ended >= TTL,
        "released {ended:?} after the last refresh was sent"
    );
    assert!(
        ended <= bound + Duration::from_secs(1),
        "released {ended:?} after the last refresh, over the bound {bound:?}"
    );
}
