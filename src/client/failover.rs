//! Endpoint parsing and the failover rules: which failures may be repeated at another node
//! without risking a double effect, and where the leader is said to be.

use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::proto::v1::ErrorReason;
use crate::wire::{ERROR_DOMAIN, LEADER_HINT, REASON_PREFIX};

/// The reason a steward node gave for refusing a request (proto/errors.proto): the
/// `ErrorInfo.reason` of the status's details, domain "steward". `None` for a status without
/// one: made on this side (a transport error, the client's own deadline), by tonic itself, or
/// by a node older than the reasons. Decide by this, never by the message text.
pub fn reason(status: &Status) -> Option<ErrorReason> {
    let info = status.get_details_error_info()?;
    if info.domain != ERROR_DOMAIN {
        return None;
    }
    ErrorReason::from_str_name(&format!("{REASON_PREFIX}{}", info.reason))
        .filter(|r| *r != ErrorReason::Unspecified)
}

/// The least wait before sending the request again that the server asked for (RetryInfo).
pub fn retry_delay(status: &Status) -> Option<std::time::Duration> {
    status.get_details_retry_info()?.retry_delay
}

/// Whether a failed attempt may be repeated at another endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Retry {
    /// Reads: repeating cannot change anything. An attempt may take only part of the deadline
    /// (`Client::read_attempt_budget`), so a node that takes the connection but never answers
    /// (stopped with SIGSTOP, wedged) leaves the rest of it to the others.
    Read,
    /// Reads whose set-up may take long on a healthy node (a snapshot is taken before it
    /// streams): repeated elsewhere like reads, but one attempt may use the whole deadline.
    LongRead,
    /// Writes: only when the request provably never left this process, or the server said it
    /// was refused before any leader appended it (reason NOT_APPLIED: no leader, or none would
    /// take it, as during an election; or AUTH_CHANGED).
    Write,
}

/// The leader's client address a node put in the `x-steward-leader` metadata, if any.
pub fn leader_hint(status: &Status) -> Option<String> {
    let value = status.metadata().get(LEADER_HINT)?.to_str().ok()?;
    (!value.is_empty()).then(|| value.to_string())
}

/// Whether a failed attempt may be repeated elsewhere without risking a double effect.
pub(super) fn may_retry(retry: Retry, status: &Status) -> bool {
    match retry {
        // DeadlineExceeded: one attempt ran out of its share of the deadline (a silent node).
        Retry::Read | Retry::LongRead => {
            is_retryable_read(status)
                || not_applied(status)
                || status.code() == Code::DeadlineExceeded
        }
        Retry::Write => never_sent(status) || not_applied(status),
    }
}

/// Whether the server said the write was not applied and may be sent again as it is: refused
/// before any leader appended it (NOT_APPLIED), or refused by apply because users or roles
/// changed after it was authorized (AUTH_CHANGED; sent again, it is authorized afresh). Other
/// reasons that say "not applied" (OVERLOADED, LIMIT_EXCEEDED, ...) are not repeated at once.
pub fn not_applied(status: &Status) -> bool {
    matches!(
        reason(status),
        Some(ErrorReason::NotApplied | ErrorReason::AuthChanged)
    )
}

/// Whether a read (or a broken watch stream) that failed this way may be repeated at another
/// node: the node said `Unavailable`, or the failure happened in the transport (a status built
/// on this side from a connection error carries its source; one a server sent never does).
pub fn is_retryable_read(status: &Status) -> bool {
    status.code() == Code::Unavailable || std::error::Error::source(status).is_some()
}

/// True when the error chain shows the connection could not be made (refused, unreachable,
/// connect timeout), so no byte of the request reached a server.
pub fn never_sent(status: &Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        source = err.source();
    }
    false
}

/// "host:port" or "http://host:port" (or https) as a URI tonic accepts; refuses anything else.
/// A bare host:port gets `https://` when `tls`, else `http://`; a scheme that contradicts `tls`
/// is refused.
pub fn normalize_endpoint(raw: &str, tls: bool) -> anyhow::Result<String> {
    let trimmed = raw.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        anyhow::bail!("empty endpoint");
    }
    let uri = if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        trimmed.to_string()
    } else if trimmed.contains("://") {
        anyhow::bail!("endpoint {raw:?}: only http:// and https:// are supported");
    } else if tls {
        format!("https://{trimmed}")
    } else {
        format!("http://{trimmed}")
    };
    match (tls, uri.starts_with("https://")) {
        (true, false) => anyhow::bail!(
            "endpoint {raw:?}: http:// is plaintext, but --cacert asks for TLS; use https:// or \
             host:port"
        ),
        (false, true) => anyhow::bail!(
            "endpoint {raw:?}: https:// needs --cacert (the CA that signed the nodes' \
             certificates)"
        ),
        _ => {}
    }
    let parsed: tonic::codegen::http::Uri = uri
        .parse()
        .map_err(|e| anyhow::anyhow!("invalid endpoint {raw:?}: {e}"))?;
    if parsed.port_u16().is_none() || parsed.host().is_none_or(str::is_empty) {
        anyhow::bail!("invalid endpoint {raw:?}: expected host:port");
    }
    if parsed.path() != "/" && !parsed.path().is_empty() {
        anyhow::bail!("invalid endpoint {raw:?}: expected host:port without a path");
    }
    Ok(uri)
}

/// Splits a comma-separated endpoint list ("a:1, b:2"), dropping empty entries.
pub fn split_endpoints(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized() {
        let cases = [
            ("127.0.0.1:7001", Some("http://127.0.0.1:7001")),
            (" http://127.0.0.1:7001/ ", Some("http://127.0.0.1:7001")),
            ("https://node1:443", None),
            ("localhost:7002", Some("http://localhost:7002")),
            ("[::1]:7003", Some("http://[::1]:7003")),
            ("127.0.0.1", None),
            ("", None),
            ("grpc://h:1", None),
            ("h:1/path", None),
            ("h:notaport", None),
        ];
        for (raw, want) in cases {
            assert_eq!(
                normalize_endpoint(raw, false).ok().as_deref(),
                want,
                "{raw:?}"
            );
        }
        let tls = [
            ("127.0.0.1:7001", Some("https://127.0.0.1:7001")),
            ("https://node1:443/", Some("https://node1:443")),
            ("http://127.0.0.1:7001", None),
        ];
        for (raw, want) in tls {
            assert_eq!(
                normalize_endpoint(raw, true).ok().as_deref(),
                want,
                "{raw:?}"
            );
        }
        let err = normalize_endpoint("https://node1:443", false).expect_err("no CA");
        assert!(err.to_string().contains("--cacert"), "{err}");
    }

    #[test]
    fn endpoint_lists_split_on_commas() {
        assert_eq!(split_endpoints("a:1, b:2,,c:3 "), vec!["a:1", "b:2", "c:3"]);
        assert!(split_endpoints(" , ").is_empty());
    }

    #[test]
    fn only_reads_retry_on_a_plain_unavailable() {
        let status = Status::unavailable("leader unknown");
        assert!(may_retry(Retry::Read, &status));
        assert!(!may_retry(Retry::Write, &status));
        assert!(!may_retry(Retry::Read, &Status::not_found("x")));
    }

    #[test]
    fn writes_retry_when_the_server_says_they_were_not_applied() {
        use crate::server::errors;
        let no_leader = errors::not_applied(errors::no_leader());
        assert_eq!(reason(&no_leader), Some(ErrorReason::NotApplied));
        assert!(may_retry(Retry::Write, &no_leader));
        assert!(retry_delay(&no_leader).is_some());
        // Users or roles changed before apply: sent again, it is authorized afresh.
        let auth_changed = errors::rejection(&crate::state::Rejection::AuthChanged {
            authorized_at: 1,
            now: 2,
        });
        assert!(may_retry(Retry::Write, &auth_changed));
        // Not applied, but sending it again at once would not help.
        let overloaded = errors::not_applied(errors::overloaded("limits.x", "busy"));
        assert_eq!(reason(&overloaded), Some(ErrorReason::Overloaded));
        assert!(!may_retry(Retry::Write, &overloaded));
        // The trailer alone (an older node, or a forged one) is not a reason.
        let mut trailer_only = Status::unavailable("this node is not the leader");
        trailer_only.metadata_mut().insert(
            crate::wire::NOT_APPLIED,
            tonic::metadata::MetadataValue::from_static("true"),
        );
        assert!(!may_retry(Retry::Write, &trailer_only));
        assert!(!may_retry(Retry::Write, &Status::aborted("conflict")));
        let unknown = errors::outcome_unknown("leadership changed", None);
        assert_eq!(reason(&unknown), Some(ErrorReason::OutcomeUnknown));
        assert!(!may_retry(Retry::Write, &unknown));
        assert!(may_retry(Retry::Read, &unknown));
        // Another domain's ErrorInfo is not ours.
        let foreign = Status::with_error_details(
            Code::Unavailable,
            "x",
            tonic_types::ErrorDetails::with_error_info(
                "NOT_APPLIED",
                "example.com",
                std::collections::HashMap::new(),
            ),
        );
        assert_eq!(reason(&foreign), None);
        assert!(!may_retry(Retry::Write, &foreign));
    }
}
