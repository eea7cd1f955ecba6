//! The Raft log and vote on disk: openraft's `RaftLogStorage` and `RaftLogReader` over redb.
//!
//! Called only by openraft: the Raft core appends, truncates, purges and saves the vote through
//! [`LogStore`]; replication and apply tasks read through cheap clones of it (`get_log_reader`).
//! [`RaftDb`] is the one redb file of a node, opened once by the server; the state machine keeps
//! its snapshots as files in the same directory (`state_machine.rs`).
//!
//! Every write goes through one writer thread that folds all waiting ops (appends from openraft,
//! votes, truncations, purges) into one redb transaction committed with `Durability::Immediate`
//! (fsync), and only then tells openraft they are done: that is the group commit. `append`
//! returns as soon as the entries are queued, so openraft hands over the next batch while the
//! previous one is being fsynced; readers see queued entries at once through the in-memory tail.
//! The one write nobody waits for is the `committed` pointer, a restart hint that rides on the
//! next fsync (see `save_committed`).
//!
//! The tail ([`Tail`]) also keeps the newest entries after they are durable, up to
//! [`RECENT_ENTRIES_BYTES_MAX`] / [`RECENT_ENTRIES_MAX`]: replication and apply read what was just
//! appended, and serving that from memory saves a blocking-pool hop, a redb read transaction and
//! a JSON decode per entry. Older entries are read from redb on tokio's blocking pool.
//!
//! Here: [`LogStore`] and openraft's traits over it. Beside it: `db.rs` (the redb file, its tables
//! and range reads), `tail.rs` (the in-memory tail) and `writer.rs` (the group-commit thread).

use std::fmt;
use std::io;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use redb::ReadableTable;

use crate::raft::types::{Entry, LogId, TypeConfig, Vote};

mod db;
mod tail;
mod writer;

use db::{
    db_err, get_json, half_open, json_err, read_entries, DiskEntries, EntryHead, LOG_TABLE,
    META_COMMITTED, META_LAST_PURGED, META_TABLE, META_VOTE,
};
pub use db::{
    RaftDb, DB_CACHE_BYTES, DB_FILE_NAME, RECENT_ENTRIES_BYTES_MAX, RECENT_ENTRIES_MAX,
    REPLICATION_PAYLOAD_BYTES_MAX,
};
use tail::{assemble, Tail};
use writer::{writer_loop, WriteOp};

/// openraft's log store and log reader. Clones share one writer thread and one tail, so a reader
/// (a clone) sees every entry the store has accepted, flushed or not.
#[derive(Clone)]
pub struct LogStore {
    db: RaftDb,
    shared: Arc<Shared>,
    observer: Option<Arc<dyn LogObserver>>,
}

/// Told what the log accepts and drops, as it does (server/time.rs: when entries arrived).
/// Called on openraft's task, in log order; must not block.
pub trait LogObserver: Send + Sync + 'static {
    /// The log accepted entries up to `last_index` (before they are durable).
    fn on_appended(&self, last_index: u64);
    /// The log dropped every entry after `after` (`None`: all).
    fn on_truncated(&self, after: Option<u64>);
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogStore")
    }
}

/// What the store and its writer thread share.
struct Shared {
    /// Ops for the writer thread, in the order openraft issued them. Taken on drop, which ends
    /// the thread.
    writer: Mutex<Option<std::sync::mpsc::Sender<WriteOp>>>,
    /// Joined on drop, so the database file is closed when the last clone is gone.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The newest entries, durable or not; readers take what it has and ask redb only for the
    /// older part of a range. Held only to copy `Arc`s in or out, never during I/O.
    tail: Mutex<Tail>,
    /// The newest `committed` pointer given to `save_committed` (None: not given since start).
    committed: Mutex<Option<Option<LogId>>>,
    next_seq: AtomicU64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        lock(&self.writer).take();
        if let Some(handle) = lock(&self.thread).take() {
            // The writer itself may hold the last reference for a moment; it never joins itself.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LogStore {
    /// A log store over `db`; the log, vote and pointers already in it are used as they are.
    /// Starts the writer thread, which ends when the last clone is dropped.
    pub fn new(db: RaftDb) -> LogStore {
        LogStore::with_tail_limits(db, RECENT_ENTRIES_BYTES_MAX, RECENT_ENTRIES_MAX)
    }

    /// `new` with other limits on the durable entries kept in memory (tests use small ones).
    fn with_tail_limits(db: RaftDb, durable_bytes_max: usize, entries_max: usize) -> LogStore {
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            writer: Mutex::new(Some(tx)),
            thread: Mutex::new(None),
            tail: Mutex::new(Tail::new(durable_bytes_max, entries_max)),
            committed: Mutex::new(None),
            next_seq: AtomicU64::new(1),
        });
        let thread_db = db.clone();
        let thread_shared = Arc::downgrade(&shared);
        let spawned = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || writer_loop(thread_db, thread_shared, rx));
        match spawned {
            Ok(handle) => *lock(&shared.thread) = Some(handle),
            // Without a writer every write fails with a clear error instead of hanging.
            Err(e) => tracing::error!(error = %e, "cannot start the raft log writer thread"),
        }
        LogStore {
            db,
            shared,
            observer: None,
        }
    }

    /// The store, telling `observer` what it accepts and drops.
    pub fn observed_by(mut self, observer: Arc<dyn LogObserver>) -> LogStore {
        self.observer = Some(observer);
        self
    }

    fn send(&self, op: WriteOp) -> io::Result<()> {
        lock(&self.shared.writer)
            .as_ref()
            .and_then(|w| w.send(op).ok())
            .ok_or_else(|| io::Error::other("raft log writer thread is gone"))
    }

    /// Sends an op that reports back, and waits for its batch to be durable.
    async fn send_and_wait(
        &self,
        op: impl FnOnce(oneshot::Sender<io::Result<()>>) -> WriteOp,
    ) -> io::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(op(tx))?;
        rx.await
            .map_err(|_| io::Error::other("raft log writer dropped a request"))?
    }

    /// Entries of `[start, end)`, checked for holes, cut at `bytes_max`: the cached ones from the
    /// tail, and the older part, if any, from redb. Only entries the tail no longer (or never)
    /// held are in that part, and they are durable, so redb has them.
    async fn read_range(
        &self,
        bounds: (u64, Option<u64>),
        bytes_max: usize,
    ) -> io::Result<Vec<Entry>> {
        if bounds.1.is_some_and(|end| bounds.0 >= end) {
            return Ok(Vec::new());
        }
        loop {
            let view = lock(&self.shared.tail).view(bounds);
            let Some(disk) = view.disk else {
                let none = DiskEntries {
                    entries: Vec::new(),
                    cut: false,
                };
                return assemble(none, view.cached, bytes_max);
            };
            let disk = self
                .db
                .read("read log", move |txn| read_entries(txn, disk, bytes_max))
                .await?;
            // A truncation or purge meanwhile may have changed redb's part: read again.
            if lock(&self.shared.tail).generation == view.generation {
                return assemble(disk, view.cached, bytes_max);
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB>(&mut self, range: RB) -> io::Result<Vec<Entry>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + Send,
    {
        self.read_range(half_open(&range), usize::MAX).await
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.db
            .read("read vote", |txn| {
                let table = txn.open_table(META_TABLE).map_err(db_err("read vote"))?;
                get_json(&table, META_VOTE)
            })
            .await
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        self.read_range((start, Some(end)), REPLICATION_PAYLOAD_BYTES_MAX)
            .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let what = "read log state";
        let tail_last = lock(&self.shared.tail)
            .entries
            .values()
            .next_back()
            .map(|t| t.entry.log_id);
        let (last_purged_log_id, durable_last) = self
            .db
            .read(what, move |txn| {
                let meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
                let last_purged_log_id: Option<LogId> = get_json(&meta, META_LAST_PURGED)?;
                let log = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                let last = match log.last().map_err(db_err(what))? {
                    Some((_, value)) => {
                        let head: EntryHead =
                            serde_json::from_slice(value.value()).map_err(json_err(what))?;
                        Some(head.log_id)
                    }
                    None => None,
                };
                Ok((last_purged_log_id, last))
            })
            .await?;
        // With no entry left (all purged), the last log id is the last purged one.
        let last_log_id = tail_last.max(durable_last).or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let vote = *vote;
        self.send_and_wait(|done| WriteOp::Vote { vote, done })
            .await
    }

    /// openraft awaits this between commit and apply, on every write, so it is neither fsynced nor
    /// waited for: it is queued and reaches disk with the next fsynced batch (the log itself is
    /// always fsynced first). A crash may lose the newest value; the older one still names
    /// committed, durable entries, and openraft learns the rest from the leader, as it would if
    /// `committed` were not saved at all.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        *lock(&self.shared.committed) = Some(committed);
        self.send(WriteOp::Committed { committed })
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        if let Some(c) = *lock(&self.shared.committed) {
            return Ok(c);
        }
        let what = "read committed";
        self.db
            .read(what, |txn| {
                let table = txn.open_table(META_TABLE).map_err(db_err(what))?;
                // Stored as `Option<LogId>`: `save_committed(None)` is a value too.
                Ok(get_json::<Option<LogId>>(&table, META_COMMITTED)?.flatten())
            })
            .await
    }

    /// Accepts the entries at once (readers see them immediately) and returns; the writer thread
    /// makes them durable together with whatever else is waiting, then calls `callback`.
    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Arc<Entry>> = entries.into_iter().map(Arc::new).collect();
        if let (Some(observer), Some(last)) = (&self.observer, entries.last()) {
            observer.on_appended(last.log_id.index);
        }
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.tail).append(seq, &entries);
        self.send(WriteOp::Append {
            seq,
            entries,
            callback,
            queued: Instant::now(),
        })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        tracing::debug!(?last_log_id, "truncating raft log after");
        let after = last_log_id.map(|l| l.index);
        if let Some(observer) = &self.observer {
            observer.on_truncated(after);
        }
        let removed = lock(&self.shared.tail).truncate_after(after);
        // Entries may be freed here, after the lock is released.
        drop(removed);
        self.send_and_wait(|done| WriteOp::Truncate { after, done })
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        tracing::debug!(%log_id, "purging raft log up to");
        let removed = lock(&self.shared.tail).purge(log_id.index);
        // Entries may be freed here, after the lock is released.
        drop(removed);
        self.send_and_wait(|done| WriteOp::Purge { log_id, done })
            .await
    }
}

#[cfg(test)]
mod tests;
