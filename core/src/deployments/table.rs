//! One deployment's status (`Deployment`: its header, apps, clusters and resources, with
//! counts) and the table of all of them, keyed by their mirror object.

use super::*;

/// The header EMCO keys a deployment intent group by, besides its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub project: String,
    #[serde(rename = "compositeApp")]
    pub composite_app: String,
    #[serde(rename = "compositeAppVersion")]
    pub composite_app_version: String,
    #[serde(rename = "compositeProfile")]
    pub composite_profile: String,
}

/// One deployment: its states, its resources by app and cluster, and the counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    pub header: Header,
    pub user_state: UserState,
    /// `None` until the first instantiate creates the AppContext.
    pub context: Option<ContextState>,
    /// app -> cluster -> resources.
    pub(super) apps: BTreeMap<CompactString, BTreeMap<CompactString, ClusterEntry>>,
    /// The sum of every cluster's counts.
    pub(super) tally: Tally,
}

impl Deployment {
    pub(crate) fn new(header: Header) -> Deployment {
        Deployment {
            header,
            user_state: UserState::Created,
            context: None,
            apps: BTreeMap::new(),
            tally: Tally::default(),
        }
    }

    /// Every resource's counts.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Apps in name order, each with its clusters in name order.
    pub fn apps(&self) -> &BTreeMap<CompactString, BTreeMap<CompactString, ClusterEntry>> {
        &self.apps
    }

    pub fn cluster(&self, app: &str, cluster: &str) -> Option<&ClusterEntry> {
        self.apps.get(app)?.get(cluster)
    }

    /// Number of resources (AppContext and cluster-only).
    pub fn resources_len(&self) -> u64 {
        self.tally.resources()
    }

    pub(super) fn cluster_mut(&mut self, app: &str, cluster: &str) -> &mut ClusterEntry {
        self.apps
            .entry(app.into())
            .or_default()
            .entry(cluster.into())
            .or_default()
    }

    /// Runs `change` on one cluster's entry and folds its count change into the total.
    pub(super) fn with_cluster<T>(
        &mut self,
        app: &str,
        cluster: &str,
        change: impl FnOnce(&mut ClusterEntry) -> T,
    ) -> T {
        let entry = self.cluster_mut(app, cluster);
        let before = entry.tally;
        let out = change(entry);
        let after = entry.tally;
        let empty = entry.is_empty();
        self.retally(&before, &after);
        if empty {
            if let Some(clusters) = self.apps.get_mut(app) {
                clusters.remove(cluster);
                if clusters.is_empty() {
                    self.apps.remove(app);
                }
            }
        }
        out
    }

    pub(super) fn retally(&mut self, before: &Tally, after: &Tally) {
        let t = &mut self.tally;
        for (i, slot) in t.rsync.iter_mut().enumerate() {
            *slot = slot.saturating_sub(before.rsync[i]) + after.rsync[i];
        }
        for (i, slot) in t.cluster.iter_mut().enumerate() {
            *slot = slot.saturating_sub(before.cluster[i]) + after.cluster[i];
        }
        for (i, slot) in t.readiness.iter_mut().enumerate() {
            *slot = slot.saturating_sub(before.readiness[i]) + after.readiness[i];
        }
    }

    /// The mirror object's status: states, counts and size.
    pub fn mirror_status(&self) -> serde_json::Value {
        let mut status = serde_json::Map::new();
        status.insert("state".into(), self.user_state.as_str().into());
        if let Some(context) = self.context {
            status.insert("status".into(), context.as_str().into());
        }
        let counts = |m: BTreeMap<&str, u64>| {
            serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
        };
        status.insert("rsync-status".into(), counts(self.tally.rsync_map()));
        status.insert("cluster-status".into(), counts(self.tally.cluster_map()));
        status.insert("readiness".into(), counts(self.tally.readiness_map()));
        status.insert("resources".into(), self.tally.resources().into());
        serde_json::Value::Object(status)
    }

    /// Recomputes every count from the resources (snapshot restore, and tests).
    pub(super) fn recount(&mut self) {
        let mut total = Tally::default();
        for clusters in self.apps.values_mut() {
            for entry in clusters.values_mut() {
                entry.tally = Tally::default();
                entry.by_kind.clear();
                for (key, r) in entry.resources.iter() {
                    entry.tally.add(r);
                    entry
                        .by_kind
                        .entry(key.gvk.kind.clone())
                        .or_default()
                        .add(r);
                }
                total.merge(&entry.tally);
            }
        }
        self.tally = total;
    }
}

/// Every deployment, by the key of its mirror object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentTable {
    pub(super) deployments: imbl::OrdMap<ObjectKey, Arc<Deployment>>,
}

impl DeploymentTable {
    pub fn get(&self, key: &ObjectKey) -> Option<&Deployment> {
        self.deployments.get(key).map(|d| &**d)
    }

    pub fn len(&self) -> usize {
        self.deployments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deployments.is_empty()
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.deployments.keys()
    }

    pub(crate) fn insert(&mut self, key: ObjectKey, deployment: Deployment) {
        self.deployments.insert(key, Arc::new(deployment));
    }

    pub(crate) fn remove(&mut self, key: &ObjectKey) {
        self.deployments.remove(key);
    }

    /// The snapshot form: one record per deployment, its resources flat.
    pub(crate) fn parts(&self) -> Vec<DeploymentRecord> {
        self.deployments
            .iter()
            .map(|(key, d)| DeploymentRecord {
                key: key.clone(),
                header: d.header.clone(),
                user_state: d.user_state,
                context: d.context,
                resources: d
                    .apps
                    .iter()
                    .flat_map(|(app, clusters)| {
                        clusters.iter().flat_map(move |(cluster, entry)| {
                            entry.resources.iter().map(move |(k, r)| ResourceRecord {
                                app: app.clone(),
                                cluster: cluster.clone(),
                                key: k.clone(),
                                resource: (**r).clone(),
                            })
                        })
                    })
                    .collect(),
            })
            .collect()
    }

    /// Rebuilds the table (and every count) from `parts` output.
    pub(crate) fn from_parts(records: Vec<DeploymentRecord>) -> Result<DeploymentTable, String> {
        let mut table = DeploymentTable::default();
        for record in records {
            if record.key.kind != DEPLOYMENT_KIND {
                return Err(format!(
                    "deployment {} is not a {DEPLOYMENT_KIND}",
                    record.key
                ));
            }
            let mut d = Deployment::new(record.header);
            d.user_state = record.user_state;
            d.context = record.context;
            for r in record.resources {
                let entry = d.cluster_mut(&r.app, &r.cluster);
                if entry
                    .resources
                    .insert(r.key.clone(), Arc::new(r.resource))
                    .is_some()
                {
                    return Err(format!(
                        "deployment {} holds {} in app {} cluster {} twice",
                        record.key, r.key, r.app, r.cluster
                    ));
                }
            }
            d.recount();
            if table
                .deployments
                .insert(record.key.clone(), Arc::new(d))
                .is_some()
            {
                return Err(format!("deployment {} twice", record.key));
            }
        }
        Ok(table)
    }
}

/// A deployment as a snapshot holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct DeploymentRecord {
    key: ObjectKey,
    header: Header,
    user_state: UserState,
    context: Option<ContextState>,
    resources: Vec<ResourceRecord>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ResourceRecord {
    app: CompactString,
    cluster: CompactString,
    key: ResourceKey,
    resource: StatusResource,
}
