//! The operations page: per target the queue in order, each operation's state, attempt, epoch
//! and worker; the workers alive with their load; and the operations that ended.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::parts::{since, ttl};
use crate::server::console::scope::Scope;
use crate::state::{ObjectKey, OpFilter, State};

pub(super) fn operations(state: &State, scope: &Scope, rows: usize) -> Markup {
    let now = state.time_ms();
    let mut queues = BTreeMap::<&ObjectKey, Vec<&crate::state::Operation>>::new();
    let mut ended = Vec::new();
    for op in state.operations(&OpFilter::default(), None, 0) {
        if !scope.sees(&op.target.namespace) {
            continue;
        }
        match op.state.is_final() {
            true => ended.push(op),
            false => queues.entry(&op.target).or_default().push(op),
        }
    }
    let active: usize = queues.values().map(Vec::len).sum();
    let shown_ended = ended.iter().rev().take(rows).collect::<Vec<_>>();
    let workers = state.workers().collect::<Vec<_>>();
    html! {
        h1 { "Operations" }
        p.summary { (active) " running or queued on " (queues.len()) " targets · " (ended.len()) " ended and kept" }
        table #queues {
            caption { "Queues per target, in order (the first runs; the others wait their turn)" }
            thead { tr { th { "Target" } th { "Operation" } th { "Verb" } th { "State" } th.num { "Attempt" } th.num { "Epoch" } th { "Worker" } th { "Submitted" } } }
            @for (target, ops) in queues.iter().take(rows) {
                tbody data-target=(format!("{}/{}/{}", target.kind, target.namespace, target.name)) {
                    @for (i, op) in ops.iter().enumerate() {
                        tr data-op=(op.id) data-state=(op_state(op.state)) {
                            td { @if i == 0 { (target.kind) " " (target.namespace) "/" (target.name) } }
                            td { (op.id) }
                            td { (op.verb) }
                            td { (op_state(op.state)) }
                            td.num { (op.attempt) }
                            td.num { (op.epoch) }
                            td { (op.worker.as_deref().unwrap_or("")) }
                            td { (since(op.submitted_ms, now)) " ago" }
                        }
                    }
                }
            }
        }
        @if queues.is_empty() { p { "Nothing queued or running." } }
        table #workers {
            caption { "Workers" }
            thead { tr { th { "Worker" } th { "Alive" } th.num { "Load" } th { "Handles" } th { "Heartbeat TTL left" } } }
            tbody {
                @for w in &workers {
                    tr data-worker=(w.id) {
                        td { (w.id) }
                        td { @if w.is_alive(now) { span.good { "alive" } } @else { span.bad { "gone" } } }
                        td.num { (w.assigned.len()) " / " (w.capacity) }
                        td { @for h in &w.handles { code { (h.kind) ":" (h.verb) } " " } }
                        td { (ttl(w.expires_at_ms(), now)) }
                    }
                }
            }
        }
        @if workers.is_empty() { p { "No workers registered." } }
        table #ended {
            caption { "Ended, newest first" }
            thead { tr { th { "Operation" } th { "Target" } th { "Verb" } th { "State" } th.num { "Attempts" } th { "Worker" } th { "Ended" } } }
            tbody {
                @for op in &shown_ended {
                    tr data-op=(op.id) data-state=(op_state(op.state)) {
                        td { (op.id) }
                        td { (op.target.kind) " " (op.target.namespace) "/" (op.target.name) }
                        td { (op.verb) }
                        td { (op_state(op.state)) }
                        td.num { (op.attempt) }
                        td { (op.worker.as_deref().unwrap_or("")) }
                        td { (since(op.last_change_ms(), now)) " ago" }
                    }
                }
            }
        }
    }
}

/// `queued`, `in_progress`, ... as the CLI and the API's JSON write them.
pub(super) fn op_state(s: crate::state::OpState) -> String {
    crate::wire::operation_state_name(crate::server::operations::state_to_proto(s).into())
}
