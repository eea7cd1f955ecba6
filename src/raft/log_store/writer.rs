//! The writer thread: every op waiting goes into one redb transaction and one fsync (the group
//! commit), and only then are the callers told.

use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use openraft::storage::IOFlushed;
use redb::Durability;

use crate::raft::types::{Entry, LogId, TypeConfig, Vote};

use super::db::{
    db_err, get_json, json_err, put_json, RaftDb, LOG_TABLE, META_COMMITTED, META_LAST_PURGED,
    META_TABLE, META_VOTE,
};
use super::tail::Written;
use super::{lock, Shared};

/// One write for the writer thread. All ops waiting when the thread wakes go into ONE redb
/// transaction and ONE fsync: that is the group commit.
pub(super) enum WriteOp {
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
pub(super) const GROUP_COMMIT_OPS_MAX: usize = 4096;

/// The writer thread: takes every op waiting, writes them in one transaction, fsyncs once, then
/// completes them all. Exits when every `LogStore` clone is gone.
pub(super) fn writer_loop(
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
pub(super) fn write_batch(
    db: &RaftDb,
    batch: &[WriteOp],
    durable: bool,
) -> io::Result<Vec<Written>> {
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
