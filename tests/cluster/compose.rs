//! The Docker Compose cluster of cluster-configs/docker/, as an operator runs it: the image built
//! FROM scratch by build-image.sh, `docker-compose up`, writes and linearizable reads through
//! every node from the host, a node stopped and the cluster serving on, the node started again
//! and catching up, `docker-compose down -v`. Skipped, saying so, where no Docker engine or
//! docker-compose answers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use steward::client::Client;
use steward::proto::v1::Consistency;

use crate::harness::{director, free_port, parse, wait_for};

fn compose_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster-configs/docker")
}

/// Whether `program args` runs and succeeds.
fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a command to completion off the async runtime; panics with its output on failure.
async fn run(mut cmd: Command) -> String {
    let what = format!("{cmd:?}");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run"))
        .await
        .expect("join");
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One Compose project; `down -v` and the image removed when dropped, whatever happened.
struct Project {
    name: String,
    image: String,
    env: Vec<(String, String)>,
}

impl Project {
    fn compose(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.current_dir(compose_dir())
            .args(["-p", &self.name, "-f", "docker-compose.yml"])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = self.compose(&["down", "-v", "--timeout", "5"]).output();
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn compose_cluster_starts_serves_survives_a_stopped_node_and_stops() {
    if !succeeds("docker", &["info"]) || !succeeds("docker-compose", &["version"]) {
        eprintln!("SKIPPED: no Docker engine or docker-compose here");
        return;
    }
    let tag = format!("steward:compose-test-{}", std::process::id());
    let mut build = Command::new("bash");
    build
        .arg(compose_dir().join("build-image.sh"))
        .arg(env!("CARGO_BIN_EXE_steward"))
        .arg(&tag);
    run(build).await;

    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let mut env = vec![("STEWARD_IMAGE".to_string(), tag.clone())];
    for i in 0..3 {
        env.push((format!("STEWARD_PORT_{}", i + 1), ports[i].to_string()));
        env.push((
            format!("STEWARD_METRICS_PORT_{}", i + 1),
            ports[i + 3].to_string(),
        ));
    }
    let project = Project {
        name: format!("stewardtest{}", std::process::id()),
        image: tag,
        env,
    };
    run(project.compose(&["up", "-d"])).await;

    let endpoint = |i: usize| format!("127.0.0.1:{}", ports[i]);
    let all: Vec<String> = (0..3).map(endpoint).collect();
    let client = Client::connect_with_timeout(&all, Duration::from_secs(5)).expect("client");
    let leader = wait_for(
        "the Compose cluster to elect a leader seen by all three nodes",
        Duration::from_secs(90),
        || {
            let client = client.clone();
            async move {
                let status = client.cluster_status().await.ok()?;
                let up = status.nodes.iter().filter(|n| n.serving).count();
                (status.leader_id != 0 && up == 3).then_some(status.leader_id)
            }
        },
    )
    .await;

    // Written through each node from the host; read back linearizably through each.
    for i in 0..3 {
        let node = Client::connect(&[endpoint(i)]).expect("client");
        node.create(&parse(&director(&format!("compose-{i}"), &[])))
            .await
            .unwrap_or_else(|e| panic!("create through node {}: {e}", i + 1));
    }
    for i in 0..3 {
        let node = Client::connect(&[endpoint(i)]).expect("client");
        for j in 0..3 {
            node.get(
                "Director",
                "default",
                &format!("compose-{j}"),
                Consistency::Linearizable,
            )
            .await
            .unwrap_or_else(|e| panic!("read compose-{j} on node {}: {e}", i + 1));
        }
    }

    // Stop the leader's container (SIGTERM): the other two elect and serve writes.
    let service = format!("steward{leader}");
    run(project.compose(&["stop", "-t", "15", &service])).await;
    let others: Vec<String> = (0..3)
        .filter(|i| *i as u64 + 1 != leader)
        .map(endpoint)
        .collect();
    let rest = Client::connect_with_timeout(&others, Duration::from_secs(5)).expect("client");
    wait_for(
        "a write with the leader's container stopped",
        Duration::from_secs(60),
        || {
            let rest = rest.clone();
            async move {
                // An earlier attempt whose answer was lost may have created it.
                match rest.create(&parse(&director("while-stopped", &[]))).await {
                    Ok(_) => Some(()),
                    Err(e) if e.code() == tonic::Code::AlreadyExists => Some(()),
                    Err(_) => None,
                }
            }
        },
    )
    .await;

    // Started again on its volume, it catches up.
    run(project.compose(&["start", &service])).await;
    let back = Client::connect(&[endpoint(leader as usize - 1)]).expect("client");
    wait_for(
        "the restarted node to serve what was written while it was down",
        Duration::from_secs(90),
        || {
            let back = back.clone();
            async move {
                back.get(
                    "Director",
                    "default",
                    "while-stopped",
                    Consistency::Linearizable,
                )
                .await
                .ok()
            }
        },
    )
    .await;

    let ps = run(project.compose(&["ps"])).await;
    assert_eq!(ps.matches(" Up ").count(), 3, "{ps}");
    run(project.compose(&["down", "-v", "--timeout", "15"])).await;
}
