//! The Docker Compose cluster of cluster-configs/docker/, as an operator runs it: the image built
//! FROM scratch by build-image.sh, certificates made by gen-certs.sh (`steward certs create`)
//! into a temp dir the compose file mounts them from (`STEWARD_CERTS`), `docker-compose up`,
//! every node healthy by its in-container `steward cluster health` over mutual TLS, plaintext
//! and certificate-less clients refused, writes and linearizable reads through every node from
//! the host over mutual TLS, a node stopped and the cluster serving on, the node started again
//! and catching up, `docker-compose down -v`. Where no Docker engine or docker-compose answers
//! it fails in CI and is skipped elsewhere, saying so (`harness::skip_or_fail`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use steward::client::Client;
use steward::proto::v1::Consistency;
use steward::tls::ClientTls;

use crate::harness::{director, free_port, parse, skip_or_fail, wait_for};

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

/// How to run docker-compose on one project: its name and the environment the compose file
/// reads (image, ports, certificates dir).
#[derive(Clone)]
struct Compose {
    name: String,
    env: Vec<(String, String)>,
}

impl Compose {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.current_dir(compose_dir())
            .args(["-p", &self.name, "-f", "docker-compose.yml"])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// What Docker's healthcheck says of `service`'s container (`starting`, `healthy`,
    /// `unhealthy`); None when there is no container to ask.
    fn health(&self, service: &str) -> Option<String> {
        let ps = self.command(&["ps", "-q", service]).output().ok()?;
        let id = String::from_utf8_lossy(&ps.stdout).trim().to_string();
        if id.is_empty() {
            return None;
        }
        let inspect = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Health.Status}}", &id])
            .output()
            .ok()?;
        inspect
            .status
            .success()
            .then(|| String::from_utf8_lossy(&inspect.stdout).trim().to_string())
    }
}

/// One Compose project; `down -v` and the image removed when dropped, whatever happened.
struct Project {
    compose: Compose,
    image: String,
}

impl Project {
    fn compose(&self, args: &[&str]) -> Command {
        self.compose.command(args)
    }

    /// Waits until Docker calls the containers of every service in `services` healthy: its
    /// healthcheck, `steward cluster health` over mutual TLS in the container, passed.
    async fn wait_healthy(&self, services: &[&str], timeout: Duration) {
        let what = format!("Docker to call {services:?} healthy");
        wait_for(&what, timeout, || {
            let compose = self.compose.clone();
            let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
            async move {
                tokio::task::spawn_blocking(move || {
                    services
                        .iter()
                        .all(|s| compose.health(s).as_deref() == Some("healthy"))
                        .then_some(())
                })
                .await
                .expect("join")
            }
        })
        .await
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
        skip_or_fail(
            "compose::compose_cluster_starts_serves_survives_a_stopped_node_and_stops",
            "no Docker engine or docker-compose answers here",
        );
        return;
    }
    // The binary of this build (the target dir cargo test uses), in the image and making the
    // certificates.
    let steward = env!("CARGO_BIN_EXE_steward");
    let tag = format!("steward:compose-test-{}", std::process::id());
    let mut build = Command::new("bash");
    build
        .arg(compose_dir().join("build-image.sh"))
        .arg(steward)
        .arg(&tag);
    run(build).await;

    // Declared before the project, so dropped after it: the containers go before their files.
    let certs_root = tempfile::tempdir().expect("tempdir");
    let certs = certs_root.path().join("certs");
    let mut gen = Command::new("bash");
    gen.arg(compose_dir().join("gen-certs.sh"))
        .arg(steward)
        .arg(&certs);
    run(gen).await;
    let admin = ClientTls::from_files(
        &certs.join("ca.pem"),
        Some(&certs.join("admin.pem")),
        Some(&certs.join("admin-key.pem")),
    )
    .expect("admin tls");

    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let mut env = vec![
        ("STEWARD_IMAGE".to_string(), tag.clone()),
        ("STEWARD_CERTS".to_string(), certs.display().to_string()),
    ];
    for i in 0..3 {
        env.push((format!("STEWARD_PORT_{}", i + 1), ports[i].to_string()));
        env.push((
            format!("STEWARD_METRICS_PORT_{}", i + 1),
            ports[i + 3].to_string(),
        ));
    }
    let project = Project {
        compose: Compose {
            name: format!("stewardtest{}", std::process::id()),
            env,
        },
        image: tag,
    };
    run(project.compose(&["up", "-d"])).await;

    let endpoint = |i: usize| format!("127.0.0.1:{}", ports[i]);
    let connect = |endpoints: &[String]| {
        Client::connect_with(endpoints, Duration::from_secs(5), Some(&admin)).expect("client")
    };
    let all: Vec<String> = (0..3).map(endpoint).collect();
    let client = connect(&all);
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
    let services = ["steward1", "steward2", "steward3"];
    project
        .wait_healthy(&services, Duration::from_secs(60))
        .await;

    // Nothing but mutual TLS is served: plaintext, and TLS without a client certificate, are
    // refused on every node.
    let ca_only = ClientTls::from_files(&certs.join("ca.pem"), None, None).expect("ca only");
    for i in 0..3 {
        let plaintext =
            Client::connect_with_timeout(&[endpoint(i)], Duration::from_secs(2)).expect("client");
        let refused = plaintext.cluster_status().await;
        assert!(refused.is_err(), "node {} answered plaintext", i + 1);
        let no_cert = Client::connect_with(&[endpoint(i)], Duration::from_secs(2), Some(&ca_only))
            .expect("client");
        let refused = no_cert.cluster_status().await;
        assert!(
            refused.is_err(),
            "node {} answered a client without a certificate",
            i + 1
        );
    }

    // Written through each node from the host; read back linearizably through each.
    for i in 0..3 {
        let node = connect(&[endpoint(i)]);
        node.create(&parse(&director(&format!("compose-{i}"), &[])))
            .await
            .unwrap_or_else(|e| panic!("create through node {}: {e}", i + 1));
    }
    for i in 0..3 {
        let node = connect(&[endpoint(i)]);
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
    let rest = connect(&others);
    // At once, with no retry of ours: the others still name the stopped leader, whose name no
    // longer resolves, until they elect a new one; the node reached holds the write and sends
    // it to the new leader within the client's deadline (before: "forwarding to the leader
    // failed; the write's outcome is unknown: dns error" for about 1.5 s).
    rest.create(&parse(&director("while-stopped", &[])))
        .await
        .expect("a write right after the leader's container stopped");

    // Started again on its volume, it catches up, and Docker calls it healthy again.
    run(project.compose(&["start", &service])).await;
    let back = connect(&[endpoint(leader as usize - 1)]);
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
    project
        .wait_healthy(&services, Duration::from_secs(60))
        .await;

    let ps = run(project.compose(&["ps"])).await;
    assert_eq!(ps.matches(" Up (healthy) ").count(), 3, "{ps}");
    run(project.compose(&["down", "-v", "--timeout", "15"])).await;
}
