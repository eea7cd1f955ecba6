//! The watch hub: keeps a bounded history of applied events and fans new ones out to watchers.
//!
//! Fed by the state machine (as its `ApplyObserver`) in log order. A watch registers under the
//! hub's lock, so the events it replays from history and the ones it receives live meet without
//! a gap or a duplicate. A watcher whose buffer fills is cut off with ResourceExhausted: a slow
//! client never stalls apply. A start revision older than the history is refused with
//! OutOfRange naming the current revision, so the client can re-list.
//!
//! The history also serves `List` pages pinned to their first page's revision
//! (`events_since`): the current state with the later events undone (`State::list_as_of`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::Status;

use crate::config::Limits;
use crate::raft::state_machine::ApplyObserver;
use crate::server::errors;
use crate::server::wait::WaitChannels;
use crate::state::{Effects, Event, LockEvent, OpEvent, Selector};

/// What a watcher wants to see.
#[derive(Clone, Debug)]
pub struct WatchFilter {
    pub kind: String,
    /// None: every namespace.
    pub namespace: Option<String>,
    pub selector: Selector,
}

impl WatchFilter {
    pub fn matches(&self, e: &Event) -> bool {
        let o = &e.object;
        o.kind == self.kind
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == o.metadata.namespace)
            && self.selector.matches(&o.metadata.labels)
    }
}

/// What a watcher receives, in revision order.
#[derive(Clone, Debug)]
pub enum Delivery {
    Event(Arc<Event>),
    /// Every matching event up to this revision has been delivered.
    Bookmark(u64),
}

/// An item delivered to a watcher, or the reason it was cut off.
pub type WatchItem = Result<Delivery, Status>;

struct Watcher {
    filter: WatchFilter,
    /// Events with a smaller revision are not for this watcher (it replayed or skipped them).
    from_revision: u64,
    tx: mpsc::Sender<WatchItem>,
}

struct HubInner {
    /// Recent events, oldest first, each with the approximate size of its object and previous
    /// object.
    history: VecDeque<(Arc<Event>, usize)>,
    /// Sum of the sizes in `history`.
    history_bytes: usize,
    /// Every revision <= this is no longer in history.
    compacted: u64,
    /// The revision of the state after the last batch the hub was told about.
    revision: u64,
    watchers: BTreeMap<u64, Watcher>,
    next_id: u64,
}

/// How long `events_since` waits for the hub to be told of the batch the caller's state already
/// holds. The state machine tells it right after releasing the state's write lock, with no
/// await in between, so the wait is normally microseconds; this bound only turns a hub that
/// somehow stopped hearing into an error instead of a stuck request.
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// Events of its own lock and holder one waiting acquire may have unread: a wait ends at its
/// first grant or removal, so a few are plenty; past it the caller is told it lagged and reads
/// the state instead (`server::wait`).
const WAIT_EVENTS_BUFFER: usize = 16;

/// Why the history cannot give every object event after a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryGap {
    /// Some were dropped (limits.watch_history, watch_history_bytes) or happened before this
    /// node's history starts (it restarted, or a snapshot replaced its state): `oldest` is the
    /// oldest revision whose later events are all kept.
    Compacted { oldest: u64 },
    /// The hub was not told of the batches up to the caller's state within `CATCH_UP_WAIT`;
    /// `revision` is the one it was told of.
    Behind { revision: u64 },
}

/// See the module docs.
pub struct WatchHub {
    inner: Mutex<HubInner>,
    /// Signalled whenever `inner.revision` moves (`events_since` waits on it).
    moved: Condvar,
    /// Lock events, live only (no history): lock watchers subscribe here.
    locks: tokio::sync::broadcast::Sender<Arc<LockEvent>>,
    /// The same events by lock and holder: a waiting acquire hears only its own holder's.
    lock_waits: WaitChannels<(String, String), Arc<LockEvent>>,
    /// Operation changes, live only: worker assignment streams, op watchers and the leader's
    /// scheduler subscribe here.
    ops: tokio::sync::broadcast::Sender<OpEvent>,
    pools: tokio::sync::broadcast::Sender<crate::state::pools::PoolEvent>,
    history_max: usize,
    history_bytes_max: usize,
    buffer: usize,
    watchers_max: usize,
    /// etcd's watches of the keyspace (server/etcd/hub.rs).
    pub kv: crate::server::etcd::hub::KvHub,
    /// The applied state's auth revision, set before the events of the batch that changed it
    /// are handed out: open streams re-check their caller when it moves (`auth::StreamAuth`).
    auth_revision: AtomicU64,
}

/// A registered watch: replayed history first, then live events from `rx`.
pub struct Registration {
    pub id: u64,
    pub replay: Vec<Arc<Event>>,
    pub rx: mpsc::Receiver<WatchItem>,
}

impl WatchHub {
    pub fn new(limits: &Limits) -> WatchHub {
        WatchHub {
            inner: Mutex::new(HubInner {
                history: VecDeque::new(),
                history_bytes: 0,
                compacted: 0,
                revision: 0,
                watchers: BTreeMap::new(),
                next_id: 1,
            }),
            moved: Condvar::new(),
            locks: tokio::sync::broadcast::channel(limits.watch_buffer.max(1024)).0,
            lock_waits: WaitChannels::new(WAIT_EVENTS_BUFFER),
            ops: tokio::sync::broadcast::channel(limits.watch_buffer.max(1024)).0,
            pools: tokio::sync::broadcast::channel(limits.watch_buffer.max(1024)).0,
            history_max: limits.watch_history,
            history_bytes_max: limits.watch_history_bytes,
            buffer: limits.watch_buffer,
            watchers_max: limits.watchers_max,
            auth_revision: AtomicU64::new(0),
            kv: crate::server::etcd::hub::KvHub::new(limits.watch_buffer, limits.watchers_max),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver of every lock event applied on this node from now on.
    pub fn subscribe_locks(&self) -> tokio::sync::broadcast::Receiver<Arc<LockEvent>> {
        self.locks.subscribe()
    }

    /// A receiver of the events of `holder` on lock `name` applied on this node from now on.
    pub fn subscribe_lock_wait(
        &self,
        name: &str,
        holder: &str,
    ) -> tokio::sync::broadcast::Receiver<Arc<LockEvent>> {
        self.lock_waits
            .subscribe((name.to_string(), holder.to_string()))
    }

    /// A receiver of every operation change applied on this node from now on.
    pub fn subscribe_ops(&self) -> tokio::sync::broadcast::Receiver<OpEvent> {
        self.ops.subscribe()
    }

    /// A receiver of what becomes of waiting pool acquires applied on this node from now on.
    pub fn subscribe_pools(
        &self,
    ) -> tokio::sync::broadcast::Receiver<crate::state::pools::PoolEvent> {
        self.pools.subscribe()
    }

    /// The auth revision of the state applied so far (see `ApplyObserver::on_auth`).
    pub fn auth_revision(&self) -> u64 {
        self.auth_revision.load(Ordering::Acquire)
    }

    /// Sets the auth revision (at start-up, from the loaded state; then on every change).
    pub fn set_auth_revision(&self, revision: u64) {
        self.auth_revision.store(revision, Ordering::Release);
    }

    /// The revision up to which every event has been handed to watchers.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Forgets all history: nothing at or before `revision` can be replayed. Used at start-up
    /// (the state came from a snapshot) and when a snapshot replaces the state.
    pub fn reset_to(&self, revision: u64) {
        self.kv.reset_to(revision);
        let mut inner = self.lock();
        inner.history.clear();
        inner.history_bytes = 0;
        inner.compacted = revision;
        inner.revision = revision;
        self.moved.notify_all();
        for (_, w) in std::mem::take(&mut inner.watchers) {
            let _ = w.tx.try_send(Err(errors::revision_compacted(
                revision,
                revision + 1,
                format!(
                    "the node's state was replaced by a snapshot at revision {revision}; \
                     re-list and watch again"
                ),
            )));
        }
    }

    /// Ends every watch with Unavailable: the node is shutting down, resume elsewhere.
    pub fn close_all(&self) {
        self.kv.close_all();
        let mut inner = self.lock();
        let revision = inner.revision;
        for (_, w) in std::mem::take(&mut inner.watchers) {
            let _ = w.tx.try_send(Err(errors::unavailable(
                format!(
                    "this node is shutting down; resume the watch on another node after \
                     revision {revision}"
                ),
                None,
            )));
        }
    }

    /// Registers a watcher. `start_revision` is inclusive; 0 means "changes from now on".
    pub fn register(
        &self,
        filter: WatchFilter,
        start_revision: u64,
    ) -> Result<Registration, Status> {
        let mut inner = self.lock();
        if inner.watchers.len() >= self.watchers_max {
            return Err(errors::overloaded(
                "limits.watchers_max",
                format!(
                    "too many watchers on this node (limits.watchers_max = {})",
                    self.watchers_max
                ),
            ));
        }
        let from = if start_revision == 0 {
            inner.revision + 1
        } else {
            start_revision
        };
        if from <= inner.compacted {
            return Err(errors::revision_compacted(
                inner.revision,
                inner.compacted + 1,
                format!(
                    "start_revision {start_revision} is older than the kept history \
                     (limits.watch_history, watch_history_bytes; oldest available {}); current \
                     revision is {}: re-list and watch from the list's revision + 1",
                    inner.compacted + 1,
                    inner.revision
                ),
            ));
        }
        let replay: Vec<Arc<Event>> = inner
            .history
            .iter()
            .map(|(e, _)| e)
            .filter(|e| e.revision >= from && filter.matches(e))
            .cloned()
            .collect();
        // One slot more than the buffer, kept free for the cut-off notice.
        let (tx, rx) = mpsc::channel(self.buffer + 1);
        let id = inner.next_id;
        inner.next_id += 1;
        let from_revision = from.max(inner.revision + 1);
        inner.watchers.insert(
            id,
            Watcher {
                filter,
                from_revision,
                tx,
            },
        );
        Ok(Registration { id, replay, rx })
    }

    /// Every object event after `revision` up to `current`, oldest first: what a `List` page
    /// pinned to `revision` undoes from the state at `current`. The caller holds a read guard
    /// of that state, so no later batch can be applied meanwhile, and the hub is at most being
    /// told of the last one: this waits for that (up to `CATCH_UP_WAIT`), which takes no lock
    /// the caller holds. Lock order: the state, then the hub; nothing takes them the other way.
    pub fn events_since(&self, revision: u64, current: u64) -> Result<Vec<Arc<Event>>, HistoryGap> {
        let (inner, _) = self
            .moved
            .wait_timeout_while(self.lock(), CATCH_UP_WAIT, |inner| inner.revision < current)
            .unwrap_or_else(|p| p.into_inner());
        if inner.revision < current {
            return Err(HistoryGap::Behind {
                revision: inner.revision,
            });
        }
        if revision < inner.compacted {
            return Err(HistoryGap::Compacted {
                oldest: inner.compacted,
            });
        }
        // The history is in revision order: skip what is not newer without a scan.
        let first = inner
            .history
            .partition_point(|(e, _)| e.revision <= revision);
        Ok(inner
            .history
            .range(first..)
            .map(|(e, _)| e)
            .take_while(|e| e.revision <= current)
            .cloned()
            .collect())
    }

    /// Queues a bookmark behind the events already queued for watcher `id`, so it never claims
    /// a revision whose events the watcher has not been sent. A full buffer skips the bookmark.
    pub fn bookmark(&self, id: u64) {
        let inner = self.lock();
        if let Some(w) = inner.watchers.get(&id) {
            if w.tx.capacity() > 1 {
                // A watch that starts ahead of this node's applied revision is owed nothing
                // below its start: never bookmark below it (a client resuming from the highest
                // revision seen must not go backwards).
                let revision = inner.revision.max(w.from_revision.saturating_sub(1));
                let _ = w.tx.try_send(Ok(Delivery::Bookmark(revision)));
            }
        }
    }

    pub fn unregister(&self, id: u64) {
        self.lock().watchers.remove(&id);
    }

    pub fn watcher_count(&self) -> usize {
        self.lock().watchers.len()
    }
}

impl ApplyObserver for WatchHub {
    fn on_applied(&self, effects: &Effects, revision: u64) {
        for e in &effects.lock_events {
            let e = Arc::new(e.clone());
            self.lock_waits
                .send(&(e.name.clone(), e.holder.clone()), e.clone());
            // No receiver is fine: nobody watches right now.
            let _ = self.locks.send(e);
        }
        for e in &effects.op_events {
            let _ = self.ops.send(e.clone());
        }
        for e in &effects.pool_events {
            let _ = self.pools.send(e.clone());
        }
        self.kv.on_applied(&effects.kv_events, revision);
        let events = &effects.events;
        let mut inner = self.lock();
        let events: Vec<Arc<Event>> = events.iter().cloned().map(Arc::new).collect();
        let buffer = self.buffer;
        // DELIBERATE BUG (src/bugs.rs, test-only builds): live watchers miss every 10th
        // revision's event, while the history (and so a replay) keeps it.
        let skip =
            |e: &Event| crate::bugs::active(crate::bugs::Bug::WatchGap) && e.revision % 10 == 0;
        inner.watchers.retain(|id, w| {
            for e in events
                .iter()
                .filter(|e| e.revision >= w.from_revision && w.filter.matches(e) && !skip(e))
            {
                if w.tx.capacity() <= 1 {
                    tracing::info!(watcher = id, "cutting off a slow watcher");
                    let _ = w.tx.try_send(Err(errors::watch_too_slow(
                        "limits.watch_buffer",
                        format!(
                            "watcher fell {buffer} events behind (limits.watch_buffer); re-list \
                             and watch again"
                        ),
                    )));
                    return false;
                }
                if w.tx.try_send(Ok(Delivery::Event(e.clone()))).is_err() {
                    return false; // the client went away
                }
            }
            true
        });
        for e in events {
            // The previous object counts too: the event keeps it alive. (Often it is also the
            // object of an earlier event still kept, so this overcounts: the limit is a bound.)
            let bytes =
                e.object.approx_json_bytes() + e.prev.as_ref().map_or(0, |p| p.approx_json_bytes());
            inner.history_bytes += bytes;
            inner.history.push_back((e, bytes));
        }
        while inner.history.len() > self.history_max || inner.history_bytes > self.history_bytes_max
        {
            let Some((old, bytes)) = inner.history.pop_front() else {
                break;
            };
            inner.history_bytes -= bytes;
            inner.compacted = inner.compacted.max(old.revision);
        }
        inner.revision = inner.revision.max(revision);
        self.moved.notify_all();
    }

    fn on_reset(&self, revision: u64) {
        self.reset_to(revision);
    }

    fn on_auth(&self, auth_revision: u64) {
        self.set_auth_revision(auth_revision);
    }
}

/// Relays a broadcast subscription to a gRPC server stream: `pick` turns an event into the
/// message for this stream, or `None` to skip it, or an error that ends the stream (its caller
/// lost the right to read it). A subscriber that falls behind the broadcast
/// gets ResourceExhausted saying how to recover (`what` watcher fell behind...; `recover`), a
/// node shutting down ends it with Unavailable, and a client that goes away stops the relay.
pub(crate) fn relay<E, M, F>(
    mut events: tokio::sync::broadcast::Receiver<E>,
    what: &'static str,
    recover: &'static str,
    mut pick: F,
) -> tokio_stream::wrappers::ReceiverStream<Result<M, Status>>
where
    E: Clone + Send + 'static,
    M: Send + 'static,
    F: FnMut(&E) -> Result<Option<M>, Status> + Send + 'static,
{
    use tokio::sync::broadcast::error::RecvError;
    let (out, out_rx) = tokio::sync::mpsc::channel::<Result<M, Status>>(64);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(e) => match pick(&e) {
                        Ok(Some(m)) => {
                            if out.send(Ok(m)).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(status) => {
                            let _ = out.send(Err(status)).await;
                            return;
                        }
                    },
                    Err(RecvError::Lagged(n)) => {
                        let _ = out.send(Err(errors::watch_too_slow(
                            "event broadcast buffer",
                            format!("{what} watcher fell behind by {n} events; {recover}"),
                        ))).await;
                        return;
                    }
                    Err(RecvError::Closed) => {
                        let _ = out.send(Err(errors::shutting_down())).await;
                        return;
                    }
                },
                _ = out.closed() => return,
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(out_rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{EventType, RawJson, Resource};

    fn event(revision: u64, spec_bytes: usize) -> Event {
        let mut object = Resource::new("v1", "Thing", "default", &format!("t{revision}"));
        object.metadata.resource_version = revision;
        object.spec = RawJson::from_value(&serde_json::json!({ "data": "x".repeat(spec_bytes) }));
        Event {
            event_type: EventType::Added,
            revision,
            object: Arc::new(object),
            prev: None,
        }
    }

    fn applied(hub: &WatchHub, revisions: std::ops::RangeInclusive<u64>) {
        for revision in revisions {
            let effects = Effects {
                events: vec![event(revision, 10)],
                ..Effects::default()
            };
            hub.on_applied(&effects, revision);
        }
    }

    fn revisions(events: &[Arc<Event>]) -> Vec<u64> {
        events.iter().map(|e| e.revision).collect()
    }

    /// A list page pinned to revision R undoes the events after R: the hub gives exactly those,
    /// or says which revision its history starts after when it dropped some.
    #[test]
    fn events_since_a_revision_or_the_gap() {
        let limits = Limits {
            watch_history: 3,
            ..Limits::default()
        };
        let hub = WatchHub::new(&limits);
        applied(&hub, 1..=10);
        assert_eq!(
            revisions(&hub.events_since(7, 10).expect("kept")),
            [8, 9, 10]
        );
        assert_eq!(revisions(&hub.events_since(9, 10).expect("kept")), [10]);
        assert!(hub.events_since(10, 10).expect("kept").is_empty());
        assert_eq!(
            hub.events_since(6, 10).map(|e| revisions(&e)),
            Err(HistoryGap::Compacted { oldest: 7 })
        );
        // A node's history starts at its state's revision when it starts or installs a
        // snapshot.
        hub.reset_to(12);
        assert_eq!(
            hub.events_since(10, 12).map(|e| revisions(&e)),
            Err(HistoryGap::Compacted { oldest: 12 })
        );
    }

    /// The caller's state may be one batch ahead of what the hub was told; the hub waits for
    /// it, and says so if it never comes.
    #[test]
    fn events_since_waits_for_the_hub_to_catch_up() {
        let hub = Arc::new(WatchHub::new(&Limits::default()));
        applied(&hub, 1..=5);
        let late = Arc::clone(&hub);
        let teller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            applied(&late, 6..=6);
        });
        assert_eq!(
            revisions(&hub.events_since(4, 6).expect("caught up")),
            [5, 6]
        );
        teller.join().expect("teller");
        assert_eq!(
            hub.events_since(4, 7).map(|e| revisions(&e)),
            Err(HistoryGap::Behind { revision: 6 })
        );
    }

    /// An event keeps its previous object alive, so the history's bytes count it.
    #[test]
    fn history_bytes_count_the_previous_object() {
        let hub = WatchHub::new(&Limits::default());
        let mut modified = event(2, 100);
        modified.prev = Some(Arc::clone(&event(1, 300).object));
        let both = modified.object.approx_json_bytes()
            + modified.prev.as_ref().map_or(0, |p| p.approx_json_bytes());
        let effects = Effects {
            events: vec![modified],
            ..Effects::default()
        };
        hub.on_applied(&effects, 2);
        assert_eq!(hub.lock().history_bytes, both);
    }

    fn filter() -> WatchFilter {
        WatchFilter {
            kind: "Thing".to_string(),
            namespace: None,
            selector: Selector::everything(),
        }
    }

    /// The history keeps the newest events that fit in `watch_history_bytes`; a watch from an
    /// evicted revision is OutOfRange naming the limit, one from a kept revision replays.
    #[test]
    fn history_is_bounded_by_bytes_as_well_as_events() {
        let size = event(10, 1000).object.approx_json_bytes(); // the largest name
        let limits = Limits {
            watch_history: 1_000,
            watch_history_bytes: 3 * size,
            ..Limits::default()
        };
        let hub = WatchHub::new(&limits);
        for revision in 1..=10 {
            let effects = Effects {
                events: vec![event(revision, 1000)],
                ..Effects::default()
            };
            hub.on_applied(&effects, revision);
        }
        let err = hub
            .register(filter(), 7)
            .err()
            .expect("revision 7 is evicted");
        assert_eq!(err.code(), tonic::Code::OutOfRange);
        assert!(err.message().contains("watch_history_bytes"), "{err:?}");
        let kept = hub
            .register(filter(), 8)
            .expect("revisions 8..=10 are kept");
        let replayed: Vec<u64> = kept.replay.iter().map(|e| e.revision).collect();
        assert_eq!(replayed, vec![8, 9, 10]);
    }
}
