//! The resources pages: the kinds with their counts, a kind's objects (namespace and label
//! selector, a page at a time), and one object's JSON.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::view::View;
use crate::server::console::scope::Scope;
use crate::state::{ObjectKey, Selector, State};

pub(super) fn kinds(state: &State, scope: &Scope) -> Markup {
    // The kept counts are of every namespace: a scoped user sees the kinds it has objects of,
    // counted in its namespaces.
    let counts: Vec<(String, u64)> = match scope {
        Scope::All => state
            .kind_counts()
            .map(|(k, n)| (k.to_string(), n))
            .collect(),
        Scope::Namespaces(_) => {
            let mut counts = BTreeMap::<String, u64>::new();
            for o in state
                .objects()
                .filter(|o| scope.sees(&o.metadata.namespace))
            {
                *counts.entry(o.kind.to_string()).or_default() += 1;
            }
            counts.into_iter().collect()
        }
    };
    html! {
        h1 { "Resources" }
        table #kinds {
            caption { "Kinds" }
            thead { tr { th { "Kind" } th.num { "Objects" } } }
            tbody {
                @for (kind, n) in &counts {
                    tr data-kind=(kind) {
                        td { a href=(View::Objects { kind: kind.clone(), namespace: String::new(), selector: String::new(), after: String::new() }.href()) { (kind) } }
                        td.num { (n) }
                    }
                }
            }
        }
        @if counts.is_empty() { p { "No objects." } }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn objects(
    state: &State,
    scope: &Scope,
    kind: &str,
    namespace: &str,
    selector_text: &str,
    after: &str,
    rows: usize,
) -> Markup {
    let selector = Selector::parse(selector_text).unwrap_or_default();
    let after_key = after
        .split_once('/')
        .map(|(ns, name)| ObjectKey::new(kind, ns, name));
    let listed = (!namespace.is_empty()).then_some(namespace);
    let (items, next) = match (scope, listed) {
        (Scope::Namespaces(set), Some(ns)) if !set.contains(ns) => (Vec::new(), None),
        (Scope::All, _) | (Scope::Namespaces(_), Some(_)) => {
            let page = state.list(kind, listed, &selector, after_key.as_ref(), rows);
            (page.items, page.next)
        }
        // A scoped user over "every namespace": its namespaces, in key order.
        (Scope::Namespaces(set), None) => {
            let mut items = Vec::new();
            let mut next = None;
            for ns in set {
                if after_key
                    .as_ref()
                    .is_some_and(|a| ns.as_str() < a.namespace.as_str())
                {
                    continue;
                }
                let from = after_key.as_ref().filter(|a| a.namespace == ns.as_str());
                let page = state.list(kind, Some(ns), &selector, from, rows - items.len());
                items.extend(page.items);
                if items.len() >= rows {
                    next = page.next.or_else(|| items.last().map(|o| o.key()));
                    break;
                }
            }
            (items, next)
        }
    };
    let here = |after: String| View::Objects {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        selector: selector_text.to_string(),
        after,
    };
    html! {
        h1 { "Resources: " (kind) }
        form.filter method="get" action=(View::Objects { kind: kind.to_string(), namespace: String::new(), selector: String::new(), after: String::new() }.href()) {
            label { "Namespace " input name="namespace" value=(namespace) placeholder="every namespace" size="16"; }
            label { "Label selector " input name="selector" value=(selector_text) placeholder="app=web,tier!=db" size="28"; }
            button type="submit" { "Filter" }
        }
        table #objects {
            caption { (kind) " objects" @if !after.is_empty() { " after " (after) } }
            thead { tr { th { "Namespace" } th { "Name" } th.num { "Version" } th { "Created" } th { "Labels" } } }
            tbody {
                @for o in &items {
                    @let m = &o.metadata;
                    tr data-name=(m.name) {
                        td { (m.namespace) }
                        td { a href=(View::Object { kind: kind.to_string(), namespace: m.namespace.to_string(), name: m.name.to_string() }.href()) { (m.name) } }
                        td.num { (m.resource_version) }
                        td { (m.creation_timestamp) }
                        td.labels { @for (k, v) in &m.labels { code { (k) "=" (v) } " " } }
                    }
                }
            }
        }
        @if items.is_empty() { p { "No objects match." } }
        @if let Some(next) = next {
            p { a rel="next" href=(here(format!("{}/{}", next.namespace, next.name)).href()) { "Next page" } }
        }
    }
}

pub(super) fn object(
    state: &State,
    scope: &Scope,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Markup {
    let key = ObjectKey::new(kind, namespace, name);
    let found = state.get(&key).filter(|_| scope.sees(namespace));
    html! {
        h1 { (kind) " " (namespace) "/" (name) }
        @match found {
            Some(o) => {
                @let pretty = serde_json::from_str::<serde_json::Value>(&o.to_json())
                    .and_then(|v| serde_json::to_string_pretty(&v))
                    .unwrap_or_else(|_| o.to_json());
                pre #object { code { (pretty) } }
            }
            None => { p #object { "Not found (deleted, or not in a namespace you read)." } }
        }
    }
}
