//! Reads of the objects: one by key, a kind, a page of a list, counts.

use std::ops::Bound;
use std::sync::Arc;

use crate::objects::count::{CountBy, Counts};
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::selector::Selector;
use crate::rejection::Rejection;
use crate::state::State;

/// One page of `State::list` (or `State::list_as_of`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// Matching objects in key order.
    pub items: Vec<Resource>,
    /// The last returned key when the page was cut by `limit` and more keys follow in range;
    /// pass it back as `after` for the next page.
    pub next: Option<ObjectKey>,
}

/// The page of `in_scope` (every object of the list's kind and namespace after its start, in
/// key order): the first `limit` that match `selector` (`0`: all), and `next` when the page was
/// cut and more keys follow.
pub(crate) fn page<'a>(
    in_scope: impl Iterator<Item = &'a Resource>,
    selector: &Selector,
    limit: usize,
) -> ListPage {
    let mut in_scope = in_scope.peekable();
    let mut page = ListPage::default();
    for object in in_scope.by_ref() {
        if selector.matches(&object.metadata.labels) {
            page.items.push(object.clone());
            if page.items.len() == limit {
                break;
            }
        }
    }
    if limit != 0 && page.items.len() == limit && in_scope.peek().is_some() {
        page.next = page.items.last().map(Resource::key);
    }
    page
}

impl State {
    /// One object by key.
    pub fn get(&self, key: &ObjectKey) -> Option<&Resource> {
        self.objects.get(key).map(|o| &**o)
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when no object is stored.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every kind stored, with its number of objects, in kind order (kept counts, no scan).
    pub fn kind_counts(&self) -> impl Iterator<Item = (&str, u64)> {
        self.label_counts.kinds()
    }

    /// The objects of one kind, in key order (ranges over the kind only).
    pub fn objects_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Resource> + 'a {
        self.objects
            .range(ObjectKey::new(kind, "", "")..)
            .take_while(move |o| o.kind == kind)
            .map(|o| &**o)
    }

    /// All objects in key order (for snapshots of watch caches and diagnostics).
    pub fn objects(&self) -> impl Iterator<Item = &Resource> {
        self.objects.values().map(|o| &**o)
    }

    /// Objects of one kind, in one namespace or all, matching `selector`, in key order, starting
    /// strictly after `after`, at most `limit` of them (`0` means no limit). Ranges over the
    /// kind (and namespace) only, never the whole store.
    pub fn list(
        &self,
        kind: &str,
        namespace: Option<&str>,
        selector: &Selector,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> ListPage {
        let in_scope = self.in_scope(kind, namespace, after).map(|o| &**o);
        page(in_scope, selector, limit)
    }

    /// The stored objects of `kind` (in `namespace`, or all) with keys after `after`, in key
    /// order: a range over that part of the map only.
    pub(crate) fn in_scope<'a>(
        &'a self,
        kind: &'a str,
        namespace: Option<&'a str>,
        after: Option<&ObjectKey>,
    ) -> impl Iterator<Item = &'a Arc<Resource>> + 'a {
        let start = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        let lower = match after {
            Some(after) if *after >= start => Bound::Excluded(after.clone()),
            _ => Bound::Included(start),
        };
        self.objects
            .range((lower, Bound::Unbounded))
            .take_while(move |o| {
                o.kind == kind && namespace.is_none_or(|ns| o.metadata.namespace == ns)
            })
    }

    /// Counts objects of `kind` (in `namespace`, or all) matching `selector` by `by`. A count by
    /// label over all namespaces with no selector is read from the kept counts; the others range
    /// over the kind's objects only.
    pub fn count(
        &self,
        kind: &str,
        namespace: Option<&str>,
        selector: &Selector,
        by: &CountBy,
    ) -> Result<Counts, Rejection> {
        if let (CountBy::Label(key), None, true) = (by, namespace, selector.is_everything()) {
            return self.label_counts.by_label(kind, key.as_str());
        }
        let start = ObjectKey::new(kind, namespace.unwrap_or(""), "");
        let mut counts = Counts::default();
        let in_scope =
            |o: &Resource| o.kind == kind && namespace.is_none_or(|ns| o.metadata.namespace == ns);
        for object in self.objects.range(start..).take_while(|o| in_scope(o)) {
            if selector.matches(&object.metadata.labels) {
                counts.add(by.value_of(object))?;
            }
        }
        Ok(counts)
    }
}
