//! Node configuration: one TOML file per node, command-line flags on top, `validate()` with clear
//! errors. Every limit the server enforces is named here with its unit and default.
//!
//! Read by `steward serve` (src/main.rs) and `steward dev`; the server takes a validated `Config`.
//!
//! Where the options are described: `options::OPTIONS` is the one operator reference (meaning,
//! and the default of the top-level keys); the sections' `Default` impls below hold every other
//! default. Config files (src/cli/node_config.rs) and README's "Configuration" table are written
//! from those two; the `///` docs on the fields below say what the code needs to know.
//!
//! Naming rule for limits and defaults, the same in every section:
//! - a bound ends in `_max` (or `_min`), after the unit: `object_bytes_max`, `deadline_ms_max`,
//!   `election_timeout_ms_min`;
//! - the value used when a request does not say ends in `_default`, after the unit:
//!   `list_page_default`, `deadline_ms_default`;
//! - an option named by what it is a size of (`quota_bytes`, `watch_buffer`, `watch_history`,
//!   `client_request_burst`, `client_requests_per_second`) or by when it acts
//!   (`snapshot_logs_since_last`, `*_interval_ms`) takes no suffix.
//!
//! Keys renamed to this rule are still read under their old names, with a warning naming the new
//! one (`renamed::RENAMED`); a file that sets both names of one option is refused.

pub mod options;
pub mod renamed;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One member of the initial cluster, as written in every node's config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberConfig {
    pub id: u64,
    pub peer_addr: String,
    pub client_addr: String,
}

/// A node's whole configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This node's id (>= 1). Never reuse the id of a removed node.
    pub id: u64,
    /// Where the client API (Resources, Cluster) listens.
    pub client_addr: String,
    /// Where the peer (Raft) service listens.
    pub peer_addr: String,
    /// Where `GET /metrics` (Prometheus, plain HTTP) is served; none when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    /// Raft log, vote and snapshots live here.
    pub data_dir: PathBuf,
    /// The members a fresh cluster bootstraps with. Empty for a node that will be added later
    /// with `steward member add-learner`. The member with the smallest id initializes the cluster,
    /// once, when its log is empty.
    #[serde(default)]
    pub initial_members: Vec<MemberConfig>,
    #[serde(default)]
    pub raft: RaftConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub locks: LocksConfig,
    #[serde(default)]
    pub operations: OperationsConfig,
    #[serde(default)]
    pub status: StatusConfig,
    #[serde(default)]
    pub pools: PoolsConfig,
    #[serde(default)]
    pub time: TimeConfig,
    #[serde(default)]
    pub etcd: EtcdConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub console: ConsoleConfig,
}

/// The web console (README "Console"): pages of what this node has applied, live.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Where the console listens: HTTPS with the node's certificate (HTTP with
    /// tls.plaintext = true); no console when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// Most live streams (open console pages) this node serves at once; one more is refused
    /// (503) until one closes.
    pub streams_max: usize,
    /// Shortest time between two updates of one open page, in ms: changes in between arrive
    /// together.
    pub update_interval_ms: u64,
    /// Rows on one page of a list (objects, operations, pool resources, locks); the rest on
    /// further pages. No more than `limits.list_page_max` are read.
    pub page_rows: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            addr: None,
            streams_max: 64,
            update_interval_ms: 500,
            page_rows: 100,
        }
    }
}

/// TLS on the client API and the peer port. TLS is the default: a config names its
/// certificate files, or says `plaintext = true`; one that does neither is refused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Serve both ports without TLS: anyone who reaches them can read and write everything.
    pub plaintext: bool,
    /// The CA (PEM) that signed every node's and client's certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// This node's certificate (PEM), valid for the host names clients and peers dial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Clients of the client API must present a certificate signed by ca_file (mutual TLS).
    /// The peer port always requires one.
    pub client_cert_required: bool,
}

impl TlsConfig {
    /// No TLS, asked for.
    pub fn plaintext() -> TlsConfig {
        TlsConfig {
            plaintext: true,
            ..TlsConfig::default()
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let files = [
            ("tls.ca_file", &self.ca_file),
            ("tls.cert_file", &self.cert_file),
            ("tls.key_file", &self.key_file),
        ];
        if self.plaintext {
            if let Some((field, _)) = files.iter().find(|(_, f)| f.is_some()) {
                return Err(ConfigError::Invalid {
                    field,
                    rule: "must not be set with tls.plaintext = true".to_string(),
                });
            }
            if self.client_cert_required {
                return Err(ConfigError::Invalid {
                    field: "tls.client_cert_required",
                    rule: "needs TLS; not with tls.plaintext = true".to_string(),
                });
            }
            return Ok(());
        }
        if let Some((field, _)) = files.iter().find(|(_, f)| f.is_none()) {
            return Err(ConfigError::Invalid {
                field,
                rule: "required: TLS is on unless tls.plaintext = true is set (give tls.ca_file, \
                       tls.cert_file and tls.key_file)"
                    .to_string(),
            });
        }
        Ok(())
    }
}

/// Wall clocks, which steward uses for display only (README "Time"): how nodes compare them, and
/// how the shown time follows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeConfig {
    /// A node whose wall clock is further than this from the middle of the nodes' clocks is
    /// reported (`cluster status`, metrics, the log); the leader then shows the middle's time.
    pub clock_offset_ms_max: u64,
    /// How often every node reads every other node's wall clock.
    pub clock_probe_interval_ms: u64,
    /// When the middle of the clocks steps, the shown time catches up (or waits) by at most
    /// this many ms per second instead of jumping (slewing).
    pub shown_slew_ms_per_s: u64,
    /// While anything is timed (a lock, a lease, a worker, a deadline), the leader writes its
    /// count of cluster time into the log at least this often, even when nothing else is
    /// written: a node that restarted or caught up late then counts from a recent entry, so a
    /// change of leader to it ends things late by at most this much more (README "Time").
    pub checkpoint_interval_ms: u64,
}

/// The etcd v3 API served beside steward's own (README "Use steward as etcd"): its limits, with
/// etcd's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdConfig {
    /// Largest etcd request (etcd's `--max-request-bytes`), in bytes.
    pub request_bytes_max: usize,
    /// Most compares, or requests of one branch, in one etcd txn (etcd's `--max-txn-ops`).
    pub txn_ops_max: usize,
    /// How often a watch that asked for progress notices and had nothing to send gets one
    /// (etcd's `--experimental-watch-progress-notify-interval`), in ms.
    pub progress_notify_interval_ms: u64,
    /// etcd's `--auto-compaction-mode`: "" (off), "periodic" or "revision".
    pub auto_compaction_mode: String,
    /// etcd's `--auto-compaction-retention`: with "periodic" how much history to keep (a
    /// duration such as "1h" or "30m", or a number of hours), with "revision" how many
    /// revisions.
    pub auto_compaction_retention: String,
    /// How often the leader compacts in "revision" mode, in ms (etcd: every 5 minutes);
    /// "periodic" compacts every tenth of its retention, at most an hour apart.
    pub auto_compaction_interval_ms: u64,
    /// Lease keep-alives of this node waiting for the log entry that carries them; past it,
    /// keep-alive streams are not read until there is room (never refused).
    pub keep_alives_queued_max: usize,
    /// Most keep-alives one log entry carries.
    pub keep_alives_per_entry_max: usize,
    /// Log entries of keep-alives this node has in flight at once; what arrives meanwhile
    /// gathers for the next.
    pub keep_alive_entries_in_flight_max: usize,
}

/// `[etcd]`'s auto-compaction, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep this much history (cluster time).
    Periodic { retention_ms: u64 },
    /// Keep this many revisions.
    Revision { keep: u64 },
}

impl EtcdConfig {
    /// The auto-compaction it asks for, if any; `Err` names the field and the rule.
    pub fn auto_compaction(&self) -> Result<Option<AutoCompaction>, ConfigError> {
        let retention = self.auto_compaction_retention.trim();
        let bad = |rule: &str| ConfigError::Invalid {
            field: "etcd.auto_compaction_retention",
            rule: format!("{rule}; it is {retention:?}"),
        };
        match self.auto_compaction_mode.as_str() {
            "" => Ok(None),
            "periodic" => {
                let retention_ms = match retention.parse::<u64>() {
                    Ok(hours) => hours.saturating_mul(3_600_000),
                    Err(_) => humantime::parse_duration(retention)
                        .map_err(|_| {
                            bad("with periodic mode, a duration (\"1h\", \"30m\") or hours")
                        })?
                        .as_millis() as u64,
                };
                if retention_ms == 0 {
                    return Err(bad("must be more than 0"));
                }
                Ok(Some(AutoCompaction::Periodic { retention_ms }))
            }
            "revision" => match retention.parse::<u64>() {
                Ok(keep) if keep > 0 => Ok(Some(AutoCompaction::Revision { keep })),
                _ => Err(bad(
                    "with revision mode, a number of revisions, more than 0",
                )),
            },
            other => Err(ConfigError::Invalid {
                field: "etcd.auto_compaction_mode",
                rule: format!("{other:?} is not \"\", \"periodic\" or \"revision\""),
            }),
        }
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            request_bytes_max: 1536 * 1024,
            txn_ops_max: 128,
            progress_notify_interval_ms: 600_000,
            auto_compaction_mode: String::new(),
            auto_compaction_retention: String::new(),
            auto_compaction_interval_ms: 300_000,
            keep_alives_queued_max: 4096,
            keep_alives_per_entry_max: 1024,
            keep_alive_entries_in_flight_max: 2,
        }
    }
}

impl EtcdConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("etcd.request_bytes_max", self.request_bytes_max),
            ("etcd.txn_ops_max", self.txn_ops_max),
            (
                "etcd.progress_notify_interval_ms",
                self.progress_notify_interval_ms as usize,
            ),
            (
                "etcd.auto_compaction_interval_ms",
                self.auto_compaction_interval_ms as usize,
            ),
            ("etcd.keep_alives_queued_max", self.keep_alives_queued_max),
            (
                "etcd.keep_alives_per_entry_max",
                self.keep_alives_per_entry_max,
            ),
            (
                "etcd.keep_alive_entries_in_flight_max",
                self.keep_alive_entries_in_flight_max,
            ),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid {
                field,
                rule: "must be >= 1".to_string(),
            });
        }
        self.auto_compaction()?;
        Ok(())
    }
}

impl Default for TimeConfig {
    fn default() -> Self {
        TimeConfig {
            clock_offset_ms_max: 500,
            clock_probe_interval_ms: 2_000,
            shown_slew_ms_per_s: 100,
            checkpoint_interval_ms: 500,
        }
    }
}

/// Leased resource pools: the leader's reaper.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolsConfig {
    /// How often the leader looks for leases past their state's expiry.
    pub reap_interval_ms: u64,
    /// The state a reaped resource goes to (Boskos' janitor cleans dirty ones).
    pub reset_state: String,
    /// The verb of the operations that construct virtual resources (on `MasonConstruct`
    /// objects); workers register for `MasonConstruct:<verb>`.
    pub construct_verb: String,
}

impl Default for PoolsConfig {
    fn default() -> Self {
        PoolsConfig {
            reap_interval_ms: 1_000,
            reset_state: "dirty".to_string(),
            construct_verb: "construct".to_string(),
        }
    }
}

/// Deployment status (the `StatusService` API): how much one deployment, one report and one
/// status answer may hold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatusConfig {
    /// Most resources (AppContext and cluster-only) in one deployment.
    pub resources_max: u64,
    /// Largest raw metadata + spec + status of one resource, as JSON bytes.
    pub resource_bytes_max: u64,
    /// Most resources (or updates) in one request, hence one replicated command.
    pub items_max: u64,
    /// Most resources one `all`, `detail` or `rsync` status answer lists.
    pub query_resources_max: u64,
}

impl Default for StatusConfig {
    fn default() -> Self {
        let limits = crate::state::deployments::StatusLimits::default();
        StatusConfig {
            resources_max: limits.resources_max,
            resource_bytes_max: limits.resource_bytes_max,
            items_max: limits.items_max,
            query_resources_max: 10_000,
        }
    }
}

impl StatusConfig {
    /// The limits the leader puts into each deployment command.
    pub fn limits(&self) -> crate::state::deployments::StatusLimits {
        crate::state::deployments::StatusLimits {
            resources_max: self.resources_max,
            resource_bytes_max: self.resource_bytes_max,
            items_max: self.items_max,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("status.resources_max", self.resources_max),
            ("status.resource_bytes_max", self.resource_bytes_max),
            ("status.items_max", self.items_max),
            ("status.query_resources_max", self.query_resources_max),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid {
                field,
                rule: "must be >= 1".to_string(),
            });
        }
        Ok(())
    }
}

/// Lifecycle operations and workers: the limits the state machine enforces (each named as in
/// its rejections, `operations.<key>`), the leader's scheduling and sweep intervals, and the
/// default policy the server gives each submitted operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OperationsConfig {
    /// Operations not yet ended, in the store.
    pub active_max: u32,
    /// Operations not yet ended on one target resource.
    pub per_target_max: u32,
    /// Ended operations kept for queries and idempotent submits; the oldest are forgotten.
    pub finished_max: u32,
    /// Largest `params` of one operation (compact JSON), in bytes.
    pub params_bytes_max: u32,
    /// Largest response or error of one report (compact JSON), in bytes.
    pub result_bytes_max: u32,
    /// Most attempts an operation may have, whether its submit asks or `attempts_default` gives.
    pub attempts_max: u32,
    /// Longest deadline an operation may have, in ms.
    pub deadline_ms_max: u64,
    /// Most registered workers.
    pub workers_max: u32,
    /// Most (kind, verb) handles of one worker.
    pub handles_max: u32,
    /// Largest capacity (concurrent operations) a worker may ask for.
    pub capacity_max: u32,
    /// How often the leader looks for queued operations to assign even when nothing changed
    /// (a worker's heartbeat makes it alive again, a lock frees up), in ms.
    pub schedule_interval_ms: u64,
    /// Most assignments the leader has proposed and not yet seen answered.
    pub schedule_batch_max: u32,
    /// How often the leader looks for dead workers and passed deadlines, in ms.
    pub sweep_interval_ms: u64,
    /// Verbs that only read their target (a backup): they take its READ lock, so they may run
    /// together. Every other verb takes the target's WRITE lock.
    pub read_lock_verbs: Vec<String>,
    /// Verbs whose success deletes the target.
    pub delete_verbs: Vec<String>,
    /// The verb of the operation that decommissions a reservation when it ends or is marked
    /// `toDelete` (a worker handling `<Kind>:<verb>` runs it). One of `delete_verbs`, so its
    /// success deletes the resource.
    pub decommission_verb: String,
    /// Attempts an operation gets unless the submit asks for another number.
    pub attempts_default: u32,
    /// Time from submit after which an operation is failed or aborted, unless the submit asks
    /// for another one, in ms; 0: no deadline.
    pub deadline_ms_default: u64,
    /// Deadlines of particular verbs (e.g. `{ backup = 21600000 }`), in ms, in place of
    /// `deadline_ms_default`; 0: no deadline. A submit may still ask for its own.
    pub verb_deadline_ms_default: BTreeMap<String, u64>,
}

impl Default for OperationsConfig {
    fn default() -> Self {
        OperationsConfig {
            active_max: 100_000,
            per_target_max: 100,
            finished_max: 100_000,
            params_bytes_max: 64 * 1024,
            result_bytes_max: 64 * 1024,
            attempts_max: 20,
            deadline_ms_max: 7 * 24 * 3_600_000,
            workers_max: 10_000,
            handles_max: 256,
            capacity_max: 10_000,
            schedule_interval_ms: 200,
            schedule_batch_max: 256,
            sweep_interval_ms: 200,
            read_lock_verbs: vec!["backup".to_string()],
            delete_verbs: vec!["delete".to_string()],
            decommission_verb: "delete".to_string(),
            attempts_default: 3,
            deadline_ms_default: 24 * 3_600_000,
            verb_deadline_ms_default: BTreeMap::new(),
        }
    }
}

/// The lock table: timing policy and its limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocksConfig {
    /// After a WRITE lock expires without being released, it cannot be granted again for this
    /// long (Chubby's lock-delay), so a paused holder has time to notice.
    pub lock_delay_ms: u64,
    /// How often the leader looks for expired holders and waiters to propose a sweep.
    pub sweep_interval_ms: u64,
    /// Most holders of one lock (READ holders share it).
    pub holders_max: u32,
    /// Most waiters queued on one lock.
    pub waiters_max: u32,
    /// Most locks (held or waited on) in the store.
    pub locks_max: u32,
    /// Largest `details` JSON of one holder or waiter, in bytes.
    pub details_bytes_max: u32,
}

impl Default for LocksConfig {
    fn default() -> Self {
        LocksConfig {
            lock_delay_ms: 5_000,
            sweep_interval_ms: 100,
            holders_max: 1_000,
            waiters_max: 1_000,
            locks_max: 100_000,
            details_bytes_max: 16 * 1024,
        }
    }
}

/// Raft timing and log retention.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    pub cluster_name: String,
    pub heartbeat_interval_ms: u64,
    /// The whole time a follower hears no leader before it campaigns, lease included:
    /// `raft::types::openraft_election_timeouts` splits it into openraft's two settings.
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_logs_since_last: u64,
    /// Entries kept in the log behind the last snapshot, for slow followers.
    pub log_behind_snapshot_max: u64,
    /// Timeout of one peer RPC (append, vote); snapshots get 10x.
    pub rpc_timeout_ms: u64,
    /// Entries per append request to a follower.
    pub payload_entries_max: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            cluster_name: "steward".to_string(),
            heartbeat_interval_ms: 100,
            election_timeout_ms_min: 1500,
            election_timeout_ms_max: 2000,
            snapshot_logs_since_last: 100_000,
            log_behind_snapshot_max: 5_000,
            rpc_timeout_ms: 2_000,
            payload_entries_max: 512,
        }
    }
}

/// The smallest `limits.quota_bytes`: an empty node's database and snapshot take a few
/// hundred KiB.
pub const QUOTA_BYTES_MIN: u64 = 1 << 20;

/// Every limit the server enforces. Each violation is answered with an error naming the limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest object (its JSON), in bytes.
    pub object_bytes_max: usize,
    /// Largest gRPC request, in bytes.
    pub request_bytes_max: usize,
    /// Largest list page a client may ask for.
    pub list_page_max: u32,
    /// Page size when a client does not ask for one.
    pub list_page_default: u32,
    /// Most operations in one txn.
    pub txn_ops_max: usize,
    /// Most concurrent watchers on one node.
    pub watchers_max: usize,
    /// Events buffered per watcher; a watcher that falls this far behind is cut off.
    pub watch_buffer: usize,
    /// Events kept in memory for watches that resume from an older revision.
    pub watch_history: usize,
    /// Bytes of objects (approximate, as JSON) those events may hold; the oldest go first.
    pub watch_history_bytes: usize,
    /// How often an idle watch gets a BOOKMARK with the current revision.
    pub bookmark_interval_ms: u64,
    /// Most proposals waiting for the leader at once on one node.
    pub pending_proposals_max: usize,
    /// Requests one client (its certificate's name, else its IP address) may make per second
    /// on one node, on average.
    pub client_requests_per_second: u32,
    /// Requests one client may make at once after being quiet (the token bucket's size).
    pub client_request_burst: u32,
    /// Calls one client may have in flight on one node; a watch or a wait counts until it ends.
    pub client_calls_max: usize,
    /// Most bytes this node's data directory (Raft log database and snapshot) may hold; beyond
    /// it the node raises a NOSPACE alarm and the cluster refuses writes that may grow the state
    /// until space is freed and the alarm disarmed (etcd's `--quota-backend-bytes`).
    pub quota_bytes: u64,
    /// Free bytes this node keeps on its data directory's file system: below it, the node
    /// raises a NOSPACE alarm as well, before the disk is full.
    pub disk_reserve_bytes: u64,
    /// How often the node measures its data directory and free disk, in ms.
    pub space_check_interval_ms: u64,
    /// Largest command, as it is written in the log (its JSON), in bytes. Checked by the
    /// leader's admission of every proposal, so the log never holds a larger entry and peer
    /// messages have a provable size (`raft::message_size`).
    pub command_bytes_max: usize,
    /// Largest peer message (an AppendEntries, a forwarded batch, a snapshot chunk) and largest
    /// client API answer, in bytes. At least `raft::message_size::peer_message_bytes_floor`,
    /// what the largest legal message needs, or replication could wedge on one that never fits.
    pub peer_message_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            object_bytes_max: 1024 * 1024,
            request_bytes_max: 4 * 1024 * 1024,
            list_page_max: 1_000,
            list_page_default: 500,
            txn_ops_max: 128,
            watchers_max: 10_000,
            watch_buffer: 1_024,
            watch_history: 100_000,
            watch_history_bytes: 8 * 1024 * 1024,
            bookmark_interval_ms: 5_000,
            pending_proposals_max: 10_000,
            client_requests_per_second: 50_000,
            client_request_burst: 100_000,
            client_calls_max: 10_000,
            quota_bytes: 2 << 30,
            disk_reserve_bytes: 256 << 20,
            space_check_interval_ms: 1_000,
            command_bytes_max: COMMAND_BYTES_MAX_DEFAULT,
            peer_message_bytes_max: crate::raft::message_size::peer_message_bytes_floor(
                COMMAND_BYTES_MAX_DEFAULT,
                RaftConfig::default().payload_entries_max,
                1_000,
            ),
        }
    }
}

/// The default `limits.command_bytes_max`: the default `request_bytes_max` (4 MiB) with a
/// quarter more for what JSON adds to a request's fields (names, quotes, escapes).
pub const COMMAND_BYTES_MAX_DEFAULT: usize = 5 * 1024 * 1024;

/// What is wrong with a config, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config field {field}: {rule}")]
    Invalid { field: &'static str, rule: String },
    #[error("config {path}: both {old} (its old name) and {new} are set; keep only {new}")]
    BothNames {
        path: PathBuf,
        old: &'static str,
        new: &'static str,
    },
}

impl Config {
    /// The `[operations]` section.
    pub fn operations(&self) -> &OperationsConfig {
        &self.operations
    }

    /// Reads and parses a TOML config file (not yet validated). Each old key name it uses is
    /// logged once, as a warning naming the new one.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let (config, old_names) = Config::from_toml(&text, path)?;
        for old in old_names {
            tracing::warn!(config = %path.display(), "{old}");
        }
        Ok(config)
    }

    /// Parses the text of the config file `path`, reading old key names as their new ones;
    /// returns the old names it found.
    pub fn from_toml(
        text: &str,
        path: &Path,
    ) -> Result<(Config, Vec<renamed::OldName>), ConfigError> {
        let parse_error = |e: &dyn std::fmt::Display| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut file: toml::Table = toml::from_str(text).map_err(|e| parse_error(&e))?;
        let old_names =
            renamed::rename_old_keys(&mut file).map_err(|both| ConfigError::BothNames {
                path: path.to_path_buf(),
                old: both.old,
                new: both.new,
            })?;
        let config = Config::deserialize(toml::Value::Table(file)).map_err(|e| parse_error(&e))?;
        Ok((config, old_names))
    }
}

#[cfg(test)]
mod tests;
