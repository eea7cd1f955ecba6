//! `Proposal`, one log entry's payload, and the one encoding every copy of it shares.
//!
//! A write is encoded several times on its way: into the leader's log, into the AppendEntries
//! to each follower, into each follower's log. The text is the same each time, so the first
//! serialization keeps it and the others copy it: the leader encodes a proposal once (its log
//! append comes first), and a follower encodes none, keeping the text it received. Entries read
//! back from the log keep theirs too. The bytes are the ones the fields would serialize to
//! (`serde_json`, compact), so nothing on disk or on the wire changes.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::command::Command;
use crate::format::AnyCommand;

/// The payload of one replicated log entry. The leader stamps `time_ms` when it proposes, so every
/// replica applies the same time (see `State::time_ms`).
///
/// Serialized with `serde_json` only (the log, peer messages): its text is written once and
/// then copied verbatim (module doc), which only `serde_json` does with a `RawValue`. Build it
/// with [`Proposal::new`] and do not change it once serialized: the kept text would no longer
/// say what the fields say.
#[derive(Clone)]
pub struct Proposal {
    /// Cluster time in ms, as the leader of `term` counts it on its monotonic clock (README
    /// "Time"); 0 when it had none yet (a leader that has not applied an entry of its term).
    pub time_ms: u64,
    /// The term whose leader measured `time_ms`. Apply moves time, and expires anything, only
    /// when it is the entry's own term (`ApplyContext::of_proposal`). Absent in entries written
    /// before issue 24, whose `time_ms` is the leader's wall clock: taken as they always were.
    pub term: Option<u64>,
    /// The wall-clock time the leader shows, for display only (creationTimestamp and the like;
    /// README "Time", promise 5): the middle of the nodes' wall clocks, slewed when it steps
    /// (server/time/wall.rs). Nothing that expires reads it. Absent in older entries and when
    /// the leader has no reading.
    pub wall_ms: Option<u64>,
    /// What to do; shared by the clones (the log's cached entry and the copies of it handed to
    /// replication and apply), as the text is.
    pub command: Arc<Command>,
    /// The text of the fields, once serialized or as read; shared by the clones (the log's
    /// cached entry, the entries handed to replication and apply).
    encoded: Arc<OnceLock<Box<RawValue>>>,
}

/// The fields as they are written: the log format of every release (a field added later is
/// optional and skipped when absent, so older entries still parse).
#[derive(Serialize)]
struct Fields<'a> {
    time_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    term: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wall_ms: Option<u64>,
    command: &'a Command,
}

/// The fields as they are read, in either log format.
#[derive(Deserialize)]
struct OwnedFields {
    time_ms: u64,
    #[serde(default)]
    term: Option<u64>,
    #[serde(default)]
    wall_ms: Option<u64>,
    command: AnyCommand,
}

impl Proposal {
    pub fn new(time_ms: u64, term: Option<u64>, wall_ms: Option<u64>, command: Command) -> Self {
        Proposal {
            time_ms,
            term,
            wall_ms,
            command: Arc::new(command),
            encoded: Arc::default(),
        }
    }

    /// The proposal as `serde_json` text: written the first time it is asked for, then the same
    /// text every time (and in every clone).
    pub fn json(&self) -> Result<&RawValue, serde_json::Error> {
        if let Some(text) = self.encoded.get() {
            return Ok(text);
        }
        let text = serde_json::value::to_raw_value(&Fields {
            time_ms: self.time_ms,
            term: self.term,
            wall_ms: self.wall_ms,
            command: &self.command,
        })?;
        // Another clone may have written it meanwhile: the same text, from the same fields.
        Ok(self.encoded.get_or_init(|| text))
    }
}

impl Serialize for Proposal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json().map_err(S::Error::custom)?.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Proposal {
    /// Keeps the text it was read from, so writing it again (a follower's log) copies it;
    /// unless it is format 1's, which is written again in format 2 (`format.rs`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Box::<RawValue>::deserialize(deserializer)?;
        let fields: OwnedFields = serde_json::from_str(text.get()).map_err(D::Error::custom)?;
        let encoded = if fields.command.is_format_1() {
            OnceLock::new()
        } else {
            OnceLock::from(text)
        };
        Ok(Proposal {
            time_ms: fields.time_ms,
            term: fields.term,
            wall_ms: fields.wall_ms,
            command: Arc::new(fields.command.into()),
            encoded: Arc::new(encoded),
        })
    }
}

impl fmt::Debug for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proposal")
            .field("time_ms", &self.time_ms)
            .field("term", &self.term)
            .field("wall_ms", &self.wall_ms)
            .field("command", &self.command)
            .finish()
    }
}

impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @{}", self.command, self.time_ms)
    }
}

#[cfg(test)]
mod tests;
