//! `steward lock ...`: acquire, refresh and release locks, inspect them, and watch their events.
//! Output is rendered by lock_render.rs; this file parses arguments and talks to the cluster.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::lock_render;
use super::render::{self, OutputFormat};
use super::GlobalOpts;
use crate::client::{is_retryable_read, Consistency, LockEventMessage, LockMode};

/// Pause before re-opening a lock watch that ended, so a node that closes streams at once is not
/// hammered.
const RESUME_PAUSE: Duration = Duration::from_millis(200);

#[derive(Debug, clap::Subcommand)]
pub enum LockCommand {
    /// Take a lock, at once or after waiting in line; prints the grant and its fencing token.
    Acquire(AcquireArgs),
    /// Extend the TTL of a grant.
    Refresh(RefreshArgs),
    /// Give a grant back.
    Release(ReleaseArgs),
    /// Show one lock: holders, waiters, lock-delay.
    Get(GetLockArgs),
    /// List locks that are held or waited on.
    List(ListLocksArgs),
    /// Print lock events (granted, released, expired, waits ended) as they happen.
    Watch(WatchLocksArgs),
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Shared: many READ holders at once.
    Read,
    /// Exclusive: one WRITE holder; only WRITE tokens fence resource writes.
    Write,
}

impl From<ModeArg> for LockMode {
    fn from(mode: ModeArg) -> LockMode {
        match mode {
            ModeArg::Read => LockMode::Read,
            ModeArg::Write => LockMode::Write,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct AcquireArgs {
    /// The lock's name, e.g. a deployment's id.
    pub name: String,
    #[arg(long, value_enum, ignore_case = true)]
    pub mode: ModeArg,
    /// Who holds it, e.g. backup-manager@10.0.2.2.
    #[arg(long)]
    pub holder: String,
    /// Expire the grant unless refreshed within this long (e.g. 30s); omit to hold it until
    /// released.
    #[arg(long, value_parser = parse_ttl)]
    pub ttl: Option<Duration>,
    /// What the lock is taken for, as JSON, e.g.
    /// '{"resourceType":"deployment","resourceId":"d1","operation":"backup"}'.
    #[arg(long, value_parser = parse_details)]
    pub details: Option<Value>,
    /// Wait in line this long when the lock is busy (e.g. 10s); without it a busy lock fails at
    /// once with Aborted.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,
}

#[derive(Debug, clap::Args)]
pub struct RefreshArgs {
    /// The lock's name.
    pub name: String,
    /// The holder the grant was made to.
    #[arg(long)]
    pub holder: String,
    /// The grant's fencing token.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub token: u64,
    /// The new TTL, from now (e.g. 30s); omit to keep the grant's TTL.
    #[arg(long, value_parser = parse_ttl)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The lock's name.
    pub name: String,
    /// The holder the grant was made to.
    #[arg(long)]
    pub holder: String,
    /// The grant's fencing token.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub token: u64,
}

#[derive(Debug, clap::Args)]
pub struct GetLockArgs {
    /// The lock's name.
    pub name: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListLocksArgs {
    /// Only locks whose name starts with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

#[derive(Debug, clap::Args)]
pub struct WatchLocksArgs {
    /// Only locks whose name starts with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
}

/// A TTL: a humantime duration (`30s`, `1m30s`, `500ms`) of at least a millisecond. Zero is
/// refused because on the wire it means "until released", the opposite of what it says.
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if ttl < Duration::from_millis(1) {
        return Err(format!(
            "{text:?}: a TTL must be at least 1ms; omit --ttl to hold the lock until released"
        ));
    }
    Ok(ttl)
}

/// `--details`: any JSON value.
pub fn parse_details(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}

fn consistency(serializable: bool) -> Consistency {
    if serializable {
        Consistency::Serializable
    } else {
        Consistency::Linearizable
    }
}

/// `steward lock ...`.
pub async fn run(cmd: LockCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let text = match cmd {
        LockCommand::Acquire(args) => {
            let grant = client
                .lock_acquire(
                    &args.name,
                    args.mode.into(),
                    &args.holder,
                    args.ttl,
                    args.details,
                    args.wait,
                )
                .await?;
            match global.output {
                OutputFormat::Table => lock_render::grant_table(&grant).render(),
                format => render::structured(&lock_render::grant_json(&grant), format)?,
            }
        }
        LockCommand::Refresh(args) => {
            let grant = client
                .lock_refresh(&args.name, &args.holder, args.token, args.ttl)
                .await?;
            match global.output {
                OutputFormat::Table => lock_render::grant_table(&grant).render(),
                format => render::structured(&lock_render::grant_json(&grant), format)?,
            }
        }
        LockCommand::Release(args) => {
            let reply = client
                .lock_release(&args.name, &args.holder, args.token)
                .await?;
            match global.output {
                OutputFormat::Table => {
                    format!("{} released (token {})\n", args.name, reply.token)
                }
                format => render::structured(
                    &serde_json::json!({ "name": args.name, "holder": args.holder, "token": reply.token }),
                    format,
                )?,
            }
        }
        LockCommand::Get(args) => {
            let info = client
                .lock_get(&args.name, consistency(args.serializable))
                .await?;
            match global.output {
                OutputFormat::Table => lock_render::lock_text(&info),
                format => render::structured(&lock_render::lock_json(&info), format)?,
            }
        }
        LockCommand::List(args) => {
            let reply = client
                .lock_list(&args.prefix, consistency(args.serializable))
                .await?;
            match global.output {
                OutputFormat::Table if reply.locks.is_empty() => {
                    eprintln!("No locks found");
                    String::new()
                }
                OutputFormat::Table => lock_render::list_table(&reply).render(),
                format => render::structured(&lock_render::list_json(&reply), format)?,
            }
        }
        LockCommand::Watch(args) => return watch(&args, global).await,
    };
    print!("{text}");
    Ok(())
}

/// `steward lock watch`: prints events until Ctrl-C. Lock events carry no revision, so when the
/// serving node goes away the watch re-opens on another node and says on stderr that events in
/// between were not seen. A watcher that fell behind (`ResourceExhausted`) ends with the error.
async fn watch(args: &WatchLocksArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let mut stream = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            stream = client.lock_watch(&args.prefix) => stream?,
        };
        loop {
            let item = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                item = stream.next() => item,
            };
            match item {
                Some(Ok(event)) => print!("{}", format_event(&event, global.output)?),
                Some(Err(status)) if is_retryable_read(&status) => {
                    tracing::warn!(error = %super::describe_status(&status), "lock watch interrupted; resuming, events until then are not shown");
                    break;
                }
                Some(Err(status)) => return Err(status.into()),
                None => {
                    tracing::warn!(
                        "lock watch ended by the server; resuming, events until then are not shown"
                    );
                    break;
                }
            }
        }
        tokio::time::sleep(RESUME_PAUSE).await;
    }
}

/// One event as printed: a line, one JSON object per line, or a YAML document.
pub fn format_event(event: &LockEventMessage, format: OutputFormat) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Table => lock_render::event_line(event),
        OutputFormat::Json => lock_render::event_json_line(event),
        OutputFormat::Yaml => format!("---\n{}", render::to_yaml(&lock_render::event_json(event))?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn ttls_must_be_positive_durations() {
        assert_eq!(parse_ttl("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_ttl("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("1ms"), Ok(Duration::from_millis(1)));
        for bad in ["0s", "0", "500us", "30", "-1s", "soon", ""] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
        assert!(parse_ttl("0s").unwrap_err().contains("omit --ttl"));
    }

    #[test]
    fn details_must_be_json() {
        assert_eq!(
            parse_details(r#"{"operation":"backup"}"#).expect("json")["operation"],
            "backup"
        );
        assert!(parse_details("{operation: backup}").is_err());
    }

    fn lock_command(argv: &[&str]) -> Result<LockCommand, clap::Error> {
        let cli = Cli::try_parse_from(argv)?;
        match cli.command {
            Command::Lock(cmd) => Ok(cmd),
            other => panic!("not a lock command: {other:?}"),
        }
    }

    #[test]
    fn lock_commands_parse() {
        let cmd = lock_command(&[
            "steward",
            "lock",
            "acquire",
            "deploy-1",
            "--mode",
            "WRITE",
            "--holder",
            "backup@h",
            "--ttl",
            "30s",
            "--details",
            r#"{"op":"backup"}"#,
            "--wait",
            "10s",
        ])
        .expect("acquire");
        let LockCommand::Acquire(args) = cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(args.mode, ModeArg::Write);
        assert_eq!(args.ttl, Some(Duration::from_secs(30)));
        assert_eq!(args.wait, Some(Duration::from_secs(10)));
        assert_eq!(args.details, Some(serde_json::json!({"op": "backup"})));

        let cmd = lock_command(&[
            "steward", "lock", "release", "a", "--holder", "h", "--token", "7",
        ])
        .expect("release");
        assert!(
            matches!(cmd, LockCommand::Release(ReleaseArgs { token: 7, .. })),
            "{cmd:?}"
        );

        for bad in [
            &["steward", "lock", "acquire", "a", "--holder", "h"][..],
            &[
                "steward",
                "lock",
                "acquire",
                "a",
                "--mode",
                "exclusive",
                "--holder",
                "h",
            ],
            &[
                "steward", "lock", "acquire", "a", "--mode", "read", "--holder", "h", "--ttl", "0s",
            ],
            &[
                "steward",
                "lock",
                "acquire",
                "a",
                "--mode",
                "read",
                "--holder",
                "h",
                "--details",
                "{",
            ],
            &[
                "steward", "lock", "refresh", "a", "--holder", "h", "--token", "0",
            ],
            &[
                "steward", "lock", "release", "a", "--holder", "h", "--token", "x",
            ],
        ] {
            assert!(lock_command(bad).is_err(), "{bad:?}");
        }
    }
}
