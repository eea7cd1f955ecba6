//! The node's redb file ([`RaftDb`]) and what reads it: the tables, JSON helpers, and the
//! range reads that return consecutive entries or an error.

use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::metrics::Metrics;
use crate::raft::types::{Entry, LogId};

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
pub(super) const LOG_TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// `META_*` key -> serde_json value.
pub(super) const META_TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

pub(super) const META_VOTE: &str = "vote";
pub(super) const META_COMMITTED: &str = "committed";
pub(super) const META_LAST_PURGED: &str = "last_purged";

/// A node's redb database, shared by the log store and the state machine. Cloning is cheap.
#[derive(Clone)]
pub struct RaftDb {
    /// redb serializes write transactions itself and lets reads run beside them: every
    /// transaction takes this lock shared, and only `compact` takes it exclusively (redb
    /// compacts only with no transaction open). Held on the writer thread and the blocking
    /// pool, never across an await.
    pub(super) db: Arc<RwLock<Database>>,
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
        let db = Database::builder()
            .set_cache_size(DB_CACHE_BYTES)
            .create(&path)
            .map_err(|e| io::Error::other(format!("redb open {}: {e}", path.display())))?;
        RaftDb::over(db, dir, metrics)
    }

    /// A database held in memory, with snapshot files in `dir`: for the simulator (sim/), whose
    /// log is not in redb (`LogStore::with_wal`) and which does no file I/O it cannot control.
    pub fn open_in_memory(dir: &Path) -> io::Result<RaftDb> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(db_err("open in memory"))?;
        RaftDb::over(db, dir, Arc::default())
    }

    fn over(db: Database, dir: &Path, metrics: Arc<Metrics>) -> io::Result<RaftDb> {
        let what = "open";
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
        crate::seam::blocking(what, move || {
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

/// The first field of a stored entry, read without decoding the payload.
#[derive(Deserialize)]
pub(super) struct EntryHead {
    pub(super) log_id: LogId,
}

/// `range` as `[start, end)`; `end == None` means unbounded.
pub(super) fn half_open(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
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
pub(super) struct DiskEntries {
    pub(super) entries: Vec<(Entry, usize)>,
    /// `bytes_max` stopped the read before the end of its range: nothing may follow these.
    pub(super) cut: bool,
}

/// A read must return consecutive indexes: a gap is corruption, and an error.
pub(super) fn check_next(prev: &Entry, index: u64) -> io::Result<()> {
    if index == prev.log_id.index + 1 {
        return Ok(());
    }
    let msg = format!("hole in raft log: index {} then {index}", prev.log_id.index);
    Err(io::Error::new(io::ErrorKind::InvalidData, msg))
}
