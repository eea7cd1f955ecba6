//! Users, their roles, and whether authentication is on: replicated like everything else, so every
//! node authorizes a request the same way, and changed only through `Command::Auth`.
//!
//! A user authenticates with a bearer token (`<user>.<secret>`, of which only the SHA-256 is
//! stored; the secret is drawn by the server that handles `steward user add`, never in apply) or
//! with a client certificate whose subject common name is the user's name (as etcd does).
//!
//! Roles are fixed, and a user holds any set of them:
//!
//! | role | may |
//! |---|---|
//! | `admin` | everything: membership, snapshots, users, auth on and off |
//! | `read-only` | read in every namespace, and every cluster-wide read |
//! | `read-write:NS` | read and write in namespace NS (`*`: every namespace); use locks and pools |
//! | `worker` | register, heartbeat and deregister as a worker named after the user, receive its assignments and report them |
//!
//! Every change bumps `revision`. A write authorized on some node carries the revision it was
//! authorized at (`Command::Guarded`); apply refuses it if users or roles changed since, so a
//! revoked role stops every write that was authorized before the revocation but applied after it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::rejection::Rejection;

/// Longest user name, in bytes.
pub const USER_NAME_MAX: usize = 64;
/// Most roles one user holds.
pub const USER_ROLES_MAX: usize = 64;
/// Most users in the state.
pub const USERS_MAX: usize = 10_000;
/// Hex characters in a stored token hash (SHA-256).
pub const TOKEN_SHA256_HEX_LEN: usize = 64;

/// A role a user holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Role {
    Admin,
    ReadOnly,
    /// Read and write in one namespace, or in all (`*`).
    ReadWrite {
        namespace: String,
    },
    Worker,
}

/// Every namespace, in a `read-write:` role.
pub const ANY_NAMESPACE: &str = "*";

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Admin => f.write_str("admin"),
            Role::ReadOnly => f.write_str("read-only"),
            Role::ReadWrite { namespace } => write!(f, "read-write:{namespace}"),
            Role::Worker => f.write_str("worker"),
        }
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "admin" => Ok(Role::Admin),
            "read-only" => Ok(Role::ReadOnly),
            "worker" => Ok(Role::Worker),
            _ => match s.strip_prefix("read-write:") {
                Some(ns) if ns == ANY_NAMESPACE => Ok(Role::ReadWrite {
                    namespace: ns.to_string(),
                }),
                Some(ns) => crate::objects::validate::validate_namespace_name(ns)
                    .map(|()| Role::ReadWrite {
                        namespace: ns.to_string(),
                    })
                    .map_err(|e| format!("role {s:?}: {e}")),
                None => Err(format!(
                    "role {s:?} is not one of admin, read-only, read-write:NAMESPACE \
                     (read-write:* for every namespace), worker"
                )),
            },
        }
    }
}

impl TryFrom<String> for Role {
    type Error = String;
    fn try_from(s: String) -> Result<Role, String> {
        s.parse()
    }
}

impl From<Role> for String {
    fn from(r: Role) -> String {
        r.to_string()
    }
}

/// One user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    pub roles: BTreeSet<Role>,
    /// Hex SHA-256 of the user's bearer token; `None`: certificate only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// State time of the user's creation and of its last change (ms since the Unix epoch).
    pub created_ms: u64,
    pub updated_ms: u64,
}

impl User {
    /// Its roles as text, comma-separated ("-" for none).
    pub fn roles_text(&self) -> String {
        if self.roles.is_empty() {
            return "-".to_string();
        }
        let roles: Vec<String> = self.roles.iter().map(Role::to_string).collect();
        roles.join(",")
    }
}

/// A change to users or to whether authentication is on (`Command::Auth`).
/// What an auth command answers: whether authentication is on, the auth revision, and the user
/// changed (none for a deletion or an on/off switch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuthReply {
    pub enabled: bool,
    pub revision: u64,
    pub user: Option<User>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AuthAction {
    /// A new user; refused if the name is taken.
    AddUser {
        name: String,
        roles: Vec<Role>,
        token_sha256: Option<String>,
    },
    /// Roles added to and removed from a user (adding a held role or removing one not held is
    /// not an error).
    SetRoles {
        name: String,
        grant: Vec<Role>,
        revoke: Vec<Role>,
    },
    /// A new token hash for a user (a rotated token), or none (certificate only).
    SetToken {
        name: String,
        token_sha256: Option<String>,
    },
    DeleteUser {
        name: String,
    },
    /// Authentication on or off. On needs a user holding `admin`.
    Enable {
        enabled: bool,
    },
}

impl fmt::Display for AuthAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthAction::AddUser { name, .. } => write!(f, "user-add {name}"),
            AuthAction::SetRoles { name, .. } => write!(f, "user-roles {name}"),
            AuthAction::SetToken { name, .. } => write!(f, "user-token {name}"),
            AuthAction::DeleteUser { name } => write!(f, "user-delete {name}"),
            AuthAction::Enable { enabled } => write!(f, "auth-enable {enabled}"),
        }
    }
}

/// Users, roles, and whether authentication is on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthTable {
    pub enabled: bool,
    /// +1 on every change; a `Command::Guarded` authorized at another revision is refused.
    pub revision: u64,
    /// Shared with the callers the client API's auth layer authenticates (copied on change).
    pub users: BTreeMap<String, Arc<User>>,
}

/// Checks a user name: 1 to `USER_NAME_MAX` bytes of ASCII letters, digits, `-`, `_` and `.`,
/// starting with a letter or digit (so it can stand in a certificate's common name and before
/// the `.` of a token, and a worker named `<user>@<host>` belongs to it).
pub fn validate_user_name(name: &str) -> Result<(), Rejection> {
    let invalid = |rule: String| {
        Err(Rejection::Invalid {
            field: "user".to_string(),
            rule,
        })
    };
    if name.is_empty() || name.len() > USER_NAME_MAX {
        return invalid(format!(
            "{name:?} must be 1 to {USER_NAME_MAX} characters long"
        ));
    }
    let ok_first = name.as_bytes()[0].is_ascii_alphanumeric();
    let ok_rest = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !ok_first || !ok_rest {
        return invalid(format!(
            "{name:?} must be ASCII letters, digits, '-', '_' and '.', starting with a letter \
             or digit"
        ));
    }
    Ok(())
}

fn validate_token_hash(hash: &Option<String>) -> Result<(), Rejection> {
    match hash {
        Some(h)
            if h.len() != TOKEN_SHA256_HEX_LEN
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Err(Rejection::Invalid {
                field: "token_sha256".to_string(),
                rule: format!("must be {TOKEN_SHA256_HEX_LEN} lowercase hex characters"),
            })
        }
        _ => Ok(()),
    }
}

impl AuthTable {
    /// Whether any user but `except` holds `admin`.
    fn admin_besides(&self, except: &str) -> bool {
        self.users
            .values()
            .any(|u| u.name != except && u.roles.contains(&Role::Admin))
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User, Rejection> {
        self.users
            .get_mut(name)
            .map(Arc::make_mut)
            .ok_or_else(|| Rejection::UserNotFound {
                name: name.to_string(),
            })
    }

    /// Applies one change at state time `now_ms`. A refusal changes nothing.
    pub fn apply(&mut self, action: &AuthAction, now_ms: u64) -> Result<AuthReply, Rejection> {
        self.try_apply(action, now_ms)?;
        self.revision += 1;
        Ok(AuthReply {
            enabled: self.enabled,
            revision: self.revision,
            user: match action {
                AuthAction::Enable { .. } | AuthAction::DeleteUser { .. } => None,
                AuthAction::AddUser { name, .. }
                | AuthAction::SetRoles { name, .. }
                | AuthAction::SetToken { name, .. } => self.users.get(name).map(|u| User::clone(u)),
            },
        })
    }

    fn try_apply(&mut self, action: &AuthAction, now_ms: u64) -> Result<(), Rejection> {
        let refuse_no_admin = |reason: String| {
            Err(Rejection::AuthState {
                reason: format!(
                    "{reason} would leave no user with the admin role while authentication is \
                     on; grant admin to another user first, or turn authentication off"
                ),
            })
        };
        match action {
            AuthAction::AddUser {
                name,
                roles,
                token_sha256,
            } => {
                validate_user_name(name)?;
                validate_token_hash(token_sha256)?;
                check_roles(roles)?;
                if self.users.contains_key(name) {
                    return Err(Rejection::UserExists { name: name.clone() });
                }
                if self.users.len() >= USERS_MAX {
                    return Err(Rejection::TooLarge {
                        field: "user".to_string(),
                        rule: format!("the cluster holds {USERS_MAX} users at most"),
                    });
                }
                self.users.insert(
                    name.clone(),
                    Arc::new(User {
                        name: name.clone(),
                        roles: roles.iter().cloned().collect(),
                        token_sha256: token_sha256.clone(),
                        created_ms: now_ms,
                        updated_ms: now_ms,
                    }),
                );
            }
            AuthAction::SetRoles {
                name,
                grant,
                revoke,
            } => {
                check_roles(grant)?;
                let loses_admin = revoke.contains(&Role::Admin) && !grant.contains(&Role::Admin);
                if self.enabled && loses_admin && !self.admin_besides(name) {
                    let held = self
                        .users
                        .get(name)
                        .is_some_and(|u| u.roles.contains(&Role::Admin));
                    if held {
                        return refuse_no_admin(format!("revoking admin from {name}"));
                    }
                }
                let user = self.user_mut(name)?;
                let mut roles = user.roles.clone();
                for r in revoke {
                    roles.remove(r);
                }
                roles.extend(grant.iter().cloned());
                if roles.len() > USER_ROLES_MAX {
                    return Err(Rejection::TooLarge {
                        field: "roles".to_string(),
                        rule: format!("a user holds {USER_ROLES_MAX} roles at most"),
                    });
                }
                user.roles = roles;
                user.updated_ms = now_ms;
            }
            AuthAction::SetToken { name, token_sha256 } => {
                validate_token_hash(token_sha256)?;
                let user = self.user_mut(name)?;
                user.token_sha256 = token_sha256.clone();
                user.updated_ms = now_ms;
            }
            AuthAction::DeleteUser { name } => {
                let is_admin = self.user_mut(name)?.roles.contains(&Role::Admin);
                if self.enabled && is_admin && !self.admin_besides(name) {
                    return refuse_no_admin(format!("deleting user {name}"));
                }
                self.users.remove(name);
            }
            AuthAction::Enable { enabled } => {
                if *enabled && !self.admin_besides("") {
                    return Err(Rejection::AuthState {
                        reason: "turning authentication on needs a user with the admin role \
                                 first (steward user add NAME --role admin)"
                            .to_string(),
                    });
                }
                self.enabled = *enabled;
            }
        }
        Ok(())
    }
}

fn check_roles(roles: &[Role]) -> Result<(), Rejection> {
    if roles.len() > USER_ROLES_MAX {
        return Err(Rejection::TooLarge {
            field: "roles".to_string(),
            rule: format!("a user holds {USER_ROLES_MAX} roles at most"),
        });
    }
    Ok(())
}

/// What a call needs, decided per method (and, for namespaced data, per namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access<'a> {
    /// Read in one namespace (`None`: in every namespace).
    Read(Option<&'a str>),
    /// Write in one namespace.
    Write(&'a str),
    /// A read of cluster-wide data (status, members, locks, pools, workers).
    ClusterRead,
    /// Use of the shared coordination primitives: locks, leased pools, reservations.
    Coordinate,
    /// Act as the worker with this id.
    Worker(&'a str),
    /// Membership, snapshots, users, auth.
    Admin,
}

impl fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Access::Read(Some(ns)) => write!(f, "read in namespace {ns:?} (read-only or read-write:{ns})"),
            Access::Read(None) => f.write_str("read in every namespace (read-only or read-write:*)"),
            Access::Write(ns) => write!(f, "write in namespace {ns:?} (read-write:{ns} or read-write:*)"),
            Access::ClusterRead => f.write_str("a cluster-wide read (read-only or a read-write role)"),
            Access::Coordinate => f.write_str("use of locks, pools and reservations (a read-write role)"),
            Access::Worker(id) => write!(f, "acting as worker {id:?} (the worker role, as a user named {id:?} or the part of it before '@')"),
            Access::Admin => f.write_str("the admin role"),
        }
    }
}

/// Whether a worker id belongs to a user: the id is the user's name, or `<name>@<anything>`.
pub fn worker_belongs_to(worker: &str, user: &str) -> bool {
    match worker.strip_prefix(user) {
        Some(rest) => rest.is_empty() || rest.starts_with('@'),
        None => false,
    }
}

/// Whether `roles`, held by `user`, allow `access`.
pub fn allows(user: &str, roles: &BTreeSet<Role>, access: Access<'_>) -> bool {
    if roles.contains(&Role::Admin) {
        return true;
    }
    let writes = |ns: &str| {
        roles.iter().any(|r| match r {
            Role::ReadWrite { namespace } => namespace == ANY_NAMESPACE || namespace == ns,
            _ => false,
        })
    };
    let any_read_write = || roles.iter().any(|r| matches!(r, Role::ReadWrite { .. }));
    match access {
        Access::Read(ns) => roles.contains(&Role::ReadOnly) || writes(ns.unwrap_or(ANY_NAMESPACE)),
        Access::Write(ns) => writes(ns),
        Access::ClusterRead => roles.contains(&Role::ReadOnly) || any_read_write(),
        Access::Coordinate => any_read_write(),
        Access::Worker(id) => roles.contains(&Role::Worker) && worker_belongs_to(id, user),
        Access::Admin => false,
    }
}

#[cfg(test)]
mod tests;
