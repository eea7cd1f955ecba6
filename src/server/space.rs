//! Disk space: each node measures its data directory and free disk, raises a NOSPACE alarm
//! through the log when it is over `limits.quota_bytes` or under `limits.disk_reserve_bytes`
//! free, and compacts its storage on an operator's request.
//!
//! The alarm is replicated state (`state::alarms`), so every node refuses the same writes at the
//! same point of the log, and a node that restarts still knows. The node never clears its own
//! alarm: an operator frees space (deletes, `steward compact`) and disarms it, and a node still
//! over its quota raises it again at its next check (etcd's model).

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::config::Limits;
use crate::raft::types::{LogId, NodeId, WatchReceiver};
use crate::server::node::Node;
use crate::state::alarms::{AlarmAction, AlarmKind};

/// How long a compaction waits for its snapshot to be built.
pub const COMPACT_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a compaction waits for the snapshot it asked for before asking again (openraft
/// ignores the request while another build runs).
pub const COMPACT_SNAPSHOT_RETRIGGER: Duration = Duration::from_secs(5);

/// How long a compaction waits for the log to be purged up to its snapshot. A leader purges only
/// what no replication stream is still sending, so a slow follower may hold it back; the
/// compaction then goes on with what was purged and says so.
pub const COMPACT_PURGE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a node measured of its storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of every file under the data directory.
    pub data_bytes: u64,
    /// The data directory's file system; 0 when unknown.
    pub disk_total_bytes: u64,
    /// Bytes available to this process on it.
    pub disk_free_bytes: u64,
}

impl Usage {
    /// Measures `dir` (blocking: walks the directory).
    pub fn measure(dir: &Path) -> io::Result<Usage> {
        let (disk_total_bytes, disk_free_bytes) = disk_space(dir).unwrap_or((0, 0));
        Ok(Usage {
            data_bytes: dir_bytes(dir)?,
            disk_total_bytes,
            disk_free_bytes,
        })
    }

    /// Why this node is out of space under `limits`, or `None`.
    pub fn shortage(&self, limits: &Limits) -> Option<String> {
        if self.data_bytes > limits.quota_bytes {
            return Some(format!(
                "data dir holds {} ({} bytes: steward.redb, raft-log/ and snapshot), over \
                 limits.quota_bytes = {} ({})",
                bytes(self.data_bytes),
                self.data_bytes,
                limits.quota_bytes,
                bytes(limits.quota_bytes)
            ));
        }
        if self.disk_total_bytes > 0 && self.disk_free_bytes < limits.disk_reserve_bytes {
            return Some(format!(
                "{} ({} bytes) free on the data dir's file system, under \
                 limits.disk_reserve_bytes = {} ({})",
                bytes(self.disk_free_bytes),
                self.disk_free_bytes,
                limits.disk_reserve_bytes,
                bytes(limits.disk_reserve_bytes)
            ));
        }
        None
    }
}

/// The last `Usage` the space check measured, for status answers: they read it here instead of
/// calling statvfs(2) on an async thread, where a slow or hung file system would stall every
/// task of that thread.
#[derive(Default)]
pub struct UsageCache(std::sync::Mutex<Option<Usage>>);

impl UsageCache {
    pub fn record(&self, usage: Usage) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(usage);
    }

    /// The last reading; `None` before the first space check.
    pub fn last(&self) -> Option<Usage> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `n` bytes for people: "812 B", "9.1 MiB", "2.0 GiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Sum of the sizes of the files under `dir`, recursively.
fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            // A temporary snapshot file removed while we walk.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        total = total.saturating_add(if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        });
    }
    Ok(total)
}

/// (total, available to this process) bytes of the file system holding `dir`. Blocking: call it
/// on the blocking pool only (`check` does, through `Usage::measure`).
fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs(3) writes only into `stats`, a zeroed plain-data struct we own, and reads
    // the NUL-terminated `path`, which outlives the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return None;
    }
    let block = (stats.f_frsize as u64).max(1);
    Some((
        (stats.f_blocks as u64).saturating_mul(block),
        (stats.f_bavail as u64).saturating_mul(block),
    ))
}

/// Measures this node's storage every `limits.space_check_interval_ms` and raises its NOSPACE
/// alarm through the log when it is short of space and the alarm is not already raised.
pub async fn run_monitor(node: std::sync::Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.limits.space_check_interval_ms);
    loop {
        check(&node).await;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// One check: measure, record, and raise the alarm if needed.
#[tracing::instrument(level = "debug", skip_all, fields(node = node.id))]
pub async fn check(node: &Node) {
    let dir = node.config.data_dir.clone();
    let usage = match tokio::task::spawn_blocking(move || Usage::measure(&dir)).await {
        Ok(Ok(usage)) => usage,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot measure the data dir");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "space check task failed");
            return;
        }
    };
    node.usage.record(usage);
    node.metrics.data_bytes.set(gauge(usage.data_bytes));
    node.metrics
        .quota_bytes
        .set(gauge(node.config.limits.quota_bytes));
    let Some(reason) = usage.shortage(&node.config.limits) else {
        return;
    };
    if node.state().alarms().has(node.id, AlarmKind::NoSpace) {
        return;
    }
    tracing::warn!(%reason, "raising the NOSPACE alarm: writes that may grow the state will be refused");
    let command = AlarmAction::Raise {
        node_id: node.id,
        kind: AlarmKind::NoSpace,
        reason,
    };
    // Through any leader; if there is none, the next check tries again.
    if let Err(status) = node.propose(command).await {
        tracing::warn!(error = %status.message(), "cannot raise the NOSPACE alarm yet");
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What a compaction did on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub node_id: NodeId,
    pub snapshot_index: u64,
    pub purged_index: u64,
    pub data_bytes_before: u64,
    pub data_bytes_after: u64,
    pub duration_ms: u64,
}

/// Compacts this node's storage: a snapshot of everything applied, the log purged up to it, the
/// database file compacted. One at a time per node (a second is refused, not queued).
#[tracing::instrument(level = "info", skip_all, fields(node = node.id))]
pub async fn compact(node: &Node) -> Result<Compaction, Status> {
    let _running = node.compaction.try_lock().map_err(|_| {
        crate::server::errors::change_in_progress(format!(
            "a compaction is already running on node {}",
            node.id
        ))
    })?;
    let started = Instant::now();
    let measure = |what: &'static str| {
        let dir = node.config.data_dir.clone();
        async move {
            tokio::task::spawn_blocking(move || dir_bytes(&dir))
                .await
                .map_err(|e| crate::server::errors::internal(what, e))?
                .map_err(|e| crate::server::errors::internal(what, e))
        }
    };
    let data_bytes_before = measure("measure the data dir").await?;
    let applied = index(&node.raft.metrics().borrow_watched().last_applied);
    let fatal = |e| {
        crate::server::errors::unavailable(
            format!("node {}'s Raft has stopped: {e}", node.id),
            None,
        )
    };
    let deadline = Instant::now() + COMPACT_SNAPSHOT_TIMEOUT;
    let snapshot_index = loop {
        node.raft.trigger().snapshot().await.map_err(fatal)?;
        let built = node
            .raft
            .wait(Some(COMPACT_SNAPSHOT_RETRIGGER))
            .metrics(|m| index(&m.snapshot) >= applied, "snapshot built")
            .await;
        match built {
            Ok(m) => break index(&m.snapshot),
            // A build already running when we asked ignores the trigger and may end short of
            // `applied`: ask again.
            Err(_) if Instant::now() < deadline => continue,
            Err(e) => {
                return Err(crate::server::errors::not_settled(
                    node.id,
                    format!(
                        "node {}: no snapshot up to index {applied} within \
                         {COMPACT_SNAPSHOT_TIMEOUT:?}: {e}",
                        node.id
                    ),
                ))
            }
        }
    };
    node.raft
        .trigger()
        .purge_log(snapshot_index)
        .await
        .map_err(fatal)?;
    let purged = node
        .raft
        .wait(Some(COMPACT_PURGE_TIMEOUT))
        .metrics(|m| index(&m.purged) >= snapshot_index, "log purged")
        .await;
    let purged_index = match purged {
        Ok(m) => index(&m.purged),
        Err(_) => {
            let purged_index = index(&node.raft.metrics().borrow_watched().purged);
            tracing::info!(
                snapshot_index,
                purged_index,
                "log purge held back (a follower is still being sent older entries)"
            );
            purged_index
        }
    };
    let (db_before, db_after) = node
        .db
        .compact()
        .await
        .map_err(|e| crate::server::errors::internal("compact the database", e))?;
    let data_bytes_after = measure("measure the data dir").await?;
    node.metrics.compactions.inc();
    node.metrics.data_bytes.set(gauge(data_bytes_after));
    let done = Compaction {
        node_id: node.id,
        snapshot_index,
        purged_index,
        data_bytes_before,
        data_bytes_after,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    tracing::info!(
        snapshot_index,
        purged_index,
        db_before,
        db_after,
        data_bytes_before,
        data_bytes_after,
        duration_ms = done.duration_ms,
        "compacted"
    );
    Ok(done)
}

fn index(log_id: &Option<LogId>) -> u64 {
    log_id.as_ref().map_or(0, |l| l.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortage_names_the_limit_that_was_crossed() {
        let limits = Limits {
            quota_bytes: 8 << 20,
            disk_reserve_bytes: 100 << 20,
            ..Limits::default()
        };
        let mut usage = Usage {
            data_bytes: 8 << 20,
            disk_total_bytes: 10 << 30,
            disk_free_bytes: 5 << 30,
        };
        // At the quota is not over it.
        assert_eq!(usage.shortage(&limits), None);
        usage.data_bytes += 1;
        assert_eq!(
            usage.shortage(&limits).as_deref(),
            Some(
                "data dir holds 8.0 MiB (8388609 bytes: steward.redb, raft-log/ and snapshot), over \
                 limits.quota_bytes = 8388608 (8.0 MiB)"
            )
        );
        usage.data_bytes = 1 << 20;
        usage.disk_free_bytes = 99 << 20;
        assert_eq!(
            usage.shortage(&limits).as_deref(),
            Some(
                "99.0 MiB (103809024 bytes) free on the data dir's file system, under \
                 limits.disk_reserve_bytes = 104857600 (100.0 MiB)"
            )
        );
        // An unknown file system (total 0) is not judged.
        usage.disk_total_bytes = 0;
        assert_eq!(usage.shortage(&limits), None);
    }

    #[test]
    fn the_cache_serves_the_last_reading_and_nothing_before_one() {
        let cache = UsageCache::default();
        assert_eq!(cache.last(), None);
        let usage = Usage {
            data_bytes: 1,
            disk_total_bytes: 3,
            disk_free_bytes: 2,
        };
        cache.record(usage);
        cache.record(Usage {
            data_bytes: 5,
            ..usage
        });
        let last = cache.last().expect("recorded");
        assert_eq!(last.data_bytes, 5);
    }

    #[test]
    fn bytes_are_written_for_people() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(2 << 30), "2.0 GiB");
        assert_eq!(bytes(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn measure_sums_every_file_under_the_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 24]).expect("write");
        let usage = Usage::measure(dir.path()).expect("measure");
        assert_eq!(usage.data_bytes, 1024);
        assert!(usage.disk_total_bytes >= usage.disk_free_bytes && usage.disk_total_bytes > 0);
    }
}
