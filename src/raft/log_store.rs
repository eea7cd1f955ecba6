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
//! previous one is being fsynced; readers see queued entries at once through the pending map.
//! The one write nobody waits for is the `committed` pointer, a restart hint that rides on the
//! next fsync (see `save_committed`). Reads run on tokio's blocking pool.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::raft::types::{Entry, LogId, TypeConfig, Vote};

/// The database file inside the node's data directory.
pub const DB_FILE_NAME: &str = "steward.redb";

/// redb's page cache. Its default (1 GiB) is sized for a database much larger than a Raft log
/// whose older entries are purged after each snapshot; the live state is in memory anyway.
pub const DB_CACHE_BYTES: usize = 64 << 20;

/// At most this many bytes of entries per `limited_get_log_entries` (one AppendEntries payload),
/// so a burst of large objects cannot build a message the peer transport refuses. At least one
/// entry is always returned, whatever its size.
pub const REPLICATION_PAYLOAD_BYTES_MAX: usize = 2 << 20;

/// Log index -> the entry as serde_json (the payload holds `serde_json::Value`s, which only a
/// self-describing format can read back).
const LOG_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// `META_*` key -> serde_json value.
const META_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const META_VOTE: &str = "vote";
const META_COMMITTED: &str = "committed";
const META_LAST_PURGED: &str = "last_purged";

/// A node's redb database, shared by the log store and the state machine. Cloning is cheap.
#[derive(Clone)]
pub struct RaftDb {
    /// redb serializes write transactions itself and lets reads run beside them, so the handle is
    /// shared without a lock of ours.
    db: Arc<Database>,
    /// The node's data directory (snapshots are files beside the database).
    dir: std::path::PathBuf,
    /// Serializes snapshot file writes (a build and an install may overlap).
    pub(crate) snapshot_lock: Arc<Mutex<()>>,
}

impl fmt::Debug for RaftDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RaftDb")
    }
}

impl RaftDb {
    /// Opens (or creates) `<dir>/steward.redb` and makes sure every table exists.
    pub fn open(dir: &Path) -> io::Result<RaftDb> {
        let path = dir.join(DB_FILE_NAME);
        let what = "open";
        let db = Database::builder()
            .set_cache_size(DB_CACHE_BYTES)
            .create(&path)
            .map_err(|e| io::Error::other(format!("redb {what} {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(db_err(what))?;
        txn.open_table(LOG_TABLE).map_err(db_err(what))?;
        txn.open_table(META_TABLE).map_err(db_err(what))?;
        txn.commit().map_err(db_err(what))?;
        Ok(RaftDb {
            db: Arc::new(db),
            dir: dir.to_path_buf(),
            snapshot_lock: Arc::default(),
        })
    }

    /// The node's data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` in a read transaction on the blocking pool.
    pub(crate) async fn read<T, F>(&self, what: &'static str, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> io::Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        run_blocking(what, move || {
            let txn = db.begin_read().map_err(db_err(what))?;
            f(&txn)
        })
        .await
    }
}

async fn run_blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("redb {what}: blocking task failed: {e}")))?
}

/// Maps a redb error to an `io::Error` naming the operation.
pub(crate) fn db_err<E: fmt::Display>(what: &'static str) -> impl Fn(E) -> io::Error {
    move |e| io::Error::other(format!("redb {what}: {e}"))
}

/// Maps a serde_json error on stored bytes to `InvalidData` naming what was being read.
pub(crate) fn json_err(what: &'static str) -> impl Fn(serde_json::Error) -> io::Error {
    move |e| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
}

/// Reads a serde_json value from `META_TABLE` (or any `&str -> bytes` table).
pub(crate) fn get_json<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &'static str,
) -> io::Result<Option<T>> {
    let Some(bytes) = table.get(key).map_err(db_err(key))? else {
        return Ok(None);
    };
    serde_json::from_slice(bytes.value())
        .map(Some)
        .map_err(json_err(key))
}

fn put_json<T: Serialize>(txn: &WriteTransaction, key: &'static str, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(json_err(key))?;
    let mut table = txn.open_table(META_TABLE).map_err(db_err(key))?;
    table.insert(key, bytes.as_slice()).map_err(db_err(key))?;
    Ok(())
}

/// The first field of a stored entry, read without decoding the payload.
#[derive(Deserialize)]
struct EntryHead {
    log_id: LogId,
}

/// `range` as `[start, end)`; `end == None` means unbounded.
fn half_open(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => Some(e.saturating_add(1)),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => None,
    };
    (start, end)
}

/// Reads the entries of `[start, end)` in one read transaction, stopping early once `bytes_max`
/// is reached (after at least one entry). A gap inside the result is corruption and an error.
fn read_entries(
    txn: &ReadTransaction,
    (start, end): (u64, Option<u64>),
    bytes_max: usize,
) -> io::Result<Vec<Entry>> {
    let what = "read log";
    if end.is_some_and(|end| start >= end) {
        return Ok(Vec::new());
    }
    let table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
    let iter = match end {
        Some(end) => table.range(start..end),
        None => table.range(start..),
    }
    .map_err(db_err(what))?;

    let mut entries: Vec<Entry> = Vec::new();
    let mut bytes = 0usize;
    for item in iter {
        let (index, value) = item.map_err(db_err(what))?;
        let (index, value) = (index.value(), value.value());
        if let Some(prev) = entries.last() {
            if index != prev.log_id.index + 1 {
                let msg = format!("hole in raft log: index {} then {index}", prev.log_id.index);
                return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
            }
        }
        if !entries.is_empty() && bytes + value.len() > bytes_max {
            break;
        }
        bytes += value.len();
        entries.push(serde_json::from_slice(value).map_err(json_err("raft log entry"))?);
    }
    Ok(entries)
}

/// openraft's log store and log reader. Clones share one writer thread and one pending map, so a
/// reader (a clone) sees every entry the store has accepted, flushed or not.
#[derive(Clone)]
pub struct LogStore {
    db: RaftDb,
    shared: Arc<Shared>,
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
    /// Entries handed to `append` whose batch is not yet committed to redb: index -> (append
    /// sequence, entry). Readers overlay them on what redb holds. The writer removes an entry once
    /// its batch is durable, unless a later append replaced it (a newer sequence).
    pending: Mutex<BTreeMap<u64, (u64, Arc<Entry>)>>,
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

/// One write for the writer thread. All ops waiting when the thread wakes go into ONE redb
/// transaction and ONE fsync: that is the group commit.
enum WriteOp {
    Append {
        seq: u64,
        entries: Vec<Arc<Entry>>,
        callback: IOFlushed<TypeConfig>,
    },
    Vote {
        vote: Vote,
        done: oneshot::Sender<io::Result<()>>,
    },
    /// A restart hint; nobody waits for it (see `save_committed`).
    Committed { committed: Option<LogId> },
    Truncate {
        after: Option<u64>,
        done: oneshot::Sender<io::Result<()>>,
    },
    Purge {
        log_id: LogId,
        done: oneshot::Sender<io::Result<()>>,
    },
}

/// Most ops folded into one transaction.
const GROUP_COMMIT_OPS_MAX: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LogStore {
    /// A log store over `db`; the log, vote and pointers already in it are used as they are.
    /// Starts the writer thread, which ends when the last clone is dropped.
    pub fn new(db: RaftDb) -> LogStore {
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            writer: Mutex::new(Some(tx)),
            thread: Mutex::new(None),
            pending: Mutex::new(BTreeMap::new()),
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
        LogStore { db, shared }
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

    /// Pending (accepted, not yet durable) entries with index in `[start, end)`.
    fn pending_range(&self, (start, end): (u64, Option<u64>)) -> BTreeMap<u64, Arc<Entry>> {
        let pending = lock(&self.shared.pending);
        let range = match end {
            Some(end) if start >= end => return BTreeMap::new(),
            Some(end) => pending.range(start..end),
            None => pending.range(start..),
        };
        range.map(|(i, (_, e))| (*i, e.clone())).collect()
    }

    /// Entries of `[start, end)`: pending ones (read FIRST, so an entry flushed meanwhile is
    /// found in redb) over the durable ones, checked for holes, cut at `bytes_max`.
    async fn read_range(
        &self,
        bounds: (u64, Option<u64>),
        bytes_max: usize,
    ) -> io::Result<Vec<Entry>> {
        let pending = self.pending_range(bounds);
        let durable = self
            .db
            .read("read log", move |txn| read_entries(txn, bounds, usize::MAX))
            .await?;
        let mut merged: BTreeMap<u64, Entry> =
            durable.into_iter().map(|e| (e.log_id.index, e)).collect();
        for (i, e) in pending {
            merged.insert(i, (*e).clone());
        }
        let mut out: Vec<Entry> = Vec::with_capacity(merged.len());
        let mut bytes = 0usize;
        for (i, e) in merged {
            if let Some(prev) = out.last() {
                if i != prev.log_id.index + 1 {
                    let msg = format!("hole in raft log: index {} then {i}", prev.log_id.index);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
                }
            }
            if bytes_max != usize::MAX {
                let size = serde_json::to_vec(&e).map(|b| b.len()).unwrap_or(0);
                if !out.is_empty() && bytes + size > bytes_max {
                    break;
                }
                bytes += size;
            }
            out.push(e);
        }
        Ok(out)
    }
}

/// The writer thread: takes every op waiting, writes them in one transaction, fsyncs once, then
/// completes them all. Exits when every `LogStore` clone is gone.
fn writer_loop(
    db: RaftDb,
    shared: std::sync::Weak<Shared>,
    rx: std::sync::mpsc::Receiver<WriteOp>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < GROUP_COMMIT_OPS_MAX {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let durable = batch
            .iter()
            .any(|op| !matches!(op, WriteOp::Committed { .. }));
        let result = write_batch(&db, &batch, durable);
        if result.is_ok() {
            if let Some(shared) = shared.upgrade() {
                let mut pending = lock(&shared.pending);
                for op in &batch {
                    if let WriteOp::Append { seq, entries, .. } = op {
                        for e in entries {
                            if pending.get(&e.log_id.index).is_some_and(|(s, _)| s == seq) {
                                pending.remove(&e.log_id.index);
                            }
                        }
                    }
                }
            }
        } else if let Err(e) = &result {
            tracing::error!(error = %e, ops = batch.len(), "raft log write failed");
        }
        for op in batch {
            let r = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            match op {
                WriteOp::Append { callback, .. } => callback.io_completed(r),
                WriteOp::Vote { done, .. }
                | WriteOp::Truncate { done, .. }
                | WriteOp::Purge { done, .. } => {
                    let _ = done.send(r);
                }
                WriteOp::Committed { .. } => {}
            }
        }
    }
}

/// Applies a batch of ops, in order, in one write transaction.
fn write_batch(db: &RaftDb, batch: &[WriteOp], durable: bool) -> io::Result<()> {
    let what = "write raft log";
    let mut txn = db.db.begin_write().map_err(db_err(what))?;
    let durability = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    txn.set_durability(durability).map_err(db_err(what))?;
    for op in batch {
        match op {
            WriteOp::Append { entries, .. } => {
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                for entry in entries {
                    let bytes = serde_json::to_vec(&**entry).map_err(json_err(what))?;
                    table
                        .insert(entry.log_id.index, bytes.as_slice())
                        .map_err(db_err(what))?;
                }
            }
            WriteOp::Vote { vote, .. } => put_json(&txn, META_VOTE, vote)?,
            WriteOp::Committed { committed } => put_json(&txn, META_COMMITTED, committed)?,
            WriteOp::Truncate { after, .. } => {
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                let from = match after {
                    Some(i) => Bound::Excluded(*i),
                    None => Bound::Unbounded,
                };
                table
                    .retain_in((from, Bound::Unbounded), |_, _| false)
                    .map_err(db_err(what))?;
            }
            WriteOp::Purge { log_id, .. } => {
                let prev: Option<LogId> = {
                    let meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
                    get_json(&meta, META_LAST_PURGED)?
                };
                if prev.as_ref().is_some_and(|prev| prev >= log_id) {
                    continue;
                }
                put_json(&txn, META_LAST_PURGED, log_id)?;
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                table
                    .retain_in(..=log_id.index, |_, _| false)
                    .map_err(db_err(what))?;
            }
        }
    }
    txn.commit().map_err(db_err(what))
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
        let pending_last = lock(&self.shared.pending)
            .values()
            .next_back()
            .map(|(_, e)| e.log_id);
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
        let last_log_id = pending_last.max(durable_last).or(last_purged_log_id);
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
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        {
            let mut pending = lock(&self.shared.pending);
            for e in &entries {
                pending.insert(e.log_id.index, (seq, e.clone()));
            }
        }
        self.send(WriteOp::Append {
            seq,
            entries,
            callback,
        })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        tracing::debug!(?last_log_id, "truncating raft log after");
        let after = last_log_id.map(|l| l.index);
        {
            let mut pending = lock(&self.shared.pending);
            let from = after.map(|a| a + 1).unwrap_or(0);
            pending.retain(|i, _| *i < from);
        }
        self.send_and_wait(|done| WriteOp::Truncate { after, done })
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        tracing::debug!(%log_id, "purging raft log up to");
        {
            let mut pending = lock(&self.shared.pending);
            pending.retain(|i, _| *i > log_id.index);
        }
        self.send_and_wait(|done| WriteOp::Purge { log_id, done })
            .await
    }
}

#[cfg(test)]
mod tests {
    use openraft::entry::RaftEntry;
    use openraft::type_config::TypeConfigExt;

    use super::*;
    use crate::raft::types::LeaderId;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 1 }, index)
    }

    async fn append(store: &mut LogStore, entries: Vec<Entry>) -> io::Result<()> {
        let (tx, rx) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(tx)).await?;
        rx.await.map_err(|_| io::Error::other("callback dropped"))?
    }

    /// Everything openraft wrote must come back after the database is closed and reopened.
    #[tokio::test]
    async fn log_vote_committed_and_purged_survive_reopen() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        {
            let mut store = LogStore::new(RaftDb::open(dir.path())?);
            let entries = (1..=5).map(|i| Entry::new_blank(log_id(2, i))).collect();
            append(&mut store, entries).await?;
            store.save_vote(&Vote::new_committed(2, 1)).await?;
            store.save_committed(Some(log_id(2, 4))).await?;
            store.purge(log_id(2, 2)).await?;
            store.truncate_after(Some(log_id(2, 4))).await?;
        }

        let mut store = LogStore::new(RaftDb::open(dir.path())?);
        assert_eq!(store.read_vote().await?, Some(Vote::new_committed(2, 1)));
        assert_eq!(store.read_committed().await?, Some(log_id(2, 4)));
        let state = store.get_log_state().await?;
        assert_eq!(state.last_purged_log_id, Some(log_id(2, 2)));
        assert_eq!(state.last_log_id, Some(log_id(2, 4)));
        let ids: Vec<LogId> = store
            .try_get_log_entries(0..100)
            .await?
            .into_iter()
            .map(|e| e.log_id)
            .collect();
        assert_eq!(ids, vec![log_id(2, 3), log_id(2, 4)]);
        Ok(())
    }

    /// `committed` is written without fsync; the next fsynced write (here a vote) carries it.
    #[tokio::test]
    async fn committed_rides_on_the_next_durable_write() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        {
            let mut store = LogStore::new(RaftDb::open(dir.path())?);
            store.save_committed(Some(log_id(3, 7))).await?;
            assert_eq!(store.read_committed().await?, Some(log_id(3, 7)));
            store.save_vote(&Vote::new_committed(3, 1)).await?;
        }
        let mut store = LogStore::new(RaftDb::open(dir.path())?);
        assert_eq!(store.read_committed().await?, Some(log_id(3, 7)));
        Ok(())
    }

    /// A replication read stops at the byte limit but always returns at least one entry.
    #[tokio::test]
    async fn limited_read_respects_byte_limit() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut store = LogStore::new(RaftDb::open(dir.path())?);
        let entries = (1..=3).map(|i| Entry::new_blank(log_id(1, i))).collect();
        append(&mut store, entries).await?;
        let db = store.db.clone();
        let one = db
            .read("test", |txn| read_entries(txn, (1, Some(4)), 1))
            .await?;
        assert_eq!(one.len(), 1);
        assert_eq!(store.limited_get_log_entries(1, 4).await?.len(), 3);
        assert!(store.limited_get_log_entries(4, 4).await?.is_empty());
        Ok(())
    }
}
