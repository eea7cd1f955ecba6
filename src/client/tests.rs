//! Unit tests of the client: bad endpoints, write retries on a refused connection, pinning.

use super::*;
use tonic::Code;

#[tokio::test]
async fn connect_refuses_bad_endpoints_only() {
    assert!(Client::connect(&[]).is_err());
    assert!(Client::connect(&["nope".to_string()]).is_err());
}

#[tokio::test]
async fn writes_retry_when_the_connection_is_refused() {
    // Bind then drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let client =
        Client::connect_with_timeout(&[format!("127.0.0.1:{port}")], Duration::from_millis(300))
            .expect("client");
    let err = client
        .create(&serde_json::json!({"kind": "X"}))
        .await
        .expect_err("nobody listens");
    assert!(
        matches!(err.code(), Code::Unavailable | Code::DeadlineExceeded),
        "{err:?}"
    );
    if err.code() == Code::Unavailable {
        assert!(never_sent(&err), "{err:?}");
    }
}

#[tokio::test]
async fn pinning_checks_the_index() {
    let client =
        Client::connect(&["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()]).expect("client");
    assert!(client.with_endpoint_index(1).is_some());
    assert!(client.with_endpoint_index(2).is_none());
}
