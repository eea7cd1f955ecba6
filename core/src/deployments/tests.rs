//! Deployments through `apply_effects`: every life-cycle transition (allowed and refused), the
//! reports, the mirror object, each status mode's shape against golden JSON built from the
//! seed's table, filters, limits and snapshots.

use crate::command::ObjectReply;
use crate::command::{DeploymentCommand, ObjectCommand};
use serde_json::{json, Value};

use super::*;
use crate::command::{Command, Response};
use crate::objects::resource::{ObjectKey, Resource};
use crate::rejection::Rejection;
use crate::{apply_effects, ApplyContext, Effects, State};

const T0: u64 = 1_795_341_600_000;

const LIMITS: StatusLimits = StatusLimits {
    resources_max: 8,
    resource_bytes_max: 200,
    items_max: 6,
};

struct Log {
    state: State,
    effects: Effects,
    index: u64,
}

fn key() -> ObjectKey {
    ObjectKey::new(DEPLOYMENT_KIND, "default", "vfw")
}

impl Log {
    fn new() -> Log {
        Log {
            state: State::new(),
            effects: Effects::default(),
            index: 0,
        }
    }

    fn run(&mut self, action: DeploymentAction) -> Response {
        self.index += 1;
        let ctx = ApplyContext {
            log_index: self.index,
            term: 1,
            time_ms: T0 + self.index,
            stamped: true,
            wall_ms: None,
        };
        let cmd = Command::Deployments(DeploymentCommand {
            key: key(),
            action,
            limits: LIMITS,
        });
        apply_effects(&mut self.state, &ctx, &cmd, &mut self.effects)
    }

    fn ok(&mut self, action: DeploymentAction) -> Resource {
        match self.run(action.clone()) {
            Response::Objects(ObjectReply::Object { object, .. }) => object,
            other => panic!("{action:?}: expected the mirror, got {other:?}"),
        }
    }

    /// Runs a command that must be refused, and checks it changed nothing.
    fn refused(&mut self, action: DeploymentAction) -> Rejection {
        let before = self.state.clone();
        let events = self.effects.events.len();
        match self.run(action.clone()) {
            Response::Rejected(r) => {
                assert_eq!(
                    self.state.with_clock_of(&before),
                    before,
                    "{action:?} was refused but changed the state"
                );
                assert_eq!(self.effects.events.len(), events);
                r
            }
            other => panic!("{action:?}: expected a rejection, got {other:?}"),
        }
    }

    fn d(&self) -> &Deployment {
        self.state.deployment(&key()).expect("deployment")
    }

    fn status(&self, q: &StatusQuery) -> Value {
        let text = status_json(&key(), self.d(), q, 100).expect("status");
        serde_json::from_str(&text).expect("json")
    }

    fn mode(&self, mode: StatusMode) -> Value {
        self.status(&StatusQuery {
            mode,
            ..StatusQuery::default()
        })
    }
}

fn header() -> Header {
    Header {
        project: "p1".into(),
        composite_app: "vfw-app".into(),
        composite_app_version: "v1".into(),
        composite_profile: "prof".into(),
    }
}

fn create() -> DeploymentAction {
    DeploymentAction::Create {
        header: header(),
        labels: [("team".to_string(), "edge".to_string())].into(),
    }
}

fn deploy_gvk() -> Gvk {
    Gvk::new("apps", "v1", "Deployment")
}

fn cm_gvk() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

fn app_resource(app: &str, cluster: &str, gvk: Gvk, name: &str) -> AppResource {
    AppResource {
        app: app.into(),
        cluster: cluster.into(),
        gvk,
        name: name.into(),
        metadata: json!({"name": name}),
        spec: json!({"replicas": 1}),
    }
}

/// Two apps: collectd on c1 (a Deployment and a ConfigMap) and c2 (a Deployment); vfw on c1.
fn resources() -> Vec<AppResource> {
    vec![
        app_resource("collectd", "c1", deploy_gvk(), "collectd"),
        app_resource("collectd", "c1", cm_gvk(), "collectd-cm"),
        app_resource("collectd", "c2", deploy_gvk(), "collectd"),
        app_resource("vfw", "c1", deploy_gvk(), "firewall"),
    ]
}

fn rk(gvk: Gvk, name: &str) -> ResourceKey {
    ResourceKey {
        name: name.into(),
        gvk,
    }
}

fn update(app: &str, cluster: &str, r: Option<ResourceKey>, status: RsyncStatus) -> RsyncUpdate {
    RsyncUpdate {
        app: app.into(),
        cluster: cluster.into(),
        resource: r,
        status,
    }
}

fn rsync(updates: Vec<RsyncUpdate>) -> DeploymentAction {
    DeploymentAction::Rsync { updates }
}

/// Every AppContext resource of `resources()` set to `status`.
fn all(status: RsyncStatus) -> DeploymentAction {
    rsync(vec![
        update("collectd", "c1", None, status),
        update("collectd", "c2", None, status),
        update("vfw", "c1", None, status),
    ])
}

fn ready_deployment(name: &str) -> ClusterResource {
    ClusterResource {
        gvk: deploy_gvk(),
        name: name.into(),
        metadata: json!({"name": name, "generation": 1}),
        spec: json!({"replicas": 1}),
        status: json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}),
    }
}

fn bundle(app: &str, cluster: &str, resources: Vec<ClusterResource>) -> Bundle {
    Bundle {
        app: app.into(),
        cluster: cluster.into(),
        kinds: ["Deployment".to_string()].into(),
        resources,
        partial: false,
    }
}

/// Created, resources defined, approved, instantiated.
fn instantiating() -> Log {
    let mut log = Log::new();
    log.ok(create());
    log.ok(DeploymentAction::AddResources {
        resources: resources(),
    });
    log.ok(DeploymentAction::Approve);
    log.ok(DeploymentAction::Instantiate);
    log
}

fn states(log: &Log) -> (UserState, Option<ContextState>) {
    (log.d().user_state, log.d().context)
}

#[test]
fn create_makes_the_mirror_and_a_second_create_is_refused() {
    let mut log = Log::new();
    let mirror = log.ok(create());
    assert_eq!(mirror.kind, DEPLOYMENT_KIND);
    assert_eq!(mirror.metadata.labels["team"], "edge");
    assert_eq!(
        mirror.spec.to_value(),
        json!({"project": "p1", "compositeApp": "vfw-app", "compositeAppVersion": "v1", "compositeProfile": "prof"})
    );
    assert_eq!(
        mirror.status,
        json!({"state": "Created", "rsync-status": {}, "cluster-status": {}, "readiness": {}, "resources": 0})
    );
    assert_eq!(log.effects.events.len(), 1);
    assert!(matches!(
        log.refused(create()),
        Rejection::AlreadyExists { .. }
    ));
}

#[test]
fn the_life_cycle_moves_only_as_the_seed_allows() {
    use ContextState as C;
    use UserState as U;
    // Instantiate needs Approved.
    let mut log = Log::new();
    log.ok(create());
    assert!(matches!(
        log.refused(DeploymentAction::Instantiate),
        Rejection::DeploymentState { .. }
    ));
    assert!(matches!(
        log.refused(DeploymentAction::Terminate),
        Rejection::DeploymentState { .. }
    ));
    assert!(matches!(
        log.refused(all(RsyncStatus::Applied)),
        Rejection::DeploymentState { .. }
    ));
    log.ok(DeploymentAction::AddResources {
        resources: resources(),
    });
    log.ok(DeploymentAction::Approve);
    assert!(matches!(
        log.refused(DeploymentAction::Approve),
        Rejection::DeploymentState { .. }
    ));
    log.ok(DeploymentAction::Instantiate);
    assert_eq!(states(&log), (U::Instantiated, Some(C::Instantiating)));
    // No more resources once instantiated; no delete while rsync works.
    assert!(matches!(
        log.refused(DeploymentAction::AddResources {
            resources: resources()
        }),
        Rejection::DeploymentState { .. }
    ));
    assert!(matches!(
        log.refused(DeploymentAction::Delete),
        Rejection::DeploymentState { .. }
    ));
    // While instantiating, Terminated is not an rsync-status rsync can report.
    assert!(matches!(
        log.refused(all(RsyncStatus::Terminated)),
        Rejection::DeploymentState { .. }
    ));
    // Some applied, some retrying: still Instantiating; all applied: Instantiated.
    log.ok(rsync(vec![update(
        "collectd",
        "c1",
        None,
        RsyncStatus::Applied,
    )]));
    log.ok(rsync(vec![update(
        "vfw",
        "c1",
        None,
        RsyncStatus::Retrying,
    )]));
    assert_eq!(states(&log).1, Some(C::Instantiating));
    log.ok(all(RsyncStatus::Applied));
    assert_eq!(states(&log), (U::Instantiated, Some(C::Instantiated)));
    // Terminate from Instantiated goes straight to Terminating; rsync may not move it back.
    log.ok(DeploymentAction::Terminate);
    assert_eq!(states(&log), (U::Terminated, Some(C::Terminating)));
    assert!(matches!(
        log.refused(DeploymentAction::Context {
            state: C::Instantiated
        }),
        Rejection::DeploymentState { .. }
    ));
    assert!(matches!(
        log.refused(all(RsyncStatus::Applied)),
        Rejection::DeploymentState { .. }
    ));
    log.ok(rsync(vec![update(
        "collectd",
        "c1",
        None,
        RsyncStatus::Terminated,
    )]));
    assert_eq!(states(&log).1, Some(C::Terminating));
    log.ok(all(RsyncStatus::Terminated));
    assert_eq!(states(&log), (U::Terminated, Some(C::Terminated)));
    // Once terminated: no rsync reports; instantiate again resets every resource to Pending.
    assert!(matches!(
        log.refused(all(RsyncStatus::Terminated)),
        Rejection::DeploymentState { .. }
    ));
    log.ok(DeploymentAction::Instantiate);
    assert_eq!(states(&log), (U::Instantiated, Some(C::Instantiating)));
    assert_eq!(log.d().tally().rsync_map(), [("Pending", 4)].into());
    log.ok(DeploymentAction::Terminate);
    assert_eq!(states(&log), (U::Terminated, Some(C::PreTerminate)));
    // PreTerminate: rsync moves it to Terminating once its instantiate threads stopped.
    assert!(matches!(
        log.refused(DeploymentAction::Context {
            state: C::Terminated
        }),
        Rejection::DeploymentState { .. }
    ));
    log.ok(DeploymentAction::Context {
        state: C::Terminating,
    });
    assert_eq!(states(&log).1, Some(C::Terminating));
    log.ok(rsync(vec![update(
        "collectd",
        "c2",
        None,
        RsyncStatus::Failed,
    )]));
    assert_eq!(states(&log).1, Some(C::TerminateFailed));
    let deleted = log.ok(DeploymentAction::Delete);
    assert_eq!(deleted.kind, DEPLOYMENT_KIND);
    assert!(log.state.deployment(&key()).is_none());
    assert!(log.state.get(&key()).is_none());
    assert!(matches!(
        log.refused(DeploymentAction::Approve),
        Rejection::NotFound { .. }
    ));
}

#[test]
fn a_reported_failure_fails_the_sequence_and_a_standing_one_does_not() {
    use ContextState as C;
    let mut log = instantiating();
    let one = rk(deploy_gvk(), "firewall");
    log.ok(rsync(vec![update(
        "vfw",
        "c1",
        Some(one.clone()),
        RsyncStatus::Failed,
    )]));
    assert_eq!(states(&log).1, Some(C::InstantiateFailed));
    // The rest still applies; the state stays failed.
    log.ok(all(RsyncStatus::Applied));
    log.ok(rsync(vec![update(
        "vfw",
        "c1",
        Some(one),
        RsyncStatus::Failed,
    )]));
    assert_eq!(states(&log).1, Some(C::InstantiateFailed));
    // Terminating from InstantiateFailed: the failed resource does not fail the terminate.
    log.ok(DeploymentAction::Terminate);
    assert_eq!(states(&log).1, Some(C::Terminating));
    log.ok(all(RsyncStatus::Terminated));
    assert_eq!(states(&log).1, Some(C::Terminated));
    // rsync may report a failure of the whole sequence itself.
    let mut log = instantiating();
    log.ok(DeploymentAction::Context {
        state: C::InstantiateFailed,
    });
    assert_eq!(states(&log).1, Some(C::InstantiateFailed));
}

#[test]
fn an_empty_deployment_is_instantiated_and_terminated_at_once() {
    let mut log = Log::new();
    log.ok(create());
    log.ok(DeploymentAction::Approve);
    log.ok(DeploymentAction::Instantiate);
    assert_eq!(states(&log).1, Some(ContextState::Instantiated));
    log.ok(DeploymentAction::Terminate);
    assert_eq!(states(&log).1, Some(ContextState::Terminated));
}

#[test]
fn unknown_apps_clusters_and_resources_are_refused_whole() {
    let mut log = instantiating();
    let good = update("collectd", "c1", None, RsyncStatus::Applied);
    for bad in [
        update("nope", "c1", None, RsyncStatus::Applied),
        update("collectd", "c9", None, RsyncStatus::Applied),
        update(
            "collectd",
            "c1",
            Some(rk(cm_gvk(), "collectd")),
            RsyncStatus::Applied,
        ),
    ] {
        let r = log.refused(rsync(vec![good.clone(), bad]));
        assert!(
            matches!(r, Rejection::DeploymentResourceNotFound { .. }),
            "{r:?}"
        );
    }
    let r = log.refused(DeploymentAction::Cluster {
        bundles: vec![bundle("collectd", "c9", vec![])],
    });
    assert!(
        matches!(r, Rejection::DeploymentResourceNotFound { .. }),
        "{r:?}"
    );
    let r = log.refused(DeploymentAction::Cluster {
        bundles: vec![bundle("vfw", "c1", vec![]), bundle("vfw", "c1", vec![])],
    });
    assert!(matches!(r, Rejection::Invalid { .. }), "{r:?}");
}

#[test]
fn cluster_reports_mark_present_not_present_and_unknown_and_track_cluster_only_resources() {
    let mut log = instantiating();
    log.ok(all(RsyncStatus::Applied));
    let mut pod = ClusterResource {
        gvk: Gvk::new("", "v1", "Pod"),
        name: "collectd-1".into(),
        metadata: json!({"name": "collectd-1"}),
        spec: json!({}),
        status: json!({"phase": "Running"}),
    };
    pod.status = json!({"phase": "Running", "containerStatuses": [{"ready": true}]});
    // c1 of collectd: its Deployment and a Pod; the ConfigMap's kind is not reported.
    log.ok(DeploymentAction::Cluster {
        bundles: vec![bundle(
            "collectd",
            "c1",
            vec![ready_deployment("collectd"), pod.clone()],
        )],
    });
    let c1 = log.d().cluster("collectd", "c1").expect("c1");
    let dep = c1.get(&rk(deploy_gvk(), "collectd")).expect("dep");
    assert_eq!(
        (dep.cluster, dep.readiness),
        (
            ClusterStatus::Present,
            crate::deployments::readiness::Readiness::Ready
        )
    );
    let cm = c1.get(&rk(cm_gvk(), "collectd-cm")).expect("cm");
    assert_eq!(cm.cluster, ClusterStatus::Unknown);
    let p = c1.get(&rk(pod.gvk.clone(), "collectd-1")).expect("pod");
    assert_eq!((p.rsync, p.cluster), (None, ClusterStatus::Present));
    // The rsync counts leave the Pod out; the cluster counts hold it.
    assert_eq!(log.d().tally().rsync_map(), [("Applied", 4)].into());
    assert_eq!(
        log.d().tally().cluster_map(),
        [("Present", 2), ("Unknown", 3)].into()
    );
    // A later complete report without them: the Deployment is NotPresent, the Pod gone.
    let mut b = bundle("collectd", "c1", vec![]);
    b.kinds.insert("ConfigMap".into());
    log.ok(DeploymentAction::Cluster { bundles: vec![b] });
    let c1 = log.d().cluster("collectd", "c1").expect("c1");
    assert_eq!(c1.len(), 2);
    let dep = c1.get(&rk(deploy_gvk(), "collectd")).expect("dep");
    assert_eq!(dep.cluster, ClusterStatus::NotPresent);
    assert!(dep.status.is_null());
    assert_eq!(
        c1.get(&rk(cm_gvk(), "collectd-cm")).expect("cm").cluster,
        ClusterStatus::NotPresent
    );
    // A partial report changes only what it names.
    let mut b = bundle("collectd", "c1", vec![ready_deployment("collectd")]);
    b.partial = true;
    log.ok(DeploymentAction::Cluster { bundles: vec![b] });
    let c1 = log.d().cluster("collectd", "c1").expect("c1");
    assert_eq!(
        c1.get(&rk(deploy_gvk(), "collectd")).expect("dep").cluster,
        ClusterStatus::Present
    );
    assert_eq!(
        c1.get(&rk(cm_gvk(), "collectd-cm")).expect("cm").cluster,
        ClusterStatus::NotPresent
    );
    // Counts always equal a recount from scratch.
    let mut recounted = log.d().clone();
    recounted.recount();
    assert_eq!(&recounted, log.d());
}

#[test]
fn the_mirror_follows_states_and_counts_and_only_changes_when_they_do() {
    let mut log = instantiating();
    let before = log.state.revision();
    let mirror = log.ok(all(RsyncStatus::Applied));
    assert_eq!(log.state.revision(), before + 1);
    assert_eq!(
        mirror.status,
        json!({"state": "Instantiated", "status": "Instantiated", "rsync-status": {"Applied": 4},
               "cluster-status": {"Unknown": 4}, "readiness": {"Unknown": 4}, "resources": 4})
    );
    // The same report again moves nothing visible: no revision, no event.
    let events = log.effects.events.len();
    log.ok(all(RsyncStatus::Applied));
    assert_eq!(log.state.revision(), before + 1);
    assert_eq!(log.effects.events.len(), events);
}

#[test]
fn resource_writes_to_the_mirror_are_refused() {
    let mut log = Log::new();
    let mirror = log.ok(create());
    let before = log.state.clone();
    log.index += 1;
    let ctx = ApplyContext {
        log_index: log.index,
        term: 1,
        time_ms: T0 + log.index,
        stamped: true,
        wall_ms: None,
    };
    let mut changed = mirror.clone();
    changed.status = json!({"state": "Approved"});
    for cmd in [
        Command::Objects(ObjectCommand::UpdateStatus {
            object: changed.clone(),
            expected_revision: None,
            fence: None,
        }),
        Command::Objects(ObjectCommand::Delete {
            key: key(),
            expected_revision: None,
            fence: None,
        }),
        Command::Objects(ObjectCommand::Create {
            object: Resource::new(DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND, "default", "other"),
            fence: None,
        }),
    ] {
        match apply_effects(&mut log.state, &ctx, &cmd, &mut log.effects) {
            Response::Rejected(Rejection::Invalid { field, rule }) => {
                assert_eq!(field, "kind");
                assert!(rule.contains("StatusService API"), "{rule}");
            }
            other => panic!("{cmd}: {other:?}"),
        }
    }
    assert_eq!(log.state.with_clock_of(&before), before);
}

#[test]
fn limits_hold_at_their_bound_and_refuse_past_it() {
    let mut log = Log::new();
    log.ok(create());
    let many = |n: usize, prefix: &str| -> Vec<AppResource> {
        (0..n)
            .map(|i| app_resource("a", "c", cm_gvk(), &format!("{prefix}{i}")))
            .collect()
    };
    // items_max = 6 per command.
    let r = log.refused(DeploymentAction::AddResources {
        resources: many(7, "x"),
    });
    assert!(
        matches!(r, Rejection::TooLarge { ref field, .. } if field == "resources"),
        "{r:?}"
    );
    log.ok(DeploymentAction::AddResources {
        resources: many(6, "x"),
    });
    // resources_max = 8 per deployment.
    log.ok(DeploymentAction::AddResources {
        resources: many(2, "y"),
    });
    let r = log.refused(DeploymentAction::AddResources {
        resources: many(1, "z"),
    });
    assert!(
        matches!(r, Rejection::TooLarge { ref rule, .. } if rule.contains("status.resources_max = 8")),
        "{r:?}"
    );
    // resource_bytes_max = 200 for metadata + spec (+ status).
    let mut big = app_resource("a", "c", cm_gvk(), "x0");
    big.spec = json!({"data": "x".repeat(150)});
    big.metadata = json!({"n": "y".repeat(20)});
    assert!(json_len(&big.spec) + json_len(&big.metadata) <= 200);
    log.ok(DeploymentAction::AddResources {
        resources: vec![big.clone()],
    });
    big.metadata = json!({"n": "y".repeat(60)});
    let r = log.refused(DeploymentAction::AddResources {
        resources: vec![big],
    });
    assert!(
        matches!(r, Rejection::TooLarge { ref rule, .. } if rule.contains("status.resource_bytes_max")),
        "{r:?}"
    );
    // Names are checked, naming the field.
    let mut bad = app_resource("a b", "c", cm_gvk(), "x0");
    let r = log.refused(DeploymentAction::AddResources {
        resources: vec![bad.clone()],
    });
    assert!(
        matches!(r, Rejection::Invalid { ref field, .. } if field == "resources[0].app"),
        "{r:?}"
    );
    bad.app = "a".into();
    bad.gvk.kind = "configmap".into();
    let r = log.refused(DeploymentAction::AddResources {
        resources: vec![bad],
    });
    assert!(
        matches!(r, Rejection::Invalid { ref field, .. } if field == "resources[0].GVK.Kind"),
        "{r:?}"
    );
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).expect("json").len()
}

/// A deployment with statuses of every sort: collectd/c1's Deployment Applied and Present (with
/// raw JSON), its ConfigMap Applied and Unknown, collectd/c2's Deployment Retrying and
/// NotPresent, vfw/c1's Deployment Failed.
fn varied() -> Log {
    let mut log = instantiating();
    log.ok(rsync(vec![
        update("collectd", "c1", None, RsyncStatus::Applied),
        update("collectd", "c2", None, RsyncStatus::Retrying),
        update("vfw", "c1", None, RsyncStatus::Failed),
    ]));
    log.ok(DeploymentAction::Cluster {
        bundles: vec![
            bundle("collectd", "c1", vec![ready_deployment("collectd")]),
            bundle("collectd", "c2", vec![]),
        ],
    });
    log
}

fn head(rest: Value) -> Value {
    let mut v = json!({
        "name": "vfw", "project": "p1", "composite-app-name": "vfw-app",
        "composite-app-version": "v1", "composite-profile-name": "prof",
        "state": "Instantiated", "status": "InstantiateFailed",
    });
    for (k, x) in rest.as_object().expect("object") {
        v[k] = x.clone();
    }
    v
}

#[test]
fn each_mode_has_exactly_the_elements_the_seed_marks() {
    let log = varied();
    let counts = json!({
        "rsync-status": {"Applied": 2, "Failed": 1, "Retrying": 1},
        "cluster-status": {"NotPresent": 1, "Present": 1, "Unknown": 2},
        "readiness": {"Pending": 1, "Ready": 1, "Unknown": 2},
    });
    assert_eq!(log.mode(StatusMode::Summary), head(counts.clone()));
    let gvk_d = json!({"Group": "apps", "Version": "v1", "Kind": "Deployment"});
    let gvk_cm = json!({"Group": "", "Version": "v1", "Kind": "ConfigMap"});
    let mut all = counts.clone();
    all["resources"] = json!([
        {"app-name": "collectd", "clusters": [
            {"name": "c1", "resources": [
                {"GVK": gvk_d, "Name": "collectd", "rsync-status": "Applied", "cluster-status": "Present", "readiness": "Ready"},
                {"GVK": gvk_cm, "Name": "collectd-cm", "rsync-status": "Applied", "cluster-status": "Unknown", "readiness": "Unknown"},
            ]},
            {"name": "c2", "resources": [
                {"GVK": gvk_d, "Name": "collectd", "rsync-status": "Retrying", "cluster-status": "NotPresent", "readiness": "Pending"},
            ]},
        ]},
        {"app-name": "vfw", "clusters": [
            {"name": "c1", "resources": [
                {"GVK": gvk_d, "Name": "firewall", "rsync-status": "Failed", "cluster-status": "Unknown", "readiness": "Unknown"},
            ]},
        ]},
    ]);
    assert_eq!(log.mode(StatusMode::All), head(all));
    let detail = log.mode(StatusMode::Detail);
    let first = &detail["resources"][0]["clusters"][0]["resources"][0];
    assert_eq!(
        first,
        &json!({"GVK": gvk_d, "Name": "collectd",
                "metadata": {"name": "collectd", "generation": 1}, "spec": {"replicas": 1},
                "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1},
                "rsync-status": "Applied", "cluster-status": "Present", "readiness": "Ready"})
    );
    // Never seen in its cluster: empty metadata and spec, no status (it has none).
    let unseen = &detail["resources"][1]["clusters"][0]["resources"][0];
    assert_eq!(
        unseen,
        &json!({"GVK": gvk_d, "Name": "firewall", "metadata": {}, "spec": {},
                "rsync-status": "Failed", "cluster-status": "Unknown", "readiness": "Unknown"})
    );
    // rsync: no cluster-status or readiness anywhere; metadata and spec from the AppContext.
    let rs = log.mode(StatusMode::Rsync);
    assert_eq!(rs.get("cluster-status"), None);
    assert_eq!(rs.get("readiness"), None);
    assert_eq!(rs["rsync-status"], counts["rsync-status"]);
    assert_eq!(
        rs["resources"][0]["clusters"][0]["resources"][1],
        json!({"GVK": gvk_cm, "Name": "collectd-cm", "metadata": {"name": "collectd-cm"},
               "spec": {"replicas": 1}, "rsync-status": "Applied"})
    );
    // The seed's order of the top-level fields.
    let text = status_json(&key(), log.d(), &StatusQuery::default(), 100).expect("status");
    let order: Vec<usize> = [
        "\"name\"",
        "\"project\"",
        "\"composite-app-name\"",
        "\"state\"",
        "\"rsync-status\"",
        "\"cluster-status\"",
    ]
    .iter()
    .map(|f| text.find(f).expect(f))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn filters_narrow_counts_and_listings_and_zero_counts_are_dropped() {
    let log = varied();
    let q = |apps: &[&str], clusters: &[&str], resources: &[&str], kinds: &[&str]| StatusQuery {
        mode: StatusMode::All,
        apps: apps.iter().map(|s| s.to_string()).collect(),
        clusters: clusters.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        kinds: kinds.iter().map(|s| s.to_string()).collect(),
    };
    let s = log.status(&q(&["vfw"], &[], &[], &[]));
    assert_eq!(s["rsync-status"], json!({"Failed": 1}));
    assert_eq!(s["resources"].as_array().map(Vec::len), Some(1));
    let s = log.status(&q(&[], &["c2"], &[], &[]));
    assert_eq!(s["rsync-status"], json!({"Retrying": 1}));
    assert_eq!(s["cluster-status"], json!({"NotPresent": 1}));
    let s = log.status(&q(&[], &[], &["collectd"], &[]));
    assert_eq!(s["rsync-status"], json!({"Applied": 1, "Retrying": 1}));
    let s = log.status(&q(&[], &[], &[], &["ConfigMap"]));
    assert_eq!(s["rsync-status"], json!({"Applied": 1}));
    assert_eq!(
        s["resources"][0]["clusters"][0]["resources"][0]["Name"],
        "collectd-cm"
    );
    let s = log.status(&q(&["collectd"], &["c1"], &["collectd"], &["Deployment"]));
    assert_eq!(s["rsync-status"], json!({"Applied": 1}));
    // Nothing matches: empty counts, no apps.
    let s = log.status(&q(&["nope"], &[], &[], &[]));
    assert_eq!(s["rsync-status"], json!({}));
    assert_eq!(s["resources"], json!([]));
}

#[test]
fn a_listing_past_the_query_limit_is_refused_and_a_summary_is_not() {
    let log = varied();
    let all = StatusQuery {
        mode: StatusMode::All,
        ..StatusQuery::default()
    };
    assert!(status_json(&key(), log.d(), &all, 4).is_ok());
    match status_json(&key(), log.d(), &all, 3) {
        Err(Rejection::TooLarge { rule, .. }) => {
            assert!(rule.contains("status.query_resources_max = 3"), "{rule}")
        }
        other => panic!("{other:?}"),
    }
    assert!(status_json(&key(), log.d(), &StatusQuery::default(), 0).is_ok());
}

#[test]
fn snapshots_carry_deployments_and_restore_their_counts() {
    let log = varied();
    let bytes = log.state.to_snapshot_bytes();
    let back = State::from_snapshot_bytes(&bytes).expect("restore");
    assert_eq!(back, log.state);
    assert_eq!(back.deployment(&key()).expect("d").tally(), log.d().tally());
}
