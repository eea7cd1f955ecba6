//! The console's pages: which view an address names (`View::parse`), and the HTML of its main
//! part (`main`) and of the whole page around it (`layout`). Everything shown is escaped by maud.
//! Times are cluster times (ms); a `span.ttl` carries the cluster time it ends at in
//! `data-until`, and the script counts it down from the `now` each update carries.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{ago, duration, Console, Counts, Scope};
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::{ClusterStatusReply, ClusterStatusRequest};
use crate::server::cluster::ClusterService;
use crate::state::pools::{ClaimView, PoolView, POOL_CLAIM_KIND, POOL_KIND, VIRTUAL_CONFIG_KIND};
use crate::state::{ObjectKey, OpFilter, Selector, State};

/// Longest path segment or query value a view takes (a DNS subdomain's length).
const SEGMENT_CHARS_MAX: usize = 253;

/// A change of leader, as this node saw it.
#[derive(Clone, Debug)]
pub struct LeaderChange {
    pub term: u64,
    pub leader: Option<u64>,
    pub at: std::time::Instant,
}

/// What one console address shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View {
    Cluster,
    /// Every kind, with its count.
    Kinds,
    /// The objects of one kind, a page at a time.
    Objects {
        kind: String,
        namespace: String,
        selector: String,
        /// The page starts after this object (`namespace/name`).
        after: String,
    },
    /// One object's JSON.
    Object {
        kind: String,
        namespace: String,
        name: String,
    },
    Locks {
        prefix: String,
        after: String,
    },
    Operations,
    Pools,
    /// Every deployment's summary.
    Deployments,
    /// One deployment, by app and cluster.
    Deployment {
        namespace: String,
        name: String,
    },
    Reservations,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ObjectsQuery {
    namespace: String,
    selector: String,
    after: String,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LocksQuery {
    prefix: String,
    after: String,
}

/// 404 or 400 with one line naming what is wrong.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, format!("{}\n", self.1)).into_response()
    }
}

fn bad(what: String) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, what)
}

fn query<T: Default + serde::de::DeserializeOwned>(q: &str) -> Result<T, Refusal> {
    if q.is_empty() {
        return Ok(T::default());
    }
    serde_urlencoded::from_str(q).map_err(|e| bad(format!("query: {e}")))
}

fn segment(field: &str, s: &str) -> Result<String, Refusal> {
    if s.is_empty() || s.chars().count() > SEGMENT_CHARS_MAX {
        return Err(bad(format!(
            "{field}: must be 1 to {SEGMENT_CHARS_MAX} characters"
        )));
    }
    Ok(s.to_string())
}

fn within(field: &str, s: String) -> Result<String, Refusal> {
    match s.chars().count() > SEGMENT_CHARS_MAX * 2 {
        true => Err(bad(format!(
            "{field}: at most {} characters",
            SEGMENT_CHARS_MAX * 2
        ))),
        false => Ok(s),
    }
}

impl View {
    /// The view at `path` with `query` (URL-encoded), or why there is none.
    pub fn parse(path: &str, query_str: &str) -> Result<View, Refusal> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| bad(format!("path: {s:?} is not valid UTF-8")))
        };
        let no_query = |view: View| match query_str.is_empty() {
            true => Ok(view),
            false => Err(bad(format!("{}: takes no query", view.title()))),
        };
        match parts.as_slice() {
            ["cluster"] => no_query(View::Cluster),
            ["resources"] => no_query(View::Kinds),
            ["resources", kind] => {
                let q: ObjectsQuery = query(query_str)?;
                if !q.selector.is_empty() {
                    Selector::parse(&q.selector).map_err(|r| bad(format!("selector: {r}")))?;
                }
                Ok(View::Objects {
                    kind: segment("kind", &decode(kind)?)?,
                    namespace: within("namespace", q.namespace)?,
                    selector: within("selector", q.selector)?,
                    after: within("after", q.after)?,
                })
            }
            ["resources", kind, namespace, name] => no_query(View::Object {
                kind: segment("kind", &decode(kind)?)?,
                namespace: segment("namespace", &decode(namespace)?)?,
                name: segment("name", &decode(name)?)?,
            }),
            ["locks"] => {
                let q: LocksQuery = query(query_str)?;
                Ok(View::Locks {
                    prefix: within("prefix", q.prefix)?,
                    after: within("after", q.after)?,
                })
            }
            ["operations"] => no_query(View::Operations),
            ["pools"] => no_query(View::Pools),
            ["deployments"] => no_query(View::Deployments),
            ["deployments", namespace, name] => no_query(View::Deployment {
                namespace: segment("namespace", &decode(namespace)?)?,
                name: segment("name", &decode(name)?)?,
            }),
            ["reservations"] => no_query(View::Reservations),
            _ => Err(Refusal(
                StatusCode::NOT_FOUND,
                format!(
                    "no console page at {path} (pages: /cluster /resources /locks /operations \
                     /pools /deployments /reservations)"
                ),
            )),
        }
    }

    /// The view's address: the key of its shared renders, and what its stream is opened with.
    pub fn href(&self) -> String {
        let mut href = String::new();
        let enc = |s: &str| percent_encode(s);
        match self {
            View::Cluster => href.push_str("/cluster"),
            View::Kinds => href.push_str("/resources"),
            View::Objects {
                kind,
                namespace,
                selector,
                after,
            } => {
                let _ = write!(href, "/resources/{}", enc(kind));
                let q = [
                    ("namespace", namespace),
                    ("selector", selector),
                    ("after", after),
                ];
                push_query(&mut href, &q);
            }
            View::Object {
                kind,
                namespace,
                name,
            } => {
                let _ = write!(
                    href,
                    "/resources/{}/{}/{}",
                    enc(kind),
                    enc(namespace),
                    enc(name)
                );
            }
            View::Locks { prefix, after } => {
                href.push_str("/locks");
                push_query(&mut href, &[("prefix", prefix), ("after", after)]);
            }
            View::Operations => href.push_str("/operations"),
            View::Pools => href.push_str("/pools"),
            View::Deployments => href.push_str("/deployments"),
            View::Deployment { namespace, name } => {
                let _ = write!(href, "/deployments/{}/{}", enc(namespace), enc(name));
            }
            View::Reservations => href.push_str("/reservations"),
        }
        href
    }

    fn title(&self) -> String {
        match self {
            View::Cluster => "Cluster".to_string(),
            View::Kinds => "Resources".to_string(),
            View::Objects { kind, .. } => format!("Resources: {kind}"),
            View::Object {
                kind,
                namespace,
                name,
            } => format!("{kind} {namespace}/{name}"),
            View::Locks { .. } => "Locks".to_string(),
            View::Operations => "Operations".to_string(),
            View::Pools => "Pools".to_string(),
            View::Deployments => "Deployments".to_string(),
            View::Deployment { namespace, name } => format!("Deployment {namespace}/{name}"),
            View::Reservations => "Reservations".to_string(),
        }
    }

    /// The navigation entry the view belongs to.
    fn section(&self) -> &'static str {
        match self {
            View::Cluster => "/cluster",
            View::Kinds | View::Objects { .. } | View::Object { .. } => "/resources",
            View::Locks { .. } => "/locks",
            View::Operations => "/operations",
            View::Pools => "/pools",
            View::Deployments | View::Deployment { .. } => "/deployments",
            View::Reservations => "/reservations",
        }
    }
}

fn push_query(href: &mut String, pairs: &[(&str, &String)]) {
    let mut first = true;
    for (key, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        href.push(if first { '?' } else { '&' });
        first = false;
        let _ = write!(href, "{key}={}", percent_encode(value));
    }
}

/// `s` with everything but unreserved characters percent-encoded (RFC 3986).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let decoded: Vec<(String, String)> = serde_urlencoded::from_str(&format!("v={s}")).ok()?;
    decoded.into_iter().next().map(|(_, v)| v)
}

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
    console: &Console,
    view: &View,
    scope: &Scope,
    leaders: &[LeaderChange],
) -> Markup {
    let rows = console
        .config
        .page_rows
        .min(console.node.config.limits.list_page_max as usize);
    match view {
        View::Cluster => {
            let status = ClusterService::new(console.node.clone())
                .status(tonic::Request::new(ClusterStatusRequest {}))
                .await;
            let now = console.node.cluster_now();
            match status {
                Ok(reply) => cluster(&reply.into_inner(), leaders, now),
                Err(e) => html! { h1 { "Cluster" } p.error { "status: " (e.message()) } },
            }
        }
        _ => {
            let state = console.node.state();
            match view {
                View::Kinds => kinds(&state, scope),
                View::Objects {
                    kind,
                    namespace,
                    selector,
                    after,
                } => objects(&state, scope, kind, namespace, selector, after, rows),
                View::Object {
                    kind,
                    namespace,
                    name,
                } => object(&state, scope, kind, namespace, name),
                View::Locks { prefix, after } => locks(&state, prefix, after, rows),
                View::Operations => operations(&state, scope, rows),
                View::Pools => pools(&state, rows),
                View::Deployments => deployments(&state, scope, rows),
                View::Deployment { namespace, name } => {
                    deployment(&state, scope, namespace, name, rows)
                }
                View::Reservations => reservations(&state),
                View::Cluster => html! {},
            }
        }
    }
}

/// The time since `then_ms` (cluster ms), counting up in the script.
fn since(then_ms: u64, now_ms: u64) -> Markup {
    html! {
        span.since data-since=(then_ms) { (ago(now_ms, then_ms)) }
    }
}

/// A TTL counting down: the text at render time, and the cluster time it ends at for the script.
fn ttl(until_ms: u64, now_ms: u64) -> Markup {
    html! {
        span.ttl data-until=(until_ms) { (duration(until_ms.saturating_sub(now_ms))) }
    }
}

fn cluster(reply: &ClusterStatusReply, leaders: &[LeaderChange], now: u64) -> Markup {
    let committed = reply
        .nodes
        .iter()
        .map(|n| n.committed_index)
        .max()
        .unwrap_or(0);
    html! {
        h1 { "Cluster" }
        p.summary {
            @match reply.leader_id {
                0 => { strong.bad { "No leader" } " known to this node." }
                id => { "Leader: " strong #leader { "node " (id) } }
            }
            " · " (reply.nodes.len()) " members"
        }
        @if !reply.warnings.is_empty() {
            section aria-labelledby="warnings" {
                h2 #warnings { "Warnings" }
                ul.warnings { @for w in &reply.warnings { li { (w) } } }
            }
        }
        table #members {
            caption { "Members" }
            thead { tr {
                th { "Node" } th { "Role" } th { "Health" } th { "Term" } th { "Applied" }
                th { "Behind commit" } th { "Data / quota" } th { "Disk free" } th { "Client address" }
            } }
            tbody {
                @for n in &reply.nodes {
                    @let down = n.state == "unreachable";
                    @let health = if down { "down" } else if n.serving { "serving" } else { "not-serving" };
                    tr data-node=(n.id) data-state=(n.state) data-health=(health) {
                        td { (n.id) }
                        td { (n.state) @if !n.voter { " (learner)" } }
                        td {
                            @if down { span.bad { "down" } " " span.detail { (n.error) } }
                            @else if n.serving { span.good { "serving" } }
                            @else { span.bad { "not serving" } }
                        }
                        td { @if !down { (n.term) } }
                        td { @if !down { (n.applied_index) } }
                        td { @if !down { (committed.saturating_sub(n.applied_index)) } }
                        td { @if !down { (bytes(n.data_bytes)) " / " (bytes(n.quota_bytes)) } }
                        td { @if !down { (bytes(n.disk_free_bytes)) } }
                        td { (n.client_addr) }
                    }
                }
            }
        }
        @if !reply.alarms.is_empty() {
            table #alarms {
                caption { "Alarms" }
                thead { tr { th { "Node" } th { "Alarm" } th { "Reason" } } }
                tbody { @for a in &reply.alarms { tr { td { (a.node_id) } td { (a.kind) } td { (a.reason) } } } }
            }
        }
        table #leaders {
            caption { "Leader changes seen by this node (newest first)" }
            thead { tr { th { "Term" } th { "Leader" } th { "When" } } }
            tbody {
                @for c in leaders {
                    tr {
                        td { (c.term) }
                        td { @match c.leader { Some(id) => { "node " (id) }, None => { "none" } } }
                        td { (since(now.saturating_sub(c.at.elapsed().as_millis() as u64), now)) " ago" }
                    }
                }
            }
        }
    }
}

/// `n` bytes as KiB, MiB, GiB.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

fn kinds(state: &State, scope: &Scope) -> Markup {
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
fn objects(
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

fn object(state: &State, scope: &Scope, kind: &str, namespace: &str, name: &str) -> Markup {
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

fn locks(state: &State, prefix: &str, after: &str, rows: usize) -> Markup {
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

fn operations(state: &State, scope: &Scope, rows: usize) -> Markup {
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
fn op_state(s: crate::state::OpState) -> String {
    crate::server::operations::state_to_proto(s)
        .as_str_name()
        .trim_start_matches("OPERATION_STATE_")
        .to_ascii_lowercase()
}

fn pools(state: &State, rows: usize) -> Markup {
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

/// Nonzero counts as `name n · name n`.
fn tally_text(counts: &BTreeMap<&'static str, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    match parts.is_empty() {
        true => "none".to_string(),
        false => parts.join(" · "),
    }
}

fn deployments(state: &State, scope: &Scope, rows: usize) -> Markup {
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

fn deployment(state: &State, scope: &Scope, namespace: &str, name: &str, rows: usize) -> Markup {
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

fn reservations(state: &State) -> Markup {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_parses_back_from_its_address() {
        let views = [
            View::Cluster,
            View::Kinds,
            View::Objects {
                kind: "Director".into(),
                namespace: "team a".into(),
                selector: "app=web,tier!=db".into(),
                after: "default/x&y".into(),
            },
            View::Object {
                kind: "Director".into(),
                namespace: "default".into(),
                name: "d/1?".into(),
            },
            View::Locks {
                prefix: "deploy/".into(),
                after: String::new(),
            },
            View::Operations,
            View::Pools,
            View::Deployments,
            View::Deployment {
                namespace: "default".into(),
                name: "dep 1".into(),
            },
            View::Reservations,
        ];
        for view in views {
            let href = view.href();
            let (path, q) = href.split_once('?').unwrap_or((&href, ""));
            match View::parse(path, q) {
                Ok(back) => assert_eq!(back, view, "{href}"),
                Err(r) => panic!("{href}: {}", r.1),
            }
        }
    }

    #[test]
    fn bad_addresses_are_refused_with_the_field() {
        let cases = [
            ("/nope", "", StatusCode::NOT_FOUND, "no console page"),
            ("/cluster", "x=1", StatusCode::BAD_REQUEST, "takes no query"),
            (
                "/resources/Director",
                "selector=a%3D%3D%3Db",
                StatusCode::BAD_REQUEST,
                "selector",
            ),
            (
                "/resources/Director",
                "colour=red",
                StatusCode::BAD_REQUEST,
                "query",
            ),
            (
                "/locks",
                &format!("prefix={}", "p".repeat(600)),
                StatusCode::BAD_REQUEST,
                "prefix",
            ),
        ];
        for (path, q, code, words) in cases {
            match View::parse(path, q) {
                Ok(v) => panic!("{path}?{q}: parsed as {v:?}"),
                Err(Refusal(got, message)) => {
                    assert_eq!(got, code, "{path}?{q}: {message}");
                    assert!(message.contains(words), "{path}?{q}: {message}");
                }
            }
        }
    }
}
