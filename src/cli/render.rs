//! Output shared by every command: kubectl-style plain tables, pretty JSON, YAML, object ages,
//! and the accessors that read an object's identity out of its JSON. Pure; no I/O.

use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use serde_json::Value;

/// What `-o/--output` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// JSON, as stored.
    Json,
    /// The same as YAML.
    Yaml,
}

/// A table printed like kubectl's: upper-case headers, left-aligned columns three spaces apart.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty, extra cells are dropped.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as text, one line per row with a trailing newline, no trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.headers).chain(&self.rows) {
            let mut text = String::new();
            for (i, (cell, w)) in line.iter().zip(&widths).enumerate() {
                if i > 0 {
                    text.push_str("   ");
                }
                text.push_str(cell);
                text.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Pretty JSON (two-space indent), with a trailing newline.
pub fn to_json_pretty(value: &Value) -> String {
    // Serializing a Value cannot fail (its map keys are strings).
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// YAML, as one document without a leading `---`.
pub fn to_yaml(value: &Value) -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(value)?)
}

/// A value in the structured format asked for; `Table` falls back to JSON.
pub fn structured(value: &Value, format: OutputFormat) -> anyhow::Result<String> {
    match format {
        OutputFormat::Yaml => to_yaml(value),
        OutputFormat::Json | OutputFormat::Table => Ok(to_json_pretty(value)),
    }
}

/// The Kubernetes `List` wrapper `-o json|yaml` prints for a list.
pub fn list_object(items: Vec<Value>, revision: u64) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": { "resourceVersion": revision.to_string() },
        "items": items,
    })
}

/// A string field of `metadata`, or "".
pub fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A numeric `metadata` field that may be written as a number or a decimal string
/// (`resourceVersion` is a string, `generation` a number), as text; "" when absent.
pub fn meta_number(object: &Value, field: &str) -> String {
    match object.get("metadata").and_then(|m| m.get(field)) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// The object's kind, or "".
pub fn kind_of(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// `Kind/name`, how apply and delete name an object.
pub fn short_name(object: &Value) -> String {
    format!("{}/{}", kind_of(object), meta_str(object, "name"))
}

/// `Kind/namespace/name`, how watch names an object.
pub fn full_name(object: &Value) -> String {
    format!(
        "{}/{}/{}",
        kind_of(object),
        meta_str(object, "namespace"),
        meta_str(object, "name")
    )
}

/// The age of an object created at the RFC 3339 `created`, kubectl style; `<unknown>` if the
/// timestamp is missing or malformed.
pub fn age(created: &str, now: SystemTime) -> String {
    match humantime::parse_rfc3339_weak(created) {
        Ok(at) => human_duration(now.duration_since(at).unwrap_or(Duration::ZERO)),
        Err(_) => "<unknown>".to_string(),
    }
}

/// kubectl's short durations: `45s`, `3m20s`, `25m`, `5h10m`, `30h`, `4d2h`, `120d`, `3y20d`.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let mins = secs / 60;
    let hours = mins / 60;
    let with_rest = |big: u64, unit: &str, rest: u64, rest_unit: &str| {
        if rest == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{rest}{rest_unit}")
        }
    };
    if secs < 120 {
        format!("{secs}s")
    } else if mins < 10 {
        with_rest(mins, "m", secs % 60, "s")
    } else if mins < 180 {
        format!("{mins}m")
    } else if hours < 8 {
        with_rest(hours, "h", mins % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        with_rest(hours / 24, "d", hours % 24, "h")
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        with_rest(hours / 24 / 365, "y", (hours / 24) % 365, "d")
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_like_kubectl() {
        let mut t = Table::new(&["NAME", "REVISION", "AGE"]);
        t.row(vec!["a".into(), "12".into(), "5s".into()]);
        t.row(vec!["longer-name".into(), "7".into()]);
        assert_eq!(
            t.render(),
            "NAME          REVISION   AGE\n\
             a             12         5s\n\
             longer-name   7\n"
        );
    }

    #[test]
    fn empty_tables_print_headers_only() {
        let t = Table::new(&["ID", "STATE"]);
        assert_eq!(t.render(), "ID   STATE\n");
    }

    #[test]
    fn durations_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (200, "3m20s"),
            (300, "5m"),
            (25 * 60, "25m"),
            (5 * 3600 + 600, "5h10m"),
            (30 * 3600, "30h"),
            (4 * 86400 + 7200, "4d2h"),
            (120 * 86400, "120d"),
            (3 * 365 * 86400 + 20 * 86400, "3y20d"),
            (10 * 365 * 86400, "10y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn ages_come_from_creation_timestamps() {
        let created = "2018-07-25T11:29:01Z";
        let at = humantime::parse_rfc3339(created).expect("time");
        assert_eq!(age(created, at + Duration::from_secs(90)), "90s");
        assert_eq!(age(created, at - Duration::from_secs(5)), "0s");
        assert_eq!(age("", at), "<unknown>");
    }

    #[test]
    fn objects_name_themselves() {
        let obj = json!({"kind": "Director", "metadata": {"name": "d1", "namespace": "prod", "resourceVersion": "42", "generation": 3}});
        assert_eq!(short_name(&obj), "Director/d1");
        assert_eq!(full_name(&obj), "Director/prod/d1");
        assert_eq!(meta_number(&obj, "resourceVersion"), "42");
        assert_eq!(meta_number(&obj, "generation"), "3");
        assert_eq!(meta_number(&obj, "uid"), "");
    }

    #[test]
    fn lists_wrap_like_kubernetes() {
        let list = list_object(vec![json!({"kind": "X"})], 7);
        let text = to_json_pretty(&list);
        assert!(
            text.starts_with("{\n  \"apiVersion\": \"v1\",\n  \"items\""),
            "{text}"
        );
        assert_eq!(list["metadata"]["resourceVersion"], "7");
        let yaml = to_yaml(&list).expect("yaml");
        assert!(yaml.contains("kind: List"), "{yaml}");
    }

    /// A stored spec is raw JSON text, which only serde_json understands: `-o yaml` must see it
    /// as a `Value` (the client parses every object it receives into one), never the `Resource`.
    #[test]
    fn yaml_shows_a_stored_spec_as_a_mapping() {
        let stored = crate::state::Resource::from_json(
            r#"{"kind":"Director","apiVersion":"v1","metadata":{"name":"d1"},"spec":{"size":2,"data":"xy"}}"#,
        )
        .expect("object");
        let from_server: Value = serde_json::from_str(&stored.to_json()).expect("JSON");
        let from_code = serde_json::to_value(&stored).expect("value");
        assert_eq!(from_server, from_code);
        let yaml = to_yaml(&from_server).expect("yaml");
        assert!(yaml.contains("\nspec:\n  data: xy\n  size: 2\n"), "{yaml}");
        assert!(!yaml.contains("RawValue"), "{yaml}");
    }
}
