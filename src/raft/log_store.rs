//! The Raft log and vote on disk: openraft's `RaftLogStorage` and `RaftLogReader` over redb.
//!
//! Called only by openraft: the Raft core appends, truncates, purges and saves the vote through
//! [`LogStore`]; replication and apply tasks read through cheap clones of it (`get_log_reader`).
//! [`RaftDb`] is the one redb file of a node; the state machine (`state_machine.rs`) keeps its
//! snapshot in the same file, so the server opens it once and hands clones to both.
//!
//! Every write is a redb transaction committed with `Durability::Immediate` (fsync) before openraft
//! is told it is done: `append` writes all the entries openraft hands it in one transaction, which
//! is the group commit. The one exception is the `committed` pointer, a restart hint that rides on
//! the next fsync (see `save_committed`). redb blocks, so all of it runs on tokio's blocking pool.

use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

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
/// The state machine's snapshot (`SNAPSHOT_*` keys in `state_machine.rs`). Declared here so that
/// [`RaftDb::open`] creates every table, and read transactions never find one missing.
pub(crate) const SNAPSHOT_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");

const META_VOTE: &str = "vote";
const META_COMMITTED: &str = "committed";
const META_LAST_PURGED: &str = "last_purged";

/// A node's redb database, shared by the log store and the state machine. Cloning is cheap.
#[derive(Clone)]
pub struct RaftDb {
    /// redb serializes write transactions itself and lets reads run beside them, so the handle is
    /// shared without a lock of ours.
    db: Arc<Database>,
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
        txn.open_table(SNAPSHOT_TABLE).map_err(db_err(what))?;
        txn.commit().map_err(db_err(what))?;
        Ok(RaftDb { db: Arc::new(db) })
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

    /// Same as [`RaftDb::read`], for callers that are not async (start-up).
    pub(crate) fn read_now<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&ReadTransaction) -> io::Result<T>,
    ) -> io::Result<T> {
        let txn = self.db.begin_read().map_err(db_err(what))?;
        f(&txn)
    }

    /// Runs `f` in a write transaction on the blocking pool and commits it with fsync. If `f`
    /// fails, nothing it wrote is kept.
    pub(crate) async fn write<T, F>(&self, what: &'static str, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> io::Result<T> + Send + 'static,
    {
        self.write_with(Durability::Immediate, what, f).await
    }

    /// Like [`RaftDb::write`], but with the given durability. `Durability::None` commits without
    /// fsync: visible at once, on disk with the next `Immediate` commit, lost by a crash before it.
    async fn write_with<T, F>(
        &self,
        durability: Durability,
        what: &'static str,
        f: F,
    ) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> io::Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        run_blocking(what, move || {
            let mut txn = db.begin_write().map_err(db_err(what))?;
            txn.set_durability(durability).map_err(db_err(what))?;
            let out = f(&txn)?;
            txn.commit().map_err(db_err(what))?;
            Ok(out)
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

/// openraft's log store and log reader: a handle on the shared [`RaftDb`], so a reader is a clone.
#[derive(Clone, Debug)]
pub struct LogStore {
    /// All state is in the database: clones (readers) see every write once it returns.
    db: RaftDb,
}

impl LogStore {
    /// A log store over `db`; the log, vote and pointers already in it are used as they are.
    pub fn new(db: RaftDb) -> LogStore {
        LogStore { db }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB>(&mut self, range: RB) -> io::Result<Vec<Entry>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + Send,
    {
        let bounds = half_open(&range);
        self.db
            .read("read log", move |txn| read_entries(txn, bounds, usize::MAX))
            .await
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
        self.db
            .read("read log", move |txn| {
                read_entries(txn, (start, Some(end)), REPLICATION_PAYLOAD_BYTES_MAX)
            })
            .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let what = "read log state";
        self.db
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
                // With no entry left (all purged), the last log id is the last purged one.
                let last_log_id = last.or(last_purged_log_id);
                Ok(LogState {
                    last_purged_log_id,
                    last_log_id,
                })
            })
            .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let vote = *vote;
        self.db
            .write("save vote", move |txn| put_json(txn, META_VOTE, &vote))
            .await
    }

    /// openraft awaits this between commit and apply, on every write, so it is not fsynced: an
    /// fsync here would double the latency of each client write. It reaches disk with the next
    /// append or vote (the log itself is always fsynced first). A crash may lose the newest value;
    /// the older one still names committed, durable entries, and openraft learns the rest from the
    /// leader, as it would if `committed` were not saved at all.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        let what = "save committed";
        self.db
            .write_with(Durability::None, what, move |txn| {
                put_json(txn, META_COMMITTED, &committed)
            })
            .await
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        let what = "read committed";
        self.db
            .read(what, |txn| {
                let table = txn.open_table(META_TABLE).map_err(db_err(what))?;
                // Stored as `Option<LogId>`: `save_committed(None)` is a value too.
                Ok(get_json::<Option<LogId>>(&table, META_COMMITTED)?.flatten())
            })
            .await
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let what = "append";
        let res = self
            .db
            .write(what, move |txn| {
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                for entry in &entries {
                    let bytes = serde_json::to_vec(entry).map_err(json_err(what))?;
                    table
                        .insert(entry.log_id.index, bytes.as_slice())
                        .map_err(db_err(what))?;
                }
                Ok(())
            })
            .await;
        match res {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let what = "truncate log";
        let from = match &last_log_id {
            Some(id) => Bound::Excluded(id.index),
            None => Bound::Unbounded,
        };
        tracing::debug!(?last_log_id, "truncating raft log after");
        self.db
            .write(what, move |txn| {
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                table
                    .retain_in((from, Bound::Unbounded), |_, _| false)
                    .map_err(db_err(what))
            })
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let what = "purge log";
        tracing::debug!(%log_id, "purging raft log up to");
        self.db
            .write(what, move |txn| {
                {
                    let meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
                    let prev: Option<LogId> = get_json(&meta, META_LAST_PURGED)?;
                    if prev.as_ref().is_some_and(|prev| *prev >= log_id) {
                        return Ok(());
                    }
                }
                put_json(txn, META_LAST_PURGED, &log_id)?;
                let mut table = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
                table
                    .retain_in(..=log_id.index, |_, _| false)
                    .map_err(db_err(what))
            })
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
