//! Reads of the pools, and what the leader's reaper and Mason task ask.

use std::sync::Arc;

use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::pools::{PoolIndex, PoolView, POOL_ITEMS_MAX, POOL_KIND};
use crate::state::State;

impl State {
    /// Pool leases whose state's expiry passed at `now_ms`, earliest first, at most
    /// `POOL_ITEMS_MAX`: what the leader's reaper proposes to reset. Apply re-checks each.
    pub fn pools_expired(&self, now_ms: u64) -> Vec<String> {
        self.pools.expired(now_ms, POOL_ITEMS_MAX)
    }

    /// Waiting pool acquires past their deadline at `now_ms`, earliest first, at most
    /// `POOL_ITEMS_MAX`: what the leader's reaper proposes to expire.
    pub fn pool_claims_expired(&self, now_ms: u64) -> Vec<String> {
        self.pools.claims_expired(now_ms, POOL_ITEMS_MAX)
    }

    /// For each virtual resource being constructed, what the leader's Mason task proposes: its
    /// construct operation if none was submitted (or it is forgotten), `Constructed` once it
    /// ended. Nothing while it runs.
    pub fn mason_due(&self, _now_ms: u64) -> Vec<crate::pools::MasonDue> {
        use crate::pools::{MasonDue, CONSTRUCT_KIND};
        let mut due = Vec::new();
        for name in self.pools.constructing() {
            let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, &name);
            let Some(view) = self.objects.get(&key).and_then(|o| PoolView::of(o)) else {
                continue;
            };
            match self.ops.by_key(&view.construct_key) {
                Some(op) if op.state.is_final() => due.push(MasonDue::Ended { name }),
                Some(_) => {}
                None => {
                    let work = ObjectKey::new(CONSTRUCT_KIND, DEFAULT_NAMESPACE, &name);
                    if let Some(object) = self.objects.get(&work) {
                        due.push(MasonDue::Submit {
                            name,
                            key: view.construct_key.clone(),
                            params: object.spec.to_value(),
                        });
                    }
                }
            }
        }
        due
    }

    /// Whether a dynamic pool's resource outlived its lifespan at `now_ms` and no one holds it:
    /// the leader's reaper then proposes a `Reconcile`, which deletes it.
    pub fn pools_reconcile_due(&self, now_ms: u64) -> bool {
        self.pools.past_lifespan(now_ms).iter().any(|name| {
            let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, name);
            self.objects
                .get(&key)
                .and_then(|o| PoolView::of(o))
                .is_some_and(|v| v.owner.is_empty() && v.parent.is_empty())
        })
    }

    /// The resources leased with virtual pool resource `object` (none if it is not virtual),
    /// in the order its `leasedResources` lists them.
    pub fn pool_leased(&self, object: &Resource) -> Vec<Arc<Resource>> {
        let Some(view) = PoolView::of(object) else {
            return Vec::new();
        };
        crate::pools::leased_of(&view.user_data)
            .iter()
            .filter_map(|child| {
                let key = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, child);
                self.objects.get(&key).cloned()
            })
            .filter(|o| PoolView::of(o).is_some_and(|v| v.parent == object.metadata.name))
            .collect()
    }

    /// The pool indexes.
    pub fn pools(&self) -> &PoolIndex {
        &self.pools
    }
}
