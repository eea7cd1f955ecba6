//! The watch workload: clients watch the etcd keyspace through any node with steward's own etcd
//! Watch session (`server::etcd::watch::session`, the code behind the Watch service), fed by
//! the node's hub as its state machine applies. A stream ends when its node crashes or when the
//! client closes it; the client then opens another on a random node from the revision after the
//! last it was sent (an event, or a progress notice: every event up to it was sent), as etcd's
//! clientv3 resumes a watch. Now and then a client reads slowly, so its stream falls behind the
//! node's buffer and its watch catches up from the store; a node that installs a snapshot makes
//! every watch on it catch up the same way.
//!
//! Checked at the end against the keyspace's own history (`changes` on the settled state):
//! each client was sent exactly the changes of its span from its start, in order, none missing,
//! none twice, each as the keyspace holds it (with the version before it, when asked for); each
//! progress notice came after every change up to its revision; and once the cluster has healed,
//! a stream opened from where the client stopped catches up to the last revision.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rand::rngs::SmallRng;
use rand::RngExt;
use steward::proto::etcd::watch_request::RequestUnion;
use steward::proto::etcd::{WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse};
use steward::proto::mvccpb;
use steward::server::etcd::watch::{event_pb, session};
use steward::state::kv::{Bytes, Span};
use steward::state::State;
use tokio::time::Instant;

use crate::cluster::Cluster;

/// How often a watch that asked for progress notices gets one when it had nothing else: a
/// node's `etcd.progress_notify_interval_ms`, scaled down.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How often a client looks whether its stream's node still runs (and may ask for progress).
const LOOK_EVERY: Duration = Duration::from_millis(20);
/// How long the healed cluster has to catch a client's watch up to its last revision.
const CATCH_UP: Duration = Duration::from_secs(3);

/// What one watch client watched and was sent.
#[derive(Debug)]
pub struct Watched {
    pub process: u64,
    /// What it watches, as etcd's key and range_end.
    pub key: Bytes,
    pub range_end: Bytes,
    pub prev_kv: bool,
    /// The first revision it watched from: the one it asked for, or, for a watch from "now"
    /// (0), the one after its first created response's header revision. `None` until a
    /// stream was created.
    pub start: Option<u64>,
    /// Every event it was sent, in order, over all its streams.
    pub events: Vec<mvccpb::Event>,
    /// Each progress notice: its revision, and how many events had been sent before it.
    pub progress: Vec<(u64, usize)>,
    /// Rules broken as it ran (a response before the created one, a cancel, a catch-up that
    /// did not finish).
    pub problems: Vec<String>,
    /// The revision the next stream asks for: after the last event or progress notice (0:
    /// from "now", while no stream was created).
    next: u64,
}

impl Watched {
    fn span(&self) -> String {
        match (self.key.as_ref(), self.range_end.as_ref()) {
            (b"\0", b"\0") => "every key".to_string(),
            (key, []) => String::from_utf8_lossy(key).into_owned(),
            (key, end) => format!(
                "[{}, {})",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(end)
            ),
        }
    }

    /// Takes one response of a stream; `Err` when the stream must end (it was cancelled).
    fn take(&mut self, r: &WatchResponse, created: &mut bool) -> Result<String, String> {
        let revision = r
            .header
            .as_ref()
            .map_or(0, |h| u64::try_from(h.revision).unwrap_or(0));
        if r.created {
            if *created {
                self.problems
                    .push("a second created response on one stream".into());
            }
            *created = true;
            if r.canceled {
                self.problems
                    .push(format!("its watch was refused: {}", r.cancel_reason));
                return Err("refused".into());
            }
            if self.start.is_none() {
                let start = if self.next == 0 {
                    revision + 1
                } else {
                    self.next
                };
                self.start = Some(start);
                self.next = start;
            }
            return Ok(format!("created at revision {revision}"));
        }
        if !*created {
            self.problems
                .push(format!("a response before the created one: {r:?}"));
        }
        if r.canceled {
            self.problems.push(format!(
                "its watch was cancelled: {} (compact revision {})",
                r.cancel_reason, r.compact_revision
            ));
            return Err("cancelled".into());
        }
        let Some(last) = r.events.last() else {
            self.progress.push((revision, self.events.len()));
            self.next = self.next.max(revision + 1);
            return Ok(format!("progress at revision {revision}"));
        };
        let last = last
            .kv
            .as_ref()
            .map_or(0, |kv| kv.mod_revision.max(0) as u64);
        if revision < last {
            self.problems.push(format!(
                "a response's header revision {revision} is below its last event's {last}"
            ));
        }
        let shown: Vec<String> = r.events.iter().map(describe).collect();
        self.events.extend(r.events.iter().cloned());
        self.next = self.next.max(last + 1);
        Ok(format!("sent {}", shown.join(", ")))
    }
}

/// An event as the trace and the checker show it: its revision, kind and key.
fn describe(e: &mvccpb::Event) -> String {
    let kind = match e.r#type {
        0 => "put",
        _ => "delete",
    };
    match &e.kv {
        Some(kv) => format!(
            "{kind} {}@{}",
            String::from_utf8_lossy(&kv.key),
            kv.mod_revision
        ),
        None => format!("{kind} (no key)"),
    }
}

/// One watch client, named `c<process>`: it watches every key, one register key (of `keys`),
/// or the lease workload's keys, from revision 1 or from "now", over one stream after another
/// until `until`.
pub async fn client(
    cluster: Arc<Cluster>,
    process: u64,
    mut rng: SmallRng,
    keys: u64,
    until: Instant,
    out: Arc<Mutex<Vec<Watched>>>,
) {
    let who = format!("c{process}");
    let (key, range_end) = match rng.random_range(0..3) {
        0 => (Bytes::from_static(b"\0"), Bytes::from_static(b"\0")),
        1 => (
            Bytes::from(jepsen::register::key_name(rng.random_range(0..keys.max(1)))),
            Bytes::new(),
        ),
        _ => (Bytes::from_static(b"lease/"), Bytes::from_static(b"lease0")),
    };
    let mut w = Watched {
        process,
        key,
        range_end,
        prev_kv: rng.random_bool(0.5),
        start: None,
        events: Vec::new(),
        progress: Vec::new(),
        problems: Vec::new(),
        next: if rng.random_bool(0.5) { 1 } else { 0 },
    };
    while Instant::now() < until {
        let close_at = Instant::now() + Duration::from_millis(rng.random_range(100..2_000));
        stream(
            &cluster,
            &mut w,
            &mut rng,
            &who,
            close_at.min(until),
            0.1,
            |_| false,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
    }
    out.lock().unwrap_or_else(|p| p.into_inner()).push(w);
}

/// Once the cluster has healed and settled at revision `top`: each client opens a stream from
/// where it stopped and must be told, by a progress notice it asked for, that it has been sent
/// everything up to `top`, within [`CATCH_UP`].
pub async fn catch_up(cluster: &Cluster, watched: &mut [Watched], mut rng: SmallRng, top: u64) {
    for w in watched.iter_mut() {
        let who = format!("c{}", w.process);
        let deadline = Instant::now() + CATCH_UP;
        let caught_up = |w: &Watched| w.progress.last().is_some_and(|&(r, _)| r >= top);
        while !caught_up(w) && Instant::now() < deadline {
            stream(cluster, w, &mut rng, &who, deadline, 1.0, caught_up).await;
        }
        if !caught_up(w) {
            w.problems.push(format!(
                "not caught up to revision {top} within {CATCH_UP:?} of the healed cluster \
                 (next revision {})",
                w.next
            ));
        }
    }
}

/// One stream on a random node until it ends: its node crashed, the client closes it at
/// `close_at`, or `done` holds. Each time it looks at its node the client asks for progress
/// with probability `ask`.
async fn stream(
    cluster: &Cluster,
    w: &mut Watched,
    rng: &mut SmallRng,
    who: &str,
    close_at: Instant,
    ask: f64,
    done: impl Fn(&Watched) -> bool,
) {
    let trace = &cluster.trace;
    let via = cluster.ids[rng.random_range(0..cluster.ids.len())];
    let Some((incarnation, host)) = cluster.watch_host(via) else {
        return;
    };
    let (tx, requests) = futures::channel::mpsc::unbounded::<Result<WatchRequest, tonic::Status>>();
    let create = WatchCreateRequest {
        key: w.key.clone(),
        range_end: w.range_end.clone(),
        start_revision: i64::try_from(w.next).unwrap_or(0),
        prev_kv: w.prev_kv,
        progress_notify: rng.random_bool(0.5),
        ..Default::default()
    };
    trace.log(
        who,
        format!("watch {} from {} via n{via}", w.span(), w.next),
    );
    let _ = tx.unbounded_send(Ok(WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(create)),
    }));
    let mut responses = Box::pin(session(host, requests, PROGRESS_EVERY));
    let mut created = false;
    loop {
        if !cluster.net.is_current(via, incarnation) {
            trace.log(who, format!("its stream ends: n{via} went down"));
            return;
        }
        if done(w) {
            return;
        }
        if Instant::now() >= close_at {
            trace.log(who, "closes its stream");
            return;
        }
        tokio::select! {
            biased;
            response = responses.next() => match response {
                Some(Ok(r)) => {
                    if !cluster.net.is_current(via, incarnation) {
                        continue; // sent by a node that has crashed since: never arrives
                    }
                    match w.take(&r, &mut created) {
                        Ok(what) => trace.log(who, what),
                        Err(why) => {
                            trace.log(who, format!("its stream ends: {why}"));
                            return;
                        }
                    }
                    // Now and then a slow reader, so the stream falls behind and catches up.
                    if rng.random_bool(0.1) {
                        let nap = Duration::from_millis(rng.random_range(1..40));
                        tokio::time::sleep(nap).await;
                    }
                }
                Some(Err(status)) => {
                    trace.log(who, format!("its stream failed: {}", status.message()));
                    return;
                }
                None => {
                    trace.log(who, "its stream ended");
                    return;
                }
            },
            _ = tokio::time::sleep(LOOK_EVERY) => {
                if created && rng.random_bool(ask) {
                    let _ = tx.unbounded_send(Ok(WatchRequest {
                        request_union: Some(RequestUnion::ProgressRequest(
                            WatchProgressRequest {},
                        )),
                    }));
                }
            }
        }
    }
}

/// Every broken promise of the watch clients, against the keyspace of the settled `state`.
pub fn check(watched: &[Watched], state: &State) -> Vec<String> {
    let top = state.revision();
    let mut found = Vec::new();
    for w in watched {
        let who = format!("c{} watching {}", w.process, w.span());
        for p in &w.problems {
            found.push(format!("{who}: {p}"));
        }
        let Some(start) = w.start else {
            continue;
        };
        let span = Span::new(&w.key, &w.range_end);
        let want: Vec<mvccpb::Event> = match state.kv().changes(&span, start, top, usize::MAX) {
            Ok((changes, _)) => changes.iter().map(|e| event_pb(e, w.prev_kv)).collect(),
            Err(e) => {
                found.push(format!("{who}: the keyspace's changes from {start}: {e}"));
                continue;
            }
        };
        let who = format!("{who} from revision {start}");
        if let Some(i) = (0..w.events.len()).find(|&i| want.get(i) != w.events.get(i)) {
            let got = &w.events[i];
            found.push(match want.get(i) {
                Some(expected) if describe(expected) == describe(got) => format!(
                    "{who}: event {} ({}) was sent as {got:?}, the keyspace holds {expected:?}",
                    i + 1,
                    describe(got)
                ),
                Some(expected) => format!(
                    "{who}: event {} was {}, but the next change was {} (a gap, a repeat or \
                     out of order)",
                    i + 1,
                    describe(got),
                    describe(expected)
                ),
                None => format!(
                    "{who}: event {} ({}) is past the keyspace's last change of the span \
                     ({} changes up to revision {top})",
                    i + 1,
                    describe(got),
                    want.len()
                ),
            });
            continue;
        }
        for &(revision, sent) in &w.progress {
            let owed = want
                .iter()
                .take_while(|e| revision_of(e) <= revision)
                .count();
            if sent < owed {
                found.push(format!(
                    "{who}: a progress notice at revision {revision} came after {sent} events, \
                     but {owed} changes were made up to it ({} not sent before it)",
                    describe(&want[sent])
                ));
                break;
            }
        }
    }
    found.truncate(10);
    found
}

fn revision_of(e: &mvccpb::Event) -> u64 {
    e.kv.as_ref().map_or(0, |kv| kv.mod_revision.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward::state::kv::{KvCommand, PutOp, RequestOp, Txn};
    use steward::state::{apply, ApplyContext, Command};

    /// A state whose keyspace holds puts of r0, r1, r0 (revisions 2, 3, 4).
    fn keyspace() -> State {
        let mut state = State::default();
        for (i, key) in ["r0", "r1", "r0"].iter().enumerate() {
            let put = RequestOp::Put(PutOp {
                key: Bytes::from(*key),
                value: Bytes::from(i.to_string()),
                ..Default::default()
            });
            let txn = Txn {
                success: vec![put],
                ..Default::default()
            };
            let ctx = ApplyContext {
                log_index: i as u64 + 1,
                term: 1,
                time_ms: 1_000,
                stamped: true,
                wall_ms: None,
            };
            apply(
                &mut state,
                &ctx,
                &Command::Kv(KvCommand::Txn(txn)),
                &mut Vec::new(),
            );
        }
        state
    }

    fn watcher(state: &State, events: &[usize], progress: &[(u64, usize)]) -> Watched {
        let (all, _) = state
            .kv()
            .changes(&Span::From(Bytes::from_static(b"\0")), 1, 100, usize::MAX)
            .unwrap_or_default();
        Watched {
            process: 1,
            key: Bytes::from_static(b"\0"),
            range_end: Bytes::from_static(b"\0"),
            prev_kv: false,
            start: Some(1),
            events: events.iter().map(|&i| event_pb(&all[i], false)).collect(),
            progress: progress.to_vec(),
            problems: Vec::new(),
            next: 0,
        }
    }

    #[test]
    fn a_gap_a_repeat_or_an_early_progress_notice_is_found_and_the_history_itself_is_not() {
        let state = keyspace();
        let top = state.revision();
        let none: Vec<String> = Vec::new();
        assert_eq!(
            check(&[watcher(&state, &[0, 1, 2], &[(top, 3)])], &state),
            none
        );
        assert_eq!(check(&[watcher(&state, &[0], &[(1, 0)])], &state), none);
        let gap = check(&[watcher(&state, &[0, 2], &[])], &state);
        assert!(gap.iter().any(|f| f.contains("a gap")), "{gap:?}");
        let repeat = check(&[watcher(&state, &[0, 0, 1], &[])], &state);
        assert!(repeat.iter().any(|f| f.contains("a repeat")), "{repeat:?}");
        let early = check(&[watcher(&state, &[0], &[(top, 1)])], &state);
        assert!(
            early.iter().any(|f| f.contains("progress notice")),
            "{early:?}"
        );
    }
}
