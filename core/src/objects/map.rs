//! The stored objects, ordered by key: a persistent set of shared objects, each found by the key
//! it carries (kind, namespace, name). A map from `ObjectKey` to the object would hold every key
//! twice, once in the tree beside a pointer (80 bytes per entry) and once in the object; here a
//! tree entry is the pointer alone (8 bytes): 174 bytes less per object (772 -> 598 in
//! jemalloc's size classes, `examples/object_memory.rs`). Cloning is O(1) and shares every
//! object and tree node, as before: snapshots never stall apply.

use std::cmp::Ordering;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use equivalent::{Comparable, Equivalent};

use crate::objects::resource::{ObjectKey, Resource};

/// The objects, in key order.
#[derive(Clone, Default)]
pub struct ObjectMap(imbl::OrdSet<Stored>);

/// One stored object, ordered by its key.
#[derive(Clone)]
struct Stored(Arc<Resource>);

impl Stored {
    fn key(&self) -> (&str, &str, &str) {
        let o = &*self.0;
        (&o.kind, &o.metadata.namespace, &o.metadata.name)
    }
}

impl PartialEq for Stored {
    fn eq(&self, other: &Stored) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Stored {}

impl PartialOrd for Stored {
    fn partial_cmp(&self, other: &Stored) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Stored {
    fn cmp(&self, other: &Stored) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// `ObjectKey`'s order is its fields' in declaration order: kind, namespace, name.
fn parts(key: &ObjectKey) -> (&str, &str, &str) {
    (&key.kind, &key.namespace, &key.name)
}

impl Equivalent<Stored> for ObjectKey {
    fn equivalent(&self, stored: &Stored) -> bool {
        parts(self) == stored.key()
    }
}

impl Comparable<Stored> for ObjectKey {
    fn compare(&self, stored: &Stored) -> Ordering {
        parts(self).cmp(&stored.key())
    }
}

impl ObjectMap {
    pub fn new() -> ObjectMap {
        ObjectMap::default()
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<Resource>> {
        self.0.get(key).map(|s| &s.0)
    }

    pub fn contains_key(&self, key: &ObjectKey) -> bool {
        self.0.contains(key)
    }

    /// Stores `object` under its own key; returns the object it replaced.
    pub fn insert(&mut self, object: Arc<Resource>) -> Option<Arc<Resource>> {
        self.0.insert(Stored(object)).map(|s| s.0)
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Resource>> {
        self.0.remove(key).map(|s| s.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every object, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Arc<Resource>> {
        self.0.iter().map(|s| &s.0)
    }

    /// The objects whose keys are in `range`, in key order.
    pub fn range(
        &self,
        range: impl RangeBounds<ObjectKey>,
    ) -> impl DoubleEndedIterator<Item = &Arc<Resource>> {
        let bounds: (Bound<&ObjectKey>, Bound<&ObjectKey>) =
            (range.start_bound(), range.end_bound());
        self.0.range::<_, ObjectKey>(bounds).map(|s| &s.0)
    }
}

/// Equal when they hold equal objects under the same keys (not only the same keys, which is all
/// the set's own order compares).
impl PartialEq for ObjectMap {
    fn eq(&self, other: &ObjectMap) -> bool {
        self.len() == other.len()
            && self
                .values()
                .zip(other.values())
                .all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
    }
}

impl std::fmt::Debug for ObjectMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.values()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: &str, name: &str, rv: u64) -> Arc<Resource> {
        let mut o = Resource::new("v1", kind, namespace, name);
        o.metadata.resource_version = rv;
        Arc::new(o)
    }

    #[test]
    fn objects_are_found_and_ranged_by_their_keys() {
        let mut map = ObjectMap::new();
        for (kind, ns, name) in [
            ("B", "a", "x"),
            ("A", "b", "x"),
            ("A", "a", "y"),
            ("A", "a", "x"),
        ] {
            assert!(map.insert(object(kind, ns, name, 1)).is_none());
        }
        let keys = |it: &mut dyn Iterator<Item = &Arc<Resource>>| {
            it.map(|o| o.key().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            keys(&mut map.values()),
            ["A/a/x", "A/a/y", "A/b/x", "B/a/x"]
        );
        assert_eq!(
            keys(&mut map.range(ObjectKey::new("A", "a", "y")..)),
            ["A/a/y", "A/b/x", "B/a/x"]
        );
        assert_eq!(
            keys(&mut map.range((
                Bound::Excluded(ObjectKey::new("A", "a", "y")),
                Bound::Excluded(ObjectKey::new("B", "", ""))
            ))),
            ["A/b/x"]
        );
        let key = ObjectKey::new("A", "b", "x");
        assert!(map.contains_key(&key));
        assert!(!map.contains_key(&ObjectKey::new("A", "b", "y")));
        // A new version replaces the old one under the same key.
        let replaced = map.insert(object("A", "b", "x", 2)).expect("replaced");
        assert_eq!(replaced.metadata.resource_version, 1);
        assert_eq!(map.get(&key).unwrap().metadata.resource_version, 2);
        assert_eq!(map.len(), 4);
        let before = map.clone();
        assert_eq!(map, before);
        // Equality looks at the objects, not only at their keys.
        map.insert(object("A", "b", "x", 3));
        assert_ne!(map, before);
        assert_eq!(map.remove(&key).unwrap().metadata.resource_version, 3);
        assert!(map.remove(&key).is_none());
        assert_eq!(map.len(), 3);
        assert!(!map.is_empty());
    }
}
