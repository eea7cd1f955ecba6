//! The `Auth` gRPC service: turn authentication on, add, list and delete users, give them
//! roles and new bearer tokens.

use crate::state::AuthReply;
use std::sync::Arc;

use base64::Engine;
use sha2::{Digest, Sha256};
use tonic::{Request, Response as GrpcResponse, Status};

use super::Caller;
use crate::proto::v1::auth_server::Auth;
use crate::proto::v1::*;
use crate::server::errors;
use crate::server::node::Node;
use crate::state::auth::{AuthAction, Role, User};

/// Lowercase hex SHA-256.
pub fn hex_sha256(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// A new bearer token for `user`: `<user>.<43 characters of base64url>` (256 random bits).
pub fn new_token(user: &str) -> String {
    let secret: [u8; 32] = rand::random();
    format!(
        "{user}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    )
}

/// A new token for `user` and its hash, or neither when `none`.
fn issue_token(user: &str, none: bool) -> (String, Option<String>) {
    if none {
        return (String::new(), None);
    }
    let token = new_token(user);
    let hash = hex_sha256(token.as_bytes());
    (token, Some(hash))
}

/// The `Auth` gRPC service: users, roles, on and off.
pub struct AuthApi {
    node: Arc<Node>,
}

impl AuthApi {
    pub fn new(node: Arc<Node>) -> AuthApi {
        AuthApi { node }
    }

    async fn change(&self, action: AuthAction) -> Result<(bool, u64, Option<User>), Status> {
        let AuthReply {
            enabled,
            revision,
            user,
        } = self.node.propose(action).await?;
        Ok((enabled, revision, user))
    }

    fn user_reply(user: Option<User>, token: String, revision: u64) -> UserReply {
        UserReply {
            user: user.as_ref().map(user_info),
            token,
            revision,
        }
    }
}

fn user_info(user: &User) -> UserInfo {
    UserInfo {
        name: user.name.clone(),
        roles: user.roles.iter().map(Role::to_string).collect(),
        has_token: user.token_sha256.is_some(),
        created_ms: user.created_ms,
        updated_ms: user.updated_ms,
    }
}

fn parse_roles(field: &str, roles: &[String]) -> Result<Vec<Role>, Status> {
    roles
        .iter()
        .map(|r| r.parse().map_err(|e: String| errors::invalid(field, e)))
        .collect()
}

fn user_name(name: &str) -> Result<(), Status> {
    crate::state::auth::validate_user_name(name).map_err(|r| errors::rejection(&r))
}

#[tonic::async_trait]
impl Auth for AuthApi {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn status(
        &self,
        request: Request<AuthStatusRequest>,
    ) -> Result<GrpcResponse<AuthStatusReply>, Status> {
        let caller = request.extensions().get::<Caller>().cloned();
        let (enabled, revision) = {
            let state = self.node.state();
            (state.auth().enabled, state.auth().revision)
        };
        let user = caller.and_then(|c| c.user);
        Ok(GrpcResponse::new(AuthStatusReply {
            enabled,
            revision,
            user: user.as_ref().map(|u| u.name.clone()).unwrap_or_default(),
            roles: user
                .map(|u| u.roles.iter().map(Role::to_string).collect())
                .unwrap_or_default(),
        }))
    }

    #[tracing::instrument(level = "info", skip_all, fields(enabled = request.get_ref().enabled))]
    async fn enable(
        &self,
        request: Request<AuthEnableRequest>,
    ) -> Result<GrpcResponse<AuthStatusReply>, Status> {
        let enabled = request.get_ref().enabled;
        let (enabled, revision, _) = self.change(AuthAction::Enable { enabled }).await?;
        Ok(GrpcResponse::new(AuthStatusReply {
            enabled,
            revision,
            ..AuthStatusReply::default()
        }))
    }

    #[tracing::instrument(level = "info", skip_all, fields(user = %request.get_ref().name))]
    async fn user_add(
        &self,
        request: Request<UserAddRequest>,
    ) -> Result<GrpcResponse<UserReply>, Status> {
        let req = request.into_inner();
        user_name(&req.name)?;
        let roles = parse_roles("roles", &req.roles)?;
        let (token, token_sha256) = issue_token(&req.name, req.no_token);
        let (_, revision, user) = self
            .change(AuthAction::AddUser {
                name: req.name,
                roles,
                token_sha256,
            })
            .await?;
        Ok(GrpcResponse::new(Self::user_reply(user, token, revision)))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(user = %request.get_ref().name))]
    async fn user_get(
        &self,
        request: Request<UserGetRequest>,
    ) -> Result<GrpcResponse<UserReply>, Status> {
        let name = request.into_inner().name;
        self.node
            .read_barrier(crate::proto::v1::Consistency::Linearizable)
            .await?;
        let state = self.node.state();
        let auth = state.auth();
        let user = auth
            .users
            .get(&name)
            .ok_or_else(|| errors::not_found("user", &name, format!("user {name} not found")))?;
        Ok(GrpcResponse::new(Self::user_reply(
            Some(User::clone(user)),
            String::new(),
            auth.revision,
        )))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn user_list(
        &self,
        _request: Request<UserListRequest>,
    ) -> Result<GrpcResponse<UserListReply>, Status> {
        self.node
            .read_barrier(crate::proto::v1::Consistency::Linearizable)
            .await?;
        let state = self.node.state();
        let auth = state.auth();
        Ok(GrpcResponse::new(UserListReply {
            users: auth.users.values().map(|u| user_info(u)).collect(),
            revision: auth.revision,
            enabled: auth.enabled,
        }))
    }

    #[tracing::instrument(level = "info", skip_all, fields(user = %request.get_ref().name))]
    async fn user_roles(
        &self,
        request: Request<UserRolesRequest>,
    ) -> Result<GrpcResponse<UserReply>, Status> {
        let req = request.into_inner();
        user_name(&req.name)?;
        let grant = parse_roles("grant", &req.grant)?;
        let revoke = parse_roles("revoke", &req.revoke)?;
        let (_, revision, user) = self
            .change(AuthAction::SetRoles {
                name: req.name,
                grant,
                revoke,
            })
            .await?;
        Ok(GrpcResponse::new(Self::user_reply(
            user,
            String::new(),
            revision,
        )))
    }

    #[tracing::instrument(level = "info", skip_all, fields(user = %request.get_ref().name))]
    async fn user_token(
        &self,
        request: Request<UserTokenRequest>,
    ) -> Result<GrpcResponse<UserReply>, Status> {
        let req = request.into_inner();
        user_name(&req.name)?;
        let (token, token_sha256) = issue_token(&req.name, req.no_token);
        let (_, revision, user) = self
            .change(AuthAction::SetToken {
                name: req.name,
                token_sha256,
            })
            .await?;
        Ok(GrpcResponse::new(Self::user_reply(user, token, revision)))
    }

    #[tracing::instrument(level = "info", skip_all, fields(user = %request.get_ref().name))]
    async fn user_delete(
        &self,
        request: Request<UserDeleteRequest>,
    ) -> Result<GrpcResponse<UserDeleteReply>, Status> {
        let name = request.into_inner().name;
        user_name(&name)?;
        let (_, revision, _) = self.change(AuthAction::DeleteUser { name }).await?;
        Ok(GrpcResponse::new(UserDeleteReply { revision }))
    }
}
