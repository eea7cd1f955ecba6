//! The status query (seed 001's table): one deployment's states and counts, and in the listing
//! modes its resources by app -> cluster -> resource, each element present exactly in the modes
//! the seed marks. Counts honour the filters and come from the per-cluster (and per-kind)
//! tallies, so a summary costs O(apps x clusters); only the listing modes, and a filter by
//! resource name, look at resources.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ClusterEntry, Deployment, Gvk, ResourceKey, StatusResource, Tally};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::ObjectKey;
use crate::rejection::Rejection;

/// The `output` of the seed's status query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusMode {
    /// States and counts.
    #[default]
    Summary,
    /// Counts and every resource with its statuses.
    All,
    /// `All` with each resource's cluster metadata, spec and status.
    Detail,
    /// The AppContext's view: rsync-statuses and the resources' AppContext metadata and spec.
    Rsync,
}

impl StatusMode {
    pub const NAMES: &'static str = "summary, all, detail or rsync";

    pub fn parse(name: &str) -> Option<StatusMode> {
        match name {
            "" | "summary" => Some(StatusMode::Summary),
            "all" => Some(StatusMode::All),
            "detail" => Some(StatusMode::Detail),
            "rsync" => Some(StatusMode::Rsync),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StatusMode::Summary => "summary",
            StatusMode::All => "all",
            StatusMode::Detail => "detail",
            StatusMode::Rsync => "rsync",
        }
    }
}

/// A status query: the mode and the filters (each empty filter lets everything through; a
/// non-empty one lets through what it names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusQuery {
    pub mode: StatusMode,
    pub apps: Vec<String>,
    pub clusters: Vec<String>,
    /// Resource names.
    pub resources: Vec<String>,
    /// GVK Kinds.
    pub kinds: Vec<String>,
}

impl StatusQuery {
    fn app_passes(&self, app: &str) -> bool {
        self.apps.is_empty() || self.apps.iter().any(|a| a == app)
    }

    fn cluster_passes(&self, cluster: &str) -> bool {
        self.clusters.is_empty() || self.clusters.iter().any(|c| c == cluster)
    }

    fn kind_passes(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind)
    }

    /// The counts of what the filters let through in one cluster.
    fn cluster_tally(&self, entry: &ClusterEntry) -> Tally {
        let mut t = Tally::default();
        if !self.resources.is_empty() {
            for (_, r) in self.named(entry) {
                t.add(r);
            }
        } else if !self.kinds.is_empty() {
            for kind in &self.kinds {
                if let Some(k) = entry.kind_tally(kind) {
                    t.merge(k);
                }
            }
        } else {
            t = *entry.tally();
        }
        t
    }

    /// The resources of one cluster the name and kind filters let through, in key order when
    /// there is no name filter (else in filter order, each name's in key order).
    fn named<'a>(
        &'a self,
        entry: &'a ClusterEntry,
    ) -> Box<dyn Iterator<Item = (&'a ResourceKey, &'a StatusResource)> + 'a> {
        if self.resources.is_empty() {
            Box::new(
                entry
                    .resources()
                    .filter(|(k, _)| self.kind_passes(&k.gvk.kind)),
            )
        } else {
            Box::new(self.resources.iter().flat_map(move |name| {
                entry
                    .named(name)
                    .filter(|(k, _)| self.kind_passes(&k.gvk.kind))
            }))
        }
    }

    /// Every (app, cluster) the app and cluster filters let through.
    fn places<'a>(
        &'a self,
        d: &'a Deployment,
    ) -> impl Iterator<Item = (&'a str, &'a str, &'a ClusterEntry)> + 'a {
        d.apps()
            .iter()
            .filter(|(app, _)| self.app_passes(app))
            .flat_map(move |(app, clusters)| {
                clusters
                    .iter()
                    .filter(|(c, _)| self.cluster_passes(c))
                    .map(move |(c, entry)| (app.as_str(), c.as_str(), entry))
            })
    }
}

/// The response, in the seed's order and names.
#[derive(Serialize)]
struct StatusOut<'a> {
    name: &'a str,
    project: &'a str,
    #[serde(rename = "composite-app-name")]
    composite_app: &'a str,
    #[serde(rename = "composite-app-version")]
    composite_app_version: &'a str,
    #[serde(rename = "composite-profile-name")]
    composite_profile: &'a str,
    /// The user's last action.
    state: &'a str,
    /// The AppContext state (EMCO's `status`); absent before the first instantiate.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a str>,
    #[serde(rename = "rsync-status")]
    rsync_status: BTreeMap<&'static str, u64>,
    #[serde(rename = "cluster-status", skip_serializing_if = "Option::is_none")]
    cluster_status: Option<BTreeMap<&'static str, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    readiness: Option<BTreeMap<&'static str, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Vec<AppOut<'a>>>,
}

#[derive(Serialize)]
struct AppOut<'a> {
    #[serde(rename = "app-name")]
    app: &'a str,
    clusters: Vec<ClusterOut<'a>>,
}

#[derive(Serialize)]
struct ClusterOut<'a> {
    name: &'a str,
    resources: Vec<ResourceOut<'a>>,
}

#[derive(Serialize)]
struct ResourceOut<'a> {
    #[serde(rename = "GVK")]
    gvk: &'a Gvk,
    #[serde(rename = "Name")]
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a RawJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<&'a RawJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a RawJson>,
    #[serde(rename = "rsync-status", skip_serializing_if = "Option::is_none")]
    rsync_status: Option<&'static str>,
    #[serde(rename = "cluster-status", skip_serializing_if = "Option::is_none")]
    cluster_status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    readiness: Option<&'static str>,
}

/// An empty JSON object, for a metadata or spec that was never reported.
fn empty_object() -> &'static RawJson {
    static EMPTY: std::sync::OnceLock<RawJson> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| RawJson::from_value(&serde_json::json!({})))
}

fn or_empty(raw: &RawJson) -> &RawJson {
    if raw.is_null() {
        empty_object()
    } else {
        raw
    }
}

impl ResourceOut<'_> {
    fn new<'a>(mode: StatusMode, k: &'a ResourceKey, r: &'a StatusResource) -> ResourceOut<'a> {
        let detail = mode == StatusMode::Detail;
        let rsync = mode == StatusMode::Rsync;
        let cluster_view = matches!(mode, StatusMode::All | StatusMode::Detail);
        ResourceOut {
            gvk: &k.gvk,
            name: &k.name,
            metadata: match mode {
                StatusMode::Detail => Some(or_empty(&r.metadata)),
                StatusMode::Rsync => Some(or_empty(&r.app_metadata)),
                _ => None,
            },
            spec: match mode {
                StatusMode::Detail => Some(or_empty(&r.spec)),
                StatusMode::Rsync => Some(or_empty(&r.app_spec)),
                _ => None,
            },
            // Only a resource that has one: the seed's "(if the resource has one)".
            status: (detail && !r.status.is_null()).then_some(&r.status),
            rsync_status: r.rsync.map(|s| s.as_str()),
            cluster_status: cluster_view.then_some(r.cluster.as_str()),
            readiness: (cluster_view && !rsync).then_some(r.readiness.as_str()),
        }
    }
}

/// The status of deployment `key` as the seed's JSON, or `TooLarge` when a listing mode would
/// list more than `resources_max` resources (the counts tell before any resource is touched).
pub fn status_json(
    key: &ObjectKey,
    d: &Deployment,
    q: &StatusQuery,
    resources_max: u64,
) -> Result<String, Rejection> {
    let mut tally = Tally::default();
    for (_, _, entry) in q.places(d) {
        tally.merge(&q.cluster_tally(entry));
    }
    let listing = q.mode != StatusMode::Summary;
    let rsync_mode = q.mode == StatusMode::Rsync;
    let listed = if rsync_mode {
        tally.rsync_resources()
    } else {
        tally.resources()
    };
    if listing && listed > resources_max {
        return Err(Rejection::TooLarge {
            field: "output".to_string(),
            rule: format!(
                "{listed} resources match, more than status.query_resources_max = \
                 {resources_max} in one {} answer; narrow it with app, cluster, resource or \
                 kind filters, or ask for the summary",
                q.mode.as_str()
            ),
        });
    }
    let resources = listing.then(|| {
        let mut apps: Vec<AppOut<'_>> = Vec::new();
        for (app, cluster, entry) in q.places(d) {
            let items: Vec<ResourceOut<'_>> = q
                .named(entry)
                .filter(|(_, r)| !rsync_mode || r.rsync.is_some())
                .map(|(k, r)| ResourceOut::new(q.mode, k, r))
                .collect();
            if items.is_empty() {
                continue;
            }
            let out = ClusterOut {
                name: cluster,
                resources: items,
            };
            match apps.last_mut() {
                Some(last) if last.app == app => last.clusters.push(out),
                _ => apps.push(AppOut {
                    app,
                    clusters: vec![out],
                }),
            }
        }
        apps
    });
    let out = StatusOut {
        name: &key.name,
        project: &d.header.project,
        composite_app: &d.header.composite_app,
        composite_app_version: &d.header.composite_app_version,
        composite_profile: &d.header.composite_profile,
        state: d.user_state.as_str(),
        status: d.context.map(|s| s.as_str()),
        rsync_status: tally.rsync_map(),
        cluster_status: (!rsync_mode).then(|| tally.cluster_map()),
        readiness: (!rsync_mode).then(|| tally.readiness_map()),
        resources,
    };
    serde_json::to_string(&out).map_err(|e| Rejection::Invalid {
        field: "output".to_string(),
        rule: format!("cannot encode the status: {e}"),
    })
}

impl crate::state::State {
    /// One deployment's status by the key of its mirror object.
    pub fn deployment(&self, key: &ObjectKey) -> Option<&super::Deployment> {
        self.deployments.get(key)
    }

    /// Every deployment with the key of its mirror object, in key order.
    pub fn deployments(&self) -> impl Iterator<Item = (&ObjectKey, &super::Deployment)> {
        self.deployments.deployments.iter().map(|(k, d)| (k, &**d))
    }

    /// Number of deployments.
    pub fn deployment_count(&self) -> usize {
        self.deployments.len()
    }
}
