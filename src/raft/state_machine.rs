//! The replicated state machine: openraft's `RaftStateMachine` over the pure `crate::state`.
//!
//! openraft's state machine task is the only writer: it calls `apply` with committed entries in
//! log order, and builds or installs snapshots. The server reads the live state through
//! [`StateMachine::state`] and learns about every applied batch through an [`ApplyObserver`].
//!
//! The live `State` is in memory; it reaches disk only as a snapshot file (`snapshot.bin`, see
//! `crate::raft::snapshot`) in the node's data directory, beside the redb file of the log. On
//! restart [`StateMachine::open`] loads that snapshot and openraft re-applies the committed log
//! after it (the log store persists `committed` for this).

use std::io;
use std::sync::{Arc, RwLock};

use futures::{FutureExt, Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::EntryPayload;
use tracing::debug;

use crate::raft::log_store::RaftDb;
use crate::raft::snapshot::{self, blocking};
use crate::raft::types::{
    Entry, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};
use crate::state::{self, ApplyContext, Effects, Response, State};

/// At most this many entries are applied under one acquisition of the state's write lock, so a
/// long catch-up does not keep readers waiting for the whole of it.
pub const APPLY_BATCH_ENTRIES_MAX: usize = 1024;

/// Told about every applied batch, so the server can feed watchers and waiting lock acquires.
/// Called on the state machine task, in log order.
pub trait ApplyObserver: Send + Sync + 'static {
    /// After a batch was applied: its object events and lock events, in log order. `revision` =
    /// state revision after the batch.
    fn on_applied(&self, effects: &Effects, revision: u64);
    /// The whole state was replaced (snapshot installed): history before `revision` is gone.
    fn on_reset(&self, revision: u64);
    /// Users, roles or authentication changed: the state's auth revision is now
    /// `auth_revision`. Called before the `on_applied` of the batch that changed it.
    fn on_auth(&self, _auth_revision: u64) {}
    /// The state's cluster time after a batch with proposals in it, or a snapshot install
    /// (`State::time_ms`): how the node's cluster clock learns what apply reached, and when
    /// (server/time.rs). `last_index`: the batch's last entry (`None` for a snapshot).
    fn on_time(&self, _time_ms: u64, _last_index: Option<u64>) {}
}

/// An observer that ignores everything (tests, offline tools).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopObserver;

impl ApplyObserver for NoopObserver {
    fn on_applied(&self, _effects: &Effects, _revision: u64) {}
    fn on_reset(&self, _revision: u64) {}
}

/// openraft's state machine. Owned by openraft's state machine task.
pub struct StateMachine {
    /// Where snapshots are persisted (shared with the log store).
    db: RaftDb,
    /// The live state. Written only by `apply` and `install_snapshot`, each under one short
    /// write-lock; readers (the server) take the read lock and never hold it across an await.
    state: Arc<RwLock<State>>,
    /// The last entry reflected in `state`; openraft re-applies the log after it on restart.
    last_applied: Option<LogId>,
    /// The last membership entry applied, which a snapshot must carry with it.
    last_membership: StoredMembership,
    /// Gets the effects of each applied batch, after the lock is released.
    observer: Arc<dyn ApplyObserver>,
    /// The state's auth revision as last told to `observer`.
    auth_revision: u64,
}

impl StateMachine {
    /// Loads the last snapshot from the data directory (if any) so a restart replays only the log
    /// after it, and removes the temporary snapshot files a crash left there. Blocks: called at
    /// start-up, before the node serves.
    pub fn open(db: RaftDb, observer: Arc<dyn ApplyObserver>) -> io::Result<StateMachine> {
        snapshot::remove_temp_files(db.dir())?;
        let (state, last_applied, last_membership) = match snapshot::open(db.dir())? {
            Some((meta, mut data)) => {
                let state = data.decode()?;
                let (bytes, revision) = (data.body_len(), state.revision());
                db.metrics.snapshot_bytes.set(gauge_value(bytes));
                debug!(%meta, bytes, revision, "state machine loaded its snapshot");
                (state, meta.last_log_id, meta.last_membership)
            }
            None => (State::new(), None, StoredMembership::default()),
        };
        Ok(StateMachine {
            db,
            auth_revision: state.auth().revision,
            state: Arc::new(RwLock::new(state)),
            last_applied,
            last_membership,
            observer,
        })
    }

    fn tell_auth(&mut self, auth_revision: u64) {
        if auth_revision != self.auth_revision {
            self.auth_revision = auth_revision;
            self.observer.on_auth(auth_revision);
        }
    }

    /// The state readers use (never hold the lock across an await).
    pub fn state(&self) -> Arc<RwLock<State>> {
        self.state.clone()
    }

    /// A consistent capture of (state, last applied, membership) for a snapshot builder.
    fn snapshot_builder(&self) -> io::Result<SnapshotBuilder> {
        let state = self.state.read().map_err(|_| poisoned())?.clone();
        Ok(SnapshotBuilder {
            db: self.db.clone(),
            capture: Some(Capture {
                state,
                meta: SnapshotMeta {
                    last_log_id: self.last_applied,
                    last_membership: self.last_membership.clone(),
                },
            }),
        })
    }

    /// Applies one batch under a single write-lock, then answers clients and tells the observer.
    fn apply_batch(&mut self, batch: Vec<EntryResponder<TypeConfig>>) -> io::Result<()> {
        // Invariant: the applied index only grows. Checked before anything changes.
        let mut prev = self.last_applied.as_ref().map(|id| id.index);
        for (entry, _) in &batch {
            if prev.is_some_and(|prev| entry.log_id.index <= prev) {
                let msg = format!("apply out of order: {} after index {prev:?}", entry.log_id);
                return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
            }
            prev = Some(entry.log_id.index);
        }

        let mut effects = Effects::default();
        let mut replies = Vec::with_capacity(batch.len());
        let state_lock = self.state.clone();
        // Only a batch with proposals tells the clock: a blank or membership entry carries no
        // time, and anchoring on it would drop the quiet time before an election from the new
        // leader's count (server/time.rs).
        let timed = batch
            .iter()
            .any(|(entry, _)| matches!(entry.payload, EntryPayload::Normal(_)));
        let (revision, auth_revision, time_ms) = {
            let mut state = state_lock.write().map_err(|_| poisoned())?;
            for (entry, responder) in batch {
                let response = self.apply_entry(&mut state, entry, &mut effects);
                replies.push((responder, response));
            }
            (state.revision(), state.auth().revision, state.time_ms())
        };
        if timed {
            self.observer.on_time(time_ms, prev);
        }
        // Before anything of this batch is handed out, so no stream sends it under the
        // authorization the batch revoked.
        self.tell_auth(auth_revision);
        for (responder, response) in replies {
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        self.observer.on_applied(&effects, revision);
        Ok(())
    }

    /// Applies one entry: app data goes to `state::apply_effects` with the leader's time; blank
    /// and membership entries only advance the log position and term (and record the
    /// membership).
    fn apply_entry(&mut self, state: &mut State, entry: Entry, effects: &mut Effects) -> Response {
        let log_id = entry.log_id;
        let ctx = ApplyContext::unstamped(log_id.index, log_id.leader_id.term, state.time_ms());
        let response = match entry.payload {
            EntryPayload::Normal(proposal) => {
                let ctx = ApplyContext::of_proposal(log_id.index, log_id.leader_id.term, &proposal);
                state::apply_effects(state, &ctx, &proposal.command, effects)
            }
            EntryPayload::Blank => {
                state::apply_blank(state, &ctx);
                Response::Done {
                    revision: state.revision(),
                }
            }
            EntryPayload::Membership(membership) => {
                self.last_membership = StoredMembership::new(Some(log_id), membership);
                state::apply_blank(state, &ctx);
                Response::Done {
                    revision: state.revision(),
                }
            }
        };
        self.last_applied = Some(log_id);
        response
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + Send,
    {
        loop {
            // Wait for the next entry with no lock held ...
            let Some(first) = entries.next().await else {
                return Ok(());
            };
            let mut batch = vec![first?];
            // ... then take every entry that is already there, and apply them as one batch.
            let mut ended = false;
            while batch.len() < APPLY_BATCH_ENTRIES_MAX {
                match entries.next().now_or_never() {
                    Some(Some(Ok(item))) => batch.push(item),
                    Some(Some(Err(e))) => {
                        self.apply_batch(batch)?;
                        return Err(e);
                    }
                    Some(None) => {
                        ended = true;
                        break;
                    }
                    None => break,
                }
            }
            self.apply_batch(batch)?;
            if ended {
                return Ok(());
            }
        }
    }

    async fn try_create_snapshot_builder(&mut self, _force: bool) -> Option<SnapshotBuilder> {
        Some(self.get_snapshot_builder().await)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // A poisoned lock means an apply panicked; the builder then fails in `build_snapshot`.
        self.snapshot_builder().unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot capture the state for a snapshot");
            SnapshotBuilder {
                db: self.db.clone(),
                capture: None,
            }
        })
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: SnapshotData,
    ) -> io::Result<()> {
        let bytes = snapshot.body_len();
        debug!(%meta, bytes, "installing snapshot");
        let dir = self.db.dir().to_path_buf();
        let lock = self.db.snapshot_lock.clone();
        let m = meta.clone();
        let state = blocking("install snapshot", move || {
            // A snapshot received from the leader is already a temporary file in the data
            // directory with this meta in its header, and is moved into place as it is. Any
            // other (openraft's test suite hands over another node's file) is copied first.
            if !snapshot.is_temp_in(&dir, &m) {
                snapshot = snapshot::copy_to_temp(&dir, &m, &mut snapshot)?;
            }
            let state = snapshot.decode()?;
            // Persist before the state changes: if that fails, the old state and the old
            // snapshot stay as they were (and the temporary file goes with `snapshot`).
            snapshot::persist(&dir, &lock, &mut snapshot, false)?;
            Ok(state)
        })
        .await?;

        let (revision, auth_revision, time_ms) =
            (state.revision(), state.auth().revision, state.time_ms());
        *self.state.write().map_err(|_| poisoned())? = state;
        self.observer.on_time(time_ms, None);
        self.tell_auth(auth_revision);
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
        self.observer.on_reset(revision);
        self.db.metrics.snapshots_installed.inc();
        self.db.metrics.snapshot_bytes.set(gauge_value(bytes));
        debug!(%meta, revision, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        let dir = self.db.dir().to_path_buf();
        let stored = blocking("read snapshot", move || snapshot::open(&dir)).await?;
        Ok(stored.map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

/// What a snapshot is built from, captured on the state machine task.
struct Capture {
    state: State,
    meta: SnapshotMeta,
}

/// Builds a snapshot off the state machine task from a capture taken on it.
pub struct SnapshotBuilder {
    /// Where the built snapshot is persisted.
    db: RaftDb,
    /// The captured state; `None` if the capture failed (a poisoned lock).
    capture: Option<Capture>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    /// Streams the captured state into a temporary file and moves it into place unless a newer
    /// snapshot is stored already (an install may have overtaken a slow build, and the log before
    /// the newer one may be purged already). Returns the file, not the bytes: openraft keeps only
    /// the meta of a built snapshot.
    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let Capture { state, meta } = self.capture.take().ok_or_else(poisoned)?;
        let revision = state.revision();
        let dir = self.db.dir().to_path_buf();
        let lock = self.db.snapshot_lock.clone();
        let m = meta.clone();
        let (stored, snapshot) = blocking("build snapshot", move || {
            let mut snapshot = snapshot::write_state(&dir, &m, &state)?;
            let stored = snapshot::persist(&dir, &lock, &mut snapshot, true)?;
            Ok((stored, snapshot))
        })
        .await?;
        let bytes = snapshot.body_len();
        self.db.metrics.snapshots_built.inc();
        self.db.metrics.snapshot_bytes.set(gauge_value(bytes));
        debug!(%meta, bytes, revision, stored, "snapshot built");
        Ok(Snapshot { meta, snapshot })
    }
}

/// A byte count as a gauge value (gauges are i64).
fn gauge_value(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

fn poisoned() -> io::Error {
    io::Error::other("state lock poisoned: an apply panicked")
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use openraft::entry::RaftEntry;

    use super::*;
    use crate::raft::types::LeaderId;

    fn blank(index: u64) -> Entry {
        Entry::new_blank(LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ))
    }

    async fn apply_blanks(sm: &mut StateMachine, indexes: std::ops::RangeInclusive<u64>) {
        let items = indexes.map(|i| Ok((blank(i), None)));
        sm.apply(stream::iter(items)).await.expect("apply");
    }

    /// A slow build that an install overtook must not replace the newer stored snapshot: the log
    /// before the newer one may be purged already, so a restart from the older one could not
    /// catch up.
    #[tokio::test]
    async fn older_build_does_not_replace_newer_installed_snapshot() -> io::Result<()> {
        let (dir_a, dir_b) = (tempfile::tempdir()?, tempfile::tempdir()?);
        let mut a = StateMachine::open(RaftDb::open(dir_a.path())?, Arc::new(NoopObserver))?;
        let mut b = StateMachine::open(RaftDb::open(dir_b.path())?, Arc::new(NoopObserver))?;
        apply_blanks(&mut a, 1..=1).await;
        let mut slow = a.snapshot_builder()?;
        apply_blanks(&mut b, 1..=5).await;
        let newer = b.snapshot_builder()?.build_snapshot().await?;

        a.install_snapshot(&newer.meta, newer.snapshot).await?;
        let older = slow.build_snapshot().await?;
        assert_eq!(older.meta.last_log_id, Some(blank(1).log_id));

        let stored = a.get_current_snapshot().await?.map(|s| s.meta.last_log_id);
        assert_eq!(stored, Some(Some(blank(5).log_id)));
        Ok(())
    }

    /// Entries must come in log order; a repeated index is refused before anything changes.
    #[tokio::test]
    async fn apply_refuses_an_index_that_does_not_grow() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut sm = StateMachine::open(RaftDb::open(dir.path())?, Arc::new(NoopObserver))?;
        apply_blanks(&mut sm, 1..=3).await;
        let err = sm.apply(stream::iter([Ok((blank(3), None))])).await;
        assert!(err.is_err());
        assert_eq!(sm.applied_state().await?.0, Some(blank(3).log_id));
        Ok(())
    }
}
