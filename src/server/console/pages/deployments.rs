//! The deployments pages: each deployment's summary with its readiness (EMCO), and one
//! deployment by app and cluster down to each resource.

use std::collections::BTreeMap;

use maud::{html, Markup};

use super::view::View;
use crate::server::console::scope::Scope;
use crate::state::State;

/// Nonzero counts as `name n · name n`.
pub(super) fn tally_text(counts: &BTreeMap<&'static str, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    match parts.is_empty() {
        true => "none".to_string(),
        false => parts.join(" · "),
    }
}

pub(super) fn deployments(state: &State, scope: &Scope, rows: usize) -> Markup {
    let shown = state
        .deployments()
        .filter(|(key, _)| scope.sees(&key.namespace))
        .collect::<Vec<_>>();
    html! {
        h1 { "Deployments" }
        table #deployments {
            caption { "Deployments (EMCO status summary; " (shown.len()) ")" }
            thead { tr {
                th { "Deployment" } th { "Project / app / version / profile" } th { "State" }
                th { "AppContext" } th.num { "Resources" } th { "Readiness" } th { "Rsync" }
            } }
            tbody {
                @for (key, d) in shown.iter().take(rows) {
                    @let tally = d.tally();
                    tr data-deployment=(format!("{}/{}", key.namespace, key.name)) {
                        td { a href=(View::Deployment { namespace: key.namespace.to_string(), name: key.name.to_string() }.href()) { (key.namespace) "/" (key.name) } }
                        td { (d.header.project) " / " (d.header.composite_app) " / " (d.header.composite_app_version) " / " (d.header.composite_profile) }
                        td { (d.user_state.as_str()) }
                        td { (d.context.map_or("none", |c| c.as_str())) }
                        td.num { (tally.resources()) }
                        td.readiness { (tally_text(&tally.readiness_map())) }
                        td { (tally_text(&tally.rsync_map())) }
                    }
                }
            }
        }
        @if shown.is_empty() { p { "No deployments." } }
    }
}

pub(super) fn deployment(
    state: &State,
    scope: &Scope,
    namespace: &str,
    name: &str,
    rows: usize,
) -> Markup {
    let key =
        crate::state::ObjectKey::new(crate::state::deployments::DEPLOYMENT_KIND, namespace, name);
    let found = state.deployment(&key).filter(|_| scope.sees(namespace));
    html! {
        h1 { "Deployment " (namespace) "/" (name) }
        @match found {
            None => { p #deployment { "Not found (deleted, or not in a namespace you read)." } }
            Some(d) => {
                @let tally = d.tally();
                p.summary {
                    (d.user_state.as_str()) " · AppContext " (d.context.map_or("none", |c| c.as_str()))
                    " · " (tally.resources()) " resources · readiness: " (tally_text(&tally.readiness_map()))
                }
                @for (app, clusters) in d.apps() {
                    table data-app=(app) {
                        caption { "App " (app) }
                        thead { tr { th { "Cluster" } th { "Resource" } th { "Rsync" } th { "In cluster" } th { "Readiness" } } }
                        @for (cluster, entry) in clusters {
                            tbody data-cluster=(cluster) {
                                tr.cluster-summary {
                                    td { strong { (cluster) } }
                                    td colspan="4" { (entry.len()) " resources · readiness: " (tally_text(&entry.tally().readiness_map())) " · rsync: " (tally_text(&entry.tally().rsync_map())) }
                                }
                                @for (rkey, r) in entry.resources().take(rows) {
                                    tr data-resource=(rkey.name) {
                                        td {}
                                        td { (rkey.to_string()) }
                                        td { (r.rsync.map_or("", |s| s.as_str())) }
                                        td { (r.cluster.as_str()) }
                                        td { (r.readiness.as_str()) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
