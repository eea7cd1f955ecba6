//! What of the namespaced data a console user sees: every namespace, or those its roles read.

use std::collections::BTreeSet;

use crate::server::auth::Caller;
use crate::state::auth::{Access, Role, ANY_NAMESPACE};

/// What a caller may see of namespaced data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every namespace.
    All,
    /// These namespaces only.
    Namespaces(BTreeSet<String>),
}

impl Scope {
    pub(super) fn of(caller: &Caller) -> Scope {
        if caller.allows(Access::Read(None)) {
            return Scope::All;
        }
        let roles = caller.user.as_ref().map(|u| u.roles.iter());
        let namespaces = roles
            .into_iter()
            .flatten()
            .filter_map(|r| match r {
                Role::ReadWrite { namespace } if namespace != ANY_NAMESPACE => {
                    Some(namespace.clone())
                }
                _ => None,
            })
            .collect();
        Scope::Namespaces(namespaces)
    }

    /// Whether objects of `namespace` show.
    pub fn sees(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(set) => set.contains(namespace),
        }
    }

    pub(super) fn key(&self) -> String {
        match self {
            Scope::All => "*".to_string(),
            Scope::Namespaces(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }
}
