//! Dynamic pools (`pools::dynamic`) inside `Command::Pool`: `Sync` sets their configs;
//! after every pool command each dynamic type deletes the unowned resources past their lifespan,
//! deletes unowned ones over its max, creates up to its min, and creates one more (up to the max)
//! for each acquire waiting on it that no resource in preparation will serve.

use std::collections::{BTreeMap, BTreeSet};

use super::{current, Writes};
use crate::effects::ApplyContext;
use crate::objects::apply::{apply_object_op, replace, ObjectOp};
use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::pools::{
    dynamic_name, DynamicPool, PoolView, CONSTRUCTING, DYNAMIC_KIND, FULFILLING, MASON_OWNER,
    POOL_API_VERSION, POOL_KIND,
};
use crate::rejection::Rejection;
use crate::state::State;

/// Every dynamic type's config.
pub(super) fn configs(state: &State) -> BTreeMap<String, DynamicPool> {
    super::by_name(state, DYNAMIC_KIND, DynamicPool::of)
}

/// The `DynamicPool` objects become exactly `pools` (each with its type's expiries).
pub(super) fn sync_configs(
    state: &mut State,
    ctx: &ApplyContext,
    pools: &[DynamicPool],
    expiry_ms: &BTreeMap<String, BTreeMap<String, u64>>,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let existing = configs(state);
    let wanted: BTreeMap<String, DynamicPool> = pools
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p.expiry_ms = expiry_ms.get(&p.rtype).cloned().unwrap_or_default();
            (p.rtype.clone(), p)
        })
        .collect();
    for rtype in existing.keys() {
        if !wanted.contains_key(rtype) {
            let k = ObjectKey::new(DYNAMIC_KIND, DEFAULT_NAMESPACE, rtype);
            let change = apply_object_op(state, ctx, ObjectOp::Delete(&k, None))?;
            events.record(change);
        }
    }
    for (rtype, pool) in &wanted {
        match existing.get(rtype) {
            Some(old) if old == pool => {}
            Some(_) => {
                let change = replace(state, pool.object())?;
                events.record(change);
            }
            None => {
                let change = apply_object_op(state, ctx, ObjectOp::Create(&pool.object()))?;
                events.record(change);
            }
        }
    }
    Ok(())
}

/// Whether `view` is being prepared for a waiter: unowned in the type's first state, or held by
/// Mason while it is built.
fn preparing(view: &PoolView, pool: &DynamicPool) -> bool {
    let unowned_new = view.owner.is_empty() && view.parent.is_empty() && view.state == pool.state;
    let building = view.owner == MASON_OWNER
        && view.parent.is_empty()
        && (view.state == FULFILLING || view.state == CONSTRUCTING);
    unowned_new || building
}

/// Whether the step may delete `view`: no one holds it (Mason waiting for needs holds nothing).
fn deletable(view: &PoolView) -> bool {
    view.parent.is_empty()
        && (view.owner.is_empty() || (view.owner == MASON_OWNER && view.state == FULFILLING))
}

/// See the module docs.
pub(super) fn step(
    state: &mut State,
    ctx: &ApplyContext,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let pools = configs(state);
    if pools.is_empty() {
        return Ok(());
    }
    let now = state.time_ms;
    // Past their lifespan, and no one holds them.
    for name in state.pools.past_lifespan(now) {
        let (_, view) = current(state, &name)?;
        if pools.contains_key(&view.rtype) && deletable(&view) {
            events.delete(state, ctx, &name, &view)?;
        }
    }
    let waiting = waiting_by_type(state);
    for pool in pools.values() {
        let mut views: Vec<(String, PoolView)> = Vec::new();
        for name in state.pools.of_type(&pool.rtype) {
            let (_, view) = current(state, &name)?;
            views.push((name, view));
        }
        let max = usize::try_from(pool.max_count).unwrap_or(usize::MAX);
        let min = usize::try_from(pool.min_count).unwrap_or(usize::MAX);
        let mut total = views.len();
        // Over the max: the unowned ones go, oldest-updated first.
        if total > max {
            let mut spare: Vec<&(String, PoolView)> =
                views.iter().filter(|(_, v)| deletable(v)).collect();
            spare.sort_by_key(|(name, v)| (v.last_update_ms, name.clone()));
            for (name, view) in spare.into_iter().take(total - max) {
                events.delete(state, ctx, name, view)?;
                total -= 1;
            }
            continue;
        }
        let preparing = views.iter().filter(|(_, v)| preparing(v, pool)).count();
        let wanted = waiting.get(pool.rtype.as_str()).copied().unwrap_or(0);
        let more = min
            .saturating_sub(total)
            .max(wanted.saturating_sub(preparing))
            .min(max - total);
        create(state, ctx, pool, more, events)?;
    }
    Ok(())
}

/// Acquires waiting, by type.
fn waiting_by_type(state: &State) -> BTreeMap<String, usize> {
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    for (rtype, from) in state.pools.claimed() {
        *waiting.entry(rtype.clone()).or_default() += state.pools.claims_len(&rtype, &from);
    }
    waiting
}

/// Creates `n` resources of `pool`'s type in its first state, named after this entry.
fn create(
    state: &mut State,
    ctx: &ApplyContext,
    pool: &DynamicPool,
    n: usize,
    events: &mut Writes<'_>,
) -> Result<(), Rejection> {
    let mut k = 0;
    let mut made = 0;
    let mut taken = BTreeSet::new();
    while made < n {
        let name = dynamic_name(&pool.rtype, ctx.log_index, k);
        k += 1;
        let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, &name);
        if state.objects.contains_key(&key) || !taken.insert(name.clone()) {
            continue;
        }
        let view = PoolView {
            rtype: pool.rtype.clone(),
            state: pool.state.clone(),
            last_update_ms: state.time_ms,
            expiry_ms: pool.expiry_ms.clone(),
            delete_after_ms: lifespan_end(state.time_ms, pool.lifespan_ms),
            created_ms: state.time_ms,
            ..PoolView::default()
        };
        let mut object = Resource::new(POOL_API_VERSION, POOL_KIND, DEFAULT_NAMESPACE, &name);
        view.write(&mut object);
        let change = apply_object_op(state, ctx, ObjectOp::Create(&object))?;
        events.record(change);
        made += 1;
    }
    Ok(())
}

/// When a resource created at `created_ms` reaches the end of `lifespan_ms` (0: never).
pub(super) fn lifespan_end(created_ms: u64, lifespan_ms: u64) -> u64 {
    match lifespan_ms {
        0 => 0,
        ms => created_ms.saturating_add(ms),
    }
}
