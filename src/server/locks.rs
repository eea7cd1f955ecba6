//! The `Locks` gRPC service and the leader's lock sweeper.
//!
//! Handlers validate and propose lock commands; every decision (grant, queue, expiry, fencing)
//! is made by the pure state machine. A waiting acquire subscribes to this node's lock events
//! BEFORE proposing, so the grant of its `wait_id` cannot be missed; when the caller's wait ends
//! or the caller goes away, the node proposes `LockCancelWait` (which also releases a grant that
//! raced with the cancel). The sweeper runs on every node but proposes only while this node
//! leads: it names the locks its clock says are due, and apply re-checks with leader time.

use crate::state::LockCommand;
use crate::state::LockReply;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::locks_server::Locks;
use crate::proto::v1::*;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::resources::consistency;
use crate::server::wait::{Wait, Waited};
use crate::server::watch::relay;
use crate::state::{self, Command, LockEvent, LockEventType, LockLimits, Response};

pub mod sweeper;

pub use sweeper::run_sweeper;

pub struct LocksService {
    node: Arc<Node>,
}

impl LocksService {
    pub fn new(node: Arc<Node>) -> Self {
        LocksService { node }
    }

    fn limits(&self) -> LockLimits {
        let l = &self.node.config.locks;
        LockLimits {
            holders_max: l.holders_max,
            waiters_max: l.waiters_max,
            locks_max: l.locks_max,
            details_bytes_max: l.details_bytes_max,
        }
    }
}

fn mode_from_proto(v: i32) -> Result<state::LockMode, Status> {
    match LockMode::try_from(v) {
        Ok(LockMode::Read) => Ok(state::LockMode::Read),
        Ok(LockMode::Write) => Ok(state::LockMode::Write),
        Ok(LockMode::Unspecified) => Err(errors::invalid(
            "mode",
            "required; LOCK_MODE_READ or LOCK_MODE_WRITE",
        )),
        Err(_) => Err(errors::invalid(
            "mode",
            format!("unknown value {v}; LOCK_MODE_READ or LOCK_MODE_WRITE"),
        )),
    }
}

fn mode_to_proto(m: state::LockMode) -> i32 {
    match m {
        state::LockMode::Read => LockMode::Read as i32,
        state::LockMode::Write => LockMode::Write as i32,
    }
}

fn details_from_json(text: &str) -> Result<serde_json::Value, Status> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    let value = serde_json::from_str(text)
        .map_err(|e| errors::invalid("details_json", format!("not JSON: {e}")))?;
    state::objects::validate::check_json_depth("details_json", text)
        .map_err(|r| errors::rejection(&r))?;
    Ok(value)
}

fn details_to_json(v: &serde_json::Value) -> String {
    if v.is_null() {
        String::new()
    } else {
        v.to_string()
    }
}

pub fn holder_info(h: &state::LockHolder) -> LockHolderInfo {
    LockHolderInfo {
        holder: h.holder.clone(),
        mode: mode_to_proto(h.mode),
        token: h.token,
        granted_at_ms: h.granted_at_ms,
        ttl_ms: h.ttl_ms.unwrap_or(0),
        expires_at_ms: h.expires_at_ms.unwrap_or(0),
        details_json: details_to_json(&h.details),
    }
}

fn lock_info(l: &state::Lock, now_ms: u64) -> LockInfo {
    LockInfo {
        name: l.name.clone(),
        holders: l.holders.iter().map(holder_info).collect(),
        waiters: l
            .waiters
            .iter()
            .map(|w| LockWaiterInfo {
                holder: w.holder.clone(),
                mode: mode_to_proto(w.mode),
                wait_id: w.wait_id,
                queued_at_ms: w.queued_at_ms,
                wait_until_ms: w.wait_until_ms,
                details_json: details_to_json(&w.details),
            })
            .collect(),
        delay_until_ms: l.delay_until_ms.unwrap_or(0),
        now_ms,
    }
}

fn event_message(e: &LockEvent) -> LockEventMessage {
    LockEventMessage {
        r#type: match e.event_type {
            LockEventType::Granted => crate::proto::v1::LockEventType::Granted,
            LockEventType::Released => crate::proto::v1::LockEventType::Released,
            LockEventType::Expired => crate::proto::v1::LockEventType::Expired,
            LockEventType::WaitCancelled => crate::proto::v1::LockEventType::WaitCancelled,
            LockEventType::WaitExpired => crate::proto::v1::LockEventType::WaitExpired,
        } as i32,
        name: e.name.clone(),
        holder: e.holder.clone(),
        mode: mode_to_proto(e.mode),
        token: e.token,
        wait_id: e.wait_id.unwrap_or(0),
        time_ms: e.time_ms,
    }
}

fn grant(name: &str, h: &state::LockHolder) -> GrpcResponse<LockGrant> {
    GrpcResponse::new(LockGrant {
        name: name.to_string(),
        holder: Some(holder_info(h)),
    })
}

fn unexpected(what: &str, r: &impl std::fmt::Debug) -> Status {
    errors::internal(what, format!("unexpected response {r:?}"))
}

impl LocksService {
    /// Waits for the grant of `wait_id`, up to `wait`. On timeout, cancels the wait.
    async fn wait_for_grant(
        &self,
        events: tokio::sync::broadcast::Receiver<Arc<LockEvent>>,
        name: &str,
        holder: &str,
        wait_id: u64,
        wait: Duration,
    ) -> Result<GrpcResponse<LockGrant>, Status> {
        let cancel: Command = LockCommand::CancelWait {
            name: name.to_string(),
            holder: holder.to_string(),
            wait_id,
        }
        .into();
        let waiting = Wait {
            events,
            on_drop: cancel.clone(),
            at_deadline: cancel,
            what: "lock wait",
            wait,
        };
        let on_event = |e: &Arc<LockEvent>| {
            if e.name != name || e.wait_id != Some(wait_id) {
                return None;
            }
            match e.event_type {
                LockEventType::Granted => Some(self.granted_holder(name, e.token)),
                LockEventType::WaitExpired | LockEventType::WaitCancelled => {
                    Some(Err(not_granted(name, wait)))
                }
                _ => None,
            }
        };
        // Missed events: ask the state where this wait stands.
        let on_lagged = || {
            let state = self.node.state();
            let lock = state.lock(name);
            if let Some(h) =
                lock.and_then(|l| l.holders.iter().find(|h| h.wait_id == Some(wait_id)))
            {
                return Some(Ok(grant(name, h)));
            }
            if !lock.is_some_and(|l| l.waiters.iter().any(|w| w.wait_id == wait_id)) {
                return Some(Err(not_granted(name, wait)));
            }
            None
        };
        match waiting.run(&self.node, on_event, on_lagged).await? {
            Waited::Answered(answer) => answer,
            Waited::TimedOut(Response::Rejected(r)) => Err(errors::rejection(&r)),
            Waited::TimedOut(_) => Err(not_granted(name, wait)),
        }
    }

    fn granted_holder(&self, name: &str, token: u64) -> Result<GrpcResponse<LockGrant>, Status> {
        let state = self.node.state();
        match state
            .lock(name)
            .and_then(|l| l.holders.iter().find(|h| h.token == token))
        {
            Some(h) => Ok(grant(name, h)),
            // Granted and already gone again (released or expired) before we looked.
            None => Err(errors::Refusal::new(
                tonic::Code::Aborted,
                ErrorReason::LockNotHeld,
                format!("lock {name} was granted with token {token} but is no longer held by it"),
            )
            .meta("lock", name)
            .meta("token", token)
            .status()),
        }
    }
}

/// Aborted, LOCK_WAIT_EXPIRED: not DeadlineExceeded, which a client cannot tell from its own
/// deadline passing.
fn not_granted(name: &str, wait: Duration) -> Status {
    errors::lock_wait_expired(name, wait)
}

type LockEventStream = Pin<Box<dyn Stream<Item = Result<LockEventMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Locks for LocksService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<GrpcResponse<LockGrant>, Status> {
        let req = request.into_inner();
        let mode = mode_from_proto(req.mode)?;
        let details = details_from_json(&req.details_json)?;
        let command = LockCommand::Acquire {
            name: req.name.clone(),
            holder: req.holder.clone(),
            mode,
            ttl_ms: (req.ttl_ms > 0).then_some(req.ttl_ms),
            details,
            wait_ms: req.wait_ms,
            limits: self.limits(),
        };
        // Subscribe before proposing: the grant of a queued wait can come right after. Only
        // an acquire that may wait is queued.
        let events =
            (req.wait_ms > 0).then(|| self.node.hub.subscribe_lock_wait(&req.name, &req.holder));
        match self.node.propose(command).await? {
            LockReply::Granted { holder } => Ok(grant(&req.name, &holder)),
            LockReply::Queued { wait_id, .. } => {
                let events = events.ok_or_else(|| {
                    errors::internal("lock acquire", "queued an acquire that may not wait")
                })?;
                self.wait_for_grant(
                    events,
                    &req.name,
                    &req.holder,
                    wait_id,
                    Duration::from_millis(req.wait_ms),
                )
                .await
            }
            other => Err(unexpected("lock acquire", &other)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn refresh(
        &self,
        request: Request<RefreshRequest>,
    ) -> Result<GrpcResponse<LockGrant>, Status> {
        let req = request.into_inner();
        let command = LockCommand::Refresh {
            name: req.name.clone(),
            holder: req.holder,
            token: req.token,
            ttl_ms: (req.ttl_ms > 0).then_some(req.ttl_ms),
        };
        match self.node.propose(command).await? {
            LockReply::Refreshed { holder } => Ok(grant(&req.name, &holder)),
            other => Err(unexpected("lock refresh", &other)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<GrpcResponse<ReleaseReply>, Status> {
        let req = request.into_inner();
        let command = LockCommand::Release {
            name: req.name,
            holder: req.holder,
            token: req.token,
        };
        match self.node.propose(command).await? {
            LockReply::Released { token } => Ok(GrpcResponse::new(ReleaseReply { token })),
            other => Err(unexpected("lock release", &other)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get(
        &self,
        request: Request<GetLockRequest>,
    ) -> Result<GrpcResponse<LockInfo>, Status> {
        let req = request.into_inner();
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        match state.lock(&req.name) {
            Some(l) => Ok(GrpcResponse::new(lock_info(l, state.time_ms()))),
            None => Err(errors::not_found(
                "lock",
                &req.name,
                format!("lock {} is not held and has no waiters", req.name),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(
        &self,
        request: Request<ListLocksRequest>,
    ) -> Result<GrpcResponse<ListLocksReply>, Status> {
        let req = request.into_inner();
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        let now_ms = state.time_ms();
        let locks = state
            .locks()
            .filter(|l| l.name.starts_with(&req.prefix))
            .map(|l| lock_info(l, now_ms))
            .collect();
        Ok(GrpcResponse::new(ListLocksReply { locks, now_ms }))
    }

    type WatchStream = LockEventStream;

    #[tracing::instrument(level = "debug", skip_all)]
    async fn watch(
        &self,
        request: Request<WatchLocksRequest>,
    ) -> Result<GrpcResponse<LockEventStream>, Status> {
        let mut allowed = crate::server::auth::StreamAuth::open(
            &self.node,
            &request,
            crate::server::auth::StreamAccess::ClusterRead,
        )?;
        let prefix = request.into_inner().prefix;
        let stream = relay(
            self.node.hub.subscribe_locks(),
            "lock",
            "get the locks again and watch anew",
            move |e| {
                if !e.name.starts_with(&prefix) {
                    return Ok(None);
                }
                allowed.recheck()?;
                Ok(Some(event_message(e)))
            },
        );
        Ok(GrpcResponse::new(Box::pin(stream)))
    }
}
