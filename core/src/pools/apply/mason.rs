//! Mason's steps on virtual resources (`pools::mason`), run inside `Command::Pool`: after
//! every pool command, dirty virtual resources are recycled and waiting ones fulfilled when all
//! they need is free; `SyncVirtual` sets the configs; `Constructed` frees (or recycles) one
//! whose construct operation ended.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{json, Value};

use super::{current, many, Writes};
use crate::command::Response;
use crate::effects::ApplyContext;
use crate::objects::apply::{apply_object_op, replace, ObjectOp};
use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::operations::{OpResult, OpState};
use crate::pools::{
    PoolEvent, PoolView, VirtualConfig, CONSTRUCTING, CONSTRUCT_KIND, FULFILLING, LEASED_RESOURCES,
    MASON_OWNER, POOL_API_VERSION, POOL_USER_DATA_BYTES_MAX, POOL_USER_DATA_MAX,
    VIRTUAL_CONFIG_KIND,
};
use crate::rejection::Rejection;
use crate::state::State;

/// The state a virtual resource is recycled from, and its needs go back to (Boskos' janitor
/// cleans them from there).
pub(super) const DIRTY: &str = "dirty";
/// The state needs are taken from, and a constructed virtual resource is freed to.
const FREE: &str = "free";

/// Every virtual type's config.
fn configs(state: &State) -> BTreeMap<String, VirtualConfig> {
    super::by_name(state, VIRTUAL_CONFIG_KIND, VirtualConfig::of)
}

fn construct_key(name: &str) -> ObjectKey {
    ObjectKey::new(CONSTRUCT_KIND, DEFAULT_NAMESPACE, name)
}

/// Recycles every dirty virtual resource, then fulfils the waiting ones (longest waiting first)
/// whose needs are all free.
pub(super) fn step(
    state: &mut State,
    ctx: &ApplyContext,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let configs = configs(state);
    if configs.is_empty() {
        return Ok(());
    }
    for vtype in configs.keys() {
        while let Some(name) = state.pools.oldest_free(vtype, DIRTY).map(str::to_string) {
            let (object, view) = current(state, &name)?;
            recycle(state, ctx, &object, view, events)?;
        }
    }
    // A virtual type whose first waiter cannot be fulfilled has no other that can.
    let mut short = BTreeSet::new();
    for name in state.pools.fulfilling() {
        let (object, view) = current(state, &name)?;
        if short.contains(&view.rtype) {
            continue;
        }
        let Some(config) = configs.get(&view.rtype) else {
            continue;
        };
        let free = |t: &String, n: &u32| {
            state.pools.free_len(t, FREE) >= usize::try_from(*n).unwrap_or(usize::MAX)
        };
        if !config.needs.iter().all(|(t, n)| free(t, n)) {
            short.insert(view.rtype.clone());
            continue;
        }
        fulfil(state, ctx, &object, view, config, events)?;
    }
    Ok(())
}

/// A dirty virtual resource gives its leased resources back dirty and waits, held by Mason,
/// for new ones (or is deleted, if the config no longer lists it).
fn recycle(
    state: &mut State,
    ctx: &ApplyContext,
    object: &Resource,
    mut view: PoolView,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let name = object.metadata.name.to_string();
    if view.to_be_deleted {
        events.delete(state, ctx, &name, &view)?;
        return Ok(());
    }
    events.unbind(state, ctx, &name, &view, DIRTY)?;
    view.user_data.clear();
    view.state = FULFILLING.to_string();
    view.owner = MASON_OWNER.to_string();
    view.request_id.clear();
    view.construct_key.clear();
    view.last_update_ms = state.time_ms;
    events.put_one(state, object, &view)?;
    Ok(())
}

/// Leases every resource `config` needs (the oldest-updated free ones) for the virtual resource
/// in one step, and describes the work in its `MasonConstruct` object.
fn fulfil(
    state: &mut State,
    ctx: &ApplyContext,
    object: &Resource,
    mut view: PoolView,
    config: &VirtualConfig,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let name = object.metadata.name.to_string();
    let now = state.time_ms;
    let mut leased = Vec::new();
    let mut by_type: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (rtype, n) in &config.needs {
        for _ in 0..*n {
            let Some(child) = state.pools.oldest_free(rtype, FREE).map(str::to_string) else {
                // Checked by the caller; a refusal here undoes the whole command.
                return Err(Rejection::PoolEmpty {
                    rtype: rtype.clone(),
                    state: FREE.to_string(),
                });
            };
            let (child_object, mut child_view) = current(state, &child)?;
            child_view.state = CONSTRUCTING.to_string();
            child_view.owner = MASON_OWNER.to_string();
            child_view.parent = name.clone();
            child_view.request_id.clear();
            child_view.last_update_ms = now;
            events.put_one(state, &child_object, &child_view)?;
            by_type.entry(rtype).or_default().push(child.clone());
            leased.push(child);
        }
    }
    let key_text = format!("mason/{name}/{}", ctx.log_index);
    let list = serde_json::to_string(&leased).unwrap_or_default();
    view.user_data = BTreeMap::from([(LEASED_RESOURCES.to_string(), list)]);
    view.state = CONSTRUCTING.to_string();
    view.construct_key = key_text.clone();
    view.last_update_ms = now;
    events.put_one(state, object, &view)?;
    // The construct operation's target: what it builds, from what, with which config.
    let mut work = Resource::new(POOL_API_VERSION, CONSTRUCT_KIND, DEFAULT_NAMESPACE, &name);
    work.metadata
        .labels
        .insert("type".to_string(), view.rtype.clone());
    let spec = json!({
        "resource": name,
        "type": view.rtype,
        "idempotencyKey": key_text,
        "config": {"type": config.config_type, "content": config.content},
        "leasedResources": by_type,
    });
    work.spec = crate::objects::raw_json::RawJson::from_value(&spec);
    let change = match state.objects.contains_key(&construct_key(&name)) {
        true => replace(state, work)?,
        false => apply_object_op(state, ctx, ObjectOp::Create(&work))?,
    };
    events.record(change);
    events.pool_events.push(PoolEvent::Fulfilled { name });
    Ok(())
}

/// The user data a construct operation's response gives: a JSON object's entries (strings as
/// they are, anything else as its JSON text), or `response` = the text of anything else; with
/// the leased resources. `None` if it passes the user data limits.
fn user_data_of(response: &Value, leased: &str) -> Option<BTreeMap<String, String>> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut data: BTreeMap<String, String> = match response {
        Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), text(v))).collect(),
        Value::Null => BTreeMap::new(),
        other => BTreeMap::from([("response".to_string(), text(other))]),
    };
    data.insert(LEASED_RESOURCES.to_string(), leased.to_string());
    let fits = data.len() <= POOL_USER_DATA_MAX
        && data
            .iter()
            .all(|(k, v)| !k.is_empty() && k.len() <= 253 && v.len() <= POOL_USER_DATA_BYTES_MAX);
    fits.then_some(data)
}

/// `Constructed`: see `PoolAction::Constructed`.
pub(super) fn constructed(
    state: &mut State,
    ctx: &ApplyContext,
    name: &str,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let (object, mut view) = current(state, name)?;
    if view.owner != MASON_OWNER || view.state != CONSTRUCTING || !view.parent.is_empty() {
        return Err(Rejection::PoolState {
            name: name.to_string(),
            reason: format!(
                "it is {} and owned by {:?}; only a virtual resource being constructed can be \
                 constructed",
                view.state, view.owner
            ),
        });
    }
    let op = state
        .ops
        .by_key(&view.construct_key)
        .ok_or_else(|| Rejection::PoolState {
            name: name.to_string(),
            reason: format!(
                "no construct operation with idempotency key {} was submitted",
                view.construct_key
            ),
        })?;
    if !op.state.is_final() {
        return Err(Rejection::PoolState {
            name: name.to_string(),
            reason: format!("its construct operation {} is {:?}", op.id, op.state),
        });
    }
    let leased = view
        .user_data
        .get(LEASED_RESOURCES)
        .cloned()
        .unwrap_or_default();
    let data = match (&op.state, &op.result) {
        (OpState::Succeeded, Some(OpResult::Response(response))) => user_data_of(response, &leased),
        (OpState::Succeeded, None) => user_data_of(&Value::Null, &leased),
        _ => None,
    };
    if state.objects.contains_key(&construct_key(name)) {
        let change = apply_object_op(state, ctx, ObjectOp::Delete(&construct_key(name), None))?;
        events.record(change);
    }
    view.construct_key.clear();
    view.last_update_ms = state.time_ms;
    if let (Some(data), false) = (data, view.to_be_deleted) {
        // Built: free, its needs parked under its name until it is acquired.
        view.user_data = data;
        view.state = FREE.to_string();
        view.owner.clear();
        let stored = events.put(state, &object, &view)?;
        return Ok(many(state, vec![stored]));
    }
    if view.to_be_deleted {
        let deleted = events.delete(state, ctx, name, &view)?;
        return Ok(many(state, vec![deleted]));
    }
    // Not built: its needs go back dirty; it waits for new ones (dirty and unowned if its type
    // is no longer virtual).
    events.unbind(state, ctx, name, &view, DIRTY)?;
    view.user_data.clear();
    if !state.objects.contains_key(&ObjectKey::new(
        VIRTUAL_CONFIG_KIND,
        DEFAULT_NAMESPACE,
        &view.rtype,
    )) {
        view.state = DIRTY.to_string();
        view.owner.clear();
    } else {
        view.state = FULFILLING.to_string();
    }
    let stored = events.put_one(state, &object, &view)?;
    Ok(many(state, vec![stored]))
}

/// `SyncVirtual`: the `MasonConfig` objects become exactly `configs`. Virtual resources waiting
/// for the needs of a type no longer virtual go back dirty and unowned.
pub(super) fn sync_virtual(
    state: &mut State,
    ctx: &ApplyContext,
    configs: &[VirtualConfig],
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let existing = self::configs(state);
    let wanted: BTreeMap<&str, &VirtualConfig> =
        configs.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut changed: Vec<Arc<Resource>> = Vec::new();
    for name in existing.keys() {
        if wanted.contains_key(name.as_str()) {
            continue;
        }
        let k = ObjectKey::new(VIRTUAL_CONFIG_KIND, DEFAULT_NAMESPACE, name);
        let change = apply_object_op(state, ctx, ObjectOp::Delete(&k, None))?;
        changed.push(events.record(change));
    }
    for config in configs {
        match existing.get(&config.name) {
            Some(old) if old == config => {}
            Some(_) => {
                let change = replace(state, config.object())?;
                changed.push(events.record(change));
            }
            None => {
                let change = apply_object_op(state, ctx, ObjectOp::Create(&config.object()))?;
                changed.push(events.record(change));
            }
        }
    }
    for name in state.pools.fulfilling() {
        let (object, mut view) = current(state, &name)?;
        if wanted.contains_key(view.rtype.as_str()) {
            continue;
        }
        view.state = DIRTY.to_string();
        view.owner.clear();
        view.last_update_ms = state.time_ms;
        events.put_one(state, &object, &view)?;
    }
    Ok(many(state, changed.into_iter().collect()))
}
