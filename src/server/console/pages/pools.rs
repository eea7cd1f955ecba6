//! The pools page: counts by type and state (Boskos' metrics view), the leases with owner,
//! last update and expiry, waiting acquires, and Mason's virtual resources.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::parts::{since, ttl};
use crate::state::pools::{ClaimView, PoolView, POOL_CLAIM_KIND, POOL_KIND, VIRTUAL_CONFIG_KIND};
use crate::state::State;

/// Counts of a value per key, in key order (tables of the pools page).
type Counts = BTreeMap<String, BTreeMap<String, u64>>;

pub(super) fn pools(state: &State, rows: usize) -> Markup {
    let now = state.time_ms();
    let views = state
        .objects_of(POOL_KIND)
        .filter_map(|o| Some((o.metadata.name.to_string(), PoolView::of(o)?)))
        .collect::<Vec<_>>();
    let mut counts = Counts::new();
    let mut states = std::collections::BTreeSet::new();
    for (_, v) in &views {
        *counts
            .entry(v.rtype.clone())
            .or_default()
            .entry(v.state.clone())
            .or_default() += 1;
        states.insert(v.state.clone());
    }
    let mut waiting = BTreeMap::<(String, String), u64>::new();
    for claim in state.objects_of(POOL_CLAIM_KIND).filter_map(ClaimView::of) {
        *waiting.entry((claim.rtype, claim.state)).or_default() += 1;
    }
    let leased = views
        .iter()
        .filter(|(_, v)| !v.owner.is_empty())
        .take(rows)
        .collect::<Vec<_>>();
    let leased_total = views.iter().filter(|(_, v)| !v.owner.is_empty()).count();
    let virtual_types = state
        .objects_of(VIRTUAL_CONFIG_KIND)
        .map(|o| o.metadata.name.to_string())
        .collect::<Vec<_>>();
    html! {
        h1 { "Pools" }
        table #pool-counts {
            caption { "Resources by type and state" }
            thead { tr { th { "Type" } @for s in &states { th.num { (s) } } th.num { "Total" } } }
            tbody {
                @for (rtype, by_state) in &counts {
                    tr data-type=(rtype) {
                        td { (rtype) }
                        @for s in &states { td.num data-state=(s) { (by_state.get(s).copied().unwrap_or(0)) } }
                        td.num { (by_state.values().sum::<u64>()) }
                    }
                }
            }
        }
        @if counts.is_empty() { p { "No pool resources." } }
        table #leases {
            caption { "Leased (" (leased_total) ")" }
            thead { tr { th { "Resource" } th { "Type" } th { "State" } th { "Owner" } th { "Last update" } th { "Lease ends in" } th { "Leased with" } } }
            tbody {
                @for (name, v) in &leased {
                    tr data-resource=(name) {
                        td { (name) }
                        td { (v.rtype) }
                        td { (v.state) }
                        td { (v.owner) }
                        td { (since(v.last_update_ms, now)) " ago" }
                        td { @match v.expires_ms() { Some(until) => { (ttl(until, now)) }, None => { "no expiry" } } }
                        td { (v.parent) }
                    }
                }
            }
        }
        @if !waiting.is_empty() {
            table #pool-waiting {
                caption { "Acquires waiting" }
                thead { tr { th { "Type" } th { "State" } th.num { "Waiting" } } }
                tbody { @for ((t, s), n) in &waiting { tr { td { (t) } td { (s) } td.num { (n) } } } }
            }
        }
        @if !virtual_types.is_empty() {
            table #mason {
                caption { "Mason virtual resources" }
                thead { tr { th { "Virtual type" } th { "Resource" } th { "State" } th { "Owner" } th { "Leased with it" } } }
                tbody {
                    @for (name, v) in views.iter().filter(|(_, v)| virtual_types.contains(&v.rtype)).take(rows) {
                        tr data-resource=(name) {
                            td { (v.rtype) }
                            td { (name) }
                            td { (v.state) }
                            td { (v.owner) }
                            td { @for (child, _) in views.iter().filter(|(_, c)| c.parent == *name) { code { (child) } " " } }
                        }
                    }
                }
            }
        }
    }
}
