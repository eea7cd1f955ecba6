//! Input rules for lock commands: names, holder ids, ttl, wait, details and their limits. Run in
//! apply on every replica (servers may run them early too); each error names the field and the
//! rule. Loosening a rule changes how old entries replay: never tighten one silently.

use super::{
    LockLimits, LOCK_DELAY_MS_MAX, LOCK_HOLDER_CHARS_MAX, LOCK_NAME_CHARS_MAX,
    LOCK_SWEEP_NAMES_MAX, LOCK_TTL_MS_MAX, LOCK_WAIT_MS_MAX,
};
use crate::objects::validate::json_len;
use crate::rejection::Rejection;

fn invalid(field: &str, rule: String) -> Rejection {
    Rejection::Invalid {
        field: field.to_string(),
        rule,
    }
}

/// A limit breach; `rule` names the limit by its config key and says the numbers.
pub(super) fn too_large(field: &str, rule: String) -> Rejection {
    Rejection::TooLarge {
        field: field.to_string(),
        rule,
    }
}

/// A count at its limit: "lock d already has 4 holders, the most locks.holders_max = 4
/// allows".
pub(super) fn at_limit(field: &str, what: String, limit: &str, max: u32) -> Rejection {
    too_large(field, format!("{what}, the most {limit} = {max} allows"))
}

/// 1..=253 characters of `[A-Za-z0-9._:@/-]`.
pub(crate) fn check_name(name: &str) -> Result<(), Rejection> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._:@/-".contains(&b);
    if name.is_empty() {
        Err(invalid("name", "required".to_string()))
    } else if name.len() > LOCK_NAME_CHARS_MAX {
        Err(invalid(
            "name",
            format!("must be at most {LOCK_NAME_CHARS_MAX} characters"),
        ))
    } else if !name.bytes().all(allowed) {
        Err(invalid(
            "name",
            format!(
                "must consist of letters, digits, '.', '_', ':', '@', '/' or '-' (got {name:?})"
            ),
        ))
    } else {
        Ok(())
    }
}

/// 1..=253 printable ASCII characters, no whitespace.
pub(super) fn check_holder(holder: &str) -> Result<(), Rejection> {
    if holder.is_empty() {
        Err(invalid("holder", "required".to_string()))
    } else if holder.len() > LOCK_HOLDER_CHARS_MAX {
        Err(invalid(
            "holder",
            format!("must be at most {LOCK_HOLDER_CHARS_MAX} characters"),
        ))
    } else if !holder.bytes().all(|b| b.is_ascii_graphic()) {
        Err(invalid(
            "holder",
            format!("must be printable ASCII without whitespace (got {holder:?})"),
        ))
    } else {
        Ok(())
    }
}

/// `None`, or 1..=`LOCK_TTL_MS_MAX`.
pub(super) fn check_ttl(ttl_ms: Option<u64>) -> Result<(), Rejection> {
    match ttl_ms {
        Some(ttl) if ttl == 0 || ttl > LOCK_TTL_MS_MAX => Err(invalid(
            "ttl_ms",
            format!(
                "must be 1..={LOCK_TTL_MS_MAX} ms (24 h), or absent to hold until released \
                 (got {ttl})"
            ),
        )),
        _ => Ok(()),
    }
}

/// At most `LOCK_WAIT_MS_MAX`.
pub(super) fn check_wait(wait_ms: u64) -> Result<(), Rejection> {
    if wait_ms > LOCK_WAIT_MS_MAX {
        return Err(invalid(
            "wait_ms",
            format!("must be at most {LOCK_WAIT_MS_MAX} ms (1 h) (got {wait_ms})"),
        ));
    }
    Ok(())
}

/// A JSON object or null, and (unless null) at most `locks.details_bytes_max` bytes as JSON.
pub(super) fn check_details(
    details: &serde_json::Value,
    limits: &LockLimits,
) -> Result<(), Rejection> {
    if details.is_null() {
        return Ok(());
    }
    if !details.is_object() {
        return Err(invalid(
            "details",
            "must be a JSON object (lockedResourceDetails) or null".to_string(),
        ));
    }
    let bytes = json_len(details);
    if bytes > usize_of(limits.details_bytes_max) {
        let max = limits.details_bytes_max;
        return Err(too_large(
            "details",
            format!("{bytes} bytes as JSON, more than the limit locks.details_bytes_max = {max}"),
        ));
    }
    Ok(())
}

/// A sweep's own parameters (its names are not checked: unknown or malformed ones are skipped).
pub(super) fn check_sweep(names: &[String], lock_delay_ms: u64) -> Result<(), Rejection> {
    if names.len() > LOCK_SWEEP_NAMES_MAX {
        return Err(too_large(
            "names",
            format!(
                "{} names, more than the limit LOCK_SWEEP_NAMES_MAX = {LOCK_SWEEP_NAMES_MAX}",
                names.len()
            ),
        ));
    }
    if lock_delay_ms > LOCK_DELAY_MS_MAX {
        return Err(invalid(
            "lock_delay_ms",
            format!("must be at most {LOCK_DELAY_MS_MAX} ms (1 h) (got {lock_delay_ms})"),
        ));
    }
    Ok(())
}

/// A `u32` limit as a length bound (lossless on every platform steward builds for).
pub(super) fn usize_of(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A length as the `u32` the wire uses (lengths here are bounded by `u32` limits).
pub(super) fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
