//! The web console (README "Console"): what this node has applied, as pages a browser shows and
//! keeps up to date.
//!
//! Every node serves it on its own listener (`console.addr`; none when unset), over TLS with the
//! node's certificate unless `tls.plaintext`. Pages read this node's applied state (the
//! serializable reads of the API) and its own view of the cluster, so looking never loads the
//! leader; the cluster page asks each member for its status, as `steward cluster status` does.
//!
//! Who may look is who may read through the API (`auth::authenticate_headers`: a bearer token, a
//! browser's basic credentials with the token's secret as the password, or a client certificate
//! naming a user): every page and stream needs a role that reads cluster-wide data (read-only, or
//! read-write in some namespace); namespaced data (objects, operations) shows only the
//! namespaces the user reads. Nothing can be changed through the console.
//!
//! Pages are HTML rendered here (`pages`, with maud); a page keeps itself current through one
//! server-sent-event stream (`live`) that sends the page's main part again when what it shows
//! changed, at most every `console.update_interval_ms`. One render serves every stream showing
//! the same view to users who see the same namespaces, so twenty open consoles cost about what
//! one does. The script (`assets/console.js`, hand-written, no build step) swaps the main part in
//! and counts TTLs down between updates; without it every page still works, as a static page.

mod listen;
mod live;
mod pages;
mod scope;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, StatusCode, Uri};

use crate::config::ConsoleConfig;
use crate::metrics::CodeLabels;
use crate::raft::types::WatchReceiver;
use crate::server::auth::{authenticate_headers, Caller};
use crate::server::client_limits::ClientKey;
use crate::server::node::Node;
use crate::state::auth::Access;

pub use listen::{server_config, ConsoleListener, Peer};
use pages::View;
use scope::Scope;

/// Leader changes the cluster page lists, newest first.
const LEADER_CHANGES_KEPT: usize = 20;

/// The console of one node: its config, the renders its streams share, and what it saw of
/// leadership.
pub struct Console {
    node: Arc<Node>,
    config: ConsoleConfig,
    streams: Arc<tokio::sync::Semaphore>,
    feeds: Mutex<live::Feeds>,
    leaders: Mutex<VecDeque<pages::LeaderChange>>,
}

/// Serves the console from `listener` until `stop`.
pub async fn serve(
    node: Arc<Node>,
    listener: ConsoleListener,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let config = node.config.console.clone();
    let console = Arc::new(Console {
        streams: Arc::new(tokio::sync::Semaphore::new(config.streams_max)),
        feeds: Mutex::new(live::Feeds::default()),
        leaders: Mutex::new(VecDeque::new()),
        config,
        node,
    });
    tokio::spawn(follow_leaders(console.clone(), stop.clone()));
    let app = axum::Router::new()
        .route("/events", axum::routing::get(live::events))
        .route("/assets/console.js", axum::routing::get(script))
        .route("/assets/console.css", axum::routing::get(style))
        .fallback(axum::routing::get(page))
        .with_state(console);
    let mut stop_serving = stop.clone();
    let result = axum::serve(listener, app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(async move {
            let _ = stop_serving.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "console server failed");
    }
}

/// Records every change of leader this node sees, for the cluster page.
async fn follow_leaders(console: Arc<Console>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut metrics = console.node.raft.metrics();
    let mut last = None;
    loop {
        let (term, leader) = {
            let m = metrics.borrow_and_update();
            (m.current_term, m.current_leader)
        };
        if last != Some((term, leader)) {
            last = Some((term, leader));
            let change = pages::LeaderChange {
                term,
                leader,
                at: std::time::Instant::now(),
            };
            let mut leaders = console.leaders.lock().unwrap_or_else(|p| p.into_inner());
            leaders.push_front(change);
            leaders.truncate(LEADER_CHANGES_KEPT);
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
        }
    }
}

impl Console {
    /// The caller, or the answer that refuses it: 401 asking for credentials (a browser then
    /// asks for a user name and the token), or 403 without a role that reads.
    fn admit(&self, headers: &HeaderMap, peer: &Peer, uri: &Uri) -> Result<Caller, Box<Response>> {
        let auth = self.node.state().auth().clone();
        let key = match &peer.common_name {
            Some(cn) => ClientKey::Certificate(cn.clone()),
            None => ClientKey::Address(peer.addr.ip()),
        };
        let method = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        let mut caller = Caller {
            enabled: auth.enabled,
            revision: auth.revision,
            user: None,
            method,
        };
        match authenticate_headers(&self.node, &auth, headers, key) {
            Ok(user) => caller.user = Some(user),
            Err(_) if !auth.enabled => {}
            Err(why) => {
                tracing::warn!(path = %caller.method, client = %peer.addr, why, "console: unauthenticated");
                self.refused("unauthenticated");
                let mut response = (
                    StatusCode::UNAUTHORIZED,
                    format!("unauthenticated: {why}\n"),
                )
                    .into_response();
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static(
                        "Basic realm=\"steward console: your user name, and its token as the password\", charset=\"UTF-8\"",
                    ),
                );
                return Err(Box::new(response));
            }
        }
        if !caller.allows(Access::ClusterRead) {
            let user = caller.user.as_ref().map_or("", |u| u.name.as_str());
            tracing::warn!(path = %caller.method, user, "console: permission denied");
            self.refused("permission_denied");
            return Err(Box::new(
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "permission denied: user {user:?} has no role that reads (read-only, or \
                     read-write in some namespace)\n"
                    ),
                )
                    .into_response(),
            ));
        }
        Ok(caller)
    }

    fn refused(&self, code: &str) {
        self.node
            .metrics
            .console_refusals
            .get_or_create(&CodeLabels {
                code: code.to_string(),
            })
            .inc();
    }
}

/// A whole page: the layout around the view's main part.
async fn page(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if uri.path() == "/" {
        return axum::response::Redirect::to("/cluster").into_response();
    }
    let caller = match console.admit(&headers, &peer, &uri) {
        Ok(caller) => caller,
        Err(refusal) => return *refusal,
    };
    let view = match View::parse(uri.path(), uri.query().unwrap_or("")) {
        Ok(view) => view,
        Err(refusal) => {
            console.refused("bad_request");
            return refusal.into_response();
        }
    };
    let scope = Scope::of(&caller);
    let main = live::render(&console, &view, &scope).await;
    let now = console.node.cluster_now();
    let html = pages::layout(
        &view,
        &main,
        now,
        caller.user.as_ref().map(|u| u.name.as_str()),
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("console/assets/console.js"),
    )
}

async fn style() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        include_str!("console/assets/console.css"),
    )
}

/// The interval a stream waits for more changes before it renders again.
fn update_interval(config: &ConsoleConfig) -> Duration {
    Duration::from_millis(config.update_interval_ms)
}
