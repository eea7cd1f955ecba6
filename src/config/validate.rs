//! `Config::validate`: every rule a config must meet, each error naming its key
//! (`ConfigError::Invalid`). Called before a config is used: `steward serve`, `snapshot restore`
//! and jepsen's cluster.

use std::net::SocketAddr;

use super::{Config, ConfigError, OperationsConfig, QUOTA_BYTES_MIN};

impl Config {
    /// Checks every field; the error names the first one that is wrong and the rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, rule: &str| {
            Err(ConfigError::Invalid {
                field,
                rule: rule.to_string(),
            })
        };
        if self.id == 0 {
            return invalid("id", "must be >= 1");
        }
        if self.client_addr.parse::<SocketAddr>().is_err() {
            return invalid(
                "client_addr",
                "must be host:port with an IP address, e.g. 127.0.0.1:7001",
            );
        }
        if self.peer_addr.parse::<SocketAddr>().is_err() {
            return invalid(
                "peer_addr",
                "must be host:port with an IP address, e.g. 127.0.0.1:7101",
            );
        }
        if self.client_addr == self.peer_addr {
            return invalid("peer_addr", "must differ from client_addr");
        }
        if let Some(addr) = &self.metrics_addr {
            if addr.parse::<SocketAddr>().is_err() {
                return invalid(
                    "metrics_addr",
                    "must be host:port with an IP address, e.g. 127.0.0.1:7201",
                );
            }
            if *addr == self.client_addr || *addr == self.peer_addr {
                return invalid("metrics_addr", "must differ from client_addr and peer_addr");
            }
        }
        if let Some(addr) = &self.console.addr {
            if addr.parse::<SocketAddr>().is_err() {
                return invalid(
                    "console.addr",
                    "must be host:port with an IP address, e.g. 127.0.0.1:7301",
                );
            }
            let taken = [
                Some(&self.client_addr),
                Some(&self.peer_addr),
                self.metrics_addr.as_ref(),
            ];
            if taken.contains(&Some(addr)) {
                return invalid(
                    "console.addr",
                    "must differ from client_addr, peer_addr and metrics_addr",
                );
            }
        }
        if self.data_dir.as_os_str().is_empty() {
            return invalid("data_dir", "must not be empty");
        }
        let mut ids: Vec<u64> = self.initial_members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return invalid("initial_members", "ids must be unique");
        }
        if ids.contains(&0) {
            return invalid("initial_members", "ids must be >= 1");
        }
        if !self.initial_members.is_empty() && !ids.contains(&self.id) {
            return invalid(
                "initial_members",
                "must include this node's id (or be empty for a node joining later)",
            );
        }
        let r = &self.raft;
        if r.heartbeat_interval_ms == 0 || r.election_timeout_ms_min <= r.heartbeat_interval_ms {
            return invalid(
                "raft.election_timeout_ms_min",
                "must be greater than raft.heartbeat_interval_ms (> 0)",
            );
        }
        // Twice the lease (max / 2, rounded down) is the top of the wait.
        if 2 * (r.election_timeout_ms_max / 2) <= r.election_timeout_ms_min {
            return invalid(
                "raft.election_timeout_ms_max",
                "must be greater than raft.election_timeout_ms_min (by 2 if odd: half of max, \
                 rounded down, is a leader lease, and the wait tops out at twice it)",
            );
        }
        // Half of max is openraft's leader lease, and min less that half the bottom of its
        // random timeout, which openraft wants above the heartbeat interval
        // (`raft::types::openraft_election_timeouts`).
        let lease = r.election_timeout_ms_max / 2;
        if r.election_timeout_ms_min <= lease.saturating_add(r.heartbeat_interval_ms) {
            return invalid(
                "raft.election_timeout_ms_min",
                "must be greater than raft.election_timeout_ms_max / 2 + raft.heartbeat_interval_ms \
                 (the wait includes a leader lease of half the max; what is left must outlast a \
                 heartbeat)",
            );
        }
        if r.snapshot_logs_since_last == 0 {
            return invalid("raft.snapshot_logs_since_last", "must be >= 1");
        }
        if r.rpc_timeout_ms == 0 || r.payload_entries_max == 0 {
            return invalid(
                "raft.rpc_timeout_ms",
                "rpc_timeout_ms and payload_entries_max must be >= 1",
            );
        }
        let l = &self.limits;
        if l.object_bytes_max == 0 || l.request_bytes_max < l.object_bytes_max {
            return invalid(
                "limits.request_bytes_max",
                "must be >= limits.object_bytes_max (> 0)",
            );
        }
        if l.object_bytes_max > crate::state::OBJECT_BYTES_MAX {
            return invalid(
                "limits.object_bytes_max",
                &format!(
                    "must be <= {} (the state machine's own ceiling)",
                    crate::state::OBJECT_BYTES_MAX
                ),
            );
        }
        if l.txn_ops_max > crate::state::TXN_OPS_MAX {
            return invalid(
                "limits.txn_ops_max",
                &format!(
                    "must be <= {} (the state machine's own ceiling)",
                    crate::state::TXN_OPS_MAX
                ),
            );
        }
        if l.list_page_max == 0 || l.list_page_default == 0 || l.list_page_default > l.list_page_max
        {
            return invalid(
                "limits.list_page_default",
                "must be between 1 and limits.list_page_max",
            );
        }
        if l.txn_ops_max == 0
            || l.watchers_max == 0
            || l.watch_buffer == 0
            || l.watch_history == 0
            || l.watch_history_bytes == 0
        {
            return invalid(
                "limits",
                "txn_ops_max, watchers_max, watch_buffer, watch_history and watch_history_bytes must be >= 1",
            );
        }
        if l.bookmark_interval_ms == 0 || l.pending_proposals_max == 0 {
            return invalid(
                "limits",
                "bookmark_interval_ms and pending_proposals_max must be >= 1",
            );
        }
        if l.client_requests_per_second == 0 {
            return invalid("limits.client_requests_per_second", "must be >= 1");
        }
        if l.client_request_burst == 0 {
            return invalid("limits.client_request_burst", "must be >= 1");
        }
        if l.client_calls_max == 0 {
            return invalid("limits.client_calls_max", "must be >= 1");
        }
        if l.quota_bytes < QUOTA_BYTES_MIN {
            return invalid(
                "limits.quota_bytes",
                &format!("must be >= {QUOTA_BYTES_MIN} (1 MiB)"),
            );
        }
        if l.space_check_interval_ms == 0 {
            return invalid("limits.space_check_interval_ms", "must be >= 1");
        }
        if l.command_bytes_max < l.request_bytes_max {
            return invalid(
                "limits.command_bytes_max",
                &format!(
                    "must be >= limits.request_bytes_max = {} (a legal request must fit)",
                    l.request_bytes_max
                ),
            );
        }
        let floor = crate::raft::message_size::peer_message_bytes_floor(
            l.command_bytes_max,
            r.payload_entries_max,
            l.list_page_max,
        );
        if l.peer_message_bytes_max < floor {
            return invalid(
                "limits.peer_message_bytes_max",
                &format!(
                    "must be >= {floor}: raft.payload_entries_max = {} entries of up to \
                     limits.command_bytes_max = {} bytes, or limits.list_page_max = {} objects, \
                     with their framing (a smaller limit would stop replication)",
                    r.payload_entries_max, l.command_bytes_max, l.list_page_max
                ),
            );
        }
        self.operations().validate()?;
        self.status.validate()?;
        self.etcd.validate()?;
        self.tls.validate()?;
        if self.console.streams_max == 0 {
            return invalid("console.streams_max", "must be >= 1");
        }
        if !(50..=60_000).contains(&self.console.update_interval_ms) {
            return invalid("console.update_interval_ms", "must be between 50 and 60000");
        }
        if self.console.page_rows == 0 {
            return invalid("console.page_rows", "must be >= 1");
        }
        if self.time.clock_offset_ms_max == 0 {
            return invalid("time.clock_offset_ms_max", "must be >= 1");
        }
        if self.time.clock_probe_interval_ms == 0 {
            return invalid("time.clock_probe_interval_ms", "must be >= 1");
        }
        if !(1..=1_000).contains(&self.time.shown_slew_ms_per_s) {
            return invalid(
                "time.shown_slew_ms_per_s",
                "must be 1..=1000 (the shown time never runs backwards)",
            );
        }
        // A leader that caught up in a quiet spell counts behind by up to a checkpoint interval:
        // within half the election timeout, an end waits for that or for an election, never
        // both past bound 2 (README "Time").
        let checkpoint_max = self.raft.election_timeout_ms_max / 2;
        if self.time.checkpoint_interval_ms == 0
            || self.time.checkpoint_interval_ms > checkpoint_max
        {
            return invalid(
                "time.checkpoint_interval_ms",
                "must be >= 1 and at most raft.election_timeout_ms_max / 2 (a leader that caught \
                 up in a quiet spell counts behind by up to this; it must stay within the \
                 election timeout of the TTL bound)",
            );
        }
        if self.pools.reap_interval_ms == 0 {
            return invalid("pools.reap_interval_ms", "must be >= 1");
        }
        if crate::state::objects::validate::validate_label_value(
            "pools.reset_state",
            &self.pools.reset_state,
        )
        .is_err()
            || self.pools.reset_state.is_empty()
        {
            return invalid(
                "pools.reset_state",
                "must be a label value: 1-63 letters, digits, '-', '_' or '.'",
            );
        }
        if let Err(crate::state::Rejection::Invalid { rule, .. }) =
            crate::state::operations::check_verb("pools.construct_verb", &self.pools.construct_verb)
        {
            return invalid("pools.construct_verb", &rule);
        }
        Ok(())
    }
}

impl OperationsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, rule: String| Err(ConfigError::Invalid { field, rule });
        let positive = [
            ("operations.active_max", self.active_max),
            ("operations.per_target_max", self.per_target_max),
            ("operations.params_bytes_max", self.params_bytes_max),
            ("operations.result_bytes_max", self.result_bytes_max),
            ("operations.attempts_max", self.attempts_max),
            ("operations.workers_max", self.workers_max),
            ("operations.handles_max", self.handles_max),
            ("operations.capacity_max", self.capacity_max),
            ("operations.schedule_batch_max", self.schedule_batch_max),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return invalid(field, "must be >= 1".to_string());
        }
        if self.schedule_interval_ms == 0 || self.sweep_interval_ms == 0 {
            return invalid(
                "operations.schedule_interval_ms",
                "schedule_interval_ms and sweep_interval_ms must be >= 1".to_string(),
            );
        }
        if self.deadline_ms_max == 0 {
            return invalid("operations.deadline_ms_max", "must be >= 1".to_string());
        }
        if self.attempts_default == 0 || self.attempts_default > self.attempts_max {
            return invalid(
                "operations.attempts_default",
                format!(
                    "must be 1..=operations.attempts_max = {}",
                    self.attempts_max
                ),
            );
        }
        if self.deadline_ms_default > self.deadline_ms_max {
            return invalid(
                "operations.deadline_ms_default",
                format!(
                    "must be 0 (none) or at most operations.deadline_ms_max = {}",
                    self.deadline_ms_max
                ),
            );
        }
        let lists = [
            ("operations.read_lock_verbs", &self.read_lock_verbs),
            ("operations.delete_verbs", &self.delete_verbs),
        ];
        for (field, verbs) in lists {
            for verb in verbs {
                if let Err(r) = crate::state::operations::check_verb(field, verb) {
                    return invalid(field, r.to_string());
                }
            }
        }
        for (verb, &deadline) in &self.verb_deadline_ms_default {
            let field = "operations.verb_deadline_ms_default";
            if let Err(r) = crate::state::operations::check_verb(field, verb) {
                return invalid(field, r.to_string());
            }
            if deadline > self.deadline_ms_max {
                return invalid(
                    field,
                    format!(
                        "{verb} = {deadline}: must be 0 (none) or at most \
                         operations.deadline_ms_max = {}",
                        self.deadline_ms_max
                    ),
                );
            }
        }
        if !self.delete_verbs.contains(&self.decommission_verb) {
            return invalid(
                "operations.decommission_verb",
                format!(
                    "must be one of operations.delete_verbs = {:?} (got {:?}), so a \
                     decommission deletes the reservation",
                    self.delete_verbs, self.decommission_verb
                ),
            );
        }
        Ok(())
    }
}
