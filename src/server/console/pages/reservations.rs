//! The reservations page: the counters of each node.

use maud::{html, Markup};

use crate::state::State;

pub(super) fn reservations(state: &State) -> Markup {
    let index = state.reservations();
    let nodes = index.nodes().collect::<Vec<_>>();
    let kinds = nodes
        .iter()
        .flat_map(|(_, r)| r.by_kind.keys().map(|k| k.to_string()))
        .collect::<std::collections::BTreeSet<_>>();
    html! {
        h1 { "Reservations" }
        p.summary { (index.pending_len()) " expired reservations waiting for decommission" }
        table #reservations {
            caption { "Reserved per node (ThreeFold counters)" }
            thead { tr {
                th { "Node" } th.num { "Workloads" }
                @for k in &kinds { th.num { (k) } }
                th.num { "CRU" } th.num { "MRU" } th.num { "HRU" } th.num { "SRU" }
            } }
            tbody {
                @for (id, r) in &nodes {
                    tr data-node=(id) {
                        td { (id) }
                        td.num { (r.workloads) }
                        @for k in &kinds { td.num { (r.by_kind.get(k.as_str()).copied().unwrap_or(0)) } }
                        td.num { (r.units.cru) } td.num { (r.units.mru) } td.num { (r.units.hru) } td.num { (r.units.sru) }
                    }
                }
            }
        }
        @if nodes.is_empty() { p { "No reservations." } }
    }
}
