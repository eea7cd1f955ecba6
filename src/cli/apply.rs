//! `steward apply -f FILE`: create each object of a JSON or YAML file, or bring an existing one
//! in line with it (spec, labels, annotations, apiVersion; status too when the file has one).
//!
//! A file holds one object, several YAML documents, a JSON stream or array, or a `kind: List`
//! with `items`. The first failure stops the run and names the object. With `--fence`, every
//! create and update carries the fence.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::fence::FenceArg;
use super::render::{self, OutputFormat};
use super::GlobalOpts;
use crate::client::{reason, Client, Consistency, ErrorReason, Fence};

/// How often a write that lost an optimistic-concurrency race is re-read and retried.
const APPLY_ATTEMPTS_MAX: usize = 5;

/// Server-maintained metadata that a file must not send back (a stale copy would only confuse).
const SERVER_FIELDS: [&str; 4] = ["resourceVersion", "uid", "generation", "creationTimestamp"];

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The file to apply (JSON or YAML); `-` reads standard input.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Namespace for objects that do not name one (default: "default").
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub fence: FenceArg,
}

/// What apply did to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Configured,
    Unchanged,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Configured => "configured",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// `steward apply`.
pub async fn run(args: ApplyArgs, global: &GlobalOpts) -> anyhow::Result<()> {
    let text = read_input(&args.file)?;
    let source = if args.file.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        args.file.display().to_string()
    };
    let objects = parse_documents(&text).with_context(|| source.clone())?;
    if objects.is_empty() {
        anyhow::bail!("{source}: no objects found");
    }
    let client = global.client()?;
    for object in objects {
        let object = prepare(object, args.namespace.as_deref());
        let name = render::short_name(&object);
        let (outcome, stored) = apply_one(&client, &object, args.fence.fence.as_ref())
            .await
            .with_context(|| name.clone())?;
        match global.output {
            OutputFormat::Table => println!("{name} {}", outcome.as_str()),
            format => print!("{}", render::structured(&stored, format)?),
        }
    }
    Ok(())
}

pub(super) fn read_input(path: &PathBuf) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Every object in `text`: JSON (one value, a stream, or an array) when it starts with `{` or
/// `[`, YAML documents otherwise; `kind: List` objects are replaced by their items.
pub fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let trimmed = text.trim_start();
    let mut docs = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        for (i, doc) in serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .enumerate()
        {
            let doc = doc.with_context(|| format!("JSON value {}", i + 1))?;
            match doc {
                Value::Array(items) => docs.extend(items),
                other => docs.push(other),
            }
        }
    } else {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let doc =
                Value::deserialize(doc).with_context(|| format!("YAML document {}", i + 1))?;
            if !doc.is_null() {
                docs.push(doc);
            }
        }
    }
    let mut objects = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if !doc.is_object() {
            anyhow::bail!("document {} is not an object", i + 1);
        }
        if render::kind_of(&doc) == "List" {
            match doc.get("items") {
                Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                Some(Value::Null) | None => {}
                Some(_) => anyhow::bail!("document {}: items of a List must be an array", i + 1),
            }
        } else {
            objects.push(doc);
        }
    }
    if let Some(i) = objects.iter().position(|o| !o.is_object()) {
        anyhow::bail!("List item {} is not an object", i + 1);
    }
    Ok(objects)
}

/// The object as apply sends it: server-maintained metadata removed, the namespace filled in
/// from `-n` when the object names none.
pub fn prepare(mut object: Value, namespace: Option<&str>) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_FIELDS {
            meta.remove(field);
        }
        let unnamed = meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if let (true, Some(ns)) = (unnamed, namespace) {
            meta.insert("namespace".to_string(), Value::String(ns.to_string()));
        }
    }
    object
}

/// Creates `object`, or updates the stored one. Returns what happened and the object as stored.
async fn apply_one(
    client: &Client,
    object: &Value,
    fence: Option<&Fence>,
) -> anyhow::Result<(Outcome, Value)> {
    match client.create_fenced(object, fence.cloned()).await {
        Ok(created) => {
            let stored = sync_status(client, object, created, fence).await?;
            Ok((Outcome::Created, stored))
        }
        Err(status) if reason(&status) == Some(ErrorReason::AlreadyExists) => {
            update_existing(client, object, fence).await
        }
        Err(status) => Err(status.into()),
    }
}

/// After a create: if the file has a status the create did not keep, write it.
async fn sync_status(
    client: &Client,
    object: &Value,
    stored: Value,
    fence: Option<&Fence>,
) -> anyhow::Result<Value> {
    if !has_status(object) || object.get("status") == stored.get("status") {
        return Ok(stored);
    }
    Ok(client
        .update_status_fenced(object, revision_of(&stored), fence.cloned())
        .await?)
}

/// Re-reads the stored object and updates what differs, retrying when another writer got in
/// between (REVISION_CONFLICT on the resourceVersion precondition).
async fn update_existing(
    client: &Client,
    object: &Value,
    fence: Option<&Fence>,
) -> anyhow::Result<(Outcome, Value)> {
    let kind = render::kind_of(object);
    let name = render::meta_str(object, "name");
    let namespace = match render::meta_str(object, "namespace") {
        "" => super::resource::DEFAULT_NAMESPACE,
        ns => ns,
    };
    let mut changed = false;
    for _ in 0..APPLY_ATTEMPTS_MAX {
        let mut stored = client
            .get(kind, namespace, name, Consistency::Linearizable)
            .await?;
        if spec_differs(object, &stored) {
            match client
                .update_fenced(object, revision_of(&stored), fence.cloned())
                .await
            {
                Ok(updated) => {
                    stored = updated;
                    changed = true;
                }
                Err(status) if reason(&status) == Some(ErrorReason::RevisionConflict) => continue,
                Err(status) => return Err(status.into()),
            }
        }
        if has_status(object) && object.get("status") != stored.get("status") {
            match client
                .update_status_fenced(object, revision_of(&stored), fence.cloned())
                .await
            {
                Ok(updated) => {
                    stored = updated;
                    changed = true;
                }
                Err(status) if reason(&status) == Some(ErrorReason::RevisionConflict) => continue,
                Err(status) => return Err(status.into()),
            }
        }
        let outcome = if changed {
            Outcome::Configured
        } else {
            Outcome::Unchanged
        };
        return Ok((outcome, stored));
    }
    anyhow::bail!(
        "still conflicting with other writers after {APPLY_ATTEMPTS_MAX} attempts; try again"
    )
}

fn has_status(object: &Value) -> bool {
    object.get("status").is_some_and(|s| !s.is_null())
}

/// Whether an update would change anything it replaces: spec, labels, annotations, apiVersion.
pub fn spec_differs(wanted: &Value, stored: &Value) -> bool {
    let null = Value::Null;
    let field = |o: &Value, f: &str| o.get(f).cloned().unwrap_or(Value::Null);
    let map = |o: &Value, f: &str| match o.get("metadata").and_then(|m| m.get(f)).unwrap_or(&null) {
        Value::Object(m) if m.is_empty() => Value::Null,
        v => v.clone(),
    };
    field(wanted, "spec") != field(stored, "spec")
        || field(wanted, "apiVersion") != field(stored, "apiVersion")
        || map(wanted, "labels") != map(stored, "labels")
        || map(wanted, "annotations") != map(stored, "annotations")
        || reservation_differs(wanted, stored)
}

/// Whether the file's reservation asks for something the stored one lacks. Only what the owner
/// sets counts: steward fills in `expiresAt` (from `durationSeconds`), zero units and
/// `decommission`. A file without a reservation keeps the stored one, as an update does.
fn reservation_differs(wanted: &Value, stored: &Value) -> bool {
    let Some(w) = wanted.get("reservation").filter(|r| !r.is_null()) else {
        return false;
    };
    let s = stored.get("reservation").unwrap_or(&Value::Null);
    let field = |o: &Value, f: &str| o.get(f).cloned().unwrap_or(Value::Null);
    let unit = |o: &Value, u: &str| {
        let units = o.get("units");
        units
            .and_then(|m| m.get(u))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let to_delete = |o: &Value| o.get("toDelete").and_then(Value::as_bool).unwrap_or(false);
    let end_differs = match w.get("durationSeconds") {
        Some(_) => field(w, "durationSeconds") != field(s, "durationSeconds"),
        None => {
            field(s, "durationSeconds") != Value::Null
                || field(w, "expiresAt") != field(s, "expiresAt")
        }
    };
    field(w, "nodeId") != field(s, "nodeId")
        || end_differs
        || ["cru", "mru", "hru", "sru"]
            .iter()
            .any(|u| unit(w, u) != unit(s, u))
        || to_delete(w) != to_delete(s)
}

/// The object's resourceVersion as a number (0 when absent or malformed: no precondition).
fn revision_of(object: &Value) -> u64 {
    render::meta_number(object, "resourceVersion")
        .parse()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_documents_and_lists_expand() {
        let text = "\
apiVersion: v1
kind: Director
metadata: {name: a}
spec: {replicas: 3}
---
---
kind: List
items:
  - {kind: Director, metadata: {name: b}}
  - {kind: Director, metadata: {name: c}}
";
        let objects = parse_documents(text).expect("parse");
        let names: Vec<_> = objects.iter().map(render::short_name).collect();
        assert_eq!(names, ["Director/a", "Director/b", "Director/c"]);
        assert_eq!(objects[0]["spec"]["replicas"], 3);
    }

    #[test]
    fn json_single_stream_and_array() {
        assert_eq!(
            parse_documents(r#"{"kind":"X","metadata":{"name":"a"}}"#)
                .expect("one")
                .len(),
            1
        );
        assert_eq!(
            parse_documents(r#"{"kind":"X"} {"kind":"Y"}"#)
                .expect("stream")
                .len(),
            2
        );
        assert_eq!(
            parse_documents(r#"[{"kind":"X"},{"kind":"Y"}]"#)
                .expect("array")
                .len(),
            2
        );
    }

    #[test]
    fn non_objects_and_bad_syntax_are_refused() {
        assert!(parse_documents("- a\n- b\n").is_err());
        assert!(parse_documents("kind: X\n---\n42\n").is_err());
        assert!(parse_documents("{\"kind\": ").is_err());
        assert!(parse_documents("kind: List\nitems: 3\n").is_err());
        assert!(parse_documents("a: [\n").is_err());
        assert!(parse_documents("").expect("empty").is_empty());
    }

    #[test]
    fn prepare_strips_server_fields_and_fills_the_namespace() {
        let object = json!({"kind": "X", "metadata": {"name": "a", "resourceVersion": "9", "uid": "u", "generation": 2}});
        let sent = prepare(object, Some("prod"));
        assert_eq!(
            sent,
            json!({"kind": "X", "metadata": {"name": "a", "namespace": "prod"}})
        );
        let kept = prepare(
            json!({"kind": "X", "metadata": {"name": "a", "namespace": "dev"}}),
            Some("prod"),
        );
        assert_eq!(kept["metadata"]["namespace"], "dev");
    }

    #[test]
    fn only_replaced_fields_count_as_changes() {
        let wanted = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {}}, "spec": {"n": 1}});
        let stored = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "resourceVersion": "5"}, "spec": {"n": 1}, "status": {"ok": true}});
        assert!(!spec_differs(&wanted, &stored));
        let mut relabeled = wanted.clone();
        relabeled["metadata"]["labels"] = json!({"app": "web"});
        assert!(spec_differs(&relabeled, &stored));
        let mut respec = wanted.clone();
        respec["spec"]["n"] = json!(2);
        assert!(spec_differs(&respec, &stored));
        assert_eq!(revision_of(&stored), 5);
    }

    #[test]
    fn a_reservation_differs_only_in_what_its_owner_sets() {
        let wanted = json!({"kind": "X", "metadata": {"name": "a"},
            "reservation": {"nodeId": "n", "durationSeconds": 60, "units": {"hru": 100}}});
        let stored = json!({"kind": "X", "metadata": {"name": "a"},
            "reservation": {"nodeId": "n", "durationSeconds": 60, "expiresAt": "2026-11-22T10:01:00Z",
                "units": {"cru": 0, "mru": 0, "hru": 100, "sru": 0}}});
        assert!(!spec_differs(&wanted, &stored));
        let mut plain = wanted.clone();
        plain.as_object_mut().unwrap().remove("reservation");
        assert!(!spec_differs(&plain, &stored), "omitted: kept");
        for (field, value) in [
            ("toDelete", json!(true)),
            ("durationSeconds", json!(120)),
            ("nodeId", json!("m")),
            ("units", json!({"hru": 99})),
        ] {
            let mut changed = wanted.clone();
            changed["reservation"][field] = value;
            assert!(spec_differs(&changed, &stored), "{field}");
        }
        let mut absolute = wanted.clone();
        absolute["reservation"] =
            json!({"nodeId": "n", "expiresAt": "2026-11-22T10:01:00Z", "units": {"hru": 100}});
        assert!(spec_differs(&absolute, &stored), "the duration is dropped");
    }
}
