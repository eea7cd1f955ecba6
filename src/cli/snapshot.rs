//! `steward snapshot save|restore|status`: backups of the whole state, as `etcdctl snapshot`.
//!
//! `save` streams a consistent copy from the cluster (`Cluster.Snapshot`) into `FILE.part` with
//! a progress line on a terminal, checks the SHA-256 the server computed against its own, and
//! renames the file into place. `restore` builds one new node's data directory from a file
//! (src/raft/backup.rs); run it once per member of the new cluster, each with its own config.
//! `status` checks a file and says what it holds.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

use super::render::{self, OutputFormat, Table};
use super::GlobalOpts;
use crate::config::Config;
use crate::raft::backup::{self, BackupHeader, BackupInfo, BackupWriter};

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Stream a consistent snapshot of the whole state from the cluster into FILE.
    Save {
        /// Where to write it (written to FILE.part first, renamed when complete and checked).
        file: PathBuf,
    },
    /// Build a new node's data directory from a saved snapshot; run it once per member of the
    /// new cluster, with that member's config (its data_dir must be empty or absent).
    Restore {
        file: PathBuf,
        /// The new node's config: its id, data_dir and the new cluster's initial_members.
        #[arg(long)]
        config: PathBuf,
        /// Overrides data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Check a saved snapshot (checksum and state) and print what it holds.
    Status { file: PathBuf },
}

pub async fn run(cmd: SnapshotCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    match cmd {
        SnapshotCommand::Save { file } => save(&file, global).await,
        SnapshotCommand::Restore {
            file,
            config,
            data_dir,
        } => {
            let mut config = Config::load(&config)?;
            if let Some(dir) = data_dir {
                config.data_dir = dir;
            }
            config.validate()?;
            let restored = backup::restore(&file, &config).await?;
            let dir = config.data_dir.display();
            match global.output {
                OutputFormat::Table => println!(
                    "restored node {} into {dir}: revision {}, {} objects, sha256 {}; start it \
                     with steward serve --config <its config>",
                    config.id,
                    restored.info.header.revision,
                    restored.objects,
                    restored.info.sha256
                ),
                format => print!(
                    "{}",
                    render::structured(
                        &json!({
                            "id": config.id,
                            "dataDir": dir.to_string(),
                            "snapshot": info_json(&restored.info),
                            "lastLogIndex": restored.last_log_id.index,
                        }),
                        format
                    )?
                ),
            }
            Ok(())
        }
        SnapshotCommand::Status { file } => {
            let path = file.clone();
            let (info, state) = tokio::task::spawn_blocking(move || backup::inspect(&path))
                .await?
                .with_context(|| format!("{} failed its check", file.display()))?;
            let mut value = info_json(&info);
            value["checkedObjects"] = json!(state.len());
            match global.output {
                OutputFormat::Table => {
                    let mut t =
                        Table::new(&["REVISION", "OBJECTS", "BYTES", "TERM", "INDEX", "SHA256"]);
                    t.row(vec![
                        info.header.revision.to_string(),
                        state.len().to_string(),
                        info.body_bytes.to_string(),
                        info.header.term.to_string(),
                        info.header.index.to_string(),
                        info.sha256.clone(),
                    ]);
                    print!("{}", t.render());
                }
                format => print!("{}", render::structured(&value, format)?),
            }
            Ok(())
        }
    }
}

fn info_json(info: &BackupInfo) -> serde_json::Value {
    json!({
        "revision": info.header.revision,
        "objects": info.header.objects,
        "term": info.header.term,
        "index": info.header.index,
        "nodeId": info.header.node_id,
        "leaderId": info.header.leader_id,
        "createdMs": info.header.created_ms,
        "bytes": info.body_bytes,
        "sha256": info.sha256,
    })
}

/// `FILE.part` beside `file`.
fn part_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(".part");
    PathBuf::from(name)
}

async fn save(file: &Path, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let mut stream = client.snapshot().await?;
    let first = stream
        .message()
        .await?
        .context("the server ended the snapshot before its header")?;
    let header: BackupHeader = serde_json::from_str(&first.header_json)
        .context("the server sent a snapshot header that does not parse")?;
    let part = part_path(file);
    let out = std::fs::File::create(&part)
        .with_context(|| format!("cannot create {}", part.display()))?;
    // Removed unless the save completes.
    let mut guard = RemoveOnDrop(Some(part.clone()));
    let mut writer = BackupWriter::new(std::io::BufWriter::new(out), &header)?;
    let progress = indicatif::ProgressBar::new_spinner();
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg} {bytes} received ({bytes_per_sec}, {elapsed})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    progress.set_message(format!(
        "snapshot at revision {} ({} objects):",
        header.revision, header.objects
    ));
    let (sha, total) = loop {
        let chunk = stream
            .message()
            .await?
            .context("the snapshot stream ended before its checksum")?;
        if !chunk.sha256.is_empty() {
            break (chunk.sha256, chunk.total_bytes);
        }
        writer.write_body(&chunk.data)?;
        progress.set_position(writer.body_bytes());
    };
    progress.finish_and_clear();
    let (out, sha) = writer.finish(&sha, total)?;
    let out = out
        .into_inner()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {}", part.display(), e.error()))?;
    out.sync_all()
        .with_context(|| format!("cannot sync {}", part.display()))?;
    std::fs::rename(&part, file)
        .with_context(|| format!("cannot rename {} to {}", part.display(), file.display()))?;
    guard.0 = None;
    match global.output {
        OutputFormat::Table => println!(
            "snapshot saved to {}: revision {}, {} objects, {total} bytes, sha256 {sha}",
            file.display(),
            header.revision,
            header.objects
        ),
        format => {
            let info = BackupInfo {
                header,
                body_bytes: total,
                sha256: sha,
            };
            let mut value = info_json(&info);
            value["file"] = json!(file.display().to_string());
            print!("{}", render::structured(&value, format)?);
        }
    }
    Ok(())
}

/// Removes a partial file when a save fails.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}
