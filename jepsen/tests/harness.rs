//! The cluster harness and the nemeses against real `steward serve` processes in network
//! namespaces. Needs root (or CAP_NET_ADMIN), and libfaketime for the clock test: without them a
//! test fails in CI and elsewhere prints a `SKIPPED:` line and passes (`skip_or_fail`).
//!
//! Run: `cargo test -p jepsen --test harness`. The steward binary is `$STEWARD_BIN` if set, else
//! the one `cargo build --bin steward` builds (a no-op when it is up to date) in this test's own
//! target directory (so `CARGO_TARGET_DIR` is followed).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use jepsen::cluster::{ClusterSpec, NetCluster, CLIENT_PORT, PEER_PORT};
use jepsen::life;
use jepsen::nemesis::{Fault, Nemesis, TimelineKind, LEADER};
use jepsen::netns::{NetnsUnavailable, Network};
use jepsen::process::Ask;

#[path = "../../tests/support/skip.rs"]
mod skip;
use skip::skip_or_fail;

/// Generous: two CPUs, debug builds, two clusters at once.
const ELECTION_WAIT: Duration = Duration::from_secs(30);

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
    // This test binary is target/<profile>/deps/harness-<hash>: the steward binary is built into
    // the same target directory, wherever CARGO_TARGET_DIR puts it.
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--bin",
            "steward",
            "--profile",
            &profile,
        ])
        .current_dir(&root)
        .status()
        .expect("run cargo build --bin steward");
    assert!(status.success(), "cargo build --bin steward failed");
    let bin = dir.join("steward");
    assert!(bin.is_file(), "no steward binary at {}", bin.display());
    bin
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
    let exits = cluster.stop().await;
    assert!(
        pids.iter().all(|&p| proc_state(p).is_none()),
        "every node is gone"
    );
    // Every exit was the nemesis's kill or the final stop, and no log shows a panic: no
    // finding where nothing went wrong.
    assert_eq!(exits.len(), 4, "{exits:#?}");
    assert_eq!(
        exits.iter().filter(|e| e.asked == Some(Ask::Kill)).count(),
        1
    );
    let hits = life::scan_dir(&work_dir).expect("scan");
    assert_eq!(life::report(&exits, &hits, start), None);
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
/// Node `raft_id`'s wall clock as it reported it in `Cluster.Status`.
async fn wall_ms_of(client: &steward::client::Client, raft_id: u64) -> Option<u64> {
    let status = client.cluster_status().await.ok()?;
    let node = status.nodes.into_iter().find(|n| n.id == raft_id)?;
    (node.wall_ms > 0).then_some(node.wall_ms)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// A clock step on the leader reaches its wall clock (libfaketime works on steward; no TTL
/// reads that clock since issue 24, README "Time"), and heal sets the clock file back; replacing the leader leaves three voters, one
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

    // An hour ahead on the leader: within libfaketime's re-read time its status shows it.
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
    let raft_id = cluster.raft_id(leader).expect("running");
    let skew = eventually("the leader's wall clock to step", ELECTION_WAIT, || {
        let client = &client;
        async move {
            let wall = wall_ms_of(client, raft_id).await?;
            let skew = wall.saturating_sub(now_ms());
            (skew > HOUR_MS / 2).then_some(skew)
        }
    })
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
        async move {
            let obj = serde_json::json!({
                "apiVersion": "v1", "kind": "Probe",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {},
            });
            own.create(&obj).await.ok()
        }
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

/// A node that dies behind the nemesis's back (here SIGABRT, as a node whose panic hook aborted)
/// stays on record as ended on its own, with its time and log tail, although the nemesis then
/// kills its slot and heals; the nemesis's own kill of another node is not a finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_nobody_asked_for_stays_a_finding_after_a_kill_of_its_slot() {
    if !namespaces_available("an_exit_nobody_asked_for_stays_a_finding_after_a_kill_of_its_slot") {
        return;
    }
    let spec = spec("crash");
    let work_dir = spec.work_dir.clone();
    let mut cluster = NetCluster::start(spec).await.expect("start cluster");
    let start = Instant::now();
    cluster.set_epoch(start);
    let mut nemesis = Nemesis::new(start);

    let pid = cluster.pid(2).expect("running");
    // SAFETY: kill(2) on a live child of this process (the cluster has not reaped it).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGABRT) };
    eventually("node 2's exit on record", ELECTION_WAIT, || async {
        (!cluster.unexpected_exits().is_empty()).then_some(())
    })
    .await;
    assert_eq!(cluster.pid(2), None, "an ended node is not running");
    nemesis
        .apply(&mut cluster, &Fault::Kill(2))
        .await
        .expect("kill node 2");
    nemesis
        .apply(&mut cluster, &Fault::Kill(3))
        .await
        .expect("kill node 3");
    nemesis.heal(&mut cluster).await.expect("heal");
    let what: Vec<&str> = nemesis.timeline().iter().map(|e| e.what.as_str()).collect();
    assert!(what[0].contains("not running: nothing done"), "{what:?}");
    assert!(what[2].contains("restarted [3]"), "{what:?}");
    cluster
        .wait_for_leader(ELECTION_WAIT)
        .await
        .expect_err("wait_for_leader reports the crash");

    let exits = cluster.stop().await;
    let hits = life::scan_dir(&work_dir).expect("scan");
    let report = life::report(&exits, &hits, start).expect("a finding");
    assert!(
        report.contains(&format!(
            "node 2 (member 2, pid {pid}) ended on its own at "
        )),
        "{report}"
    );
    assert!(report.contains("SIGABRT"), "{report}");
    assert!(report.contains("last lines of"), "{report}");
    assert!(!report.contains("node 3 "), "{report}");
    let summary = life::summary(&exits, &hits);
    assert!(
        summary.starts_with("nodes ended on their own: node 2 (signal: 6 (SIGABRT)"),
        "{summary}"
    );
    let node3: Vec<Option<Ask>> = exits
        .iter()
        .filter(|e| e.slot == 3)
        .map(|e| e.asked)
        .collect();
    assert_eq!(node3, vec![Some(Ask::Kill), Some(Ask::Stop)]);
    let _ = std::fs::remove_dir_all(work_dir);
}

/// How long a connect or an echo may take before the test calls it dropped (a dropped SYN is
/// retried for much longer than this; an answer on the bridge takes well under a millisecond).
const DROPPED_AFTER: Duration = Duration::from_secs(2);

/// Runs `f` on a thread that has entered network namespace `ns`. Sockets made there belong to
/// that namespace whichever thread uses them afterwards.
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let file = std::fs::File::open(&path).expect("namespace file");
                // SAFETY: setns(2) on this thread only, with a descriptor that outlives the call.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {ns}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
    })
}

/// An echo server on `addr` inside namespace `ns`, for the life of the test process.
fn echo_server(ns: &str, addr: SocketAddr) {
    let listener = in_netns(ns, || TcpListener::bind(addr)).expect("bind");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// A TCP connection from namespace `ns` to `addr`, or why not within `DROPPED_AFTER`.
fn connect_from(ns: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    in_netns(ns, || TcpStream::connect_timeout(&addr, DROPPED_AFTER))
}

/// Whether a message sent on `stream` comes back from the echo server in time.
fn echoes(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(DROPPED_AFTER))
        .expect("read timeout");
    let mut back = [0u8; 4];
    stream.write_all(b"ping").is_ok() && stream.read_exact(&mut back).is_ok() && &back == b"ping"
}

/// The one-way partition is one way over TCP: node 1 can neither open a connection to node 3's
/// ports nor send on one it opened before the fault, while node 3's connections to node 1
/// carry both ways; heal restores node 1's. The nodes' processes are replaced by echo servers
/// on their peer ports so that what gets through is exactly what the test sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_partition_cuts_one_direction_only() {
    if !namespaces_available("a_one_way_partition_cuts_one_direction_only") {
        return;
    }
    let spec = spec("oneway");
    let work_dir = spec.work_dir.clone();
    let mut cluster = NetCluster::start(spec).await.expect("start cluster");
    for id in cluster.node_ids() {
        cluster.kill(id);
    }
    let (a, b) = (1, 3);
    let names: Vec<String> = (0..=3)
        .map(|id| cluster.netns(id).unwrap_or_default().to_string())
        .collect();
    let ips: Vec<String> = (0..=3).map(|id| cluster.ip(id)).collect();
    let ns = |id: u64| names[id as usize].clone();
    let addr = |id: u64, port: u16| -> SocketAddr {
        format!("{}:{port}", ips[id as usize])
            .parse()
            .expect("addr")
    };
    echo_server(&ns(a), addr(a, PEER_PORT));
    echo_server(&ns(b), addr(b, PEER_PORT));
    let mut early = connect_from(&ns(a), addr(b, PEER_PORT)).expect("1 reaches 3 before");
    assert!(echoes(&mut early), "1 -> 3 works before the fault");
    let refused = connect_from(&ns(a), addr(b, CLIENT_PORT)).expect_err("nothing listens");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    let mut nemesis = Nemesis::new(Instant::now());
    nemesis
        .apply(&mut cluster, &Fault::PartitionOneWay { from: a, to: b })
        .await
        .expect("one-way partition");
    let what = &nemesis.timeline()[0].what;
    assert!(
        what.contains("node 1 cannot reach node 3") && what.contains("which still reaches it"),
        "{what}"
    );
    let cut = connect_from(&ns(a), addr(b, PEER_PORT)).expect_err("1 cannot connect to 3");
    assert_eq!(
        cut.kind(),
        std::io::ErrorKind::TimedOut,
        "dropped, not refused"
    );
    let cut = connect_from(&ns(a), addr(b, CLIENT_PORT)).expect_err("nor to its client port");
    assert_eq!(
        cut.kind(),
        std::io::ErrorKind::TimedOut,
        "dropped, not refused"
    );
    assert!(
        !echoes(&mut early),
        "nor send on a connection opened before"
    );
    let mut back = connect_from(&ns(b), addr(a, PEER_PORT)).expect("3 still reaches 1");
    assert!(echoes(&mut back), "and 1 answers 3 on it");

    nemesis.heal(&mut cluster).await.expect("heal");
    let mut healed = connect_from(&ns(a), addr(b, PEER_PORT)).expect("healed");
    assert!(echoes(&mut healed), "1 -> 3 works after the heal");
    cluster.stop().await;
    let _ = std::fs::remove_dir_all(work_dir);
}
