//! Cluster time (README "Time", issue 24): every TTL runs on the leaders' monotonic clocks, so
//! a leader whose wall clock jumps an hour ahead takes nothing away early (a lock, a pool lease,
//! a worker), a leader change takes nothing away either, and what is no longer refreshed still
//! ends within TTL + one election timeout + one sweep interval of its last refresh.
//!
//! The nodes run under libfaketime (Debian's `faketime`), as jepsen's clock nemesis does: only
//! `CLOCK_REALTIME` is faked, and each node re-reads its own settings file every second.
//! `holding.rs` holds the three kinds the same way: refreshes, probes, the bound.

pub(crate) mod holding;
mod quiet;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use steward::client::{Client, Consistency, LockMode, OpListOptions};
use steward::proto::v1::ClusterStatusRequest;

use crate::harness::{skip_or_fail, wait_for, TestCluster};
use holding::{keep_all, take_lease, take_lock, take_worker, watch_ends, Holding};

/// The lock's TTL under the step: the 10 s.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// The pool lease's and the worker's TTL, and the lock's across leader changes: shorter, to
/// keep the suite's time, and still three refresh periods.
const TTL: Duration = Duration::from_secs(6);
/// How often the holders refresh. Longer than the pool reaper's period (1 s), so that after a
/// step every kind's first refresh comes after its sweep had a chance to end it early.
const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// How long they keep refreshing after the step: two lock TTLs and more.
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

fn faketime_file(cluster: &TestCluster, id: u64) -> PathBuf {
    cluster.dir.path().join(format!("faketime{id}"))
}

/// Three nodes, each under libfaketime with its own (still unstepped) settings file, with a
/// leader; None (after `skip_or_fail`) without libfaketime.
async fn start_under_faketime(test: &str) -> Option<TestCluster> {
    let Some(lib) = libfaketime() else {
        skip_or_fail(test, "libfaketime is not installed (apt install faketime)");
        return None;
    };
    let mut cluster = TestCluster::prepare(3);
    let ids: Vec<u64> = cluster.nodes.keys().copied().collect();
    for id in &ids {
        let file = faketime_file(&cluster, *id);
        std::fs::write(&file, "+0\n").expect("faketime file");
        cluster.nodes.get_mut(id).expect("node").env = faketime_env(&lib, &file);
        cluster.spawn(*id);
    }
    cluster.wait_leader().await;
    Some(cluster)
}

fn client(cluster: &TestCluster) -> Client {
    let endpoints: Vec<String> = cluster
        .running()
        .iter()
        .map(|id| cluster.endpoint(*id))
        .collect();
    Client::connect(&endpoints).expect("client")
}

/// Steps leader `leader`'s wall clock an hour ahead and waits until its own status says so;
/// checks that it still leads. Err when cluster time followed the step: the caller checks that
/// after the holders have shown what the step cost them, the promise the tests are about.
async fn step_wall_clock(cluster: &TestCluster, leader: u64) -> Result<(), String> {
    std::fs::write(faketime_file(cluster, leader), format!("+{STEP_S}\n")).expect("step");
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
    let after = status
        .status(ClusterStatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(after.leader_id, leader, "the leader changed: {after:?}");
    // Cluster time, which started at the first leader's wall clock, did not follow the step.
    let me = after.nodes.iter().find(|n| n.id == leader).expect("leader");
    let real = real_wall_ms();
    if me.cluster_ms > real - 60_000 && me.cluster_ms < real + 60_000 {
        Ok(())
    } else {
        Err(format!(
            "leader {leader}'s cluster time {} ms followed its wall clock {} ms (real time {real} ms)",
            me.cluster_ms, me.wall_ms
        ))
    }
}

/// Takes one of each kind: the lock with `lock_ttl`, the lease and the worker with `TTL`.
async fn take_all(client: &Client, lock_ttl: Duration) -> Vec<Holding> {
    vec![
        take_lock(client, "t", lock_ttl).await,
        take_lease(client, "vm-1", TTL).await,
        take_worker(client, "w-1", TTL).await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_a_pool_lease_and_a_worker_outlive_a_one_hour_step_of_the_leaders_wall_clock_and_end_in_bound(
) {
    let test = "a_lock_a_pool_lease_and_a_worker_outlive_a_one_hour_step_of_the_leaders_wall_clock_and_end_in_bound";
    let Some(cluster) = start_under_faketime(test).await else {
        return;
    };
    let leader = cluster.wait_leader().await;
    let client = client(&cluster);
    let mut held = take_all(&client, LOCK_TTL).await;

    // Another holder waits for the lock from before the step: its wait is a TTL too (a
    // waiter's deadline), set before the step like the holders'.
    let stepped = async {
        wait_for(
            "the waiter to be queued",
            Duration::from_secs(10),
            || async {
                let lock = client.lock_get("t", Consistency::Linearizable).await.ok()?;
                (!lock.waiters.is_empty()).then_some(())
            },
        )
        .await;
        let clock = step_wall_clock(&cluster, leader).await;
        // Refreshing on time, the holders lose nothing. Each first refresh comes a full period
        // after the step, so a sweep by a leader that believed its wall clock would have had
        // its chance first.
        let hold = tokio::time::sleep(HOLD_FOR);
        let kept = keep_all(&mut held, &client, REFRESH_EVERY, hold).await;
        (clock, kept)
    };
    let (waited, reserved, (clock, kept)) = tokio::join!(
        wait_for_the_held_lock(&client),
        a_reservation_ends_on_time(&client),
        stepped
    );
    match (kept, waited, reserved) {
        (Ok(()), Ok(()), Ok(())) => {}
        (kept, waited, reserved) => panic!(
            "after the step:\nholders: {kept:?}\nwaiter: {waited:?}\nreservation: \
             {reserved:?}\n(cluster time: {clock:?})"
        ),
    }
    clock.unwrap_or_else(|e| panic!("{e}"));

    // Refreshes stop: each ends, not before its TTL and not long after. Meanwhile, what is
    // shown follows the middle of the clocks, not the stepped leader's.
    let config = &cluster.nodes[&leader].config;
    let (ends, ()) = tokio::join!(
        watch_ends(&held, &client, config, 1),
        shown_times_follow_the_middle(&cluster, &client, leader)
    );
    if let Err(out) = ends {
        panic!("ended out of bound:\n{out}");
    }
}

/// A second holder asks for the lock the first keeps, waiting `WAIT`: the wait is a TTL too
/// (a waiter's deadline, swept by the leader), so it must end no sooner than `WAIT` after it was
/// sent, refused, however the leader's wall clock stepped meanwhile.
async fn wait_for_the_held_lock(client: &Client) -> Result<(), String> {
    const WAIT: Duration = Duration::from_secs(8);
    let sent = Instant::now();
    let asked = client
        .lock_acquire("t", LockMode::Write, "waiter", Some(TTL), None, Some(WAIT))
        .await;
    let waited = sent.elapsed();
    match asked {
        Ok(grant) => Err(format!(
            "the waiter was granted the held lock after {waited:?}: {grant:?}"
        )),
        Err(status) if waited < WAIT => Err(format!(
            "the wait ended {waited:?} after it was sent, before its {WAIT:?}: {status:?}"
        )),
        Err(_) => Ok(()),
    }
}

/// A resource reserved for `DURATION` just before the step: its end is a deadline too (the
/// leader submits its decommission once it is due), so no decommission may show before
/// `DURATION` after the create was sent; and one shows within the bound's reach after it.
async fn a_reservation_ends_on_time(client: &Client) -> Result<(), String> {
    const DURATION: Duration = Duration::from_secs(8);
    let object = serde_json::json!({
        "kind": "Container",
        "apiVersion": "provision.threefold.io/v1",
        "metadata": { "name": "reserved" },
        "spec": { "flist": "https://hub.grid.tf/ubuntu.flist" },
        "reservation": { "nodeId": "node-a", "durationSeconds": DURATION.as_secs() },
    });
    let sent = Instant::now();
    client
        .create(&object)
        .await
        .map_err(|e| format!("create: {e:?}"))?;
    let opts = OpListOptions {
        target: Some(("Container".into(), String::new(), "reserved".into())),
        consistency: Consistency::Linearizable,
        ..OpListOptions::default()
    };
    loop {
        let listed = client.op_list(&opts).await;
        let answered = sent.elapsed();
        match listed {
            Ok(reply) if !reply.operations.is_empty() && answered < DURATION => {
                return Err(format!(
                    "decommissioned within {answered:?} of its create, before its {DURATION:?}: \
                     {:?}",
                    reply.operations
                ))
            }
            Ok(reply) if !reply.operations.is_empty() => return Ok(()),
            _ if answered > DURATION * 3 => {
                return Err(format!("not decommissioned {answered:?} after its create"))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// README "Time", promise 5: with the leader's wall clock an hour ahead, an object created now
/// shows the real time (the middle of the three clocks), and `cluster status` names the leader's
/// clock.
async fn shown_times_follow_the_middle(cluster: &TestCluster, client: &Client, leader: u64) {
    let before = real_wall_ms() / 1_000 * 1_000;
    let object = serde_json::json!({
        "apiVersion": "deployment.servicefabrik.io/v1alpha1",
        "kind": "Director",
        "metadata": { "name": "shown", "namespace": "default" },
        "spec": { "options": "{}" },
    });
    let created = client.create(&object).await.expect("create");
    let after = real_wall_ms();
    let shown = created["metadata"]["creationTimestamp"]
        .as_str()
        .expect("creationTimestamp")
        .to_string();
    let shown_ms = humantime::parse_rfc3339(&shown)
        .expect("RFC 3339")
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    // Whole seconds; the clocks' middle is a real clock read through a probe 2 s old at most.
    assert!(
        shown_ms + 5_000 >= before && shown_ms <= after + 5_000,
        "creationTimestamp {shown} is not the real time ({before}..{after} ms): the display \
         followed the stepped leader's wall clock"
    );
    let mut status = cluster.cluster(leader).await;
    let warnings = status
        .status(ClusterStatusRequest {})
        .await
        .expect("status")
        .into_inner()
        .warnings;
    let named = format!("node {leader}'s wall clock is ");
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with(&named) && w.contains("ms ahead of the middle")),
        "cluster status does not name leader {leader}'s stepped clock: {warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_a_pool_lease_and_a_worker_outlive_leader_changes_and_a_step_of_the_new_leaders_wall_clock_and_end_in_bound(
) {
    let test = "a_lock_a_pool_lease_and_a_worker_outlive_leader_changes_and_a_step_of_the_new_leaders_wall_clock_and_end_in_bound";
    let Some(mut cluster) = start_under_faketime(test).await else {
        return;
    };
    let first = cluster.wait_leader().await;
    let client = client(&cluster);
    let mut held = take_all(&client, TTL).await;

    // The leader is killed (kill -9) between two refresh rounds; refreshes that find no leader
    // are sent again, and a TTL's worth more go to the new one.
    let mut second = first;
    let change = async {
        tokio::time::sleep(REFRESH_EVERY * 3 / 2).await;
        cluster.kill(first);
        second = cluster.wait_leader().await;
        tokio::time::sleep(TTL).await;
    };
    if let Err(lost) = keep_all(&mut held, &client, REFRESH_EVERY, change).await {
        panic!("lost across the kill of leader {first}:\n{lost}");
    }
    assert_ne!(second, first);

    // The new leader's wall clock steps an hour ahead: it counts on its monotonic clock from
    // what it applied, so still nothing is lost, for two TTLs.
    let clock = step_wall_clock(&cluster, second).await;
    let hold = tokio::time::sleep(TTL * 2);
    if let Err(lost) = keep_all(&mut held, &client, REFRESH_EVERY, hold).await {
        panic!("lost after the step of leader {second}'s wall clock:\n{lost}\n(cluster time: {clock:?})");
    }
    clock.unwrap_or_else(|e| panic!("{e}"));

    // Refreshes stop, and half a TTL later leadership moves to the third node, which was never
    // stepped: it credits the quiet time since it last applied, so each end is still within
    // the bound of its last refresh. The grace after a change of leader counts from the new
    // term's first stamped entry (core's `start_term_clock`): the new leader's lock sweeper
    // proposes one at once, even with nothing due, so one sweep interval is still enough.
    const SWEEPS_AFTER_A_QUIET_CHANGE: u32 = 1;
    let third = cluster
        .running()
        .into_iter()
        .find(|id| *id != second)
        .expect("a third node");
    let transfer = async {
        tokio::time::sleep(TTL / 2).await;
        client.transfer_leader(third).await.expect("transfer");
        let leader = cluster.wait_leader().await;
        assert_eq!(leader, third, "leadership moved to {third}");
        let first_deadline = held.iter().map(Holding::deadline).min().expect("held");
        assert!(
            Instant::now() < first_deadline,
            "the transfer ended {:?} after a deadline: too slow to test the credit",
            first_deadline.elapsed()
        );
    };
    let config = &cluster.nodes[&third].config;
    let ends = watch_ends(&held, &client, config, SWEEPS_AFTER_A_QUIET_CHANGE);
    let (ends, ()) = tokio::join!(ends, transfer);
    if let Err(out) = ends {
        panic!("ended out of bound after the transfer to {third}:\n{out}");
    }
}
