//! The log's newest entries in memory ([`Tail`]): accepted but not yet durable, then the most
//! recent durable ones up to the limits, and how a read joins them to what redb has.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use crate::raft::types::Entry;

use super::db::{check_next, DiskEntries};

/// The newest entries of the log, in memory: the ones `append` accepted whose batch is not yet
/// durable (they exist nowhere else), then the most recent durable ones, up to the limits. Keyed
/// by index, they are a suffix of the log: appends add at the end, truncations remove from the
/// end, purges and evictions from the front. Every change is made under the lock in the order
/// openraft made the call, before the op is queued for the writer, so a read sees the log as
/// openraft does.
pub(super) struct Tail {
    pub(super) entries: BTreeMap<u64, TailEntry>,
    /// Sum of `bytes` over the durable entries held.
    pub(super) durable_bytes: usize,
    pub(super) durable_bytes_max: usize,
    pub(super) entries_max: usize,
    /// One past the log's last index, once an append or a truncation since start has said it
    /// (None: redb alone knows). Reads never ask redb at or past it, so entries that a truncation
    /// removed but the writer has not yet deleted are not returned.
    pub(super) end: Option<u64>,
    /// Bumped by every truncation and purge: a read that went to redb retries if it changed
    /// meanwhile, so it never joins entries from before a truncation to cached ones after it.
    pub(super) generation: u64,
}

pub(super) struct TailEntry {
    /// The `append` call that put it here: the writer marks it durable only if no later append
    /// (after a truncation) replaced it.
    pub(super) seq: u64,
    pub(super) entry: Arc<Entry>,
    /// Its encoded length, as the append measured it for the writer: what a read counts
    /// against its byte limit, durable or not.
    pub(super) bytes: usize,
    /// Set once its batch is durable. Only durable entries may be evicted; until then this is
    /// the only copy.
    pub(super) durable: bool,
}

/// An entry the writer has made durable: the append call and its index.
pub(super) struct Written {
    pub(super) seq: u64,
    pub(super) index: u64,
}

/// What a read takes from the tail under its lock: the cached entries of the range (with their
/// encoded length) and the part of the range, before them, that only redb has.
pub(super) struct TailView {
    pub(super) cached: Vec<(Arc<Entry>, usize)>,
    /// `[start, end)`, `end == None` meaning unbounded; `None` if redb is not needed.
    pub(super) disk: Option<(u64, Option<u64>)>,
    pub(super) generation: u64,
}

impl Tail {
    pub(super) fn new(durable_bytes_max: usize, entries_max: usize) -> Tail {
        Tail {
            entries: BTreeMap::new(),
            durable_bytes: 0,
            durable_bytes_max,
            entries_max,
            end: None,
            generation: 0,
        }
    }

    /// Adds the entries of append call `seq`, each with its encoded length.
    pub(super) fn append(&mut self, seq: u64, entries: &[(Arc<Entry>, usize)]) {
        for (e, bytes) in entries {
            let index = e.log_id.index;
            let old = self.entries.insert(
                index,
                TailEntry {
                    seq,
                    entry: e.clone(),
                    bytes: *bytes,
                    durable: false,
                },
            );
            self.forget(old);
            self.end = Some(self.end.unwrap_or(0).max(index + 1));
        }
    }

    /// Removes the entries after `after` (all of them for `None`); returns them, to be dropped
    /// outside the lock.
    pub(super) fn truncate_after(&mut self, after: Option<u64>) -> BTreeMap<u64, TailEntry> {
        let from = after.map_or(0, |a| a + 1);
        let removed = self.entries.split_off(&from);
        self.forget_all(&removed);
        self.end = Some(from);
        self.generation += 1;
        removed
    }

    /// Removes the entries up to `index`; returns them, to be dropped outside the lock.
    pub(super) fn purge(&mut self, index: u64) -> BTreeMap<u64, TailEntry> {
        let kept = self.entries.split_off(&(index + 1));
        let removed = std::mem::replace(&mut self.entries, kept);
        self.forget_all(&removed);
        self.end = self.end.map(|end| end.max(index + 1));
        self.generation += 1;
        removed
    }

    /// Marks what the writer made durable, then evicts the oldest durable entries beyond the
    /// limits; returns those, to be dropped outside the lock.
    pub(super) fn mark_durable(&mut self, written: &[Written]) -> Vec<Arc<Entry>> {
        for w in written {
            if let Some(t) = self.entries.get_mut(&w.index) {
                if t.seq == w.seq && !t.durable {
                    t.durable = true;
                    self.durable_bytes += t.bytes;
                }
            }
        }
        let mut evicted = Vec::new();
        while self.durable_bytes > self.durable_bytes_max || self.entries.len() > self.entries_max {
            let Some(first) = self.entries.first_entry() else {
                break;
            };
            // Not durable yet: this is the only copy, so it stays, and the newer ones behind it.
            if !first.get().durable {
                break;
            }
            self.durable_bytes -= first.get().bytes;
            evicted.push(first.remove().entry);
        }
        evicted
    }

    pub(super) fn forget(&mut self, old: Option<TailEntry>) {
        if let Some(t) = old.filter(|t| t.durable) {
            self.durable_bytes -= t.bytes;
        }
    }

    pub(super) fn forget_all(&mut self, removed: &BTreeMap<u64, TailEntry>) {
        let bytes: usize = removed
            .values()
            .filter(|t| t.durable)
            .map(|t| t.bytes)
            .sum();
        self.durable_bytes -= bytes;
    }

    /// Splits `[start, end)` into the part only redb has and the cached entries after it.
    pub(super) fn view(&self, (start, end): (u64, Option<u64>)) -> TailView {
        let range = match end {
            Some(end) => self.entries.range(start..end),
            None => self.entries.range(start..),
        };
        let cached = range.map(|(_, t)| (t.entry.clone(), t.bytes)).collect();
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
pub(super) fn assemble(
    disk: DiskEntries,
    cached: Vec<(Arc<Entry>, usize)>,
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
        if !out.is_empty() && bytes + size > bytes_max {
            break;
        }
        bytes += size;
        out.push((*entry).clone());
    }
    Ok(out)
}
