//! Backups: the file `steward snapshot save` writes, and `steward snapshot restore`, which builds
//! a new node's data directory from one (as `etcdctl snapshot save/restore`).
//!
//! Layout of a backup file:
//! `MAGIC (8 bytes) | header length (u64 LE) | header (JSON) | body length (u64 LE) | body |
//! SHA-256 of the body (32 bytes)`, where the body is `State::write_snapshot` output, the same
//! bytes a Raft snapshot holds. The header says where the state was read (revision, Raft term
//! and applied index, the node and cluster it came from); it is information, not trusted input.
//!
//! A backup saved through etcd's API (`etcdctl snapshot save`, server/etcd/maintenance.rs)
//! carries etcd's framing after it, which etcd's tools check: zero padding to a 512-byte
//! block, ending with the padding's length (u64 LE), then the SHA-256 of everything before
//! (`etcd_frame`). A restore takes either form.
//!
//! A restore checks the magic, the lengths and the checksum, decodes the whole state, and only
//! then writes anything: a data directory that holds the state as a Raft snapshot at the saved
//! index, a log purged up to that index (so replay starts after it), and a vote at the saved
//! term (so the new cluster's first election is in a later term than every entry the snapshot
//! covers). Its membership is the new cluster's initial members; every node of the new cluster
//! is restored from the same file, so all start from the same last log id and any may lead.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::raft::log_store::{LogStore, RaftDb};
use crate::raft::snapshot;
use crate::raft::types::{
    LeaderId, LogId, Membership, NodeAddr, SnapshotMeta, StoredMembership, Vote,
};
use crate::state::State;

/// First bytes of a backup file, with the layout version.
pub const BACKUP_MAGIC: &[u8; 8] = b"STWBAK01";

/// Longest header a restore accepts.
const HEADER_BYTES_MAX: u64 = 1 << 20;

/// Where and when a backup's state was read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupHeader {
    /// Store revision of the state.
    pub revision: u64,
    /// Raft term and index of the last entry applied to it on the node that served it.
    pub term: u64,
    pub index: u64,
    /// The node that served it, and the leader it knew.
    pub node_id: u64,
    pub leader_id: u64,
    /// Objects in the state.
    pub objects: u64,
    /// The serving node's wall-clock time when the state was read (ms since the Unix epoch).
    pub created_ms: u64,
}

/// A checked backup: its header, body length and checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupInfo {
    pub header: BackupHeader,
    pub body_bytes: u64,
    /// Lowercase hex SHA-256 of the body.
    pub sha256: String,
}

/// Writes a backup file from a header and a body that arrives in pieces (the CLI's side of
/// `Cluster.Snapshot`): `write_body` for each piece, then `finish` with the body's checksum the
/// server computed, which must match the one computed here.
pub struct BackupWriter<W: Write> {
    out: W,
    hasher: Sha256,
    body: u64,
}

impl<W: Write> BackupWriter<W> {
    /// Writes the magic and `header`. The body length is not known yet, so the body is framed
    /// by its length at the end instead: see `finish`.
    pub fn new(mut out: W, header: &BackupHeader) -> io::Result<BackupWriter<W>> {
        let header = serde_json::to_vec(header).map_err(io::Error::other)?;
        out.write_all(BACKUP_MAGIC)?;
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        Ok(BackupWriter {
            out,
            hasher: Sha256::new(),
            body: 0,
        })
    }

    pub fn write_body(&mut self, piece: &[u8]) -> io::Result<()> {
        self.hasher.update(piece);
        self.body += piece.len() as u64;
        self.out.write_all(piece)
    }

    /// Body bytes written so far.
    pub fn body_bytes(&self) -> u64 {
        self.body
    }

    /// Checks the body against the server's checksum and length, writes the trailer, and
    /// returns the output and the checksum.
    pub fn finish(mut self, server_sha256: &str, server_bytes: u64) -> io::Result<(W, String)> {
        let sha = hex(&self.hasher.finalize());
        if sha != server_sha256 || self.body != server_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the snapshot arrived damaged: {} bytes with SHA-256 {sha}, the server sent \
                     {server_bytes} bytes with SHA-256 {server_sha256}",
                    self.body
                ),
            ));
        }
        self.out.write_all(&self.body.to_le_bytes())?;
        self.out.write_all(&hex_bytes(&sha))?;
        self.out.flush()?;
        Ok((self.out, sha))
    }
}

impl BackupWriter<Vec<u8>> {
    /// What was written so far and not yet taken: a streamed backup's next piece.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// etcd's framing of a backup of `length` bytes whose SHA-256 so far is `hasher`'s (module
/// doc): the bytes to send after it.
pub fn etcd_frame(length: u64, mut hasher: Sha256) -> Vec<u8> {
    let pad = 8 + (512 - (length + 8) % 512) % 512;
    let mut tail = vec![0u8; pad as usize - 8];
    tail.extend_from_slice(&pad.to_le_bytes());
    hasher.update(&tail);
    tail.extend_from_slice(&hasher.finalize());
    tail
}

/// The length of the backup in a file of `file_len` bytes: all of it, unless it ends with
/// etcd's framing (`etcd_frame`), checked whole.
fn backup_len(file: &mut File, file_len: u64) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    if file_len % 512 != 32 || file_len < 32 + 8 + 8 + 8 + 8 + 32 {
        return Ok(file_len);
    }
    let framed = etcd_framed(file, file_len);
    file.seek(SeekFrom::Start(0))?;
    Ok(match framed? {
        Some(pad) => file_len - 32 - pad,
        None => file_len,
    })
}

/// The padding's length if the file ends with a valid etcd framing; reads from anywhere.
fn etcd_framed(file: &mut File, file_len: u64) -> io::Result<Option<u64>> {
    use std::io::{Seek, SeekFrom};
    let mut pad = [0u8; 8];
    file.seek(SeekFrom::Start(file_len - 32 - 8))?;
    file.read_exact(&mut pad)?;
    let pad = u64::from_le_bytes(pad);
    if !(8..=8 + 511).contains(&pad) {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    io::copy(
        &mut (&mut *file).take(file_len - 32),
        &mut HashSink(&mut hasher),
    )?;
    let mut stored = [0u8; 32];
    file.read_exact(&mut stored)?;
    Ok((hasher.finalize().as_slice() == stored).then_some(pad))
}

/// A `Write` into a hasher.
struct HashSink<'a>(&'a mut Sha256);

impl Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads `path` through: checks magic, header, lengths and checksum, and hands the body to
/// `body` (a reader limited to it) on the way.
fn read_checked<T>(
    path: &Path,
    body: impl FnOnce(&mut dyn Read) -> io::Result<T>,
) -> io::Result<(BackupInfo, T)> {
    let name = path.display();
    let mut file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let file_len = backup_len(&mut file, file_len)?;
    let mut magic = [0u8; 8];
    file.read_exact(&mut magic)
        .map_err(|_| invalid(format!("{name} is not a steward backup (too short)")))?;
    if &magic != BACKUP_MAGIC {
        return Err(invalid(format!(
            "{name} is not a steward backup (no {} header)",
            String::from_utf8_lossy(BACKUP_MAGIC)
        )));
    }
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| invalid(format!("{name}: truncated header")))?;
    let header_len = u64::from_le_bytes(len);
    // Header, body and trailer must fit the file before anything is allocated or read.
    let fixed = 8 + 8 + 8 + 32;
    if header_len > HEADER_BYTES_MAX || header_len + fixed > file_len {
        return Err(invalid(format!(
            "{name}: damaged header length {header_len}"
        )));
    }
    let body_len = file_len - fixed - header_len;
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)?;
    let header: BackupHeader = serde_json::from_slice(&header)
        .map_err(|e| invalid(format!("{name}: damaged header: {e}")))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut hashing = HashingReader {
        inner: (&mut reader).take(body_len),
        hasher: Sha256::new(),
    };
    let value = body(&mut hashing)?;
    // Whatever the body reader left unread still counts towards the checksum.
    io::copy(&mut hashing, &mut io::sink())?;
    let sha = hex(&hashing.hasher.finalize());
    let mut trailer = [0u8; 40];
    reader
        .read_exact(&mut trailer)
        .map_err(|_| invalid(format!("{name}: truncated (no checksum)")))?;
    let stored_len = u64::from_le_bytes(trailer[..8].try_into().unwrap_or_default());
    let stored_sha = hex(&trailer[8..]);
    if stored_len != body_len || stored_sha != sha {
        return Err(invalid(format!(
            "{name} is damaged: its body has SHA-256 {sha}, the file says {stored_sha}"
        )));
    }
    let info = BackupInfo {
        header,
        body_bytes: body_len,
        sha256: sha,
    };
    Ok((info, value))
}

/// A reader that hashes what passes through it.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Checks a backup file whole (checksum and state) and says what it holds.
pub fn inspect(path: &Path) -> io::Result<(BackupInfo, State)> {
    read_checked(path, |body| {
        State::read_snapshot(body).map_err(|e| invalid(format!("the state does not decode: {e}")))
    })
}

/// What a restore made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    pub info: BackupInfo,
    pub objects: u64,
    pub last_log_id: LogId,
}

/// Builds `config.data_dir` for node `config.id` of a new cluster of `config.initial_members`
/// from the backup at `path` (module docs). Refuses a data directory that holds anything.
pub async fn restore(path: &Path, config: &Config) -> anyhow::Result<Restored> {
    use anyhow::Context;
    use openraft::storage::RaftLogStorage;

    let dir = &config.data_dir;
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            anyhow::bail!(
                "data_dir {} is not empty; a restore only builds a new node's data directory",
                dir.display()
            );
        }
    }
    if config.initial_members.is_empty() {
        anyhow::bail!("initial_members is empty: a restore needs the new cluster's members");
    }
    if !config.initial_members.iter().any(|m| m.id == config.id) {
        anyhow::bail!(
            "node {} is not among initial_members; restore every member with its own config",
            config.id
        );
    }
    let file = path.to_path_buf();
    let (info, state) = tokio::task::spawn_blocking(move || inspect(&file))
        .await?
        .with_context(|| format!("cannot restore from {}", path.display()))?;

    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data_dir {}", dir.display()))?;
    // The saved position, with a term of at least 1 so the new cluster's vote is past it.
    let term = info.header.term.max(1);
    let leader = config
        .initial_members
        .iter()
        .map(|m| m.id)
        .min()
        .unwrap_or(config.id);
    let last_log_id = LogId::new(
        LeaderId {
            term,
            node_id: leader,
        },
        info.header.index.max(1),
    );
    let nodes: std::collections::BTreeMap<u64, NodeAddr> = config
        .initial_members
        .iter()
        .map(|m| {
            (
                m.id,
                NodeAddr {
                    peer_addr: m.peer_addr.clone(),
                    client_addr: m.client_addr.clone(),
                },
            )
        })
        .collect();
    let voters: std::collections::BTreeSet<u64> = nodes.keys().copied().collect();
    let membership = Membership::new(vec![voters], nodes)
        .map_err(|e| anyhow::anyhow!("initial_members do not make a membership: {e}"))?;
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id),
        last_membership: StoredMembership::new(Some(last_log_id), membership),
    };

    let db = RaftDb::open(dir).context("cannot create the raft database")?;
    let snapshot_dir = dir.clone();
    let lock = db.snapshot_lock.clone();
    let objects = state.len() as u64;
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut written = snapshot::write_state(&snapshot_dir, &meta, &state)?;
        snapshot::persist(&snapshot_dir, &lock, &mut written, false)?;
        Ok(())
    })
    .await?
    .context("cannot write the snapshot")?;
    let mut log = LogStore::open(db).context("cannot create the raft log")?;
    log.save_vote(&Vote::new(term, config.id))
        .await
        .context("cannot write the vote")?;
    log.purge(last_log_id)
        .await
        .context("cannot set the log's start")?;
    log.save_committed(Some(last_log_id))
        .await
        .context("cannot write the commit index")?;
    // The commit index rides on the next fsync: make it this one.
    log.save_vote(&Vote::new(term, config.id))
        .await
        .context("cannot write the vote")?;
    Ok(Restored {
        info,
        objects,
        last_log_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(n: usize) -> State {
        use crate::state::apply::{apply, ApplyContext};
        let mut state = State::new();
        for i in 0..n {
            let json = format!(
                r#"{{"kind":"Director","apiVersion":"v1","metadata":{{"name":"d{i}"}},"spec":{{"i":{i}}}}}"#
            );
            let object = crate::state::Resource::from_json(&json).expect("object");
            let ctx = ApplyContext {
                log_index: i as u64 + 1,
                term: 1,
                time_ms: 1_000 + i as u64,
                stamped: true,
                wall_ms: None,
            };
            let command = crate::state::Command::Objects(crate::state::ObjectCommand::Create {
                object,
                fence: None,
            });
            apply(&mut state, &ctx, &command, &mut Vec::new());
        }
        assert_eq!(state.len(), n);
        state
    }

    fn save(path: &Path, state: &State) -> String {
        let mut body = Vec::new();
        state.write_snapshot(&mut body).expect("encode");
        let header = BackupHeader {
            revision: state.revision(),
            term: 3,
            index: 42,
            objects: state.len() as u64,
            ..BackupHeader::default()
        };
        let mut w = BackupWriter::new(File::create(path).expect("create"), &header).expect("new");
        for piece in body.chunks(1000) {
            w.write_body(piece).expect("write");
        }
        let sha = hex(&Sha256::digest(&body));
        w.finish(&sha, body.len() as u64).expect("finish");
        sha
    }

    #[test]
    fn a_backup_round_trips_and_any_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.snap");
        let state = state_with(50);
        let sha = save(&path, &state);
        let (info, back) = inspect(&path).expect("inspect");
        assert_eq!(info.sha256, sha);
        assert_eq!(info.header.revision, state.revision());
        assert_eq!(back, state);

        // One flipped byte anywhere in the body, a truncation, or another file: refused.
        let bytes = std::fs::read(&path).expect("read");
        let mut flipped = bytes.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x01;
        std::fs::write(&path, &flipped).expect("write");
        let err = inspect(&path).expect_err("flipped byte");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("write");
        assert!(inspect(&path).is_err(), "truncated");
        std::fs::write(
            &path,
            b"hello, not a backup at all, but long enough to have a header",
        )
        .expect("write");
        let err = inspect(&path).expect_err("not a backup");
        assert!(err.to_string().contains("not a steward backup"), "{err}");
    }

    /// etcd's framing (etcdctl snapshot save): blocks of 512 bytes and a SHA-256 of all before
    /// it; steward reads the backup inside, and a damaged framing is not taken for one.
    #[test]
    fn a_backup_in_etcds_framing_reads_back_and_a_damaged_frame_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.snap");
        let state = state_with(20);
        save(&path, &state);
        let mut bytes = std::fs::read(&path).expect("read");
        let frame = etcd_frame(bytes.len() as u64, Sha256::new().chain_update(&bytes));
        bytes.extend(frame);
        assert_eq!(bytes.len() % 512, 32);
        let sha = Sha256::digest(&bytes[..bytes.len() - 32]);
        assert_eq!(&bytes[bytes.len() - 32..], sha.as_slice());
        std::fs::write(&path, &bytes).expect("write");
        let (_, back) = inspect(&path).expect("inspect the framed backup");
        assert_eq!(back, state);
        let mut damaged = bytes.clone();
        let at = damaged.len() - 40 - 1;
        damaged[at] ^= 0x01;
        std::fs::write(&path, &damaged).expect("write");
        assert!(inspect(&path).is_err(), "a damaged frame");
    }

    #[test]
    fn a_writer_refuses_a_body_that_differs_from_the_servers() {
        let header = BackupHeader::default();
        let mut w = BackupWriter::new(Vec::new(), &header).expect("new");
        w.write_body(b"abc").expect("write");
        let other = hex(&Sha256::digest(b"abd"));
        let err = w.finish(&other, 3).expect_err("mismatch");
        assert!(err.to_string().contains("arrived damaged"), "{err}");
    }
}
