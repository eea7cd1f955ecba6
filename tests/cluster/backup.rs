//! `steward snapshot save` from a running cluster, `steward snapshot restore` into the data
//! dirs of a new cluster, and every object compared between the two.

use std::time::Duration;

use steward::proto::v1::{Consistency, UpdateRequest};

use crate::harness::{create, director, list_all, parse, steward_cli, wait_for, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_saved_snapshot_restores_into_a_new_cluster_with_every_object() {
    let old = TestCluster::start(3).await;
    let leader = old.wait_leader().await;
    let mut res = old.res(leader).await;
    // Creates, updates and deletes, so revisions, generations and gaps are all exercised.
    for i in 0..300 {
        let state = if i % 3 == 0 { "succeeded" } else { "in_queue" };
        create(&mut res, director(&format!("d{i:03}"), &[("state", state)]))
            .await
            .expect("create");
    }
    for i in (0..300).step_by(7) {
        let name = format!("d{i:03}");
        let mut obj = crate::harness::get(&mut res, &name, Consistency::Linearizable)
            .await
            .expect("get");
        obj["spec"]["options"] = serde_json::json!(format!("updated {i}"));
        res.update(UpdateRequest {
            object_json: obj.to_string(),
            ..Default::default()
        })
        .await
        .expect("update");
    }
    for i in (0..300).step_by(11) {
        res.delete(steward::proto::v1::DeleteRequest {
            kind: "Director".into(),
            namespace: "default".into(),
            name: format!("d{i:03}"),
            ..Default::default()
        })
        .await
        .expect("delete");
    }
    let (before, revision) = list_all(&mut res, "", 100).await;
    assert_eq!(before.len(), 300 - 28);

    // Saved through a follower: it reads at a linearizable point like any other read.
    let follower = *old
        .running()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let backups = tempfile::tempdir().expect("tempdir");
    let file = backups.path().join("backup.snap");
    let file_arg = file.display().to_string();
    let endpoint = old.client_addr(follower);
    let out = steward_cli(&endpoint, None, &["snapshot", "save", &file_arg]).await;
    assert!(
        out.starts_with(&format!(
            "snapshot saved to {file_arg}: revision {revision}, "
        )),
        "{out}"
    );
    assert!(!backups.path().join("backup.snap.part").exists());
    let status = parse(
        &steward_cli(
            &endpoint,
            None,
            &["snapshot", "status", &file_arg, "-o", "json"],
        )
        .await,
    );
    assert_eq!(status["revision"], revision);
    assert_eq!(status["checkedObjects"], before.len());
    assert!(
        out.contains(status["sha256"].as_str().expect("sha256")),
        "{out}"
    );

    // A new cluster: every member restored from the file with its own config, then started.
    let mut new = TestCluster::prepare(3);
    for id in 1..=3 {
        let config = new.config_path(id).display().to_string();
        let out = steward_cli(
            &endpoint,
            None,
            &["snapshot", "restore", &file_arg, "--config", &config],
        )
        .await;
        assert!(
            out.starts_with(&format!("restored node {id} into ")),
            "{out}"
        );
    }
    // A second restore into a data dir that now holds one is refused, and changes nothing.
    let config = new.config_path(1).display().to_string();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["snapshot", "restore", &file_arg, "--config", &config])
        .output()
        .expect("run steward");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "one line on error: {stderr}"
    );
    for id in 1..=3 {
        new.spawn(id);
    }
    let new_leader = new.wait_leader().await;
    drop(old);

    // Every object, field for field (uid, resourceVersion, generation, timestamps included),
    // read from every node of the new cluster.
    for id in 1..=3 {
        let res = new.res(id).await;
        let after = wait_for("the restored objects", Duration::from_secs(20), || {
            let mut res = res.clone();
            async move {
                let (items, rev) = list_all(&mut res, "", 100).await;
                (rev >= revision).then_some((items, rev))
            }
        })
        .await;
        assert_eq!(after.0, before, "node {id}");
        assert_eq!(after.1, revision, "node {id}");
    }
    // The new cluster goes on from there: a write gets the next revision, and a name deleted
    // before the save is free.
    let mut res = new.res(new_leader).await;
    let created = create(&mut res, director("d000", &[]))
        .await
        .expect("create");
    let rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("resourceVersion");
    assert_eq!(rv, revision + 1);

    // A damaged file is refused by status and restore alike.
    let mut bytes = std::fs::read(&file).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&file, &bytes).expect("write");
    let damaged = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["snapshot", "status", &file_arg])
        .output()
        .expect("run steward");
    assert!(!damaged.status.success());
    let stderr = String::from_utf8_lossy(&damaged.stderr);
    assert!(
        stderr.contains("damaged") || stderr.contains("does not decode"),
        "{stderr}"
    );
}
