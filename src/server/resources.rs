//! The `Resources` gRPC service: validate, then propose (writes) or read-barrier + read (reads).
//!
//! Limits checked here, before anything is proposed: object size, list page, txn size. The
//! structural rules (names, labels, kinds) are the pure `state::validate_*` functions, which
//! apply re-checks.

use crate::state::ObjectCommand;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};
use tokio_stream::Stream;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::resources_server::Resources;
use crate::proto::v1::*;
use crate::server::auth;
use crate::server::auth::StreamAccess;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::watch::{Delivery, HistoryGap, WatchFilter};
use crate::state::auth::Access;
use crate::state::{self, ObjectKey, Rejection, Resource, Selector, TxnOp};

pub struct ResourcesService {
    node: Arc<Node>,
}

impl ResourcesService {
    pub fn new(node: Arc<Node>) -> Self {
        ResourcesService { node }
    }

    /// Parses and checks an object from the wire against the size limit and the structural rules.
    fn parse_object(&self, json: &str) -> Result<Resource, Status> {
        let max = self.node.config.limits.object_bytes_max;
        if json.len() > max {
            return Err(errors::limit(
                "limits.object_bytes_max",
                format!(
                    "object is {} bytes; the limit is {max} bytes (limits.object_bytes_max)",
                    json.len()
                ),
            ));
        }
        let obj = Resource::from_json(json).map_err(|r| errors::rejection(&r))?;
        state::validate_object(&obj).map_err(|r| errors::rejection(&r))?;
        Ok(obj)
    }

    pub(crate) fn parse_key(kind: &str, namespace: &str, name: &str) -> Result<ObjectKey, Status> {
        let key = ObjectKey {
            kind: kind.into(),
            namespace: if namespace.is_empty() {
                state::DEFAULT_NAMESPACE.into()
            } else {
                namespace.into()
            },
            name: name.into(),
        };
        state::validate_key(&key).map_err(|r| errors::rejection(&r))?;
        Ok(key)
    }

    /// A resource write's fence, from the wire.
    fn fence(f: &Option<Fence>) -> Option<state::Fence> {
        f.as_ref().map(|f| state::Fence {
            lock: f.lock.clone(),
            token: f.token,
        })
    }

    /// An update's precondition: the request's field, else the object's own resourceVersion.
    fn precondition(expected: u64, obj: &Resource) -> Option<u64> {
        match (expected, obj.metadata.resource_version) {
            (0, 0) => None,
            (0, rv) => Some(rv),
            (e, _) => Some(e),
        }
    }

    fn txn_op(&self, op: &TxnOp_) -> Result<TxnOp, Status> {
        Ok(match op {
            txn_op::Op::Create(c) => TxnOp::Create {
                object: self.parse_object(&c.object_json)?,
            },
            txn_op::Op::Update(u) => {
                let object = self.parse_object(&u.object_json)?;
                TxnOp::Update {
                    expected_revision: Self::precondition(u.expected_revision, &object),
                    object,
                }
            }
            txn_op::Op::UpdateStatus(u) => {
                let object = self.parse_object(&u.object_json)?;
                TxnOp::UpdateStatus {
                    expected_revision: Self::precondition(u.expected_revision, &object),
                    object,
                }
            }
            txn_op::Op::Delete(d) => TxnOp::Delete {
                key: Self::parse_key(&d.kind, &d.namespace, &d.name)?,
                expected_revision: (d.expected_revision != 0).then_some(d.expected_revision),
            },
        })
    }

    /// Update and UpdateStatus: the same parsing, a different command.
    async fn update_with(
        &self,
        request: Request<UpdateRequest>,
        command: impl FnOnce(Resource, Option<u64>, Option<state::Fence>) -> ObjectCommand,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let object = self.parse_object(&req.object_json)?;
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Write(&object.metadata.namespace),
        )?;
        let expected_revision = Self::precondition(req.expected_revision, &object);
        let fence = Self::fence(&req.fence);
        self.write_object(command(object, expected_revision, fence))
            .await
    }

    async fn write_object(
        &self,
        command: ObjectCommand,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        match self.node.propose(command).await? {
            state::ObjectReply::Object { object, revision } => Ok(GrpcResponse::new(ObjectReply {
                object_json: object.to_json(),
                revision,
            })),
            other => Err(errors::internal(
                "unexpected response to an object write",
                format!("{other:?}"),
            )),
        }
    }
}

type TxnOp_ = txn_op::Op;

/// Where the next page of a list starts, and the revision every page is read at; opaque to
/// clients (base64 of this as JSON).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct ContinueToken {
    kind: String,
    after: ObjectKey,
    /// The revision of the list's first page; every later page is read as of it, as in
    /// Kubernetes. Absent from tokens made before issue 25: their pages read the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revision: Option<u64>,
}

fn encode_continue(token: &ContinueToken) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(token).unwrap_or_default())
}

fn decode_continue(s: &str, kind: &str) -> Result<ContinueToken, Status> {
    let bad = || {
        errors::invalid(
            "continue_token",
            "not a token returned by a previous List of this kind",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| bad())?;
    let token: ContinueToken = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if token.kind != kind {
        return Err(bad());
    }
    Ok(token)
}

/// What one `List` request reads: which objects, from where, and at which revision.
struct ListQuery<'a> {
    kind: &'a str,
    namespace: Option<&'a str>,
    selector: &'a Selector,
    limit: usize,
    token: Option<ContinueToken>,
}

impl ResourcesService {
    /// The page `q` asks for from `state` (the applied state, read-guarded by the caller), and
    /// the revision it is read at: the current one for a first page (or a token made before
    /// issue 25), else the token's. A page at an earlier revision is the current state with
    /// the hub's later events undone; when the hub no longer holds them all, the list has
    /// expired (OutOfRange, as a watch from a revision no longer kept).
    fn list_page(
        &self,
        state: &state::State,
        q: &ListQuery<'_>,
    ) -> Result<(state::ListPage, u64), Status> {
        let current = state.revision();
        let pinned = (q.token.as_ref()).and_then(|t| Some((&t.after, t.revision?)));
        let Some((after, revision)) = pinned.filter(|(_, revision)| *revision != current) else {
            let after = q.token.as_ref().map(|t| &t.after);
            let page = state.list(q.kind, q.namespace, q.selector, after, q.limit);
            return Ok((page, current));
        };
        if revision > current {
            return Err(errors::unavailable(
                format!(
                    "continue_token: this node has applied up to revision {current}, behind the \
                     list's revision {revision} (a serializable read on a lagging node); retry, \
                     or read linearizable"
                ),
                None,
            ));
        }
        match self.node.hub.events_since(revision, current) {
            Ok(events) => {
                let since = events.iter().map(|e| &**e);
                let page =
                    state.list_as_of(q.kind, q.namespace, q.selector, Some(after), q.limit, since);
                Ok((page, revision))
            }
            Err(HistoryGap::Compacted { oldest }) => {
                let restart = ContinueToken {
                    kind: q.kind.to_string(),
                    after: after.clone(),
                    revision: Some(current),
                };
                Err(errors::continue_expired(
                    current,
                    oldest,
                    &encode_continue(&restart),
                    format!(
                        "continue_token: the list's revision {revision} is older than the kept \
                         history (limits.watch_history, watch_history_bytes; oldest available \
                         {oldest}); start the list again"
                    ),
                ))
            }
            Err(HistoryGap::Behind { revision: told }) => Err(errors::unavailable(
                format!(
                    "continue_token: this node's watch history has reached revision {told}, \
                     behind its applied revision {current}; retry"
                ),
                None,
            )),
        }
    }
}

/// The wire's consistency value (unset: the default, linearizable), or InvalidArgument naming
/// the field.
pub(crate) fn consistency(v: i32) -> Result<Consistency, Status> {
    match Consistency::try_from(v) {
        Ok(Consistency::Unspecified) => Ok(Consistency::Linearizable),
        Ok(c) => Ok(c),
        Err(_) => Err(errors::invalid(
            "consistency",
            format!(
                "unknown value {v}; CONSISTENCY_LINEARIZABLE or CONSISTENCY_SERIALIZABLE \
                 (unset: linearizable)"
            ),
        )),
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

fn watch_event(d: &Delivery) -> WatchEvent {
    match d {
        Delivery::Bookmark(rev) => WatchEvent {
            r#type: EventType::Bookmark as i32,
            revision: *rev,
            object_json: String::new(),
        },
        Delivery::Event(e) => WatchEvent {
            r#type: match e.event_type {
                state::EventType::Added => EventType::Added,
                state::EventType::Modified => EventType::Modified,
                state::EventType::Deleted => EventType::Deleted,
            } as i32,
            revision: e.revision,
            object_json: e.object.to_json(),
        },
    }
}

#[tonic::async_trait]
impl Resources for ResourcesService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn create(
        &self,
        request: Request<CreateRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let object = self.parse_object(&req.object_json)?;
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Write(&object.metadata.namespace),
        )?;
        let fence = Self::fence(&req.fence);
        self.write_object(ObjectCommand::Create { object, fence })
            .await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get(&self, request: Request<GetRequest>) -> Result<GrpcResponse<ObjectReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let key = Self::parse_key(&req.kind, &req.namespace, &req.name)?;
        auth::check(
            &self.node,
            caller.as_ref(),
            Access::Read(Some(&key.namespace)),
        )?;
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        match state.get(&key) {
            Some(obj) => Ok(GrpcResponse::new(ObjectReply {
                object_json: obj.to_json(),
                revision: state.revision(),
            })),
            None => Err(errors::rejection(&Rejection::NotFound { key })),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(&self, request: Request<ListRequest>) -> Result<GrpcResponse<ListReply>, Status> {
        let ns = (!request.get_ref().namespace.is_empty()).then_some(&*request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Read(ns))?;
        let req = request.into_inner();
        if req.kind.is_empty() {
            return Err(errors::invalid("kind", "required"));
        }
        let limits = &self.node.config.limits;
        let limit = match req.limit {
            0 => limits.list_page_default,
            n if n > limits.list_page_max => {
                return Err(errors::limit_with_code(
                    tonic::Code::InvalidArgument,
                    "limits.list_page_max",
                    format!(
                        "limit: {n} is above the largest page, {} (limits.list_page_max)",
                        limits.list_page_max
                    ),
                ))
            }
            n => n,
        };
        let selector: Selector =
            Selector::parse(&req.label_selector).map_err(|r| errors::rejection(&r))?;
        let token = if req.continue_token.is_empty() {
            None
        } else {
            Some(decode_continue(&req.continue_token, &req.kind)?)
        };
        let query = ListQuery {
            kind: &req.kind,
            namespace: (!req.namespace.is_empty()).then_some(req.namespace.as_str()),
            selector: &selector,
            limit: limit as usize,
            token,
        };
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let (page, revision) = self.list_page(&self.node.state(), &query)?;
        Ok(GrpcResponse::new(ListReply {
            objects_json: page.items.iter().map(Resource::to_json).collect(),
            revision,
            continue_token: page
                .next
                .map(|after| {
                    encode_continue(&ContinueToken {
                        kind: req.kind.clone(),
                        after,
                        revision: Some(revision),
                    })
                })
                .unwrap_or_default(),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn update(
        &self,
        request: Request<UpdateRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        self.update_with(request, |object, expected_revision, fence| {
            ObjectCommand::Update {
                object,
                expected_revision,
                fence,
            }
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn update_status(
        &self,
        request: Request<UpdateRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        self.update_with(request, |object, expected_revision, fence| {
            ObjectCommand::UpdateStatus {
                object,
                expected_revision,
                fence,
            }
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let key = Self::parse_key(&req.kind, &req.namespace, &req.name)?;
        auth::check(&self.node, caller.as_ref(), Access::Write(&key.namespace))?;
        let expected_revision = (req.expected_revision != 0).then_some(req.expected_revision);
        let fence = Self::fence(&req.fence);
        self.write_object(ObjectCommand::Delete {
            key,
            expected_revision,
            fence,
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn txn(&self, request: Request<TxnRequest>) -> Result<GrpcResponse<TxnReply>, Status> {
        let caller = auth::caller(&request);
        let req = request.into_inner();
        let max = self.node.config.limits.txn_ops_max;
        if req.ops.is_empty() {
            return Err(errors::invalid("ops", "a txn needs at least one op"));
        }
        if req.ops.len() > max {
            return Err(errors::limit_with_code(
                tonic::Code::InvalidArgument,
                "limits.txn_ops_max",
                format!(
                    "ops: {} ops is above the txn limit of {max} (limits.txn_ops_max)",
                    req.ops.len()
                ),
            ));
        }
        let mut ops = Vec::with_capacity(req.ops.len());
        for (i, op) in req.ops.iter().enumerate() {
            let op = op
                .op
                .as_ref()
                .ok_or_else(|| errors::invalid(&format!("ops[{i}]"), "empty op"))?;
            ops.push(self.txn_op(op).map_err(|s| errors::txn_op(i, s))?);
        }
        let namespaces: std::collections::BTreeSet<String> = ops
            .iter()
            .map(|op| op.key().namespace.to_string())
            .collect();
        for ns in &namespaces {
            auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        }
        let fence = Self::fence(&req.fence);
        match self.node.propose(ObjectCommand::Txn { ops, fence }).await? {
            state::ObjectReply::Txn { objects, revision } => Ok(GrpcResponse::new(TxnReply {
                objects_json: objects.iter().map(Resource::to_json).collect(),
                revision,
            })),
            other => Err(errors::internal(
                "unexpected response to a txn",
                format!("{other:?}"),
            )),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(kind = %request.get_ref().kind, by = %request.get_ref().by))]
    async fn count(
        &self,
        request: Request<CountRequest>,
    ) -> Result<GrpcResponse<CountReply>, Status> {
        let ns = (!request.get_ref().namespace.is_empty()).then_some(&*request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Read(ns))?;
        let req = request.into_inner();
        if req.kind.is_empty() {
            return Err(errors::invalid("kind", "required"));
        }
        let by =
            state::objects::count::CountBy::parse(&req.by).map_err(|r| errors::rejection(&r))?;
        let selector = Selector::parse(&req.label_selector).map_err(|r| errors::rejection(&r))?;
        let namespace = (!req.namespace.is_empty()).then_some(req.namespace.as_str());
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        let counts = state
            .count(&req.kind, namespace, &selector, &by)
            .map_err(|r| errors::rejection(&r))?;
        Ok(GrpcResponse::new(CountReply {
            buckets: counts
                .buckets
                .into_iter()
                .map(|(value, count)| CountBucket { value, count })
                .collect(),
            missing: counts.missing,
            total: counts.total,
            revision: state.revision(),
        }))
    }

    type WatchStream = WatchStream;

    #[tracing::instrument(level = "debug", skip_all)]
    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<GrpcResponse<WatchStream>, Status> {
        let ns =
            (!request.get_ref().namespace.is_empty()).then(|| request.get_ref().namespace.clone());
        let mut allowed = auth::StreamAuth::open(&self.node, &request, StreamAccess::Read(ns))?;
        let req = request.into_inner();
        if req.kind.is_empty() {
            return Err(errors::invalid("kind", "required"));
        }
        let filter = WatchFilter {
            kind: req.kind,
            namespace: (!req.namespace.is_empty()).then_some(req.namespace),
            selector: Selector::parse(&req.label_selector).map_err(|r| errors::rejection(&r))?,
        };
        let hub = self.node.hub.clone();
        let mut reg = hub.register(filter, req.start_revision)?;
        let interval_ms = match req.bookmark_interval_ms {
            0 => self.node.config.limits.bookmark_interval_ms,
            n => u64::from(n).max(10),
        };
        let (out, out_rx) = tokio::sync::mpsc::channel::<Result<WatchEvent, Status>>(16);
        tokio::spawn(async move {
            let id = reg.id;
            let _guard = Unregister {
                hub: hub.clone(),
                id,
            };
            // Every message goes out only if the caller may still read (users or roles may
            // change while the watch is open).
            let send = |message: Result<WatchEvent, Status>, allowed: &mut auth::StreamAuth| {
                let message = allowed.recheck().and(message);
                let end = message.is_err();
                let out = &out;
                async move { out.send(message).await.is_ok() && !end }
            };
            for e in reg.replay.drain(..) {
                if !send(Ok(watch_event(&Delivery::Event(e))), &mut allowed).await {
                    return;
                }
            }
            let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
            tick.tick().await;
            loop {
                let more = tokio::select! {
                    item = reg.rx.recv() => match item {
                        Some(Ok(d)) => send(Ok(watch_event(&d)), &mut allowed).await,
                        Some(Err(status)) => send(Err(status), &mut allowed).await,
                        None => send(Err(errors::unavailable("watch closed by the server", None)), &mut allowed).await,
                    },
                    _ = tick.tick() => match allowed.recheck() {
                        Ok(()) => { hub.bookmark(id); true }
                        Err(status) => send(Err(status), &mut allowed).await,
                    },
                    _ = out.closed() => false,
                };
                if !more {
                    return;
                }
            }
        });
        Ok(GrpcResponse::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out_rx),
        )))
    }
}

/// Removes a watcher from the hub when its stream task ends, however it ends.
struct Unregister {
    hub: Arc<crate::server::watch::WatchHub>,
    id: u64,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        self.hub.unregister(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base64(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// A token made before issue 25 (no revision) still decodes; its pages read the current
    /// state (`list_page`).
    #[test]
    fn a_token_without_a_revision_still_decodes() {
        let old = base64(
            r#"{"kind":"Director","after":{"kind":"Director","namespace":"default","name":"a"}}"#,
        );
        let token = decode_continue(&old, "Director").expect("decodes");
        assert_eq!(
            token,
            ContinueToken {
                kind: "Director".to_string(),
                after: ObjectKey::new("Director", "default", "a"),
                revision: None,
            }
        );
    }

    #[test]
    fn a_token_keeps_its_revision() {
        let token = ContinueToken {
            kind: "Director".to_string(),
            after: ObjectKey::new("Director", "x", "b"),
            revision: Some(42),
        };
        let text = encode_continue(&token);
        assert_eq!(decode_continue(&text, "Director").expect("decodes"), token);
    }

    #[test]
    fn a_foreign_or_broken_token_is_invalid_argument() {
        let token = encode_continue(&ContinueToken {
            kind: "Director".to_string(),
            after: ObjectKey::new("Director", "x", "b"),
            revision: Some(42),
        });
        for (text, kind) in [(token.as_str(), "Other"), ("garbage!", "Director")] {
            let err = decode_continue(text, kind).expect_err("refused");
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
            assert!(err.message().contains("continue_token"), "{err:?}");
        }
    }
}
