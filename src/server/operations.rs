//! The operations capability on the server: the `Operations` gRPC service here, the `Workers`
//! service (`workers.rs`), and the leader's loops (`scheduler.rs`, `sweeper.rs`); and the
//! conversions of operations and workers to the wire they share.
//!
//! Handlers stay thin: a submit gets the server's policy for its verb (`policy`, from the
//! `[operations]` config) and is proposed; reads take the read barrier and read the state; a
//! watch relays this node's operation events. Every decision is the state machine's.

use crate::state::OperationCommand;
use crate::state::OperationReply;
use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::config::OperationsConfig;
use crate::proto::v1::operations_server::Operations;
use crate::proto::v1::*;
use crate::server::auth;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::resources::{consistency, ResourcesService};
use crate::server::watch::relay;
use crate::state::auth::Access;
use crate::state::{
    self, LockMode as StateLockMode, ObjectKey, OpFilter, OpLimits, OpLock, OpPolicy, OpResult,
    OpState, OperationId, Resource,
};

pub mod scheduler;
mod sweeper;
pub mod workers;

pub use scheduler::run_scheduler;
pub use sweeper::run_op_sweeper;

pub struct OperationsService {
    node: Arc<Node>,
}

impl OperationsService {
    pub fn new(node: Arc<Node>) -> Self {
        OperationsService { node }
    }
}

/// The `[operations]` limits as the state machine takes them.
pub fn op_limits(c: &OperationsConfig) -> OpLimits {
    OpLimits {
        active_max: c.active_max,
        per_target_max: c.per_target_max,
        finished_max: c.finished_max,
        params_bytes_max: c.params_bytes_max,
        result_bytes_max: c.result_bytes_max,
        attempts_max: c.attempts_max,
        deadline_ms_max: c.deadline_ms_max,
        workers_max: c.workers_max,
        handles_max: c.handles_max,
        capacity_max: c.capacity_max,
    }
}

/// The server's policy for `verb` on `target`: the target's READ lock for a read-lock verb, its
/// WRITE lock otherwise; the submit's attempts and deadline, or the configured defaults (the
/// verb's own deadline first).
pub fn policy(
    c: &OperationsConfig,
    target: &ObjectKey,
    verb: &str,
    max_attempts: u32,
    deadline_ms: u64,
) -> OpPolicy {
    let mode = match c.read_lock_verbs.iter().any(|v| v == verb) {
        true => StateLockMode::Read,
        false => StateLockMode::Write,
    };
    let deadline_ms = match deadline_ms {
        0 => c
            .verb_deadline_ms_default
            .get(verb)
            .copied()
            .unwrap_or(c.deadline_ms_default),
        d => d,
    };
    OpPolicy {
        lock: Some(OpLock::on_target(target, mode)),
        max_attempts: if max_attempts == 0 {
            c.attempts_default
        } else {
            max_attempts
        },
        deadline_ms: (deadline_ms > 0).then_some(deadline_ms),
        deletes_target: c.delete_verbs.iter().any(|v| v == verb),
    }
}

/// The resource whose lock a submit asks for instead of its target's (`lock_kind`, `lock_name`,
/// in the target's namespace), if any; both or neither must be given.
fn lock_on(req: &SubmitOperationRequest, target: &ObjectKey) -> Result<Option<ObjectKey>, Status> {
    match (req.lock_kind.is_empty(), req.lock_name.is_empty()) {
        (true, true) => Ok(None),
        (false, false) => {
            let key = ObjectKey::new(&req.lock_kind, &target.namespace, &req.lock_name);
            state::objects::validate::validate_key(&key)
                .map_err(|r| errors::invalid("lock_kind/lock_name", r))?;
            Ok(Some(key))
        }
        _ => Err(errors::invalid(
            "lock_kind and lock_name",
            "give both (another resource's lock) or neither (the target's)",
        )),
    }
}

pub fn parse_id(field: &str, text: &str) -> Result<OperationId, Status> {
    text.parse().map_err(|e: String| errors::invalid(field, e))
}

/// Empty text is JSON null; anything else must parse.
pub fn json_or_null(field: &str, text: &str) -> Result<serde_json::Value, Status> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    let value =
        serde_json::from_str(text).map_err(|e| errors::invalid(field, format!("not JSON: {e}")))?;
    state::objects::validate::check_json_depth(field, text).map_err(|r| errors::rejection(&r))?;
    Ok(value)
}

fn json_text(v: &serde_json::Value) -> String {
    if v.is_null() {
        String::new()
    } else {
        v.to_string()
    }
}

pub fn state_to_proto(s: OpState) -> OperationState {
    match s {
        OpState::Queued => OperationState::Queued,
        OpState::Dispatched => OperationState::Dispatched,
        OpState::InProgress => OperationState::InProgress,
        OpState::Aborting => OperationState::Aborting,
        OpState::Succeeded => OperationState::Succeeded,
        OpState::Failed => OperationState::Failed,
        OpState::Aborted => OperationState::Aborted,
    }
}

/// `None` for UNSPECIFIED (any state).
fn state_from_proto(v: i32) -> Result<Option<OpState>, Status> {
    let state = OperationState::try_from(v)
        .map_err(|_| errors::invalid("state", format!("unknown value {v}")))?;
    Ok(OpState::ALL
        .into_iter()
        .find(|s| state_to_proto(*s) == state))
}

fn lock_mode_to_proto(m: StateLockMode) -> i32 {
    match m {
        StateLockMode::Read => LockMode::Read as i32,
        StateLockMode::Write => LockMode::Write as i32,
    }
}

pub fn operation_info(op: &state::Operation) -> OperationInfo {
    let (response_json, error) = match &op.result {
        Some(OpResult::Response(v)) => (json_text(v), String::new()),
        Some(OpResult::Error(e)) => (String::new(), e.clone()),
        None => (String::new(), String::new()),
    };
    let lock = op.policy.lock.as_ref();
    OperationInfo {
        id: op.id.to_string(),
        idempotency_key: op.idempotency_key.clone().unwrap_or_default(),
        kind: op.target.kind.to_string(),
        namespace: op.target.namespace.to_string(),
        name: op.target.name.to_string(),
        target_uid: op.target_uid.clone(),
        verb: op.verb.clone(),
        params_json: json_text(&op.params),
        policy: Some(OperationPolicy {
            lock: lock.map(|l| l.name.clone()).unwrap_or_default(),
            lock_mode: lock.map_or(0, |l| lock_mode_to_proto(l.mode)),
            max_attempts: op.policy.max_attempts,
            deadline_ms: op.policy.deadline_ms.unwrap_or(0),
            deletes_target: op.policy.deletes_target,
        }),
        state: state_to_proto(op.state) as i32,
        attempt: op.attempt,
        worker: op.worker.clone().unwrap_or_default(),
        epoch: op.epoch,
        submitted_ms: op.submitted_ms,
        deadline_at_ms: op.deadline_at_ms.unwrap_or(0),
        transitions: op
            .transitions
            .iter()
            .map(|t| OperationTransition {
                state: state_to_proto(t.state) as i32,
                time_ms: t.time_ms,
                attempt: t.attempt,
                worker: t.worker.clone().unwrap_or_default(),
            })
            .collect(),
        response_json,
        error,
        fence: op.fence().map(|f| Fence {
            lock: f.lock,
            token: f.token,
        }),
    }
}

/// An `Operation` reply to a command.
pub fn operation_reply(
    what: &str,
    r: OperationReply,
) -> Result<GrpcResponse<OperationInfo>, Status> {
    match r {
        OperationReply::Operation { operation } => {
            Ok(GrpcResponse::new(operation_info(&operation)))
        }
        other => Err(errors::internal(
            what,
            format!("unexpected response {other:?}"),
        )),
    }
}

/// The target filter of a list or watch: kind and name, or nothing.
fn target_filter(kind: &str, namespace: &str, name: &str) -> Result<Option<ObjectKey>, Status> {
    if kind.is_empty() && namespace.is_empty() && name.is_empty() {
        return Ok(None);
    }
    ResourcesService::parse_key(kind, namespace, name).map(Some)
}

type OpStream = Pin<Box<dyn Stream<Item = Result<OperationInfo, Status>> + Send>>;

impl OperationsService {
    /// The namespace of an operation's target, if this node has it.
    fn namespace_of(&self, id: OperationId) -> Option<String> {
        let state = self.node.state();
        state
            .operation(id)
            .map(|op| op.target.namespace.to_string())
    }

    fn parse_create(&self, json: &str) -> Result<Option<Resource>, Status> {
        if json.trim().is_empty() {
            return Ok(None);
        }
        let max = self.node.config.limits.object_bytes_max;
        if json.len() > max {
            return Err(errors::limit(
                "limits.object_bytes_max",
                format!(
                    "create_object_json is {} bytes; the limit is {max} bytes \
                     (limits.object_bytes_max)",
                    json.len()
                ),
            ));
        }
        let obj = Resource::from_json(json).map_err(|r| errors::rejection(&r))?;
        state::validate_object(&obj).map_err(|r| errors::rejection(&r))?;
        Ok(Some(obj))
    }
}

#[tonic::async_trait]
impl Operations for OperationsService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn submit(
        &self,
        request: Request<SubmitOperationRequest>,
    ) -> Result<GrpcResponse<SubmitOperationReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let target = ResourcesService::parse_key(&req.kind, &req.namespace, &req.name)?;
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Write(&target.namespace),
        )?;
        let config = self.node.config.operations();
        let mut policy = policy(
            config,
            &target,
            &req.verb,
            req.max_attempts,
            req.deadline_ms,
        );
        if let Some(lock) = policy.lock.as_mut() {
            if let Some(key) = lock_on(&req, &target)? {
                lock.name = key.to_string();
            }
        }
        let command = OperationCommand::Submit {
            params: json_or_null("params_json", &req.params_json)?,
            idempotency_key: (!req.idempotency_key.is_empty()).then_some(req.idempotency_key),
            create: self.parse_create(&req.create_object_json)?,
            target,
            verb: req.verb,
            policy,
            limits: op_limits(config),
        };
        match self.node.propose(command).await? {
            OperationReply::Submitted { operation, created } => {
                Ok(GrpcResponse::new(SubmitOperationReply {
                    operation: Some(operation_info(&operation)),
                    created,
                }))
            }
            other => Err(errors::internal(
                "operation submit",
                format!("unexpected response {other:?}"),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get(
        &self,
        request: Request<GetOperationRequest>,
    ) -> Result<GrpcResponse<OperationInfo>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let id = parse_id("id", &req.id)?;
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        match state.operation(id) {
            Some(op) => {
                let ns = Some(op.target.namespace.as_str());
                auth::check(&self.node, caller.as_ref(), Access::Read(ns))?;
                Ok(GrpcResponse::new(operation_info(op)))
            }
            None => Err(errors::rejection(&state::Rejection::OperationNotFound {
                id,
            })),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(
        &self,
        request: Request<ListOperationsRequest>,
    ) -> Result<GrpcResponse<ListOperationsReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let limits = &self.node.config.limits;
        let limit = match req.limit {
            0 => limits.list_page_default,
            n if n > limits.list_page_max => {
                return Err(errors::limit_with_code(
                    tonic::Code::InvalidArgument,
                    "limits.list_page_max",
                    format!(
                        "limit: {n} is more than limits.list_page_max = {}",
                        limits.list_page_max
                    ),
                ))
            }
            n => n,
        };
        let filter = OpFilter {
            state: state_from_proto(req.state)?,
            target: target_filter(&req.kind, &req.namespace, &req.name)?,
            worker: (!req.worker.is_empty()).then_some(req.worker),
        };
        let ns = filter.target.as_ref().map(|t| t.namespace.as_str());
        auth::check(&self.node, caller.as_ref(), Access::Read(ns))?;
        let after = match req.continue_token.as_str() {
            "" => None,
            t => Some(parse_id("continue_token", t)?),
        };
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        let page_len = usize::try_from(limit).unwrap_or(usize::MAX);
        // One more than the page says whether there is a next one.
        let mut ops = state.operations(&filter, after, page_len.saturating_add(1));
        let more = ops.len() > page_len;
        ops.truncate(page_len);
        let continue_token = match (more, ops.last()) {
            (true, Some(last)) => last.id.to_string(),
            _ => String::new(),
        };
        Ok(GrpcResponse::new(ListOperationsReply {
            operations: ops.into_iter().map(operation_info).collect(),
            continue_token,
            now_ms: state.time_ms(),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn abort(
        &self,
        request: Request<AbortOperationRequest>,
    ) -> Result<GrpcResponse<OperationInfo>, Status> {
        let caller = auth::caller(&request);
        let id = parse_id("id", &request.into_inner().id)?;
        // The operation's namespace decides; one this node has not applied yet is looked up
        // again after the read barrier (an unknown one is refused by apply as not found).
        let mut namespace = self.namespace_of(id);
        if namespace.is_none() {
            self.node.read_barrier(Consistency::Linearizable).await?;
            namespace = self.namespace_of(id);
        }
        if let Some(ns) = namespace {
            auth::check(&self.node, caller.as_ref(), Access::Write(&ns))?;
        }
        let command = OperationCommand::Abort {
            id,
            limits: op_limits(self.node.config.operations()),
        };
        operation_reply("operation abort", self.node.propose(command).await?)
    }

    type WatchStream = OpStream;

    #[tracing::instrument(level = "debug", skip_all)]
    async fn watch(
        &self,
        request: Request<WatchOperationsRequest>,
    ) -> Result<GrpcResponse<OpStream>, Status> {
        let req = request.get_ref();
        let filter = OpFilter {
            state: None,
            target: target_filter(&req.kind, &req.namespace, &req.name)?,
            worker: (!req.worker.is_empty()).then(|| req.worker.clone()),
        };
        let ns = filter.target.as_ref().map(|t| t.namespace.to_string());
        let mut allowed =
            auth::StreamAuth::open(&self.node, &request, auth::StreamAccess::Read(ns))?;
        let stream = relay(
            self.node.hub.subscribe_ops(),
            "operation",
            "list the operations again and watch anew",
            move |e| {
                if !filter.matches(&e.operation) {
                    return Ok(None);
                }
                allowed.recheck()?;
                Ok(Some(operation_info(&e.operation)))
            },
        );
        Ok(GrpcResponse::new(Box::pin(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_follows_the_config_and_the_submit() {
        let config = OperationsConfig::default();
        let target = ObjectKey::new("Director", "default", "d1");
        let create = policy(&config, &target, "create", 0, 0);
        let lock = create.lock.clone().expect("a lock");
        assert_eq!(
            (lock.name.as_str(), lock.mode),
            ("Director/default/d1", StateLockMode::Write)
        );
        assert_eq!(create.max_attempts, config.attempts_default);
        assert_eq!(create.deadline_ms, Some(config.deadline_ms_default));
        assert!(!create.deletes_target);
        let backup = policy(&config, &target, "backup", 5, 60_000);
        assert_eq!(backup.lock.expect("a lock").mode, StateLockMode::Read);
        assert_eq!((backup.max_attempts, backup.deadline_ms), (5, Some(60_000)));
        assert!(policy(&config, &target, "delete", 0, 0).deletes_target);
        let no_deadline = OperationsConfig {
            deadline_ms_default: 0,
            ..OperationsConfig::default()
        };
        assert_eq!(
            policy(&no_deadline, &target, "update", 0, 0).deadline_ms,
            None
        );
        let per_verb = OperationsConfig {
            verb_deadline_ms_default: [("backup".to_string(), 3_600_000), ("bind".to_string(), 0)]
                .into(),
            ..OperationsConfig::default()
        };
        let deadline = |verb, asked| policy(&per_verb, &target, verb, 0, asked).deadline_ms;
        assert_eq!(deadline("backup", 0), Some(3_600_000));
        assert_eq!(
            deadline("backup", 5_000),
            Some(5_000),
            "the submit's own wins"
        );
        assert_eq!(deadline("bind", 0), None, "0: no deadline for that verb");
        assert_eq!(deadline("create", 0), Some(per_verb.deadline_ms_default));
    }

    #[test]
    fn every_state_maps_to_the_wire_and_back() {
        for s in OpState::ALL {
            let wire = state_to_proto(s) as i32;
            assert_eq!(state_from_proto(wire).expect("known"), Some(s));
        }
        assert_eq!(state_from_proto(0).expect("unspecified"), None);
        assert_eq!(
            state_from_proto(99).expect_err("unknown").code(),
            tonic::Code::InvalidArgument
        );
        assert!(parse_id("id", "op-0").is_err());
        assert_eq!(parse_id("id", "op-17").expect("id"), OperationId(17));
    }
}
