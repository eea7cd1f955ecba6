//! The wire conventions the server and the Rust client share beyond proto/: the metadata keys
//! and the `google.rpc.ErrorInfo` domain and reason spelling of a refusal. Defined once here:
//! the server's error table (server/errors.rs) and forwarder (server/forward.rs) set and read
//! them, the client's failover rules (client/failover.rs) read them. proto/errors.proto
//! documents them for clients in other languages.

/// Trailer naming the leader's client address (host:port). Set by the server's error table on an
/// Unavailable refusal when the node knows the leader (beside ErrorInfo metadata `leader`); read
/// by the client (`client::leader_hint`) to go to the leader next, and by a follower's forwarder
/// on the leader's answer to a forwarded write.
pub const LEADER_HINT: &str = "x-steward-leader";

/// Trailer `true` on a write refused before any leader appended it (no leader, or every leader
/// tried said it was not one): it was not applied and never will be, so a client may send it
/// again. Set by the server's error table with reasons NOT_APPLIED and AUTH_CHANGED (and by
/// `errors::not_applied`); read by a follower's forwarder on the leader's answer, and by clients
/// older than the reasons (the Rust client decides by the reason).
pub const NOT_APPLIED: &str = "x-steward-not-applied";

/// `google.rpc.ErrorInfo.domain` of every refusal steward sends. Set by the server's error table;
/// read by the client, which ignores an ErrorInfo of any other domain.
pub const ERROR_DOMAIN: &str = "steward";

/// The prefix the proto `ErrorReason` value names carry and `ErrorInfo.reason` does not
/// (`ERROR_REASON_NOT_APPLIED` is sent as `NOT_APPLIED`). Stripped by the server's error table;
/// added back by the client to find the enum value.
pub const REASON_PREFIX: &str = "ERROR_REASON_";

/// An operation state as people read it: the proto value's name without its prefix, in lower
/// case (`OPERATION_STATE_IN_PROGRESS` is `in_progress`), as the CLI prints it and the console
/// shows it; a value this build does not know is `state(N)`.
pub fn operation_state_name(state: i32) -> String {
    crate::proto::v1::OperationState::try_from(state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("OPERATION_STATE_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| format!("state({state})"))
}
