//! `Command::Pool`: leases of pool resources (`state::pool`). Every check runs before the first
//! change, so a refused command changes nothing; an accepted one changes each resource it names
//! once (one revision and one event each). Time is the entry's (`State::time_ms`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::ops::{apply_op, replace, Change, Op};
use super::{emit, ApplyContext, State};
use crate::state::command::{Event, Rejection, Response};
use crate::state::pool::{
    check_pool_action, PoolAction, PoolEntry, PoolView, POOL_API_VERSION, POOL_KIND,
};
use crate::state::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, name)
}

/// The stored object and its view, or NotFound.
fn current(state: &State, name: &str) -> Result<(Arc<Resource>, PoolView), Rejection> {
    let k = key(name);
    let object = state
        .objects
        .get(&k)
        .cloned()
        .ok_or(Rejection::NotFound { key: k })?;
    let view = PoolView::of(&object).unwrap_or_default();
    Ok((object, view))
}

fn owned_by(name: &str, view: &PoolView, owner: &str) -> Result<(), Rejection> {
    if view.owner != owner {
        return Err(Rejection::PoolNotOwner {
            name: name.to_string(),
            owner: owner.to_string(),
            holder: view.owner.clone(),
        });
    }
    Ok(())
}

/// The changes of one command: their events, and how to undo them if a later step is refused
/// (as a txn does), so a command is applied whole or not at all.
struct Writes<'e> {
    events: &'e mut Vec<Event>,
    undo: Vec<(ObjectKey, Option<Arc<Resource>>)>,
}

impl Writes<'_> {
    fn record(&mut self, change: Change) -> Arc<Resource> {
        emit(self.events, &change);
        self.undo.extend(change.undo);
        change.object
    }

    /// Stores `view` into a copy of `object`: one revision, one event.
    fn put(
        &mut self,
        state: &mut State,
        object: &Resource,
        view: &PoolView,
    ) -> Result<Arc<Resource>, Rejection> {
        let mut next = object.clone();
        view.write(&mut next);
        let change = replace(state, next)?;
        Ok(self.record(change))
    }
}

fn one(state: &State, object: Arc<Resource>) -> Response {
    Response::Object {
        object: Arc::unwrap_or_clone(object),
        revision: state.revision,
    }
}

fn many(state: &State, objects: Vec<Arc<Resource>>) -> Response {
    Response::Txn {
        objects: objects.into_iter().map(Arc::unwrap_or_clone).collect(),
        revision: state.revision,
    }
}

pub(super) fn apply_pool(
    state: &mut State,
    ctx: &ApplyContext,
    action: &PoolAction,
    grace_ms: u64,
    events: &mut Vec<Event>,
) -> Response {
    let revision_before = state.revision;
    let events_before = events.len();
    let mut w = Writes {
        events,
        undo: Vec::new(),
    };
    let events = &mut w;
    let result = check_pool_action(action).and_then(|()| match action {
        PoolAction::Acquire {
            rtype,
            state: from,
            dest,
            owner,
            request_id,
        } => acquire(state, rtype, from, dest, owner, request_id, events),
        PoolAction::AcquireByState {
            state: from,
            dest,
            owner,
            names,
        } => acquire_by_state(state, from, dest, owner, names, events),
        PoolAction::Update {
            name,
            owner,
            state: current_state,
            user_data,
        } => update(state, name, owner, current_state, user_data, events),
        PoolAction::Release { name, owner, dest } => release(state, ctx, name, owner, dest, events),
        PoolAction::Reset { names, dest } => reset(state, ctx, names, dest, grace_ms, events),
        PoolAction::Sync { entries, expiry_ms } => sync(state, ctx, entries, expiry_ms, events),
    });
    match result {
        Ok(response) => response,
        Err(rejection) => {
            for (key, previous) in w.undo.into_iter().rev() {
                match previous {
                    Some(object) => state.put_object(key, object),
                    None => state.remove_object(&key),
                };
            }
            state.revision = revision_before;
            w.events.truncate(events_before);
            Response::Rejected(rejection)
        }
    }
}

fn acquire(
    state: &mut State,
    rtype: &str,
    from: &str,
    dest: &str,
    owner: &str,
    request_id: &str,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    if !request_id.is_empty() {
        if let Some(name) = state.pools.by_request(owner, request_id) {
            let (object, _) = current(state, name)?;
            return Ok(one(state, object));
        }
    }
    let Some(name) = state.pools.oldest_free(rtype, from).map(str::to_string) else {
        return Err(Rejection::PoolEmpty {
            rtype: rtype.to_string(),
            state: from.to_string(),
        });
    };
    let (object, mut view) = current(state, &name)?;
    view.state = dest.to_string();
    view.owner = owner.to_string();
    view.request_id = request_id.to_string();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(one(state, stored))
}

fn acquire_by_state(
    state: &mut State,
    from: &str,
    dest: &str,
    owner: &str,
    names: &[String],
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let mut found = Vec::with_capacity(names.len());
    let mut seen = BTreeSet::new();
    for name in names {
        if !seen.insert(name) {
            return Err(Rejection::Invalid {
                field: "names".to_string(),
                rule: format!("{name} is named twice"),
            });
        }
        let (object, view) = current(state, name)?;
        if !view.owner.is_empty() || view.state != from {
            return Err(Rejection::PoolState {
                name: name.clone(),
                reason: format!(
                    "it is {} and {}; acquiring it by state needs it {from} and unowned",
                    view.state,
                    if view.owner.is_empty() {
                        "unowned".to_string()
                    } else {
                        format!("leased by {}", view.owner)
                    }
                ),
            });
        }
        found.push((object, view));
    }
    let mut stored = Vec::with_capacity(found.len());
    for (object, mut view) in found {
        view.state = dest.to_string();
        view.owner = owner.to_string();
        view.request_id.clear();
        view.last_update_ms = state.time_ms;
        stored.push(events.put(state, &object, &view)?);
    }
    Ok(many(state, stored))
}

fn update(
    state: &mut State,
    name: &str,
    owner: &str,
    current_state: &str,
    user_data: &BTreeMap<String, String>,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let (object, mut view) = current(state, name)?;
    owned_by(name, &view, owner)?;
    if view.state != current_state {
        return Err(Rejection::PoolState {
            name: name.to_string(),
            reason: format!(
                "it is {}, not {current_state}; an update names the current state",
                view.state
            ),
        });
    }
    for (k, v) in user_data {
        if v.is_empty() {
            view.user_data.remove(k);
        } else {
            view.user_data.insert(k.clone(), v.clone());
        }
    }
    if view.user_data.len() > crate::state::pool::POOL_USER_DATA_MAX {
        return Err(Rejection::TooLarge {
            field: "user_data".to_string(),
            rule: format!(
                "the resource would hold {} entries, more than POOL_USER_DATA_MAX = {}",
                view.user_data.len(),
                crate::state::pool::POOL_USER_DATA_MAX
            ),
        });
    }
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(one(state, stored))
}

fn release(
    state: &mut State,
    ctx: &ApplyContext,
    name: &str,
    owner: &str,
    dest: &str,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let (object, mut view) = current(state, name)?;
    owned_by(name, &view, owner)?;
    if view.to_be_deleted {
        let change = apply_op(state, ctx, Op::Delete(&key(name), None))?;
        let deleted = events.record(change);
        return Ok(one(state, deleted));
    }
    view.state = dest.to_string();
    view.owner.clear();
    view.request_id.clear();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(one(state, stored))
}

/// Resets the leases among `names` whose expiry passed; the others are left alone (a heartbeat
/// may have come in since the leader looked). Nothing during the grace after a leader change.
fn reset(
    state: &mut State,
    ctx: &ApplyContext,
    names: &[String],
    dest: &str,
    grace_ms: u64,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let now = state.time_ms;
    let settled = state
        .term_started_ms
        .is_some_and(|started| now >= started.saturating_add(grace_ms));
    let mut stored = Vec::new();
    if !settled {
        return Ok(many(state, stored));
    }
    for name in names {
        let Ok((object, mut view)) = current(state, name) else {
            continue;
        };
        if view.expires_ms().is_none_or(|at| at >= now) {
            continue;
        }
        if view.to_be_deleted {
            let change = apply_op(state, ctx, Op::Delete(&key(name), None))?;
            stored.push(events.record(change));
            continue;
        }
        view.state = dest.to_string();
        view.owner.clear();
        view.request_id.clear();
        view.last_update_ms = now;
        stored.push(events.put(state, &object, &view)?);
    }
    Ok(many(state, stored))
}

fn sync(
    state: &mut State,
    ctx: &ApplyContext,
    entries: &[PoolEntry],
    expiry_ms: &BTreeMap<String, BTreeMap<String, u64>>,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let wanted: BTreeMap<&str, &PoolEntry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let start = ObjectKey::new(POOL_KIND, "", "");
    let existing: Vec<Arc<Resource>> = state
        .objects
        .range(start..)
        .take_while(|(k, _)| k.kind == POOL_KIND)
        .map(|(_, o)| Arc::clone(o))
        .collect();
    let mut stored = Vec::new();
    let mut present = BTreeSet::new();
    for object in existing {
        let name = object.metadata.name.to_string();
        let Some(mut view) = PoolView::of(&object) else {
            continue;
        };
        let before = view.clone();
        match wanted.get(name.as_str()) {
            None if view.owner.is_empty() => {
                let change = apply_op(state, ctx, Op::Delete(&object.key(), None))?;
                stored.push(events.record(change));
                continue;
            }
            None => view.to_be_deleted = true,
            Some(entry) => {
                present.insert(name.clone());
                view.to_be_deleted = false;
                if view.owner.is_empty() {
                    view.rtype = entry.rtype.clone();
                }
            }
        }
        view.expiry_ms = expiry_ms.get(&view.rtype).cloned().unwrap_or_default();
        if view != before {
            stored.push(events.put(state, &object, &view)?);
        }
    }
    for entry in entries {
        if present.contains(&entry.name) {
            continue;
        }
        let view = PoolView {
            rtype: entry.rtype.clone(),
            state: entry.state.clone(),
            last_update_ms: state.time_ms,
            expiry_ms: expiry_ms.get(&entry.rtype).cloned().unwrap_or_default(),
            ..PoolView::default()
        };
        let mut object = Resource::new(POOL_API_VERSION, POOL_KIND, DEFAULT_NAMESPACE, &entry.name);
        view.write(&mut object);
        let change = apply_op(state, ctx, Op::Create(&object))?;
        stored.push(events.record(change));
    }
    Ok(many(state, stored))
}
