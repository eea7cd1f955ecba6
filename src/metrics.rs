//! A node's Prometheus metrics: one `Metrics` per node, made at start-up and shared by the
//! parts that record into it (the raft log writer, the snapshot builder, the gRPC layer, the
//! scheduler). Gauges that mirror state (objects by kind, locks, operations, pools, Raft
//! indexes) are set when `/metrics` is scraped (src/server/metrics.rs), from the applied state
//! and openraft's metrics, so nothing is kept twice.
//!
//! Every label set is bounded: kinds, operation states and pool (type, state) pairs come from
//! the stored state, whose size is limited; gRPC methods come from the served services only
//! (an unknown path is counted under `method="unknown"`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

/// Histogram buckets for latencies: 50 µs to about 6.5 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

/// Labels of one gRPC call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GrpcLabels {
    /// `steward.v1.Resources`.
    pub service: String,
    /// `Get`.
    pub method: String,
    /// The gRPC status code name: `OK`, `NotFound`, ...
    pub code: String,
}

/// Labels of one gRPC method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub service: String,
    pub method: String,
}

/// Which per-client limit refused a call: `rate` or `calls`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub limit: String,
}

/// Labels of an authentication or authorization refusal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    /// `unauthenticated` or `permission_denied`.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

/// A pool resource's type, state and whether someone holds it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PoolKey {
    pub r#type: String,
    pub state: String,
    /// "true" when the resource has an owner.
    pub owned: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabels {
    /// `voter` or `learner`.
    pub role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub peer: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// One node's metrics (see the module docs). Cheap to share: every handle is an `Arc` inside.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,

    // Recorded as things happen.
    pub grpc_requests: Family<GrpcLabels, Counter>,
    pub grpc_latency: HistogramFamily<MethodLabels>,
    pub client_limit_refusals: Family<LimitLabels, Counter>,
    pub auth_refusals: Family<CodeLabels, Counter>,
    /// Console pages and live streams refused: `unauthenticated`, `permission_denied`,
    /// `streams_max` (console.streams_max), `bad_request`.
    pub console_refusals: Family<CodeLabels, Counter>,
    /// Console live streams open now.
    pub console_streams: Gauge,
    /// Console page renders (one render serves every stream showing the same page).
    pub console_renders: Counter,
    /// Calls refused because a NOSPACE alarm is raised (before proposing).
    pub space_refusals: Counter,
    /// Writes this node held and sent again because no leader had taken them.
    pub proposals_resent: Counter,
    /// Writes no leader took before the caller's deadline: answered not applied.
    pub proposals_unsent: Counter,
    /// A follower's ReadIndex calls to the leader, and the linearizable reads they served
    /// (server/read_index.rs).
    pub read_index: crate::server::read_index::ReadIndexCounters,
    /// The data directory's size (log database and snapshot), at the last space check.
    pub data_bytes: Gauge,
    /// `limits.quota_bytes`.
    pub quota_bytes: Gauge,
    /// Compactions (`steward compact`) run on this node.
    pub compactions: Counter,
    pub raft_append: Histogram,
    pub raft_entries_written: Counter,
    pub snapshot_bytes: Gauge,
    pub snapshots_built: Counter,
    pub snapshots_installed: Counter,
    pub op_dispatch_latency: Histogram,

    /// 1 while the health probe (a linearizable read barrier) passes: grpc.health.v1 SERVING.
    pub serving: Gauge,

    // Set at each scrape.
    pub raft_term: Gauge,
    pub raft_leader: Gauge,
    pub raft_is_leader: Gauge,
    pub raft_last_log_index: Gauge,
    pub raft_commit_index: Gauge,
    pub raft_applied_index: Gauge,
    pub raft_snapshot_index: Gauge,
    pub raft_purged_index: Gauge,
    pub raft_members: Family<RoleLabels, Gauge>,
    pub raft_peer_lag: Family<PeerLabels, Gauge>,
    pub raft_quorum_ack_age: Gauge,
    /// Each other node's wall clock minus this one's, in ms, at the last clock probe.
    pub clock_offset: Family<PeerLabels, Gauge>,
    /// Nodes (this one included) whose wall clocks are further than `time.clock_offset_ms_max`
    /// from the middle of the clocks this node knows.
    pub clock_outliers: Gauge,
    /// `time.clock_offset_ms_max`.
    pub clock_offset_max: Gauge,
    /// Checkpoints of cluster time this node proposed while leading a quiet log.
    pub time_checkpoints: Counter,
    pub store_revision: Gauge,
    /// etcd's keyspace: versions kept (tombstones included), their key and value bytes, and
    /// the revision of the last compaction.
    pub kv_versions: Gauge,
    pub kv_bytes: Gauge,
    pub kv_compacted: Gauge,
    /// etcd watches open on this node, and etcd watch streams that fell behind and caught up
    /// from the store (set at each scrape from the hub).
    pub etcd_watchers: Gauge,
    pub etcd_watch_catchups: Counter,
    /// etcd lease keep-alives: waiting for their entry, answered, the entries that carried
    /// them, and senders that found the queue full (`etcd.keep_alives_queued_max`).
    pub etcd_keep_alives_queued: Gauge,
    pub etcd_keep_alives: Counter,
    pub etcd_keep_alive_entries: Counter,
    pub etcd_keep_alives_waited: Counter,
    pub store_objects: Family<KindLabels, Gauge>,
    pub store_watchers: Gauge,
    pub locks: Gauge,
    pub lock_holders: Gauge,
    pub lock_waiters: Gauge,
    pub operations: Family<StateLabels, Gauge>,
    pub workers_alive: Gauge,
    pub workers_dead: Gauge,
    pub pool_resources: Family<PoolKey, Gauge>,
    pub pool_waiting: Gauge,
    pub alarms: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every series registered under the `steward_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("steward");
        let m = Metrics {
            registry: Registry::default(),
            grpc_requests: Family::default(),
            grpc_latency: Family::new_with_constructor(latency_histogram),
            client_limit_refusals: Family::default(),
            auth_refusals: Family::default(),
            console_refusals: Family::default(),
            console_streams: Gauge::default(),
            console_renders: Counter::default(),
            space_refusals: Counter::default(),
            proposals_resent: Counter::default(),
            proposals_unsent: Counter::default(),
            read_index: Default::default(),
            data_bytes: Gauge::default(),
            quota_bytes: Gauge::default(),
            compactions: Counter::default(),
            raft_append: latency_histogram(),
            raft_entries_written: Counter::default(),
            snapshot_bytes: Gauge::default(),
            snapshots_built: Counter::default(),
            snapshots_installed: Counter::default(),
            op_dispatch_latency: latency_histogram(),
            raft_term: Gauge::default(),
            raft_leader: Gauge::default(),
            raft_is_leader: Gauge::default(),
            serving: Gauge::default(),
            raft_last_log_index: Gauge::default(),
            raft_commit_index: Gauge::default(),
            raft_applied_index: Gauge::default(),
            raft_snapshot_index: Gauge::default(),
            raft_purged_index: Gauge::default(),
            raft_members: Family::default(),
            raft_peer_lag: Family::default(),
            raft_quorum_ack_age: Gauge::default(),
            clock_offset: Family::default(),
            clock_outliers: Gauge::default(),
            clock_offset_max: Gauge::default(),
            time_checkpoints: Counter::default(),
            store_revision: Gauge::default(),
            kv_versions: Gauge::default(),
            kv_bytes: Gauge::default(),
            etcd_watchers: Gauge::default(),
            etcd_watch_catchups: Counter::default(),
            etcd_keep_alives_queued: Gauge::default(),
            etcd_keep_alives: Counter::default(),
            etcd_keep_alive_entries: Counter::default(),
            etcd_keep_alives_waited: Counter::default(),
            kv_compacted: Gauge::default(),
            store_objects: Family::default(),
            store_watchers: Gauge::default(),
            locks: Gauge::default(),
            lock_holders: Gauge::default(),
            lock_waiters: Gauge::default(),
            operations: Family::default(),
            workers_alive: Gauge::default(),
            workers_dead: Gauge::default(),
            pool_resources: Family::default(),
            pool_waiting: Gauge::default(),
            alarms: Gauge::default(),
        };
        let r = &mut registry;
        let secs = Unit::Seconds;
        r.register(
            "grpc_requests",
            "gRPC calls served, by service, method and status code (a stream counts when it starts)",
            m.grpc_requests.clone(),
        );
        r.register(
            "client_limit_refusals",
            "Client API calls refused by a per-client limit (rate: limits.client_requests_per_second; calls: limits.client_calls_max)",
            m.client_limit_refusals.clone(),
        );
        r.register(
            "auth_refusals",
            "Client API calls refused by authentication (unauthenticated) or by a role (permission_denied)",
            m.auth_refusals.clone(),
        );
        r.register(
            "console_refusals",
            "Console pages and live streams refused (unauthenticated, permission_denied, streams_max: console.streams_max, bad_request)",
            m.console_refusals.clone(),
        );
        r.register(
            "console_streams",
            "Console live streams (open pages) served now (at most console.streams_max)",
            m.console_streams.clone(),
        );
        r.register(
            "console_renders",
            "Console page renders; one render is shared by every open page showing the same view",
            m.console_renders.clone(),
        );
        r.register(
            "space_refusals",
            "Calls refused before proposing because a NOSPACE alarm is raised",
            m.space_refusals.clone(),
        );
        r.register(
            "proposals_resent",
            "Writes this node held and sent again because no leader had taken them (no leader, not the leader, the leader could not be reached)",
            m.proposals_resent.clone(),
        );
        r.register(
            "read_index_calls",
            "ReadIndex calls this node made to the leader for its linearizable reads (one at a time, each serving every read that arrived before it was sent)",
            m.read_index.calls.clone(),
        );
        r.register(
            "read_index_reads",
            "Linearizable reads this node served through a ReadIndex call to the leader (read_index_reads / read_index_calls: reads per call)",
            m.read_index.reads.clone(),
        );
        r.register(
            "proposals_unsent",
            "Writes no leader took before the caller's deadline (or a few election timeouts): answered not applied",
            m.proposals_unsent.clone(),
        );
        r.register_with_unit(
            "data_dir_size",
            "This node's data directory (Raft log database and snapshot), at the last space check",
            Unit::Bytes,
            m.data_bytes.clone(),
        );
        r.register_with_unit(
            "quota",
            "limits.quota_bytes: a NOSPACE alarm is raised when the data directory outgrows it",
            Unit::Bytes,
            m.quota_bytes.clone(),
        );
        r.register(
            "alarms",
            "Alarms raised in the cluster (NOSPACE: writes that may grow the state are refused)",
            m.alarms.clone(),
        );
        r.register(
            "compactions",
            "Compactions (snapshot, log purge, database compaction) run on this node",
            m.compactions.clone(),
        );
        r.register_with_unit(
            "grpc_request_duration",
            "gRPC call latency to the response headers (for a stream: to its start)",
            secs.clone(),
            m.grpc_latency.clone(),
        );
        r.register_with_unit(
            "raft_append_duration",
            "Raft log append, from hand-over to the WAL until durable (queue, write, fsync)",
            secs.clone(),
            m.raft_append.clone(),
        );
        r.register(
            "raft_entries_written",
            "Raft log entries written",
            m.raft_entries_written.clone(),
        );
        r.register_with_unit(
            "raft_snapshot_size",
            "Size of the last snapshot built or installed on this node",
            Unit::Bytes,
            m.snapshot_bytes.clone(),
        );
        r.register(
            "raft_snapshots_built",
            "Snapshots this node built",
            m.snapshots_built.clone(),
        );
        r.register(
            "raft_snapshots_installed",
            "Snapshots this node received from a leader and installed",
            m.snapshots_installed.clone(),
        );
        r.register_with_unit(
            "operation_dispatch_latency",
            "From an operation queued to its assignment to a worker, in leader time (leader only)",
            secs,
            m.op_dispatch_latency.clone(),
        );
        r.register(
            "kv_versions",
            "etcd keyspace: versions kept, deletes included (what compaction frees)",
            m.kv_versions.clone(),
        );
        r.register_with_unit(
            "kv_data",
            "etcd keyspace: bytes of the keys and values of the versions kept",
            Unit::Bytes,
            m.kv_bytes.clone(),
        );
        r.register(
            "kv_compacted_revision",
            "etcd keyspace: the revision of the last compaction (reads below it are refused)",
            m.kv_compacted.clone(),
        );
        r.register(
            "etcd_watchers",
            "etcd watches open on this node",
            m.etcd_watchers.clone(),
        );
        r.register(
            "etcd_watch_catchups",
            "etcd watch streams that fell limits.watch_buffer behind and caught up from the store",
            m.etcd_watch_catchups.clone(),
        );
        r.register(
            "etcd_keep_alives_queued",
            "etcd lease keep-alives waiting for the log entry that carries them (at most etcd.keep_alives_queued_max)",
            m.etcd_keep_alives_queued.clone(),
        );
        r.register(
            "etcd_keep_alives",
            "etcd lease keep-alives answered after their entry was applied",
            m.etcd_keep_alives.clone(),
        );
        r.register(
            "etcd_keep_alive_entries",
            "log entries proposed for etcd lease keep-alives (each carries up to etcd.keep_alives_per_entry_max)",
            m.etcd_keep_alive_entries.clone(),
        );
        r.register(
            "etcd_keep_alives_waited",
            "etcd lease keep-alives that found etcd.keep_alives_queued_max waiting and waited for room",
            m.etcd_keep_alives_waited.clone(),
        );
        r.register("raft_term", "Current Raft term", m.raft_term.clone());
        r.register(
            "raft_leader",
            "Id of the leader this node's vote names, 0 when none (it may be dead: see health_serving)",
            m.raft_leader.clone(),
        );
        r.register(
            "raft_is_leader",
            "1 when this node leads",
            m.raft_is_leader.clone(),
        );
        r.register(
            "health_serving",
            "1 while this node can answer a linearizable read (grpc.health.v1 SERVING)",
            m.serving.clone(),
        );
        r.register(
            "raft_last_log_index",
            "Index of the last entry in this node's log",
            m.raft_last_log_index.clone(),
        );
        r.register(
            "raft_commit_index",
            "Index of the last entry this node knows committed",
            m.raft_commit_index.clone(),
        );
        r.register(
            "raft_applied_index",
            "Index of the last entry applied to this node's state machine",
            m.raft_applied_index.clone(),
        );
        r.register(
            "raft_snapshot_index",
            "Index the last snapshot covers",
            m.raft_snapshot_index.clone(),
        );
        r.register(
            "raft_purged_index",
            "Index up to which the log was compacted away",
            m.raft_purged_index.clone(),
        );
        r.register(
            "raft_members",
            "Cluster members by role, as this node's membership config has them",
            m.raft_members.clone(),
        );
        r.register(
            "raft_peer_lag_entries",
            "Leader only: entries each peer's log is behind the leader's last entry",
            m.raft_peer_lag.clone(),
        );
        r.register_with_unit(
            "raft_quorum_ack_age",
            "Leader only: time since a quorum last acknowledged this leader, -1 when unknown",
            Unit::Other("milliseconds".to_string()),
            m.raft_quorum_ack_age.clone(),
        );
        r.register_with_unit(
            "clock_offset",
            "Each other node's wall clock minus this node's, at the last clock probe (wall clocks are for display only)",
            Unit::Other("milliseconds".to_string()),
            m.clock_offset.clone(),
        );
        r.register(
            "clock_outliers",
            "Nodes whose wall clocks are further than time.clock_offset_ms_max from the middle of the nodes' clocks",
            m.clock_outliers.clone(),
        );
        r.register_with_unit(
            "clock_offset_max",
            "time.clock_offset_ms_max: the largest distance from the middle of the clocks not reported",
            Unit::Other("milliseconds".to_string()),
            m.clock_offset_max.clone(),
        );
        r.register(
            "time_checkpoints",
            "Checkpoints of cluster time this node proposed as leader while the log was quiet and something was timed (time.checkpoint_interval_ms)",
            m.time_checkpoints.clone(),
        );
        r.register(
            "store_revision",
            "Store revision (resourceVersion of the latest change) applied on this node",
            m.store_revision.clone(),
        );
        r.register(
            "store_objects",
            "Stored objects by kind",
            m.store_objects.clone(),
        );
        r.register(
            "store_watchers",
            "Open watches served by this node",
            m.store_watchers.clone(),
        );
        r.register("locks", "Locks held", m.locks.clone());
        r.register(
            "lock_holders",
            "Holders over all locks (a READ lock can have several)",
            m.lock_holders.clone(),
        );
        r.register(
            "lock_waiters",
            "Queued lock acquires over all locks",
            m.lock_waiters.clone(),
        );
        r.register(
            "operations",
            "Retained operations by state (queued is the queue depth)",
            m.operations.clone(),
        );
        r.register(
            "workers_alive",
            "Registered workers within their TTL",
            m.workers_alive.clone(),
        );
        r.register(
            "workers_dead",
            "Registered workers past their TTL, not yet swept",
            m.workers_dead.clone(),
        );
        r.register(
            "pool_resources",
            "Leased-pool resources by type, state and whether they are owned",
            m.pool_resources.clone(),
        );
        r.register(
            "pool_waiting_acquires",
            "Acquires waiting for a pool resource",
            m.pool_waiting.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_exposed_with_its_prefix_and_recorded_values() {
        let m = Metrics::new();
        m.raft_append.observe(0.002);
        m.raft_term.set(7);
        m.grpc_requests
            .get_or_create(&GrpcLabels {
                service: "steward.v1.Resources".into(),
                method: "Get".into(),
                code: "NotFound".into(),
            })
            .inc();
        m.store_objects
            .get_or_create(&KindLabels {
                kind: "Director".into(),
            })
            .set(3);
        m.pool_resources
            .get_or_create(&PoolKey {
                r#type: "gce-project".into(),
                state: "free".into(),
                owned: "false".into(),
            })
            .set(2);
        let text = m.encode();
        for line in [
            "steward_raft_term 7",
            "steward_raft_append_duration_seconds_count 1",
            "steward_grpc_requests_total{service=\"steward.v1.Resources\",method=\"Get\",code=\"NotFound\"} 1",
            "steward_store_objects{kind=\"Director\"} 3",
            "steward_pool_resources{type=\"gce-project\",state=\"free\",owned=\"false\"} 2",
            "# EOF",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
    }
}
