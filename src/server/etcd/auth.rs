//! etcd's Auth service on steward's users: `AuthStatus` reports steward's authentication, and a
//! steward user logs in with `Authenticate`, its bearer token as the password; the token it gets
//! back is what clientv3 then sends as `token` metadata, which the auth layer takes as it takes
//! a bearer token. Refusals on etcd's API carry etcd's texts (`etcdserver: permission denied`,
//! `etcdserver: invalid auth token`, `etcdserver: user name is empty`: server/auth/layer.rs).
//!
//! Turning authentication on or off and managing users and roles stay steward's (`steward auth
//! ...`, `steward user ...`): its roles are not etcd's key-range permissions, so those RPCs are
//! refused, naming the command to use.

use std::sync::Arc;

use tonic::{Code, Request, Response as GrpcResponse, Status};

use super::header;
use crate::proto::etcd::auth_server::Auth;
use crate::proto::etcd::*;
use crate::server::node::Node;

pub struct AuthService {
    node: Arc<Node>,
}

impl AuthService {
    pub fn new(node: Arc<Node>) -> Self {
        AuthService { node }
    }
}

fn refused(what: &str, instead: &str) -> Status {
    Status::new(
        Code::Unimplemented,
        format!(
            "steward does not {what} through etcd's Auth API: its users and roles are steward's \
             (roles admin, read-only, read-write:NAMESPACE, worker; not etcd's key ranges); use \
             `{instead}`"
        ),
    )
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_status(
        &self,
        _request: Request<AuthStatusRequest>,
    ) -> Result<GrpcResponse<AuthStatusResponse>, Status> {
        let state = self.node.state();
        Ok(GrpcResponse::new(AuthStatusResponse {
            header: header(&self.node, state.revision()),
            enabled: state.auth().enabled,
            auth_revision: state.auth().revision,
        }))
    }

    /// The password is the user's steward token; etcd's own texts for every refusal.
    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<GrpcResponse<AuthenticateResponse>, Status> {
        let req = request.into_inner();
        let state = self.node.state();
        let auth = state.auth();
        if !auth.enabled {
            return Err(Status::failed_precondition(
                "etcdserver: authentication is not enabled",
            ));
        }
        if req.name.is_empty() {
            return Err(Status::invalid_argument("etcdserver: user name is empty"));
        }
        let valid = crate::server::auth::token_user(auth, &req.password)
            .is_some_and(|user| user.name == req.name);
        if !valid {
            tracing::warn!(user = req.name, "etcd Authenticate refused");
            return Err(Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password",
            ));
        }
        Ok(GrpcResponse::new(AuthenticateResponse {
            header: header(&self.node, state.revision()),
            token: req.password,
        }))
    }

    async fn auth_enable(
        &self,
        _request: Request<AuthEnableRequest>,
    ) -> Result<GrpcResponse<AuthEnableResponse>, Status> {
        Err(refused("turn authentication on", "steward auth enable"))
    }

    async fn auth_disable(
        &self,
        _request: Request<AuthDisableRequest>,
    ) -> Result<GrpcResponse<AuthDisableResponse>, Status> {
        Err(refused("turn authentication off", "steward auth disable"))
    }

    async fn user_add(
        &self,
        _request: Request<AuthUserAddRequest>,
    ) -> Result<GrpcResponse<AuthUserAddResponse>, Status> {
        Err(refused("add users", "steward user add NAME --role ROLE"))
    }

    async fn user_get(
        &self,
        _request: Request<AuthUserGetRequest>,
    ) -> Result<GrpcResponse<AuthUserGetResponse>, Status> {
        Err(refused("show users", "steward user get NAME"))
    }

    async fn user_list(
        &self,
        _request: Request<AuthUserListRequest>,
    ) -> Result<GrpcResponse<AuthUserListResponse>, Status> {
        Err(refused("list users", "steward user list"))
    }

    async fn user_delete(
        &self,
        _request: Request<AuthUserDeleteRequest>,
    ) -> Result<GrpcResponse<AuthUserDeleteResponse>, Status> {
        Err(refused("delete users", "steward user delete NAME"))
    }

    async fn user_change_password(
        &self,
        _request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<GrpcResponse<AuthUserChangePasswordResponse>, Status> {
        Err(refused("set passwords", "steward user token NAME"))
    }

    async fn user_grant_role(
        &self,
        _request: Request<AuthUserGrantRoleRequest>,
    ) -> Result<GrpcResponse<AuthUserGrantRoleResponse>, Status> {
        Err(refused("grant roles", "steward user grant NAME ROLE"))
    }

    async fn user_revoke_role(
        &self,
        _request: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<GrpcResponse<AuthUserRevokeRoleResponse>, Status> {
        Err(refused("revoke roles", "steward user revoke NAME ROLE"))
    }

    async fn role_add(
        &self,
        _request: Request<AuthRoleAddRequest>,
    ) -> Result<GrpcResponse<AuthRoleAddResponse>, Status> {
        Err(refused("add roles", "steward user grant NAME ROLE"))
    }

    async fn role_get(
        &self,
        _request: Request<AuthRoleGetRequest>,
    ) -> Result<GrpcResponse<AuthRoleGetResponse>, Status> {
        Err(refused("show roles", "steward user list"))
    }

    async fn role_list(
        &self,
        _request: Request<AuthRoleListRequest>,
    ) -> Result<GrpcResponse<AuthRoleListResponse>, Status> {
        Err(refused("list roles", "steward user list"))
    }

    async fn role_delete(
        &self,
        _request: Request<AuthRoleDeleteRequest>,
    ) -> Result<GrpcResponse<AuthRoleDeleteResponse>, Status> {
        Err(refused("delete roles", "steward user revoke NAME ROLE"))
    }

    async fn role_grant_permission(
        &self,
        _request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<GrpcResponse<AuthRoleGrantPermissionResponse>, Status> {
        Err(refused(
            "grant key-range permissions",
            "steward user grant NAME ROLE",
        ))
    }

    async fn role_revoke_permission(
        &self,
        _request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<GrpcResponse<AuthRoleRevokePermissionResponse>, Status> {
        Err(refused(
            "revoke key-range permissions",
            "steward user revoke NAME ROLE",
        ))
    }
}
