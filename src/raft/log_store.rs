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

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use tokio::sync::oneshot;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::raft::types::{Entry, LogId, TypeConfig, Vote};
use crate::state::objects::validate::json_len;

/// The database file inside the node's data directory.
pub const DB_FILE_NAME: &str = "steward.redb";

/// redb's page cache. Its default (1 GiB) is sized for a database much larger than a Raft log
/// whose older entries are purged after each snapshot; the live state is in memory anyway, and
/// the log's tail, which replication reads, is kept in memory by `Tail`. The cache fills with
/// every page the log's group commits write, so it is most of a node's memory beyond its objects
/// when it is large: at 64 MiB, three nodes holding 60,000 objects used 115 MiB more at peak.
pub const DB_CACHE_BYTES: usize = 16 << 20;

/// At most this many bytes of entries per `limited_get_log_entries` (one AppendEntries payload),
/// so a burst of large objects cannot build a message the peer transport refuses. At least one
/// entry is always returned, whatever its size.
pub const REPLICATION_PAYLOAD_BYTES_MAX: usize = 2 << 20;

/// At most this many bytes (as stored in redb) of durable entries stay in memory after their
/// batch is fsynced. A few AppendEntries payloads' worth, so a follower a few batches behind is
/// served from memory; in memory an entry takes a few times its JSON length.
pub const RECENT_ENTRIES_BYTES_MAX: usize = 4 << 20;

/// At most this many durable entries stay in memory, however small: several payloads of
/// `raft.payload_entries_max` (512 by default).
pub const RECENT_ENTRIES_MAX: usize = 4096;

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
    /// redb serializes write transactions itself and lets reads run beside them: every
    /// transaction takes this lock shared, and only `compact` takes it exclusively (redb
    /// compacts only with no transaction open). Held on the writer thread and the blocking
    /// pool, never across an await.
    db: Arc<RwLock<Database>>,
    /// The node's data directory (snapshots are files beside the database).
    dir: std::path::PathBuf,
    /// Serializes snapshot file writes (a build and an install may overlap).
    pub(crate) snapshot_lock: Arc<Mutex<()>>,
    /// Where the log writer and the snapshot code record latencies and sizes.
    pub(crate) metrics: Arc<Metrics>,
}

impl fmt::Debug for RaftDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RaftDb")
    }
}

impl RaftDb {
    /// Opens (or creates) `<dir>/steward.redb` and makes sure every table exists; records into
    /// metrics of its own (see `open_observed`).
    pub fn open(dir: &Path) -> io::Result<RaftDb> {
        RaftDb::open_observed(dir, Arc::default())
    }

    /// `open`, recording log writes and snapshots into the node's `metrics`.
    pub fn open_observed(dir: &Path, metrics: Arc<Metrics>) -> io::Result<RaftDb> {
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
            db: Arc::new(RwLock::new(db)),
            dir: dir.to_path_buf(),
            snapshot_lock: Arc::default(),
            metrics,
        })
    }

    /// The node's data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Compacts the database file on the blocking pool: pages freed by purged log entries are
    /// given back to the file system. Every log read and write waits while it runs (as etcd's
    /// defrag stalls its member), so it is an operator's command, not a background task.
    /// Answers the file's size before and after.
    pub async fn compact(&self) -> io::Result<(u64, u64)> {
        let db = self.db.clone();
        let path = self.dir.join(DB_FILE_NAME);
        let what = "compact database";
        run_blocking(what, move || {
            let before = std::fs::metadata(&path)?.len();
            let mut db = db.write().unwrap_or_else(|p| p.into_inner());
            db.compact()
                .map_err(|e| io::Error::other(format!("redb {what}: {e}")))?;
            drop(db);
            let after = std::fs::metadata(&path)?.len();
            Ok((before, after))
        })
        .await
    }

    /// Runs `f` in a read transaction on the blocking pool.
    pub(crate) async fn read<T, F>(&self, what: &'static str, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> io::Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        run_blocking(what, move || {
            let db = db.read().unwrap_or_else(|p| p.into_inner());
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

/// Entries read from redb, each with its stored length.
struct DiskEntries {
    entries: Vec<(Entry, usize)>,
    /// `bytes_max` stopped the read before the end of its range: nothing may follow these.
    cut: bool,
}

/// Reads the entries of `[start, end)` in one read transaction, stopping early once `bytes_max`
/// is reached (after at least one entry). A gap inside the result is corruption and an error.
fn read_entries(
    txn: &ReadTransaction,
    (start, end): (u64, Option<u64>),
    bytes_max: usize,
) -> io::Result<DiskEntries> {
    let what = "read log";
    let mut out = DiskEntries {
        entries: Vec::new(),
        cut: false,
    };
    if end.is_some_and(|end| start >= end) {
        return Ok(out);
    }
    let table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
    let iter = match end {
        Some(end) => table.range(start..end),
        None => table.range(start..),
    }
    .map_err(db_err(what))?;

    let mut bytes = 0usize;
    for item in iter {
        let (index, value) = item.map_err(db_err(what))?;
        let (index, value) = (index.value(), value.value());
        if let Some((prev, _)) = out.entries.last() {
            check_next(prev, index)?;
        }
        if !out.entries.is_empty() && bytes + value.len() > bytes_max {
            out.cut = true;
            break;
        }
        bytes += value.len();
        let entry = serde_json::from_slice(value).map_err(json_err("raft log entry"))?;
        out.entries.push((entry, value.len()));
    }
    Ok(out)
}

/// A read must return consecutive indexes: a gap is corruption, and an error.
fn check_next(prev: &Entry, index: u64) -> io::Result<()> {
    if index == prev.log_id.index + 1 {
        return Ok(());
    }
    let msg = format!("hole in raft log: index {} then {index}", prev.log_id.index);
    Err(io::Error::new(io::ErrorKind::InvalidData, msg))
}

/// The newest entries of the log, in memory: the ones `append` accepted whose batch is not yet
/// durable (they exist nowhere else), then the most recent durable ones, up to the limits. Keyed
/// by index, they are a suffix of the log: appends add at the end, truncations remove from the
/// end, purges and evictions from the front. Every change is made under the lock in the order
/// openraft made the call, before the op is queued for the writer, so a read sees the log as
/// openraft does.
struct Tail {
    entries: BTreeMap<u64, TailEntry>,
    /// Sum of `stored_bytes` over the durable entries held.
    durable_bytes: usize,
    durable_bytes_max: usize,
    entries_max: usize,
    /// One past the log's last index, once an append or a truncation since start has said it
    /// (None: redb alone knows). Reads never ask redb at or past it, so entries that a truncation
    /// removed but the writer has not yet deleted are not returned.
    end: Option<u64>,
    /// Bumped by every truncation and purge: a read that went to redb retries if it changed
    /// meanwhile, so it never joins entries from before a truncation to cached ones after it.
    generation: u64,
}

struct TailEntry {
    /// The `append` call that put it here: the writer marks it durable only if no later append
    /// (after a truncation) replaced it.
    seq: u64,
    entry: Arc<Entry>,
    /// Its length in redb, set once its batch is durable. Only durable entries may be evicted;
    /// `None` means this is the only copy.
    stored_bytes: Option<usize>,
}

/// An entry the writer has made durable: the append call, its index and its stored length.
struct Written {
    seq: u64,
    index: u64,
    bytes: usize,
}

/// What a read takes from the tail under its lock: the cached entries of the range (with their
/// stored length when known) and the part of the range, before them, that only redb has.
struct TailView {
    cached: Vec<(Arc<Entry>, Option<usize>)>,
    /// `[start, end)`, `end == None` meaning unbounded; `None` if redb is not needed.
    disk: Option<(u64, Option<u64>)>,
    generation: u64,
}

impl Tail {
    fn new(durable_bytes_max: usize, entries_max: usize) -> Tail {
        Tail {
            entries: BTreeMap::new(),
            durable_bytes: 0,
            durable_bytes_max,
            entries_max,
            end: None,
            generation: 0,
        }
    }

    fn append(&mut self, seq: u64, entries: &[Arc<Entry>]) {
        for e in entries {
            let index = e.log_id.index;
            let old = self.entries.insert(
                index,
                TailEntry {
                    seq,
                    entry: e.clone(),
                    stored_bytes: None,
                },
            );
            self.forget(old);
            self.end = Some(self.end.unwrap_or(0).max(index + 1));
        }
    }

    /// Removes the entries after `after` (all of them for `None`); returns them, to be dropped
    /// outside the lock.
    fn truncate_after(&mut self, after: Option<u64>) -> BTreeMap<u64, TailEntry> {
        let from = after.map_or(0, |a| a + 1);
        let removed = self.entries.split_off(&from);
        self.forget_all(&removed);
        self.end = Some(from);
        self.generation += 1;
        removed
    }

    /// Removes the entries up to `index`; returns them, to be dropped outside the lock.
    fn purge(&mut self, index: u64) -> BTreeMap<u64, TailEntry> {
        let kept = self.entries.split_off(&(index + 1));
        let removed = std::mem::replace(&mut self.entries, kept);
        self.forget_all(&removed);
        self.end = self.end.map(|end| end.max(index + 1));
        self.generation += 1;
        removed
    }

    /// Marks what the writer made durable, then evicts the oldest durable entries beyond the
    /// limits; returns those, to be dropped outside the lock.
    fn mark_durable(&mut self, written: &[Written]) -> Vec<Arc<Entry>> {
        for w in written {
            if let Some(t) = self.entries.get_mut(&w.index) {
                if t.seq == w.seq && t.stored_bytes.is_none() {
                    t.stored_bytes = Some(w.bytes);
                    self.durable_bytes += w.bytes;
                }
            }
        }
        let mut evicted = Vec::new();
        while self.durable_bytes > self.durable_bytes_max || self.entries.len() > self.entries_max {
            let Some(first) = self.entries.first_entry() else {
                break;
            };
            // Not durable yet: this is the only copy, so it stays, and the newer ones behind it.
            let Some(bytes) = first.get().stored_bytes else {
                break;
            };
            self.durable_bytes -= bytes;
            evicted.push(first.remove().entry);
        }
        evicted
    }

    fn forget(&mut self, old: Option<TailEntry>) {
        if let Some(bytes) = old.and_then(|t| t.stored_bytes) {
            self.durable_bytes -= bytes;
        }
    }

    fn forget_all(&mut self, removed: &BTreeMap<u64, TailEntry>) {
        let bytes: usize = removed.values().filter_map(|t| t.stored_bytes).sum();
        self.durable_bytes -= bytes;
    }

    /// Splits `[start, end)` into the part only redb has and the cached entries after it.
    fn view(&self, (start, end): (u64, Option<u64>)) -> TailView {
        let range = match end {
            Some(end) => self.entries.range(start..end),
            None => self.entries.range(start..),
        };
        let cached = range
            .map(|(_, t)| (t.entry.clone(), t.stored_bytes))
            .collect();
        // redb is asked only below the first cached entry, or below the log's end if none is.
        let first_cached = self.entries.keys().next().copied().or(self.end);
        let disk_end = match (end, first_cached) {
            (Some(end), Some(first)) => Some(end.min(first)),
            (end, first) => end.or(first),
        };
        let disk = match disk_end {
            Some(disk_end) if start >= disk_end => None,
            _ => Some((start, disk_end)),
        };
        TailView {
            cached,
            disk,
            generation: self.generation,
        }
    }
}

/// Builds a read's result from redb's part and the cached part after it: consecutive indexes
/// (a gap is an error) and at most `bytes_max` bytes of stored entries, at least one entry.
fn assemble(
    disk: DiskEntries,
    cached: Vec<(Arc<Entry>, Option<usize>)>,
    bytes_max: usize,
) -> io::Result<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::with_capacity(disk.entries.len() + cached.len());
    let mut bytes = 0usize;
    // Within the limit, as `read_entries` already checked for redb's entries.
    for (entry, size) in disk.entries {
        bytes += size;
        out.push(entry);
    }
    if disk.cut {
        return Ok(out);
    }
    for (entry, size) in cached {
        if let Some(prev) = out.last() {
            check_next(prev, entry.log_id.index)?;
        }
        if bytes_max != usize::MAX {
            // An entry not yet durable has no stored length yet: measure it as the writer will.
            let size = size.unwrap_or_else(|| json_len(&*entry));
            if !out.is_empty() && bytes + size > bytes_max {
                break;
            }
            bytes += size;
        }
        out.push((*entry).clone());
    }
    Ok(out)
}

/// openraft's log store and log reader. Clones share one writer thread and one tail, so a reader
/// (a clone) sees every entry the store has accepted, flushed or not.
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

/// One write for the writer thread. All ops waiting when the thread wakes go into ONE redb
/// transaction and ONE fsync: that is the group commit.
enum WriteOp {
    Append {
        seq: u64,
        entries: Vec<Arc<Entry>>,
        callback: IOFlushed<TypeConfig>,
        /// When the entries were handed to the writer (for `raft_append_duration`).
        queued: Instant,
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
        let metrics = &db.metrics;
        metrics.raft_write_batches.inc();
        match &result {
            Ok(written) => {
                if let Some(shared) = shared.upgrade() {
                    let evicted = lock(&shared.tail).mark_durable(written);
                    // Entries may be freed here, after the lock is released.
                    drop(evicted);
                }
            }
            Err(e) => tracing::error!(error = %e, ops = batch.len(), "raft log write failed"),
        }
        for op in batch {
            let r = match &result {
                Ok(_) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            match op {
                WriteOp::Append {
                    callback,
                    queued,
                    entries,
                    ..
                } => {
                    metrics.raft_append.observe(queued.elapsed().as_secs_f64());
                    metrics.raft_entries_written.inc_by(entries.len() as u64);
                    callback.io_completed(r)
                }
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

/// Applies a batch of ops, in order, in one write transaction; returns the appended entries with
/// their stored length.
fn write_batch(db: &RaftDb, batch: &[WriteOp], durable: bool) -> io::Result<Vec<Written>> {
    let mut written = Vec::new();
    let what = "write raft log";
    let database = db.db.read().unwrap_or_else(|p| p.into_inner());
    let mut txn = database.begin_write().map_err(db_err(what))?;
    let durability = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    txn.set_durability(durability).map_err(db_err(what))?;
    for op in batch {
        match op {
            WriteOp::Append { seq, entries, .. } => {
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                for entry in entries {
                    let bytes = serde_json::to_vec(&**entry).map_err(json_err(what))?;
                    let index = entry.log_id.index;
                    table
                        .insert(index, bytes.as_slice())
                        .map_err(db_err(what))?;
                    written.push(Written {
                        seq: *seq,
                        index,
                        bytes: bytes.len(),
                    });
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
    let commit = Instant::now();
    txn.commit().map_err(db_err(what))?;
    if durable {
        db.metrics
            .raft_fsync
            .observe(commit.elapsed().as_secs_f64());
    }
    Ok(written)
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
