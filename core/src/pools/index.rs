//! `PoolIndex`: pool resources by (type, state), request id, expiry and Mason step, derived
//! from the objects (every object change passes through it), never snapshotted.

use super::*;

/// The pool's indexes (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolIndex {
    /// (type, state) -> (last update, name) of the unowned resources.
    free: imbl::OrdMap<(CompactString, CompactString), imbl::OrdSet<(u64, CompactString)>>,
    /// (owner, request id) -> name, for leases taken with a request id.
    requests: imbl::OrdMap<(CompactString, CompactString), CompactString>,
    /// (expiry, name) of the leases whose state has an expiry.
    expiring: imbl::OrdSet<(u64, CompactString)>,
    /// (type, state) -> (seq, claim name) of the waiting acquires, in arrival order.
    claims: imbl::OrdMap<(CompactString, CompactString), imbl::OrdSet<(u64, CompactString)>>,
    /// (owner, request id) -> claim name.
    claim_requests: imbl::OrdMap<(CompactString, CompactString), CompactString>,
    /// (deadline, claim name).
    claim_deadlines: imbl::OrdSet<(u64, CompactString)>,
    /// (last update, name) of the virtual resources Mason holds until their needs are free.
    fulfilling: imbl::OrdSet<(u64, CompactString)>,
    /// Names of the virtual resources being constructed.
    constructing: imbl::OrdSet<CompactString>,
    /// Type -> names of its resources.
    by_type: imbl::OrdMap<CompactString, imbl::OrdSet<CompactString>>,
    /// (end of lifespan, name) of the dynamic pools' resources.
    lifespans: imbl::OrdSet<(u64, CompactString)>,
}

/// Whether the index keeps `v` among the unowned resources an Acquire may take: unowned and
/// not bound to a virtual resource.
fn acquirable(v: &PoolView) -> bool {
    v.owner.is_empty() && v.parent.is_empty()
}

/// Mason's own steps on a virtual resource it holds.
fn mason_step(v: &PoolView) -> Option<&'static str> {
    if v.owner != MASON_OWNER || !v.parent.is_empty() {
        return None;
    }
    match v.state.as_str() {
        FULFILLING => Some(FULFILLING),
        CONSTRUCTING => Some(CONSTRUCTING),
        _ => None,
    }
}

impl PoolIndex {
    /// Keeps the index in step with one object change.
    pub fn replace(&mut self, before: Option<&Resource>, after: Option<&Resource>) {
        self.replace_claim(before, after);
        if let Some((name, v)) = before.and_then(|o| PoolView::of(o).map(|v| (name_of(o), v))) {
            let rtype = CompactString::from(&v.rtype);
            let mut empty = false;
            if let Some(names) = self.by_type.get_mut(&rtype) {
                names.remove(&name);
                empty = names.is_empty();
            }
            if empty {
                self.by_type.remove(&rtype);
            }
            if v.delete_after_ms > 0 {
                self.lifespans.remove(&(v.delete_after_ms, name.clone()));
            }
            match mason_step(&v) {
                Some(FULFILLING) => {
                    self.fulfilling.remove(&(v.last_update_ms, name.clone()));
                }
                Some(_) => {
                    self.constructing.remove(&name);
                }
                None => {}
            }
            if acquirable(&v) {
                let key = (CompactString::from(&v.rtype), CompactString::from(&v.state));
                let mut empty = false;
                if let Some(set) = self.free.get_mut(&key) {
                    set.remove(&(v.last_update_ms, name.clone()));
                    empty = set.is_empty();
                }
                if empty {
                    self.free.remove(&key);
                }
            }
            if !v.request_id.is_empty() {
                self.requests.remove(&(
                    CompactString::from(&v.owner),
                    CompactString::from(&v.request_id),
                ));
            }
            if let Some(at) = v.expires_ms() {
                self.expiring.remove(&(at, name));
            }
        }
        if let Some((name, v)) = after.and_then(|o| PoolView::of(o).map(|v| (name_of(o), v))) {
            let rtype = CompactString::from(&v.rtype);
            if !self.by_type.contains_key(&rtype) {
                self.by_type.insert(rtype.clone(), imbl::OrdSet::new());
            }
            if let Some(names) = self.by_type.get_mut(&rtype) {
                names.insert(name.clone());
            }
            if v.delete_after_ms > 0 {
                self.lifespans.insert((v.delete_after_ms, name.clone()));
            }
            match mason_step(&v) {
                Some(FULFILLING) => {
                    self.fulfilling.insert((v.last_update_ms, name.clone()));
                }
                Some(_) => {
                    self.constructing.insert(name.clone());
                }
                None => {}
            }
            if acquirable(&v) {
                let key = (CompactString::from(&v.rtype), CompactString::from(&v.state));
                if !self.free.contains_key(&key) {
                    self.free.insert(key.clone(), imbl::OrdSet::new());
                }
                if let Some(set) = self.free.get_mut(&key) {
                    set.insert((v.last_update_ms, name.clone()));
                }
            }
            if !v.request_id.is_empty() {
                self.requests.insert(
                    (
                        CompactString::from(&v.owner),
                        CompactString::from(&v.request_id),
                    ),
                    name.clone(),
                );
            }
            if let Some(at) = v.expires_ms() {
                self.expiring.insert((at, name));
            }
        }
    }

    fn replace_claim(&mut self, before: Option<&Resource>, after: Option<&Resource>) {
        if let Some((name, c)) = before.and_then(|o| ClaimView::of(o).map(|c| (name_of(o), c))) {
            let key = (CompactString::from(&c.rtype), CompactString::from(&c.state));
            let mut empty = false;
            if let Some(q) = self.claims.get_mut(&key) {
                q.remove(&(c.seq, name.clone()));
                empty = q.is_empty();
            }
            if empty {
                self.claims.remove(&key);
            }
            self.claim_requests.remove(&(
                CompactString::from(&c.owner),
                CompactString::from(&c.request_id),
            ));
            self.claim_deadlines.remove(&(c.deadline_ms, name));
        }
        if let Some((name, c)) = after.and_then(|o| ClaimView::of(o).map(|c| (name_of(o), c))) {
            let key = (CompactString::from(&c.rtype), CompactString::from(&c.state));
            if !self.claims.contains_key(&key) {
                self.claims.insert(key.clone(), imbl::OrdSet::new());
            }
            if let Some(q) = self.claims.get_mut(&key) {
                q.insert((c.seq, name.clone()));
            }
            self.claim_requests.insert(
                (
                    CompactString::from(&c.owner),
                    CompactString::from(&c.request_id),
                ),
                name.clone(),
            );
            self.claim_deadlines.insert((c.deadline_ms, name));
        }
    }

    /// The first waiting acquire for (`rtype`, `state`).
    pub fn first_claim(&self, rtype: &str, state: &str) -> Option<&str> {
        let key = (CompactString::from(rtype), CompactString::from(state));
        self.claims
            .get(&key)
            .and_then(|q| q.get_min())
            .map(|(_, name)| name.as_str())
    }

    /// How many acquires wait, over every (type, state).
    pub fn claims_total(&self) -> usize {
        self.claims.values().map(|set| set.len()).sum()
    }

    /// How many acquires wait for (`rtype`, `state`).
    pub fn claims_len(&self, rtype: &str, state: &str) -> usize {
        let key = (CompactString::from(rtype), CompactString::from(state));
        self.claims.get(&key).map_or(0, |q| q.len())
    }

    /// Every (type, state) some acquire waits for.
    pub fn claimed(&self) -> Vec<(String, String)> {
        self.claims
            .keys()
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .collect()
    }

    /// The claim `owner` queued with `request_id`, while it waits.
    pub fn claim_by_request(&self, owner: &str, request_id: &str) -> Option<&str> {
        self.claim_requests
            .get(&(CompactString::from(owner), CompactString::from(request_id)))
            .map(CompactString::as_str)
    }

    /// Claims whose wait has ended at `now_ms` (`wait_ended`: at their deadline), earliest
    /// first, at most `max`.
    pub fn claims_expired(&self, now_ms: u64, max: usize) -> Vec<String> {
        self.claim_deadlines
            .iter()
            .take_while(|(at, _)| crate::wait::wait_ended(*at, now_ms))
            .take(max)
            .map(|(_, name)| name.to_string())
            .collect()
    }

    /// The oldest-updated unowned resource of `rtype` in `state`.
    pub fn oldest_free(&self, rtype: &str, state: &str) -> Option<&str> {
        let key = (CompactString::from(rtype), CompactString::from(state));
        self.free
            .get(&key)
            .and_then(|set| set.get_min())
            .map(|(_, name)| name.as_str())
    }

    /// How many unowned resources of `rtype` are in `state`.
    pub fn free_len(&self, rtype: &str, state: &str) -> usize {
        let key = (CompactString::from(rtype), CompactString::from(state));
        self.free.get(&key).map_or(0, |s| s.len())
    }

    /// The names of the resources of `rtype`.
    pub fn of_type(&self, rtype: &str) -> Vec<String> {
        self.by_type
            .get(&CompactString::from(rtype))
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }

    /// How many resources `rtype` has.
    pub fn type_len(&self, rtype: &str) -> usize {
        self.by_type
            .get(&CompactString::from(rtype))
            .map_or(0, |names| names.len())
    }

    /// Dynamic resources whose lifespan ended at `now_ms`, earliest first.
    pub fn past_lifespan(&self, now_ms: u64) -> Vec<String> {
        self.lifespans
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .map(|(_, name)| name.to_string())
            .collect()
    }

    /// The virtual resources waiting for their needs, longest waiting first.
    pub fn fulfilling(&self) -> Vec<String> {
        self.fulfilling.iter().map(|(_, n)| n.to_string()).collect()
    }

    /// The virtual resources being constructed.
    pub fn constructing(&self) -> Vec<String> {
        self.constructing.iter().map(|n| n.to_string()).collect()
    }

    /// The resource `owner` leased with `request_id`, while it holds it.
    pub fn by_request(&self, owner: &str, request_id: &str) -> Option<&str> {
        self.requests
            .get(&(CompactString::from(owner), CompactString::from(request_id)))
            .map(CompactString::as_str)
    }

    /// The earliest lease expiry, claim deadline or end of a lifespan.
    pub fn next_due_ms(&self) -> Option<u64> {
        [&self.expiring, &self.claim_deadlines, &self.lifespans]
            .into_iter()
            .filter_map(|set| set.get_min().map(|(at, _)| *at))
            .min()
    }

    /// Leases expired at `now_ms`, earliest first, at most `max`.
    pub fn expired(&self, now_ms: u64, max: usize) -> Vec<String> {
        self.expiring
            .iter()
            .take_while(|(at, _)| *at < now_ms)
            .take(max)
            .map(|(_, name)| name.to_string())
            .collect()
    }
}

fn name_of(object: &Resource) -> CompactString {
    object.metadata.name.clone()
}
