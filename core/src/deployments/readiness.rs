//! Readiness of a Kubernetes resource from its raw JSON, as the k8splugin status design asks
//! (seed 004): Ready, Pending or Failed for the kinds with rules, Present for the others.
//! Pure and total: a field of an unexpected type counts as absent, nothing panics.
//!
//! | kind (group) | Ready when | Failed when |
//! |---|---|---|
//! | Deployment (apps, extensions) | readyReplicas == replicas == desired (spec.replicas, else status.replicas), updatedReplicas >= desired, observedGeneration >= generation | condition Progressing False, reason ProgressDeadlineExceeded |
//! | Pod (core) | phase Succeeded, or every containerStatus ready | phase Failed, or a container waiting in CrashLoopBackOff, ImagePullBackOff or ErrImagePull |
//! | StatefulSet (apps) | readyReplicas == desired (spec.replicas, default 1), currentRevision == updateRevision, observedGeneration >= generation | never |
//! | DaemonSet (apps, extensions) | numberReady == desiredNumberScheduled == updatedNumberScheduled, observedGeneration >= generation | never |
//! | Job (batch) | condition Complete True, or succeeded >= spec.completions | condition Failed True |
//! | Service (core) | not a LoadBalancer, or its status.loadBalancer.ingress is non-empty | never |
//!
//! Otherwise Pending. Other kinds are Present.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Readiness {
    Ready,
    Pending,
    Failed,
    /// In its cluster, of a kind without readiness rules.
    Present,
    /// Nobody can tell (not reported, or its kind is not monitored).
    Unknown,
}

impl Readiness {
    /// Every value, in counter order.
    pub const ALL: [Readiness; 5] = [
        Readiness::Ready,
        Readiness::Pending,
        Readiness::Failed,
        Readiness::Present,
        Readiness::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "Ready",
            Readiness::Pending => "Pending",
            Readiness::Failed => "Failed",
            Readiness::Present => "Present",
            Readiness::Unknown => "Unknown",
        }
    }

    /// Position in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether (group, kind) has readiness rules (else a present resource is `Present`).
pub fn has_rules(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("apps" | "extensions", "Deployment" | "DaemonSet")
            | ("apps", "StatefulSet")
            | ("batch", "Job")
            | ("", "Pod" | "Service")
    )
}

/// Readiness of a resource present in its cluster, from its raw metadata, spec and status (each
/// may be null).
pub fn readiness(
    group: &str,
    kind: &str,
    metadata: &Value,
    spec: &Value,
    status: &Value,
) -> Readiness {
    if !has_rules(group, kind) {
        return Readiness::Present;
    }
    match kind {
        "Deployment" => deployment(metadata, spec, status),
        "StatefulSet" => stateful_set(metadata, spec, status),
        "DaemonSet" => daemon_set(metadata, status),
        "Job" => job(spec, status),
        "Pod" => pod(status),
        "Service" => service(spec, status),
        _ => Readiness::Present,
    }
}

fn int(v: &Value, field: &str) -> Option<u64> {
    v.get(field).and_then(Value::as_u64)
}

fn ready_if(ready: bool) -> Readiness {
    if ready {
        Readiness::Ready
    } else {
        Readiness::Pending
    }
}

/// A condition of `type` with `status` (and, when given, `reason`).
fn has_condition(status: &Value, kind: &str, value: &str, reason: Option<&str>) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some(value)
                && reason.is_none_or(|r| c.get("reason").and_then(Value::as_str) == Some(r))
        })
}

/// The controller has seen the latest spec (true when either side is not reported).
fn observed(metadata: &Value, status: &Value) -> bool {
    match (
        int(metadata, "generation"),
        int(status, "observedGeneration"),
    ) {
        (Some(generation), Some(observed)) => observed >= generation,
        _ => true,
    }
}

fn deployment(metadata: &Value, spec: &Value, status: &Value) -> Readiness {
    if has_condition(
        status,
        "Progressing",
        "False",
        Some("ProgressDeadlineExceeded"),
    ) {
        return Readiness::Failed;
    }
    let replicas = int(status, "replicas").unwrap_or(0);
    let ready = int(status, "readyReplicas").unwrap_or(0);
    let desired = int(spec, "replicas").unwrap_or(replicas);
    let updated_ok = int(status, "updatedReplicas").is_none_or(|u| u >= desired);
    ready_if(ready == replicas && ready == desired && updated_ok && observed(metadata, status))
}

fn stateful_set(metadata: &Value, spec: &Value, status: &Value) -> Readiness {
    let desired = if spec.is_object() {
        int(spec, "replicas").unwrap_or(1)
    } else {
        int(status, "replicas").unwrap_or(0)
    };
    let ready = int(status, "readyReplicas").unwrap_or(0);
    let revision = |f: &str| status.get(f).and_then(Value::as_str);
    let revisions_ok = match (revision("currentRevision"), revision("updateRevision")) {
        (Some(current), Some(update)) => current == update,
        _ => true,
    };
    ready_if(ready == desired && revisions_ok && observed(metadata, status))
}

fn daemon_set(metadata: &Value, status: &Value) -> Readiness {
    let desired = int(status, "desiredNumberScheduled").unwrap_or(0);
    let ready = int(status, "numberReady").unwrap_or(0);
    let updated_ok = int(status, "updatedNumberScheduled").is_none_or(|u| u == desired);
    ready_if(ready == desired && updated_ok && observed(metadata, status))
}

fn job(spec: &Value, status: &Value) -> Readiness {
    if has_condition(status, "Failed", "True", None) {
        return Readiness::Failed;
    }
    let complete = has_condition(status, "Complete", "True", None);
    let done = match (int(spec, "completions"), int(status, "succeeded")) {
        (Some(completions), Some(succeeded)) => succeeded >= completions,
        _ => false,
    };
    ready_if(complete || done)
}

/// Waiting reasons that mean the Pod will not come up by itself.
const POD_FAILED_WAITING: [&str; 3] = ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"];

fn pod(status: &Value) -> Readiness {
    let phase = status.get("phase").and_then(Value::as_str);
    if phase == Some("Failed") {
        return Readiness::Failed;
    }
    if phase == Some("Succeeded") {
        return Readiness::Ready;
    }
    let containers: Vec<&Value> = status
        .get("containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let stuck = containers.iter().any(|c| {
        let reason = c.pointer("/state/waiting/reason").and_then(Value::as_str);
        reason.is_some_and(|r| POD_FAILED_WAITING.contains(&r))
    });
    if stuck {
        return Readiness::Failed;
    }
    let all_ready = containers
        .iter()
        .all(|c| c.get("ready").and_then(Value::as_bool) == Some(true));
    ready_if(!containers.is_empty() && all_ready)
}

fn service(spec: &Value, status: &Value) -> Readiness {
    if spec.get("type").and_then(Value::as_str) != Some("LoadBalancer") {
        return Readiness::Ready;
    }
    let ingress = status
        .pointer("/loadBalancer/ingress")
        .and_then(Value::as_array)
        .is_some_and(|i| !i.is_empty());
    ready_if(ingress)
}

#[cfg(test)]
mod tests {
    use super::Readiness::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn every_rule_both_ways() {
        let null = Value::Null;
        let cases: Vec<(&str, &str, Value, Value, Value, Readiness)> = vec![
            // The seed's Deployment status: ready.
            (
                "apps",
                "Deployment",
                json!({"generation": 1}),
                json!({"replicas": 1}),
                json!({"availableReplicas": 1, "conditions": [
                 {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                 {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
                 "observedGeneration": 1, "readyReplicas": 1, "replicas": 1, "updatedReplicas": 1}),
                Ready,
            ),
            (
                "apps",
                "Deployment",
                null.clone(),
                null.clone(),
                json!({"replicas": 3, "readyReplicas": 2}),
                Pending,
            ),
            (
                "apps",
                "Deployment",
                null.clone(),
                json!({"replicas": 3}),
                json!({"replicas": 2, "readyReplicas": 2}),
                Pending,
            ),
            (
                "apps",
                "Deployment",
                json!({"generation": 2}),
                null.clone(),
                json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}),
                Pending,
            ),
            (
                "apps",
                "Deployment",
                null.clone(),
                null.clone(),
                json!({}),
                Ready,
            ),
            (
                "extensions",
                "Deployment",
                null.clone(),
                null.clone(),
                json!({"replicas": 1, "readyReplicas": 1}),
                Ready,
            ),
            (
                "apps",
                "Deployment",
                null.clone(),
                null.clone(),
                json!({"replicas": 1, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
                Failed,
            ),
            // The seed's Pod status: ready.
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "edgex-mongo", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2019-07-19T21:48:27Z"}}}], "phase": "Running"}),
                Ready,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"phase": "Running", "containerStatuses": [{"ready": true}, {"ready": false}]}),
                Pending,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"phase": "Pending"}),
                Pending,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"phase": "Succeeded"}),
                Ready,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"phase": "Failed"}),
                Failed,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"phase": "Running", "containerStatuses": [
                {"ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
                Failed,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"containerStatuses": [
                {"ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
                Pending,
            ),
            (
                "apps",
                "StatefulSet",
                null.clone(),
                json!({"replicas": 2}),
                json!({"readyReplicas": 2, "currentRevision": "a", "updateRevision": "a"}),
                Ready,
            ),
            (
                "apps",
                "StatefulSet",
                null.clone(),
                json!({"replicas": 2}),
                json!({"readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"}),
                Pending,
            ),
            (
                "apps",
                "StatefulSet",
                null.clone(),
                json!({}),
                json!({"readyReplicas": 0}),
                Pending,
            ),
            (
                "apps",
                "DaemonSet",
                null.clone(),
                null.clone(),
                json!({"desiredNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 3}),
                Ready,
            ),
            (
                "apps",
                "DaemonSet",
                null.clone(),
                null.clone(),
                json!({"desiredNumberScheduled": 3, "numberReady": 2}),
                Pending,
            ),
            (
                "batch",
                "Job",
                null.clone(),
                null.clone(),
                json!({"conditions": [{"type": "Complete", "status": "True"}]}),
                Ready,
            ),
            (
                "batch",
                "Job",
                null.clone(),
                json!({"completions": 2}),
                json!({"succeeded": 2}),
                Ready,
            ),
            (
                "batch",
                "Job",
                null.clone(),
                json!({"completions": 2}),
                json!({"succeeded": 1, "active": 1}),
                Pending,
            ),
            (
                "batch",
                "Job",
                null.clone(),
                null.clone(),
                json!({"conditions": [{"type": "Failed", "status": "True"}]}),
                Failed,
            ),
            (
                "",
                "Service",
                null.clone(),
                json!({"type": "ClusterIP"}),
                json!({}),
                Ready,
            ),
            (
                "",
                "Service",
                null.clone(),
                json!({"type": "LoadBalancer"}),
                json!({"loadBalancer": {}}),
                Pending,
            ),
            (
                "",
                "Service",
                null.clone(),
                json!({"type": "LoadBalancer"}),
                json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}),
                Ready,
            ),
            // Other kinds, or the same Kind in another group.
            (
                "",
                "ConfigMap",
                null.clone(),
                null.clone(),
                null.clone(),
                Present,
            ),
            (
                "example.com",
                "Deployment",
                null.clone(),
                null.clone(),
                json!({"replicas": 1}),
                Present,
            ),
            // Garbage never panics.
            (
                "apps",
                "Deployment",
                json!("x"),
                json!([1]),
                json!({"replicas": "three", "conditions": "no"}),
                Ready,
            ),
            (
                "",
                "Pod",
                null.clone(),
                null.clone(),
                json!({"containerStatuses": {"a": 1}}),
                Pending,
            ),
        ];
        for (group, kind, metadata, spec, status, want) in cases {
            assert_eq!(
                readiness(group, kind, &metadata, &spec, &status),
                want,
                "{group}/{kind} metadata {metadata} spec {spec} status {status}"
            );
        }
    }
}
