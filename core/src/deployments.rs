//! Deployment status: where a deployed application stands, as EMCO's status query and the
//! k8splugin's instance status describe it (seeds 001 and 004).
//!
//! A deployment (EMCO's deployment intent group) holds apps -> clusters -> resources, each
//! resource named by GVK + Name. The orchestrator defines the resources (`AddResources`), the user
//! approves, instantiates and terminates (`Approve`, `Instantiate`, `Terminate`), the component
//! that applies resources reports their rsync-status (`Rsync`), and a cluster monitor reports what
//! each cluster holds, its raw metadata, spec and status kept whole (`Cluster`, one
//! ResourceBundleState per app and cluster, many per command). The deployment's AppContext state
//! moves on from those reports alone, inside `apply`.
//!
//! Every deployment is mirrored by an object of kind `DeploymentIntentGroup` in the store: its spec
//! is the header (project, composite app, version, profile), its status the states and the
//! aggregate counts. The mirror is what makes status changes watchable and countable with the
//! resource API; it is written only here (`apply` refuses resource writes to that kind), once per
//! command that changes the deployment, so each such command is one revision and one event.
//!
//! Counts are kept per cluster (and per kind within a cluster) as resources change, so a summary
//! costs O(apps x clusters), never a scan of the resources (`query`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::deployments::readiness::{readiness, Readiness};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::ObjectKey;

mod actions;
pub(crate) mod apply;
pub mod command;
mod query;
pub mod readiness;
mod table;
#[cfg(test)]
mod tests;

pub use actions::{apply_action, check_action, check_delete};
pub use query::{status_json, StatusMode, StatusQuery};
pub(crate) use table::DeploymentRecord;
pub use table::{Deployment, DeploymentTable, Header};

/// The kind of the store object that mirrors each deployment.
pub const DEPLOYMENT_KIND: &str = "DeploymentIntentGroup";

/// The apiVersion of the mirror objects.
pub const DEPLOYMENT_API_VERSION: &str = "steward.io/v1";

/// Longest app or cluster name, in characters.
pub const DEPLOYMENT_NAME_CHARS_MAX: usize = 128;

/// A Kubernetes group, version and kind; serialized with the seed's field names.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Gvk {
    #[serde(rename = "Group", default)]
    pub group: CompactString,
    #[serde(rename = "Version")]
    pub version: CompactString,
    #[serde(rename = "Kind")]
    pub kind: CompactString,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

/// Defines a closed set of status values with their seed names, a dense index for counters and
/// the list of all of them.
macro_rules! status_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every value, in counter order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The seed's name of the value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),+ }
            }

            /// Position in `ALL`.
            pub fn index(self) -> usize {
                self as usize
            }

            /// The value named `name` (exact, as the seed spells it).
            pub fn parse(name: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status_enum!(
    /// What rsync last did with a resource.
    RsyncStatus { Pending, Applied, Failed, Retrying, Terminated }
);

status_enum!(
    /// Whether the cluster monitor saw the resource in its cluster.
    ClusterStatus { Unknown, NotPresent, Present }
);

status_enum!(
    /// The AppContext life cycle.
    ContextState {
        Instantiating,
        Instantiated,
        InstantiateFailed,
        PreTerminate,
        Terminating,
        Terminated,
        TerminateFailed,
    }
);

status_enum!(
    /// The last action the user took.
    UserState { Created, Approved, Instantiated, Terminated }
);

impl ContextState {
    /// The rsync-statuses a report may set in this state: applying ones while instantiating
    /// (and until the terminate sequence starts), deleting ones while terminating, none once
    /// terminated.
    pub fn rsync_allowed(self) -> &'static [RsyncStatus] {
        use RsyncStatus::*;
        match self {
            ContextState::Instantiating
            | ContextState::Instantiated
            | ContextState::InstantiateFailed
            | ContextState::PreTerminate => &[Pending, Applied, Failed, Retrying],
            ContextState::Terminating | ContextState::TerminateFailed => {
                &[Terminated, Failed, Retrying]
            }
            ContextState::Terminated => &[],
        }
    }

    /// The states rsync may move this one to by reporting it (`DeploymentAction::Context`):
    /// PreTerminate -> Terminating once the instantiate threads are shut down, and a failure of
    /// the whole sequence. The others follow from resource reports, or from user actions.
    pub fn reportable_next(self) -> &'static [ContextState] {
        match self {
            ContextState::PreTerminate => &[ContextState::Terminating],
            ContextState::Instantiating => &[ContextState::InstantiateFailed],
            ContextState::Terminating => &[ContextState::TerminateFailed],
            _ => &[],
        }
    }
}

/// Counts by rsync-status, cluster-status and readiness. Resources that exist only in a cluster
/// (a Deployment's Pods) have no rsync-status: they count in the cluster and readiness columns
/// only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub rsync: [u64; 5],
    pub cluster: [u64; 3],
    pub readiness: [u64; 5],
}

impl Tally {
    fn add(&mut self, r: &StatusResource) {
        if let Some(s) = r.rsync {
            self.rsync[s.index()] += 1;
        }
        self.cluster[r.cluster.index()] += 1;
        self.readiness[r.readiness.index()] += 1;
    }

    fn sub(&mut self, r: &StatusResource) {
        if let Some(s) = r.rsync {
            self.rsync[s.index()] = self.rsync[s.index()].saturating_sub(1);
        }
        let c = &mut self.cluster[r.cluster.index()];
        *c = c.saturating_sub(1);
        let d = &mut self.readiness[r.readiness.index()];
        *d = d.saturating_sub(1);
    }

    /// Adds `other` in.
    pub fn merge(&mut self, other: &Tally) {
        for (a, b) in self.rsync.iter_mut().zip(other.rsync) {
            *a += b;
        }
        for (a, b) in self.cluster.iter_mut().zip(other.cluster) {
            *a += b;
        }
        for (a, b) in self.readiness.iter_mut().zip(other.readiness) {
            *a += b;
        }
    }

    /// Resources counted (each has exactly one cluster-status).
    pub fn resources(&self) -> u64 {
        self.cluster.iter().sum()
    }

    /// Resources with an rsync-status (those of the AppContext).
    pub fn rsync_resources(&self) -> u64 {
        self.rsync.iter().sum()
    }

    /// The rsync counts as a map of the nonzero ones, seed names as keys.
    pub fn rsync_map(&self) -> BTreeMap<&'static str, u64> {
        nonzero(RsyncStatus::ALL.iter().map(|s| s.as_str()), &self.rsync)
    }

    /// The cluster-status counts, nonzero only.
    pub fn cluster_map(&self) -> BTreeMap<&'static str, u64> {
        nonzero(ClusterStatus::ALL.iter().map(|s| s.as_str()), &self.cluster)
    }

    /// The readiness counts, nonzero only.
    pub fn readiness_map(&self) -> BTreeMap<&'static str, u64> {
        nonzero(Readiness::ALL.iter().map(|s| s.as_str()), &self.readiness)
    }
}

fn nonzero<'a>(names: impl Iterator<Item = &'a str>, counts: &[u64]) -> BTreeMap<&'a str, u64> {
    names
        .zip(counts.iter().copied())
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Identifies a resource within one app and cluster. Ordered by name first, so a resource-name
/// filter is a range, not a scan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceKey {
    #[serde(rename = "Name")]
    pub name: CompactString,
    #[serde(rename = "GVK")]
    pub gvk: Gvk,
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.gvk, self.name)
    }
}

/// One resource's status: what rsync did, what the cluster holds, and the raw JSON of both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusResource {
    /// `None` for a resource that exists only in the cluster (not in the AppContext).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rsync: Option<RsyncStatus>,
    pub cluster: ClusterStatus,
    pub readiness: Readiness,
    /// The AppContext's metadata and spec of the resource (what rsync applies).
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub app_metadata: RawJson,
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub app_spec: RawJson,
    /// The cluster's metadata, spec and status of the resource, as last reported, whole.
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub metadata: RawJson,
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub spec: RawJson,
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub status: RawJson,
}

impl StatusResource {
    /// A resource of the AppContext that rsync has not handled yet.
    fn defined(app_metadata: RawJson, app_spec: RawJson) -> StatusResource {
        StatusResource {
            rsync: Some(RsyncStatus::Pending),
            cluster: ClusterStatus::Unknown,
            readiness: Readiness::Unknown,
            app_metadata,
            app_spec,
            metadata: RawJson::null(),
            spec: RawJson::null(),
            status: RawJson::null(),
        }
    }

    /// Marks it seen in its cluster with this raw JSON.
    fn observe(&mut self, gvk: &Gvk, seen: &ClusterResource) {
        self.cluster = ClusterStatus::Present;
        self.readiness = readiness(
            &gvk.group,
            &gvk.kind,
            &seen.metadata,
            &seen.spec,
            &seen.status,
        );
        self.metadata = RawJson::from_value(&seen.metadata);
        self.spec = RawJson::from_value(&seen.spec);
        self.status = RawJson::from_value(&seen.status);
    }

    /// Marks it absent from its cluster (`NotPresent`: the monitor reports that kind and did not
    /// see it, so it is expected and not there; `Unknown`: nobody can tell).
    fn unobserve(&mut self, cluster: ClusterStatus) {
        self.cluster = cluster;
        self.readiness = match cluster {
            ClusterStatus::NotPresent => Readiness::Pending,
            _ => Readiness::Unknown,
        };
        self.metadata = RawJson::null();
        self.spec = RawJson::null();
        self.status = RawJson::null();
    }
}

/// The resources of one app in one cluster, with their counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterEntry {
    /// Shared with snapshots (a persistent map): copying a cluster on its first change after a
    /// snapshot is O(1).
    resources: imbl::OrdMap<ResourceKey, Arc<StatusResource>>,
    tally: Tally,
    /// The same counts split by Kind, for kind filters.
    by_kind: BTreeMap<CompactString, Tally>,
}

impl ClusterEntry {
    /// All of this cluster's counts.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The counts of one Kind.
    pub fn kind_tally(&self, kind: &str) -> Option<&Tally> {
        self.by_kind.get(kind)
    }

    /// Resources in key (name, GVK) order.
    pub fn resources(&self) -> impl Iterator<Item = (&ResourceKey, &StatusResource)> {
        self.resources.iter().map(|(k, r)| (k, &**r))
    }

    /// Resources named `name`, of any GVK.
    pub fn named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a ResourceKey, &'a StatusResource)> + 'a {
        let start = ResourceKey {
            name: name.into(),
            gvk: Gvk::default(),
        };
        self.resources
            .range(start..)
            .take_while(move |(k, _)| k.name == name)
            .map(|(k, r)| (k, &**r))
    }

    pub fn get(&self, key: &ResourceKey) -> Option<&StatusResource> {
        self.resources.get(key).map(|r| &**r)
    }

    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// Stores `resource` under `key`, keeping the counts in step; the only way resources change
    /// (with `remove`).
    fn put(&mut self, key: ResourceKey, resource: StatusResource) {
        let kind = key.gvk.kind.clone();
        let old = self.resources.insert(key, Arc::new(resource.clone()));
        let by_kind = self.by_kind.entry(kind).or_default();
        if let Some(old) = old {
            self.tally.sub(&old);
            by_kind.sub(&old);
        }
        self.tally.add(&resource);
        by_kind.add(&resource);
    }

    fn remove(&mut self, key: &ResourceKey) -> Option<Arc<StatusResource>> {
        let old = self.resources.remove(key)?;
        self.tally.sub(&old);
        if let Some(by_kind) = self.by_kind.get_mut(&key.gvk.kind) {
            by_kind.sub(&old);
            if by_kind.resources() == 0 {
                self.by_kind.remove(&key.gvk.kind);
            }
        }
        Some(old)
    }
}

/// Limits the leader puts in each command, so every replica judges with the same ones
/// (`[status]` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusLimits {
    /// `status.resources_max`: resources of one deployment (AppContext and cluster-only).
    pub resources_max: u64,
    /// `status.resource_bytes_max`: one resource's raw metadata + spec + status, as JSON.
    pub resource_bytes_max: u64,
    /// `status.items_max`: resources (or updates) in one command.
    pub items_max: u64,
}

impl Default for StatusLimits {
    fn default() -> Self {
        StatusLimits {
            resources_max: 100_000,
            resource_bytes_max: 64 * 1024,
            items_max: 1_000,
        }
    }
}

/// A resource of the AppContext, as the orchestrator defines it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppResource {
    pub app: String,
    pub cluster: String,
    pub gvk: Gvk,
    pub name: String,
    /// The AppContext's metadata and spec (any JSON; null for none).
    #[serde(default)]
    pub metadata: serde_json::Value,
    #[serde(default)]
    pub spec: serde_json::Value,
}

/// An rsync-status change: of one resource, or (no `resource`) of every AppContext resource of
/// the app in that cluster (rsync's "cannot reach the cluster": Retrying for all of them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RsyncUpdate {
    pub app: String,
    pub cluster: String,
    #[serde(default)]
    pub resource: Option<ResourceKey>,
    pub status: RsyncStatus,
}

/// A resource as a cluster monitor saw it in its cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterResource {
    pub gvk: Gvk,
    pub name: String,
    #[serde(default)]
    pub metadata: serde_json::Value,
    #[serde(default)]
    pub spec: serde_json::Value,
    #[serde(default)]
    pub status: serde_json::Value,
}

/// What a cluster monitor reports for one app in one cluster (a ResourceBundleState).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    pub app: String,
    pub cluster: String,
    /// The Kinds the monitor reports: an AppContext resource of one of them that is missing from
    /// a complete bundle is NotPresent; of another kind, Unknown.
    pub kinds: BTreeSet<String>,
    /// Everything the monitor sees of the app in the cluster (`partial` false), or only some of
    /// it (`partial` true: only these resources change, so a large cluster can be streamed in
    /// several commands).
    pub resources: Vec<ClusterResource>,
    #[serde(default)]
    pub partial: bool,
}

/// What a `Command::Deployment` asks. Each is all or nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DeploymentAction {
    /// A new deployment, user state Created, with its mirror object.
    Create {
        header: Header,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    },
    /// Define (or redefine) AppContext resources, Pending; only before instantiating.
    AddResources { resources: Vec<AppResource> },
    /// User: Created -> Approved.
    Approve,
    /// User: Approved (or Terminated, once terminated) -> Instantiated; AppContext ->
    /// Instantiating, every resource Pending and Unknown.
    Instantiate,
    /// User: Instantiated -> Terminated; AppContext Instantiating -> PreTerminate,
    /// Instantiated or InstantiateFailed -> Terminating.
    Terminate,
    /// rsync's resource reports.
    Rsync { updates: Vec<RsyncUpdate> },
    /// rsync moves the AppContext itself (`ContextState::reportable_next`).
    Context { state: ContextState },
    /// Cluster monitors' ResourceBundleStates.
    Cluster { bundles: Vec<Bundle> },
    /// Removes the deployment and its mirror: not while rsync works on it.
    Delete,
}

impl DeploymentAction {
    pub fn verb(&self) -> &'static str {
        match self {
            DeploymentAction::Create { .. } => "create",
            DeploymentAction::AddResources { .. } => "add-resources",
            DeploymentAction::Approve => "approve",
            DeploymentAction::Instantiate => "instantiate",
            DeploymentAction::Terminate => "terminate",
            DeploymentAction::Rsync { .. } => "rsync-report",
            DeploymentAction::Context { .. } => "context-report",
            DeploymentAction::Cluster { .. } => "cluster-report",
            DeploymentAction::Delete => "delete",
        }
    }
}
