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
//!    namespace (`check`); an unknown method needs `admin`;
//! 3. hands the handler a `Caller` (request extensions), and runs it with the auth revision it
//!    was authorized at (`AUTH_REVISION`), which `Node::propose` puts on every write
//!    (`Command::Guarded`): apply refuses the write if users or roles changed in between.
//!
//! Health checks and reflection are always open (load balancers and grpcurl). Every refusal is
//! logged here at warn, with the user and method, and counted in
//! `steward_auth_refusals_total{code}`. When authentication is off every call is allowed, and
//! writes are still guarded, so one that raced with turning it on is refused and re-sent.
//!
//! Here: the caller and the checks handlers make. Beside it: `layer.rs` (the layer and the method
//! classes) and `api.rs` (the `Auth` service).

use std::sync::Arc;

use tonic::{Request, Status};

use crate::server::errors;
use crate::server::node::Node;
use crate::state::auth::{allows, Access, User};

mod api;
mod layer;
pub(crate) use layer::{authenticate_headers, token_user};

pub use api::{hex_sha256, new_token, AuthApi};
pub use layer::{method_access, AuthLayer, AuthService, MethodAccess};

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

/// The auth revision the current call was authorized at, if it came through the layer.
pub fn current_revision() -> Option<u64> {
    AUTH_REVISION.try_with(|r| *r).ok()
}
