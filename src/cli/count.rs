//! `steward count KIND --by label:KEY|status:PATH`: how many objects of a kind hold each value
//! (Service Fabrik's state labels, pools by state, deployments by AppContext state), as a table
//! or as exact JSON.

use serde_json::{json, Value};

use super::render::{self, Table};
use super::resource::DEFAULT_NAMESPACE;
use super::{GlobalOpts, OutputFormat};
use crate::client::Consistency;
use crate::proto::v1::CountReply;

#[derive(Debug, clap::Args)]
pub struct CountArgs {
    /// The kind, e.g. Director.
    pub kind: String,
    /// What to count by: label:KEY, or status:PATH (dotted, e.g. status:state).
    #[arg(long)]
    pub by: String,
    /// Namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Count across all namespaces (a count by label is then read from kept counters).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Label selector, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
}

pub async fn run(args: CountArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let consistency = match args.serializable {
        true => Consistency::Serializable,
        false => Consistency::Linearizable,
    };
    let namespace = if args.all_namespaces {
        ""
    } else {
        args.namespace.as_str()
    };
    let reply = global
        .client()?
        .count(&args.kind, namespace, &args.selector, &args.by, consistency)
        .await?;
    let text = match global.output {
        OutputFormat::Table => count_table(&reply).render(),
        format => render::structured(&count_json(&args.kind, &args.by, &reply), format)?,
    };
    print!("{text}");
    Ok(())
}

/// One row per value, then `<none>` for objects without one, then the total.
pub fn count_table(reply: &CountReply) -> Table {
    let mut table = Table::new(&["VALUE", "COUNT"]);
    for b in &reply.buckets {
        table.row(vec![b.value.clone(), b.count.to_string()]);
    }
    if reply.missing > 0 {
        table.row(vec!["<none>".to_string(), reply.missing.to_string()]);
    }
    table.row(vec!["(total)".to_string(), reply.total.to_string()]);
    table
}

pub fn count_json(kind: &str, by: &str, reply: &CountReply) -> Value {
    let counts: serde_json::Map<String, Value> = reply
        .buckets
        .iter()
        .map(|b| (b.value.clone(), b.count.into()))
        .collect();
    json!({
        "kind": kind,
        "by": by,
        "counts": counts,
        "missing": reply.missing,
        "total": reply.total,
        "revision": reply.revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1::CountBucket;

    #[test]
    fn table_and_json() {
        let reply = CountReply {
            buckets: vec![
                CountBucket {
                    value: "in_queue".into(),
                    count: 2,
                },
                CountBucket {
                    value: "succeeded".into(),
                    count: 5,
                },
            ],
            missing: 1,
            total: 8,
            revision: 30,
        };
        let text = count_table(&reply).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[1].starts_with("in_queue") && lines[1].ends_with('2'),
            "{text}"
        );
        assert!(lines[3].starts_with("<none>"), "{text}");
        assert!(
            lines[4].starts_with("(total)") && lines[4].ends_with('8'),
            "{text}"
        );
        assert_eq!(
            count_json("Director", "label:state", &reply),
            json!({"kind": "Director", "by": "label:state",
                   "counts": {"in_queue": 2, "succeeded": 5}, "missing": 1, "total": 8, "revision": 30})
        );
    }
}
