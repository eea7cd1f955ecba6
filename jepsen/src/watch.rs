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

fn seen_of(ev: &WatchEvent, at_ns: u64) -> Seen {
    let kind = match ev.event_type {
        EventType::Added => SeenType::Added,
        EventType::Modified => SeenType::Modified,
        EventType::Deleted => SeenType::Deleted,
        EventType::Bookmark => SeenType::Bookmark,
    };
    let field = |f: fn(&Value) -> &Value| {
        ev.object
            .as_ref()
            .and_then(|o| f(o).as_str())
            .unwrap_or_default()
            .to_string()
    };
    Seen {
        at_ns,
        kind,
        revision: ev.revision,
        name: field(|o| &o["metadata"]["name"]),
        op: field(|o| &o["spec"]["op"]),
        object_revision: ev.object.as_ref().and_then(resource_version),
    }
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
                let seen = seen_of(&ev, start.elapsed().as_nanos() as u64);
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

/// What an event says, for comparing two observations of one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventDesc {
    #[serde(rename = "type")]
    pub kind: SeenType,
    pub name: String,
    /// The write that made it. None for an acknowledged delete: the deleted object carries the
    /// op of the write before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

impl EventDesc {
    fn of_seen(s: &Seen) -> EventDesc {
        EventDesc {
            kind: s.kind,
            name: s.name.clone(),
            op: Some(s.op.clone()),
        }
    }

    fn of_write(w: &WriteOp) -> EventDesc {
        EventDesc {
            kind: w.kind.event(),
            name: w.name.clone(),
            op: (w.kind != WriteKind::Delete).then(|| w.op.clone()),
        }
    }

    fn agrees(&self, other: &EventDesc) -> bool {
        self.kind == other.kind
            && self.name == other.name
            && (self.op.is_none() || other.op.is_none() || self.op == other.op)
    }
}

/// Where the check learned of an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "lowercase")]
pub enum Source {
    /// An acknowledged write.
    Write {
        op: String,
    },
    Watcher {
        watcher: u64,
        stream: usize,
    },
}

/// One thing that must not happen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "anomaly", rename_all = "snake_case")]
pub enum Anomaly {
    /// A stream delivered a revision twice.
    Duplicate {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
    },
    /// A stream delivered an event not above everything it delivered before it (events, and
    /// bookmarks, which claim every event up to them was sent).
    Reorder {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
        after: u64,
    },
    BeforeStart {
        watcher: u64,
        stream: usize,
        node: u64,
        revision: u64,
        start_revision: u64,
    },
    /// A stream covered `revision` (delivered an event or bookmark at or past it) without
    /// delivering the event known to be there.
    Gap {
        watcher: u64,
        stream: usize,
        node: u64,
        start_revision: u64,
        covered_to: u64,
        revision: u64,
        missing: EventDesc,
        known_from: Source,
    },
    /// Two observations of one revision differ.
    Disagreement {
        revision: u64,
        first: EventDesc,
        first_from: Source,
        second: EventDesc,
        second_from: Source,
    },
    /// An event that no attempted write explains.
    Phantom {
        watcher: u64,
        stream: usize,
        revision: u64,
        event: EventDesc,
        why: String,
    },
    /// An event whose object's resourceVersion is not the event's revision.
    ObjectRevision {
        watcher: u64,
        stream: usize,
        revision: u64,
        object_revision: Option<u64>,
    },
    /// Two acknowledged writes were given the same revision.
    RevisionReused { revision: u64, ops: Vec<String> },
}

/// One watcher, in numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatcherSummary {
    pub id: u64,
    pub streams: usize,
    pub resumed_after_failure: usize,
    pub resumed_from_bookmark: usize,
    pub refused_resumes: usize,
    pub setup_failures: u64,
    pub events: usize,
    pub bookmarks: usize,
    /// Events delivered again after a resume from a bookmark older than the last event seen.
    pub redelivered: usize,
    /// Bookmarks below their stream's start revision − 1 (a node behind the revision the
    /// stream started at reports its own, lower revision). Allowed, but a client that resumes
    /// from the last revision it was sent would go backwards.
    pub bookmarks_below_start: usize,
    /// The highest revision up to which the watcher saw every event.
    pub covered_to: u64,
}

#[derive(Debug, Serialize)]
pub struct WatchReport {
    /// R + 1, where every watcher started.
    pub from_revision: u64,
    /// The linearizable list's revision after the heal.
    pub final_revision: u64,
    pub writes_acknowledged: usize,
    pub writes_failed: usize,
    pub writes_unknown: usize,
    /// Distinct revisions any watcher delivered an event for.
    pub revisions_seen: usize,
    pub watchers: Vec<WatcherSummary>,
    pub anomaly_count: usize,
    /// The first `ANOMALIES_SHOWN`.
    pub anomalies: Vec<Anomaly>,
    /// Why the verdict cannot be VALID even without anomalies.
    pub unknown: Vec<String>,
}

impl WatchReport {
    pub fn valid(&self) -> bool {
        self.anomaly_count == 0 && self.unknown.is_empty()
    }

    pub fn invalid(&self) -> bool {
        self.anomaly_count > 0
    }
}

/// The events known to exist, by revision, and where each was first learned.
type Known = BTreeMap<u64, (EventDesc, Source)>;

/// Checks the watchers' logs against each other and against the writes (see the module docs).
pub fn check(
    from_revision: u64,
    final_revision: u64,
    writes: &[WriteOp],
    watchers: &[WatcherLog],
) -> WatchReport {
    let mut anomalies = vec![];
    let known = known_events(writes, watchers, &mut anomalies);
    let mut summaries = vec![];
    let mut unknown = vec![];
    for w in watchers {
        summaries.push(check_watcher(w, from_revision, &known, &mut anomalies));
        for r in &w.refusals {
            unknown.push(format!(
                "watcher {}: node {} refused a resume from revision {} with OutOfRange ({})",
                w.id, r.node, r.start_revision, r.message
            ));
        }
    }
    for s in &summaries {
        if s.covered_to < final_revision {
            unknown.push(format!(
                "watcher {} saw every event only up to revision {}, not to the final {final_revision}",
                s.id, s.covered_to
            ));
        }
    }
    let count = |o: Outcome| writes.iter().filter(|w| w.outcome == o).count();
    let anomaly_count = anomalies.len();
    anomalies.truncate(ANOMALIES_SHOWN);
    WatchReport {
        from_revision,
        final_revision,
        writes_acknowledged: count(Outcome::Ok),
        writes_failed: count(Outcome::Fail),
        writes_unknown: count(Outcome::Unknown),
        revisions_seen: revisions_seen(watchers),
        watchers: summaries,
        anomaly_count,
        anomalies,
        unknown,
    }
}

/// Distinct revisions any watcher delivered an event for.
fn revisions_seen(watchers: &[WatcherLog]) -> usize {
    watchers
        .iter()
        .flat_map(|w| &w.streams)
        .flat_map(|s| &s.seen)
        .filter(|s| s.kind != SeenType::Bookmark)
        .map(|s| s.revision)
        .collect::<BTreeSet<u64>>()
        .len()
}

/// Every event known to exist: acknowledged writes first, then every watcher's observations.
/// Flags revisions given to two writes, observations that disagree with what is known, and
/// events no write explains.
fn known_events(
    writes: &[WriteOp],
    watchers: &[WatcherLog],
    anomalies: &mut Vec<Anomaly>,
) -> Known {
    let mut known = Known::new();
    for w in writes.iter().filter(|w| w.outcome == Outcome::Ok) {
        let Some(rev) = w.revision else { continue };
        match known.get(&rev) {
            Some((_, Source::Write { op })) => anomalies.push(Anomaly::RevisionReused {
                revision: rev,
                ops: vec![op.clone(), w.op.clone()],
            }),
            _ => {
                known.insert(
                    rev,
                    (EventDesc::of_write(w), Source::Write { op: w.op.clone() }),
                );
            }
        }
    }
    let by_op: HashMap<&str, &WriteOp> = writes.iter().map(|w| (w.op.as_str(), w)).collect();
    for w in watchers {
        for (i, s) in w.streams.iter().enumerate() {
            for seen in s.seen.iter().filter(|s| s.kind != SeenType::Bookmark) {
                let desc = EventDesc::of_seen(seen);
                let here = Source::Watcher {
                    watcher: w.id,
                    stream: i,
                };
                if seen.object_revision != Some(seen.revision) {
                    anomalies.push(Anomaly::ObjectRevision {
                        watcher: w.id,
                        stream: i,
                        revision: seen.revision,
                        object_revision: seen.object_revision,
                    });
                }
                match known.get(&seen.revision) {
                    Some((first, first_from)) => {
                        if !first.agrees(&desc) {
                            anomalies.push(Anomaly::Disagreement {
                                revision: seen.revision,
                                first: first.clone(),
                                first_from: first_from.clone(),
                                second: desc,
                                second_from: here,
                            });
                        }
                    }
                    None => {
                        if let Some(why) = unexplained(&desc, seen.revision, &by_op, writes) {
                            anomalies.push(Anomaly::Phantom {
                                watcher: w.id,
                                stream: i,
                                revision: seen.revision,
                                event: desc.clone(),
                                why,
                            });
                        }
                        known.insert(seen.revision, (desc, here));
                    }
                }
            }
        }
    }
    known
}

/// Why no attempted write can have made this event at this revision (None: one can). Only
/// called for revisions no acknowledged write has.
fn unexplained(
    desc: &EventDesc,
    revision: u64,
    by_op: &HashMap<&str, &WriteOp>,
    writes: &[WriteOp],
) -> Option<String> {
    if desc.kind == SeenType::Deleted {
        let possible = writes.iter().any(|w| {
            w.kind == WriteKind::Delete
                && w.name == desc.name
                && (w.outcome == Outcome::Unknown
                    || (w.outcome == Outcome::Ok && w.revision == Some(revision)))
        });
        return (!possible).then(|| format!("no delete of {} with an unknown outcome", desc.name));
    }
    let op = desc.op.as_deref().unwrap_or_default();
    let Some(w) = by_op.get(op) else {
        return Some(format!("no write has op {op:?}"));
    };
    if w.kind.event() != desc.kind || w.name != desc.name {
        return Some(format!("write {op} was a {:?} of {}", w.kind, w.name));
    }
    match w.outcome {
        Outcome::Fail => Some(format!("write {op} was refused ({})", w.error)),
        Outcome::Ok => Some(format!(
            "write {op} was acknowledged at revision {:?}",
            w.revision
        )),
        Outcome::Unknown => None,
    }
}

/// One watcher: order within each stream, gaps within what each stream covered, and how far
/// its streams together reached.
fn check_watcher(
    w: &WatcherLog,
    from_revision: u64,
    known: &Known,
    anomalies: &mut Vec<Anomaly>,
) -> WatcherSummary {
    let mut sum = WatcherSummary {
        id: w.id,
        streams: w.streams.len(),
        refused_resumes: w.refusals.len(),
        setup_failures: w.setup_failures,
        ..WatcherSummary::default()
    };
    // Every event up to `covered` has been seen by this watcher.
    let mut covered = from_revision.saturating_sub(1);
    for (i, s) in w.streams.iter().enumerate() {
        match s.why {
            Opened::Initial => {}
            Opened::Failure => sum.resumed_after_failure += 1,
            Opened::Bookmark => sum.resumed_from_bookmark += 1,
        }
        let (revs, covered_to) = check_stream(w.id, i, s, anomalies, &mut sum);
        // A stream that delivered nothing at or past its start covers nothing.
        let covers = if covered_to >= s.start_revision {
            known.range(s.start_revision..=covered_to)
        } else {
            known.range(0..0)
        };
        for (&rev, (desc, from)) in covers {
            if !revs.contains(&rev) {
                anomalies.push(Anomaly::Gap {
                    watcher: w.id,
                    stream: i,
                    node: s.node,
                    start_revision: s.start_revision,
                    covered_to,
                    revision: rev,
                    missing: desc.clone(),
                    known_from: from.clone(),
                });
            }
        }
        sum.redelivered += revs.range(..=covered).count();
        // A stream that starts past `covered + 1` would leave revisions unwatched; the watcher
        // never does that, and then `covered` simply stops growing (UNKNOWN if short of final).
        if s.start_revision <= covered + 1 {
            covered = covered.max(covered_to);
        }
    }
    sum.covered_to = covered;
    sum
}

/// Order within one stream. Returns the revisions of its events and the revision it covered to.
fn check_stream(
    watcher: u64,
    stream: usize,
    s: &Stream,
    anomalies: &mut Vec<Anomaly>,
    sum: &mut WatcherSummary,
) -> (BTreeSet<u64>, u64) {
    let mut revs = BTreeSet::new();
    let mut top = s.start_revision.saturating_sub(1);
    for seen in &s.seen {
        let rev = seen.revision;
        if seen.kind == SeenType::Bookmark {
            sum.bookmarks += 1;
            if rev < s.start_revision.saturating_sub(1) {
                sum.bookmarks_below_start += 1;
            }
            top = top.max(rev);
            continue;
        }
        sum.events += 1;
        let node = s.node;
        if rev < s.start_revision {
            anomalies.push(Anomaly::BeforeStart {
                watcher,
                stream,
                node,
                revision: rev,
                start_revision: s.start_revision,
            });
        } else if revs.contains(&rev) {
            anomalies.push(Anomaly::Duplicate {
                watcher,
                stream,
                node,
                revision: rev,
            });
        } else if rev <= top {
            anomalies.push(Anomaly::Reorder {
                watcher,
                stream,
                node,
                revision: rev,
                after: top,
            });
        }
        revs.insert(rev);
        top = top.max(rev);
    }
    (revs, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(
        kind: WriteKind,
        name: &str,
        op: &str,
        revision: Option<u64>,
        outcome: Outcome,
    ) -> WriteOp {
        WriteOp {
            process: 9,
            kind,
            name: name.into(),
            op: op.into(),
            outcome,
            revision,
            invoke_ns: 0,
            complete_ns: 1,
            error: String::new(),
        }
    }

    /// Revisions 10..=14: create a, update a, create b, delete a (acknowledged), update b (unknown).
    fn writes() -> Vec<WriteOp> {
        use WriteKind::*;
        vec![
            write(Create, "a", "o1", Some(10), Outcome::Ok),
            write(Update, "a", "o2", Some(11), Outcome::Ok),
            write(Create, "b", "o3", Some(12), Outcome::Ok),
            write(Delete, "a", "o4", Some(13), Outcome::Ok),
            write(Update, "b", "o5", None, Outcome::Unknown),
            write(Create, "c", "o6", None, Outcome::Fail),
        ]
    }

    fn ev(kind: SeenType, revision: u64, name: &str, op: &str) -> Seen {
        Seen {
            at_ns: 0,
            kind,
            revision,
            name: name.into(),
            op: op.into(),
            object_revision: Some(revision),
        }
    }

    fn bookmark(revision: u64) -> Seen {
        Seen {
            at_ns: 0,
            kind: SeenType::Bookmark,
            revision,
            name: String::new(),
            op: String::new(),
            object_revision: None,
        }
    }

    /// Everything at 10..=14, in order.
    fn all_events() -> Vec<Seen> {
        use SeenType::*;
        vec![
            ev(Added, 10, "a", "o1"),
            ev(Modified, 11, "a", "o2"),
            ev(Added, 12, "b", "o3"),
            ev(Deleted, 13, "a", "o2"),
            ev(Modified, 14, "b", "o5"),
        ]
    }

    fn stream(start_revision: u64, why: Opened, seen: Vec<Seen>) -> Stream {
        Stream {
            node: 1,
            start_revision,
            why,
            opened_ns: 0,
            closed_ns: 1,
            end: String::new(),
            seen,
        }
    }

    fn watcher(id: u64, streams: Vec<Stream>) -> WatcherLog {
        WatcherLog {
            id,
            streams,
            ..WatcherLog::default()
        }
    }

    fn clean() -> Vec<WatcherLog> {
        let mut first = all_events()[..2].to_vec();
        first.push(bookmark(11));
        let mut resumed = all_events()[2..].to_vec();
        resumed.push(bookmark(15));
        vec![
            watcher(0, vec![stream(10, Opened::Initial, all_events())]),
            // Dropped after a bookmark at 11, resumed from 12.
            watcher(
                1,
                vec![
                    stream(10, Opened::Initial, first),
                    stream(12, Opened::Bookmark, resumed),
                ],
            ),
            // Resumed from an older bookmark: 11 comes again, identical.
            watcher(
                2,
                vec![
                    stream(10, Opened::Initial, {
                        let mut v = all_events()[..3].to_vec();
                        v.insert(1, bookmark(10));
                        v
                    }),
                    stream(11, Opened::Bookmark, all_events()[1..].to_vec()),
                ],
            ),
        ]
    }

    fn kinds(r: &WatchReport) -> Vec<&'static str> {
        r.anomalies
            .iter()
            .map(|a| match a {
                Anomaly::Duplicate { .. } => "duplicate",
                Anomaly::Reorder { .. } => "reorder",
                Anomaly::BeforeStart { .. } => "before_start",
                Anomaly::Gap { .. } => "gap",
                Anomaly::Disagreement { .. } => "disagreement",
                Anomaly::Phantom { .. } => "phantom",
                Anomaly::ObjectRevision { .. } => "object_revision",
                Anomaly::RevisionReused { .. } => "revision_reused",
            })
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(10, 14, &writes(), &clean());
        assert!(r.valid(), "{r:#?}");
        assert_eq!(r.watchers[1].resumed_from_bookmark, 1);
        assert_eq!(r.watchers[2].redelivered, 2);
        assert_eq!(r.revisions_seen, 5);
    }

    #[test]
    fn a_gap_after_a_bookmark_resume_is_flagged() {
        let mut logs = clean();
        // The resumed stream skips 12, which watcher 0 saw and an acknowledged write made.
        logs[1].streams[1].seen.remove(0);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["gap"], "{r:#?}");
        assert!(matches!(
            &r.anomalies[0],
            Anomaly::Gap {
                watcher: 1,
                stream: 1,
                revision: 12,
                ..
            }
        ));
    }

    #[test]
    fn a_bookmark_that_claims_too_much_is_a_gap() {
        let mut logs = clean();
        // Watcher 0 stops after 10 but is told "everything up to 12 was sent".
        logs[0].streams[0].seen = vec![all_events()[0].clone(), bookmark(12)];
        logs[0]
            .streams
            .push(stream(13, Opened::Bookmark, all_events()[3..].to_vec()));
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["gap", "gap"], "{r:#?}");
    }

    #[test]
    fn a_stream_that_covers_nothing_is_fine() {
        let mut logs = clean();
        // A resume on a node still behind: only bookmarks below the start, or nothing at all.
        let behind = stream(12, Opened::Bookmark, vec![bookmark(9), bookmark(9)]);
        logs[1].streams.insert(1, behind);
        logs[1]
            .streams
            .insert(1, stream(12, Opened::Failure, vec![]));
        let r = check(10, 14, &writes(), &logs);
        assert!(r.valid(), "{r:#?}");
        assert_eq!(r.watchers[1].bookmarks_below_start, 2);
    }

    #[test]
    fn a_duplicate_is_flagged() {
        let mut logs = clean();
        let again = logs[0].streams[0].seen[2].clone();
        logs[0].streams[0].seen.insert(3, again);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["duplicate"], "{r:#?}");
    }

    #[test]
    fn a_reorder_is_flagged() {
        let mut logs = clean();
        logs[0].streams[0].seen.swap(1, 2);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["reorder"], "{r:#?}");
        // An event at or below a bookmark already sent is out of order too.
        let mut logs = clean();
        logs[2].streams[0].seen.swap(0, 1);
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["reorder"], "{r:#?}");
    }

    #[test]
    fn a_disagreement_between_watchers_is_flagged() {
        let mut logs = clean();
        // Watcher 2's resumed stream says 14 was a delete of b; watcher 0 says an update.
        logs[2].streams[1].seen[3] = ev(SeenType::Deleted, 14, "b", "o3");
        let r = check(10, 14, &writes(), &logs);
        assert!(kinds(&r).contains(&"disagreement") && !r.valid(), "{r:#?}");
        // Disagreeing with an acknowledged write at its revision is flagged too.
        let mut logs = clean();
        logs[0].streams[0].seen[1] = ev(SeenType::Modified, 11, "a", "o5");
        let r = check(10, 14, &writes(), &logs);
        assert!(kinds(&r).contains(&"disagreement"), "{r:#?}");
    }

    #[test]
    fn a_missing_acknowledged_write_is_flagged() {
        // Nobody saw 13 (the acknowledged delete of a), though every stream covered it.
        let mut logs = clean();
        for w in &mut logs {
            for s in &mut w.streams {
                s.seen
                    .retain(|e| e.revision != 13 || e.kind == SeenType::Bookmark);
            }
        }
        let r = check(10, 14, &writes(), &logs);
        assert!(!r.valid());
        assert!(r.anomalies.iter().all(|a| matches!(
            a,
            Anomaly::Gap {
                revision: 13,
                known_from: Source::Write { .. },
                ..
            }
        )));
        assert_eq!(r.anomaly_count, 3, "{r:#?}");
    }

    #[test]
    fn events_no_write_explains_are_flagged() {
        let mut logs = clean();
        // The refused create of c shows up, past what the other streams covered.
        logs[0].streams[0]
            .seen
            .push(ev(SeenType::Added, 16, "c", "o6"));
        let r = check(10, 14, &writes(), &logs);
        assert_eq!(kinds(&r), vec!["phantom"], "{r:#?}");
    }

    #[test]
    fn a_watcher_that_falls_short_or_is_refused_is_unknown() {
        let mut logs = clean();
        logs[0].streams[0].seen.truncate(3);
        logs[1].refusals.push(Refusal {
            node: 2,
            start_revision: 12,
            at_ns: 0,
            message: "compacted".into(),
        });
        let r = check(10, 14, &writes(), &logs);
        assert!(!r.valid() && !r.invalid(), "{r:#?}");
        assert_eq!(r.unknown.len(), 2, "{r:#?}");
    }

    #[test]
    fn the_history_lines_parse_back() {
        let logs = clean();
        let lines = records(&writes(), &logs);
        let back: Vec<Seen> = lines
            .iter()
            .filter(|l| l["record"] == "seen")
            .map(|l| serde_json::from_value(l["seen"].clone()).expect("seen"))
            .collect();
        let all: Vec<Seen> = logs
            .iter()
            .flat_map(|w| &w.streams)
            .flat_map(|s| s.seen.clone())
            .collect();
        assert_eq!(back, all);
    }
}
