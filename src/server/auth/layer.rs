//! The layer in front of every service: who a call is from (a bearer token or a client
//! certificate naming a user), and whether its method's class admits it (`method_access`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use subtle::ConstantTimeEq;

use super::{count, hex_sha256, refuse, Caller, AUTH_REVISION, DELEGATED_USER};
use crate::server::client_limits::{client_key, ClientKey};
use crate::server::errors;
use crate::server::node::Node;
use crate::state::auth::{Access, AuthTable, Role, User};

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
    // etcd's login: callable before there is a token, as in etcd.
    if service == "etcdserverpb.Auth" && matches!(method, "Authenticate" | "AuthStatus") {
        return Open;
    }
    // etcd's API (server/etcd/): its keyspace is cluster-wide, like locks.
    if service == "v3lockpb.Lock" || service == "v3electionpb.Election" {
        return match method {
            "Leader" | "Observe" => ClusterRead,
            _ => Coordinate,
        };
    }
    if let Some(service) = service.strip_prefix("etcdserverpb.") {
        return match (service, method) {
            ("KV", "Range") | ("Watch", "Watch") => ClusterRead,
            ("Lease", "LeaseTimeToLive" | "LeaseLeases") => ClusterRead,
            ("Cluster", "MemberList") | ("Maintenance", "Status" | "Hash" | "HashKV") => {
                ClusterRead
            }
            ("KV", "Put" | "DeleteRange" | "Txn") => Coordinate,
            ("Lease", "LeaseGrant" | "LeaseRevoke" | "LeaseKeepAlive") => Coordinate,
            _ => Admin,
        };
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

/// Whether a method is etcd's API (server/etcd/), whose clients match etcd's own error texts.
fn etcd_api(path: &str) -> bool {
    ["/etcdserverpb.", "/v3lockpb.", "/v3electionpb."]
        .iter()
        .any(|p| path.starts_with(p))
}

/// etcd's refusal of a call that authentication does not admit: no credentials at all is
/// "user name is empty", a token that is not valid "invalid auth token".
fn etcd_unauthenticated<B>(request: &http::Request<B>) -> tonic::Status {
    let presented = request.headers().contains_key("token")
        || request.headers().contains_key(http::header::AUTHORIZATION);
    match presented {
        true => tonic::Status::unauthenticated("etcdserver: invalid auth token"),
        false => tonic::Status::invalid_argument("etcdserver: user name is empty"),
    }
}

/// Splits a bearer token into its user and checks it against the user's stored hash.
pub(crate) fn token_user<'a>(auth: &'a AuthTable, token: &str) -> Option<&'a Arc<User>> {
    let (name, _secret) = token.rsplit_once('.')?;
    let user = auth.users.get(name)?;
    let stored = user.token_sha256.as_deref()?;
    let presented = hex_sha256(token.as_bytes());
    bool::from(presented.as_bytes().ct_eq(stored.as_bytes())).then_some(user)
}

/// Who a call is from, or why it is refused (Unauthenticated).
fn authenticate<B>(
    node: &Node,
    auth: &AuthTable,
    request: &http::Request<B>,
) -> Result<Arc<User>, String> {
    authenticate_headers(node, auth, request.headers(), client_key(request))
}

/// Who a request with these headers, from this client, is from (the client API's calls and
/// the console's pages alike), or why it is refused.
pub(crate) fn authenticate_headers(
    node: &Node,
    auth: &AuthTable,
    headers: &http::HeaderMap,
    key: ClientKey,
) -> Result<Arc<User>, String> {
    if let (Some(value), ClientKey::Certificate(cn)) = (headers.get(DELEGATED_USER), &key) {
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
    // etcd's clients send the token Authenticate gave them as `token` metadata.
    if let Some(value) = headers.get("token") {
        let token = value.to_str().unwrap_or_default().trim();
        return token_user(auth, token)
            .cloned()
            .ok_or_else(|| "the etcd auth token is not valid".to_string());
    }
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().unwrap_or_default();
        let token = match value.strip_prefix("Basic ") {
            Some(basic) => basic_token(basic)?,
            None => value
                .strip_prefix("Bearer ")
                .map(|t| t.trim().to_string())
                .ok_or(
                    "the authorization header is neither \"Bearer <token>\" nor \"Basic ...\"",
                )?,
        };
        let token = token.as_str();
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

/// The token of HTTP basic authentication (what a browser sends): the user name and, as the
/// password, the secret part of the user's token (after `<user>.`) or the whole token.
fn basic_token(credentials: &str) -> Result<String, String> {
    use base64::Engine;
    let bad = || "the basic credentials are not base64 of \"<user>:<token>\"".to_string();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credentials.trim())
        .map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (user, password) = decoded.split_once(':').ok_or_else(bad)?;
    Ok(
        match password
            .strip_prefix(user)
            .and_then(|p| p.strip_prefix('.'))
        {
            Some(_) => password.to_string(),
            None => format!("{user}.{password}"),
        },
    )
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
                    let status = match etcd_api(caller.method.path()) {
                        true => etcd_unauthenticated(&request),
                        false => errors::unauthenticated(why),
                    };
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
            if !class.admits(&caller) {
                let status = refuse(&self.node, &caller, class.need());
                let status = match etcd_api(caller.method.path()) {
                    true => tonic::Status::permission_denied("etcdserver: permission denied"),
                    false => status,
                };
                return Box::pin(async move { Ok(status.into_http()) });
            }
        }
        let revision = caller.revision;
        request.extensions_mut().insert(caller);
        Box::pin(AUTH_REVISION.scope(revision, self.inner.call(request)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::auth::new_token;
    use crate::state::auth::AuthAction;

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
