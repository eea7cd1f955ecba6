//! The Raft log on disk: raft-log's chunked write-ahead log (the crate openraft's author wrote
//! for Databend's meta service) in `<data dir>/raft-log/`.
//!
//! Why not redb, which held the log until issue 25's write-latency work: a redb commit rewrites
//! the B-tree path of every table it touches (about ten scattered 4 KiB pages for one entry),
//! and the fsync that follows costs with each page: 0.55 ms a commit on this project's 2-core
//! machine, against 0.12-0.2 ms for an append-only write of the same entry and its fsync. The
//! leader's and the follower's fsync are both on every write's path, so that difference is most
//! of a one-client write's latency beyond the network.
//!
//! Each entry is one WAL record: its log id and the entry as serde_json (the same bytes redb
//! held). The vote, the `committed` hint and purges are records too; raft-log checksums every
//! record, replays them on open, and cuts a record torn by a crash.
//!
//! Old data dirs: a node whose `raft-log/` does not exist yet moves the log, vote, `committed`
//! and last purged id out of `steward.redb` into a new WAL (written in `raft-log.migrating/`,
//! fsynced, then renamed into place) and only then deletes them from redb.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::codeq::{Decode, Encode};
use raft_log::{Callback, RaftLog, Types};
use redb::{Durability, ReadableDatabase, ReadableTable};

use crate::raft::types::{LeaderId, LogId, Vote};

use super::db::{
    db_err, get_json, json_err, EntryHead, RaftDb, LOG_TABLE, META_COMMITTED, META_LAST_PURGED,
    META_TABLE, META_VOTE,
};

/// The WAL's directory inside the node's data directory.
pub const WAL_DIR_NAME: &str = "raft-log";
/// Where an old data dir's log is copied before it is renamed to [`WAL_DIR_NAME`].
const MIGRATING_DIR_NAME: &str = "raft-log.migrating";

/// A chunk (one file) of the WAL holds at most this many bytes; purged chunks are deleted
/// whole. Entries of the open chunk stay in raft-log's cache, so this bounds that too.
///
/// Both caches are small: replication and apply read recent entries from the log store's tail
/// (`RECENT_ENTRIES_BYTES_MAX`, decoded), so what raft-log keeps in memory is a second copy of
/// them, as JSON; only a follower further behind than the tail reads older entries, and from
/// here it can read them from the file. At 8 MiB each, the two copies held up to 16 MiB per
/// node, most of what three nodes held above etcd's peak RSS after 64 clients' etcd puts.
pub const WAL_CHUNK_BYTES_MAX: usize = 2 << 20;
/// raft-log's cache of entries of closed chunks (the open chunk's are always cached).
const WAL_CACHE_BYTES_MAX: usize = 2 << 20;
const WAL_CACHE_ENTRIES_MAX: usize = 4096;
/// Replaying a chunk on open reads it this many bytes at a time.
const WAL_READ_BUFFER_BYTES: usize = 4 << 20;

/// raft-log's types for steward's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct WalTypes;

/// `((term, node), index)`: ordered as openraft orders log ids (leader id, then index).
pub(super) type WalLogId = ((u64, u64), u64);

/// Stored bytes: an entry as serde_json, or the vote as serde_json.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored(pub(super) Vec<u8>);

impl Encode for Stored {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        self.0.encode(w)
    }
}

impl Decode for Stored {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        Vec::<u8>::decode(r).map(Stored)
    }
}

/// The vote, kept as its JSON; ordered as openraft orders votes, which raft-log checks so a
/// saved vote never goes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredVote(pub(super) Vote);

impl PartialOrd for StoredVote {
    /// openraft's order; two votes it cannot order (two candidates of one term) compare as
    /// `Greater`, so raft-log stores whatever openraft decided to save.
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(
            self.0
                .partial_cmp(&other.0)
                .unwrap_or(std::cmp::Ordering::Greater),
        )
    }
}

impl Encode for StoredVote {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        let bytes = serde_json::to_vec(&self.0).map_err(io::Error::other)?;
        bytes.encode(w)
    }
}

impl Decode for StoredVote {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        let bytes = Vec::<u8>::decode(r)?;
        serde_json::from_slice(&bytes)
            .map(StoredVote)
            .map_err(json_err("raft-log vote"))
    }
}

/// The write-ahead log under [`super::LogStore`]: raft-log's in the data directory on a node,
/// the simulated disk's in the simulator (sim/). The log store keeps the tail, the order of
/// what it hands over and what openraft is told; a WAL keeps records and makes them durable.
///
/// Records are kept in the order they are handed over, and a crash keeps a prefix of them: all
/// of those fsynced (a flush with `sync`), and perhaps some written after. Every call returns
/// at once; only `flush` with `sync` waits for the disk, and then calls its [`Flushed`].
pub trait Wal: Send + 'static {
    /// The last vote saved.
    fn vote(&self) -> Option<Vote>;
    /// The last entry's log id (`None` when no entry is left, purged or never written).
    fn last(&self) -> Option<LogId>;
    /// The last purged entry's log id.
    fn purged(&self) -> Option<LogId>;
    /// The last `committed` hint saved.
    fn committed(&self) -> Option<LogId>;
    /// Calls `each` with the entries of `[start, end)`, in index order, while it answers true.
    fn read(
        &self,
        start: u64,
        end: u64,
        each: &mut dyn FnMut(LogId, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()>;
    /// Entries (log id and stored bytes), following the last one.
    fn append(&mut self, records: Vec<(LogId, Vec<u8>)>) -> io::Result<()>;
    fn save_vote(&mut self, vote: Vote) -> io::Result<()>;
    /// The `committed` hint; never behind the last one saved.
    fn commit(&mut self, committed: LogId) -> io::Result<()>;
    /// Drops the entries from index `from` on.
    fn truncate(&mut self, from: u64) -> io::Result<()>;
    /// Drops the entries up to and including `upto`.
    fn purge(&mut self, upto: LogId) -> io::Result<()>;
    /// Writes out what was handed over; with `sync`, also fsyncs it, then calls `done` (on the
    /// WAL's own thread or task).
    fn flush(&mut self, sync: bool, done: Option<Flushed>) -> io::Result<()>;
}

/// What to do once a flush is durable (or failed).
pub struct Flushed(Box<dyn FnOnce(io::Result<()>) + Send>);

impl Flushed {
    pub fn new(f: impl FnOnce(io::Result<()>) + Send + 'static) -> Flushed {
        Flushed(Box::new(f))
    }

    /// Tells it how the flush ended.
    pub fn done(self, result: io::Result<()>) {
        (self.0)(result)
    }
}

impl Callback for Flushed {
    fn send(self, res: io::Result<()>) {
        self.done(res)
    }
}

impl Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = Stored;
    type Vote = StoredVote;
    type Callback = Flushed;
    type UserData = Stored;

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Stored) -> u64 {
        payload.0.len() as u64
    }
}

/// raft-log's WAL.
pub(super) type DiskWal = RaftLog<WalTypes>;

impl Wal for DiskWal {
    fn vote(&self) -> Option<Vote> {
        self.log_state().vote().map(|v| v.0)
    }

    fn last(&self) -> Option<LogId> {
        self.log_state().last().map(log_id)
    }

    fn purged(&self) -> Option<LogId> {
        self.log_state().purged().map(log_id)
    }

    fn committed(&self) -> Option<LogId> {
        self.log_state().committed().map(log_id)
    }

    fn read(
        &self,
        start: u64,
        end: u64,
        each: &mut dyn FnMut(LogId, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        for item in RaftLog::read(self, start, end) {
            let (id, Stored(value)) = item?;
            if !each(log_id(&id), &value)? {
                break;
            }
        }
        Ok(())
    }

    fn append(&mut self, records: Vec<(LogId, Vec<u8>)>) -> io::Result<()> {
        let records = records
            .into_iter()
            .map(|(id, bytes)| (wal_id(&id), Stored(bytes)));
        RaftLogWriter::append(self, records).map(drop)
    }

    fn save_vote(&mut self, vote: Vote) -> io::Result<()> {
        RaftLogWriter::save_vote(self, StoredVote(vote)).map(drop)
    }

    fn commit(&mut self, committed: LogId) -> io::Result<()> {
        RaftLogWriter::commit(self, wal_id(&committed)).map(drop)
    }

    fn truncate(&mut self, from: u64) -> io::Result<()> {
        RaftLogWriter::truncate(self, from).map(drop)
    }

    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        RaftLogWriter::purge(self, wal_id(&upto)).map(drop)
    }

    fn flush(&mut self, sync: bool, done: Option<Flushed>) -> io::Result<()> {
        RaftLogWriter::flush(self, sync, done)
    }
}

pub(super) fn wal_id(log_id: &LogId) -> WalLogId {
    (
        (log_id.leader_id.term, log_id.leader_id.node_id),
        log_id.index,
    )
}

pub(super) fn log_id(id: &WalLogId) -> LogId {
    LogId::new(
        LeaderId {
            term: id.0 .0,
            node_id: id.0 .1,
        },
        id.1,
    )
}

pub(super) fn config(dir: &Path) -> raft_log::Config {
    let mut config = raft_log::Config::new(dir.display());
    config.log_cache_capacity = Some(WAL_CACHE_BYTES_MAX);
    config.log_cache_max_items = Some(WAL_CACHE_ENTRIES_MAX);
    config.wal.chunk_max_size = Some(WAL_CHUNK_BYTES_MAX);
    config.wal.read_buffer_size = Some(WAL_READ_BUFFER_BYTES);
    // Every flush is a group commit: the flush thread writes and fsyncs, in one go, every
    // request queued while the previous one was being fsynced (chunked-wal as patched in
    // third_party/chunked-wal; upstream took one request per fsync when this wait is zero).
    // Waiting for requests not yet queued would only add latency.
    config.wal.flush_batch_wait = Some(Duration::ZERO);
    config
}

/// Opens the node's WAL, first moving an old data dir's log out of redb if there is one.
pub(super) fn open(db: &RaftDb) -> io::Result<DiskWal> {
    let dir = db.dir().join(WAL_DIR_NAME);
    if !dir.exists() {
        migrate(db, &dir)?;
    }
    let wal = RaftLog::open(Arc::new(config(&dir)))?;
    // A migration that stopped after its rename left the old rows: they are copied already.
    clear_redb_log(db)?;
    Ok(wal)
}

/// Waits for everything written to `wal` to be durable.
pub(super) fn flush_blocking(wal: &mut DiskWal) -> io::Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    RaftLogWriter::flush(
        wal,
        true,
        Some(Flushed::new(move |r| {
            let _ = std::sync::mpsc::SyncSender::send(&tx, r);
        })),
    )?;
    rx.recv()
        .map_err(|_| io::Error::other("raft-log dropped a flush"))?
}

/// Copies the log kept in redb by earlier versions into a new WAL at `dir`.
fn migrate(db: &RaftDb, dir: &Path) -> io::Result<()> {
    let what = "read the raft log to move it";
    let tmp: PathBuf = db.dir().join(MIGRATING_DIR_NAME);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    let database = db.db.read().unwrap_or_else(|p| p.into_inner());
    let txn = database.begin_read().map_err(db_err(what))?;
    let meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
    let vote: Option<Vote> = get_json(&meta, META_VOTE)?;
    let committed: Option<LogId> = get_json::<Option<LogId>>(&meta, META_COMMITTED)?.flatten();
    let purged: Option<LogId> = get_json(&meta, META_LAST_PURGED)?;
    let log = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
    let mut moved = 0u64;
    {
        let mut wal: DiskWal = RaftLog::open(Arc::new(config(&tmp)))?;
        if let Some(purged) = &purged {
            Wal::purge(&mut wal, *purged)?;
        }
        for item in log.iter().map_err(db_err(what))? {
            let (_, value) = item.map_err(db_err(what))?;
            let head: EntryHead =
                serde_json::from_slice(value.value()).map_err(json_err("raft log entry"))?;
            Wal::append(&mut wal, vec![(head.log_id, value.value().to_vec())])?;
            moved += 1;
        }
        if let Some(vote) = vote {
            Wal::save_vote(&mut wal, vote)?;
        }
        if let Some(committed) = &committed {
            Wal::commit(&mut wal, *committed)?;
        }
        flush_blocking(&mut wal)?;
    }
    drop(log);
    drop(meta);
    drop(txn);
    drop(database);
    std::fs::rename(&tmp, dir)?;
    std::fs::File::open(db.dir())?.sync_all()?;
    if moved > 0 || vote.is_some() {
        tracing::info!(
            entries = moved,
            "moved the raft log from steward.redb to {WAL_DIR_NAME}/"
        );
    }
    Ok(())
}

/// Deletes the log, vote and pointers earlier versions kept in redb, once the WAL has them.
fn clear_redb_log(db: &RaftDb) -> io::Result<()> {
    let what = "delete the moved raft log";
    let database = db.db.read().unwrap_or_else(|p| p.into_inner());
    {
        let txn = database.begin_read().map_err(db_err(what))?;
        let log = txn.open_table(LOG_TABLE).map_err(db_err(what))?;
        let meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
        let empty = log.first().map_err(db_err(what))?.is_none()
            && meta.first().map_err(db_err(what))?.is_none();
        if empty {
            return Ok(());
        }
    }
    let mut txn = database.begin_write().map_err(db_err(what))?;
    txn.set_durability(Durability::Immediate)
        .map_err(db_err(what))?;
    txn.open_table(LOG_TABLE)
        .map_err(db_err(what))?
        .retain(|_, _| false)
        .map_err(db_err(what))?;
    {
        let mut meta = txn.open_table(META_TABLE).map_err(db_err(what))?;
        for key in [META_VOTE, META_COMMITTED, META_LAST_PURGED] {
            meta.remove(key).map_err(db_err(what))?;
        }
    }
    txn.commit().map_err(db_err(what))?;
    Ok(())
}
