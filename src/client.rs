//! The Rust client of steward's client API (`proto/steward.proto`), used by the CLI, the
//! integration tests and jepsen/.
//!
//! One lazily connected tonic `Channel` per endpoint, reused for every call. Any node serves any
//! request (followers forward to the leader), so the client talks to one endpoint and moves to the
//! next one when that endpoint fails, but only when a retry cannot change the outcome:
//! - reads (get, list, watch set-up, lock get, lock list, lock watch set-up, cluster status,
//!   member list) are retried at the next endpoint on `Unavailable` or a transport error, until
//!   the request deadline;
//! - writes are retried only when the error proves the request never left this process (the
//!   connection could not be made), or the node said it was refused before any leader appended
//!   it (reason NOT_APPLIED: no leader, as during an election; or AUTH_CHANGED). Any other
//!   failure of a write is ambiguous (it may have been
//!   applied) and is returned as it is, so callers see the uncertainty. Lock acquire, refresh
//!   and release are writes.
//!
//! Every resource write has a `*_fenced` form taking an optional `Fence {lock, token}`: the
//! server applies the write only while that token is a live WRITE holder of that lock, in the
//! same atomic step (FailedPrecondition otherwise). The plain forms send no fence. Lock calls
//! live in client/locks.rs, operation and worker calls in client/operations.rs, object calls in
//! client/resources.rs.
//!
//! Errors are `tonic::Status` values: `.code()` and `.message()` are what the server said, or
//! `DeadlineExceeded` / `Unavailable` / `Internal` for failures on the client side. Decide by
//! `client::reason(&status)` (the server's `ErrorReason`, proto/errors.proto), not the message;
//! `client::retry_delay` is the wait the server asked for.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::proto::v1::cluster_client::ClusterClient;

mod auth;
mod cluster;
mod deployments;
mod failover;
mod locks;
mod operations;
mod pools;
mod resources;
mod types;

pub use crate::proto::v1::ErrorReason;
pub use crate::proto::v1::{Alarm, AlarmsReply, CompactReply, NodeCompaction};
pub use crate::proto::v1::{
    Assignment, AssignmentKind, DeregisterWorkerReply, ListOperationsReply, ListWorkersReply,
    NodeReservations, OperationInfo, OperationPolicy, OperationState, OperationTransition,
    ReservationCountersReply, ReservedUnits, SubmitOperationReply, WorkerInfo,
};
pub use crate::proto::v1::{
    ClusterStatusReply, Consistency, EventType, Fence, ListLocksReply, LockEventMessage,
    LockEventType, LockGrant, LockHolderInfo, LockInfo, LockMode, LockWaiterInfo, Member,
    MemberListReply, NodeStatus, ReleaseReply,
};
pub use auth::{AuthStatusReply, UserInfo, UserListReply, UserReply};
pub use deployments::{DeploymentStatus, DeploymentVerb};
pub use failover::{
    is_retryable_read, leader_hint, never_sent, normalize_endpoint, not_applied, reason,
    retry_delay, split_endpoints,
};
pub use locks::{lock_wait_expired, LockWatchStream};
pub use operations::{AssignmentStream, OpListOptions, OpReport, OpWatchStream, SubmitOptions};
pub use pools::{PoolMetricsReply, PoolResource, PoolResourceReply, PoolResourcesReply};
pub use resources::{continue_expired, LIST_RESTARTS_MAX};
pub use types::{ListOptions, ListPage, TxnOp, TxnResult, WatchEvent, WatchOptions, WatchStream};

use failover::{may_retry, Retry};

/// How long to wait for a TCP connection to an endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default deadline of one request, retries included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply the client accepts (a full list page of large objects).
const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
/// A read's attempt at one endpoint gets this share of the request deadline, but at least
/// `READ_ATTEMPT_MIN`: a node that accepts the connection and never answers (stopped, wedged)
/// costs a read a third of its deadline, and the rest goes to the other endpoints. A healthy
/// node answers a read in milliseconds.
const READ_ATTEMPT_SHARE: u32 = 3;
const READ_ATTEMPT_MIN: Duration = Duration::from_secs(1);
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
    /// Sent with every call (a bearer token), or nothing.
    credentials: Credentials,
}

/// The transport every stub runs on: a node's channel, with the client's credentials added to
/// each call.
pub type Transport = InterceptedService<Channel, Credentials>;

/// What a client sends to say who it is: `authorization: Bearer <token>`, or nothing (then a
/// client certificate, if any, speaks for it).
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    authorization: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

#[derive(Clone, Debug)]
struct NodeChannel {
    /// The endpoint as the caller wrote it, normalized to `http://host:port`.
    uri: String,
    channel: Channel,
}

impl Client {
    /// A client of the given endpoints ("host:port" or "http://host:port"), in plaintext. Connects lazily:
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
        Client::connect_with(endpoints, request_timeout, None)
    }

    /// Like `connect_with_timeout`, over TLS when `tls` is given (endpoints without a scheme
    /// become `https://`).
    pub fn connect_with(
        endpoints: &[String],
        request_timeout: Duration,
        tls: Option<&crate::tls::ClientTls>,
    ) -> anyhow::Result<Client> {
        if endpoints.is_empty() {
            anyhow::bail!("no endpoints given");
        }
        let mut nodes = Vec::with_capacity(endpoints.len());
        for raw in endpoints {
            let uri = normalize_endpoint(raw, tls.is_some())?;
            let mut endpoint = Endpoint::from_shared(uri.clone())
                .map_err(|e| anyhow::anyhow!("invalid endpoint {raw:?}: {e}"))?;
            if let Some(tls) = tls {
                endpoint = endpoint
                    .tls_config(tls.config())
                    .map_err(|e| anyhow::anyhow!("TLS for endpoint {raw:?}: {e}"))?;
            }
            let endpoint = endpoint
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
            credentials: Credentials::default(),
        })
    }

    /// The same client, sending `token` as its bearer token on every call (`None`: none).
    pub fn with_token(&self, token: Option<&str>) -> anyhow::Result<Client> {
        let authorization = match token.map(str::trim) {
            None | Some("") => None,
            Some(token) => Some(format!("Bearer {token}").parse().map_err(|_| {
                anyhow::anyhow!("the token holds characters a header cannot carry")
            })?),
        };
        Ok(Client {
            credentials: Credentials { authorization },
            ..self.clone()
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

    /// The endpoints, normalized to `http://host:port` (`https://` with TLS), in the order given.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.iter().map(|n| n.uri.clone()).collect()
    }

    /// The per-request deadline.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    // ---- failover ----

    /// Runs `attempt` against the current endpoint, failing over as `retry` allows, until the
    /// request deadline. `attempt` gets the channel and the time left.
    async fn call<T, F, Fut>(&self, retry: Retry, mut attempt: F) -> Result<T, Status>
    where
        F: FnMut(Transport, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + self.request_timeout;
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut index = self
            .pinned
            .unwrap_or_else(|| self.current.load(Ordering::Relaxed) % self.endpoints.len());
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let budget = match retry {
                Retry::Read if self.pinned.is_none() => left.min(self.read_attempt_budget()),
                _ => left,
            };
            let channel = Transport::new(
                self.endpoints[index].channel.clone(),
                self.credentials.clone(),
            );
            let status = match tokio::time::timeout(budget, attempt(channel, budget)).await {
                Ok(Ok(reply)) => return Ok(reply.into_inner()),
                Ok(Err(status)) if timed_out_here(&status) && budget < left => {
                    self.silent(index, budget)
                }
                // tonic's own grpc-timeout ("Cancelled: Timeout expired") says less than ours.
                Ok(Err(status)) if timed_out_here(&status) => {
                    return Err(self.deadline_exceeded(index, retry));
                }
                Ok(Err(status)) => status,
                Err(_) if budget < left => self.silent(index, budget),
                Err(_) => return Err(self.deadline_exceeded(index, retry)),
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
                let tls = self.endpoints[index].uri.starts_with("https://");
                let hint = normalize_endpoint(&hint, tls).ok()?;
                self.endpoints.iter().position(|n| n.uri == hint)
            })
            .filter(|&i| i != index)
            .unwrap_or((index + 1) % self.endpoints.len())
    }

    /// How long one read attempt may take (see `READ_ATTEMPT_SHARE`).
    fn read_attempt_budget(&self) -> Duration {
        (self.request_timeout / READ_ATTEMPT_SHARE).max(READ_ATTEMPT_MIN)
    }

    /// A read attempt that used its budget without an answer: the node is silent, try another.
    fn silent(&self, index: usize, budget: Duration) -> Status {
        Status::deadline_exceeded(format!(
            "{} did not answer a read within {}",
            self.endpoints[index].uri,
            humantime::format_duration(budget)
        ))
    }

    /// The request's deadline passed. A write sent in its last attempt may still be applied
    /// (the node may have it and be slow, stopped or cut off), and the caller must know that.
    fn deadline_exceeded(&self, index: usize, retry: Retry) -> Status {
        let unknown = match retry {
            Retry::Write => "; the write's outcome is unknown (read before writing it again)",
            Retry::Read | Retry::LongRead => "",
        };
        Status::deadline_exceeded(format!(
            "no reply within {} (last tried {}){unknown}",
            humantime::format_duration(self.request_timeout),
            self.endpoints[index].uri
        ))
    }
}

fn cluster(channel: Transport) -> ClusterClient<Transport> {
    ClusterClient::new(channel).max_decoding_message_size(MAX_REPLY_BYTES)
}

/// A request carrying its deadline to the server (`grpc-timeout`), so the server gives up too.
/// Whether tonic ended the attempt at its own grpc-timeout on this side ("Cancelled: Timeout
/// expired", with `tonic::TimeoutExpired` in its sources; a server's status has no source).
fn timed_out_here(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if err.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = err.source();
    }
    false
}

fn request<M>(msg: M, timeout: Duration) -> Request<M> {
    let mut req = Request::new(msg);
    req.set_timeout(timeout);
    req
}

fn parse_object(json: &str) -> Result<Value, Status> {
    serde_json::from_str(json)
        .map_err(|e| Status::internal(format!("the server sent an object that is not JSON: {e}")))
}

#[cfg(test)]
mod tests;
