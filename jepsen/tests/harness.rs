//! The cluster harness and the nemeses against real `steward serve` processes in network
//! namespaces. Needs root (or CAP_NET_ADMIN), and libfaketime for the clock test: without them a
//! test fails in CI and elsewhere prints a `SKIPPED:` line and passes (`skip_or_fail`).
//!
//! Run: `cargo test -p jepsen --test harness`. The steward binary is `$STEWARD_BIN` if set, else
//! `target/debug/steward`, which the test builds first with `cargo build --bin steward` (a no-op
//! when it is up to date).

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use jepsen::cluster::{ClusterSpec, NetCluster};
use jepsen::nemesis::{Fault, Nemesis, TimelineKind, LEADER};
use jepsen::netns::{NetnsUnavailable, Network};

/// Generous: two CPUs, debug builds, two clusters at once.
const ELECTION_WAIT: Duration = Duration::from_secs(30);

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false` (CI runners set
/// `CI=true`; `.ci/run` exports `CI=1`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// For a test that cannot run its real part here (`why`), called before it returns early. In
/// CI that fails the test: nothing may pass there without having run. Elsewhere it prints
/// `SKIPPED: <test>: <why>` straight to the process's standard error, which libtest does not
/// capture (it captures `print!`/`eprint!`), so a plain `cargo test` shows the line.
fn skip_or_fail(test: &str, why: &str) {
    assert!(!in_ci(), "{test}: cannot run in CI (CI is set): {why}");
    let line = format!("SKIPPED: {test}: {why}\n");
    if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
        let _ = std::fs::File::from(fd).write_all(line.as_bytes());
    }
}

/// False (after `skip_or_fail`) where namespaces cannot be made.
fn namespaces_available(test: &str) -> bool {
    match Network::create(&[1]) {
        Ok(_) => true, // dropped: removed at once
        Err(e) if e.downcast_ref::<NetnsUnavailable>().is_some() => {
            skip_or_fail(test, &format!("{e:#} (needs root or CAP_NET_ADMIN)"));
            false
        }
        Err(e) => panic!("namespaces: {e:#}"),
    }
}

fn steward_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("STEWARD_BIN") {
        return PathBuf::from(bin);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--bin", "steward"])
        .current_dir(&root)
        .status()
        .expect("run cargo build --bin steward");
    assert!(status.success(), "cargo build --bin steward failed");
    root.join("target/debug/steward")
}

fn spec(name: &str) -> ClusterSpec {
    let work_dir = std::env::temp_dir().join(format!("jepsen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work_dir);
    ClusterSpec {
        nodes: 3,
        steward_bin: steward_bin(),
        work_dir,
        raft: steward::config::RaftConfig::default(),
        locks: steward::config::LocksConfig::default(),
        faketime: None,
    }
}

/// Polls `check` every 100 ms until it returns `Some`, or panics naming `what` at the deadline.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ruleset(ns: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "ruleset"])
        .output()
        .expect("nft list ruleset");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn drop_rules(ns: &str) -> usize {
    ruleset(ns)
        .lines()
        .filter(|l| l.trim_end().ends_with("drop"))
        .count()
}

/// The state letter of /proc/<pid>/stat (R, S, T, ...), `None` if the process is gone.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Namespaces and root-side links whose names start with `prefix`.
fn leftovers(prefix: &str) -> Vec<String> {
    let run = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().expect("ip");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut found: Vec<String> = run(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect();
    found.extend(
        run(&["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(':').nth(1).map(str::trim))
            .filter(|n| n.starts_with(prefix))
            .map(str::to_string),
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_kill_pause_heal_then_nothing_left() {
    if !namespaces_available("partition_kill_pause_heal_then_nothing_left") {
        return;
    }
    let spec = spec("harness");
    let work_dir = spec.work_dir.clone();
    let mut cluster = NetCluster::start(spec).await.expect("start cluster");
    let prefix = cluster.prefix().to_string();
    let ids = cluster.node_ids();
    assert_eq!(ids, vec![1, 2, 3]);
    for (id, endpoint) in ids.iter().zip(cluster.client_endpoints()) {
        assert_eq!(endpoint, format!("http://{}:7001", cluster.ip(*id)));
        let status = cluster.status(*id).await.expect("every node answers");
        assert_eq!(status.nodes.len(), 3, "node {id} sees all members");
    }
    let start = Instant::now();
    let mut nemesis = Nemesis::new(start);

    // Isolate the leader: the other two elect one of themselves.
    let old = cluster.leader().await.expect("a leader");
    nemesis
        .apply(&mut cluster, &Fault::PartitionIsolate(LEADER))
        .await
        .expect("isolate");
    let entry = nemesis.timeline().last().expect("recorded").clone();
    assert_eq!(entry.kind, TimelineKind::Fault);
    assert!(
        entry.what.contains(&format!("isolate node {old} (leader)")),
        "{}",
        entry.what
    );
    let isolated_ns = cluster.netns(old).expect("ns").to_string();
    assert_eq!(drop_rules(&isolated_ns), 2, "{}", ruleset(&isolated_ns));
    let others: Vec<u64> = ids.iter().copied().filter(|&i| i != old).collect();
    let new = eventually(
        "a new leader among the other two",
        ELECTION_WAIT,
        || async {
            let a = cluster.leader_seen_by(others[0]).await?;
            let b = cluster.leader_seen_by(others[1]).await?;
            (a == b && a != old).then_some(a)
        },
    )
    .await;
    assert!(others.contains(&new));

    nemesis.heal(&mut cluster).await.expect("heal");
    assert_eq!(drop_rules(&isolated_ns), 0, "heal flushes the rules");
    cluster
        .wait_for_leader(ELECTION_WAIT)
        .await
        .expect("healed cluster agrees");

    // Every other network fault installs the rules it should, and heal removes them.
    let ns = |c: &NetCluster, id: u64| c.netns(id).expect("ns").to_string();
    let faults = [
        (Fault::PartitionHalves(vec![1], vec![2, 3]), [2, 1, 1]),
        (
            Fault::PartitionBridge {
                left: vec![1],
                middle: 2,
                right: vec![3],
            },
            [1, 0, 1],
        ),
        (Fault::PartitionOneWay { from: 1, to: 3 }, [0, 0, 1]),
        (
            Fault::PacketLoss {
                a: 2,
                b: 3,
                percent: 30,
            },
            [0, 1, 1],
        ),
    ];
    for (fault, counts) in faults {
        nemesis.apply(&mut cluster, &fault).await.expect("apply");
        let seen: Vec<usize> = ids
            .iter()
            .map(|&id| drop_rules(&ns(&cluster, id)))
            .collect();
        assert_eq!(seen, counts, "{fault}");
        nemesis.heal(&mut cluster).await.expect("heal");
        assert!(
            ids.iter().all(|&id| drop_rules(&ns(&cluster, id)) == 0),
            "{fault} healed"
        );
    }
    assert_eq!(
        ruleset(&ns(&cluster, 3)),
        "",
        "heal flushes the whole ruleset"
    );

    // kill -9 a node; heal restarts it on its data and it rejoins.
    let victim = others[0];
    let pid = cluster.pid(victim).expect("running");
    nemesis
        .apply(&mut cluster, &Fault::Kill(victim))
        .await
        .expect("kill");
    assert_eq!(cluster.pid(victim), None);
    assert_eq!(proc_state(pid), None, "killed and reaped");
    nemesis.heal(&mut cluster).await.expect("heal restarts");
    let pid = cluster.pid(victim).expect("restarted");
    eventually("the restarted node to answer", ELECTION_WAIT, || async {
        cluster.leader_seen_by(victim).await
    })
    .await;
    cluster
        .wait_for_leader(ELECTION_WAIT)
        .await
        .expect("agree after restart");

    // Pause one node: it stops answering; resumed, it answers again.
    nemesis
        .apply(&mut cluster, &Fault::Pause(victim))
        .await
        .expect("pause");
    assert_eq!(proc_state(pid), Some('T'), "SIGSTOPped");
    assert!(cluster.is_paused(victim));
    assert!(
        cluster.status(victim).await.is_none(),
        "a paused node does not answer"
    );
    nemesis.heal(&mut cluster).await.expect("heal resumes");
    assert_ne!(proc_state(pid), Some('T'));
    cluster
        .wait_for_leader(ELECTION_WAIT)
        .await
        .expect("agree after resume");

    let kinds: Vec<TimelineKind> = nemesis.timeline().iter().map(|e| e.kind).collect();
    assert_eq!(kinds.len(), 14, "{:#?}", nemesis.timeline());
    assert!(kinds
        .chunks(2)
        .all(|c| c == [TimelineKind::Fault, TimelineKind::Heal]));
    assert!(nemesis
        .timeline()
        .windows(2)
        .all(|w| w[0].at_ns <= w[1].at_ns));

    // A paused node is stopped too.
    cluster.pause(victim);
    let pids: Vec<u32> = ids.iter().filter_map(|&id| cluster.pid(id)).collect();
    cluster.stop().await;
    assert!(
        pids.iter().all(|&p| proc_state(p).is_none()),
        "every node is gone"
    );
    assert_eq!(leftovers(&prefix), Vec::<String>::new());
    let log = std::fs::read_to_string(work_dir.join(format!("node{victim}.log"))).expect("log");
    assert!(
        log.contains("==== jepsen: killed node"),
        "the log shows the kill"
    );
    assert_eq!(
        log.matches("==== jepsen: starting node").count(),
        2,
        "appended across restarts"
    );
    let _ = std::fs::remove_dir_all(work_dir);
}

/// A cluster dropped without `stop` (an error, a panic, a cancelled run) still kills every
/// node, paused ones included, and removes its namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_cluster_leaves_nothing_behind() {
    if !namespaces_available("a_dropped_cluster_leaves_nothing_behind") {
        return;
    }
    let spec = spec("dropped");
    let work_dir = spec.work_dir.clone();
    let cluster = NetCluster::start(spec).await.expect("start cluster");
    let prefix = cluster.prefix().to_string();
    cluster.pause(1);
    let pids: Vec<u32> = cluster
        .node_ids()
        .iter()
        .filter_map(|&id| cluster.pid(id))
        .collect();
    assert_eq!(pids.len(), 3);
    assert_eq!(
        leftovers(&prefix).len(),
        5,
        "3 node namespaces, the bridge, the root link"
    );
    drop(cluster);
    assert!(
        pids.iter().all(|&p| proc_state(p).is_none()),
        "every node is gone"
    );
    assert_eq!(leftovers(&prefix), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(work_dir);
}

/// The creationTimestamp (ms since the epoch) of a new object: the time the leader stamped.
async fn stamped_ms(client: &steward::client::Client, name: &str) -> Option<u64> {
    let obj = serde_json::json!({
        "apiVersion": "v1", "kind": "ClockProbe",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {},
    });
    let created = client.create(&obj).await.ok()?;
    let ts = created["metadata"]["creationTimestamp"].as_str()?;
    let at = humantime::parse_rfc3339(ts).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// A clock step on the leader reaches the time it stamps on entries (libfaketime works on
/// steward), and heal sets the clock file back; replacing the leader leaves three voters, one
/// with a fresh id in the old leader's slot, that serve writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_and_membership_faults_reach_the_cluster() {
    if !namespaces_available("clock_and_membership_faults_reach_the_cluster") {
        return;
    }
    let Some(lib) = jepsen::clock::find_libfaketime() else {
        skip_or_fail(
            "clock_and_membership_faults_reach_the_cluster",
            "libfaketime not installed (apt-get install faketime)",
        );
        return;
    };
    let mut spec = spec("clockmember");
    spec.faketime = Some(lib);
    let work_dir = spec.work_dir.clone();
    let mut cluster = NetCluster::start(spec).await.expect("start cluster");
    let client = steward::client::Client::connect_with_timeout(
        &cluster.client_endpoints(),
        Duration::from_secs(5),
    )
    .expect("client");
    let mut nemesis = Nemesis::new(Instant::now());

    // An hour ahead on the leader: within libfaketime's re-read time the leader stamps it.
    const HOUR_MS: u64 = 3_600_000;
    let leader = cluster.leader().await.expect("a leader");
    nemesis
        .apply(
            &mut cluster,
            &Fault::ClockJump {
                node: LEADER,
                delta_ms: HOUR_MS as i64,
            },
        )
        .await
        .expect("clock jump");
    let file = work_dir.join(format!("node{leader}.faketime"));
    assert_eq!(
        std::fs::read_to_string(&file).expect("clock file"),
        "+3600.000 x1.0000\n"
    );
    let mut probe = 0;
    let skew = eventually(
        "the leader to stamp its stepped clock",
        ELECTION_WAIT,
        || {
            probe += 1;
            let name = format!("probe-{probe}");
            let client = &client;
            async move {
                let stamped = stamped_ms(client, &name).await?;
                let skew = stamped.saturating_sub(now_ms());
                (skew > HOUR_MS / 2).then_some(skew)
            }
        },
    )
    .await;
    assert!(skew < HOUR_MS + 60_000, "about an hour ahead: {skew} ms");
    nemesis.heal(&mut cluster).await.expect("heal");
    assert_eq!(
        std::fs::read_to_string(&file).expect("clock file"),
        "+0.000 x1.0000\n"
    );

    // Replace the leader: removed, its process stopped, a fresh member joins in its slot.
    let leader = cluster.leader().await.expect("a leader");
    let old_pid = cluster.pid(leader).expect("running");
    nemesis
        .apply(&mut cluster, &Fault::Replace(LEADER))
        .await
        .expect("remove the leader");
    assert_eq!(proc_state(old_pid), None, "the removed member is stopped");
    assert_eq!(cluster.pid(leader), None);
    nemesis
        .heal(&mut cluster)
        .await
        .expect("add a fresh member");
    let fresh = cluster.raft_id(leader).expect("slot");
    assert_eq!(fresh, 4, "the next unused id");
    assert_eq!(cluster.slot_of(fresh), Some(leader));
    assert_eq!(cluster.slot_of(leader), None, "the old id is gone");
    let members = client.member_list().await.expect("member list");
    let mut voters: Vec<u64> = members
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.id)
        .collect();
    voters.sort_unstable();
    let mut expected: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|&i| i != leader).collect();
    expected.sort_unstable();
    assert_eq!(voters, expected);
    assert_eq!(members.members.len(), 3, "no learner left over");
    cluster
        .wait_for_leader(ELECTION_WAIT)
        .await
        .expect("all three agree");
    // The fresh member serves a write through its own endpoint.
    let own = steward::client::Client::connect_with_timeout(
        &[cluster.client_endpoint(leader)],
        Duration::from_secs(5),
    )
    .expect("client");
    let mut attempt = 0;
    eventually("a write through the fresh member", ELECTION_WAIT, || {
        attempt += 1;
        let name = format!("through-fresh-{attempt}");
        let own = &own;
        async move { stamped_ms(own, &name).await }
    })
    .await;
    let timeline: Vec<String> = nemesis.timeline().iter().map(|e| e.what.clone()).collect();
    assert!(
        timeline
            .iter()
            .any(|w| w.contains(&format!("joined node {leader} as member 4"))),
        "{timeline:#?}"
    );
    cluster.stop().await;
    let _ = std::fs::remove_dir_all(work_dir);
}
