//! The `StatusService` calls of `Client` (deployments and their status). Create, add-resources, the user's steps and the
//! reports are writes (repeated at another node only when the request provably never left this
//! process); `deployment_status` is a read. The request messages are the proto's own: reporters
//! build them from what they see.

use std::future::Future;

use crate::client::Transport;
use serde_json::Value;
use tonic::Status;

use super::{parse_object, request, Client, Consistency, Retry};
use crate::proto::v1 as pb;
use crate::proto::v1::status_service_client::StatusServiceClient as DeploymentsClient;

pub use crate::proto::v1::DeploymentVerb;

/// A status answer: the seed's JSON and the revision it was read at.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentStatus {
    pub status: Value,
    /// The server's text, in its key order (the seed's).
    pub text: String,
    pub revision: u64,
}

/// The Deployments stub on `ch`.
type Stub = DeploymentsClient<Transport>;

impl Client {
    /// A Deployments write (`rpc` on a fresh stub with `msg`): answers the mirror object.
    async fn deployment_write<M, F, Fut>(&self, msg: M, rpc: F) -> Result<Value, Status>
    where
        M: Clone,
        F: Fn(Stub, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<pb::ObjectReply>, Status>>,
    {
        let reply = self
            .call(Retry::Write, |ch, t| {
                rpc(Stub::new(ch), request(msg.clone(), t))
            })
            .await?;
        parse_object(&reply.object_json)
    }

    /// Creates a deployment (user state Created); answers its mirror object.
    pub async fn deployment_create(
        &self,
        msg: pb::CreateDeploymentRequest,
    ) -> Result<Value, Status> {
        self.deployment_write(msg, |mut c, r| async move { c.create(r).await })
            .await
    }

    /// Defines AppContext resources (before instantiating); answers the mirror object.
    pub async fn deployment_add_resources(
        &self,
        msg: pb::AddDeploymentResourcesRequest,
    ) -> Result<Value, Status> {
        self.deployment_write(msg, |mut c, r| async move { c.add_resources(r).await })
            .await
    }

    /// Approve, instantiate, terminate or delete; answers the mirror object (as deleted, for a
    /// delete).
    pub async fn deployment_act(
        &self,
        namespace: &str,
        name: &str,
        verb: DeploymentVerb,
    ) -> Result<Value, Status> {
        let msg = pb::DeploymentActRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
            verb: verb as i32,
        };
        self.deployment_write(msg, |mut c, r| async move { c.act(r).await })
            .await
    }

    /// rsync-status changes, applied together or not at all.
    pub async fn deployment_report_rsync(
        &self,
        msg: pb::RsyncReportRequest,
    ) -> Result<Value, Status> {
        self.deployment_write(msg, |mut c, r| async move { c.report_rsync(r).await })
            .await
    }

    /// rsync moves the AppContext itself (`state`: an AppContext state name).
    pub async fn deployment_report_context(
        &self,
        namespace: &str,
        name: &str,
        state: &str,
    ) -> Result<Value, Status> {
        let msg = pb::ContextReportRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
            state: state.to_string(),
        };
        self.deployment_write(msg, |mut c, r| async move { c.report_context(r).await })
            .await
    }

    /// ResourceBundleStates, applied together or not at all.
    pub async fn deployment_report_cluster(
        &self,
        msg: pb::ClusterReportRequest,
    ) -> Result<Value, Status> {
        self.deployment_write(msg, |mut c, r| async move { c.report_cluster(r).await })
            .await
    }

    /// The status query (`msg.consistency` is set from `consistency`).
    pub async fn deployment_status(
        &self,
        mut msg: pb::DeploymentStatusRequest,
        consistency: Consistency,
    ) -> Result<DeploymentStatus, Status> {
        msg.consistency = consistency as i32;
        let reply = self
            .call(Retry::Read, |ch, t| {
                let msg = msg.clone();
                async move {
                    DeploymentsClient::new(ch)
                        .max_decoding_message_size(super::MAX_REPLY_BYTES)
                        .status(request(msg, t))
                        .await
                }
            })
            .await?;
        let status = serde_json::from_str(&reply.status_json).map_err(|e| {
            Status::internal(format!("the server sent a status that is not JSON: {e}"))
        })?;
        Ok(DeploymentStatus {
            status,
            text: reply.status_json,
            revision: reply.revision,
        })
    }
}
