//! Endpoint parsing and the failover rules: which failures may be repeated at another node
//! without risking a double effect, and where the leader is said to be.

use tonic::{Code, Status};

/// The trailer in which a node names the leader's client address when it cannot serve a request.
pub const LEADER_HINT_KEY: &str = "x-steward-leader";

/// The trailer with which a node says a write was refused before any leader appended it.
pub const NOT_APPLIED_KEY: &str = "x-steward-not-applied";

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
    /// was refused before any leader appended it (`x-steward-not-applied`: no leader, or none
    /// would take it, as during an election).
    Write,
}

/// The leader's client address a node put in the `x-steward-leader` metadata, if any.
pub fn leader_hint(status: &Status) -> Option<String> {
    let value = status.metadata().get(LEADER_HINT_KEY)?.to_str().ok()?;
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

/// Whether the server said the write was not applied: refused before any leader appended it
/// (Unavailable), or refused by apply because users or roles changed after it was authorized
/// (Aborted; sent again, it is authorized afresh).
pub fn not_applied(status: &Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::Aborted)
        && status.metadata().get(NOT_APPLIED_KEY).is_some()
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
        let marked = |mut s: Status| {
            s.metadata_mut().insert(
                NOT_APPLIED_KEY,
                tonic::metadata::MetadataValue::from_static("true"),
            );
            s
        };
        let refused = marked(Status::unavailable("this node is not the leader"));
        assert!(may_retry(Retry::Write, &refused));
        // The server's own marker function and the client's key agree.
        let server = crate::server::errors::not_applied(Status::unavailable("no leader"));
        assert!(may_retry(Retry::Write, &server));
        // A marked Aborted (users or roles changed before apply) counts too; a marked code of
        // any other kind does not, nor an unmarked one, which may have been applied.
        assert!(may_retry(
            Retry::Write,
            &marked(Status::aborted("auth changed"))
        ));
        assert!(!may_retry(Retry::Write, &marked(Status::not_found("x"))));
        let auth_changed =
            crate::server::errors::rejection(&crate::state::Rejection::AuthChanged {
                authorized_at: 1,
                now: 2,
            });
        assert!(may_retry(Retry::Write, &auth_changed));
        assert!(!may_retry(Retry::Write, &Status::aborted("conflict")));
        let unknown = Status::unavailable("leadership changed; its outcome is unknown");
        assert!(!may_retry(Retry::Write, &unknown));
    }
}
