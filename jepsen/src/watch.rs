//! The watch workload: watchers that start from the same revision must see the same events in
//! the same order, with no gap and no duplicate, also across resumes — after a failure (from the
//! highest revision seen + 1) and on purpose (from the last BOOKMARK + 1).
//!
//! Writers (the client processes that are not watchers, each bound to one node) create, update
//! and delete objects of kind `WatchItem` named from a small pool, so every kind of event happens.
//! Each write carries a unique `spec.op`, so an ADDED or MODIFIED event names the write that made
//! it, and an acknowledged write records the revision the server returned (the object's
//! resourceVersion; a deleted object comes back stamped with the deletion's revision).
//!
//! Before the writers start, a linearizable list gives revision R. `WATCHERS` watchers start on
//! different nodes from R + 1 with a BOOKMARK every `BOOKMARK_INTERVAL_MS`. A watcher records
//! every stream it opens (node, start revision, why) and everything the stream delivers. A stream
//! that fails, or stays silent for `STALL` (a paused node sends nothing, not even bookmarks), is
//! resumed on the next node from the highest revision seen (event or bookmark) + 1. Every
//! `RESUME_EVERY_MS` or so a watcher drops its stream on purpose and resumes on the next node from
//! its last bookmark + 1, which may re-deliver events it has seen: those must be the same events.
//! Watchers move between nodes on every resume, so a resume usually lands on a node that is
//! ahead of or behind the one it left. After the run and the heal, the final revision is read
//! linearizably and each watcher runs until it has covered it (bounded by `CATCH_UP`).
//!
//! `check` is pure. A stream from S that delivered revision H (an event, or a bookmark: "every
//! event up to H has been sent") covers S..=H, and must have delivered every event in that range
//! in strictly increasing revision order. The events known to exist are those of acknowledged
//! writes and those any watcher saw. No transactions are used, so a revision carries at most one
//! `WatchItem` event. INVALID: a duplicate, a reorder, an event before the stream's start, a gap
//! (a known event missing from a stream that covered its revision — this also catches an
//! acknowledged write nobody saw, and a resume from a bookmark that skipped something), two
//! observations of one revision that differ (two watchers, or a watcher and the acknowledged
//! write), an event no attempted write explains, or an event whose object carries another
//! revision. UNKNOWN: a watcher that never covered the final revision, or a resume the server
//! refused with OutOfRange (history compacted): what was not watched cannot be judged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use steward::client::{
    is_retryable_read, Client, EventType, WatchEvent, WatchOptions, WatchStream,
};
use tonic::Code;

use crate::finding::{self, write_jsonl, Finding};
use crate::history::Outcome;
use crate::outcome::classify;
use crate::rng::Rng;

pub const KIND: &str = "WatchItem";
/// Watchers per run; the other client processes write.
pub const WATCHERS: u64 = 3;
/// Asked of the server for every stream: often enough that bookmark resumes are the usual case.
pub const BOOKMARK_INTERVAL_MS: u32 = 200;
/// Deadline for setting up one stream (a paused node never answers).
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(2);
/// A stream that delivers nothing for this long (ten bookmark intervals) is treated as dead.
const STALL: Duration = Duration::from_secs(2);
/// A watcher drops its stream on purpose after a time drawn from this range.
const RESUME_EVERY_MS: (u64, u64) = (2_000, 4_000);
/// Once the final revision is known, how long a watcher gets to reach it.
pub const CATCH_UP: Duration = Duration::from_secs(30);
/// Pause before the next attempt after a stream could not be set up.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Names the writers share, so creates, updates and deletes meet.
const NAMES: u64 = 8;
/// Anomalies listed in the report (all are counted).
const ANOMALIES_SHOWN: usize = 20;
/// `target` before the final revision is known.
pub const NO_TARGET: u64 = u64::MAX;

// ---- what the clients saw ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteKind {
    Create,
    Update,
    Delete,
}

impl WriteKind {
    /// The event an applied write of this kind makes.
    fn event(self) -> SeenType {
        match self {
            WriteKind::Create => SeenType::Added,
            WriteKind::Update => SeenType::Modified,
            WriteKind::Delete => SeenType::Deleted,
        }
    }
}

/// One write, recorded when it completed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOp {
    pub process: u64,
    pub kind: WriteKind,
    pub name: String,
    /// Unique per write; create and update store it as `spec.op`.
    pub op: String,
    pub outcome: Outcome,
    /// Ok: the revision the server returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SeenType {
    Added,
    Modified,
    Deleted,
    Bookmark,
}

/// One item a stream delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// When it arrived, ns since the run started.
    pub at_ns: u64,
    #[serde(rename = "type")]
    pub kind: SeenType,
    pub revision: u64,
    /// The object's name and `spec.op`; empty for a bookmark (and `op` for an object without one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub op: String,
    /// The object's resourceVersion, which must be the event's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_revision: Option<u64>,
}

/// Why a watcher opened a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Opened {
    /// The first stream, from R + 1.
    Initial,
    /// The previous stream failed or stalled: from the highest revision seen + 1.
    Failure,
    /// The previous stream was dropped on purpose: from the last bookmark + 1.
    Bookmark,
}

/// One stream of one watcher, from set-up to its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// The node (cluster id) that served it.
    pub node: u64,
    /// Inclusive.
    pub start_revision: u64,
    pub why: Opened,
    pub opened_ns: u64,
    pub closed_ns: u64,
    /// How it ended (an error, a stall, dropped on purpose, or done).
    pub end: String,
    pub seen: Vec<Seen>,
}

/// A resume the server refused with OutOfRange.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub node: u64,
    pub start_revision: u64,
    pub at_ns: u64,
    pub message: String,
}

/// Everything one watcher did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatcherLog {
    pub id: u64,
    pub streams: Vec<Stream>,
    pub refusals: Vec<Refusal>,
    /// Streams that could not be set up for another reason (node down, paused, ...).
    pub setup_failures: u64,
}

/// None for an event with no type, which steward.proto says is never sent (the client already
/// refuses it).
fn seen_of(ev: &WatchEvent, at_ns: u64) -> Option<Seen> {
    let kind = match ev.event_type {
        EventType::Added => SeenType::Added,
        EventType::Modified => SeenType::Modified,
        EventType::Deleted => SeenType::Deleted,
        EventType::Bookmark => SeenType::Bookmark,
        EventType::Unspecified => return None,
    };
    let field = |f: fn(&Value) -> &Value| {
        ev.object
            .as_ref()
            .and_then(|o| f(o).as_str())
            .unwrap_or_default()
            .to_string()
    };
    Some(Seen {
        at_ns,
        kind,
        revision: ev.revision,
        name: field(|o| &o["metadata"]["name"]),
        op: field(|o| &o["spec"]["op"]),
        object_revision: ev.object.as_ref().and_then(resource_version),
    })
}

fn resource_version(obj: &Value) -> Option<u64> {
    obj["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

// ---- the clients ----

/// The linearizable list before the writers start: the revision R the watchers start after.
pub async fn init(client: &Client) -> anyhow::Result<u64> {
    let page = client
        .list_all(KIND, "", "")
        .await
        .map_err(|e| anyhow::anyhow!("listing {KIND}: {e}"))?;
    anyhow::ensure!(
        page.items.is_empty(),
        "a fresh cluster holds {KIND} objects"
    );
    Ok(page.revision)
}

fn item(name: &str, op: &str) -> Value {
    json!({"kind": KIND, "apiVersion": "jepsen/v1", "metadata": {"name": name}, "spec": {"op": op}})
}

/// One writer: creates, updates and deletes over the pool of names until `stop`.
pub async fn writer(
    id: u64,
    client: Client,
    seed: u64,
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<WriteOp>>>,
) {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(id));
    // What this writer last learned about each name; others change it behind its back.
    let mut exists = [false; NAMES as usize];
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let k = rng.below(NAMES) as usize;
        let name = format!("w{k}");
        let op = format!("p{id}-{n}");
        let kind = match (exists[k], rng.below(10)) {
            (false, _) => WriteKind::Create,
            (true, 0..=6) => WriteKind::Update,
            (true, _) => WriteKind::Delete,
        };
        let invoke_ns = start.elapsed().as_nanos() as u64;
        let result = match kind {
            WriteKind::Create => client.create(&item(&name, &op)).await,
            WriteKind::Update => client.update(&item(&name, &op), 0).await,
            WriteKind::Delete => client.delete(KIND, "default", &name, 0).await,
        };
        let mut w = WriteOp {
            process: id,
            kind,
            name,
            op,
            outcome: Outcome::Ok,
            revision: None,
            invoke_ns,
            complete_ns: start.elapsed().as_nanos() as u64,
            error: String::new(),
        };
        match result {
            Ok(obj) => {
                w.revision = resource_version(&obj);
                exists[k] = kind != WriteKind::Delete;
                if w.revision.is_none() {
                    w.outcome = Outcome::Unknown;
                    w.error = "acknowledged without a resourceVersion".into();
                }
            }
            Err(e) => {
                w.outcome = classify(&e);
                w.error = format!("{:?}: {}", e.code(), e.message());
                match e.code() {
                    Code::NotFound => exists[k] = false,
                    Code::AlreadyExists => exists[k] = true,
                    _ => {}
                }
            }
        }
        let failed = w.outcome != Outcome::Ok;
        out.lock().unwrap_or_else(|p| p.into_inner()).push(w);
        if failed {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// What a watcher needs.
pub struct WatcherSetup {
    pub id: u64,
    /// A client of every node, in `node_ids` order (its own connections); each stream is pinned
    /// to one node, so the watcher, not the client, decides where it resumes.
    pub client: Client,
    pub node_ids: Vec<u64>,
    /// R + 1.
    pub from_revision: u64,
    pub seed: u64,
    pub start: Instant,
    /// `NO_TARGET` while the workload runs; then the final revision to reach.
    pub target: Arc<AtomicU64>,
}

/// Where a watcher stands across its streams.
struct Progress {
    /// The highest revision seen, event or bookmark: every event up to it has been delivered.
    covered: u64,
    last_bookmark: Option<u64>,
    /// Set when the target becomes known.
    deadline: Option<Instant>,
}

impl Progress {
    /// True once the watcher reached the final revision, or ran out of time to.
    fn finished(&mut self, target: &AtomicU64) -> bool {
        let t = target.load(Ordering::Relaxed);
        if t == NO_TARGET {
            return false;
        }
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + CATCH_UP);
        self.covered >= t || Instant::now() >= deadline
    }
}

/// One watcher: streams from `from_revision`, resumed across nodes, until it has covered the
/// target (or `CATCH_UP` has passed since the target was set).
pub async fn watcher(setup: WatcherSetup) -> WatcherLog {
    let WatcherSetup {
        id,
        client,
        node_ids,
        from_revision,
        seed,
        start,
        target,
    } = setup;
    let ns = || start.elapsed().as_nanos() as u64;
    let nodes = node_ids.len();
    let mut rng = Rng::new(seed.wrapping_mul(7_919).wrapping_add(id));
    let mut log = WatcherLog {
        id,
        ..WatcherLog::default()
    };
    let mut progress = Progress {
        covered: from_revision.saturating_sub(1),
        last_bookmark: None,
        deadline: None,
    };
    let mut node = id as usize % nodes;
    let (mut why, mut resume_at) = (Opened::Initial, from_revision);
    let mut refused_in_a_row = 0;
    while !progress.finished(&target) {
        let pinned = client
            .with_endpoint_index(node)
            .unwrap_or_else(|| client.clone());
        let opts = WatchOptions {
            start_revision: resume_at,
            bookmark_interval_ms: BOOKMARK_INTERVAL_MS,
            ..WatchOptions::default()
        };
        let stream = match pinned.watch_with(KIND, &opts).await {
            Ok(stream) => stream,
            Err(e) => {
                if e.code() == Code::OutOfRange {
                    log.refusals.push(Refusal {
                        node: node_ids[node],
                        start_revision: resume_at,
                        at_ns: ns(),
                        message: e.message().to_string(),
                    });
                    refused_in_a_row += 1;
                    if refused_in_a_row >= nodes {
                        break; // no node has the history: the rest cannot be watched
                    }
                } else {
                    log.setup_failures += 1;
                }
                node = (node + 1) % nodes;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        refused_in_a_row = 0;
        let mut s = Stream {
            node: node_ids[node],
            start_revision: resume_at,
            why,
            opened_ns: ns(),
            closed_ns: 0,
            end: String::new(),
            seen: vec![],
        };
        let (lo, hi) = RESUME_EVERY_MS;
        let drop_at = Instant::now() + Duration::from_millis(lo + rng.below(hi - lo));
        let (next, end) = follow(stream, &mut s, &mut progress, drop_at, &target, start).await;
        s.end = end;
        s.closed_ns = ns();
        log.streams.push(s);
        why = next;
        resume_at = match (next, progress.last_bookmark) {
            (Opened::Bookmark, Some(b)) => b + 1,
            _ => progress.covered + 1,
        };
        node = (node + 1) % nodes;
    }
    log
}

/// Reads one stream into `s` until it fails, stalls, is due to be dropped, or the watcher is
/// done. Returns why the next stream opens, and how this one ended.
async fn follow(
    mut stream: WatchStream,
    s: &mut Stream,
    p: &mut Progress,
    drop_at: Instant,
    target: &AtomicU64,
    start: Instant,
) -> (Opened, String) {
    let mut progressed_at = Instant::now();
    loop {
        if p.finished(target) {
            return (Opened::Failure, "done".into());
        }
        let now = Instant::now();
        if now >= drop_at {
            return (Opened::Bookmark, "dropped on purpose".into());
        }
        // After the heal a node may stay behind (restarting, catching up) while it sends
        // bookmarks: move on rather than wait for it.
        if target.load(Ordering::Relaxed) != NO_TARGET && now - progressed_at >= STALL {
            return (
                Opened::Failure,
                format!("no progress for {STALL:?} after the heal"),
            );
        }
        let wake = (now + STALL).min(drop_at);
        match tokio::time::timeout_at(wake.into(), stream.next()).await {
            Err(_) if Instant::now() >= drop_at => continue,
            Err(_) => return (Opened::Failure, format!("nothing for {STALL:?}")),
            Ok(None) => return (Opened::Failure, "the stream ended".into()),
            Ok(Some(Err(e))) => {
                // Whether steward's own rule (the CLI's) would resume after this error.
                let retry = if is_retryable_read(&e) {
                    "retryable"
                } else {
                    "not retryable"
                };
                return (
                    Opened::Failure,
                    format!("{:?} ({retry}): {}", e.code(), e.message()),
                );
            }
            Ok(Some(Ok(ev))) => {
                let Some(seen) = seen_of(&ev, start.elapsed().as_nanos() as u64) else {
                    return (Opened::Failure, "an event with no type".into());
                };
                if seen.revision > p.covered {
                    p.covered = seen.revision;
                    progressed_at = Instant::now();
                }
                if seen.kind == SeenType::Bookmark {
                    p.last_bookmark = Some(seen.revision);
                }
                s.seen.push(seen);
            }
        }
    }
}

/// The final linearizable read after the heal, retried until the cluster answers: the revision
/// every watcher must reach.
pub async fn final_revision(client: &Client) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.list_all(KIND, "", "").await {
            Ok(page) => return Ok(page.revision),
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "final read failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => anyhow::bail!("final read: {e}"),
        }
    }
}

/// Tells the watchers the final revision and collects their logs (each stops by itself within
/// `CATCH_UP`).
pub async fn finish(
    final_revision: u64,
    target: &AtomicU64,
    watchers: Vec<tokio::task::JoinHandle<WatcherLog>>,
) -> anyhow::Result<Vec<WatcherLog>> {
    target.store(final_revision, Ordering::Relaxed);
    let mut logs = Vec::with_capacity(watchers.len());
    for w in watchers {
        logs.push(w.await?);
    }
    Ok(logs)
}

/// The history file's lines: every write, then per watcher its refusals, and per stream one
/// line for the stream and one per item it delivered.
pub fn records(writes: &[WriteOp], watchers: &[WatcherLog]) -> Vec<Value> {
    let mut out: Vec<Value> = writes
        .iter()
        .map(|w| json!({"record": "write", "write": w}))
        .collect();
    for w in watchers {
        for r in &w.refusals {
            out.push(json!({"record": "refusal", "watcher": w.id, "refusal": r}));
        }
        for (i, s) in w.streams.iter().enumerate() {
            out.push(json!({
                "record": "stream", "watcher": w.id, "stream": i, "node": s.node,
                "start_revision": s.start_revision, "why": s.why, "opened_ns": s.opened_ns,
                "closed_ns": s.closed_ns, "end": s.end, "items": s.seen.len(),
            }));
            for seen in &s.seen {
                out.push(json!({"record": "seen", "watcher": w.id, "stream": i, "seen": seen}));
            }
        }
    }
    out
}

// ---- the check ----

/// Writes every write and what each watcher saw to `history_file`, and checks that each
/// watcher saw exactly the acknowledged writes between `from_revision` and `final_revision`, in
/// order, once each.
pub fn finding(
    from_revision: u64,
    final_revision: u64,
    writes: &[WriteOp],
    logs: &[WatcherLog],
    history_file: &std::path::Path,
) -> anyhow::Result<Finding> {
    write_jsonl(history_file, &records(writes, logs))?;
    let report = check(from_revision, final_revision, writes, logs);
    let (word, code) = finding::verdict(report.valid(), report.invalid());
    let sum = |f: fn(&WatcherSummary) -> usize| report.watchers.iter().map(f).sum::<usize>();
    Ok(Finding {
        summary: format!(
            "watch: {} writes ({} ok, {} failed, {} unknown), {} watchers over revisions {}..={}, {} events, {} streams ({} resumed after a failure, {} from a bookmark), anomalies {}: {word}",
            writes.len(),
            report.writes_acknowledged,
            report.writes_failed,
            report.writes_unknown,
            report.watchers.len(),
            report.from_revision,
            report.final_revision,
            report.revisions_seen,
            sum(|w| w.streams),
            sum(|w| w.resumed_after_failure),
            sum(|w| w.resumed_from_bookmark),
            report.anomaly_count
        ),
        report: serde_json::to_string_pretty(&report)?,
        code,
        points: finding::points(writes, |w| (w.invoke_ns, w.complete_ns, w.outcome)),
    })
}

mod check;
pub use check::*;
