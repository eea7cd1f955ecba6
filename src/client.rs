//! The Rust client of steward's client API (`proto/steward.proto`), used by the CLI, the
//! integration tests and jepsen/.
//!
//! One lazily connected tonic `Channel` per endpoint, reused for every call. Any node serves any
//! request (followers forward to the leader), so the client talks to one endpoint and moves to the
//! next one when that endpoint fails, but only when a retry cannot change the outcome:
//! - reads (get, list, watch set-up, cluster status, member list) are retried at the next
//!   endpoint on `Unavailable` or a transport error, until the request deadline;
//! - writes are retried only when the error proves the request never left this process (the
//!   connection could not be made). Any other failure of a write is ambiguous (it may have been
//!   applied) and is returned as it is, so callers see the uncertainty.
//!
//! Errors are `tonic::Status` values: `.code()` and `.message()` are what the server said, or
//! `DeadlineExceeded` / `Unavailable` / `Internal` for failures on the client side.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use crate::proto::v1 as pb;
use crate::proto::v1::cluster_client::ClusterClient;
use crate::proto::v1::resources_client::ResourcesClient;

pub use crate::proto::v1::{
    ClusterStatusReply, Consistency, EventType, Member, MemberListReply, NodeStatus,
};

/// The trailer in which a node names the leader's client address when it cannot serve a request.
pub const LEADER_HINT_KEY: &str = "x-steward-leader";

/// How long to wait for a TCP connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default deadline of one request, retries included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply the client accepts (a full list page of large objects).
const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// Pause between attempts, doubled each time up to `RETRY_BACKOFF_MAX`.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// A client of a steward cluster. Cheap to clone; clones share channels and the current endpoint.
#[derive(Clone, Debug)]
pub struct Client {
    endpoints: Arc<Vec<NodeChannel>>,
    /// Index of the endpoint tried first; moves on failover.
    current: Arc<AtomicUsize>,
    /// When set, only this endpoint is used and nothing fails over.
    pinned: Option<usize>,
    request_timeout: Duration,
}

#[derive(Clone, Debug)]
struct NodeChannel {
    /// The endpoint as the caller wrote it, normalized to `http://host:port`.
    uri: String,
    channel: Channel,
}

/// One page of a list, or all pages of `list_all`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    pub items: Vec<Value>,
    /// The store revision the (first) page was read at; watch from `revision + 1` to see every
    /// later change.
    pub revision: u64,
    /// Empty on the last page.
    pub continue_token: String,
}

/// Everything a list request can say; `Default` is "all namespaces, no selector, server page
/// size, linearizable".
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Empty: all namespaces.
    pub namespace: String,
    pub label_selector: String,
    /// Page size; 0 = the server's default.
    pub limit: u32,
    pub continue_token: String,
    pub consistency: Consistency,
}

/// Everything a watch request can say.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Empty: all namespaces.
    pub namespace: String,
    pub label_selector: String,
    /// First revision delivered (inclusive); 0 = only changes after the watch starts.
    pub start_revision: u64,
    /// 0 = the server's default.
    pub bookmark_interval_ms: u32,
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum TxnOp {
    Create(Value),
    Update {
        object: Value,
        expected_revision: u64,
    },
    UpdateStatus {
        object: Value,
        expected_revision: u64,
    },
    Delete {
        kind: String,
        namespace: String,
        name: String,
        expected_revision: u64,
    },
}

/// The outcome of a committed transaction: one object per op, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct TxnResult {
    pub objects: Vec<Value>,
    pub revision: u64,
}

/// One event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub revision: u64,
    /// `None` for BOOKMARK.
    pub object: Option<Value>,
}

/// The events of one watch; ends with an error when the server cuts it off.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

/// Whether a failed attempt may be repeated at another endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// Reads: repeating cannot change anything.
    Read,
    /// Writes: only when the request provably never left this process.
    Write,
}

impl Client {
    /// A client of the given endpoints ("host:port" or "http://host:port"). Connects lazily:
    /// this fails only on a malformed endpoint, never because a node is down. Must be called
    /// inside a tokio runtime (each channel spawns its worker task).
    pub fn connect(endpoints: &[String]) -> anyhow::Result<Client> {
        Client::connect_with_timeout(endpoints, DEFAULT_REQUEST_TIMEOUT)
    }

    /// Like `connect`, with a deadline for each request (retries included).
    pub fn connect_with_timeout(
        endpoints: &[String],
        request_timeout: Duration,
    ) -> anyhow::Result<Client> {
        if endpoints.is_empty() {
            anyhow::bail!("no endpoints given");
        }
        let mut nodes = Vec::with_capacity(endpoints.len());
        for raw in endpoints {
            let uri = normalize_endpoint(raw)?;
            let endpoint = Endpoint::from_shared(uri.clone())
                .map_err(|e| anyhow::anyhow!("invalid endpoint {raw:?}: {e}"))?
                .connect_timeout(CONNECT_TIMEOUT)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(5))
                .keep_alive_while_idle(true);
            nodes.push(NodeChannel {
                uri,
                channel: endpoint.connect_lazy(),
            });
        }
        Ok(Client {
            endpoints: Arc::new(nodes),
            current: Arc::new(AtomicUsize::new(0)),
            pinned: None,
            request_timeout,
        })
    }

    /// A client that sends everything to endpoint `index` only (no failover), sharing channels
    /// with `self`. `None` if there is no such endpoint. Tests use it to read on a follower.
    pub fn with_endpoint_index(&self, index: usize) -> Option<Client> {
        (index < self.endpoints.len()).then(|| Client {
            pinned: Some(index),
            ..self.clone()
        })
    }

    /// The same client with another per-request deadline.
    pub fn with_timeout(&self, request_timeout: Duration) -> Client {
        Client {
            request_timeout,
            ..self.clone()
        }
    }

    /// The endpoints, normalized to `http://host:port`, in the order given.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.iter().map(|n| n.uri.clone()).collect()
    }

    /// The per-request deadline.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    // ---- Resources ----

    /// Creates an object; returns it as stored (uid, resourceVersion, ... filled in).
    pub async fn create(&self, object: &Value) -> Result<Value, Status> {
        let msg = pb::CreateRequest {
            object_json: object.to_string(),
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).create(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Gets one object; `NotFound` if absent.
    pub async fn get(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        consistency: Consistency,
    ) -> Result<Value, Status> {
        let msg = pb::GetRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            consistency: consistency as i32,
        };
        let reply = self
            .call(Retry::Read, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).get(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// One linearizable page of objects of `kind` (`namespace` empty: all namespaces).
    pub async fn list(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
        limit: u32,
        continue_token: &str,
    ) -> Result<ListPage, Status> {
        let opts = ListOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            limit,
            continue_token: continue_token.to_string(),
            consistency: Consistency::Linearizable,
        };
        self.list_with(kind, &opts).await
    }

    /// One page of objects of `kind`, as `opts` says.
    pub async fn list_with(&self, kind: &str, opts: &ListOptions) -> Result<ListPage, Status> {
        let msg = pb::ListRequest {
            kind: kind.to_string(),
            namespace: opts.namespace.clone(),
            label_selector: opts.label_selector.clone(),
            limit: opts.limit,
            continue_token: opts.continue_token.clone(),
            consistency: opts.consistency as i32,
        };
        let reply = self
            .call(Retry::Read, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).list(request(msg, t)).await }
            })
            .await?;
        let items = reply
            .objects_json
            .iter()
            .map(|j| parse_object(j))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage {
            items,
            revision: reply.revision,
            continue_token: reply.continue_token,
        })
    }

    /// Every linearizable object of `kind` matching `selector`, following continue tokens.
    pub async fn list_all(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
    ) -> Result<ListPage, Status> {
        let opts = ListOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            ..ListOptions::default()
        };
        self.list_all_with(kind, &opts).await
    }

    /// Every object `opts` selects, following continue tokens from `opts.continue_token`;
    /// `opts.limit` is the page size. The revision is the first page's.
    pub async fn list_all_with(&self, kind: &str, opts: &ListOptions) -> Result<ListPage, Status> {
        let mut opts = opts.clone();
        let mut all = self.list_with(kind, &opts).await?;
        while !all.continue_token.is_empty() {
            opts.continue_token = std::mem::take(&mut all.continue_token);
            let page = self.list_with(kind, &opts).await?;
            all.items.extend(page.items);
            all.continue_token = page.continue_token;
        }
        Ok(all)
    }

    /// Replaces spec, labels, annotations and apiVersion (status is kept). `expected_revision`
    /// 0 = unconditional; otherwise `Aborted` unless the stored resourceVersion equals it.
    pub async fn update(&self, object: &Value, expected_revision: u64) -> Result<Value, Status> {
        let msg = pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).update(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Replaces status only, with the same precondition as `update`.
    pub async fn update_status(
        &self,
        object: &Value,
        expected_revision: u64,
    ) -> Result<Value, Status> {
        let msg = pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).update_status(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Deletes an object; returns it as it was, stamped with the deletion revision.
    pub async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_revision: u64,
    ) -> Result<Value, Status> {
        let msg = pb::DeleteRequest {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            expected_revision,
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).delete(request(msg, t)).await }
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Applies `ops` atomically: all preconditions hold and everything changes, or nothing does.
    pub async fn txn(&self, ops: Vec<TxnOp>) -> Result<TxnResult, Status> {
        let msg = pb::TxnRequest {
            ops: ops.into_iter().map(txn_op_to_proto).collect(),
        };
        let reply = self
            .call(Retry::Write, |ch, t| {
                let msg = msg.clone();
                async move { resources(ch).txn(request(msg, t)).await }
            })
            .await?;
        let objects = reply
            .objects_json
            .iter()
            .map(|j| parse_object(j))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TxnResult {
            objects,
            revision: reply.revision,
        })
    }

    /// Watches objects of `kind` from `start_revision` (0: from now on).
    pub async fn watch(
        &self,
        kind: &str,
        namespace: &str,
        selector: &str,
        start_revision: u64,
    ) -> Result<WatchStream, Status> {
        let opts = WatchOptions {
            namespace: namespace.to_string(),
            label_selector: selector.to_string(),
            start_revision,
            bookmark_interval_ms: 0,
        };
        self.watch_with(kind, &opts).await
    }

    /// Watches as `opts` says. Setting up the stream fails over like a read; once it runs, the
    /// stream ends with the error that cut it off (resume from the last revision seen + 1).
    pub async fn watch_with(&self, kind: &str, opts: &WatchOptions) -> Result<WatchStream, Status> {
        let msg = pb::WatchRequest {
            kind: kind.to_string(),
            namespace: opts.namespace.clone(),
            label_selector: opts.label_selector.clone(),
            start_revision: opts.start_revision,
            bookmark_interval_ms: opts.bookmark_interval_ms,
        };
        // No grpc-timeout on the request: the deadline covers only the set-up, not the stream.
        let stream = self
            .call(Retry::Read, |ch, _t| {
                let msg = msg.clone();
                async move { resources(ch).watch(Request::new(msg)).await }
            })
            .await?;
        Ok(Box::pin(
            stream.map(|item| item.and_then(watch_event_from_proto)),
        ))
    }

    // ---- Cluster ----

    /// Every node's Raft state, as the answering node sees it.
    pub async fn cluster_status(&self) -> Result<ClusterStatusReply, Status> {
        self.call(Retry::Read, |ch, t| async move {
            cluster(ch)
                .status(request(pb::ClusterStatusRequest {}, t))
                .await
        })
        .await
    }

    /// The members, with the leader's view of their replication.
    pub async fn member_list(&self) -> Result<MemberListReply, Status> {
        self.call(Retry::Read, |ch, t| async move {
            cluster(ch)
                .member_list(request(pb::MemberListRequest {}, t))
                .await
        })
        .await
    }

    /// Adds node `id` as a learner; returns once it has caught up with the leader's log.
    pub async fn add_learner(
        &self,
        id: u64,
        peer_addr: &str,
        client_addr: &str,
    ) -> Result<MemberListReply, Status> {
        let msg = pb::AddLearnerRequest {
            id,
            peer_addr: peer_addr.to_string(),
            client_addr: client_addr.to_string(),
        };
        self.call(Retry::Write, |ch, t| {
            let msg = msg.clone();
            async move { cluster(ch).add_learner(request(msg, t)).await }
        })
        .await
    }

    /// Makes learner `id` a voter.
    pub async fn promote(&self, id: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .promote(request(pb::PromoteRequest { id }, t))
                .await
        })
        .await
    }

    /// Removes member `id`; its id is retired for good.
    pub async fn remove_member(&self, id: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .remove_member(request(pb::RemoveMemberRequest { id }, t))
                .await
        })
        .await
    }

    /// Hands leadership to voter `to` (0: the most up-to-date other voter).
    pub async fn transfer_leader(&self, to: u64) -> Result<MemberListReply, Status> {
        self.call(Retry::Write, |ch, t| async move {
            cluster(ch)
                .transfer_leader(request(pb::TransferLeaderRequest { to }, t))
                .await
        })
        .await
    }

    // ---- failover ----

    /// Runs `attempt` against the current endpoint, failing over as `retry` allows, until the
    /// request deadline. `attempt` gets the channel and the time left.
    async fn call<T, F, Fut>(&self, retry: Retry, mut attempt: F) -> Result<T, Status>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + self.request_timeout;
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut index = self
            .pinned
            .unwrap_or_else(|| self.current.load(Ordering::Relaxed) % self.endpoints.len());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let channel = self.endpoints[index].channel.clone();
            let status = match tokio::time::timeout(left, attempt(channel, left)).await {
                Ok(Ok(reply)) => return Ok(reply.into_inner()),
                Ok(Err(status)) => status,
                Err(_) => return Err(self.deadline_exceeded(index)),
            };
            if self.pinned.is_some() || !may_retry(retry, &status) {
                return Err(status);
            }
            if Instant::now() + backoff >= deadline {
                return Err(status);
            }
            tracing::debug!(endpoint = %self.endpoints[index].uri, code = ?status.code(), message = status.message(), "failing over");
            index = self.next_endpoint(index, &status);
            self.current.store(index, Ordering::Relaxed);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    /// The endpoint to try after `index` failed: the leader if the node named one we know,
    /// else the next in the list.
    fn next_endpoint(&self, index: usize, status: &Status) -> usize {
        leader_hint(status)
            .and_then(|hint| {
                let hint = normalize_endpoint(&hint).ok()?;
                self.endpoints.iter().position(|n| n.uri == hint)
            })
            .filter(|&i| i != index)
            .unwrap_or((index + 1) % self.endpoints.len())
    }

    fn deadline_exceeded(&self, index: usize) -> Status {
        Status::deadline_exceeded(format!(
            "no reply within {} (last tried {})",
            humantime::format_duration(self.request_timeout),
            self.endpoints[index].uri
        ))
    }
}

/// The leader's client address a node put in the `x-steward-leader` metadata, if any.
pub fn leader_hint(status: &Status) -> Option<String> {
    let value = status.metadata().get(LEADER_HINT_KEY)?.to_str().ok()?;
    (!value.is_empty()).then(|| value.to_string())
}

/// Whether a failed attempt may be repeated elsewhere without risking a double effect.
fn may_retry(retry: Retry, status: &Status) -> bool {
    match retry {
        Retry::Read => is_retryable_read(status),
        Retry::Write => never_sent(status),
    }
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
pub fn normalize_endpoint(raw: &str) -> anyhow::Result<String> {
    let trimmed = raw.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        anyhow::bail!("empty endpoint");
    }
    let uri = if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        trimmed.to_string()
    } else if trimmed.contains("://") {
        anyhow::bail!("endpoint {raw:?}: only http:// and https:// are supported");
    } else {
        format!("http://{trimmed}")
    };
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

fn resources(channel: Channel) -> ResourcesClient<Channel> {
    ResourcesClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

fn cluster(channel: Channel) -> ClusterClient<Channel> {
    ClusterClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

/// A request carrying its deadline to the server (`grpc-timeout`), so the server gives up too.
fn request<M>(msg: M, timeout: Duration) -> Request<M> {
    let mut req = Request::new(msg);
    req.set_timeout(timeout);
    req
}

fn parse_object(json: &str) -> Result<Value, Status> {
    serde_json::from_str(json)
        .map_err(|e| Status::internal(format!("the server sent an object that is not JSON: {e}")))
}

fn txn_op_to_proto(op: TxnOp) -> pb::TxnOp {
    use pb::txn_op::Op;
    let op = match op {
        TxnOp::Create(object) => Op::Create(pb::CreateRequest {
            object_json: object.to_string(),
        }),
        TxnOp::Update {
            object,
            expected_revision,
        } => Op::Update(pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
        }),
        TxnOp::UpdateStatus {
            object,
            expected_revision,
        } => Op::UpdateStatus(pb::UpdateRequest {
            object_json: object.to_string(),
            expected_revision,
        }),
        TxnOp::Delete {
            kind,
            namespace,
            name,
            expected_revision,
        } => Op::Delete(pb::DeleteRequest {
            kind,
            namespace,
            name,
            expected_revision,
        }),
    };
    pb::TxnOp { op: Some(op) }
}

fn watch_event_from_proto(event: pb::WatchEvent) -> Result<WatchEvent, Status> {
    let event_type = EventType::try_from(event.r#type).map_err(|_| {
        Status::internal(format!(
            "the server sent an unknown watch event type {}",
            event.r#type
        ))
    })?;
    let object = if event.object_json.is_empty() {
        None
    } else {
        Some(parse_object(&event.object_json)?)
    };
    Ok(WatchEvent {
        event_type,
        revision: event.revision,
        object,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized() {
        let cases = [
            ("127.0.0.1:7001", Some("http://127.0.0.1:7001")),
            (" http://127.0.0.1:7001/ ", Some("http://127.0.0.1:7001")),
            ("https://node1:443", Some("https://node1:443")),
            ("localhost:7002", Some("http://localhost:7002")),
            ("[::1]:7003", Some("http://[::1]:7003")),
            ("127.0.0.1", None),
            ("", None),
            ("grpc://h:1", None),
            ("h:1/path", None),
            ("h:notaport", None),
        ];
        for (raw, want) in cases {
            assert_eq!(normalize_endpoint(raw).ok().as_deref(), want, "{raw:?}");
        }
    }

    #[test]
    fn endpoint_lists_split_on_commas() {
        assert_eq!(split_endpoints("a:1, b:2,,c:3 "), vec!["a:1", "b:2", "c:3"]);
        assert!(split_endpoints(" , ").is_empty());
    }

    #[tokio::test]
    async fn connect_refuses_bad_endpoints_only() {
        assert!(Client::connect(&[]).is_err());
        assert!(Client::connect(&["nope".to_string()]).is_err());
    }

    #[test]
    fn only_reads_retry_on_a_plain_unavailable() {
        let status = Status::unavailable("leader unknown");
        assert!(may_retry(Retry::Read, &status));
        assert!(!may_retry(Retry::Write, &status));
        assert!(!may_retry(Retry::Read, &Status::not_found("x")));
    }

    #[tokio::test]
    async fn writes_retry_when_the_connection_is_refused() {
        // Bind then drop to get a port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let client = Client::connect_with_timeout(
            &[format!("127.0.0.1:{port}")],
            Duration::from_millis(300),
        )
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
        let client = Client::connect(&["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()])
            .expect("client");
        assert!(client.with_endpoint_index(1).is_some());
        assert!(client.with_endpoint_index(2).is_none());
    }
}
