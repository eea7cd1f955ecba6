//! Acquires and their queue: a lease taken at once or a claim queued (fair: granted in queue order
//! as resources free up), a wait cancelled or expired, and acquires by state.

use super::*;

/// An Acquire's parameters.
pub(super) struct Ask<'a> {
    pub(super) rtype: &'a str,
    pub(super) from: &'a str,
    pub(super) dest: &'a str,
    pub(super) owner: &'a str,
    pub(super) request_id: &'a str,
    pub(super) wait_ms: u64,
}

pub(super) fn acquire(
    state: &mut State,
    ctx: &ApplyContext,
    ask: &Ask<'_>,
    events: &mut Writes<'_>,
) -> Result<Response, Rejection> {
    // Ended waits hold no place: not in the queue, not against POOL_WAITERS_MAX, and a retry
    // of a request whose wait ended queues anew. Undone with the rest if the acquire is refused.
    drop_ended_claims(state, ctx, events)?;
    if !ask.request_id.is_empty() {
        if let Some(name) = state.pools.by_request(ask.owner, ask.request_id) {
            let (object, _) = current(state, name)?;
            return Ok(with_leased(state, object));
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
    let free = free.or_else(|| leased_anyway(state, ask));
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
        let change = apply_object_op(state, ctx, ObjectOp::Create(&claim.object()))?;
        let stored = events.record(change);
        return Ok(one(state, stored));
    };
    let (object, mut view) = current(state, &name)?;
    view.state = ask.dest.to_string();
    view.owner = ask.owner.to_string();
    view.request_id = ask.request_id.to_string();
    view.last_update_ms = state.time_ms;
    let stored = events.put(state, &object, &view)?;
    Ok(with_leased(state, stored))
}

/// DELIBERATE BUG (src/bugs.rs, test-only builds): with nothing free, the first resource of the
/// type already leased into the acquire's destination state, taken from its owner. `None`
/// unless `Bug::PoolDoubleLease` is on.
pub(super) fn leased_anyway(state: &State, ask: &Ask<'_>) -> Option<String> {
    if !crate::bugs::active(crate::bugs::Bug::PoolDoubleLease) {
        return None;
    }
    state.pools.of_type(ask.rtype).into_iter().find(|name| {
        current(state, name).is_ok_and(|(_, view)| {
            view.state == ask.dest && !view.owner.is_empty() && view.parent.is_empty()
        })
    })
}

/// Removes claim `name` (a grant or a giving up), with its event.
pub(super) fn remove_claim(
    state: &mut State,
    ctx: &ApplyContext,
    name: &str,
    resource: Option<String>,
    events: &mut Writes<'_>,
) -> Result<Arc<Resource>, Rejection> {
    let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, name);
    let change = apply_object_op(state, ctx, ObjectOp::Delete(&k, None))?;
    events.pool_events.push(PoolEvent::Claim {
        claim: name.to_string(),
        resource,
    });
    Ok(events.record(change))
}

/// Removes every claim whose wait has ended at this entry's time, each with the event the
/// reaper's `ExpireClaims` sends (its waiter, if still there, answers Aborted, POOL_WAIT_EXPIRED).
pub(super) fn drop_ended_claims(
    state: &mut State,
    ctx: &ApplyContext,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    // Bounded by the claims that exist: POOL_WAITERS_MAX per (type, state).
    for name in state.pools.claims_expired(state.time_ms, usize::MAX) {
        remove_claim(state, ctx, &name, None, events)?;
    }
    Ok(())
}

/// Serves waiting acquires: while a (type, state) has both a waiter and a free resource, the
/// first waiter gets the oldest-updated one. Waiters whose wait has ended are dropped first,
/// never served.
pub(super) fn grant_waiting(
    state: &mut State,
    ctx: &ApplyContext,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    drop_ended_claims(state, ctx, events)?;
    for (rtype, from) in state.pools.claimed() {
        while let Some(claim_name) = state.pools.first_claim(&rtype, &from).map(str::to_string) {
            let Some(free) = state.pools.oldest_free(&rtype, &from).map(str::to_string) else {
                break;
            };
            let k = ObjectKey::new(POOL_CLAIM_KIND, DEFAULT_NAMESPACE, &claim_name);
            let Some(claim) = state.objects.get(&k).and_then(|o| ClaimView::of(o)) else {
                break;
            };
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
pub(super) fn cancel_wait(
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
pub(super) fn expire_claims(
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
        if wait_ended(c.deadline_ms, state.time_ms) {
            removed.push(remove_claim(state, ctx, name, None, events)?);
        }
    }
    Ok(many(state, removed))
}

pub(super) fn acquire_by_state(
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
        not_bound(name, &view, "acquire")?;
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
