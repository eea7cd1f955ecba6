//! Authentication and authorization on the client API.
//!
//! `AuthLayer` sits in front of every service. It reads the users and roles this node has
//! applied (`State::auth`), and when authentication is on it
//!
//! 1. authenticates the call: a bearer token in `authorization` (`Bearer <user>.<secret>`,
//!    checked against the stored SHA-256), else the subject common name of the client
//!    certificate naming a user; neither is Unauthenticated;
//! 2. authorizes the method by its class (`method_access`): admin methods need `admin`, reads of
//!    cluster-wide data a read role, locks and pools a read-write role, worker methods the
//!    worker role; namespaced methods are checked again by their handler, which knows the
//!    namespace (`authorize`); an unknown method needs `admin`;
//! 3. hands the handler a `Caller` (request extensions), and runs it with the auth revision it
//!    was authorized at (`AUTH_REVISION`), which `Node::propose` puts on every write
//!    (`Command::Guarded`): apply refuses the write if users or roles changed in between.
//!
//! Health checks and reflection are always open (load balancers and grpcurl). Every refusal is
//! logged here at warn, with the user and method, and counted in
//! `steward_auth_refusals_total{code}`. When authentication is off every call is allowed, and
//! writes are still guarded, so one that raced with turning it on is refused and re-sent.

use crate::state::AuthReply;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::auth_server::Auth;
use crate::proto::v1::*;
use crate::server::client_limits::{client_key, ClientKey};
use crate::server::errors;
use crate::server::node::Node;
use crate::state::auth::{allows, Access, AuthAction, AuthTable, Role, User};

tokio::task_local! {
    /// The auth revision the current call was authorized at; `Node::propose` guards writes
    /// with it.
    pub static AUTH_REVISION: u64;
}

/// Who is calling, as the layer found it; in every handler's request extensions.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Whether authentication was on.
    pub enabled: bool,
    /// The auth revision the call was authorized at.
    pub revision: u64,
    /// The authenticated user (`None` when authentication is off).
    pub user: Option<Arc<User>>,
    /// The method ("/package.Service/Method"), for messages; shares the request's bytes.
    pub method: http::uri::PathAndQuery,
}

impl Caller {
    /// Whether the caller may do `access` (always, when authentication is off).
    pub fn allows(&self, access: Access<'_>) -> bool {
        match (&self.user, self.enabled) {
            (_, false) => true,
            (Some(user), true) => allows(&user.name, &user.roles, access),
            (None, true) => false,
        }
    }

    fn user_name(&self) -> &str {
        self.user.as_deref().map_or("", |u| u.name.as_str())
    }
}

/// The call's `Caller`, taken before the request is consumed.
pub fn caller<T>(request: &Request<T>) -> Option<Caller> {
    request.extensions().get::<Caller>().cloned()
}

/// PermissionDenied unless `caller` (`caller(&request)`) may do `access`; logged and counted.
/// The one way handlers of namespaced and worker methods authorize, with the namespace or worker
/// id the request names, before they change or read anything.
pub fn check(node: &Node, caller: Option<&Caller>, access: Access<'_>) -> Result<(), Status> {
    match caller {
        Some(caller) if caller.allows(access) => Ok(()),
        Some(caller) => Err(refuse(node, caller, access)),
        // Every call passes the layer, which always leaves a Caller: a missing one is a wiring
        // fault, and refused.
        None => Err(errors::permission_denied(
            "",
            "no caller identity on this call; refused",
        )),
    }
}

/// An `Access` that owns its namespace or worker id, for a stream that outlives its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamAccess {
    Read(Option<String>),
    ClusterRead,
    Worker(String),
}

impl StreamAccess {
    fn access(&self) -> Access<'_> {
        match self {
            StreamAccess::Read(ns) => Access::Read(ns.as_deref()),
            StreamAccess::ClusterRead => Access::ClusterRead,
            StreamAccess::Worker(id) => Access::Worker(id),
        }
    }
}

/// What an open stream (a watch, an assignment stream) was authorized for, checked again
/// whenever users, roles or authentication change while it is open: a stream whose caller lost
/// the access (a role revoked, the user deleted, authentication turned on under an anonymous
/// stream) ends with PermissionDenied or Unauthenticated before it sends anything more. A
/// token rotated meanwhile does not end it: the stream was authenticated when it opened.
pub struct StreamAuth {
    node: Arc<Node>,
    caller: Option<Caller>,
    access: StreamAccess,
}

impl StreamAuth {
    /// Authorizes the call's caller for `access` now (as `authorize`), and keeps both.
    pub fn open<T>(
        node: &Arc<Node>,
        request: &Request<T>,
        access: StreamAccess,
    ) -> Result<StreamAuth, Status> {
        let caller = caller(request);
        check(node, caller.as_ref(), access.access())?;
        Ok(StreamAuth {
            node: node.clone(),
            caller,
            access,
        })
    }

    /// Ok while the caller still has the access; checks again only if the auth revision this
    /// node applied moved since the last check (an atomic load otherwise).
    pub fn recheck(&mut self) -> Result<(), Status> {
        let Some(caller) = self.caller.as_mut() else {
            return Ok(());
        };
        if self.node.hub.auth_revision() == caller.revision {
            return Ok(());
        }
        let auth = self.node.state().auth().clone();
        caller.revision = auth.revision;
        caller.enabled = auth.enabled;
        if auth.enabled {
            let why = match caller.user.take() {
                Some(user) => match auth.users.get(&user.name) {
                    Some(now) => {
                        caller.user = Some(now.clone());
                        None
                    }
                    None => Some(format!(
                        "user {} was deleted while this stream was open",
                        user.name
                    )),
                },
                None => Some(
                    "authentication was turned on while this stream was open; open it again \
                     with a bearer token or a client certificate"
                        .to_string(),
                ),
            };
            if let Some(why) = why {
                tracing::warn!(method = %caller.method, why, "stream ended: unauthenticated");
                count(&self.node, "unauthenticated");
                return Err(errors::unauthenticated(why));
            }
        }
        check(&self.node, Some(caller), self.access.access())
    }
}

/// PermissionDenied for `caller`, who lacks `need`: logged, counted, and named in the message.
fn refuse(node: &Node, caller: &Caller, need: impl std::fmt::Display) -> Status {
    let user = caller.user_name();
    let roles = caller
        .user
        .as_deref()
        .map(User::roles_text)
        .unwrap_or_default();
    tracing::warn!(user, roles, method = %caller.method, %need, "permission denied");
    count(node, "permission_denied");
    errors::permission_denied(
        caller.method.path(),
        format!(
            "user {user} (roles {roles}) may not call {}: it needs {need}",
            caller.method
        ),
    )
}

fn count(node: &Node, code: &str) {
    node.metrics
        .auth_refusals
        .get_or_create(&crate::metrics::CodeLabels {
            code: code.to_string(),
        })
        .inc();
}

/// What the layer checks for a method before its handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodAccess {
    /// Health checks and reflection: no authentication at all.
    Open,
    /// Any authenticated caller (Auth/Status).
    Anyone,
    /// Namespaced data: the layer asks for some read (or read-write) role, and the handler
    /// checks the namespace.
    Namespaced { write: bool },
    /// The worker role (or admin); the handler checks the worker id.
    Worker,
    /// `Access::ClusterRead`.
    ClusterRead,
    /// `Access::Coordinate`.
    Coordinate,
    /// `Access::Admin`.
    Admin,
}

/// The class of a gRPC method by its path ("/package.Service/Method"). Unknown: admin.
pub fn method_access(path: &str) -> MethodAccess {
    use MethodAccess::*;
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
        return Admin;
    };
    if service.starts_with("grpc.health.") || service.starts_with("grpc.reflection.") {
        return Open;
    }
    let Some(service) = service.strip_prefix("steward.v1.") else {
        return Admin;
    };
    match (service, method) {
        ("Resources", "Get" | "List" | "Watch" | "Count") => Namespaced { write: false },
        ("Resources", "Create" | "Update" | "UpdateStatus" | "Delete" | "Txn") => {
            Namespaced { write: true }
        }
        ("Operations", "Get" | "List" | "Watch") => Namespaced { write: false },
        ("Operations", "Submit" | "Abort") => Namespaced { write: true },
        ("StatusService", "Status") => Namespaced { write: false },
        (
            "StatusService",
            "Create" | "AddResources" | "Act" | "ReportRsync" | "ReportContext" | "ReportCluster",
        ) => Namespaced { write: true },
        ("Workers", "Register" | "Heartbeat" | "Deregister" | "Report" | "Assignments") => Worker,
        ("Workers", "List") => ClusterRead,
        ("Locks", "Get" | "List" | "Watch") => ClusterRead,
        ("Locks", "Acquire" | "Refresh" | "Release") => Coordinate,
        ("LeaseService", "List" | "Metrics") => ClusterRead,
        (
            "LeaseService",
            "Acquire" | "AcquireByState" | "Update" | "Release" | "Sync" | "SyncVirtual",
        ) => Coordinate,
        ("Reservations", "Counters") => ClusterRead,
        ("Cluster", "Status" | "MemberList" | "Alarms") => ClusterRead,
        ("Auth", "Status") => Anyone,
        _ => Admin,
    }
}

impl MethodAccess {
    /// Whether `caller` passes the layer's check for this class.
    fn admits(self, caller: &Caller) -> bool {
        let roles = match &caller.user {
            Some(user) => &user.roles,
            None => return !caller.enabled,
        };
        let has = |pred: fn(&Role) -> bool| roles.iter().any(pred);
        match self {
            MethodAccess::Open | MethodAccess::Anyone => true,
            MethodAccess::Namespaced { write: false } => {
                has(|r| matches!(r, Role::Admin | Role::ReadOnly | Role::ReadWrite { .. }))
            }
            MethodAccess::Namespaced { write: true } => {
                has(|r| matches!(r, Role::Admin | Role::ReadWrite { .. }))
            }
            MethodAccess::Worker => has(|r| matches!(r, Role::Admin | Role::Worker)),
            MethodAccess::ClusterRead => caller.allows(Access::ClusterRead),
            MethodAccess::Coordinate => caller.allows(Access::Coordinate),
            MethodAccess::Admin => caller.allows(Access::Admin),
        }
    }

    fn need(self) -> &'static str {
        match self {
            MethodAccess::Open | MethodAccess::Anyone => "nothing",
            MethodAccess::Namespaced { write: false } => {
                "a read role (read-only, read-write:NAMESPACE) or admin"
            }
            MethodAccess::Namespaced { write: true } => "read-write:NAMESPACE or admin",
            MethodAccess::Worker => "the worker role or admin",
            MethodAccess::ClusterRead => "read-only, a read-write role, or admin",
            MethodAccess::Coordinate => "a read-write role or admin",
            MethodAccess::Admin => "the admin role",
        }
    }
}

/// Splits a bearer token into its user and checks it against the user's stored hash.
fn token_user<'a>(auth: &'a AuthTable, token: &str) -> Option<&'a Arc<User>> {
    let (name, _secret) = token.rsplit_once('.')?;
    let user = auth.users.get(name)?;
    let stored = user.token_sha256.as_deref()?;
    let presented = hex_sha256(token.as_bytes());
    bool::from(presented.as_bytes().ct_eq(stored.as_bytes())).then_some(user)
}

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

/// The header with which a node that proxies a call to the leader's client API (membership
/// changes) names the user it authenticated; honoured only on a connection whose certificate is
/// a member node's, ignored on any other.
pub const DELEGATED_USER: &str = "x-steward-delegated-user";

/// `request`'s message, for a node to send on to the leader on the caller's behalf: with the
/// caller's bearer token, if any, and its user in `DELEGATED_USER`.
pub fn delegate<T>(request: Request<T>) -> Request<T> {
    let credentials = delegated(&request, ());
    let mut out = Request::new(request.into_inner());
    *out.metadata_mut() = credentials.metadata().clone();
    out
}

/// `message` to send to the leader on behalf of the caller of `from` (see `delegate`).
pub fn delegated<T, U>(from: &Request<U>, message: T) -> Request<T> {
    let mut out = Request::new(message);
    if let Some(value) = from.metadata().get("authorization") {
        out.metadata_mut().insert("authorization", value.clone());
    }
    let user = from
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.user.as_ref());
    if let Some(value) = user.and_then(|u| u.name.parse().ok()) {
        out.metadata_mut().insert(DELEGATED_USER, value);
    }
    out
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

/// Who a call is from, or why it is refused (Unauthenticated).
fn authenticate<B>(
    node: &Node,
    auth: &AuthTable,
    request: &http::Request<B>,
) -> Result<Arc<User>, String> {
    let key = client_key(request);
    if let (Some(value), ClientKey::Certificate(cn)) = (request.headers().get(DELEGATED_USER), &key)
    {
        let from_member = crate::tls::node_id_of(cn)
            .is_some_and(|id| crate::server::peer::may_be_member(node, id));
        if from_member {
            let name = value.to_str().unwrap_or_default();
            return match auth.users.get(name) {
                Some(user) => Ok(user.clone()),
                None => Err(format!("{cn} acts for {name:?}, which is not a user")),
            };
        }
    }
    if let Some(value) = request.headers().get(http::header::AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or("the authorization header is not \"Bearer <token>\"")?;
        return token_user(auth, token).cloned().ok_or_else(|| {
            "the bearer token is not valid (unknown user, rotated or removed token); ask an \
             admin for a new one (steward user token NAME)"
                .to_string()
        });
    }
    match key {
        ClientKey::Certificate(cn) => match auth.users.get(&cn) {
            Some(user) => Ok(user.clone()),
            None => Err(format!(
                "the client certificate's common name {cn:?} is not a user (steward user add \
                 {cn} --no-token --role ...)"
            )),
        },
        _ => Err(
            "authentication is on: send a bearer token (--auth-token or STEWARD_TOKEN) or \
                  present a client certificate whose common name is a user"
                .to_string(),
        ),
    }
}

/// The layer that authenticates and authorizes every call on the client API.
#[derive(Clone)]
pub struct AuthLayer {
    node: Arc<Node>,
}

impl AuthLayer {
    pub fn new(node: Arc<Node>) -> AuthLayer {
        AuthLayer { node }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            node: self.node.clone(),
        }
    }
}

/// The service `AuthLayer` wraps around the client API.
#[derive(Clone)]
pub struct AuthService<S> {
    inner: S,
    node: Arc<Node>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let method = request
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        let class = method_access(method.path());
        if class == MethodAccess::Open {
            return Box::pin(self.inner.call(request));
        }
        let auth = self.node.state().auth().clone();
        let mut caller = Caller {
            enabled: auth.enabled,
            revision: auth.revision,
            user: None,
            method,
        };
        if !auth.enabled {
            // Not needed now, but kept when it is valid: a stream opened with credentials
            // before authentication was turned on (or before this node applied it) goes on as
            // its user (`StreamAuth`).
            caller.user = authenticate(&self.node, &auth, &request).ok();
        } else {
            match authenticate(&self.node, &auth, &request) {
                Ok(user) => caller.user = Some(user),
                Err(why) => {
                    tracing::warn!(method = %caller.method, client = %client_key(&request), why, "unauthenticated");
                    count(&self.node, "unauthenticated");
                    let status = errors::unauthenticated(why);
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
            if !class.admits(&caller) {
                let status = refuse(&self.node, &caller, class.need());
                return Box::pin(async move { Ok(status.into_http()) });
            }
        }
        let revision = caller.revision;
        request.extensions_mut().insert(caller);
        Box::pin(AUTH_REVISION.scope(revision, self.inner.call(request)))
    }
}

/// The auth revision the current call was authorized at, if it came through the layer.
pub fn current_revision() -> Option<u64> {
    AUTH_REVISION.try_with(|r| *r).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_fall_in_their_class_and_unknown_ones_need_admin() {
        use MethodAccess::*;
        let cases = [
            ("/grpc.health.v1.Health/Check", Open),
            (
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                Open,
            ),
            ("/steward.v1.Resources/Get", Namespaced { write: false }),
            ("/steward.v1.Resources/Txn", Namespaced { write: true }),
            ("/steward.v1.Operations/Abort", Namespaced { write: true }),
            ("/steward.v1.Workers/Assignments", Worker),
            ("/steward.v1.Workers/List", ClusterRead),
            ("/steward.v1.Locks/Acquire", Coordinate),
            ("/steward.v1.Cluster/AddLearner", Admin),
            ("/steward.v1.Cluster/Snapshot", Admin),
            ("/steward.v1.Cluster/Compact", Admin),
            ("/steward.v1.Cluster/Alarms", ClusterRead),
            ("/steward.v1.Auth/Status", Anyone),
            ("/steward.v1.Auth/UserAdd", Admin),
            ("/steward.v1.Resources/SomethingNew", Admin),
            ("/other.v1.Thing/Get", Admin),
            ("garbage", Admin),
        ];
        for (path, want) in cases {
            assert_eq!(method_access(path), want, "{path}");
        }
    }

    #[test]
    fn every_client_api_method_has_a_deliberate_class() {
        // Every method the client API serves, from its descriptor: a new one must be placed in
        // `method_access` (or it needs admin, which this test flags for all but the admin ones).
        let set = <prost_types::FileDescriptorSet as prost::Message>::decode(
            crate::proto::CLIENT_API_DESCRIPTOR_SET,
        )
        .expect("descriptor set");
        let admin_methods = [
            "Cluster/AddLearner",
            "Cluster/Promote",
            "Cluster/RemoveMember",
            "Cluster/TransferLeader",
            "Cluster/Snapshot",
            "Cluster/AlarmDisarm",
            "Cluster/Compact",
            "Auth/Enable",
            "Auth/UserAdd",
            "Auth/UserGet",
            "Auth/UserList",
            "Auth/UserRoles",
            "Auth/UserToken",
            "Auth/UserDelete",
        ];
        let mut seen = 0;
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let short = format!("{}/{}", service.name(), method.name());
                    let path = format!("/{}.{short}", file.package());
                    let admin = method_access(&path) == MethodAccess::Admin;
                    assert_eq!(admin, admin_methods.contains(&short.as_str()), "{path}");
                    seen += 1;
                }
            }
        }
        assert!(seen > 50, "only {seen} methods in the descriptor set");
    }

    #[test]
    fn tokens_verify_only_against_their_own_hash() {
        let token = new_token("alice");
        assert!(token.starts_with("alice."));
        assert_eq!(token.len(), "alice.".len() + 43);
        let mut auth = AuthTable::default();
        auth.apply(
            &AuthAction::AddUser {
                name: "alice".into(),
                roles: vec![],
                token_sha256: Some(hex_sha256(token.as_bytes())),
            },
            1,
        )
        .expect("user added");
        assert_eq!(
            token_user(&auth, &token).map(|u| u.name.as_str()),
            Some("alice")
        );
        assert!(
            token_user(&auth, &new_token("alice")).is_none(),
            "another secret"
        );
        assert!(token_user(&auth, &token.replace("alice.", "bob.")).is_none());
        assert!(token_user(&auth, "alice").is_none());
    }
}
