//! The `Auth` service calls of `Client`: whether authentication is on and who the caller is,
//! and users and their roles. Changes are writes (repeated elsewhere only when provably not
//! applied); status, get and list are reads.

use std::future::Future;

use tonic::Status;

use super::{request, Client, Retry};
use crate::client::Transport;
use crate::proto::v1 as pb;
use crate::proto::v1::auth_client::AuthClient;

pub use crate::proto::v1::{AuthStatusReply, UserInfo, UserListReply, UserReply};

type Stub = AuthClient<Transport>;

impl Client {
    async fn auth_call<M, T, F, Fut>(&self, retry: Retry, msg: M, rpc: F) -> Result<T, Status>
    where
        M: Clone,
        F: Fn(Stub, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call(retry, |ch, t| rpc(Stub::new(ch), request(msg.clone(), t)))
            .await
    }

    /// Whether authentication is on, and the caller's user and roles.
    pub async fn auth_status(&self) -> Result<AuthStatusReply, Status> {
        self.auth_call(
            Retry::Read,
            pb::AuthStatusRequest {},
            |mut s, r| async move { s.status(r).await },
        )
        .await
    }

    /// Turns authentication on or off (admin).
    pub async fn auth_enable(&self, enabled: bool) -> Result<AuthStatusReply, Status> {
        let msg = pb::AuthEnableRequest { enabled };
        self.auth_call(
            Retry::Write,
            msg,
            |mut s, r| async move { s.enable(r).await },
        )
        .await
    }

    /// Adds a user with `roles`; the reply's token is its bearer token, shown this once
    /// (none with `no_token`).
    pub async fn user_add(
        &self,
        name: &str,
        roles: &[String],
        no_token: bool,
    ) -> Result<UserReply, Status> {
        let msg = pb::UserAddRequest {
            name: name.to_string(),
            roles: roles.to_vec(),
            no_token,
        };
        self.auth_call(
            Retry::Write,
            msg,
            |mut s, r| async move { s.user_add(r).await },
        )
        .await
    }

    /// One user (linearizable).
    pub async fn user_get(&self, name: &str) -> Result<UserReply, Status> {
        let msg = pb::UserGetRequest {
            name: name.to_string(),
        };
        self.auth_call(
            Retry::Read,
            msg,
            |mut s, r| async move { s.user_get(r).await },
        )
        .await
    }

    /// Every user, in name order (linearizable).
    pub async fn user_list(&self) -> Result<UserListReply, Status> {
        self.auth_call(Retry::Read, pb::UserListRequest {}, |mut s, r| async move {
            s.user_list(r).await
        })
        .await
    }

    /// Grants and revokes roles.
    pub async fn user_roles(
        &self,
        name: &str,
        grant: &[String],
        revoke: &[String],
    ) -> Result<UserReply, Status> {
        let msg = pb::UserRolesRequest {
            name: name.to_string(),
            grant: grant.to_vec(),
            revoke: revoke.to_vec(),
        };
        self.auth_call(Retry::Write, msg, |mut s, r| async move {
            s.user_roles(r).await
        })
        .await
    }

    /// A new bearer token for the user (in the reply), or none with `no_token`.
    pub async fn user_token(&self, name: &str, no_token: bool) -> Result<UserReply, Status> {
        let msg = pb::UserTokenRequest {
            name: name.to_string(),
            no_token,
        };
        self.auth_call(Retry::Write, msg, |mut s, r| async move {
            s.user_token(r).await
        })
        .await
    }

    /// Removes a user.
    pub async fn user_delete(&self, name: &str) -> Result<u64, Status> {
        let msg = pb::UserDeleteRequest {
            name: name.to_string(),
        };
        let reply = self
            .auth_call(Retry::Write, msg, |mut s, r| async move {
                s.user_delete(r).await
            })
            .await?;
        Ok(reply.revision)
    }
}
