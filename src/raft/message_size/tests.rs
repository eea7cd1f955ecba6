//! The floor holds the largest legal AppendEntries, and a message over the limit is refused
//! with an answer naming it.

use crate::state::LockCommand;
use openraft::entry::RaftEntry;

use super::*;
use crate::raft::network::encode;
use crate::raft::types::{AppendEntriesRequest, Entry, LeaderId, LogId, Vote};
use crate::state::{Command, Proposal};

fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: u64::MAX,
            node_id: u64::MAX,
        },
        index,
    )
}

/// A guarded command whose JSON is exactly `bytes` long, the largest admission lets through.
fn command_of(bytes: usize) -> Command {
    let guarded = |holder: String| Command::Guarded {
        auth_revision: u64::MAX,
        command: Box::new(Command::Locks(LockCommand::Refresh {
            name: "n".into(),
            holder,
            token: u64::MAX,
            ttl_ms: Some(u64::MAX),
        })),
    };
    let empty = encode(&guarded(String::new())).expect("encodes").len();
    let command = guarded("h".repeat(bytes - empty));
    assert_eq!(encode(&command).expect("encodes").len(), bytes);
    command
}

#[test]
fn the_floor_holds_the_largest_legal_append_entries() {
    let (command_bytes_max, entries) = (64 * 1024, 8u64);
    let request = AppendEntriesRequest {
        vote: Vote::new_committed(u64::MAX, u64::MAX),
        prev_log_id: Some(log_id(u64::MAX)),
        entries: (0..entries)
            .map(|i| {
                let proposal = Proposal::new(u64::MAX, None, None, command_of(command_bytes_max));
                Entry::new_normal(log_id(u64::MAX - i), proposal)
            })
            .collect(),
        leader_commit: Some(log_id(u64::MAX)),
    };
    let len = encode(&request).expect("encodes").len();
    let floor = peer_message_bytes_floor(command_bytes_max, entries, 1);
    assert!(len <= floor, "{len} > {floor}");
    // Each entry's framing fits its allowance, not only the message's spare room.
    let per_entry = (len - command_bytes_max * entries as usize) / entries as usize;
    assert!(per_entry < ENTRY_FRAMING_BYTES, "{per_entry}");
    check_peer_message("append entries", len, floor).expect("the largest legal message passes");
}

#[test]
fn a_message_over_the_limit_is_refused_naming_the_limit() {
    check_peer_message("a forwarded batch", 100, 100).expect("at the limit");
    let refused = check_peer_message("a forwarded batch", 101, 100).expect_err("over");
    assert_eq!(
        refused,
        "a forwarded batch is 101 bytes, over limits.peer_message_bytes_max = 100"
    );
}

#[test]
fn the_default_is_the_floor_of_the_default_limits() {
    let config = crate::config::Limits::default();
    let floor = peer_message_bytes_floor(
        config.command_bytes_max,
        crate::config::RaftConfig::default().payload_entries_max,
        config.list_page_max,
    );
    assert_eq!(config.peer_message_bytes_max, floor);
    // The module comment's figure: the list term, 3 000 MiB, plus the framing.
    assert_eq!(floor, 3000 * 1024 * 1024 + MESSAGE_FRAMING_BYTES);
}
