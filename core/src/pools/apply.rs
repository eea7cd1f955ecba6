//! `Command::Pool`: leases of pool resources (`pools`). Every check runs before the first
//! change, so a refused command changes nothing; an accepted one changes each resource it names
//! once (one revision and one event each). Time is the entry's (`State::time_ms`).
//!
//! A claim whose wait has ended (`wait_ended` at the entry's time) is never granted, even if its
//! waiter's cancel and the reaper's expiry were never proposed: the waiter was already answered
//! Aborted POOL_WAIT_EXPIRED. Every command drops such claims before it grants
//! (`grant_waiting`) and an acquire does so before it counts the queue, so they are no queue and
//! no demand either.

use crate::command::ObjectReply;
use crate::command::PoolCommand;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::command::{Event, Response};
use crate::effects::ApplyContext;
use crate::objects::apply::{apply_object_op, emit, replace, Change, ObjectOp};
use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::pools::{
    check_pool_action, claim_name, leased_of, ClaimView, PoolAction, PoolEntry, PoolEvent,
    PoolView, POOL_API_VERSION, POOL_CLAIM_KIND, POOL_KIND, POOL_WAITERS_MAX,
};
use crate::rejection::Rejection;
use crate::state::State;
use crate::wait::wait_ended;

mod claims;
mod dynamic;
mod mason;

use claims::{acquire, acquire_by_state, cancel_wait, expire_claims, grant_waiting, Ask};

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
    /// What became of waiting acquires; handed out only if the command is applied.
    pool_events: Vec<PoolEvent>,
}

impl Writes<'_> {
    fn record(&mut self, change: Change) -> Arc<Resource> {
        emit(self.events, &change);
        self.undo.extend(change.undo);
        change.object
    }

    /// Stores `view` into a copy of `object`: one revision, one event. The resources leased
    /// with a virtual resource follow it (see `follow`).
    fn put(
        &mut self,
        state: &mut State,
        object: &Resource,
        view: &PoolView,
    ) -> Result<Arc<Resource>, Rejection> {
        let stored = self.put_one(state, object, view)?;
        self.follow(state, &stored.metadata.name, view)?;
        Ok(stored)
    }

    /// `put` of this resource alone.
    fn put_one(
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

    /// The resources leased with virtual resource `name` take its lease: its owner, state and
    /// last update while it is leased; unowned, in a state named after it, while it is not.
    fn follow(
        &mut self,
        state: &mut State,
        name: &str,
        parent: &PoolView,
    ) -> Result<(), Rejection> {
        for child in leased_of(&parent.user_data) {
            let Ok((object, mut view)) = current(state, &child) else {
                continue;
            };
            if view.parent != name {
                continue;
            }
            let before = view.clone();
            if parent.owner.is_empty() {
                view.state = name.to_string();
                view.owner.clear();
            } else {
                view.state = parent.state.clone();
                view.owner = parent.owner.clone();
            }
            view.request_id.clear();
            view.last_update_ms = parent.last_update_ms;
            if view != before {
                self.put_one(state, &object, &view)?;
            }
        }
        Ok(())
    }

    /// The resources leased with virtual resource `parent` go back to the pool, unbound and
    /// unowned, in `dest` (deleted if removed from the config meanwhile).
    fn unbind(
        &mut self,
        state: &mut State,
        ctx: &ApplyContext,
        name: &str,
        parent: &PoolView,
        dest: &str,
    ) -> Result<(), Rejection> {
        for child in leased_of(&parent.user_data) {
            let Ok((object, mut view)) = current(state, &child) else {
                continue;
            };
            if view.parent != name {
                continue;
            }
            if view.to_be_deleted {
                let change = apply_object_op(state, ctx, ObjectOp::Delete(&key(&child), None))?;
                self.record(change);
                continue;
            }
            view.parent.clear();
            view.state = dest.to_string();
            view.owner.clear();
            view.request_id.clear();
            view.last_update_ms = state.time_ms;
            self.put_one(state, &object, &view)?;
        }
        Ok(())
    }

    /// Deletes pool resource `name` (a virtual one gives its leased resources back dirty).
    fn delete(
        &mut self,
        state: &mut State,
        ctx: &ApplyContext,
        name: &str,
        view: &PoolView,
    ) -> Result<Arc<Resource>, Rejection> {
        self.unbind(state, ctx, name, view, mason::DIRTY)?;
        let change = apply_object_op(state, ctx, ObjectOp::Delete(&key(name), None))?;
        Ok(self.record(change))
    }
}

/// The objects of `kind` (in the default namespace, where the pool keeps its configs) by name,
/// as `of` reads them.
fn by_name<T>(state: &State, kind: &str, of: fn(&Resource) -> Option<T>) -> BTreeMap<String, T> {
    let start = ObjectKey::new(kind, "", "");
    state
        .objects
        .range(start..)
        .take_while(|o| o.kind == kind)
        .filter_map(|o| of(o).map(|v| (o.metadata.name.to_string(), v)))
        .collect()
}

/// A resource leased with virtual resource `parent` cannot be leased on its own.
fn not_bound(name: &str, view: &PoolView, action: &str) -> Result<(), Rejection> {
    if view.parent.is_empty() {
        return Ok(());
    }
    Err(Rejection::PoolState {
        name: name.to_string(),
        reason: format!(
            "it is leased with virtual resource {}; {action} {} instead",
            view.parent, view.parent
        ),
    })
}

/// The answer for one resource: itself, and after it the resources leased with it if it is
/// virtual (a client takes and gives back a virtual resource together with them).
fn with_leased(state: &State, object: Arc<Resource>) -> Response {
    let leased = state.pool_leased(&object);
    if leased.is_empty() {
        return one(state, object);
    }
    let mut all = vec![object];
    all.extend(leased);
    many(state, all)
}

fn one(state: &State, object: Arc<Resource>) -> Response {
    Response::Objects(ObjectReply::Object {
        object: Arc::unwrap_or_clone(object),
        revision: state.revision,
    })
}

fn many(state: &State, objects: Vec<Arc<Resource>>) -> Response {
    Response::Objects(ObjectReply::Txn {
        objects: objects.into_iter().map(Arc::unwrap_or_clone).collect(),
        revision: state.revision,
    })
}

/// Applies one pool command (`Command::Pools`).
pub(crate) fn apply(
    state: &mut State,
    ctx: &ApplyContext,
    command: &PoolCommand,
    events: &mut Vec<Event>,
    pool_events: &mut Vec<PoolEvent>,
) -> Response {
    let PoolCommand { action, grace_ms } = command;
    let grace_ms = *grace_ms;
    let revision_before = state.revision;
    let events_before = events.len();
    let mut w = Writes {
        events,
        undo: Vec::new(),
        pool_events: Vec::new(),
    };
    let events = &mut w;
    let result = check_pool_action(action).and_then(|()| match action {
        PoolAction::Acquire {
            rtype,
            state: from,
            dest,
            owner,
            request_id,
            wait_ms,
        } => {
            let ask = Ask {
                rtype,
                from,
                dest,
                owner,
                request_id,
                wait_ms: *wait_ms,
            };
            acquire(state, ctx, &ask, events)
        }
        PoolAction::CancelWait {
            claim,
            owner,
            request_id,
            state: from,
            release,
        } => cancel_wait(state, ctx, claim, owner, request_id, from, *release, events),
        PoolAction::ExpireClaims { claims } => expire_claims(state, ctx, claims, events),
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
        PoolAction::Sync {
            entries,
            expiry_ms,
            dynamic,
        } => sync(state, ctx, entries, expiry_ms, dynamic, events),
        PoolAction::Reconcile => Ok(many(state, Vec::new())),
        PoolAction::SyncVirtual { configs } => mason::sync_virtual(state, ctx, configs, events),
        PoolAction::Constructed { name } => mason::constructed(state, ctx, name, events),
    });
    // Whatever freed a resource serves the waiters first, in arrival order; dynamic pools
    // then grow or shrink (what they create free serves waiters too); then Mason recycles
    // dirty virtual resources and fulfils those whose needs are free.
    let result = result.and_then(|response| {
        let revision = state.revision;
        grant_waiting(state, ctx, events)?;
        dynamic::step(state, ctx, events)?;
        grant_waiting(state, ctx, events)?;
        mason::step(state, ctx, events)?;
        Ok((response, state.revision != revision))
    });
    match result {
        Ok((response, stepped)) => {
            pool_events.append(&mut w.pool_events);
            // Only when the steps after the action changed something can its answer be stale.
            match stepped {
                true => latest(state, response),
                false => response,
            }
        }
        Err(rejection) => {
            for (key, previous) in w.undo.into_iter().rev() {
                match previous {
                    Some(object) => state.put_object(object),
                    None => state.remove_object(&key),
                };
            }
            state.revision = revision_before;
            w.events.truncate(events_before);
            Response::Rejected(rejection)
        }
    }
}

/// The answer with each object as the whole command left it (a virtual resource released dirty
/// is recycled in the same step); objects the command deleted stay as they were last.
fn latest(state: &State, response: Response) -> Response {
    let now = |o: Resource| match state.objects.get(&o.key()) {
        Some(stored) => Resource::clone(stored),
        None => o,
    };
    match response {
        Response::Objects(ObjectReply::Object { object, .. }) => {
            Response::Objects(ObjectReply::Object {
                object: now(object),
                revision: state.revision,
            })
        }
        Response::Objects(ObjectReply::Txn { objects, .. }) => {
            Response::Objects(ObjectReply::Txn {
                objects: objects.into_iter().map(now).collect(),
                revision: state.revision,
            })
        }
        other => other,
    }
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
    not_bound(name, &view, "update")?;
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
    if view.user_data.len() > crate::pools::POOL_USER_DATA_MAX {
        return Err(Rejection::TooLarge {
            field: "user_data".to_string(),
            rule: format!(
                "the resource would hold {} entries, more than POOL_USER_DATA_MAX = {}",
                view.user_data.len(),
                crate::pools::POOL_USER_DATA_MAX
            ),
        });
    }
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(with_leased(state, stored))
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
    not_bound(name, &view, "release")?;
    if view.to_be_deleted {
        let deleted = events.delete(state, ctx, name, &view)?;
        return Ok(one(state, deleted));
    }
    view.state = dest.to_string();
    view.owner.clear();
    view.request_id.clear();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(with_leased(state, stored))
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
            stored.push(events.delete(state, ctx, name, &view)?);
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
    dynamic_pools: &[crate::pools::DynamicPool],
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    dynamic::sync_configs(state, ctx, dynamic_pools, expiry_ms, events)?;
    let wanted: BTreeMap<&str, &PoolEntry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let start = ObjectKey::new(POOL_KIND, "", "");
    let existing: Vec<String> = state
        .objects
        .range(start..)
        .take_while(|o| o.kind == POOL_KIND)
        .map(|o| o.metadata.name.to_string())
        .collect();
    let mut stored = Vec::new();
    let mut present = BTreeSet::new();
    for name in existing {
        // Read again: deleting a virtual resource gives back the resources leased with it.
        let Ok((object, mut view)) = current(state, &name) else {
            continue;
        };
        let before = view.clone();
        let listed = wanted.get(name.as_str());
        let pool = dynamic_pools.iter().find(|p| p.rtype == view.rtype);
        if let (None, Some(pool)) = (listed, pool) {
            // A dynamic type's own resource: its pool keeps it; the expiries and the lifespan
            // follow the type's (counted from its creation, or from now for one created before
            // its type was dynamic).
            view.expiry_ms = expiry_ms.get(&view.rtype).cloned().unwrap_or_default();
            if view.created_ms == 0 {
                view.created_ms = state.time_ms;
            }
            view.delete_after_ms = dynamic::lifespan_end(view.created_ms, pool.lifespan_ms);
            if view != before {
                stored.push(events.put_one(state, &object, &view)?);
            }
            continue;
        }
        match listed {
            None if view.owner.is_empty() && view.parent.is_empty() => {
                stored.push(events.delete(state, ctx, &name, &view)?);
                continue;
            }
            None => view.to_be_deleted = true,
            Some(entry) => {
                present.insert(name.clone());
                view.to_be_deleted = false;
                if view.owner.is_empty() && view.parent.is_empty() {
                    view.rtype = entry.rtype.clone();
                }
            }
        }
        view.expiry_ms = expiry_ms.get(&view.rtype).cloned().unwrap_or_default();
        if view != before {
            stored.push(events.put_one(state, &object, &view)?);
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
        let change = apply_object_op(state, ctx, ObjectOp::Create(&object))?;
        stored.push(events.record(change));
    }
    Ok(many(state, stored))
}
