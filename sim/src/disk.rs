//! The simulated disk: one per node, outliving the node's crashes.
//!
//! It holds the node's WAL as the records handed to it, in order, and how many of them are
//! durable: a record is durable once an fsync that covers it has completed. A crash keeps the
//! durable records and, when the seed says so, some of the records written after them (the
//! operating system had put those pages out): a prefix, as raft-log's replay, which stops at the
//! first torn record, would keep. Everything else is lost.
//!
//! [`SimWal`] is steward's `Wal` over it: what raft-log's `RaftLog` keeps in memory (the
//! entries, the vote, the `committed` hint, the last purged id), rebuilt from the surviving
//! records when the node starts again. An fsync takes simulated time, drawn from the seed, and
//! completes in the order asked; it can be stalled (a slow disk) or fail.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use steward::raft::log_store::{Flushed, Wal};
use steward::raft::types::{LogId, NodeId, Vote};
use tokio::sync::mpsc;

use crate::trace::Trace;

/// How the disk misbehaves; drawn from the seed per run.
#[derive(Clone, Debug)]
pub struct DiskFaults {
    /// An fsync takes this long, in simulated microseconds (uniform).
    pub fsync_us: (u64, u64),
    /// The chance that a crash keeps some of the records written but not fsynced.
    pub torn_keep: f64,
    /// The chance that one fsync fails (the node's Raft then stops, as on a real I/O error).
    pub fsync_fail: f64,
}

impl Default for DiskFaults {
    fn default() -> Self {
        DiskFaults {
            fsync_us: (200, 4_000),
            torn_keep: 0.5,
            fsync_fail: 0.0,
        }
    }
}

#[derive(Clone, Debug)]
enum Record {
    Entry(LogId, Arc<[u8]>),
    Vote(Vote),
    Commit(LogId),
    Truncate(u64),
    Purge(LogId),
}

/// One node's disk. Clones share it.
#[derive(Clone)]
pub struct Disk {
    inner: Arc<Mutex<Inner>>,
    node: NodeId,
    trace: Trace,
}

struct Inner {
    records: Vec<Record>,
    /// `records[..synced]` are durable.
    synced: usize,
    /// Bumped by every crash and start: a `SimWal` of an older incarnation writes nothing.
    incarnation: u64,
    faults: DiskFaults,
    rng: SmallRng,
    /// Until this simulated instant, every fsync waits (a stalled disk).
    stalled_until: Option<tokio::time::Instant>,
    /// The next fsync fails (an I/O error).
    fail_next: bool,
}

/// An fsync asked for: the records it covers, and whom to tell.
struct FlushJob {
    upto: usize,
    done: Option<Flushed>,
}

impl Disk {
    pub fn new(node: NodeId, seed: u64, faults: DiskFaults, trace: Trace) -> Disk {
        Disk {
            inner: Arc::new(Mutex::new(Inner {
                records: Vec::new(),
                synced: 0,
                incarnation: 0,
                faults,
                rng: SmallRng::seed_from_u64(seed),
                stalled_until: None,
                fail_next: false,
            })),
            node,
            trace,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node starts: a WAL rebuilt from what the disk holds, and its fsync task.
    pub fn open(&self) -> SimWal {
        let (incarnation, records) = {
            let mut inner = self.lock();
            inner.incarnation += 1;
            (inner.incarnation, inner.records.clone())
        };
        let (flushes, jobs) = mpsc::unbounded_channel();
        tokio::spawn(self.clone().fsyncs(incarnation, jobs));
        let ids = Arc::new(Mutex::new(BTreeMap::new()));
        let mut wal = SimWal {
            disk: self.clone(),
            incarnation,
            flushes,
            entries: BTreeMap::new(),
            ids: ids.clone(),
            vote: None,
            committed: None,
            purged: None,
        };
        for record in records {
            wal.replay(record);
        }
        wal
    }

    /// The node crashes: whatever was not fsynced is lost, but for a prefix of it the seed
    /// may keep. Answers how many records were lost.
    pub fn crash(&self) -> usize {
        let mut inner = self.lock();
        inner.incarnation += 1;
        let unsynced = inner.records.len() - inner.synced;
        let torn_keep = inner.faults.torn_keep;
        let keep = if unsynced > 0 && inner.rng.random_bool(torn_keep) {
            inner.rng.random_range(0..=unsynced)
        } else {
            0
        };
        let len = inner.synced + keep;
        inner.records.truncate(len);
        // Kept records were written to the platter: they are as durable as the rest now.
        inner.synced = len;
        unsynced - keep
    }

    /// The machine is replaced by an empty one: every record is gone. Its incarnations go on
    /// counting, so nothing an older one still runs writes here.
    pub fn wipe(&self) {
        let mut inner = self.lock();
        inner.incarnation += 1;
        inner.records.clear();
        inner.synced = 0;
        inner.stalled_until = None;
        inner.fail_next = false;
    }

    /// The next fsync fails: the write is not durable, and the log store is told so.
    pub fn fail_next_fsync(&self) {
        self.lock().fail_next = true;
    }

    /// Every fsync from now until `until` waits for it.
    pub fn stall(&self, until: tokio::time::Instant) {
        self.lock().stalled_until = Some(until);
    }

    /// The node's fsync task: one fsync at a time, in the order asked.
    async fn fsyncs(self, incarnation: u64, mut jobs: mpsc::UnboundedReceiver<FlushJob>) {
        while let Some(job) = jobs.recv().await {
            let (latency, stalled, fails) = {
                let mut inner = self.lock();
                let (lo, hi) = inner.faults.fsync_us;
                let latency = Duration::from_micros(inner.rng.random_range(lo..=hi));
                let fail = inner.faults.fsync_fail;
                let fails = std::mem::take(&mut inner.fail_next)
                    || (fail > 0.0 && inner.rng.random_bool(fail));
                (latency, inner.stalled_until, fails)
            };
            if let Some(until) = stalled {
                tokio::time::sleep_until(until).await;
            }
            tokio::time::sleep(latency).await;
            let result = {
                let mut inner = self.lock();
                if inner.incarnation != incarnation {
                    // The node crashed meanwhile: nobody is told anything.
                    return;
                }
                if fails {
                    Err(io::Error::other("simulated fsync failure"))
                } else {
                    inner.synced = inner.synced.max(job.upto.min(inner.records.len()));
                    Ok(())
                }
            };
            if let Err(e) = &result {
                self.trace
                    .log(&format!("n{}", self.node), format!("fsync failed: {e}"));
            }
            if let Some(done) = job.done {
                done.done(result);
            }
        }
    }
}

/// FNV-1a: a stable hash of an entry's bytes (std's hasher is seeded per process).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// steward's `Wal` on a simulated disk.
pub struct SimWal {
    disk: Disk,
    incarnation: u64,
    flushes: mpsc::UnboundedSender<FlushJob>,
    entries: BTreeMap<u64, (LogId, Arc<[u8]>)>,
    /// The log ids of `entries` and a hash of each one's bytes, for the checker (committed
    /// entries never change).
    ids: Arc<Mutex<BTreeMap<u64, (LogId, u64)>>>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
}

impl SimWal {
    /// Which start of its node this is (1, 2, ...; crashes count too).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The log ids this WAL holds, shared with the checker.
    pub fn ids(&self) -> Arc<Mutex<BTreeMap<u64, (LogId, u64)>>> {
        self.ids.clone()
    }

    fn ids_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (LogId, u64)>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `record` to the in-memory view (on replay, and as it is written).
    fn replay(&mut self, record: Record) {
        match record {
            Record::Entry(id, bytes) => {
                self.ids_lock().insert(id.index, (id, fnv(&bytes)));
                self.entries.insert(id.index, (id, bytes));
            }
            Record::Vote(vote) => self.vote = Some(vote),
            Record::Commit(id) => self.committed = Some(id),
            Record::Truncate(from) => {
                self.entries.split_off(&from);
                self.ids_lock().split_off(&from);
            }
            Record::Purge(upto) => {
                let kept = self.entries.split_off(&(upto.index + 1));
                self.entries = kept;
                let kept = self.ids_lock().split_off(&(upto.index + 1));
                *self.ids_lock() = kept;
                self.purged = Some(upto);
            }
        }
    }

    /// Writes `record`: into the disk's records (not yet durable) and the in-memory view.
    fn write(&mut self, record: Record) -> io::Result<()> {
        {
            let mut inner = self.disk.lock();
            if inner.incarnation != self.incarnation {
                return Err(io::Error::other("the node crashed"));
            }
            inner.records.push(record.clone());
        }
        self.replay(record);
        Ok(())
    }
}

impl Wal for SimWal {
    fn vote(&self) -> Option<Vote> {
        self.vote
    }

    fn last(&self) -> Option<LogId> {
        self.entries.values().next_back().map(|(id, _)| *id)
    }

    fn purged(&self) -> Option<LogId> {
        self.purged
    }

    fn committed(&self) -> Option<LogId> {
        self.committed
    }

    fn read(
        &self,
        start: u64,
        end: u64,
        each: &mut dyn FnMut(LogId, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        for (id, bytes) in self.entries.range(start..end).map(|(_, e)| e) {
            if !each(*id, bytes)? {
                break;
            }
        }
        Ok(())
    }

    fn append(&mut self, records: Vec<(LogId, Vec<u8>)>) -> io::Result<()> {
        for (id, bytes) in records {
            self.write(Record::Entry(id, bytes.into()))?;
        }
        Ok(())
    }

    fn save_vote(&mut self, vote: Vote) -> io::Result<()> {
        self.write(Record::Vote(vote))
    }

    fn commit(&mut self, committed: LogId) -> io::Result<()> {
        self.write(Record::Commit(committed))
    }

    fn truncate(&mut self, from: u64) -> io::Result<()> {
        self.write(Record::Truncate(from))
    }

    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        self.write(Record::Purge(upto))
    }

    fn flush(&mut self, sync: bool, done: Option<Flushed>) -> io::Result<()> {
        let upto = {
            let inner = self.disk.lock();
            if inner.incarnation != self.incarnation {
                return Err(io::Error::other("the node crashed"));
            }
            inner.records.len()
        };
        if !sync {
            // Handed to the operating system: not durable, and nothing to wait for.
            if let Some(done) = done {
                done.done(Ok(()));
            }
            return Ok(());
        }
        self.flushes
            .send(FlushJob { upto, done })
            .map_err(|_| io::Error::other("the node's disk stopped"))
    }
}
