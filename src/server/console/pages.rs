//! The console's pages: which view an address names (`view.rs`), the HTML of its main part
//! (`main`, one module per page) and of the whole page around it (`layout`). Everything shown is
//! escaped by maud.
//! Times are cluster times (ms); a `span.ttl` carries the cluster time it ends at in
//! `data-until`, and the script counts it down from the `now` each update carries.

use std::sync::Arc;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::scope::Scope;
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::ClusterStatusRequest;
use crate::server::cluster::ClusterService;
use crate::server::node::Node;

mod cluster;
mod deployments;
mod locks;
mod operations;
mod parts;
mod pools;
mod reservations;
mod resources;
mod view;

pub use parts::LeaderChange;
pub use view::View;

/// The navigation: address and label.
const NAV: [(&str, &str); 7] = [
    ("/cluster", "Cluster"),
    ("/resources", "Resources"),
    ("/locks", "Locks"),
    ("/operations", "Operations"),
    ("/pools", "Pools"),
    ("/deployments", "Deployments"),
    ("/reservations", "Reservations"),
];

/// The whole page: navigation, the view's main part, and what the script needs to keep it live.
pub fn layout(view: &View, main: &str, now_ms: u64, user: Option<&str>) -> String {
    let title = view.title();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "steward · " (title) }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body data-view=(view.href()) data-now=(now_ms) {
                a.skip href="#main" { "Skip to content" }
                header {
                    span.brand { "steward" }
                    nav aria-label="Sections" {
                        ul {
                            @for (href, label) in NAV {
                                li {
                                    a href=(href) aria-current=[(view.section() == href).then_some("page")] { (label) }
                                }
                            }
                        }
                    }
                    span.live #live role="status" aria-live="polite" { "static" }
                    @if let Some(user) = user { span.user { "as " (user) } }
                }
                main #main tabindex="-1" { (PreEscaped(main)) }
            }
        }
    }
    .into_string()
}

/// The main part of `view`, as `scope` sees it.
pub async fn main(
    node: &Arc<Node>,
    rows: usize,
    view: &View,
    scope: &Scope,
    leaders: &[LeaderChange],
) -> Markup {
    match view {
        View::Cluster => {
            let status = ClusterService::new(node.clone())
                .status(tonic::Request::new(ClusterStatusRequest {}))
                .await;
            let now = node.cluster_now();
            match status {
                Ok(reply) => cluster::cluster(&reply.into_inner(), leaders, now),
                Err(e) => html! { h1 { "Cluster" } p.error { "status: " (e.message()) } },
            }
        }
        _ => {
            let state = node.state();
            match view {
                View::Kinds => resources::kinds(&state, scope),
                View::Objects {
                    kind,
                    namespace,
                    selector,
                    after,
                } => resources::objects(&state, scope, kind, namespace, selector, after, rows),
                View::Object {
                    kind,
                    namespace,
                    name,
                } => resources::object(&state, scope, kind, namespace, name),
                View::Locks { prefix, after } => locks::locks(&state, prefix, after, rows),
                View::Operations => operations::operations(&state, scope, rows),
                View::Pools => pools::pools(&state, rows),
                View::Deployments => deployments::deployments(&state, scope, rows),
                View::Deployment { namespace, name } => {
                    deployments::deployment(&state, scope, namespace, name, rows)
                }
                View::Reservations => reservations::reservations(&state),
                View::Cluster => html! {},
            }
        }
    }
}
