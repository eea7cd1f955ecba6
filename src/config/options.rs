//! The one reference of every config key: its meaning, and its default where the code does not
//! compute it. `steward dev` and cluster-configs/ write these lines as comments over each option
//! (src/cli/node_config.rs), and README's "Configuration" table is generated from them (a test in
//! src/config/tests.rs fails when the README and this table disagree).
//!
//! Defaults of the sectioned options come from the sections' `Default` impls, so a default is
//! written once, in code; only the top-level keys, which have no `Default`, say theirs here.

use super::{
    ConsoleConfig, EtcdConfig, Limits, LocksConfig, OperationsConfig, PoolsConfig, RaftConfig,
    StatusConfig, TimeConfig, TlsConfig,
};

/// One config key as an operator reads it.
#[derive(Clone, Copy, Debug)]
pub struct ConfigOption {
    /// The dotted key: `id`, `limits.object_bytes_max`.
    pub key: &'static str,
    /// What to write as the default when the code has none to give (the top-level keys).
    pub default: Option<&'static str>,
    /// What the option does, with its unit and the rules `validate()` enforces. One line, no `|`.
    pub doc: &'static str,
}

const fn top(key: &'static str, default: &'static str, doc: &'static str) -> ConfigOption {
    ConfigOption {
        key,
        default: Some(default),
        doc,
    }
}

const fn opt(key: &'static str, doc: &'static str) -> ConfigOption {
    ConfigOption {
        key,
        default: None,
        doc,
    }
}

/// Every config key, in the order a config file lists them.
pub const OPTIONS: &[ConfigOption] = &[
    top("id", "(required)", "This node's id (>= 1). Never reuse the id of a removed node."),
    top(
        "client_addr",
        "(required)",
        "Where the client API (Resources, Cluster) listens; clients use it as an endpoint.",
    ),
    top(
        "peer_addr",
        "(required)",
        "Where the peer (Raft) service listens; only other nodes connect here.",
    ),
    top(
        "metrics_addr",
        "none",
        "Where Prometheus scrapes GET /metrics (plain HTTP); none when unset (`--metrics-addr`).",
    ),
    top(
        "data_dir",
        "(required)",
        "Raft log and vote (raft-log/, a WAL; data dirs of earlier versions kept them in steward.redb and are moved on start) and the last snapshot (snapshot.bin) live here; a relative path is relative to the working directory.",
    ),
    top(
        "initial_members",
        "`[]`",
        "The members `{id, peer_addr, client_addr}` a fresh cluster bootstraps with, the same on every node; the smallest id initializes the cluster once. Empty on a node that joins later (`steward member add-learner`).",
    ),
    opt(
        "tls.plaintext",
        "Serve both ports without TLS: anyone who reaches them can read and write. A config with neither this nor the three files is refused.",
    ),
    opt(
        "tls.ca_file",
        "The CA (PEM) that signed every node's and client's certificate; required unless tls.plaintext.",
    ),
    opt(
        "tls.cert_file",
        "This node's certificate (PEM), valid for the names clients and peers dial; required unless tls.plaintext.",
    ),
    opt(
        "tls.key_file",
        "This node's private key (PEM); required unless tls.plaintext.",
    ),
    opt(
        "tls.client_cert_required",
        "Clients of the client API must present a certificate signed by the CA (the peer port always requires one).",
    ),
    opt(
        "console.addr",
        "Where the web console listens (README \"Console\"): HTTPS with the node's certificate, or HTTP with tls.plaintext; no console when unset.",
    ),
    opt(
        "console.streams_max",
        "Most live streams (open console pages) this node serves at once; one more is refused (503) until one closes.",
    ),
    opt(
        "console.update_interval_ms",
        "Shortest time between two updates of one open console page, in ms; changes in between arrive together.",
    ),
    opt(
        "console.page_rows",
        "Rows on one page of a console list (objects, operations, pool resources, locks); no more than limits.list_page_max are read.",
    ),
    opt("raft.cluster_name", "Name of the Raft group, used in logs and metrics."),
    opt(
        "raft.heartbeat_interval_ms",
        "How often the leader sends heartbeats to followers, in ms.",
    ),
    opt(
        "raft.election_timeout_ms_min",
        "A follower that hears no leader for a random time in [min, max] ms starts an election (Pre-Vote is on). The first half of max is a leader lease in which followers refuse to vote, so min must be more than max / 2 + raft.heartbeat_interval_ms.",
    ),
    opt(
        "raft.election_timeout_ms_max",
        "Upper end of that random election timeout, in ms; more than raft.election_timeout_ms_min. After a leader dies, what falls due (a TTL) waits for the next leader: up to this much.",
    ),
    opt(
        "raft.snapshot_logs_since_last",
        "Build a snapshot after this many log entries since the last one (etcd's default snapshot-count).",
    ),
    opt(
        "raft.log_behind_snapshot_max",
        "Entries kept in the log behind the last snapshot, for slow followers (etcd keeps 5000).",
    ),
    opt(
        "raft.rpc_timeout_ms",
        "Timeout of one peer RPC (append, vote), in ms; snapshot transfers get 10x.",
    ),
    opt(
        "raft.payload_entries_max",
        "Most log entries in one append request to a follower.",
    ),
    opt(
        "limits.object_bytes_max",
        "Largest object (its JSON), in bytes (ResourceExhausted above); at most the state machine's own ceiling.",
    ),
    opt(
        "limits.request_bytes_max",
        "Largest gRPC request, in bytes; at least limits.object_bytes_max.",
    ),
    opt(
        "limits.list_page_max",
        "Largest list page a client may ask for, in objects.",
    ),
    opt(
        "limits.list_page_default",
        "Page size when a client does not ask for one; at most limits.list_page_max.",
    ),
    opt("limits.txn_ops_max", "Most operations in one txn."),
    opt("limits.watchers_max", "Most concurrent watchers on one node."),
    opt(
        "limits.watch_buffer",
        "Events buffered per watcher; a watcher that falls this far behind is cut off.",
    ),
    opt(
        "limits.watch_history",
        "Events kept in memory per node for watches that resume from an older revision, and for List pages pinned to their first page's revision (older: OutOfRange, start the list again).",
    ),
    opt(
        "limits.watch_history_bytes",
        "Bytes of objects (approximate, as JSON) those events may hold, counting each event's object and the one it replaced (what a pinned List page puts back); the oldest go first. An object shared with the store or with another event is counted each time, so this bounds what the history keeps alive: 8 MiB is seconds of history at full write load, minutes at a control plane's usual rate.",
    ),
    opt(
        "limits.bookmark_interval_ms",
        "How often an idle watch gets a BOOKMARK with the current revision, in ms.",
    ),
    opt(
        "limits.pending_proposals_max",
        "Most proposals waiting for the leader at once on one node.",
    ),
    opt(
        "limits.client_requests_per_second",
        "Requests one client (its certificate's common name, else its IP address) may make per second on one node, on average (a token bucket); over it, ResourceExhausted naming the limit.",
    ),
    opt(
        "limits.client_request_burst",
        "Requests one client may make at once after a quiet spell (its token bucket's size).",
    ),
    opt(
        "limits.client_calls_max",
        "Calls one client may have in flight on one node (a watch, an assignment stream or a waiting acquire counts until it ends): bounds the watchers and buffers one client can hold.",
    ),
    opt(
        "limits.quota_bytes",
        "Most bytes the data dir (log database and snapshot) may hold; above it the node raises NOSPACE and writes that grow the state are refused (see Disk quota and compaction); at least 1 MiB.",
    ),
    opt(
        "limits.disk_reserve_bytes",
        "Free bytes kept on the data dir's file system; below it the node raises NOSPACE too.",
    ),
    opt(
        "limits.space_check_interval_ms",
        "How often the node measures its data dir and free disk, in ms.",
    ),
    opt(
        "limits.command_bytes_max",
        "Largest command as written in the log (its JSON), in bytes; every proposal, from a client of this node or forwarded by a follower, is checked on the leader too; at least limits.request_bytes_max.",
    ),
    opt(
        "limits.peer_message_bytes_max",
        "Largest peer message (AppendEntries, forwarded batch, snapshot chunk) and client API answer, either way, in bytes; refused below what the largest legal message needs (raft.payload_entries_max commands of limits.command_bytes_max, a full list page, ...), since openraft cannot split an append by bytes and a smaller limit would stop replication.",
    ),
    opt(
        "locks.lock_delay_ms",
        "After a WRITE lock expires unreleased, it cannot be granted again for this long, in ms (Chubby's lock-delay).",
    ),
    opt(
        "locks.sweep_interval_ms",
        "How often the leader looks for expired holders and waiters, in ms.",
    ),
    opt(
        "locks.holders_max",
        "Most holders of one lock (READ holders share it).",
    ),
    opt("locks.waiters_max", "Most waiters queued on one lock."),
    opt(
        "locks.locks_max",
        "Most locks (held or waited on) in the store.",
    ),
    opt(
        "locks.details_bytes_max",
        "Largest details JSON of one holder or waiter, in bytes.",
    ),
    opt(
        "operations.active_max",
        "Operations not yet ended, in the store.",
    ),
    opt(
        "operations.per_target_max",
        "Operations not yet ended on one target resource.",
    ),
    opt(
        "operations.finished_max",
        "Ended operations kept for queries and idempotent submits; the oldest are forgotten.",
    ),
    opt(
        "operations.params_bytes_max",
        "Largest params of one operation (compact JSON), in bytes.",
    ),
    opt(
        "operations.result_bytes_max",
        "Largest response or error of one worker report (compact JSON), in bytes.",
    ),
    opt(
        "operations.attempts_max",
        "Most attempts an operation may have (a submit asking for more is refused).",
    ),
    opt(
        "operations.deadline_ms_max",
        "Longest deadline an operation may have, in ms.",
    ),
    opt("operations.workers_max", "Most registered workers."),
    opt(
        "operations.handles_max",
        "Most Kind:verb handles of one worker.",
    ),
    opt(
        "operations.capacity_max",
        "Largest capacity (concurrent operations) a worker may ask for.",
    ),
    opt(
        "operations.schedule_interval_ms",
        "How often the leader looks for operations to assign when nothing else wakes it, in ms.",
    ),
    opt(
        "operations.schedule_batch_max",
        "Most assignments the leader has in flight (proposed, not yet answered).",
    ),
    opt(
        "operations.sweep_interval_ms",
        "How often the leader looks for dead workers and passed deadlines, in ms.",
    ),
    opt(
        "operations.read_lock_verbs",
        "Verbs that take their target's READ lock (they may run together, e.g. a backup); others take its WRITE lock.",
    ),
    opt(
        "operations.delete_verbs",
        "Verbs whose success deletes the target.",
    ),
    opt(
        "operations.decommission_verb",
        "Verb of the operation that decommissions an ended (or toDelete) reservation; one of operations.delete_verbs.",
    ),
    opt(
        "operations.attempts_default",
        "Attempts an operation gets when its submit does not say; 1 to operations.attempts_max.",
    ),
    opt(
        "operations.deadline_ms_default",
        "Deadline of an operation from its submit when the submit does not say, in ms; 0: none; at most operations.deadline_ms_max.",
    ),
    opt(
        "operations.verb_deadline_ms_default",
        "Deadlines of particular verbs in place of operations.deadline_ms_default, in ms (e.g. { backup = 21600000 }); 0: none. A submit may still ask for its own.",
    ),
    opt(
        "status.resources_max",
        "Most resources (AppContext and cluster-only) in one deployment.",
    ),
    opt(
        "status.resource_bytes_max",
        "Largest raw metadata + spec + status of one deployment resource, as JSON bytes.",
    ),
    opt(
        "status.items_max",
        "Most resources or updates in one StatusService request, hence one replicated command.",
    ),
    opt(
        "status.query_resources_max",
        "Most resources one all/detail/rsync status answer lists.",
    ),
    opt(
        "pools.reap_interval_ms",
        "How often the leader looks for pool leases past their state's expiry, in ms.",
    ),
    opt(
        "pools.reset_state",
        "The state a reaped pool resource goes to (a janitor cleans dirty ones).",
    ),
    opt(
        "pools.construct_verb",
        "The verb of the operations that build virtual resources (workers handle MasonConstruct:<verb>).",
    ),
    opt(
        "time.clock_offset_ms_max",
        "A node whose wall clock is further than this from the middle of the nodes' clocks is reported (cluster status, metrics, log), in ms; the leader then shows the middle's time. Wall clocks are for display only: no TTL reads them.",
    ),
    opt(
        "time.clock_probe_interval_ms",
        "How often every node reads every other node's wall clock, in ms.",
    ),
    opt(
        "time.shown_slew_ms_per_s",
        "When the middle of the nodes' wall clocks steps, the shown time (creationTimestamp) catches up or waits by at most this many ms per second instead of jumping; 1..=1000.",
    ),
    opt(
        "time.checkpoint_interval_ms",
        "While anything is timed (a lock, lease, worker or deadline), the leader writes cluster time into the log at least this often, in ms: a node that restarted or caught up in a quiet spell then counts from a recent entry, behind by at most about this much if it becomes leader. At most raft.election_timeout_ms_max / 2, so that stays within the election timeout the TTL bound allows.",
    ),
    opt(
        "etcd.request_bytes_max",
        "Largest request of the etcd API (etcd's --max-request-bytes), in bytes; larger ones get etcd's `etcdserver: request is too large`. Its log entry (keys and values as base64, 4/3 of their bytes) is also held to limits.command_bytes_max.",
    ),
    opt(
        "etcd.txn_ops_max",
        "Most compares, or requests in one branch, of an etcd txn at each nesting level (etcd's --max-txn-ops); more get `etcdserver: too many operations in txn request`.",
    ),
    opt(
        "etcd.auto_compaction_mode",
        "etcd's --auto-compaction-mode: \"\" (off), \"periodic\" (keep a span of history) or \"revision\" (keep a number of revisions); the leader compacts etcd's keyspace accordingly.",
    ),
    opt(
        "etcd.auto_compaction_retention",
        "etcd's --auto-compaction-retention: with periodic a duration (\"1h\", \"30m\") or a number of hours, measured on cluster time; with revision a number of revisions.",
    ),
    opt(
        "etcd.auto_compaction_interval_ms",
        "How often the leader compacts in revision mode, in ms (etcd: 5 minutes); periodic mode compacts every tenth of its retention, at most an hour apart.",
    ),
    opt(
        "etcd.progress_notify_interval_ms",
        "How often an etcd watch that asked for progress notices (progress_notify) and had nothing to send gets one, in ms (etcd's --experimental-watch-progress-notify-interval; Kubernetes runs 5000).",
    ),
    opt(
        "etcd.keep_alives_queued_max",
        "Lease keep-alives on a node waiting for the log entry that carries them (steward_etcd_keep_alives_queued); past it, keep-alive streams are not read until there is room (counted in steward_etcd_keep_alives_waited_total), never refused.",
    ),
    opt(
        "etcd.keep_alives_per_entry_max",
        "Most lease keep-alives one log entry carries: keep-alives from every stream of a node that arrive while its last entries are in flight share the next one.",
    ),
    opt(
        "etcd.keep_alive_entries_in_flight_max",
        "Log entries of lease keep-alives a node has in flight at once; more keep-alives per entry when lower, less waiting when higher.",
    ),
];

/// The option with this dotted key.
pub fn option(key: &str) -> Option<&'static ConfigOption> {
    OPTIONS.iter().find(|o| o.key == key)
}

/// `(key within the section, doc)` of every option of `[section]`, in file order.
pub fn section_options(section: &str) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    OPTIONS.iter().filter_map(move |o| {
        o.key
            .split_once('.')
            .filter(|(s, _)| *s == section)
            .map(|(_, key)| (key, o.doc))
    })
}

/// The defaults of every sectioned option, as a config file would hold them.
pub fn section_defaults() -> Result<toml::Table, toml::ser::Error> {
    let mut table = toml::Table::new();
    table.insert("tls".into(), toml::Value::try_from(TlsConfig::default())?);
    table.insert("raft".into(), toml::Value::try_from(RaftConfig::default())?);
    table.insert("limits".into(), toml::Value::try_from(Limits::default())?);
    table.insert(
        "locks".into(),
        toml::Value::try_from(LocksConfig::default())?,
    );
    table.insert(
        "operations".into(),
        toml::Value::try_from(OperationsConfig::default())?,
    );
    table.insert(
        "status".into(),
        toml::Value::try_from(StatusConfig::default())?,
    );
    table.insert(
        "pools".into(),
        toml::Value::try_from(PoolsConfig::default())?,
    );
    table.insert("time".into(), toml::Value::try_from(TimeConfig::default())?);
    table.insert("etcd".into(), toml::Value::try_from(EtcdConfig::default())?);
    table.insert(
        "console".into(),
        toml::Value::try_from(ConsoleConfig::default())?,
    );
    Ok(table)
}

/// The default of `option` as the README writes it: its own text, else the section's
/// `Default` value (strings and lists in backticks; an unset file is "none").
fn default_text(option: &ConfigOption, defaults: &toml::Table) -> String {
    if let Some(text) = option.default {
        return text.to_string();
    }
    let value = option
        .key
        .split_once('.')
        .and_then(|(section, key)| defaults.get(section)?.get(key));
    match value {
        None => "none".to_string(),
        Some(toml::Value::String(s)) => format!("`{s}`"),
        Some(toml::Value::Table(t)) => {
            let entries: Vec<String> = t.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("`{{{}}}`", entries.join(", "))
        }
        Some(v @ toml::Value::Array(_)) => format!("`{v}`"),
        Some(v) => v.to_string(),
    }
}

/// README's configuration reference: a Markdown table of every option, its default and doc.
pub fn reference_table() -> Result<String, toml::ser::Error> {
    let defaults = section_defaults()?;
    let mut out = String::from("| option | default | meaning |\n|---|---|---|\n");
    for option in OPTIONS {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            option.key,
            default_text(option, &defaults),
            option.doc
        ));
    }
    Ok(out)
}
