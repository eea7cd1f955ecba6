//! Histories: what the clients invoked and what came back, with monotonic times.
//!
//! Every operation is recorded once, when it completes, with both its invoke and complete
//! times (nanoseconds since the run started, from one monotonic clock). The contract for
//! classifying an outcome:
//! - `Ok`: the server acknowledged it; it took effect exactly once, between invoke and complete.
//! - `Fail`: the server refused it with a definite answer that proves it did not take effect:
//!   a reason documented "applied: no" (NOT_APPLIED, REVISION_CONFLICT, LOCK_BUSY, ...; see
//!   `outcome`), or without a reason NotFound, AlreadyExists, Aborted, InvalidArgument,
//!   FailedPrecondition, OutOfRange, ResourceExhausted.
//! - `Unknown`: anything else (OUTCOME_UNKNOWN, UNAVAILABLE, INTERNAL, NOT_SETTLED, a transport
//!   error, the client's DeadlineExceeded, a timeout): it
//!   may or may not have taken effect, at any time after invoke — possibly after complete.
//!   Reads with an unknown outcome carry no information and may be dropped by checkers.

use serde::{Deserialize, Serialize};

/// A register operation on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegisterOp {
    /// Read the value; `None` = the key does not exist.
    Read,
    /// Write `value` unconditionally (create if absent).
    Write,
    /// Compare-and-set: if the current value is `expected`, set it to `value`.
    Cas,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// One completed register operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterEvent {
    /// The client (logical process) that ran it; a process runs one op at a time.
    pub process: u64,
    pub key: String,
    pub op: RegisterOp,
    /// Write / CAS: the new value.
    pub value: Option<i64>,
    /// CAS: the value it expected.
    pub expected: Option<i64>,
    /// Read with outcome Ok: what it read (`Some(None)`: the key was absent). In JSON a present
    /// `null` is `Some(None)`; a missing field is `None`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_null"
    )]
    pub read: Option<Option<i64>>,
    pub outcome: Outcome,
    /// Nanoseconds since the run started.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// The error, for Fail / Unknown (for reports only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl RegisterEvent {
    /// The write of `value` that puts key `key` in place before the clock starts (process
    /// `u64::MAX`, at time 0): the history's first event for the key.
    pub fn initial(key: String, value: i64) -> RegisterEvent {
        RegisterEvent {
            process: u64::MAX,
            key,
            op: RegisterOp::Write,
            value: Some(value),
            expected: None,
            read: None,
            outcome: Outcome::Ok,
            invoke_ns: 0,
            complete_ns: 0,
            error: String::new(),
        }
    }
}

/// Deserializes a present field, `null` included, as `Some(..)` (serde's default maps `null` to
/// `None`, which would lose "read an absent key").
fn present_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<i64>>, D::Error> {
    Option::<i64>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_read_survives_json() {
        let mut e = RegisterEvent {
            process: 1,
            key: "r0".into(),
            op: RegisterOp::Read,
            value: None,
            expected: None,
            read: Some(None),
            outcome: Outcome::Ok,
            invoke_ns: 1,
            complete_ns: 2,
            error: String::new(),
        };
        for read in [Some(None), Some(Some(7)), None] {
            e.read = read;
            let back: RegisterEvent =
                serde_json::from_str(&serde_json::to_string(&e).expect("json")).expect("parse");
            assert_eq!(back, e);
        }
    }
}
