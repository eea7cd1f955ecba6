//! `steward watch KIND`: print changes as they happen until Ctrl-C. When the serving node goes
//! away the watch resumes on another node from the last revision it saw (event or bookmark), so no
//! event after that is lost or printed twice.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;

use super::render::{self, OutputFormat};
use super::GlobalOpts;
use crate::client::{is_retryable_read, EventType, ListOptions, WatchEvent, WatchOptions};

/// Pause before re-opening a watch that ended, so a node that closes streams at once is not
/// hammered.
const RESUME_PAUSE: Duration = Duration::from_millis(200);

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The kind, e.g. Director.
    pub kind: String,
    /// Namespace.
    #[arg(short = 'n', long, default_value = super::resource::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Watch all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Label selector, e.g. `app=web`.
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
    /// First revision to show (inclusive); 0 = only changes from now on.
    #[arg(long = "from", default_value_t = 0)]
    pub from_revision: u64,
}

/// Which events have been printed, to resume without gaps or repeats. Events of one revision (a
/// txn) may straddle a broken stream, so the last revision is resumed inclusively and the
/// objects already printed at it are skipped.
#[derive(Debug, Default)]
pub struct Progress {
    /// Last revision printed; 0 before any.
    revision: u64,
    /// `TYPE Kind/ns/name` printed at `revision`.
    seen_at_revision: HashSet<String>,
    /// Every event up to and including this revision was delivered (from a bookmark).
    complete_through: u64,
}

impl Progress {
    /// Records `event`; false if it was already printed before a resume.
    pub fn admit(&mut self, event: &WatchEvent) -> bool {
        if event.event_type == EventType::Bookmark {
            self.complete_through = self.complete_through.max(event.revision);
            return true;
        }
        if event.revision <= self.complete_through || event.revision < self.revision {
            return false;
        }
        let id = format!(
            "{} {}",
            event_type_name(event.event_type),
            event
                .object
                .as_ref()
                .map(render::full_name)
                .unwrap_or_default()
        );
        if event.revision > self.revision {
            self.revision = event.revision;
            self.seen_at_revision.clear();
        }
        self.seen_at_revision.insert(id)
    }

    /// Where to resume: right after a bookmark, else at the last revision printed, else `from`.
    pub fn resume_from(&self, from: u64) -> u64 {
        if self.complete_through >= self.revision && self.complete_through > 0 {
            self.complete_through + 1
        } else if self.revision > 0 {
            self.revision
        } else {
            from
        }
    }
}

/// `steward watch`.
pub async fn run(args: WatchArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let mut opts = WatchOptions {
        namespace: if args.all_namespaces {
            String::new()
        } else {
            args.namespace.clone()
        },
        label_selector: args.selector.clone(),
        start_revision: args.from_revision,
        bookmark_interval_ms: 0,
    };
    let mut progress = Progress::default();
    let shutdown = super::shutdown_signal();
    tokio::pin!(shutdown);
    if opts.start_revision == 0 {
        // "From now on" made concrete: the store revision now, so a resume after a lost stream
        // knows where "now" was even before the first event or bookmark arrives.
        let probe = ListOptions {
            limit: 1,
            ..list_options(&opts)
        };
        let now = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            page = client.list_with(&args.kind, &probe) => page?.revision,
        };
        opts.start_revision = now + 1;
    }
    let from_revision = opts.start_revision;
    loop {
        let mut stream = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            stream = client.watch_with(&args.kind, &opts) => stream?,
        };
        loop {
            let item = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                item = stream.next() => item,
            };
            match item {
                Some(Ok(event)) => {
                    if progress.admit(&event) {
                        if let Some(text) = format_event(&event, global.output)? {
                            print!("{text}");
                        }
                    }
                }
                Some(Err(status)) if is_retryable_read(&status) => {
                    tracing::warn!(error = %super::describe_status(&status), "watch interrupted; resuming");
                    break;
                }
                Some(Err(status)) => return Err(status.into()),
                None => {
                    tracing::warn!("watch ended by the server; resuming");
                    break;
                }
            }
        }
        opts.start_revision = progress.resume_from(from_revision);
        tokio::time::sleep(RESUME_PAUSE).await;
    }
}

fn list_options(opts: &WatchOptions) -> ListOptions {
    ListOptions {
        namespace: opts.namespace.clone(),
        label_selector: opts.label_selector.clone(),
        ..ListOptions::default()
    }
}

/// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`: the proto name without its prefix.
fn event_type_name(t: EventType) -> &'static str {
    t.as_str_name().trim_start_matches("EVENT_TYPE_")
}

/// One event as printed; `None` for a BOOKMARK in table form (they only matter to programs).
pub fn format_event(event: &WatchEvent, format: OutputFormat) -> anyhow::Result<Option<String>> {
    let kind = event_type_name(event.event_type);
    Ok(match format {
        OutputFormat::Table if event.event_type == EventType::Bookmark => None,
        OutputFormat::Table => {
            let name = event
                .object
                .as_ref()
                .map(render::full_name)
                .unwrap_or_default();
            Some(format!("{kind} {name} rev={}\n", event.revision))
        }
        // Written by hand so the keys come in the documented order: type, revision, object.
        OutputFormat::Json => Some(match &event.object {
            Some(object) => format!(
                "{{\"type\":\"{kind}\",\"revision\":{},\"object\":{object}}}\n",
                event.revision
            ),
            None => format!("{{\"type\":\"{kind}\",\"revision\":{}}}\n", event.revision),
        }),
        OutputFormat::Yaml => {
            let mut value = serde_json::json!({ "type": kind, "revision": event.revision });
            if let Some(object) = &event.object {
                value["object"] = object.clone();
            }
            Some(format!("---\n{}", render::to_yaml(&value)?))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(event_type: EventType, revision: u64, name: &str) -> WatchEvent {
        let object = (event_type != EventType::Bookmark).then(
            || json!({"kind": "Director", "metadata": {"name": name, "namespace": "default"}}),
        );
        WatchEvent {
            event_type,
            revision,
            object,
        }
    }

    #[test]
    fn events_print_as_lines_or_json() {
        let added = event(EventType::Added, 7, "d1");
        let line = format_event(&added, OutputFormat::Table).expect("fmt");
        assert_eq!(line.as_deref(), Some("ADDED Director/default/d1 rev=7\n"));
        let json_line = format_event(&added, OutputFormat::Json)
            .expect("fmt")
            .expect("some");
        assert!(
            json_line.starts_with("{\"type\":\"ADDED\",\"revision\":7,\"object\":{"),
            "{json_line}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json_line).expect("valid json");
        assert_eq!(parsed["object"]["metadata"]["name"], "d1");
        let bookmark = event(EventType::Bookmark, 9, "");
        assert_eq!(
            format_event(&bookmark, OutputFormat::Table).expect("fmt"),
            None
        );
        assert_eq!(
            format_event(&bookmark, OutputFormat::Json)
                .expect("fmt")
                .as_deref(),
            Some("{\"type\":\"BOOKMARK\",\"revision\":9}\n")
        );
    }

    #[test]
    fn resumes_skip_what_was_printed() {
        let mut p = Progress::default();
        assert_eq!(p.resume_from(3), 3);
        assert!(p.admit(&event(EventType::Added, 5, "a")));
        assert!(p.admit(&event(EventType::Added, 5, "b")));
        assert_eq!(p.resume_from(3), 5);
        // The resumed stream repeats revision 5, then goes on.
        assert!(!p.admit(&event(EventType::Added, 5, "a")));
        assert!(!p.admit(&event(EventType::Added, 5, "b")));
        assert!(p.admit(&event(EventType::Added, 5, "c")));
        assert!(p.admit(&event(EventType::Modified, 6, "a")));
        assert!(!p.admit(&event(EventType::Added, 4, "z")));
        assert!(p.admit(&event(EventType::Bookmark, 10, "")));
        assert_eq!(p.resume_from(3), 11);
        assert!(!p.admit(&event(EventType::Deleted, 10, "a")));
    }
}
