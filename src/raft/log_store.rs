//! The Raft log and vote on disk: openraft's `RaftLogStorage` and `RaftLogReader` over redb.
//!
//! Called only by openraft: the Raft core appends, truncates, purges and saves the vote through
//! [`LogStore`]; replication and apply tasks read through cheap clones of it (`get_log_reader`).
//! [`RaftDb`] is the one redb file of a node, opened once by the server; the state machine keeps
//! its snapshots as files in the same directory (`state_machine.rs`).
//!
//! Writes go to raft-log's write-ahead log (`wal.rs`, in `<data dir>/raft-log/`): an append
//! is handed to the WAL and returns, the WAL's flush thread writes and fsyncs whatever is
//! waiting in one go (the group commit), and only then is openraft told, so openraft hands over
//! the next batch while the previous one is being fsynced; readers see handed-over entries at
//! once. Votes, truncations and purges wait for their fsync; the `committed` pointer, a restart
//! hint, rides on the next one (see `save_committed`).
//!
//! The tail ([`Tail`]) keeps the newest entries decoded, up to [`RECENT_ENTRIES_BYTES_MAX`] /
//! [`RECENT_ENTRIES_MAX`]: replication and apply read what was just appended, and serving that
//! from memory saves a blocking-pool hop and a JSON decode per entry. Older entries are read
//! from the WAL on tokio's blocking pool.
//!
//! Here: [`LogStore`] and openraft's traits over it. Beside it: `wal.rs` (the [`Wal`] seam and
//! raft-log behind it, and moving an old data dir's log out of redb; the simulator, sim/, puts
//! its own disk behind the seam with [`LogStore::with_wal`]), `db.rs` (the node's redb file, which the state machine
//! keeps using, and shared helpers) and `tail.rs` (the in-memory tail).

use std::fmt;
use std::io;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use tokio::sync::oneshot;

use crate::raft::types::{entry_json_len_hint, Entry, LogId, TypeConfig, Vote};

mod db;
mod tail;
mod wal;

use db::{half_open, json_err, DiskEntries};
pub use db::{
    RaftDb, DB_CACHE_BYTES, DB_FILE_NAME, RECENT_ENTRIES_BYTES_MAX, RECENT_ENTRIES_MAX,
    REPLICATION_PAYLOAD_BYTES_MAX,
};
use steward_core::bugs::{self, Bug};
use tail::{assemble, Tail, Written};
pub use wal::{Flushed, Wal, WAL_CHUNK_BYTES_MAX, WAL_DIR_NAME};

/// openraft's log store and log reader. Clones share one WAL and one tail, so a reader (a
/// clone) sees every entry the store has accepted, flushed or not.
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

/// What the clones share.
struct Shared {
    /// The WAL. Held to hand records over (raft-log writes and fsyncs on its own thread) or to
    /// copy entries out; never across an await.
    wal: Mutex<Box<dyn Wal>>,
    /// The newest entries, durable or not; readers take what it has and ask the WAL only for
    /// the older part of a range. Held only to copy `Arc`s in or out, never during I/O.
    tail: Arc<Mutex<Tail>>,
    next_seq: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LogStore {
    /// The log store of `db`'s data directory: its WAL, opened (and, for a data dir of an
    /// earlier version, first moved out of redb) here.
    pub fn open(db: RaftDb) -> io::Result<LogStore> {
        LogStore::with_tail_limits(db, RECENT_ENTRIES_BYTES_MAX, RECENT_ENTRIES_MAX)
    }

    /// `open` with other limits on the durable entries kept in memory (tests use small ones).
    fn with_tail_limits(
        db: RaftDb,
        durable_bytes_max: usize,
        entries_max: usize,
    ) -> io::Result<LogStore> {
        let wal = wal::open(&db)?;
        Ok(LogStore::over(
            db,
            Box::new(wal),
            durable_bytes_max,
            entries_max,
        ))
    }

    /// The log store over another WAL than raft-log's in the data directory: the simulator's
    /// (sim/), which keeps what was fsynced apart from what was only written.
    pub fn with_wal(db: RaftDb, wal: Box<dyn Wal>) -> LogStore {
        LogStore::over(db, wal, RECENT_ENTRIES_BYTES_MAX, RECENT_ENTRIES_MAX)
    }

    fn over(
        db: RaftDb,
        wal: Box<dyn Wal>,
        durable_bytes_max: usize,
        entries_max: usize,
    ) -> LogStore {
        let shared = Arc::new(Shared {
            wal: Mutex::new(wal),
            tail: Arc::new(Mutex::new(Tail::new(durable_bytes_max, entries_max))),
            next_seq: AtomicU64::new(1),
        });
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

    /// Runs `write` on the WAL, asks for an fsync, and waits for it.
    async fn write_and_wait(
        &self,
        write: impl FnOnce(&mut dyn Wal) -> io::Result<()>,
    ) -> io::Result<()> {
        let (tx, rx) = oneshot::channel();
        {
            let mut wal = lock(&self.shared.wal);
            write(&mut **wal)?;
            wal.flush(
                true,
                Some(Flushed::new(move |r| {
                    let _ = tx.send(r);
                })),
            )?;
        }
        rx.await
            .map_err(|_| io::Error::other("raft-log dropped a flush"))?
    }

    /// Entries of `[start, end)`, checked for holes, cut at `bytes_max`: the cached ones from the
    /// tail, and the older part, if any, from the WAL.
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
            let shared = self.shared.clone();
            let disk = crate::seam::blocking("read log", move || {
                read_wal(&**lock(&shared.wal), disk, bytes_max)
            })
            .await?;
            // A truncation or purge meanwhile may have changed the WAL's part: read again.
            if lock(&self.shared.tail).generation == view.generation {
                return assemble(disk, view.cached, bytes_max);
            }
        }
    }
}

/// Reads the entries of `[start, end)` from the WAL, stopping early once `bytes_max` is reached
/// (after at least one entry). A gap inside the result is corruption and an error.
fn read_wal(
    wal: &dyn Wal,
    (start, end): (u64, Option<u64>),
    bytes_max: usize,
) -> io::Result<DiskEntries> {
    let mut out = DiskEntries {
        entries: Vec::new(),
        cut: false,
    };
    let end = end.unwrap_or(u64::MAX);
    if start >= end {
        return Ok(out);
    }
    let mut bytes = 0usize;
    wal.read(start, end, &mut |id, value| {
        if let Some((prev, _)) = out.entries.last() {
            db::check_next(prev, id.index)?;
        }
        if !out.entries.is_empty() && bytes + value.len() > bytes_max {
            out.cut = true;
            return Ok(false);
        }
        bytes += value.len();
        let entry: Entry = serde_json::from_slice(value).map_err(json_err("raft log entry"))?;
        out.entries.push((entry, value.len()));
        Ok(true)
    })?;
    Ok(out)
}

/// Whether appending `entries` to a log whose last entry (or last purged one) is `last` leaves
/// no hole: none may come after the index that follows the one before it. openraft's contract
/// makes the store answerable for that ("there must not be a hole in logs") and its own checks
/// of what it hands over are debug-only; a hole could not be told from a purge by any reader
/// later, so such an append is refused before anything is written, as an I/O error (openraft
/// then stops this node's Raft: a stopped node is found and restarted, a hole is not).
fn follows(last: Option<LogId>, entries: &[Arc<Entry>]) -> io::Result<()> {
    let mut next = last.map(|l| l.index + 1);
    for entry in entries {
        let index = entry.log_id.index;
        if let Some(next) = next.filter(|&n| index > n) {
            let msg = format!(
                "raft log append would leave a hole: entry {index} where {next} comes next; \
                 nothing written"
            );
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        }
        next = Some(index + 1);
    }
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB>(&mut self, range: RB) -> io::Result<Vec<Entry>>
    where
        RB: RangeBounds<u64> + Clone + fmt::Debug + Send,
    {
        self.read_range(half_open(&range), usize::MAX).await
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(lock(&self.shared.wal).vote())
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        self.read_range((start, Some(end)), REPLICATION_PAYLOAD_BYTES_MAX)
            .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let wal = lock(&self.shared.wal);
        // With no entry left (all purged), the last log id is the last purged one.
        Ok(LogState {
            last_purged_log_id: wal.purged(),
            last_log_id: wal.last().or(wal.purged()),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let vote = *vote;
        if bugs::active(Bug::VoteNotPersisted) {
            // The deliberate bug: written, but openraft is not made to wait for the fsync.
            let mut wal = lock(&self.shared.wal);
            wal.save_vote(vote)?;
            return wal.flush(false, None);
        }
        self.write_and_wait(|wal| wal.save_vote(vote)).await
    }

    /// openraft awaits this between commit and apply, on every write, so it is neither fsynced nor
    /// waited for: it reaches disk with the next fsynced write (the entries it names were
    /// fsynced before). A crash may lose the newest value; the older one still names committed,
    /// durable entries, and openraft learns the rest from the leader, as it would if `committed`
    /// were not saved at all.
    ///
    /// Nor is it handed to the flush thread on its own: the record waits in the WAL's buffer for
    /// the next append's flush. A flush of its own woke that thread for one `write` per commit
    /// on every node: with a lock handed from client to client, where each write waits for the
    /// one before, as many wake-ups as the appends themselves.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        let Some(committed) = committed else {
            return Ok(());
        };
        let mut wal = lock(&self.shared.wal);
        // Not behind what is saved (raft-log refuses that), nor past the log's end (a snapshot
        // install may say so before its purge): a hint left older is still true.
        let end = wal.last().or(wal.purged());
        if wal.committed() >= Some(committed) || end < Some(committed) {
            return Ok(());
        }
        wal.commit(committed)
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(lock(&self.shared.wal).committed())
    }

    /// Accepts the entries at once (readers see them immediately) and returns; raft-log's flush
    /// thread makes them durable together with whatever else is waiting, then `callback` is
    /// called.
    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Arc<Entry>> = entries.into_iter().map(Arc::new).collect();
        {
            let wal = lock(&self.shared.wal);
            follows(wal.last().max(wal.purged()), &entries)?;
        }
        let mut records = Vec::with_capacity(entries.len());
        let mut written = Vec::with_capacity(entries.len());
        let mut sized = Vec::with_capacity(entries.len());
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        for entry in entries {
            let mut bytes = Vec::with_capacity(entry_json_len_hint(&entry));
            serde_json::to_writer(&mut bytes, &*entry).map_err(json_err("write raft log"))?;
            written.push(Written {
                seq,
                index: entry.log_id.index,
            });
            let len = bytes.len();
            records.push((entry.log_id, bytes));
            sized.push((entry, len));
        }
        if let (Some(observer), Some((last, _))) = (&self.observer, sized.last()) {
            observer.on_appended(last.log_id.index);
        }
        lock(&self.shared.tail).append(seq, &sized);
        drop(sized);

        let queued = Instant::now();
        let tail = self.shared.tail.clone();
        let metrics = self.db.metrics.clone();
        // The deliberate bug: openraft hears the entries are durable before the fsync.
        let callback = if bugs::active(Bug::AckBeforeFsync) {
            callback.io_completed(Ok(()));
            None
        } else {
            Some(callback)
        };
        let done = Flushed::new(move |result: io::Result<()>| {
            match &result {
                Ok(()) => {
                    metrics.raft_append.observe(queued.elapsed().as_secs_f64());
                    metrics.raft_entries_written.inc_by(written.len() as u64);
                    let evicted = lock(&tail).mark_durable(&written);
                    // Entries may be freed here, after the lock is released.
                    drop(evicted);
                }
                Err(e) => tracing::error!(error = %e, "raft log write failed"),
            }
            if let Some(callback) = callback {
                callback.io_completed(result);
            }
        });
        let mut wal = lock(&self.shared.wal);
        wal.append(records)?;
        wal.flush(true, Some(done))
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
        self.write_and_wait(|wal| {
            let last = wal.last().map(|l| l.index);
            let purged = wal.purged().map(|p| p.index);
            if after >= last {
                return Ok(());
            }
            // Nothing at or before the last purged entry is left to drop.
            let from = after.max(purged).map_or(0, |a| a + 1);
            wal.truncate(from)
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        tracing::debug!(%log_id, "purging raft log up to");
        let removed = lock(&self.shared.tail).purge(log_id.index);
        // Entries may be freed here, after the lock is released.
        drop(removed);
        self.write_and_wait(|wal| wal.purge(log_id)).await
    }
}

#[cfg(test)]
mod tests;
