//! What operators and load balancers see: gRPC health (grpc.health.v1) following Raft, server
//! reflection listing the client API, and the Prometheus `/metrics` endpoint exposing Raft,
//! gRPC, store, lock, operation and pool series with the values the cluster really has.

use std::time::Duration;

use steward::proto::v1::Consistency;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

use crate::harness::{create, director, get, wait_for, TestCluster};

/// `GET path` over plain HTTP/1.1: (status code, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the metrics port");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    assert!(
        code != 200
            || head
                .to_ascii_lowercase()
                .contains("application/openmetrics-text"),
        "content type of {path}: {head}"
    );
    (code, body.to_string())
}

/// The value of the sample `series` (name with its labels, as printed) in `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn health(cluster: &TestCluster, id: u64, service: &str) -> Result<i32, tonic::Status> {
    let mut client = HealthClient::new(cluster.channel(id).await);
    client
        .check(HealthCheckRequest {
            service: service.to_string(),
        })
        .await
        .map(|r| r.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_reflection_and_metrics_show_the_cluster_as_it_is() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_leader().await;
    let serving = ServingStatus::Serving as i32;

    // Health: every node with a leader serves, as a whole ("") and per service; an unknown
    // service is NotFound, as grpc.health.v1 says.
    for id in 1..=3 {
        for service in ["", "steward.v1.Resources", "steward.v1.Locks"] {
            let status = wait_for("SERVING", Duration::from_secs(10), || async {
                health(&cluster, id, service)
                    .await
                    .ok()
                    .filter(|s| *s == serving)
            })
            .await;
            assert_eq!(status, serving, "node {id} service {service:?}");
        }
        let err = health(&cluster, id, "steward.v1.Nope")
            .await
            .expect_err("unknown service");
        assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    }

    // Reflection lists the client API (and health), not the peer service.
    let mut reflection = ServerReflectionClient::new(cluster.channel(leader).await);
    let list = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter([list]))
        .await
        .expect("reflection stream")
        .into_inner();
    let answer = answers
        .message()
        .await
        .expect("reflection answer")
        .expect("one answer");
    let Some(MessageResponse::ListServicesResponse(services)) = answer.message_response else {
        panic!("not a service list: {answer:?}");
    };
    let names: Vec<String> = services.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "steward.v1.Resources",
        "steward.v1.LeaseService",
        "steward.v1.Cluster",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.contains("raft")),
        "the peer service is not advertised: {names:?}"
    );

    // Traffic the metrics must show: a create and a NotFound read through a follower.
    let follower = *cluster
        .running()
        .iter()
        .find(|id| **id != leader)
        .expect("a follower");
    let mut res = cluster.res(follower).await;
    create(&mut res, director("metrics-1", &[("state", "succeeded")]))
        .await
        .expect("create");
    let missing = get(&mut res, "no-such-director", Consistency::Linearizable).await;
    assert_eq!(missing.expect_err("absent").code(), tonic::Code::NotFound);

    let (code, text) = http_get(&cluster.metrics_addr(follower), "/metrics").await;
    assert_eq!(code, 200);
    let expect = |series: &str, value: f64| {
        assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
    };
    expect(
        "steward_grpc_requests_total{service=\"steward.v1.Resources\",method=\"Create\",code=\"OK\"}",
        1.0,
    );
    expect(
        "steward_grpc_requests_total{service=\"steward.v1.Resources\",method=\"Get\",code=\"NotFound\"}",
        1.0,
    );
    expect("steward_store_objects{kind=\"Director\"}", 1.0);
    expect("steward_raft_is_leader", 0.0);
    expect("steward_raft_leader", leader as f64);
    expect("steward_health_serving", 1.0);
    expect("steward_raft_members{role=\"voter\"}", 3.0);
    for series in [
        "steward_raft_term",
        "steward_raft_commit_index",
        "steward_raft_applied_index",
        "steward_raft_entries_written_total",
        "steward_raft_append_duration_seconds_count",
        "steward_grpc_request_duration_seconds_count{service=\"steward.v1.Resources\",method=\"Get\"}",
        "steward_store_revision",
    ] {
        let v = sample(&text, series).unwrap_or_else(|| panic!("{series} in:\n{text}"));
        assert!(v >= 1.0, "{series} = {v}");
    }
    for series in [
        "steward_store_watchers",
        "steward_locks",
        "steward_lock_waiters",
        "steward_workers_alive",
        "steward_pool_waiting_acquires",
        "steward_raft_snapshot_size_bytes",
    ] {
        assert!(sample(&text, series).is_some(), "{series} in:\n{text}");
    }
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );

    // The leader reports itself and how far behind each peer is.
    let (_, text) = http_get(&cluster.metrics_addr(leader), "/metrics").await;
    assert_eq!(sample(&text, "steward_raft_is_leader"), Some(1.0));
    for peer in (1..=3).filter(|id| *id != leader) {
        let series = format!("steward_raft_peer_lag_entries{{peer=\"{peer}\"}}");
        assert!(sample(&text, &series).is_some(), "{series} in:\n{text}");
    }
    assert_eq!(
        http_get(&cluster.metrics_addr(leader), "/nope").await.0,
        404
    );

    // `steward cluster status` (Cluster.Status) shows every node serving, and warns of nothing
    // about quorum or reachability while all three are up.
    let status = cluster
        .cluster(follower)
        .await
        .status(steward::proto::v1::ClusterStatusRequest {})
        .await
        .expect("cluster status")
        .into_inner();
    assert!(
        status.nodes.iter().all(|n| n.serving && n.voter),
        "{status:?}"
    );
    assert!(
        status.nodes.iter().all(|n| n.disk_total_bytes > 0),
        "disk space known: {status:?}"
    );
    assert!(
        !status
            .warnings
            .iter()
            .any(|w| w.contains("quorum") || w.contains("unreachable") || w.contains("leader")),
        "{:?}",
        status.warnings
    );

    // A node cut off from the quorum (the other two killed) stops serving: a load balancer
    // takes it out, and puts it back once a leader is there again.
    let survivor = follower;
    for id in cluster.running() {
        if id != survivor {
            cluster.kill(id);
        }
    }
    let not_serving = ServingStatus::NotServing as i32;
    wait_for(
        "NOT_SERVING without a quorum",
        Duration::from_secs(20),
        || async {
            health(&cluster, survivor, "")
                .await
                .ok()
                .filter(|s| *s == not_serving)
        },
    )
    .await;
    let (_, text) = http_get(&cluster.metrics_addr(survivor), "/metrics").await;
    assert_eq!(sample(&text, "steward_health_serving"), Some(0.0));
    let warnings = cluster
        .cluster(survivor)
        .await
        .status(steward::proto::v1::ClusterStatusRequest {})
        .await
        .expect("cluster status without a quorum")
        .into_inner()
        .warnings;
    for expected in [
        "no leader serving: writes and linearizable reads wait".to_string(),
        "no quorum: 0 of 3 voters serving, 2 needed".to_string(),
        format!("node {survivor} is not serving (it cannot answer a linearizable read)"),
    ] {
        assert!(warnings.contains(&expected), "{expected:?} in {warnings:?}");
    }
    let unreachable = warnings
        .iter()
        .filter(|w| w.contains("is unreachable"))
        .count();
    assert_eq!(unreachable, 2, "{warnings:?}");
    for id in 1..=3 {
        if id != survivor {
            cluster.spawn(id);
        }
    }
    wait_for("SERVING again", Duration::from_secs(30), || async {
        health(&cluster, survivor, "")
            .await
            .ok()
            .filter(|s| *s == serving)
    })
    .await;
}
