//! `Command::Deployment`: a change of a deployment's status table together with its mirror
//! object, in one step. The table change runs on a copy that is kept only when every item of
//! the command passed; the mirror's status is rewritten only when the states or the counts moved,
//! so such a command is one revision and one event, and a report that moved nothing visible in
//! the mirror (a Pod's status changed, its readiness did not) is none.

use crate::command::DeploymentCommand;
use crate::command::ObjectReply;
use std::sync::Arc;

use crate::command::{Event, Response};
use crate::deployments::{
    apply_action, check_action, check_delete, Deployment, DeploymentAction, StatusLimits,
    DEPLOYMENT_API_VERSION, DEPLOYMENT_KIND,
};
use crate::effects::ApplyContext;
use crate::objects::apply::{apply_object_op, emit, ObjectOp};
use crate::objects::raw_json::RawJson;
use crate::objects::resource::{ObjectKey, Resource};
use crate::rejection::Rejection;
use crate::state::State;

/// Applies one deployment command (`Command::Deployments`).
pub(crate) fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    command: &DeploymentCommand,
    events: &mut Vec<Event>,
) -> Response {
    let DeploymentCommand {
        key,
        action,
        limits,
    } = command;
    apply_deployment(state, ctx, key, action, limits, events)
}

fn apply_deployment(
    state: &mut State,
    ctx: &ApplyContext,
    key: &ObjectKey,
    action: &DeploymentAction,
    limits: &StatusLimits,
    events: &mut Vec<Event>,
) -> Response {
    match try_apply(state, ctx, key, action, limits, events) {
        Ok(response) => response,
        Err(rejection) => Response::Rejected(rejection),
    }
}

fn try_apply(
    state: &mut State,
    ctx: &ApplyContext,
    key: &ObjectKey,
    action: &DeploymentAction,
    limits: &StatusLimits,
    events: &mut Vec<Event>,
) -> Result<Response, Rejection> {
    if key.kind != DEPLOYMENT_KIND {
        return Err(Rejection::Invalid {
            field: "kind".to_string(),
            rule: format!("a deployment's kind is {DEPLOYMENT_KIND}, not {}", key.kind),
        });
    }
    check_action(action, limits)?;
    if let DeploymentAction::Create { header, labels } = action {
        let mut mirror = Resource::new(
            DEPLOYMENT_API_VERSION,
            DEPLOYMENT_KIND,
            &key.namespace,
            &key.name,
        );
        mirror.metadata.labels = labels.clone().into();
        mirror.spec = RawJson::from_value(&serde_json::to_value(header).unwrap_or_default());
        let deployment = Deployment::new(header.clone());
        mirror.status = deployment.mirror_status();
        let change = apply_object_op(state, ctx, ObjectOp::Create(&mirror))?;
        emit(events, &change);
        state.deployments.insert(key.clone(), deployment);
        return Ok(object_response(state, change.object));
    }
    let current = state
        .deployments
        .get(key)
        .ok_or_else(|| Rejection::NotFound { key: key.clone() })?;
    if let DeploymentAction::Delete = action {
        check_delete(key, current)?;
        let change = apply_object_op(state, ctx, ObjectOp::Delete(key, None))?;
        emit(events, &change);
        state.deployments.remove(key);
        return Ok(object_response(state, change.object));
    }
    let mut next = current.clone();
    apply_action(key, &mut next, action, limits)?;
    let mirror = state
        .objects
        .get(key)
        .ok_or_else(|| Rejection::NotFound { key: key.clone() })?;
    let status = next.mirror_status();
    let change = if mirror.status == status {
        None
    } else {
        let mut updated = (**mirror).clone();
        updated.status = status;
        Some(apply_object_op(
            state,
            ctx,
            ObjectOp::UpdateStatus(&updated, None),
        )?)
    };
    state.deployments.insert(key.clone(), next);
    let object = match change {
        Some(change) => {
            emit(events, &change);
            change.object
        }
        None => state
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| Rejection::NotFound { key: key.clone() })?,
    };
    Ok(object_response(state, object))
}

fn object_response(state: &State, object: Arc<Resource>) -> Response {
    Response::Objects(ObjectReply::Object {
        object: Arc::unwrap_or_clone(object),
        revision: state.revision,
    })
}
