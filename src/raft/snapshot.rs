//! The snapshot file: a node's snapshot on disk, and [`SnapshotFile`], the handle openraft passes
//! around as `SnapshotData` (built, stored, sent to a follower, received, installed).
//!
//! A snapshot is the size of the whole state (tens of megabytes at 100k objects), and openraft
//! builds one on every node at about the same moment. It is therefore never held in memory: it
//! is streamed from the state into a file, read from the file in chunks to send, written to a file
//! chunk by chunk as it arrives, and decoded from the file. Only the state machine
//! (`crate::raft::state_machine`) and the peer transport (`crate::raft::network`) use this
//! module; every function here blocks, so they call it on the blocking pool ([`blocking`]).
//!
//! Layout of `snapshot.bin` (and of every temporary snapshot file):
//! `MAGIC (8 bytes) | meta length (u64 LE) | meta (JSON) | body length (u64 LE) | body`, where
//! the body is `State::write_snapshot` output. A snapshot is written to a temporary file in the
//! data directory, fsynced, then renamed over `snapshot.bin` and the directory fsynced, so a crash
//! leaves the old snapshot or the new one, never a torn one.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::raft::types::SnapshotMeta;
use crate::state::State;

/// The node's snapshot in its data directory. Snapshots live in a file of their own, not in the
/// redb database: writing tens of megabytes in a redb transaction would hold redb's single writer
/// and stall the log's group commits (and every client write) for its duration.
pub(crate) const SNAPSHOT_FILE: &str = "snapshot.bin";
/// First bytes of a snapshot file, with the layout version.
const SNAPSHOT_MAGIC: &[u8; 8] = b"STWSNAP1";
/// Temporary snapshot files are named `snapshot.bin.<pid>-<n>.tmp`: unique per writer, so a
/// build, an install and any number of transfers from leaders never share one.
const TEMP_PREFIX: &str = "snapshot.bin.";
const TEMP_SUFFIX: &str = ".tmp";
/// Buffer of the JSON encoder's and decoder's file I/O: large enough that the per-call cost of
/// a read or write does not show, small next to the state.
const IO_BUFFER_BYTES: usize = 256 * 1024;

/// The body of a snapshot, read from an open file: openraft's `SnapshotData`.
///
/// An open handle, not a path: a follower may still be sent this snapshot while a newer one is
/// renamed over `snapshot.bin`, and the handle keeps reading the file it opened. It is read once,
/// from the start of the body on (`Read` yields the body and nothing else, and fails if the file
/// ends before the length its header gives).
#[derive(Debug)]
pub struct SnapshotFile {
    file: File,
    /// Length of the body.
    len: u64,
    /// Body bytes not read yet.
    remaining: u64,
    /// Set while the file is a temporary one that was not moved into place: it is removed when
    /// this handle is dropped (a failed build, install or transfer leaves nothing behind).
    temp: Option<TempFile>,
}

impl SnapshotFile {
    /// Length of the body in bytes.
    pub fn body_len(&self) -> u64 {
        self.len
    }

    /// Body bytes not read yet.
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The next `max_bytes` of the body (fewer at its end).
    pub(crate) fn read_chunk(&mut self, max_bytes: usize) -> io::Result<Vec<u8>> {
        let n = usize::try_from(self.remaining).map_or(max_bytes, |r| r.min(max_bytes));
        let mut chunk = vec![0; n];
        self.read_exact(&mut chunk)?;
        Ok(chunk)
    }

    /// Decodes the state from the rest of the body, buffered, without loading the body.
    pub(crate) fn decode(&mut self) -> io::Result<State> {
        State::read_snapshot(BufReader::with_capacity(IO_BUFFER_BYTES, self))
            .map_err(|e| invalid(format!("snapshot data: {e}")))
    }

    /// Whether this is a temporary snapshot file in `dir` whose header holds `meta`, so that it
    /// can be moved into place as is (a snapshot received from the leader).
    pub(crate) fn is_temp_in(&self, dir: &Path, meta: &SnapshotMeta) -> bool {
        self.temp
            .as_ref()
            .is_some_and(|t| t.path.parent() == Some(dir) && t.meta == *meta)
    }
}

impl Read for SnapshotFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let max = usize::try_from(self.remaining).map_or(buf.len(), |r| r.min(buf.len()));
        if max == 0 {
            return Ok(0);
        }
        let n = self.file.read(&mut buf[..max])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "snapshot file ends before the body length in its header",
            ));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// A temporary snapshot file's name, removed on drop unless it was moved into place.
#[derive(Debug)]
struct TempFile {
    /// Empty once moved into place.
    path: PathBuf,
    /// The meta its header holds.
    meta: SnapshotMeta,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.as_os_str().is_empty() {
            return;
        }
        let remove = move || {
            if let Err(e) = std::fs::remove_file(&path) {
                let path = path.display();
                tracing::warn!(%path, error = %e, "cannot remove a temporary snapshot file");
            }
        };
        // Drops happen on async tasks too (a transfer that failed, a received snapshot openraft
        // turned down): the unlink goes to the blocking pool there.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// Writes a new temporary snapshot file: the header for `meta` at once, then the body through
/// `Write` (buffered), and [`SnapshotWriter::finish`] makes it durable.
pub(crate) struct SnapshotWriter {
    out: BufWriter<File>,
    temp: TempFile,
    /// Offset of the body length field, written last (the length is known only at the end).
    len_offset: u64,
    /// Body bytes written so far.
    len: u64,
}

impl SnapshotWriter {
    /// Creates a temporary snapshot file in `dir` for a snapshot with `meta`.
    pub(crate) fn create(dir: &Path, meta: &SnapshotMeta) -> io::Result<SnapshotWriter> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            "{TEMP_PREFIX}{}-{n}{TEMP_SUFFIX}",
            std::process::id()
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // From here on the file is removed if anything fails.
        let temp = TempFile {
            path,
            meta: meta.clone(),
        };
        let meta_bytes = serde_json::to_vec(meta)
            .map_err(|e| invalid(format!("snapshot meta cannot be encoded: {e}")))?;
        let mut out = BufWriter::with_capacity(IO_BUFFER_BYTES, file);
        out.write_all(SNAPSHOT_MAGIC)?;
        out.write_all(&(meta_bytes.len() as u64).to_le_bytes())?;
        out.write_all(&meta_bytes)?;
        let len_offset = (SNAPSHOT_MAGIC.len() + 8 + meta_bytes.len()) as u64;
        out.write_all(&0u64.to_le_bytes())?;
        Ok(SnapshotWriter {
            out,
            temp,
            len_offset,
            len: 0,
        })
    }

    /// Writes the body length into the header and fsyncs the file; returns it ready to read
    /// from the start of its body, still temporary (see [`persist`]).
    pub(crate) fn finish(self) -> io::Result<SnapshotFile> {
        let SnapshotWriter {
            out,
            temp,
            len_offset,
            len,
        } = self;
        let mut file = out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(len_offset))?;
        file.write_all(&len.to_le_bytes())?;
        file.sync_all()?;
        file.seek(SeekFrom::Start(len_offset + 8))?;
        Ok(SnapshotFile {
            file,
            len,
            remaining: len,
            temp: Some(temp),
        })
    }
}

impl Write for SnapshotWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Streams `state` into a new temporary snapshot file in `dir` and makes it durable.
pub(crate) fn write_state(
    dir: &Path,
    meta: &SnapshotMeta,
    state: &State,
) -> io::Result<SnapshotFile> {
    let mut writer = SnapshotWriter::create(dir, meta)?;
    state.write_snapshot(&mut writer)?;
    writer.finish()
}

/// Copies the rest of `snapshot` into a new temporary snapshot file in `dir` (bounded memory).
pub(crate) fn copy_to_temp(
    dir: &Path,
    meta: &SnapshotMeta,
    snapshot: &mut SnapshotFile,
) -> io::Result<SnapshotFile> {
    let mut writer = SnapshotWriter::create(dir, meta)?;
    io::copy(snapshot, &mut writer)?;
    writer.finish()
}

/// Moves a finished temporary snapshot (from [`SnapshotWriter::finish`]) into place as the node's
/// snapshot in `dir`: renamed over the old one, then the directory fsynced. Under `lock`, so a
/// build and an install do not interleave their check and rename. With `only_if_newer`, a
/// snapshot older than the stored one is not moved (an install may have overtaken a slow build,
/// and the log before the newer one may be purged already); it stays temporary and goes when
/// `snapshot` is dropped. Returns whether it was moved into place.
pub(crate) fn persist(
    dir: &Path,
    lock: &Mutex<()>,
    snapshot: &mut SnapshotFile,
    only_if_newer: bool,
) -> io::Result<bool> {
    let temp = snapshot
        .temp
        .as_mut()
        .ok_or_else(|| io::Error::other("persist: the snapshot is not a temporary file"))?;
    if temp.path.parent() != Some(dir) {
        return Err(io::Error::other(
            "persist: the temporary snapshot is not in the data directory",
        ));
    }
    let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
    if only_if_newer {
        if let Some((stored, _)) = open(dir)? {
            if stored.last_log_id > temp.meta.last_log_id {
                return Ok(false);
            }
        }
    }
    std::fs::rename(&temp.path, dir.join(SNAPSHOT_FILE))?;
    // Moved: no longer ours to remove, whatever happens next.
    temp.path = PathBuf::new();
    snapshot.temp = None;
    // The rename is durable only once the directory is.
    File::open(dir)?.sync_all()?;
    Ok(true)
}

/// The node's stored snapshot, if any: its meta, and its body ready to read. Reads the header
/// only.
pub(crate) fn open(dir: &Path) -> io::Result<Option<(SnapshotMeta, SnapshotFile)>> {
    let mut file = match File::open(dir.join(SNAPSHOT_FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |what: &str| invalid(format!("snapshot file: {what}"));
    let file_len = file.metadata()?.len();
    let mut magic = [0; SNAPSHOT_MAGIC.len()];
    file.read_exact(&mut magic)
        .map_err(|_| bad("not a steward snapshot"))?;
    if &magic != SNAPSHOT_MAGIC {
        return Err(bad("not a steward snapshot"));
    }
    let meta_len = read_len(&mut file).map_err(|_| bad("truncated meta length"))?;
    // Checked against the file before allocating: a damaged length must not ask for exabytes.
    let meta_bytes = usize::try_from(meta_len)
        .ok()
        .filter(|_| meta_len <= file_len)
        .ok_or_else(|| bad("truncated meta"))?;
    let mut meta = vec![0; meta_bytes];
    file.read_exact(&mut meta)
        .map_err(|_| bad("truncated meta"))?;
    let len = read_len(&mut file).map_err(|_| bad("truncated data length"))?;
    let header = SNAPSHOT_MAGIC.len() as u64 + 8 + meta_len + 8;
    if file_len.checked_sub(header) != Some(len) {
        return Err(bad("data length does not match"));
    }
    let meta: SnapshotMeta =
        serde_json::from_slice(&meta).map_err(|e| bad(&format!("meta: {e}")))?;
    let snapshot = SnapshotFile {
        file,
        len,
        remaining: len,
        temp: None,
    };
    Ok(Some((meta, snapshot)))
}

/// Removes the temporary snapshot files a crash left in `dir`. Only at start-up, before anything
/// else of this node writes one.
pub(crate) fn remove_temp_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) {
            tracing::info!(file = %name, "removing a temporary snapshot file left by a crash");
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Runs blocking snapshot file work on the blocking pool (in place on a simulation thread:
/// `crate::seam`).
pub(crate) use crate::seam::blocking;

fn read_len(file: &mut File) -> io::Result<u64> {
    let mut len = [0; 8];
    file.read_exact(&mut len)?;
    Ok(u64::from_le_bytes(len))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests;
