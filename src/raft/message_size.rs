//! How large a legal peer message can be, so `limits.peer_message_bytes_max` can refuse larger
//! ones without ever refusing one that replication needs.
//!
//! Read by `Config::validate` (the floor a configured limit must reach), by the `Limits` default
//! (which is the floor for the default client limits), and by the peer transport (network.rs,
//! forward.rs), which refuses a message over the limit before sending it.
//!
//! The trap this avoids: openraft sends up to `raft.payload_entries_max` entries per
//! AppendEntries and cannot split a request by bytes. A limit below what one legal request needs
//! would be refused on every retry, and the follower would never catch up. So the floor is the
//! largest of what each kind of message can legally carry:
//!
//! - AppendEntries: `payload_entries_max` x (`command_bytes_max` + `ENTRY_FRAMING_BYTES`) +
//!   `MESSAGE_FRAMING_BYTES`. Every normal entry's command passed the leader's admission
//!   (`Node::admit`), which refuses a command whose JSON exceeds `limits.command_bytes_max`;
//!   `ENTRY_FRAMING_BYTES` covers the log id, the leader's time stamp and the `Guarded` wrapper
//!   (~200 bytes as JSON). Membership entries are not commands: one member costs ~150 bytes, so
//!   a membership entry stays under `command_bytes_max` (5 MiB by default) up to ~30 000 members.
//! - A forwarded batch: commands totalling at most `FORWARD_BATCH_BYTES_MAX`, or one admitted
//!   command alone (at most `command_bytes_max`), with a comma each and the brackets.
//! - A snapshot chunk: `SNAPSHOT_CHUNK_BYTES` of body, the first one also the header (the vote
//!   and the snapshot's meta, a membership), within `MESSAGE_FRAMING_BYTES`.
//! - A client API list answer (the same limit bounds the client API's encoding):
//!   `list_page_max` objects of at most `2 x OBJECT_BYTES_MAX` each (an operation's result may
//!   take an object past `OBJECT_BYTES_MAX`, by at most that much again).
//!
//! With the default limits: 512 x (5 MiB + 1 KiB) + 64 KiB = 2 560.6 MiB, the AppendEntries term;
//! the list term is 1 000 x 3 MiB = 3 000 MiB, so the default is 3 000 MiB + 64 KiB.

use crate::server::forward::{FORWARD_BATCH_BYTES_MAX, FORWARD_BATCH_COMMANDS_MAX};
use crate::state::OBJECT_BYTES_MAX;

/// Size of one snapshot chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// What a log entry adds to its command as JSON: log id, time stamp, payload tags, `Guarded`.
pub const ENTRY_FRAMING_BYTES: usize = 1024;

/// What one message adds to what it carries: vote, previous log id, commit index, a snapshot
/// header's meta, protobuf and JSON punctuation.
pub const MESSAGE_FRAMING_BYTES: usize = 64 * 1024;

/// The least `limits.peer_message_bytes_max` may be (see the module comment for each term).
pub fn peer_message_bytes_floor(
    command_bytes_max: usize,
    payload_entries_max: u64,
    list_page_max: u32,
) -> usize {
    let entries = usize::try_from(payload_entries_max).unwrap_or(usize::MAX);
    let append = entries.saturating_mul(command_bytes_max.saturating_add(ENTRY_FRAMING_BYTES));
    let forward = FORWARD_BATCH_BYTES_MAX
        .max(command_bytes_max)
        .saturating_add(FORWARD_BATCH_COMMANDS_MAX + 2);
    let list = (list_page_max as usize).saturating_mul(2 * OBJECT_BYTES_MAX);
    append
        .max(forward)
        .max(SNAPSHOT_CHUNK_BYTES)
        .max(list)
        .saturating_add(MESSAGE_FRAMING_BYTES)
}

/// `len` bytes of `what` may be sent under `limit_bytes`, or the answer naming the limit.
pub fn check_peer_message(what: &str, len: usize, limit_bytes: usize) -> Result<(), String> {
    if len <= limit_bytes {
        return Ok(());
    }
    Err(format!(
        "{what} is {len} bytes, over limits.peer_message_bytes_max = {limit_bytes}"
    ))
}

#[cfg(test)]
mod tests;
