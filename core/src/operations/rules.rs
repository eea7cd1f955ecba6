//! Input rules for the op commands: worker ids, handles, capacity and ttl, targets, verbs,
//! params, policies, idempotency keys, reports and sweeps, with their limits. Run in apply on
//! every replica (servers may run them early too); each error names the field and the rule.
//! Loosening a rule changes how old entries replay: never tighten one silently.

use super::{
    usize_of, Handle, OpLimits, OpPolicy, OperationId, OP_IDEMPOTENCY_KEY_CHARS_MAX,
    OP_SWEEP_ITEMS_MAX, OP_VERB_CHARS_MAX, WORKER_ID_CHARS_MAX, WORKER_TTL_MS_MAX,
};
use crate::command::WorkerReport;
use crate::locks::check_name;
use crate::objects::resource::ObjectKey;
use crate::objects::validate::{json_len, validate_key, validate_kind};
use crate::rejection::Rejection;

fn invalid(field: &str, rule: String) -> Rejection {
    Rejection::Invalid {
        field: field.to_string(),
        rule,
    }
}

/// A count at its limit: "8 workers are registered and w9 would be new, the most
/// operations.workers_max = 8 allows".
pub(crate) fn at_limit(field: &str, what: String, limit: &str, max: u32) -> Rejection {
    Rejection::TooLarge {
        field: field.to_string(),
        rule: format!("{what}, the most {limit} = {max} allows"),
    }
}

/// A size over its limit: "params: 70000 bytes as JSON, more than the limit
/// operations.params_bytes_max = 65536".
fn over(field: &str, what: String, limit: &str, max: u32) -> Rejection {
    Rejection::TooLarge {
        field: field.to_string(),
        rule: format!("{what}, more than the limit {limit} = {max}"),
    }
}

/// A `field` rule error of a nested value, re-rooted under `prefix` (`kind` -> `target.kind`).
pub(crate) fn under(prefix: &str, rejection: Rejection) -> Rejection {
    match rejection {
        Rejection::Invalid { field, rule } => invalid(&format!("{prefix}.{field}"), rule),
        other => other,
    }
}

/// 1..=`WORKER_ID_CHARS_MAX` characters of `[A-Za-z0-9._:@/-]`.
pub(crate) fn check_worker(worker: &str) -> Result<(), Rejection> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._:@/-".contains(&b);
    if worker.is_empty() {
        Err(invalid("worker", "required".to_string()))
    } else if worker.len() > WORKER_ID_CHARS_MAX {
        Err(invalid(
            "worker",
            format!("must be at most {WORKER_ID_CHARS_MAX} characters"),
        ))
    } else if !worker.bytes().all(allowed) {
        Err(invalid(
            "worker",
            format!(
                "must consist of letters, digits, '.', '_', ':', '@', '/' or '-' (got {worker:?})"
            ),
        ))
    } else {
        Ok(())
    }
}

/// 1..=`OP_VERB_CHARS_MAX` characters of `[A-Za-z0-9_-]`, starting with a letter.
pub fn check_verb(field: &str, verb: &str) -> Result<(), Rejection> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    let starts = verb.bytes().next().is_some_and(|b| b.is_ascii_alphabetic());
    if verb.is_empty() {
        Err(invalid(field, "required".to_string()))
    } else if verb.len() > OP_VERB_CHARS_MAX || !starts || !verb.bytes().all(allowed) {
        Err(invalid(
            field,
            format!(
                "must be a letter then letters, digits, '_' or '-', at most \
                 {OP_VERB_CHARS_MAX} characters (got {verb:?})"
            ),
        ))
    } else {
        Ok(())
    }
}

/// 1..=`limits.handles_max` handles, each a valid kind and verb, none twice.
pub(crate) fn check_handles(handles: &[Handle], limits: &OpLimits) -> Result<(), Rejection> {
    if handles.is_empty() {
        return Err(invalid(
            "handles",
            "at least one Kind:verb the worker runs".to_string(),
        ));
    }
    if handles.len() > usize_of(limits.handles_max) {
        let what = format!("{} handles", handles.len());
        let max = limits.handles_max;
        return Err(over("handles", what, "operations.handles_max", max));
    }
    for (i, handle) in handles.iter().enumerate() {
        validate_kind(&handle.kind).map_err(|r| under(&format!("handles[{i}]"), r))?;
        check_verb(&format!("handles[{i}].verb"), &handle.verb)?;
        if handles[..i].contains(handle) {
            return Err(invalid(
                &format!("handles[{i}]"),
                format!("{handle} is listed twice"),
            ));
        }
    }
    Ok(())
}

/// Capacity 1..=`limits.capacity_max`; ttl 1..=`WORKER_TTL_MS_MAX`.
pub(crate) fn check_worker_terms(
    capacity: u32,
    ttl_ms: u64,
    limits: &OpLimits,
) -> Result<(), Rejection> {
    if capacity == 0 {
        return Err(invalid(
            "capacity",
            "must be at least 1 (operations run at once)".to_string(),
        ));
    }
    if capacity > limits.capacity_max {
        let max = limits.capacity_max;
        return Err(over(
            "capacity",
            format!("{capacity}"),
            "operations.capacity_max",
            max,
        ));
    }
    if ttl_ms == 0 || ttl_ms > WORKER_TTL_MS_MAX {
        return Err(invalid(
            "ttl_ms",
            format!("must be 1..={WORKER_TTL_MS_MAX} ms (1 h) (got {ttl_ms})"),
        ));
    }
    Ok(())
}

/// A valid object key, its errors under `target.`.
pub(crate) fn check_target(target: &ObjectKey) -> Result<(), Rejection> {
    validate_key(target).map_err(|r| under("target", r))
}

/// A JSON object or null, at most `limits.params_bytes_max` bytes as JSON.
pub(crate) fn check_params(params: &serde_json::Value, limits: &OpLimits) -> Result<(), Rejection> {
    if !(params.is_object() || params.is_null()) {
        return Err(invalid(
            "params",
            "must be a JSON object or null".to_string(),
        ));
    }
    let bytes = json_len(params);
    if bytes > usize_of(limits.params_bytes_max) {
        let what = format!("{bytes} bytes as JSON");
        let max = limits.params_bytes_max;
        return Err(over("params", what, "operations.params_bytes_max", max));
    }
    Ok(())
}

/// Attempts 1..=`limits.attempts_max`, a deadline 1..=`limits.deadline_ms_max` if any, a valid
/// lock name.
pub(crate) fn check_policy(policy: &OpPolicy, limits: &OpLimits) -> Result<(), Rejection> {
    let attempts = policy.max_attempts;
    if attempts == 0 || attempts > limits.attempts_max {
        return Err(invalid(
            "policy.max_attempts",
            format!(
                "must be 1..=operations.attempts_max = {} (got {attempts})",
                limits.attempts_max
            ),
        ));
    }
    if let Some(deadline) = policy.deadline_ms {
        if deadline == 0 || deadline > limits.deadline_ms_max {
            return Err(invalid(
                "policy.deadline_ms",
                format!(
                    "must be 1..=operations.deadline_ms_max = {} ms, or absent for none \
                     (got {deadline})",
                    limits.deadline_ms_max
                ),
            ));
        }
    }
    if let Some(lock) = &policy.lock {
        check_name(&lock.name).map_err(|r| under("policy.lock", r))?;
    }
    Ok(())
}

/// 1..=`OP_IDEMPOTENCY_KEY_CHARS_MAX` printable ASCII characters, no whitespace.
pub(crate) fn check_idempotency_key(key: &str) -> Result<(), Rejection> {
    if key.is_empty() || key.len() > OP_IDEMPOTENCY_KEY_CHARS_MAX {
        return Err(invalid(
            "idempotency_key",
            format!("must be 1..={OP_IDEMPOTENCY_KEY_CHARS_MAX} characters, or absent"),
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            "idempotency_key",
            format!("must be printable ASCII without whitespace (got {key:?})"),
        ));
    }
    Ok(())
}

/// A response (compact JSON) or error of at most `limits.result_bytes_max` bytes.
pub(crate) fn check_report(report: &WorkerReport, limits: &OpLimits) -> Result<(), Rejection> {
    let (field, bytes) = match report {
        WorkerReport::Succeeded { response } => ("report.response", json_len(response)),
        WorkerReport::Failed { error } => ("report.error", error.len()),
        WorkerReport::Started | WorkerReport::Aborted => return Ok(()),
    };
    if bytes > usize_of(limits.result_bytes_max) {
        let max = limits.result_bytes_max;
        return Err(over(
            field,
            format!("{bytes} bytes"),
            "operations.result_bytes_max",
            max,
        ));
    }
    Ok(())
}

/// At most `OP_SWEEP_ITEMS_MAX` workers and as many operations (unknown ones are skipped).
pub(crate) fn check_sweep(workers: &[String], operations: &[OperationId]) -> Result<(), Rejection> {
    for (field, n) in [("workers", workers.len()), ("operations", operations.len())] {
        if n > OP_SWEEP_ITEMS_MAX {
            return Err(Rejection::TooLarge {
                field: field.to_string(),
                rule: format!(
                    "{n} {field}, more than the limit OP_SWEEP_ITEMS_MAX = {OP_SWEEP_ITEMS_MAX}"
                ),
            });
        }
    }
    Ok(())
}
