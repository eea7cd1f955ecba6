//! What a node shows operators and load balancers: the Prometheus `/metrics` endpoint (on
//! `metrics_addr`, plain HTTP, apart from the client API as etcd's `--listen-metrics-urls`), the
//! tower layer that counts and times every gRPC call, and the task that keeps the gRPC health
//! service (grpc.health.v1) in step with Raft.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::metrics::{
    GrpcLabels, KindLabels, MethodLabels, Metrics, PeerLabels, PoolKey, RoleLabels, StateLabels,
};
use crate::proto::v1::Consistency;
use crate::raft::types::{ServerState, WatchReceiver};
use crate::server::Node;
use crate::state::pools::POOL_KIND;

/// The client API's services, as the health service and reflection name them.
pub const CLIENT_SERVICES: &[&str] = &[
    "steward.v1.Resources",
    "steward.v1.Locks",
    "steward.v1.Operations",
    "steward.v1.Workers",
    "steward.v1.Reservations",
    "steward.v1.StatusService",
    "steward.v1.LeaseService",
    "steward.v1.Cluster",
];

/// The content type of the OpenMetrics text format, which Prometheus scrapes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn gauge(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// Sets the gauges that mirror Raft and the applied state (module docs of src/metrics.rs).
/// Reads the state under its lock once, without awaiting.
pub fn refresh(node: &Node) {
    let m = &node.metrics;
    {
        let r = node.raft.metrics();
        let r = r.borrow_watched();
        m.raft_term.set(gauge(r.current_term));
        m.raft_leader.set(gauge(r.current_leader.unwrap_or(0)));
        m.raft_is_leader
            .set(i64::from(r.state == ServerState::Leader));
        let last = r.last_log_index.unwrap_or(0);
        m.raft_last_log_index.set(gauge(last));
        let index =
            |l: &Option<crate::raft::types::LogId>| gauge(l.as_ref().map_or(0, |l| l.index));
        m.raft_commit_index.set(index(&r.local_committed));
        m.raft_applied_index.set(index(&r.last_applied));
        m.raft_snapshot_index.set(index(&r.snapshot));
        m.raft_purged_index.set(index(&r.purged));
        let membership = r.membership_config.membership();
        m.raft_members.clear();
        for (role, n) in [
            ("voter", membership.voter_ids().count()),
            ("learner", membership.learner_ids().count()),
        ] {
            m.raft_members
                .get_or_create(&RoleLabels { role: role.into() })
                .set(gauge(n));
        }
        m.raft_peer_lag.clear();
        if let Some(replication) = &r.replication {
            for (peer, matched) in replication.iter() {
                if *peer == node.id {
                    continue;
                }
                let matched = matched.as_ref().map_or(0, |l| l.index);
                m.raft_peer_lag
                    .get_or_create(&PeerLabels {
                        peer: peer.to_string(),
                    })
                    .set(gauge(last.saturating_sub(matched)));
            }
        }
        m.raft_quorum_ack_age.set(
            r.last_quorum_acked
                .as_ref()
                .map_or(-1, |t| gauge(openraft::Instant::elapsed(&**t).as_millis())),
        );
    }
    m.clock_offset.clear();
    for o in node.shown.offsets() {
        m.clock_offset
            .get_or_create(&PeerLabels {
                peer: o.node_id.to_string(),
            })
            .set(o.offset_ms);
    }
    m.clock_outliers
        .set(gauge(node.shown.outliers(node.id).len() as u64));
    m.clock_offset_max.set(gauge(node.shown.offset_ms_max()));
    m.store_watchers.set(gauge(node.hub.watcher_count()));
    m.etcd_watchers.set(gauge(node.hub.kv.watcher_count()));
    m.etcd_watch_catchups
        .inner()
        .store(node.hub.kv.catchups(), std::sync::atomic::Ordering::Relaxed);
    let now_ms = node.cluster_now();
    let state = node.state();
    m.store_revision.set(gauge(state.revision()));
    let (versions, bytes) = state.kv().footprint();
    m.kv_versions.set(gauge(versions));
    m.kv_bytes.set(gauge(bytes));
    m.kv_compacted.set(gauge(state.kv().compacted()));
    m.alarms.set(gauge(state.alarms().iter().count() as u64));
    m.store_objects.clear();
    for (kind, n) in state.kind_counts() {
        m.store_objects
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(gauge(n));
    }
    let (mut holders, mut waiters) = (0usize, 0usize);
    for lock in state.locks() {
        holders += lock.holders.len();
        waiters += lock.waiters.len();
    }
    m.locks.set(gauge(state.lock_count()));
    m.lock_holders.set(gauge(holders));
    m.lock_waiters.set(gauge(waiters));
    let mut by_state = std::collections::BTreeMap::<String, i64>::new();
    for op in state.operations(&Default::default(), None, 0) {
        *by_state.entry(op.state.to_string()).or_default() += 1;
    }
    m.operations.clear();
    for (s, n) in by_state {
        m.operations.get_or_create(&StateLabels { state: s }).set(n);
    }
    let (alive, dead) = state.workers().fold((0, 0), |(a, d), w| {
        if w.is_alive(now_ms) {
            (a + 1, d)
        } else {
            (a, d + 1)
        }
    });
    m.workers_alive.set(alive);
    m.workers_dead.set(dead);
    let mut pools = std::collections::BTreeMap::<PoolKey, i64>::new();
    for object in state.objects_of(POOL_KIND) {
        let label = |key: &str| object.metadata.labels.get(key).cloned().unwrap_or_default();
        let key = PoolKey {
            r#type: label("type"),
            state: label("state"),
            owned: object.metadata.labels.contains_key("owner").to_string(),
        };
        *pools.entry(key).or_default() += 1;
    }
    m.pool_resources.clear();
    for (key, n) in pools {
        m.pool_resources.get_or_create(&key).set(n);
    }
    m.pool_waiting.set(gauge(state.pools().claims_total()));
}

/// Serves `GET /metrics` on `listener` until `stop`.
pub async fn serve_metrics(
    node: Arc<Node>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(scrape))
        .with_state(node);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "metrics server failed");
    }
}

async fn scrape(
    axum::extract::State(node): axum::extract::State<Arc<Node>>,
) -> impl axum::response::IntoResponse {
    refresh(&node);
    (
        [(http::header::CONTENT_TYPE, OPENMETRICS)],
        node.metrics.encode(),
    )
}

/// How often the health task probes whether this node can answer a linearizable read.
pub const HEALTH_PROBE_INTERVAL: Duration = Duration::from_millis(1_000);

/// Keeps the health service in step with what this node can do: every client service (and
/// the server as a whole, service "") is SERVING while a linearizable read barrier (ReadIndex,
/// through the leader when this node follows) succeeds within the probe interval, as etcd's
/// `/health` does with a quorum read, and NOT_SERVING otherwise. A node cut off from the
/// quorum, or a leader that lost it, is therefore taken out by a load balancer's or
/// Kubernetes' readiness probe on grpc.health.v1. (Knowing a leader is not enough: a follower
/// whose leader died keeps its vote, and so names the dead leader, while it pre-votes.)
pub async fn run_health(
    node: Arc<Node>,
    reporter: HealthReporter,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = None;
    loop {
        let probe = tokio::time::timeout(
            HEALTH_PROBE_INTERVAL,
            node.read_barrier(Consistency::Linearizable),
        );
        let serving = tokio::select! {
            result = probe => matches!(result, Ok(Ok(()))),
            _ = stop.wait_for(|s| *s) => return,
        };
        if last != Some(serving) {
            let status = if serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            node.metrics.serving.set(i64::from(serving));
            tracing::info!(node = node.id, ?status, "health");
            for name in std::iter::once("").chain(CLIENT_SERVICES.iter().copied()) {
                reporter.set_service_status(name, status).await;
            }
            last = Some(serving);
        }
        tokio::select! {
            _ = tokio::time::sleep(HEALTH_PROBE_INTERVAL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// A tower layer on the client API server: counts every call by service, method and status
/// code, and times it to its response headers. The code comes from the `grpc-status` header of
/// a trailers-only answer (every error a handler returns); a call answered with a body counts
/// as OK when it starts (an error in its trailers, such as a stream cut later, is not seen here).
#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: Arc<Metrics>,
}

impl GrpcMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> GrpcMetricsLayer {
        GrpcMetricsLayer { metrics }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service `GrpcMetricsLayer` wraps around the server's router.
#[derive(Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B, RB> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path().to_string();
        let started = Instant::now();
        let future = self.inner.call(request);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let response = future.await;
            if let Ok(response) = &response {
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(tonic::Code::Ok, tonic::Code::from_i32);
                record(&metrics, &path, code, started.elapsed().as_secs_f64());
            }
            response
        })
    }
}

/// Splits `/steward.v1.Resources/Get` into service and method. A path no served service
/// answers (Unimplemented) is counted as `unknown`, so a client cannot grow the label sets.
fn method_labels(path: &str, code: tonic::Code) -> (String, String) {
    let known = path
        .strip_prefix('/')
        .and_then(|p| p.split_once('/'))
        .filter(|(service, method)| {
            code != tonic::Code::Unimplemented
                && !service.is_empty()
                && !method.is_empty()
                && !method.contains('/')
        });
    match known {
        Some((service, method)) => (service.to_string(), method.to_string()),
        None => ("unknown".to_string(), "unknown".to_string()),
    }
}

fn record(metrics: &Metrics, path: &str, code: tonic::Code, seconds: f64) {
    let (service, method) = method_labels(path, code);
    metrics
        .grpc_latency
        .get_or_create(&MethodLabels {
            service: service.clone(),
            method: method.clone(),
        })
        .observe(seconds);
    metrics
        .grpc_requests
        .get_or_create(&GrpcLabels {
            service,
            method,
            // As grpc-go's interceptors name them: OK, NotFound, Unavailable, ...
            code: match code {
                tonic::Code::Ok => "OK".to_string(),
                other => format!("{other:?}"),
            },
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_come_from_served_paths_only() {
        let ok = tonic::Code::Ok;
        assert_eq!(
            method_labels("/steward.v1.Resources/Get", ok),
            ("steward.v1.Resources".into(), "Get".into())
        );
        assert_eq!(
            method_labels("/steward.v1.Resources/Get", tonic::Code::NotFound),
            ("steward.v1.Resources".into(), "Get".into())
        );
        for (path, code) in [
            ("/steward.v1.Resources/Nope", tonic::Code::Unimplemented),
            ("/no-method", ok),
            ("//Get", ok),
            ("/a/b/c", ok),
            ("", ok),
        ] {
            assert_eq!(
                method_labels(path, code),
                ("unknown".into(), "unknown".into()),
                "{path}"
            );
        }
    }
}
