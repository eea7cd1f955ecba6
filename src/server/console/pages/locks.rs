//! The locks page: every lock in key order, its holders (mode, fencing token, time held, TTL
//! left) and its waiters in the order they will be granted.

use maud::{html, Markup};

use super::parts::{since, ttl};
use super::view::View;
use crate::state::State;

pub(super) fn locks(state: &State, prefix: &str, after: &str, rows: usize) -> Markup {
    let now = state.time_ms();
    let mut shown = state
        .locks()
        .filter(|l| l.name.starts_with(prefix) && l.name.as_str() > after)
        .take(rows + 1)
        .collect::<Vec<_>>();
    let more = shown.len() > rows;
    shown.truncate(rows);
    html! {
        h1 { "Locks" }
        form.filter method="get" action="/locks" {
            label { "Name prefix " input name="prefix" value=(prefix) size="24"; }
            button type="submit" { "Filter" }
        }
        table #locks {
            caption { "Locks held or waited for (" (state.lock_count()) " in all)" }
            thead { tr {
                th { "Lock" } th { "Holder" } th { "Mode" } th.num { "Token" } th { "Held for" } th { "TTL left" }
            } }
            @for l in &shown {
                tbody data-lock=(l.name) {
                    @for (i, h) in l.holders.iter().enumerate() {
                        tr.holder data-holder=(h.holder) {
                            td { @if i == 0 { (l.name) } }
                            td { (h.holder) }
                            td { (h.mode) }
                            td.num { (h.token) }
                            td { (since(h.granted_at_ms, now)) }
                            td { @match h.expires_at_ms { Some(until) => { (ttl(until, now)) }, None => { "no TTL" } } }
                        }
                    }
                    @if l.holders.is_empty() {
                        tr { td { (l.name) } td colspan="5" {
                            "free"
                            @if let Some(until) = l.delay_until_ms { " · nobody is granted for " (ttl(until, now)) " (a WRITE holder expired)" }
                        } }
                    }
                    @for (i, w) in l.waiters.iter().enumerate() {
                        tr.waiter data-waiter=(w.holder) {
                            td {}
                            td { (i + 1) ". " (w.holder) " (waiting)" }
                            td { (w.mode) }
                            td.num {}
                            td { "queued " (since(w.queued_at_ms, now)) " ago" }
                            td { "gives up in " (ttl(w.wait_until_ms, now)) }
                        }
                    }
                }
            }
        }
        @if shown.is_empty() { p { "No locks." } }
        @if more {
            @if let Some(last) = shown.last() {
                p { a rel="next" href=(View::Locks { prefix: prefix.to_string(), after: last.name.clone() }.href()) { "Next page" } }
            }
        }
    }
}
