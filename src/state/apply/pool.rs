//! `Command::Pool`: leases of pool resources (`state::pool`). Every check runs before the first
//! change, so a refused command changes nothing; an accepted one changes each resource it names
//! once (one revision and one event each). Time is the entry's (`State::time_ms`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::ops::{apply_op, replace, Change, Op};
use super::{emit, ApplyContext, State};
use crate::state::command::{Event, Rejection, Response};
use crate::state::pool::{
    check_pool_action, claim_name, ClaimView, PoolAction, PoolEntry, PoolEvent, PoolView,
    POOL_API_VERSION, POOL_CLAIM_KIND, POOL_KIND, POOL_WAITERS_MAX,
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
    /// What became of waiting acquires; handed out only if the command is applied.
    pool_events: Vec<PoolEvent>,
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
    pool_events: &mut Vec<PoolEvent>,
) -> Response {
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
        PoolAction::Sync { entries, expiry_ms } => sync(state, ctx, entries, expiry_ms, events),
    });
    // Whatever freed a resource serves the waiters first, in arrival order.
    let result = result.and_then(|response| {
        grant_waiting(state, ctx, events)?;
        Ok(response)
    });
    match result {
        Ok(response) => {
            pool_events.append(&mut w.pool_events);
            response
        }
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

/// An Acquire's parameters.
struct Ask<'a> {
    rtype: &'a str,
    from: &'a str,
    dest: &'a str,
    owner: &'a str,
    request_id: &'a str,
    wait_ms: u64,
}

fn acquire(
    state: &mut State,
    ctx: &ApplyContext,
    ask: &Ask<'_>,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    if !ask.request_id.is_empty() {
        if let Some(name) = state.pools.by_request(ask.owner, ask.request_id) {
            let (object, _) = current(state, name)?;
            return Ok(one(state, object));
        }
        if let Some(claim) = state.pools.claim_by_request(ask.owner, ask.request_id) {
            let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, claim);
            if let Some(object) = state.objects.get(&k).cloned() {
                return Ok(one(state, object));
            }
        }
    }
    // Those already waiting come first.
    let queued = state.pools.claims_len(ask.rtype, ask.from);
    let free = if queued == 0 {
        state
            .pools
            .oldest_free(ask.rtype, ask.from)
            .map(str::to_string)
    } else {
        None
    };
    let Some(name) = free else {
        if ask.wait_ms == 0 {
            return Err(Rejection::PoolEmpty {
                rtype: ask.rtype.to_string(),
                state: ask.from.to_string(),
            });
        }
        if queued >= POOL_WAITERS_MAX {
            return Err(Rejection::TooLarge {
                field: "wait_ms".to_string(),
                rule: format!(
                    "{queued} acquires already wait for {} in {}, the limit POOL_WAITERS_MAX",
                    ask.rtype, ask.from
                ),
            });
        }
        let seq = ctx.log_index;
        let claim = ClaimView {
            rtype: ask.rtype.to_string(),
            state: ask.from.to_string(),
            dest: ask.dest.to_string(),
            owner: ask.owner.to_string(),
            request_id: if ask.request_id.is_empty() {
                claim_name(seq)
            } else {
                ask.request_id.to_string()
            },
            seq,
            deadline_ms: state.time_ms.saturating_add(ask.wait_ms),
        };
        let change = apply_op(state, ctx, Op::Create(&claim.object()))?;
        let stored = events.record(change);
        return Ok(one(state, stored));
    };
    let (object, mut view) = current(state, &name)?;
    view.state = ask.dest.to_string();
    view.owner = ask.owner.to_string();
    view.request_id = ask.request_id.to_string();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(one(state, stored))
}

/// Removes claim `name` (a grant or a giving up), with its event.
fn remove_claim(
    state: &mut State,
    ctx: &ApplyContext,
    name: &str,
    resource: Option<String>,
    events: &mut Writes<'_>,
) -> Result<Arc<Resource>, Rejection> {
    let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, name);
    let change = apply_op(state, ctx, Op::Delete(&k, None))?;
    events.pool_events.push(PoolEvent {
        claim: name.to_string(),
        resource,
    });
    Ok(events.record(change))
}

/// Serves waiting acquires: while a (type, state) has both a waiter and a free resource, the
/// first waiter gets the oldest-updated one. Waiters past their deadline are dropped.
fn grant_waiting(
    state: &mut State,
    ctx: &ApplyContext,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    for (rtype, from) in state.pools.claimed() {
        while let Some(claim_name) = state.pools.first_claim(&rtype, &from).map(str::to_string) {
            let Some(free) = state.pools.oldest_free(&rtype, &from).map(str::to_string) else {
                break;
            };
            let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, &claim_name);
            let Some(claim) = state.objects.get(&k).and_then(|o| ClaimView::of(o)) else {
                break;
            };
            if claim.deadline_ms < state.time_ms {
                remove_claim(state, ctx, &claim_name, None, events)?;
                continue;
            }
            let (object, mut view) = current(state, &free)?;
            view.state = claim.dest.clone();
            view.owner = claim.owner.clone();
            view.request_id = claim.request_id.clone();
            view.last_update_ms = state.time_ms;
            events.put(state, &object, &view)?;
            remove_claim(state, ctx, &claim_name, Some(free), events)?;
        }
    }
    Ok(())
}

/// A waiter gives up (see `PoolAction::CancelWait`).
#[allow(clippy::too_many_arguments)]
fn cancel_wait(
    state: &mut State,
    ctx: &ApplyContext,
    claim: &str,
    owner: &str,
    request_id: &str,
    from: &str,
    release: bool,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, claim);
    if let Some(c) = state.objects.get(&k).and_then(|o| ClaimView::of(o)) {
        if c.owner != owner {
            return Err(Rejection::PoolNotOwner {
                name: claim.to_string(),
                owner: owner.to_string(),
                holder: c.owner,
            });
        }
        let removed = remove_claim(state, ctx, claim, None, events)?;
        return Ok(many(state, vec![removed]));
    }
    // Granted meanwhile (or never queued): the lease, if it is still the waiter's.
    let Some(name) = state
        .pools
        .by_request(owner, request_id)
        .map(str::to_string)
    else {
        return Ok(many(state, Vec::new()));
    };
    let (object, mut view) = current(state, &name)?;
    if !release {
        return Ok(many(state, vec![object]));
    }
    view.state = from.to_string();
    view.owner.clear();
    view.request_id.clear();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(many(state, vec![stored]))
}

/// The reaper's removal of claims past their deadline (re-checked here).
fn expire_claims(
    state: &mut State,
    ctx: &ApplyContext,
    claims: &[String],
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    let mut removed = Vec::new();
    for name in claims {
        let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, name);
        let Some(c) = state.objects.get(&k).and_then(|o| ClaimView::of(o)) else {
            continue;
        };
        if c.deadline_ms < state.time_ms {
            removed.push(remove_claim(state, ctx, name, None, events)?);
        }
    }
    Ok(many(state, removed))
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
