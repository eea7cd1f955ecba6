//! Per-client limits on the client API: a client over its request rate or its calls in flight
//! gets ResourceExhausted naming the limit, other clients are served meanwhile, the client is
//! served again once its bucket refills or a call ends, and /metrics counts the refusals.

use std::time::{Duration, Instant};

use steward::config::Limits;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::{Consistency, WatchRequest};
use tonic::transport::{Channel, Endpoint};

use crate::harness::{create, director, get, wait_for, TestCluster};
use crate::observability::{http_get, sample};

/// Node `id`'s Resources service, as client certificate `name`.
fn resources_as(cluster: &TestCluster, id: u64, name: &str) -> ResourcesClient<Channel> {
    let tls = cluster.client_tls(name).expect("tls cluster");
    let channel = Endpoint::from_shared(cluster.endpoint(id))
        .expect("endpoint")
        .tls_config(tls.config())
        .expect("tls")
        .connect_lazy();
    ResourcesClient::new(channel)
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_over_their_rate_or_calls_are_refused_and_others_are_not() {
    // One request a second after a burst of 10: however slowly two busy cores serve the loop
    // below, it outruns the refill, and what it may be served is bounded by its own duration.
    let limits = Limits {
        client_requests_per_second: 1,
        client_request_burst: 10,
        client_calls_max: 3,
        ..Limits::default()
    };
    let cluster = TestCluster::start_tls_with(3, limits).await;
    let leader = cluster.wait_leader().await;
    let mut admin = cluster.res(leader).await;
    wait_for("a first write", Duration::from_secs(10), || {
        let mut admin = admin.clone();
        async move { create(&mut admin, director("limited", &[])).await.ok() }
    })
    .await;

    // "other" spends its burst of 10 and is refused, naming the limit.
    let mut other = resources_as(&cluster, leader, "other");
    let mut served = 0;
    let mut refusal = None;
    let spending = Instant::now();
    for _ in 0..40 {
        match get(&mut other, "limited", Consistency::Serializable).await {
            Ok(_) => served += 1,
            Err(status) => {
                refusal = Some(status);
                break;
            }
        }
    }
    let refusal = refusal.expect("refused within 40 quick requests");
    assert_eq!(
        refusal.code(),
        tonic::Code::ResourceExhausted,
        "{refusal:?}"
    );
    assert!(
        refusal
            .message()
            .contains("limits.client_requests_per_second = 1"),
        "{refusal:?}"
    );
    // The burst, and at most one more per second the loop took (and one for rounding).
    let refilled = spending.elapsed().as_secs() + 1;
    assert!(
        served >= 10 && served as u64 <= 10 + refilled,
        "served {served} before the refusal, in {:?}",
        spending.elapsed()
    );
    // Meanwhile another client is served at once.
    let mut third = resources_as(&cluster, leader, "third");
    get(&mut third, "limited", Consistency::Serializable)
        .await
        .expect("another client keeps its own bucket");
    // And "other" is served again once its bucket refills.
    wait_for("other's bucket to refill", Duration::from_secs(30), || {
        let mut other = other.clone();
        async move {
            get(&mut other, "limited", Consistency::Serializable)
                .await
                .ok()
        }
    })
    .await;

    // "third" holds 3 watches: its 4th call is refused until one of them ends.
    let mut watches = Vec::new();
    for _ in 0..3 {
        let stream = third
            .watch(WatchRequest {
                kind: "Director".into(),
                ..Default::default()
            })
            .await
            .expect("watch")
            .into_inner();
        watches.push(stream);
    }
    let refused = get(&mut third, "limited", Consistency::Serializable)
        .await
        .expect_err("a 4th call in flight");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("limits.client_calls_max = 3"),
        "{refused:?}"
    );
    // The watches still deliver.
    create(&mut admin, director("seen", &[]))
        .await
        .expect("create");
    let event = tokio::time::timeout(Duration::from_secs(10), watches[0].message())
        .await
        .expect("an event in time")
        .expect("stream ok")
        .expect("an event");
    assert!(event.object_json.contains("seen"), "{event:?}");
    drop(watches.pop());
    wait_for(
        "a slot freed by the ended watch",
        Duration::from_secs(10),
        || {
            let mut third = third.clone();
            async move {
                get(&mut third, "limited", Consistency::Serializable)
                    .await
                    .ok()
            }
        },
    )
    .await;

    let (code, text) = http_get(&cluster.metrics_addr(leader), "/metrics").await;
    assert_eq!(code, 200);
    for limit in ["rate", "calls"] {
        let series = format!("steward_client_limit_refusals_total{{limit=\"{limit}\"}}");
        let count = sample(&text, &series).unwrap_or(0.0);
        assert!(count >= 1.0, "{series} = {count}");
    }
}
