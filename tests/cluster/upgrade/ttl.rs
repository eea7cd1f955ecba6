//! TTLs running in a data dir of the build before issue 24 (tests/fixtures/upgrade-v2/, its
//! README says how it was made) upgrade as README "Time" promises: that build stamped its wall
//! clock on every entry and stored absolute wall-clock deadlines, and this build goes on from
//! the last stamp, counting only the time it measures itself. So the downtime since (days, by
//! the time this runs) ends nothing: a build that compared those deadlines with its wall clock
//! would end every lock, lease and worker at its first sweep. Each ends once this build has
//! counted what was left of its TTL at the last stamp, and not long after.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use steward::client::Client;
use steward::config::Config;
use steward::proto::v1::ClusterStatusRequest;

use super::copy_dir;
use crate::harness::{wait_for, TestCluster};
use crate::time::holding::{Held, SLACK};

/// make.sh's `TTL`: the pool lease's `busy` expiry, which no answer of the old build shows.
const LEASE_EXPIRY_MS: u64 = 30_000;
/// How often the ends are polled.
const POLL_EVERY: Duration = Duration::from_millis(20);

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade-v2")
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture().join("expected").join(name)).expect("expected");
    serde_json::from_str(&text).expect("expected JSON")
}

fn real_wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

fn ms(value: &Value, what: &str) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("{what}: {value}"))
}

/// One thing held in the fixture and its wall-clock deadline there.
#[derive(Debug)]
struct Fixed {
    held: Held,
    deadline_ms: u64,
}

/// The fixture's last stamp (the old build's state time, `nowMs` of every answer it gave at
/// the end) and what it holds, from those answers.
fn fixture_holdings() -> (u64, Vec<Fixed>) {
    let mut last_ms = None;
    let mut now = |answer: &Value| {
        let now = ms(&answer["nowMs"], "nowMs");
        assert_eq!(*last_ms.get_or_insert(now), now, "one state time");
    };
    let mut fixed = Vec::new();
    for name in ["ttl-snap", "ttl-log"] {
        let lock = expected(&format!("lock-{name}.json"));
        now(&lock);
        let holder = &lock["holders"][0];
        fixed.push(Fixed {
            held: Held::Lock {
                name: name.to_string(),
                token: ms(&holder["token"], "token"),
            },
            deadline_ms: ms(&holder["expiresAtMs"], "expiresAtMs"),
        });
    }
    let workers = expected("workers.json");
    now(&workers);
    let worker = &workers["workers"][0];
    fixed.push(Fixed {
        held: Held::Worker {
            id: worker["id"].as_str().expect("id").to_string(),
        },
        deadline_ms: ms(&worker["expiresAtMs"], "expiresAtMs"),
    });
    let pools = expected("pools.json");
    let busy: Vec<&Value> = pools
        .as_array()
        .expect("resources")
        .iter()
        .filter(|r| r["state"] == "busy")
        .collect();
    assert_eq!(busy.len(), 1, "one busy lease: {pools}");
    let str_of = |key: &str| busy[0][key].as_str().expect(key).to_string();
    fixed.push(Fixed {
        held: Held::Lease {
            rtype: str_of("type"),
            name: str_of("name"),
            owner: str_of("owner"),
        },
        deadline_ms: ms(&busy[0]["lastUpdateMs"], "lastUpdateMs") + LEASE_EXPIRY_MS,
    });
    (last_ms.expect("a state time"), fixed)
}

/// Polls `f` (no more refreshes) until it ends, and checks the end: no sooner than `started` +
/// what was left of its TTL at the fixture's last stamp, no later than that + one election
/// timeout max + its sweep interval (+ `SLACK`). A linearizable read takes effect between its
/// send and its reply, so the end lies between the send of the last probe that saw it held and
/// the reply of the first that saw it ended; each check fires only on that proof.
async fn watch_end(
    f: &Fixed,
    last_ms: u64,
    started: Instant,
    client: &Client,
    config: &Config,
) -> Result<(), String> {
    let left = Duration::from_millis(f.deadline_ms - last_ms);
    let earliest = started + left;
    let over =
        Duration::from_millis(config.raft.election_timeout_ms_max) + f.held.sweep_interval(config);
    let latest = earliest + over + SLACK;
    let mut held_seen = started;
    let ended_seen = loop {
        let sent = Instant::now();
        match f.held.probe(client).await {
            Ok(true) => held_seen = sent,
            Ok(false) => break Instant::now(),
            Err(_) => {}
        }
        if Instant::now() > latest + Duration::from_secs(10) {
            return Err(format!(
                "{} still held {:?} after start + what was left of its TTL",
                f.held.what(),
                earliest.elapsed()
            ));
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    let window = format!(
        "{} ({} ms of its TTL left at the last stamp): ended {} to {} ms after start + that \
         (bound + {} ms, + {} ms slack)",
        f.held.what(),
        left.as_millis(),
        signed_ms(held_seen, earliest),
        signed_ms(ended_seen, earliest),
        over.as_millis(),
        SLACK.as_millis()
    );
    eprintln!("upgrade: {window}");
    if ended_seen < earliest {
        return Err(format!("early: {window}"));
    }
    if held_seen > latest {
        return Err(format!("late: {window}"));
    }
    Ok(())
}

/// `t - origin` in ms, negative when `t` is before it.
fn signed_ms(t: Instant, origin: Instant) -> i128 {
    match t.checked_duration_since(origin) {
        Some(after) => i128::try_from(after.as_millis()).expect("fits"),
        None => -i128::try_from((origin - t).as_millis()).expect("fits"),
    }
}

/// Node 1's count of cluster time, once it has one, with how long after `started` it was read
/// and the wall clock then.
async fn cluster_ms(cluster: &TestCluster, started: Instant) -> (u64, Duration, u64) {
    let status = cluster.cluster(1).await;
    wait_for("node 1's cluster time", Duration::from_secs(10), || {
        let mut status = status.clone();
        async move {
            let reply = status.status(ClusterStatusRequest {}).await.ok()?;
            let me = reply.into_inner().nodes.into_iter().find(|n| n.id == 1)?;
            (me.cluster_ms != 0).then(|| (me.cluster_ms, started.elapsed(), real_wall_ms()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_running_in_a_data_dir_of_the_build_before_cluster_time_go_on_from_its_last_stamp() {
    let (last_ms, fixed) = fixture_holdings();
    for f in &fixed {
        assert!(
            f.deadline_ms > last_ms,
            "{:?} ended before the fixture's last stamp {last_ms}",
            f
        );
    }
    let mut cluster = TestCluster::prepare(1);
    copy_dir(&fixture().join("data"), &cluster.dir.path().join("node1"));
    let started = Instant::now();
    cluster.spawn(1);
    cluster.wait_leader().await;
    let (count_ms, read_after, wall_ms) = cluster_ms(&cluster, started).await;
    let client = Client::connect(&[cluster.endpoint(1)]).expect("client");

    // Right after start, everything is still held, though every deadline is long past on the
    // wall clock.
    let since_ms = real_wall_ms().saturating_sub(last_ms);
    for f in &fixed {
        let held = wait_for("an answer", Duration::from_secs(10), || async {
            f.held.probe(&client).await.ok()
        })
        .await;
        assert!(
            held,
            "{} ended at once: its wall-clock deadline {} ms ago was compared with the wall clock",
            f.held.what(),
            real_wall_ms().saturating_sub(f.deadline_ms)
        );
    }
    eprintln!(
        "upgrade: the fixture's last stamp was {} s ago; at start {:?} cluster time was {count_ms}",
        since_ms / 1_000,
        read_after
    );

    // Each ends once this build has counted what was left of its TTL, and within the bound.
    let config = &cluster.nodes[&1].config;
    let ends = fixed
        .iter()
        .map(|f| watch_end(f, last_ms, started, &client, config));
    let out: Vec<String> = futures::future::join_all(ends)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert!(out.is_empty(), "ended out of bound:\n{}", out.join("\n"));

    // Cluster time went on from the last stamp: not from 0, not from today's wall clock, and by
    // no more than this build measured since it started.
    let read_after_ms = u64::try_from(read_after.as_millis()).expect("fits");
    assert!(
        count_ms >= last_ms && count_ms <= last_ms + read_after_ms,
        "cluster time {count_ms} read {read_after_ms} ms after start did not go on from the \
         fixture's last stamp {last_ms} (the wall clock read {wall_ms} then)"
    );
}
