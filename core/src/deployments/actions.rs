//! What each `DeploymentAction` does to a `Deployment`: the rules of the life cycle and of the
//! reports. Pure; `apply` runs `check_action` on the input and `apply_action` on a copy of the
//! deployment, and keeps the copy only if every item passed, so a refused command changes nothing.

use std::collections::BTreeSet;

use compact_str::CompactString;

use super::{
    AppResource, Bundle, ClusterEntry, ClusterResource, ClusterStatus, ContextState, Deployment,
    DeploymentAction, Gvk, Header, ResourceKey, RsyncStatus, RsyncUpdate, StatusLimits,
    StatusResource, UserState, DEPLOYMENT_NAME_CHARS_MAX,
};
use crate::deployments::readiness::Readiness;
use crate::objects::raw_json::RawJson;
use crate::objects::resource::ObjectKey;
use crate::objects::validate::validate_kind;
use crate::rejection::Rejection;

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Rejection {
    Rejection::Invalid {
        field: field.into(),
        rule: rule.into(),
    }
}

fn state_error(key: &ObjectKey, reason: String) -> Rejection {
    Rejection::DeploymentState {
        key: key.clone(),
        reason,
    }
}

/// App and cluster names: 1..=128 characters of `[A-Za-z0-9._-]`.
fn check_name(field: &str, name: &str) -> Result<(), Rejection> {
    if name.is_empty() || name.chars().count() > DEPLOYMENT_NAME_CHARS_MAX {
        return Err(invalid(
            field,
            format!("must be 1 to {DEPLOYMENT_NAME_CHARS_MAX} characters"),
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            field,
            "may hold only A-Z, a-z, 0-9, '.', '_' and '-'",
        ));
    }
    Ok(())
}

/// A Kubernetes resource name: 1..=253 printable ASCII characters without spaces or '/'.
fn check_resource_name(field: &str, name: &str) -> Result<(), Rejection> {
    if name.is_empty() || name.len() > 253 {
        return Err(invalid(field, "must be 1 to 253 characters"));
    }
    if !name.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(invalid(
            field,
            "must be printable ASCII without spaces or '/'",
        ));
    }
    Ok(())
}

fn check_gvk(field: &str, gvk: &Gvk) -> Result<(), Rejection> {
    validate_kind(&gvk.kind).map_err(|e| match e {
        Rejection::Invalid { rule, .. } => invalid(format!("{field}.Kind"), rule),
        other => other,
    })?;
    let version_ok = !gvk.version.is_empty()
        && gvk.version.len() <= 63
        && gvk.version.bytes().all(|b| b.is_ascii_alphanumeric());
    if !version_ok {
        return Err(invalid(
            format!("{field}.Version"),
            "must be 1 to 63 letters and digits, e.g. v1 or v1beta2",
        ));
    }
    let group_ok = gvk.group.len() <= 253
        && gvk
            .group
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    if !group_ok {
        return Err(invalid(
            format!("{field}.Group"),
            "must be empty (the core group) or a DNS subdomain of at most 253 characters",
        ));
    }
    Ok(())
}

fn check_header(header: &Header) -> Result<(), Rejection> {
    for (field, value) in [
        ("spec.project", &header.project),
        ("spec.compositeApp", &header.composite_app),
        ("spec.compositeAppVersion", &header.composite_app_version),
        ("spec.compositeProfile", &header.composite_profile),
    ] {
        check_name(field, value)?;
    }
    Ok(())
}

fn json_bytes(value: &serde_json::Value) -> u64 {
    if value.is_null() {
        return 0;
    }
    serde_json::to_vec(value).map_or(u64::MAX, |v| v.len() as u64)
}

fn check_raw(
    field: &str,
    parts: &[&serde_json::Value],
    limits: &StatusLimits,
) -> Result<(), Rejection> {
    for part in parts {
        if !(part.is_null() || part.is_object()) {
            return Err(invalid(
                field,
                "metadata, spec and status must be JSON objects or null",
            ));
        }
    }
    let bytes: u64 = parts.iter().map(|p| json_bytes(p)).sum();
    if bytes > limits.resource_bytes_max {
        return Err(Rejection::TooLarge {
            field: field.to_string(),
            rule: format!(
                "{bytes} bytes of metadata, spec and status, more than status.resource_bytes_max \
                 = {}",
                limits.resource_bytes_max
            ),
        });
    }
    Ok(())
}

fn check_items(field: &str, n: usize, limits: &StatusLimits) -> Result<(), Rejection> {
    if n as u64 > limits.items_max {
        return Err(Rejection::TooLarge {
            field: field.to_string(),
            rule: format!(
                "{n} items, more than status.items_max = {} per request",
                limits.items_max
            ),
        });
    }
    Ok(())
}

/// The structural checks of an action (names, GVKs, sizes, item counts): everything that does
/// not depend on the deployment. Servers run it before proposing; apply runs it again.
pub fn check_action(action: &DeploymentAction, limits: &StatusLimits) -> Result<(), Rejection> {
    match action {
        DeploymentAction::Create { header, labels } => {
            check_header(header)?;
            for (k, v) in labels {
                crate::objects::validate::validate_label_key("metadata.labels", k)?;
                crate::objects::validate::validate_label_value(
                    &format!("metadata.labels[{k}]"),
                    v,
                )?;
            }
        }
        DeploymentAction::AddResources { resources } => {
            check_items("resources", resources.len(), limits)?;
            for (i, r) in resources.iter().enumerate() {
                let f = format!("resources[{i}]");
                check_name(&format!("{f}.app"), &r.app)?;
                check_name(&format!("{f}.cluster"), &r.cluster)?;
                check_gvk(&format!("{f}.GVK"), &r.gvk)?;
                check_resource_name(&format!("{f}.Name"), &r.name)?;
                check_raw(&f, &[&r.metadata, &r.spec], limits)?;
            }
        }
        DeploymentAction::Rsync { updates } => {
            check_items("updates", updates.len(), limits)?;
            for (i, u) in updates.iter().enumerate() {
                let f = format!("updates[{i}]");
                check_name(&format!("{f}.app"), &u.app)?;
                check_name(&format!("{f}.cluster"), &u.cluster)?;
                if let Some(r) = &u.resource {
                    check_gvk(&format!("{f}.GVK"), &r.gvk)?;
                    check_resource_name(&format!("{f}.Name"), &r.name)?;
                }
            }
        }
        DeploymentAction::Cluster { bundles } => {
            let total: usize = bundles.iter().map(|b| b.resources.len().max(1)).sum();
            check_items("bundles", total, limits)?;
            let mut seen = BTreeSet::new();
            for (i, b) in bundles.iter().enumerate() {
                let f = format!("bundles[{i}]");
                check_name(&format!("{f}.app"), &b.app)?;
                check_name(&format!("{f}.cluster"), &b.cluster)?;
                if !seen.insert((&b.app, &b.cluster)) {
                    return Err(invalid(
                        f,
                        format!(
                            "app {} cluster {} appears twice in one report",
                            b.app, b.cluster
                        ),
                    ));
                }
                for kind in &b.kinds {
                    validate_kind(kind).map_err(|_| {
                        invalid(format!("{f}.kinds"), format!("{kind:?} is not a Kind"))
                    })?;
                }
                for (j, r) in b.resources.iter().enumerate() {
                    let g = format!("{f}.resources[{j}]");
                    check_gvk(&format!("{g}.GVK"), &r.gvk)?;
                    check_resource_name(&format!("{g}.Name"), &r.name)?;
                    check_raw(&g, &[&r.metadata, &r.spec, &r.status], limits)?;
                }
            }
        }
        DeploymentAction::Approve
        | DeploymentAction::Instantiate
        | DeploymentAction::Terminate
        | DeploymentAction::Context { .. }
        | DeploymentAction::Delete => {}
    }
    Ok(())
}

/// Applies `action` (other than `Create` and `Delete`, which the caller handles with the
/// mirror) to `d`, which the caller discards on `Err`. `check_action` must have passed.
pub fn apply_action(
    key: &ObjectKey,
    d: &mut Deployment,
    action: &DeploymentAction,
    limits: &StatusLimits,
) -> Result<(), Rejection> {
    match action {
        DeploymentAction::Create { .. } | DeploymentAction::Delete => Err(invalid(
            "action",
            "create and delete are not changes of a deployment",
        )),
        DeploymentAction::AddResources { resources } => add_resources(key, d, resources, limits),
        DeploymentAction::Approve => approve(key, d),
        DeploymentAction::Instantiate => instantiate(key, d),
        DeploymentAction::Terminate => terminate(key, d),
        DeploymentAction::Rsync { updates } => rsync(key, d, updates),
        DeploymentAction::Context { state } => context(key, d, *state),
        DeploymentAction::Cluster { bundles } => cluster(key, d, bundles, limits),
    }
}

/// Whether the deployment may be deleted: not while rsync works on it.
pub fn check_delete(key: &ObjectKey, d: &Deployment) -> Result<(), Rejection> {
    match d.context {
        None | Some(ContextState::Terminated | ContextState::TerminateFailed) => Ok(()),
        Some(state) => Err(state_error(
            key,
            format!(
                "its AppContext is {state}; delete needs it absent (never instantiated), \
                 Terminated or TerminateFailed: terminate it and wait for rsync"
            ),
        )),
    }
}

fn add_resources(
    key: &ObjectKey,
    d: &mut Deployment,
    resources: &[AppResource],
    limits: &StatusLimits,
) -> Result<(), Rejection> {
    let open = matches!(d.context, None | Some(ContextState::Terminated));
    if !open {
        return Err(state_error(
            key,
            format!(
                "its AppContext is {}; resources are defined before instantiating (or after \
                 Terminated, before instantiating again)",
                d.context.map_or("absent", |s| s.as_str())
            ),
        ));
    }
    for r in resources {
        let rk = ResourceKey {
            name: r.name.as_str().into(),
            gvk: r.gvk.clone(),
        };
        let defined = StatusResource::defined(
            RawJson::from_value(&r.metadata),
            RawJson::from_value(&r.spec),
        );
        d.with_cluster(&r.app, &r.cluster, |entry| entry.put(rk, defined));
    }
    check_size(d, limits)
}

fn check_size(d: &Deployment, limits: &StatusLimits) -> Result<(), Rejection> {
    let n = d.resources_len();
    if n > limits.resources_max {
        return Err(Rejection::TooLarge {
            field: "resources".to_string(),
            rule: format!(
                "the deployment would hold {n} resources, more than status.resources_max = {}",
                limits.resources_max
            ),
        });
    }
    Ok(())
}

fn approve(key: &ObjectKey, d: &mut Deployment) -> Result<(), Rejection> {
    if d.user_state != UserState::Created {
        return Err(state_error(
            key,
            format!("it is {}; approve needs Created", d.user_state),
        ));
    }
    d.user_state = UserState::Approved;
    Ok(())
}

fn instantiate(key: &ObjectKey, d: &mut Deployment) -> Result<(), Rejection> {
    let again =
        d.user_state == UserState::Terminated && d.context == Some(ContextState::Terminated);
    if d.user_state != UserState::Approved && !again {
        return Err(state_error(
            key,
            format!(
                "it is {} with AppContext {}; instantiate needs Approved, or Terminated with its \
                 AppContext Terminated",
                d.user_state,
                d.context.map_or("absent", |s| s.as_str())
            ),
        ));
    }
    d.user_state = UserState::Instantiated;
    d.context = Some(ContextState::Instantiating);
    // A new AppContext: rsync has handled nothing, nobody has seen anything.
    let places: Vec<(CompactString, CompactString)> = places(d);
    for (app, cluster) in places {
        d.with_cluster(&app, &cluster, |entry| {
            let keys: Vec<ResourceKey> = entry.resources.keys().cloned().collect();
            for rk in keys {
                let Some(old) = entry.get(&rk).cloned() else {
                    continue;
                };
                if old.rsync.is_none() {
                    entry.remove(&rk);
                    continue;
                }
                let fresh = StatusResource::defined(old.app_metadata, old.app_spec);
                entry.put(rk, fresh);
            }
        });
    }
    settle(d, false);
    Ok(())
}

fn places(d: &Deployment) -> Vec<(CompactString, CompactString)> {
    d.apps
        .iter()
        .flat_map(|(app, clusters)| clusters.keys().map(move |c| (app.clone(), c.clone())))
        .collect()
}

fn terminate(key: &ObjectKey, d: &mut Deployment) -> Result<(), Rejection> {
    let next = match d.context {
        Some(ContextState::Instantiating) => ContextState::PreTerminate,
        Some(ContextState::Instantiated | ContextState::InstantiateFailed) => {
            ContextState::Terminating
        }
        _ => {
            return Err(state_error(
                key,
                format!(
                    "its AppContext is {}; terminate needs Instantiating, Instantiated or \
                     InstantiateFailed",
                    d.context.map_or("absent", |s| s.as_str())
                ),
            ))
        }
    };
    d.user_state = UserState::Terminated;
    d.context = Some(next);
    settle(d, false);
    Ok(())
}

fn context(key: &ObjectKey, d: &mut Deployment, next: ContextState) -> Result<(), Rejection> {
    let current = d.context.ok_or_else(|| {
        state_error(
            key,
            "it has no AppContext yet; instantiate it first".to_string(),
        )
    })?;
    let allowed = current.reportable_next();
    if !allowed.contains(&next) {
        let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
        return Err(state_error(
            key,
            format!(
                "its AppContext is {current}; rsync may move it to {} (not {next}); the other \
                 states follow from resource reports and user actions",
                if names.is_empty() {
                    "no other state".to_string()
                } else {
                    names.join(" or ")
                }
            ),
        ));
    }
    d.context = Some(next);
    settle(d, false);
    Ok(())
}

fn rsync(key: &ObjectKey, d: &mut Deployment, updates: &[RsyncUpdate]) -> Result<(), Rejection> {
    let current = d.context.ok_or_else(|| {
        state_error(
            key,
            "it has no AppContext yet; instantiate it first".to_string(),
        )
    })?;
    let allowed = current.rsync_allowed();
    let mut failed = false;
    for (i, u) in updates.iter().enumerate() {
        if !allowed.contains(&u.status) {
            let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
            return Err(state_error(
                key,
                format!(
                    "updates[{i}]: its AppContext is {current}, where an rsync-status may be {} \
                     (not {})",
                    if names.is_empty() {
                        "nothing".to_string()
                    } else {
                        names.join(", ")
                    },
                    u.status
                ),
            ));
        }
        failed |= u.status == RsyncStatus::Failed;
        let missing = || Rejection::DeploymentResourceNotFound {
            key: key.clone(),
            what: match &u.resource {
                Some(r) => format!("updates[{i}]: {r} in app {} cluster {}", u.app, u.cluster),
                None => format!("updates[{i}]: app {} cluster {}", u.app, u.cluster),
            },
        };
        if d.cluster(&u.app, &u.cluster).is_none() {
            return Err(missing());
        }
        let outcome = d.with_cluster(&u.app, &u.cluster, |entry| match &u.resource {
            Some(rk) => match entry.get(rk) {
                Some(old) if old.rsync.is_some() => {
                    let mut next = old.clone();
                    next.rsync = Some(u.status);
                    entry.put(rk.clone(), next);
                    true
                }
                _ => false,
            },
            None => {
                let keys: Vec<ResourceKey> = entry
                    .resources()
                    .filter(|(_, r)| r.rsync.is_some())
                    .map(|(k, _)| k.clone())
                    .collect();
                for rk in keys {
                    if let Some(old) = entry.get(&rk) {
                        let mut next = old.clone();
                        next.rsync = Some(u.status);
                        entry.put(rk, next);
                    }
                }
                true
            }
        });
        if !outcome {
            return Err(missing());
        }
    }
    settle(d, failed);
    Ok(())
}

/// Moves the AppContext on from its resources: while instantiating, to InstantiateFailed when
/// this command reported a failure, else to Instantiated once every resource is Applied; while
/// terminating, likewise to TerminateFailed or Terminated. A failure counts when it is reported,
/// not while it stands: a resource that failed to apply does not fail the terminate sequence.
fn settle(d: &mut Deployment, failure_reported: bool) {
    let t = d.tally;
    let total = t.rsync_resources();
    let count = |s: RsyncStatus| t.rsync[s.index()];
    d.context = match d.context {
        Some(ContextState::Instantiating) if failure_reported => {
            Some(ContextState::InstantiateFailed)
        }
        Some(ContextState::Instantiating) if count(RsyncStatus::Applied) == total => {
            Some(ContextState::Instantiated)
        }
        Some(ContextState::Terminating) if failure_reported => Some(ContextState::TerminateFailed),
        Some(ContextState::Terminating) if count(RsyncStatus::Terminated) == total => {
            Some(ContextState::Terminated)
        }
        other => other,
    };
}

fn cluster(
    key: &ObjectKey,
    d: &mut Deployment,
    bundles: &[Bundle],
    limits: &StatusLimits,
) -> Result<(), Rejection> {
    for (i, b) in bundles.iter().enumerate() {
        if d.cluster(&b.app, &b.cluster).is_none() {
            return Err(Rejection::DeploymentResourceNotFound {
                key: key.clone(),
                what: format!(
                    "bundles[{i}]: app {} cluster {} (no AppContext resource is placed there)",
                    b.app, b.cluster
                ),
            });
        }
        d.with_cluster(&b.app, &b.cluster, |entry| observe_bundle(entry, b));
    }
    check_size(d, limits)
}

/// One ResourceBundleState: what is in it is Present; with `partial` unset, an AppContext
/// resource missing from it is NotPresent when the bundle reports its kind, else Unknown, and a
/// cluster-only resource missing from it is gone.
fn observe_bundle(entry: &mut ClusterEntry, b: &Bundle) {
    let mut seen = BTreeSet::new();
    for r in &b.resources {
        let rk = resource_key(r);
        let mut next = entry.get(&rk).cloned().unwrap_or_else(|| StatusResource {
            rsync: None,
            cluster: ClusterStatus::Unknown,
            readiness: Readiness::Unknown,
            app_metadata: RawJson::null(),
            app_spec: RawJson::null(),
            metadata: RawJson::null(),
            spec: RawJson::null(),
            status: RawJson::null(),
        });
        next.observe(&rk.gvk, r);
        seen.insert(rk.clone());
        entry.put(rk, next);
    }
    if b.partial {
        return;
    }
    let missing: Vec<ResourceKey> = entry
        .resources()
        .filter(|(k, _)| !seen.contains(*k))
        .map(|(k, _)| k.clone())
        .collect();
    for rk in missing {
        let Some(old) = entry.get(&rk) else { continue };
        if old.rsync.is_none() {
            entry.remove(&rk);
            continue;
        }
        let status = if b.kinds.contains(rk.gvk.kind.as_str()) {
            ClusterStatus::NotPresent
        } else {
            ClusterStatus::Unknown
        };
        let mut next = old.clone();
        next.unobserve(status);
        if next != *old {
            entry.put(rk, next);
        }
    }
}

fn resource_key(r: &ClusterResource) -> ResourceKey {
    ResourceKey {
        name: r.name.as_str().into(),
        gvk: r.gvk.clone(),
    }
}
