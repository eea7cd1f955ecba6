//! The `StatusService` gRPC service (deployments and their status): parse the request into a `DeploymentAction`, run its
//! structural checks, propose it (any node; followers forward), and answer the mirror object.
//! `Status` reads after the barrier the request asks for and answers the seed's JSON.

use crate::state;
use crate::state::DeploymentCommand;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::status_service_server::StatusService;
use crate::proto::v1::*;
use crate::server::auth;
use crate::server::errors;
use crate::server::node::Node;
use crate::server::resources::{consistency, ResourcesService};
use crate::state::auth::Access;
use crate::state::deployments::{
    self, check_action, status_json, AppResource, Bundle, ContextState, DeploymentAction, Header,
    ResourceKey, RsyncStatus, StatusMode, StatusQuery, DEPLOYMENT_KIND,
};
use crate::state::{ObjectKey, DEFAULT_NAMESPACE};

pub struct DeploymentsService {
    node: Arc<Node>,
}

impl DeploymentsService {
    pub fn new(node: Arc<Node>) -> Self {
        DeploymentsService { node }
    }

    async fn act(
        &self,
        namespace: &str,
        name: &str,
        action: DeploymentAction,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let key = ResourcesService::parse_key(DEPLOYMENT_KIND, namespace, name)?;
        let limits = self.node.config.status.limits();
        check_action(&action, &limits).map_err(|r| errors::rejection(&r))?;
        let command = DeploymentCommand {
            key,
            action,
            limits,
        };
        match self.node.propose(command).await? {
            state::ObjectReply::Object { object, revision } => Ok(GrpcResponse::new(ObjectReply {
                object_json: object.to_json(),
                revision,
            })),
            other => Err(errors::internal_message(format!(
                "unexpected response to a deployment command: {other:?}"
            ))),
        }
    }
}

fn invalid(field: &str, rule: impl std::fmt::Display) -> Status {
    errors::invalid(field, rule)
}

/// A JSON object from the wire; empty text is none (null).
fn json_object(field: &str, text: &str) -> Result<serde_json::Value, Status> {
    if text.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(field, format!("not JSON: {e}")))?;
    if !(value.is_object() || value.is_null()) {
        return Err(invalid(field, "must be a JSON object"));
    }
    Ok(value)
}

fn gvk(field: &str, g: &Option<Gvk>) -> Result<deployments::Gvk, Status> {
    let g = g
        .as_ref()
        .ok_or_else(|| invalid(field, "required: Group, Version and Kind"))?;
    Ok(deployments::Gvk::new(&g.group, &g.version, &g.kind))
}

fn rsync_status(field: &str, name: &str) -> Result<RsyncStatus, Status> {
    RsyncStatus::parse(name).ok_or_else(|| {
        invalid(
            field,
            format!(
                "{name:?} is not an rsync-status (Pending, Applied, Failed, Retrying, Terminated)"
            ),
        )
    })
}

/// A request's namespace, empty meaning `default` (as `ResourcesService::parse_key` reads it).
fn namespace_or_default(namespace: &str) -> &str {
    if namespace.is_empty() {
        DEFAULT_NAMESPACE
    } else {
        namespace
    }
}

#[tonic::async_trait]
impl StatusService for DeploymentsService {
    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name))]
    async fn create(
        &self,
        request: Request<CreateDeploymentRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let header = Header {
            project: req.project,
            composite_app: req.composite_app,
            composite_app_version: req.composite_app_version,
            composite_profile: req.composite_profile,
        };
        let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
        self.act(
            &req.namespace,
            &req.name,
            DeploymentAction::Create { header, labels },
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, n = request.get_ref().resources.len()))]
    async fn add_resources(
        &self,
        request: Request<AddDeploymentResourcesRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let mut resources = Vec::with_capacity(req.resources.len());
        for (i, r) in req.resources.into_iter().enumerate() {
            let f = format!("resources[{i}]");
            resources.push(AppResource {
                gvk: gvk(&format!("{f}.gvk"), &r.gvk)?,
                metadata: json_object(&format!("{f}.metadata_json"), &r.metadata_json)?,
                spec: json_object(&format!("{f}.spec_json"), &r.spec_json)?,
                app: r.app,
                cluster: r.cluster,
                name: r.name,
            });
        }
        self.act(
            &req.namespace,
            &req.name,
            DeploymentAction::AddResources { resources },
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, verb = request.get_ref().verb))]
    async fn act(
        &self,
        request: Request<DeploymentActRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let action = match DeploymentVerb::try_from(req.verb) {
            Ok(DeploymentVerb::Approve) => DeploymentAction::Approve,
            Ok(DeploymentVerb::Instantiate) => DeploymentAction::Instantiate,
            Ok(DeploymentVerb::Terminate) => DeploymentAction::Terminate,
            Ok(DeploymentVerb::Delete) => DeploymentAction::Delete,
            _ => {
                return Err(invalid(
                    "verb",
                    "must be APPROVE, INSTANTIATE, TERMINATE or DELETE",
                ))
            }
        };
        DeploymentsService::act(self, &req.namespace, &req.name, action).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, n = request.get_ref().updates.len()))]
    async fn report_rsync(
        &self,
        request: Request<RsyncReportRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let mut updates = Vec::with_capacity(req.updates.len());
        for (i, u) in req.updates.into_iter().enumerate() {
            let f = format!("updates[{i}]");
            let resource =
                match (u.gvk.is_some(), u.resource_name.is_empty()) {
                    (false, true) => None,
                    (true, false) => Some(ResourceKey {
                        gvk: gvk(&format!("{f}.gvk"), &u.gvk)?,
                        name: u.resource_name.as_str().into(),
                    }),
                    _ => return Err(invalid(
                        &f,
                        "give gvk and resource_name together (one resource), or neither (every \
                         resource of the app in the cluster)",
                    )),
                };
            updates.push(deployments::RsyncUpdate {
                status: rsync_status(&format!("{f}.status"), &u.status)?,
                app: u.app,
                cluster: u.cluster,
                resource,
            });
        }
        self.act(
            &req.namespace,
            &req.name,
            DeploymentAction::Rsync { updates },
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, state = %request.get_ref().state))]
    async fn report_context(
        &self,
        request: Request<ContextReportRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let state = ContextState::parse(&req.state).ok_or_else(|| {
            invalid(
                "state",
                format!("{:?} is not an AppContext state", req.state),
            )
        })?;
        self.act(
            &req.namespace,
            &req.name,
            DeploymentAction::Context { state },
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, bundles = request.get_ref().bundles.len()))]
    async fn report_cluster(
        &self,
        request: Request<ClusterReportRequest>,
    ) -> Result<GrpcResponse<ObjectReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Write(ns))?;
        let req = request.into_inner();
        let mut bundles = Vec::with_capacity(req.bundles.len());
        for (i, b) in req.bundles.into_iter().enumerate() {
            let f = format!("bundles[{i}]");
            let mut resources = Vec::with_capacity(b.resources.len());
            for (j, r) in b.resources.into_iter().enumerate() {
                let g = format!("{f}.resources[{j}]");
                resources.push(deployments::ClusterResource {
                    gvk: gvk(&format!("{g}.gvk"), &r.gvk)?,
                    metadata: json_object(&format!("{g}.metadata_json"), &r.metadata_json)?,
                    spec: json_object(&format!("{g}.spec_json"), &r.spec_json)?,
                    status: json_object(&format!("{g}.status_json"), &r.status_json)?,
                    name: r.name,
                });
            }
            bundles.push(Bundle {
                app: b.app,
                cluster: b.cluster,
                kinds: b.kinds.into_iter().collect::<BTreeSet<String>>(),
                resources,
                partial: b.partial,
            });
        }
        self.act(
            &req.namespace,
            &req.name,
            DeploymentAction::Cluster { bundles },
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(name = %request.get_ref().name, output = %request.get_ref().output))]
    async fn status(
        &self,
        request: Request<DeploymentStatusRequest>,
    ) -> Result<GrpcResponse<DeploymentStatusReply>, Status> {
        let ns = namespace_or_default(&request.get_ref().namespace);
        let caller = auth::caller(&request);
        auth::check(&self.node, caller.as_ref(), Access::Read(Some(ns)))?;
        let req = request.into_inner();
        let key: ObjectKey =
            ResourcesService::parse_key(DEPLOYMENT_KIND, &req.namespace, &req.name)?;
        let mode = StatusMode::parse(&req.output).ok_or_else(|| {
            invalid(
                "output",
                format!("{:?} is not one of {}", req.output, StatusMode::NAMES),
            )
        })?;
        let query = StatusQuery {
            mode,
            apps: req.apps,
            clusters: req.clusters,
            resources: req.resources,
            kinds: req.kinds,
        };
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let max = self.node.config.status.query_resources_max;
        let state = self.node.state();
        let d = state.deployment(&key).ok_or_else(|| {
            errors::not_found("deployment", &key, format!("deployment {key} not found"))
        })?;
        let status_json = status_json(&key, d, &query, max).map_err(|r| errors::rejection(&r))?;
        Ok(GrpcResponse::new(DeploymentStatusReply {
            status_json,
            revision: state.revision(),
        }))
    }
}
