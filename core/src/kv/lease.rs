//! etcd's leases on cluster time: a lease ends `ttl_ms` after it was granted or last kept
//! alive, both measured as cluster time at apply (README "Time"), so it never ends early, and
//! ends late by at most the bound that holds for every steward TTL. When it ends (revoked, or
//! expired by the leader's sweep) the keys attached to it are deleted, all at one revision.
//!
//! The keys of a lease are those whose newest version names it (kept here as a set, in step
//! with every put and delete through `KvStore`); snapshots carry the leases without their keys,
//! which restore rebuilds from the versions.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::Key;

/// etcd's largest TTL (`MaxLeaseTTL`), in seconds.
pub const LEASE_TTL_S_MAX: i64 = 9_000_000_000;

/// Leases a sweep expires at most at once (the rest wait for the next sweep).
pub const LEASE_SWEEP_MAX: usize = 1_000;

/// One lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub id: i64,
    /// The TTL it was granted with, in ms.
    pub ttl_ms: u64,
    /// Cluster time at which it ends unless kept alive.
    pub expires_ms: u64,
    /// The keys attached to it (derived; not in snapshots).
    #[serde(skip)]
    pub keys: BTreeSet<Key>,
}

/// Every lease, and the order they end in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaseTable {
    leases: BTreeMap<i64, Lease>,
    by_end: BTreeSet<(u64, i64)>,
}

impl LeaseTable {
    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }

    pub fn contains(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Every lease, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    /// The earliest cluster time a lease ends.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.by_end.first().map(|(end, _)| *end)
    }

    /// Up to `max` leases that have ended at cluster time `now_ms`, earliest first.
    pub fn due(&self, now_ms: u64, max: usize) -> Vec<i64> {
        self.by_end
            .iter()
            .take_while(|(end, _)| *end <= now_ms)
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    pub(crate) fn grant(&mut self, id: i64, ttl_ms: u64, now_ms: u64) {
        let expires_ms = now_ms.saturating_add(ttl_ms);
        self.by_end.insert((expires_ms, id));
        self.leases.insert(
            id,
            Lease {
                id,
                ttl_ms,
                expires_ms,
                keys: BTreeSet::new(),
            },
        );
    }

    /// Keeps lease `id` alive from `now_ms`; its TTL, or `None` if there is no such lease.
    pub(crate) fn refresh(&mut self, id: i64, now_ms: u64) -> Option<u64> {
        let lease = self.leases.get_mut(&id)?;
        self.by_end.remove(&(lease.expires_ms, id));
        // Never earlier than it was (a refresh stamped with an older time changes nothing).
        lease.expires_ms = lease.expires_ms.max(now_ms.saturating_add(lease.ttl_ms));
        self.by_end.insert((lease.expires_ms, id));
        Some(lease.ttl_ms)
    }

    pub(crate) fn remove(&mut self, id: i64) -> Option<Lease> {
        let lease = self.leases.remove(&id)?;
        self.by_end.remove(&(lease.expires_ms, id));
        Some(lease)
    }

    pub(crate) fn attach(&mut self, id: i64, key: &Key) {
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.keys.insert(key.clone());
        }
    }

    pub(crate) fn detach(&mut self, id: i64, key: &Key) {
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.keys.remove(key);
        }
    }

    /// A lease id for a grant that asked for none: a mix of the entry's log position, so every
    /// replica picks the same, and the next free one after it. Positive, as etcd's are.
    pub(crate) fn pick_id(&self, log_index: u64, term: u64) -> i64 {
        // splitmix64: ids that look unrelated, as etcd's do, from consecutive entries.
        let mut z = log_index ^ (term << 40);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let mut id = (z >> 1) as i64;
        while id == 0 || self.leases.contains_key(&id) {
            id = id.wrapping_add(1) & i64::MAX;
        }
        id
    }

    /// From a snapshot: the leases, without their keys (attached by the caller).
    pub(crate) fn restore(leases: Vec<Lease>) -> LeaseTable {
        let mut table = LeaseTable::default();
        for lease in leases {
            table.by_end.insert((lease.expires_ms, lease.id));
            table.leases.insert(lease.id, lease);
        }
        table
    }
}
