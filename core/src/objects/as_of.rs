//! A list page as of an earlier revision, for continue tokens that pin the revision of a list's
//! first page (as Kubernetes' do). Typed objects keep no old versions, so the page is rebuilt:
//! the current state with every later object event undone, newest first. Undoing puts back each
//! event's `prev`, so a key touched after the revision reads as the `prev` of its oldest later
//! event (absent if that event added it), and an untouched key reads as it is now.
//!
//! Pure: the caller (the server's `List`, with the events from its watch history) must hand
//! over every object event after the revision, or the page is wrong; it refuses the request when
//! its history no longer holds them all.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::command::Event;
use crate::objects::queries::{page, ListPage};
use crate::objects::resource::{ObjectKey, Resource};
use crate::objects::selector::Selector;
use crate::state::State;

impl State {
    /// `list` as of revision R <= `self.revision()`: `since` is every object event with a
    /// revision above R, oldest first (of any kind; those out of the list's scope are skipped).
    /// Keys keep their order, `limit` and `next` mean what they do in `list`, and the selector
    /// and `after` apply to the objects as they were at R. Costs one step per event plus the
    /// range `list` would cover.
    pub fn list_as_of<'e>(
        &self,
        kind: &str,
        namespace: Option<&str>,
        selector: &Selector,
        after: Option<&ObjectKey>,
        limit: usize,
        since: impl IntoIterator<Item = &'e Event>,
    ) -> ListPage {
        let then = as_of(kind, namespace, after, since);
        // The current objects whose keys nothing touched since R, merged in key order with the
        // touched keys that existed at R.
        let mut now = self
            .in_scope(kind, namespace, after)
            .map(|object| &**object)
            .filter(|object| !then.contains_key(&object.key()))
            .peekable();
        let mut old = then
            .values()
            .filter_map(|object| object.map(|o| &**o))
            .peekable();
        fn key(o: &Resource) -> (&str, &str, &str) {
            (&o.kind, &o.metadata.namespace, &o.metadata.name)
        }
        let merged = std::iter::from_fn(|| match (now.peek(), old.peek()) {
            (Some(a), Some(b)) if key(a) < key(b) => now.next(),
            (Some(_), None) => now.next(),
            _ => old.next(),
        });
        page(merged, selector, limit)
    }
}

/// For each key in the list's scope touched by an event of `since` (oldest first): the object
/// it held before the oldest of them, `None` where that event added it.
fn as_of<'e>(
    kind: &str,
    namespace: Option<&str>,
    after: Option<&ObjectKey>,
    since: impl IntoIterator<Item = &'e Event>,
) -> BTreeMap<ObjectKey, Option<&'e Arc<Resource>>> {
    let mut then = BTreeMap::new();
    for event in since {
        let o = &event.object;
        if o.kind != kind || namespace.is_some_and(|ns| o.metadata.namespace != ns) {
            continue;
        }
        let key = o.key();
        if after.is_none_or(|after| key > *after) {
            then.entry(key).or_insert(event.prev.as_ref());
        }
    }
    then
}

#[cfg(test)]
mod tests;
