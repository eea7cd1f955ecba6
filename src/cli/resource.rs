//! `steward get` and `steward delete`: read and remove objects, kubectl style. `delete` takes
//! `--fence`.

use std::time::SystemTime;

use serde_json::Value;

use super::fence::FenceArg;
use super::render::{self, OutputFormat, Table};
use super::GlobalOpts;
use crate::client::{Consistency, ListOptions};

/// The namespace used when `-n` is not given, as in Kubernetes.
pub const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The kind, e.g. Director.
    pub kind: String,
    /// One object's name; omit to list.
    pub name: Option<String>,
    /// Namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// List across all namespaces.
    #[arg(short = 'A', long, conflicts_with = "name")]
    pub all_namespaces: bool,
    /// Label selector, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long, default_value = "", conflicts_with = "name")]
    pub selector: String,
    /// Read the answering node's local state (may be stale) instead of a linearizable read.
    #[arg(long)]
    pub serializable: bool,
    /// Page size for lists (0: the server's default); all pages are fetched, each as of the
    /// first page's revision (a list that outlives the server's history is fetched again).
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
}

#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// The kind, e.g. Director.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    #[command(flatten)]
    pub fence: FenceArg,
}

/// `steward get`.
pub async fn get(args: GetArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let consistency = if args.serializable {
        Consistency::Serializable
    } else {
        Consistency::Linearizable
    };
    if let Some(name) = &args.name {
        let object = client
            .get(&args.kind, &args.namespace, name, consistency)
            .await?;
        let text = match global.output {
            OutputFormat::Table => {
                object_table(std::slice::from_ref(&object), false, SystemTime::now()).render()
            }
            format => render::structured(&object, format)?,
        };
        print!("{text}");
        return Ok(());
    }
    let opts = ListOptions {
        namespace: if args.all_namespaces {
            String::new()
        } else {
            args.namespace.clone()
        },
        label_selector: args.selector.clone(),
        limit: args.limit,
        continue_token: String::new(),
        consistency,
    };
    let list = client.list_all_with(&args.kind, &opts).await?;
    match global.output {
        OutputFormat::Table if list.items.is_empty() => {
            if args.all_namespaces {
                eprintln!("No resources found");
            } else {
                eprintln!("No resources found in {} namespace.", args.namespace);
            }
        }
        OutputFormat::Table => print!(
            "{}",
            object_table(&list.items, args.all_namespaces, SystemTime::now()).render()
        ),
        format => print!(
            "{}",
            render::structured(&render::list_object(list.items, list.revision), format)?
        ),
    }
    Ok(())
}

/// `steward delete`.
pub async fn delete(args: DeleteArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let client = global.client()?;
    let object = client
        .delete_fenced(&args.kind, &args.namespace, &args.name, 0, args.fence.fence)
        .await?;
    match global.output {
        OutputFormat::Table => println!("{}/{} deleted", args.kind, args.name),
        format => print!("{}", render::structured(&object, format)?),
    }
    Ok(())
}

/// The kubectl columns for objects: NAMESPACE (with -A), NAME, REVISION, GENERATION, AGE.
pub fn object_table(objects: &[Value], with_namespace: bool, now: SystemTime) -> Table {
    let mut headers = Vec::new();
    if with_namespace {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "REVISION", "GENERATION", "AGE"]);
    let mut table = Table::new(&headers);
    for object in objects {
        let mut row = Vec::new();
        if with_namespace {
            row.push(render::meta_str(object, "namespace").to_string());
        }
        row.push(render::meta_str(object, "name").to_string());
        row.push(render::meta_number(object, "resourceVersion"));
        row.push(render::meta_number(object, "generation"));
        row.push(render::age(
            render::meta_str(object, "creationTimestamp"),
            now,
        ));
        table.row(row);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn object_tables_show_kubectl_columns() {
        let created = "2024-01-01T00:00:00Z";
        let now = humantime::parse_rfc3339(created).expect("time") + Duration::from_secs(3600);
        let objects = vec![
            json!({"kind": "Director", "metadata": {"name": "d1", "namespace": "default", "resourceVersion": "12", "generation": 1, "creationTimestamp": created}}),
            json!({"kind": "Director", "metadata": {"name": "d2", "namespace": "prod", "resourceVersion": "130", "generation": 4, "creationTimestamp": created}}),
        ];
        assert_eq!(
            object_table(&objects, false, now).render(),
            "NAME   REVISION   GENERATION   AGE\n\
             d1     12         1            60m\n\
             d2     130        4            60m\n"
        );
        let all = object_table(&objects, true, now).render();
        assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
        assert!(all.contains("prod        d2"), "{all}");
    }
}
