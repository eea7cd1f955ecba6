//! Tests of the log store: the WAL, the in-memory tail and their agreement, and moving an old
//! data dir's log out of redb.

use crate::state::ObjectCommand;
use openraft::entry::RaftEntry;
use openraft::type_config::TypeConfigExt;

use super::tail::{Tail, Written};
use super::*;
use crate::raft::types::LeaderId;
use crate::state::{Command, Proposal, Resource};
use std::path::Path;

/// Entries as the store hands them to the tail: each with its encoded length.
fn sized(entries: &[Arc<Entry>]) -> Vec<(Arc<Entry>, usize)> {
    entries
        .iter()
        .map(|e| (e.clone(), serde_json::to_vec(&**e).expect("encode").len()))
        .collect()
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

/// A create whose object names its term and index, with `pad` bytes of spec, so entries that
/// differ only in term differ in content too.
fn create(term: u64, index: u64, pad: usize) -> Entry {
    let name = format!("t{term}-i{index}");
    let json = format!(
        r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"{name}"}},"spec":{{"pad":"{}"}}}}"#,
        "x".repeat(pad)
    );
    let object = Resource::from_json(&json).expect("valid test object");
    let command = Command::Objects(ObjectCommand::Create {
        object,
        fence: None,
    });
    Entry::new_normal(
        log_id(term, index),
        Proposal::new(index, None, None, command),
    )
}

fn creates(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|i| create(term, i, 16)).collect()
}

/// Entries as JSON, to compare them (entries have no `PartialEq`).
fn json(entries: &[Entry]) -> String {
    serde_json::to_string(entries).expect("entries encode")
}

fn ids(entries: &[Entry]) -> Vec<(u64, u64)> {
    entries
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

/// The indexes the tail holds.
fn cached(store: &LogStore) -> Vec<u64> {
    lock(&store.shared.tail).entries.keys().copied().collect()
}

/// What a fresh store over the reopened database returns for `range` (the store must be
/// dropped first: raft-log locks its directory).
async fn reread(dir: &Path, range: std::ops::Range<u64>) -> io::Result<Vec<Entry>> {
    let mut store = LogStore::open(RaftDb::open(dir)?)?;
    assert!(cached(&store).is_empty());
    store.try_get_log_entries(range).await
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
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        let entries = (1..=5).map(|i| Entry::new_blank(log_id(2, i))).collect();
        append(&mut store, entries).await?;
        store.save_vote(&Vote::new_committed(2, 1)).await?;
        store.save_committed(Some(log_id(2, 4))).await?;
        store.purge(log_id(2, 2)).await?;
        store.truncate_after(Some(log_id(2, 4))).await?;
    }

    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
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
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        append(&mut store, creates(3, 1..=7)).await?;
        // Past the log's end: not saved, the older value stays.
        store.save_committed(Some(log_id(3, 9))).await?;
        assert_eq!(store.read_committed().await?, None);
        store.save_committed(Some(log_id(3, 7))).await?;
        assert_eq!(store.read_committed().await?, Some(log_id(3, 7)));
        store.save_vote(&Vote::new_committed(3, 1)).await?;
    }
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    assert_eq!(store.read_committed().await?, Some(log_id(3, 7)));
    Ok(())
}

/// A WAL that counts the flushes handed to it (and passes every call on).
struct CountingWal {
    inner: Box<dyn Wal>,
    flushes: Arc<AtomicU64>,
}

impl Wal for CountingWal {
    fn vote(&self) -> Option<Vote> {
        self.inner.vote()
    }
    fn last(&self) -> Option<LogId> {
        self.inner.last()
    }
    fn purged(&self) -> Option<LogId> {
        self.inner.purged()
    }
    fn committed(&self) -> Option<LogId> {
        self.inner.committed()
    }
    fn read(
        &self,
        start: u64,
        end: u64,
        each: &mut dyn FnMut(LogId, &[u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        self.inner.read(start, end, each)
    }
    fn append(&mut self, records: Vec<(LogId, Vec<u8>)>) -> io::Result<()> {
        self.inner.append(records)
    }
    fn save_vote(&mut self, vote: Vote) -> io::Result<()> {
        self.inner.save_vote(vote)
    }
    fn commit(&mut self, committed: LogId) -> io::Result<()> {
        self.inner.commit(committed)
    }
    fn truncate(&mut self, from: u64) -> io::Result<()> {
        self.inner.truncate(from)
    }
    fn purge(&mut self, upto: LogId) -> io::Result<()> {
        self.inner.purge(upto)
    }
    fn flush(&mut self, sync: bool, done: Option<Flushed>) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.inner.flush(sync, done)
    }
}

/// Saving `committed` wakes no flush thread: the record goes out with the next append's flush,
/// and is on disk once that append is.
#[tokio::test]
async fn committed_waits_for_the_next_append_s_flush() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let flushes = Arc::new(AtomicU64::new(0));
    {
        let db = RaftDb::open(dir.path())?;
        let inner = Box::new(wal::open(&db)?);
        let counting = CountingWal {
            inner,
            flushes: flushes.clone(),
        };
        let mut store = LogStore::with_wal(db, Box::new(counting));
        append(&mut store, creates(2, 1..=3)).await?;
        assert_eq!(flushes.load(Ordering::Relaxed), 1);
        store.save_committed(Some(log_id(2, 2))).await?;
        store.save_committed(Some(log_id(2, 3))).await?;
        assert_eq!(flushes.load(Ordering::Relaxed), 1, "save_committed flushed");
        assert_eq!(store.read_committed().await?, Some(log_id(2, 3)));
        append(&mut store, creates(2, 4..=4)).await?;
        assert_eq!(flushes.load(Ordering::Relaxed), 2);
    }
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    assert_eq!(store.read_committed().await?, Some(log_id(2, 3)));
    assert_eq!(store.get_log_state().await?.last_log_id, Some(log_id(2, 4)));
    Ok(())
}

/// A replication read stops at the byte limit but always returns at least one entry.
#[tokio::test]
async fn limited_read_respects_byte_limit() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    let entries = (1..=3).map(|i| Entry::new_blank(log_id(1, i))).collect();
    append(&mut store, entries).await?;
    let one = read_wal(&**lock(&store.shared.wal), (1, Some(4)), 1)?;
    assert_eq!(one.entries.len(), 1);
    assert!(one.cut);
    assert_eq!(store.limited_get_log_entries(1, 4).await?.len(), 3);
    assert!(store.limited_get_log_entries(4, 4).await?.is_empty());
    Ok(())
}

/// The durable tail is exactly what the WAL returns after a reopen, and what the WAL holds
/// now.
#[tokio::test]
async fn tail_reads_come_from_memory_and_match_the_wal() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (tail, limited) = {
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        append(&mut store, creates(1, 1..=10)).await?;
        append(&mut store, creates(1, 11..=20)).await?;
        assert_eq!(cached(&store), (1..=20).collect::<Vec<_>>());
        let tail = store.try_get_log_entries(5..21).await?;
        let limited = store.limited_get_log_entries(5, 21).await?;
        (tail, limited)
    };
    let disk = reread(dir.path(), 5..21).await?;
    assert_eq!(ids(&disk), (5..=20).map(|i| (1, i)).collect::<Vec<_>>());
    assert_eq!(json(&tail), json(&disk));
    assert_eq!(json(&limited), json(&disk));

    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    append(&mut store, creates(1, 21..=30)).await?;
    assert_eq!(cached(&store), (21..=30).collect::<Vec<_>>());
    let tail = store.try_get_log_entries(25..31).await?;
    let wal = read_wal(&**lock(&store.shared.wal), (25, Some(31)), usize::MAX)?;
    let wal: Vec<Entry> = wal.entries.into_iter().map(|(e, _)| e).collect();
    assert_eq!(json(&tail), json(&wal));
    assert_eq!(
        json(&store.limited_get_log_entries(25, 31).await?),
        json(&tail)
    );
    Ok(())
}

/// Only the newest entries stay cached; a range starting before them reads the rest from
/// the WAL and joins the two with no gap, also with the byte limit of a replication read.
#[tokio::test]
async fn read_straddling_the_wal_and_the_tail() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (all, limited) = {
        let mut store = LogStore::with_tail_limits(RaftDb::open(dir.path())?, usize::MAX, 4)?;
        for i in 1..=10 {
            append(&mut store, creates(1, i..=i)).await?;
        }
        assert_eq!(cached(&store), vec![7, 8, 9, 10]);
        let all = store.try_get_log_entries(2..11).await?;
        assert_eq!(ids(&all), (2..=10).map(|i| (1, i)).collect::<Vec<_>>());
        let limited = store.limited_get_log_entries(5, 9).await?;
        assert_eq!(ids(&limited), (5..=8).map(|i| (1, i)).collect::<Vec<_>>());
        (all, limited)
    };
    assert_eq!(json(&reread(dir.path(), 2..11).await?), json(&all));
    assert_eq!(json(&reread(dir.path(), 5..9).await?), json(&limited));
    Ok(())
}

/// A truncation drops the cached entries after it, whether it cuts inside the tail or below
/// it; entries appended again at the same indexes are the ones read back, before and after
/// they are durable, and after a reopen.
#[tokio::test]
async fn truncate_then_append_returns_the_new_entries() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let expected = {
        let mut store = LogStore::with_tail_limits(RaftDb::open(dir.path())?, usize::MAX, 4)?;
        append(&mut store, creates(1, 1..=10)).await?;
        assert_eq!(cached(&store), vec![7, 8, 9, 10]);

        store.truncate_after(Some(log_id(1, 8))).await?;
        assert_eq!(cached(&store), vec![7, 8]);
        let read = store.try_get_log_entries(1..20).await?;
        assert_eq!(ids(&read), (1..=8).map(|i| (1, i)).collect::<Vec<_>>());

        // Read at once (likely before the fsync) and again once durable.
        let (tx, rx) = TypeConfig::oneshot();
        store
            .append(creates(2, 9..=12), IOFlushed::signal(tx))
            .await?;
        let early = store.try_get_log_entries(7..20).await?;
        rx.await
            .map_err(|_| io::Error::other("callback dropped"))??;
        let late = store.try_get_log_entries(7..20).await?;
        let want = [(1, 7), (1, 8), (2, 9), (2, 10), (2, 11), (2, 12)];
        assert_eq!(ids(&early), want);
        assert_eq!(json(&early), json(&late));

        // Below the tail: it empties, and the WAL's dropped entries are never asked for.
        store.truncate_after(Some(log_id(1, 3))).await?;
        assert!(cached(&store).is_empty());
        assert_eq!(
            ids(&store.try_get_log_entries(..).await?),
            [(1, 1), (1, 2), (1, 3)]
        );
        append(&mut store, creates(3, 4..=6)).await?;
        let read = store.try_get_log_entries(1..20).await?;
        let want = [(1, 1), (1, 2), (1, 3), (3, 4), (3, 5), (3, 6)];
        assert_eq!(ids(&read), want);
        read
    };
    assert_eq!(json(&reread(dir.path(), 1..20).await?), json(&expected));
    Ok(())
}

/// After a truncation has emptied the tail, reads stop at the new end even before the WAL
/// has dropped them.
#[test]
fn tail_view_stops_at_the_log_end() {
    let mut tail = Tail::new(usize::MAX, usize::MAX);
    // 1..=4 are in the WAL only (as after a restart or an eviction).
    let entries: Vec<Arc<Entry>> = creates(1, 5..=10).into_iter().map(Arc::new).collect();
    tail.append(1, &sized(&entries));
    let view = tail.view((1, None));
    assert_eq!(view.disk, Some((1, Some(5))));
    assert_eq!(view.cached.len(), 6);
    assert!(tail.view((5, Some(8))).disk.is_none());

    tail.truncate_after(Some(7));
    tail.truncate_after(Some(3));
    let view = tail.view((1, None));
    assert_eq!(view.disk, Some((1, Some(4))));
    assert!(view.cached.is_empty());
    assert_eq!(view.generation, 2);
    assert!(tail.view((4, None)).disk.is_none());
}

/// A purge drops the cached entries up to it, also past the end of the log.
#[tokio::test]
async fn purge_drops_cached_entries() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    append(&mut store, creates(1, 1..=10)).await?;
    store.purge(log_id(1, 4)).await?;
    assert_eq!(cached(&store), (5..=10).collect::<Vec<_>>());
    let read = store.try_get_log_entries(1..20).await?;
    assert_eq!(ids(&read), (5..=10).map(|i| (1, i)).collect::<Vec<_>>());

    // A snapshot install purges past the last entry.
    store.purge(log_id(1, 12)).await?;
    assert!(cached(&store).is_empty());
    assert!(store.try_get_log_entries(1..20).await?.is_empty());
    let state = store.get_log_state().await?;
    assert_eq!(state.last_log_id, Some(log_id(1, 12)));
    append(&mut store, creates(2, 13..=14)).await?;
    assert_eq!(
        ids(&store.try_get_log_entries(..).await?),
        [(2, 13), (2, 14)]
    );
    Ok(())
}

/// The durable entries kept never exceed either limit, the newest stay, and entries not yet
/// durable are never evicted (they exist nowhere else).
#[test]
fn tail_respects_its_limits() {
    let entries: Vec<Arc<Entry>> = creates(1, 1..=100).into_iter().map(Arc::new).collect();
    let written = |range: std::ops::RangeInclusive<u64>| -> Vec<Written> {
        range.map(|index| Written { seq: index, index }).collect()
    };

    // Each entry counts 100 bytes.
    let mut tail = Tail::new(1000, usize::MAX);
    for e in &entries {
        tail.append(e.log_id.index, &[(e.clone(), 100)]);
    }
    assert_eq!(tail.entries.len(), 100);
    let evicted = tail.mark_durable(&written(1..=50));
    // 50 pending entries are not counted; 10 durable ones of 100 bytes fit.
    assert_eq!(evicted.len(), 40);
    assert_eq!(tail.durable_bytes, 1000);
    assert_eq!(tail.entries.keys().next(), Some(&41));
    tail.mark_durable(&written(51..=100));
    assert_eq!(tail.durable_bytes, 1000);
    assert_eq!(
        tail.entries.keys().copied().collect::<Vec<_>>(),
        (91..=100).collect::<Vec<_>>()
    );

    let mut tail = Tail::new(usize::MAX, 8);
    for e in &entries {
        tail.append(e.log_id.index, &[(e.clone(), 100)]);
    }
    // Not durable: all stay, beyond the count.
    assert!(tail.mark_durable(&[]).is_empty());
    assert_eq!(tail.entries.len(), 100);
    tail.mark_durable(&written(1..=100));
    assert_eq!(
        tail.entries.keys().copied().collect::<Vec<_>>(),
        (93..=100).collect::<Vec<_>>()
    );
    assert_eq!(tail.durable_bytes, 800);
}

/// A write marked durable for an append that a truncation and a new append replaced must
/// not mark the new entry durable: it is not in the WAL yet.
#[test]
fn durable_mark_of_a_replaced_entry_is_ignored() {
    let mut tail = Tail::new(0, usize::MAX);
    let old = Arc::new(create(1, 1, 16));
    let new = Arc::new(create(2, 1, 16));
    tail.append(1, &sized(&[old]));
    tail.truncate_after(None);
    tail.append(2, &sized(&[new]));
    let stale = Written { seq: 1, index: 1 };
    assert!(tail.mark_durable(&[stale]).is_empty());
    assert_eq!(tail.entries.get(&1).map(|t| t.durable), Some(false));
    assert_eq!(tail.durable_bytes, 0);
}

/// Replication reads served from memory stop at the same byte limit as reads from the WAL.
#[tokio::test]
async fn limited_read_from_the_tail_respects_byte_limit() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    let pad = REPLICATION_PAYLOAD_BYTES_MAX * 2 / 5;
    let big: Vec<Entry> = (1..=4).map(|i| create(1, i, pad)).collect();
    // Not awaited: the read may see them before they are durable (size measured) or after.
    let (tx, rx) = TypeConfig::oneshot();
    store.append(big, IOFlushed::signal(tx)).await?;
    assert_eq!(store.limited_get_log_entries(1, 5).await?.len(), 2);
    rx.await
        .map_err(|_| io::Error::other("callback dropped"))??;
    assert_eq!(store.limited_get_log_entries(1, 5).await?.len(), 2);
    assert_eq!(store.limited_get_log_entries(4, 5).await?.len(), 1);
    let disk = read_wal(
        &**lock(&store.shared.wal),
        (1, Some(5)),
        REPLICATION_PAYLOAD_BYTES_MAX,
    )?;
    assert_eq!(disk.entries.len(), 2);
    Ok(())
}

/// What the store tells its observer (server/time.rs counts cluster time from arrivals).
#[derive(Default)]
struct Told(std::sync::Mutex<Vec<String>>);

impl LogObserver for Told {
    fn on_appended(&self, last_index: u64) {
        lock(&self.0).push(format!("appended {last_index}"));
    }
    fn on_truncated(&self, after: Option<u64>) {
        lock(&self.0).push(format!("truncated {after:?}"));
    }
}

#[tokio::test]
async fn the_observer_is_told_each_batch_as_it_arrives_and_each_truncation() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let told = Arc::new(Told::default());
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?.observed_by(told.clone());
    append(&mut store, creates(1, 1..=3)).await?;
    append(&mut store, creates(1, 4..=7)).await?;
    store.truncate_after(Some(log_id(1, 5))).await?;
    append(&mut store, creates(2, 6..=6)).await?;
    append(&mut store, Vec::new()).await?;
    assert_eq!(
        *lock(&told.0),
        [
            "appended 3",
            "appended 7",
            "truncated Some(5)",
            "appended 6"
        ]
    );
    Ok(())
}

/// A data dir of a version that kept the log in redb: its log, vote, `committed` and last
/// purged id are moved into the WAL on open (and deleted from redb), the same as they were,
/// and the node goes on from there, also after another restart.
#[tokio::test]
async fn an_old_data_dir_keeps_its_log_vote_and_pointers() -> io::Result<()> {
    use redb::{ReadableDatabase, ReadableTableMetadata};
    let dir = tempfile::tempdir()?;
    let old = creates(4, 6..=9);
    {
        // What the redb log store wrote: entries as serde_json by index, pointers as JSON.
        let db = RaftDb::open(dir.path())?;
        let database = db.db.read().unwrap_or_else(|p| p.into_inner());
        let txn = database.begin_write().map_err(db::db_err("test"))?;
        {
            let mut log = txn.open_table(db::LOG_TABLE).map_err(db::db_err("test"))?;
            for e in &old {
                let bytes = serde_json::to_vec(e).map_err(io::Error::other)?;
                log.insert(e.log_id.index, bytes.as_slice())
                    .map_err(db::db_err("test"))?;
            }
            let mut meta = txn.open_table(db::META_TABLE).map_err(db::db_err("test"))?;
            let pairs = [
                (
                    db::META_VOTE,
                    serde_json::to_vec(&Vote::new_committed(4, 2)),
                ),
                (db::META_COMMITTED, serde_json::to_vec(&Some(log_id(4, 8)))),
                (db::META_LAST_PURGED, serde_json::to_vec(&log_id(3, 5))),
            ];
            for (key, value) in pairs {
                let value = value.map_err(io::Error::other)?;
                meta.insert(key, value.as_slice())
                    .map_err(db::db_err("test"))?;
            }
        }
        txn.commit().map_err(db::db_err("test"))?;
    }
    for reopen in 0..2 {
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        assert_eq!(store.read_vote().await?, Some(Vote::new_committed(4, 2)));
        assert_eq!(store.read_committed().await?, Some(log_id(4, 8)));
        let state = store.get_log_state().await?;
        assert_eq!(
            state.last_purged_log_id,
            Some(log_id(3, 5)),
            "reopen {reopen}"
        );
        assert_eq!(state.last_log_id, Some(log_id(4, 9)));
        assert_eq!(json(&store.try_get_log_entries(0..100).await?), json(&old));
        {
            let database = store.db.db.read().unwrap_or_else(|p| p.into_inner());
            let txn = database.begin_read().map_err(db::db_err("test"))?;
            let log = txn.open_table(db::LOG_TABLE).map_err(db::db_err("test"))?;
            let meta = txn.open_table(db::META_TABLE).map_err(db::db_err("test"))?;
            assert_eq!(log.len().map_err(db::db_err("test"))?, 0);
            assert_eq!(meta.len().map_err(db::db_err("test"))?, 0);
        }
        if reopen == 0 {
            append(&mut store, creates(5, 10..=10)).await?;
            store.truncate_after(Some(log_id(4, 9))).await?;
        }
    }
    assert!(!dir.path().join("raft-log.migrating").exists());
    Ok(())
}

/// A crash in the middle of writing leaves a torn record at the WAL's end: it is cut on open,
/// and everything fsynced before it is kept.
#[tokio::test]
async fn a_torn_write_at_the_end_is_cut_and_the_rest_kept() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        append(&mut store, creates(1, 1..=5)).await?;
    }
    let wal_dir = dir.path().join(WAL_DIR_NAME);
    let mut chunks: Vec<_> = std::fs::read_dir(&wal_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    chunks.sort();
    let last = chunks.last().expect("a chunk file");
    // The sixth entry's record reached the disk only in part: the file ends inside it.
    let whole = std::fs::metadata(last)?.len();
    {
        let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
        append(&mut store, creates(1, 6..=6)).await?;
    }
    let longer = std::fs::metadata(last)?.len();
    assert!(longer > whole + 10);
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)?
        .set_len(longer - 10)?;
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    assert_eq!(
        ids(&store.try_get_log_entries(0..100).await?),
        (1..=5).map(|i| (1, i)).collect::<Vec<_>>()
    );
    append(&mut store, creates(2, 6..=7)).await?;
    drop(store);
    let read = reread(dir.path(), 0..100).await?;
    let want = [(1, 1), (1, 2), (1, 3), (1, 4), (1, 5), (2, 6), (2, 7)];
    assert_eq!(ids(&read), want);
    Ok(())
}

/// An append that would leave a hole (after the last entry, or after a purge past the log's
/// end) is refused and writes nothing; one that follows, or a batch from a fresh log, is taken.
#[tokio::test]
async fn an_append_that_would_leave_a_hole_is_refused_and_writes_nothing() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut store = LogStore::open(RaftDb::open(dir.path())?)?;
    let blanks = |r: std::ops::RangeInclusive<u64>| -> Vec<Entry> {
        r.map(|i| Entry::new_blank(log_id(2, i))).collect()
    };
    append(&mut store, blanks(1..=3)).await?;
    let err = append(&mut store, blanks(5..=6))
        .await
        .expect_err("a hole at 4 must be refused");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    assert!(
        err.to_string().contains("entry 5 where 4 comes next"),
        "{err}"
    );
    // A gap inside a batch too.
    let mut gapped = blanks(4..=4);
    gapped.extend(blanks(6..=6));
    assert!(append(&mut store, gapped).await.is_err());
    assert_eq!(store.get_log_state().await?.last_log_id, Some(log_id(2, 3)));
    assert_eq!(cached(&store), vec![1, 2, 3]);
    // What follows is taken, after the last entry and after a purge past the log's end.
    append(&mut store, blanks(4..=5)).await?;
    store.purge(log_id(2, 9)).await?;
    assert!(append(&mut store, blanks(11..=11)).await.is_err());
    append(&mut store, blanks(10..=11)).await?;
    let state = store.get_log_state().await?;
    assert_eq!(state.last_log_id, Some(log_id(2, 11)));
    Ok(())
}

/// The WAL's flush thread writes and fsyncs every flush request queued while it was busy in one
/// batch (chunked-wal as patched in third_party/chunked-wal): openraft hands over appends while
/// earlier ones are being fsynced, and upstream gave each of them an fsync of its own. The
/// first flush's callback, which runs on the flush thread, holds that thread until the other
/// requests are queued, so two fsyncs at most cover them all; upstream made one each.
#[test]
fn flushes_queued_while_the_flush_thread_is_busy_share_one_fsync() -> io::Result<()> {
    use super::wal::{config, DiskWal, Flushed, Wal};
    use std::sync::mpsc;

    const FLUSHES: u64 = 50;
    let dir = tempfile::tempdir()?;
    let mut wal = DiskWal::open(Arc::new(config(dir.path())))?;
    let before = wal.stat().flush_metrics;
    let (done_tx, done_rx) = mpsc::channel::<io::Result<()>>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let mut hold = Some(release_rx);
    for index in 1..=FLUSHES {
        wal.append(vec![(log_id(1, index), vec![b'x'; 64])])?;
        let done_tx = done_tx.clone();
        let hold = hold.take();
        wal.flush(
            true,
            Some(Flushed::new(move |result| {
                if let Some(release) = hold {
                    // Ok or the sender dropped: either way the rest is queued by then.
                    let _ = release.recv();
                }
                let _ = done_tx.send(result);
            })),
        )?;
    }
    drop(release_tx);
    for _ in 0..FLUSHES {
        done_rx.recv().expect("a flush callback")?;
    }
    let after = wal.stat().flush_metrics;
    assert_eq!(
        after.write_request_count - before.write_request_count,
        FLUSHES
    );
    // Two, or one if the flush thread woke only once every request was queued.
    let fsyncs = after.sync_batch_count - before.sync_batch_count;
    assert!((1..=2).contains(&fsyncs), "{fsyncs} fsyncs: {after:?}");
    Ok(())
}

/// A data dir written when a WAL chunk held up to 8 MiB (before c764ad3) opens under today's
/// smaller chunks: every entry reads back, and the log goes on from its end.
#[test]
fn a_wal_of_larger_chunks_opens_under_todays_chunk_size() -> io::Result<()> {
    use super::wal::{config, flush_blocking, DiskWal, Wal, WAL_CHUNK_BYTES_MAX};

    const OLD_CHUNK_BYTES: usize = 8 << 20;
    let dir = tempfile::tempdir()?;
    let record = |index: u64| vec![(index % 251) as u8; 64 << 10];
    // 200 records of 64 KiB: one 8 MiB chunk closed, and an open one past today's limit.
    let written: u64 = 200;
    {
        let mut old = config(dir.path());
        old.wal.chunk_max_size = Some(OLD_CHUNK_BYTES);
        let mut wal = DiskWal::open(Arc::new(old))?;
        for index in 1..=written {
            wal.append(vec![(log_id(1, index), record(index))])?;
        }
        flush_blocking(&mut wal)?;
    }
    let larger = std::fs::read_dir(dir.path())?
        .filter_map(|f| f.ok()?.metadata().ok())
        .filter(|m| m.len() > WAL_CHUNK_BYTES_MAX as u64)
        .count();
    assert_eq!(larger, 2, "chunk files larger than today's limit");
    let check = |wal: &DiskWal, last: u64| -> io::Result<()> {
        let mut next = 1;
        Wal::read(wal, 1, last + 1, &mut |id, bytes| {
            assert_eq!(id, log_id(1, next));
            assert_eq!(bytes, record(next).as_slice(), "entry {next}");
            next += 1;
            Ok(true)
        })?;
        assert_eq!(next, last + 1, "entries read back");
        assert_eq!(Wal::last(wal), Some(log_id(1, last)));
        Ok(())
    };
    {
        let mut wal = DiskWal::open(Arc::new(config(dir.path())))?;
        check(&wal, written)?;
        for index in written + 1..=written + 64 {
            wal.append(vec![(log_id(1, index), record(index))])?;
        }
        flush_blocking(&mut wal)?;
        check(&wal, written + 64)?;
    }
    let wal = DiskWal::open(Arc::new(config(dir.path())))?;
    check(&wal, written + 64)
}
