//! Config keys renamed to the naming rule (see src/config.rs): a file may still use an old name,
//! which is read as the new one with a warning naming it; a file that gives both is refused.
//!
//! Called by `Config::from_toml` on the parsed file, before the typed structs see it (they
//! know only the new names and refuse unknown keys).

/// `(old dotted key, new dotted key)`, grouped by section.
pub const RENAMED: &[(&str, &str)] = &[
    (
        "raft.election_timeout_min_ms",
        "raft.election_timeout_ms_min",
    ),
    (
        "raft.election_timeout_max_ms",
        "raft.election_timeout_ms_max",
    ),
    (
        "raft.max_in_snapshot_log_to_keep",
        "raft.log_behind_snapshot_max",
    ),
    ("raft.max_payload_entries", "raft.payload_entries_max"),
    ("limits.max_object_bytes", "limits.object_bytes_max"),
    ("limits.max_request_bytes", "limits.request_bytes_max"),
    ("limits.max_list_page", "limits.list_page_max"),
    ("limits.default_list_page", "limits.list_page_default"),
    ("limits.max_txn_ops", "limits.txn_ops_max"),
    ("limits.max_watchers", "limits.watchers_max"),
    (
        "limits.max_pending_proposals",
        "limits.pending_proposals_max",
    ),
    ("operations.max_attempts", "operations.attempts_default"),
    ("operations.deadline_ms", "operations.deadline_ms_default"),
    (
        "operations.verb_deadline_ms",
        "operations.verb_deadline_ms_default",
    ),
];

/// An old key found in a config file and read as its new name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldName {
    pub old: &'static str,
    pub new: &'static str,
}

impl std::fmt::Display for OldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "config key {} is an old name, read as {}: write {} instead",
            self.old, self.new, self.new
        )
    }
}

/// Both names of one option are set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BothNames {
    pub old: &'static str,
    pub new: &'static str,
}

/// Moves every old key of `file` to its new name and lists them. Refuses a file that sets both
/// names of one option: which one was meant cannot be known.
pub fn rename_old_keys(file: &mut toml::Table) -> Result<Vec<OldName>, BothNames> {
    let mut found = Vec::new();
    for &(old, new) in RENAMED {
        let (Some((section, old_key)), Some((_, new_key))) =
            (old.split_once('.'), new.split_once('.'))
        else {
            continue;
        };
        let Some(toml::Value::Table(table)) = file.get_mut(section) else {
            continue;
        };
        let Some(value) = table.remove(old_key) else {
            continue;
        };
        if table.contains_key(new_key) {
            return Err(BothNames { old, new });
        }
        table.insert(new_key.to_string(), value);
        found.push(OldName { old, new });
    }
    Ok(found)
}
