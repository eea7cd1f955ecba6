//! Upgrades keep working: a node of this build starts on a data dir written by the build before
//! issue 23 (log format 1, snapshot format 6), replays its snapshot and log, and serves the same
//! objects, locks, operations, pools and deployment status as that build did; then it takes
//! writes. The fixture and the answers the old build gave are in tests/fixtures/upgrade-v1/ (its
//! README says how they were made). `ttl.rs`: TTLs running in a data dir of the build before
//! issue 24 (wall-clock deadlines) go on from its last stamp.

mod ttl;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{steward_cli, wait_for, TestCluster};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade-v1")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create data dir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("fixture entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy fixture file");
    }
}

/// `value` without the keys that say when it was read (`nowMs`), so two reads compare equal.
fn without_now(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("nowMs");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture().join("expected").join(name)).expect("expected");
    without_now(serde_json::from_str(&text).expect("expected JSON"))
}

async fn read(endpoint: &str, args: &[&str]) -> Value {
    let out = steward_cli(endpoint, None, args).await;
    without_now(serde_json::from_str(&out).expect("CLI JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_of_the_build_before_serves_the_same_state() {
    let mut cluster = TestCluster::prepare(1);
    let data_dir = cluster.dir.path().join("node1");
    copy_dir(&fixture().join("data"), &data_dir);
    cluster.spawn(1);
    cluster.wait_leader().await;
    let endpoint = cluster.endpoint(1);
    // The old build's own answers, read from the same data dir.
    let objects = wait_for("the fixture's objects", Duration::from_secs(20), || async {
        let got = read(&endpoint, &["get", "Director", "-A", "-o", "json"]).await;
        (got == expected("objects.json")).then_some(got)
    })
    .await;
    assert_eq!(objects["items"].as_array().map(Vec::len), Some(4));
    for lock in ["fixture-write", "fixture-read", "fixture-after"] {
        let got = read(&endpoint, &["lock", "get", lock, "-o", "json"]).await;
        assert_eq!(got, expected(&format!("lock-{lock}.json")), "lock {lock}");
    }
    let ops = read(&endpoint, &["op", "list", "-o", "json"]).await;
    assert_eq!(ops, expected("operations.json"));
    let states: Vec<&str> = ops["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .map(|op| op["state"].as_str().expect("state"))
        .collect();
    assert_eq!(states, ["succeeded", "queued", "queued"]);
    let pools = read(&endpoint, &["pool", "list", "-o", "json"]).await;
    assert_eq!(pools, expected("pools.json"));
    let status = read(
        &endpoint,
        &["status", "vfw-dig", "--mode", "all", "-o", "json"],
    )
    .await;
    assert_eq!(status, expected("status.json"));

    // And it takes writes, at the next store revision.
    let status = read(&endpoint, &["cluster", "status", "-o", "json"]).await;
    let revision = status["nodes"][0]["revision"]
        .as_u64()
        .expect("store revision");
    assert!(
        revision >= 23,
        "the fixture's store revision is 23, read {revision}"
    );
    let yaml = cluster.dir.path().join("new.yaml");
    std::fs::write(
        &yaml,
        "apiVersion: v1\nkind: Director\nmetadata:\n  name: after-upgrade\nspec: {}\n",
    )
    .expect("write yaml");
    steward_cli(
        &endpoint,
        None,
        &["apply", "-f", yaml.to_str().expect("path")],
    )
    .await;
    let created = read(
        &endpoint,
        &["get", "Director", "after-upgrade", "-o", "json"],
    )
    .await;
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("rv number");
    assert_eq!(rv, revision + 1, "the first write after the upgrade");
}
