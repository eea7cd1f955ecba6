//! The `LeaseService` gRPC service (Boskos' API on the replicated pool): writes are structurally checked
//! and proposed (any node; followers forward), reads come after the barrier asked for. Also the
//! leader's reaper, which proposes a `Reset` of the leases whose state's expiry passed.

use crate::state::PoolCommand;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::lease_service_server::LeaseService;
use crate::proto::v1::*;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::resources::consistency;
use crate::server::wait::{Wait, Waited};
use crate::state::objects::count::CountBy;
use crate::state::pools::{
    check_pool_action, ClaimView, DynamicPool, PoolAction, PoolEntry, PoolEvent, PoolView,
    VirtualConfig, POOL_KIND,
};
use crate::state::{self, Response, Selector, State};

mod mason;
mod reaper;

pub use mason::run_mason;
pub use reaper::run_reaper;

pub struct PoolsService {
    node: Arc<Node>,
}

impl PoolsService {
    pub fn new(node: Arc<Node>) -> Self {
        PoolsService { node }
    }

    async fn propose(&self, action: PoolAction) -> Result<(Vec<PoolResource>, u64), Status> {
        check_pool_action(&action).map_err(|r| errors::rejection(&r))?;
        let command = PoolCommand {
            action,
            grace_ms: self.node.term_grace_ms(),
        };
        match self.node.propose(command).await? {
            state::ObjectReply::Object { object, revision } => Ok((vec![info(&object)], revision)),
            state::ObjectReply::Txn { objects, revision } => {
                Ok((objects.iter().map(info).collect(), revision))
            }
        }
    }

    async fn propose_one(
        &self,
        action: PoolAction,
    ) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let (resources, revision) = self.propose(action).await?;
        // A virtual resource comes first, the resources leased with it after.
        let mut resources = resources.into_iter();
        Ok(GrpcResponse::new(PoolResourceReply {
            resource: resources.next(),
            revision,
            leased: resources.collect(),
        }))
    }
}

fn info(object: &state::Resource) -> PoolResource {
    let v = PoolView::of(object).unwrap_or_default();
    PoolResource {
        name: object.metadata.name.to_string(),
        r#type: v.rtype,
        state: v.state,
        owner: v.owner,
        user_data: v.user_data.into_iter().collect(),
        last_update_ms: v.last_update_ms,
        request_id: v.request_id,
        to_be_deleted: v.to_be_deleted,
        expiry_ms: v.expiry_ms.into_iter().collect(),
        parent: v.parent,
    }
}

/// The reply for `object` from `state`: it, and the resources leased with it if it is virtual.
fn reply_from(state: &State, object: &state::Resource) -> PoolResourceReply {
    let leased = state.pool_leased(object).iter().map(|o| info(o)).collect();
    PoolResourceReply {
        resource: Some(info(object)),
        revision: state.revision(),
        leased,
    }
}

/// `type=T` (and state, owner) as a selector over the labels; empty parts are left out.
fn selector(rtype: &str, state: &str, owner: &str) -> Result<Selector, Status> {
    let parts: Vec<String> = [("type", rtype), ("state", state), ("owner", owner)]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    Selector::parse(&parts.join(",")).map_err(|r| errors::rejection(&r))
}

/// Aborted, POOL_WAIT_EXPIRED: the acquire's wait ended without a lease.
fn not_granted(claim: &ClaimView, wait: Duration) -> Status {
    errors::pool_wait_expired(
        &claim.rtype,
        wait,
        format!(
            "no free resource of type {} in state {} within {}",
            claim.rtype,
            claim.state,
            humantime::format_duration(wait)
        ),
    )
}

impl PoolsService {
    /// Waits up to `wait` for the grant of `name`'s claim; then gives up (the lease, if it was
    /// granted at the last moment, is answered rather than lost).
    async fn wait_for_grant(
        &self,
        events: tokio::sync::broadcast::Receiver<state::pools::PoolEvent>,
        name: String,
        claim: ClaimView,
        wait: Duration,
    ) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let cancel = |release| PoolCommand {
            action: PoolAction::CancelWait {
                claim: name.clone(),
                owner: claim.owner.clone(),
                request_id: claim.request_id.clone(),
                state: claim.state.clone(),
                release,
            },
            grace_ms: 0,
        };
        let waiting = Wait {
            events,
            on_drop: cancel(true).into(),
            at_deadline: cancel(false).into(),
            what: "pool wait",
            wait,
        };
        let on_event = |e: &PoolEvent| match e {
            PoolEvent::Claim { claim: c, resource } if *c == name => Some(match resource {
                Some(_) => self.lease_of(&claim),
                None => Err(not_granted(&claim, wait)),
            }),
            _ => None,
        };
        // Missed events: ask the state where this wait stands.
        let on_lagged = || {
            let state = self.node.state();
            if state
                .pools()
                .claim_by_request(&claim.owner, &claim.request_id)
                .is_some()
            {
                return None;
            }
            drop(state);
            Some(self.lease_of(&claim).map_err(|_| not_granted(&claim, wait)))
        };
        match waiting.run(&self.node, on_event, on_lagged).await? {
            Waited::Answered(answer) => answer,
            Waited::TimedOut(Response::Rejected(r)) => Err(errors::rejection(&r)),
            Waited::TimedOut(Response::Objects(state::ObjectReply::Txn { objects, .. })) => {
                match objects.iter().find(|o| o.kind == POOL_KIND) {
                    Some(o) => Ok(GrpcResponse::new(reply_from(&self.node.state(), o))),
                    None => Err(not_granted(&claim, wait)),
                }
            }
            Waited::TimedOut(_) => Err(not_granted(&claim, wait)),
        }
    }

    /// The lease `claim`'s waiter holds now, from this node's state.
    fn lease_of(&self, claim: &ClaimView) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let state = self.node.state();
        let name = state
            .pools()
            .by_request(&claim.owner, &claim.request_id)
            .ok_or_else(|| not_granted(claim, Duration::ZERO))?;
        let key = state::ObjectKey::new(POOL_KIND, state::DEFAULT_NAMESPACE, name);
        let object = state
            .get(&key)
            .ok_or_else(|| not_granted(claim, Duration::ZERO))?;
        Ok(GrpcResponse::new(reply_from(&state, object)))
    }
}

#[tonic::async_trait]
impl LeaseService for PoolsService {
    #[tracing::instrument(level = "debug", skip_all, fields(r#type = %request.get_ref().r#type, owner = %request.get_ref().owner, wait_ms = request.get_ref().wait_ms))]
    async fn acquire(
        &self,
        request: Request<PoolAcquireRequest>,
    ) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let r = request.into_inner();
        let action = PoolAction::Acquire {
            rtype: r.r#type.clone(),
            state: r.state.clone(),
            dest: r.dest,
            owner: r.owner.clone(),
            request_id: r.request_id,
            wait_ms: r.wait_ms,
        };
        if r.wait_ms == 0 {
            return self.propose_one(action).await;
        }
        check_pool_action(&action).map_err(|r| errors::rejection(&r))?;
        // Subscribed before proposing, so the grant cannot be missed.
        let events = self.node.hub.subscribe_pools();
        let command = PoolCommand {
            action,
            grace_ms: self.node.term_grace_ms(),
        };
        let (object, revision, leased) = match self.node.propose(command).await? {
            state::ObjectReply::Object { object, revision } => (object, revision, Vec::new()),
            // A virtual resource, and the resources leased with it.
            state::ObjectReply::Txn {
                mut objects,
                revision,
            } if !objects.is_empty() => {
                let object = objects.remove(0);
                (object, revision, objects.iter().map(info).collect())
            }
            other => {
                return Err(errors::internal_message(format!(
                    "unexpected response to an acquire: {other:?}"
                )))
            }
        };
        let Some(claim) = ClaimView::of(&object) else {
            return Ok(GrpcResponse::new(PoolResourceReply {
                resource: Some(info(&object)),
                revision,
                leased,
            }));
        };
        let wait = Duration::from_millis(r.wait_ms);
        self.wait_for_grant(events, object.metadata.name.to_string(), claim, wait)
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(owner = %request.get_ref().owner, n = request.get_ref().names.len()))]
    async fn acquire_by_state(
        &self,
        request: Request<PoolAcquireByStateRequest>,
    ) -> Result<GrpcResponse<PoolResourcesReply>, Status> {
        let r = request.into_inner();
        let (resources, revision) = self
            .propose(PoolAction::AcquireByState {
                state: r.state,
                dest: r.dest,
                owner: r.owner,
                names: r.names,
            })
            .await?;
        Ok(GrpcResponse::new(PoolResourcesReply {
            resources,
            revision,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, owner = %request.get_ref().owner))]
    async fn update(
        &self,
        request: Request<PoolUpdateRequest>,
    ) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let r = request.into_inner();
        self.propose_one(PoolAction::Update {
            name: r.name,
            owner: r.owner,
            state: r.state,
            user_data: r.user_data.into_iter().collect(),
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, owner = %request.get_ref().owner))]
    async fn release(
        &self,
        request: Request<PoolReleaseRequest>,
    ) -> Result<GrpcResponse<PoolResourceReply>, Status> {
        let r = request.into_inner();
        self.propose_one(PoolAction::Release {
            name: r.name,
            owner: r.owner,
            dest: r.dest,
        })
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(n = request.get_ref().resources.len()))]
    async fn sync(
        &self,
        request: Request<PoolSyncRequest>,
    ) -> Result<GrpcResponse<PoolResourcesReply>, Status> {
        let r = request.into_inner();
        let entries = r
            .resources
            .into_iter()
            .map(|e| PoolEntry {
                name: e.name,
                rtype: e.r#type,
                state: e.state,
            })
            .collect();
        let dynamic = r
            .dynamic
            .into_iter()
            .map(|d| DynamicPool {
                rtype: d.r#type,
                state: d.state,
                min_count: d.min_count,
                max_count: d.max_count,
                lifespan_ms: d.lifespan_ms,
                expiry_ms: BTreeMap::new(),
            })
            .collect();
        let expiry_ms: BTreeMap<String, BTreeMap<String, u64>> = r
            .expiry
            .into_iter()
            .map(|(t, e)| (t, e.expiry_ms.into_iter().collect()))
            .collect();
        let (resources, revision) = self
            .propose(PoolAction::Sync {
                entries,
                expiry_ms,
                dynamic,
            })
            .await?;
        Ok(GrpcResponse::new(PoolResourcesReply {
            resources,
            revision,
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(n = request.get_ref().configs.len()))]
    async fn sync_virtual(
        &self,
        request: Request<PoolSyncVirtualRequest>,
    ) -> Result<GrpcResponse<PoolSyncVirtualReply>, Status> {
        let configs = request
            .into_inner()
            .configs
            .into_iter()
            .map(|c| VirtualConfig {
                name: c.name,
                needs: c.needs.into_iter().collect(),
                config_type: c.config_type,
                content: c.config_content,
            })
            .collect();
        let action = PoolAction::SyncVirtual { configs };
        check_pool_action(&action).map_err(|r| errors::rejection(&r))?;
        let command = PoolCommand {
            action,
            grace_ms: self.node.term_grace_ms(),
        };
        match self.node.propose(command).await? {
            state::ObjectReply::Txn { objects, revision } => {
                Ok(GrpcResponse::new(PoolSyncVirtualReply {
                    changed: u32::try_from(objects.len()).unwrap_or(u32::MAX),
                    revision,
                }))
            }
            other => Err(errors::internal_message(format!(
                "unexpected response to a virtual config sync: {other:?}"
            ))),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(
        &self,
        request: Request<PoolListRequest>,
    ) -> Result<GrpcResponse<PoolResourcesReply>, Status> {
        let r = request.into_inner();
        let selector = selector(&r.r#type, &r.state, &r.owner)?;
        self.node.read_barrier(consistency(r.consistency)?).await?;
        let state = self.node.state();
        let page = state.list(POOL_KIND, None, &selector, None, 0);
        Ok(GrpcResponse::new(PoolResourcesReply {
            resources: page.items.iter().map(info).collect(),
            revision: state.revision(),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(r#type = %request.get_ref().r#type))]
    async fn metrics(
        &self,
        request: Request<PoolMetricsRequest>,
    ) -> Result<GrpcResponse<PoolMetricsReply>, Status> {
        let r = request.into_inner();
        let selector = selector(&r.r#type, "", "")?;
        self.node.read_barrier(consistency(r.consistency)?).await?;
        let state = self.node.state();
        let count = |label: &str| {
            state
                .count(
                    POOL_KIND,
                    None,
                    &selector,
                    &CountBy::Label(label.to_string()),
                )
                .map_err(|r| errors::rejection(&r))
        };
        let by_state = count("state")?;
        let by_owner = count("owner")?;
        Ok(GrpcResponse::new(PoolMetricsReply {
            r#type: r.r#type,
            current: by_state.buckets.into_iter().collect(),
            owners: by_owner.buckets.into_iter().collect(),
            total: by_state.total,
            revision: state.revision(),
        }))
    }
}
