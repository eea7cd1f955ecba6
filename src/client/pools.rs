//! The `Pools` service calls of `Client` (Boskos' API). Acquire, acquire-by-state, update,
//! release and sync are writes (repeated at another node only when the request provably never
//! left this process: pass a `request_id` to Acquire to make a retry after an ambiguous failure
//! answer the same lease); list and metrics are reads.

use std::future::Future;
use std::time::Duration;

use crate::client::Transport;
use tonic::Status;

use super::{request, Client, Consistency, Retry};
use crate::proto::v1 as pb;
use crate::proto::v1::lease_service_client::LeaseServiceClient as PoolsClient;

pub use crate::proto::v1::{PoolMetricsReply, PoolResource, PoolResourceReply, PoolResourcesReply};

/// The LeaseService stub on `ch`.
type Stub = PoolsClient<Transport>;

impl Client {
    /// One LeaseService call (`rpc` on a fresh stub with `msg`), retried as `retry` allows.
    async fn pool_call<M, T, F, Fut>(&self, retry: Retry, msg: M, rpc: F) -> Result<T, Status>
    where
        M: Clone,
        F: Fn(Stub, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call(retry, |ch, t| rpc(Stub::new(ch), request(msg.clone(), t)))
            .await
    }

    /// Leases the oldest-updated unowned resource of `rtype` in `state`, moving it to `dest`.
    /// NotFound when there is none.
    pub async fn pool_acquire(
        &self,
        rtype: &str,
        state: &str,
        dest: &str,
        owner: &str,
        request_id: &str,
    ) -> Result<PoolResourceReply, Status> {
        self.pool_acquire_wait(rtype, state, dest, owner, request_id, Duration::ZERO)
            .await
    }

    /// `pool_acquire` that waits up to `wait` in a fair queue when nothing is free (Aborted,
    /// reason POOL_WAIT_EXPIRED, after it). The client's request timeout must be longer than
    /// `wait`.
    pub async fn pool_acquire_wait(
        &self,
        rtype: &str,
        state: &str,
        dest: &str,
        owner: &str,
        request_id: &str,
        wait: Duration,
    ) -> Result<PoolResourceReply, Status> {
        let msg = pb::PoolAcquireRequest {
            r#type: rtype.to_string(),
            state: state.to_string(),
            dest: dest.to_string(),
            owner: owner.to_string(),
            request_id: request_id.to_string(),
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        self.pool_call(
            Retry::Write,
            msg,
            |mut c, r| async move { c.acquire(r).await },
        )
        .await
    }

    /// Leases every named resource (each unowned, in `state`), or none.
    pub async fn pool_acquire_by_state(
        &self,
        msg: pb::PoolAcquireByStateRequest,
    ) -> Result<PoolResourcesReply, Status> {
        self.pool_call(Retry::Write, msg, |mut c, r| async move {
            c.acquire_by_state(r).await
        })
        .await
    }

    /// The owner's heartbeat (`state`: the current one); user data merges.
    pub async fn pool_update(
        &self,
        msg: pb::PoolUpdateRequest,
    ) -> Result<PoolResourceReply, Status> {
        self.pool_call(
            Retry::Write,
            msg,
            |mut c, r| async move { c.update(r).await },
        )
        .await
    }

    /// Gives a lease back, moving the resource to `dest`.
    pub async fn pool_release(
        &self,
        name: &str,
        owner: &str,
        dest: &str,
    ) -> Result<PoolResourceReply, Status> {
        let msg = pb::PoolReleaseRequest {
            name: name.to_string(),
            owner: owner.to_string(),
            dest: dest.to_string(),
        };
        self.pool_call(
            Retry::Write,
            msg,
            |mut c, r| async move { c.release(r).await },
        )
        .await
    }

    /// Makes the pool hold exactly `msg.resources`.
    pub async fn pool_sync(&self, msg: pb::PoolSyncRequest) -> Result<PoolResourcesReply, Status> {
        self.pool_call(Retry::Write, msg, |mut c, r| async move { c.sync(r).await })
            .await
    }

    /// Makes the virtual resource configs (Mason's) exactly `msg.configs`.
    pub async fn pool_sync_virtual(
        &self,
        msg: pb::PoolSyncVirtualRequest,
    ) -> Result<pb::PoolSyncVirtualReply, Status> {
        self.pool_call(Retry::Write, msg, |mut c, r| async move {
            c.sync_virtual(r).await
        })
        .await
    }

    /// Pool resources of a type, state and owner (empty: any), in name order.
    pub async fn pool_list(
        &self,
        rtype: &str,
        state: &str,
        owner: &str,
        consistency: Consistency,
    ) -> Result<PoolResourcesReply, Status> {
        let msg = pb::PoolListRequest {
            r#type: rtype.to_string(),
            state: state.to_string(),
            owner: owner.to_string(),
            consistency: consistency as i32,
        };
        self.pool_call(Retry::Read, msg, |mut c, r| async move { c.list(r).await })
            .await
    }

    /// Resources by state and leases by owner, of `rtype` (empty: every type).
    pub async fn pool_metrics(
        &self,
        rtype: &str,
        consistency: Consistency,
    ) -> Result<PoolMetricsReply, Status> {
        let msg = pb::PoolMetricsRequest {
            r#type: rtype.to_string(),
            consistency: consistency as i32,
        };
        self.pool_call(
            Retry::Read,
            msg,
            |mut c, r| async move { c.metrics(r).await },
        )
        .await
    }
}
