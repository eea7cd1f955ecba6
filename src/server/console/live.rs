//! Live pages: one server-sent-event stream per open page (`GET /events?view=<the page's path>`)
//! sends the page's main part again whenever it changed.
//!
//! Streams do not render. Every view that is open, as seen by one scope (the namespaces its user
//! reads), has one feed: a task that renders it and hands the HTML to every stream showing it
//! (a `watch` channel), so twenty open consoles on one page cost one render per change. A feed
//! wakes when this node applies something or its view of Raft changes (openraft's metrics
//! channel), and at least every `REFRESH` (the cluster page asks the members for their status;
//! times move); it then waits out `console.update_interval_ms` since its last render, so the
//! changes of that interval arrive together, renders, and publishes only HTML that differs. It
//! ends when its last stream has gone.
//!
//! Every event also carries this node's cluster time (`event: now`), from which the script counts
//! TTLs down. At most `console.streams_max` streams at once (503 past it, counted as
//! `streams_max`); each ends when its client goes, the node stops, or what its user may read
//! changed (the script then opens it again, authenticated anew).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, Uri};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

use super::pages::{self, View};
use super::{update_interval, Console, Peer, Scope};
use crate::raft::types::WatchReceiver;
use crate::server::auth::Caller;
use crate::state::auth::Access;

/// Longest a feed goes without rendering: the cluster page's members and the times shown move
/// without anything being applied here.
const REFRESH: Duration = Duration::from_secs(1);

/// Events a stream has ready for a client that reads slowly; past it the stream waits.
const STREAM_QUEUE: usize = 4;

/// The feeds of the views open now, by scope and view.
#[derive(Default)]
pub struct Feeds {
    by_key: BTreeMap<String, watch::Receiver<Option<Arc<str>>>>,
}

/// The main part of `view` as `scope` sees it, rendered now.
pub async fn render(console: &Console, view: &View, scope: &Scope) -> Arc<str> {
    let leaders = console
        .leaders
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect::<Vec<_>>();
    let rows = console
        .config
        .page_rows
        .min(console.node.config.limits.list_page_max as usize);
    let html = pages::main(&console.node, rows, view, scope, &leaders).await;
    console.node.metrics.console_renders.inc();
    html.into_string().into()
}

/// A receiver of the feed of `view` as `scope` sees it, started if none runs.
fn subscribe(
    console: &Arc<Console>,
    view: &View,
    scope: &Scope,
) -> watch::Receiver<Option<Arc<str>>> {
    let key = format!("{}|{}", scope.key(), view.href());
    let mut feeds = console.feeds.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rx) = feeds.by_key.get(&key) {
        if rx.has_changed().is_ok() {
            return rx.clone();
        }
    }
    let (tx, rx) = watch::channel(None);
    feeds.by_key.insert(key.clone(), rx.clone());
    tokio::spawn(feed(console.clone(), view.clone(), scope.clone(), key, tx));
    rx
}

/// Renders `view` for its streams until the last has gone (see the module docs).
async fn feed(
    console: Arc<Console>,
    view: View,
    scope: Scope,
    key: String,
    tx: watch::Sender<Option<Arc<str>>>,
) {
    let mut changes = console.node.raft.metrics();
    loop {
        {
            // The map holds one receiver; past that, streams. Checked under the map's lock, so
            // no stream subscribes to a feed that is ending.
            let mut feeds = console.feeds.lock().unwrap_or_else(|p| p.into_inner());
            if tx.receiver_count() <= 1 && tx.borrow().is_some() {
                feeds.by_key.remove(&key);
                return;
            }
        }
        let started = Instant::now();
        let html = render(&console, &view, &scope).await;
        tx.send_if_modified(|current| match current.as_ref() == Some(&html) {
            true => false,
            false => {
                *current = Some(html);
                true
            }
        });
        changes.borrow_and_update();
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(REFRESH) => {}
        }
        tokio::time::sleep(update_interval(&console.config).saturating_sub(started.elapsed()))
            .await;
    }
    console
        .feeds
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .by_key
        .remove(&key);
}

#[derive(serde::Deserialize)]
pub struct EventsQuery {
    /// The page's path and query, as its address bar shows them.
    view: String,
}

/// `GET /events?view=/locks`: the live stream of one page.
pub async fn events(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<EventsQuery>,
) -> Response {
    let caller = match console.admit(&headers, &peer, &uri) {
        Ok(caller) => caller,
        Err(refusal) => return *refusal,
    };
    let (path, view_query) = query.view.split_once('?').unwrap_or((&query.view, ""));
    let view = match View::parse(path, view_query) {
        Ok(view) => view,
        Err(refusal) => {
            console.refused("bad_request");
            return refusal.into_response();
        }
    };
    let Ok(permit) = console.streams.clone().try_acquire_owned() else {
        console.refused("streams_max");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "console.streams_max: this node serves {} live pages already; close one, or \
                 open the console on another node\n",
                console.config.streams_max
            ),
        )
            .into_response();
    };
    let scope = Scope::of(&caller);
    let mut pages = subscribe(&console, &view, &scope);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(STREAM_QUEUE);
    let node = console.node.clone();
    node.metrics.console_streams.inc();
    tokio::spawn(async move {
        let _permit = permit;
        let user = caller.user.as_ref().map(|u| u.name.clone());
        let mut sent: Option<Arc<str>> = None;
        loop {
            if scope_now(&console, user.as_deref()).as_ref() != Some(&scope) {
                break;
            }
            let html = pages.borrow_and_update().clone();
            let now = Event::default()
                .event("now")
                .data(console.node.cluster_now().to_string());
            if tx.send(Ok(now)).await.is_err() {
                break;
            }
            if html.is_some() && html != sent {
                let page = Event::default()
                    .event("page")
                    .data(html.as_deref().unwrap_or_default());
                if tx.send(Ok(page)).await.is_err() {
                    break;
                }
                sent = html;
            }
            tokio::select! {
                changed = pages.changed() => if changed.is_err() { break },
                _ = tokio::time::sleep(REFRESH) => {}
                _ = tx.closed() => break,
            }
        }
        node.metrics.console_streams.dec();
    });
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// What the stream's user may see now: everything while authentication is off, else what its
/// roles allow; `None` once it may not look at all (removed, or no role that reads). A stream
/// whose scope changed ends, and the page's script opens it again with the new one.
fn scope_now(console: &Console, user: Option<&str>) -> Option<Scope> {
    let state = console.node.state();
    let auth = state.auth();
    if !auth.enabled {
        return Some(Scope::All);
    }
    let user = auth.users.get(user?)?;
    let caller = Caller {
        enabled: true,
        revision: auth.revision,
        user: Some(user.clone()),
        method: http::uri::PathAndQuery::from_static("/events"),
    };
    caller
        .allows(Access::ClusterRead)
        .then(|| Scope::of(&caller))
}
