//! Structural rules for objects and keys: kind, apiVersion, names, namespaces, labels,
//! annotations, sizes. Deterministic and self-contained, so `apply` can run them on every replica
//! and reach the same verdict; servers may also call them early to reject before proposing.
//!
//! Every error is `Rejection::Invalid` (or `TooLarge`) whose `field` is a JSON path such as
//! `metadata.name` or `metadata.labels["app"]`, and whose `rule` says what was expected.
//! Changing a rule changes how old log entries replay: loosen with care, never tighten silently.

use std::collections::BTreeMap;
use std::io;

use crate::objects::resource::{ObjectKey, Resource};
use crate::rejection::Rejection;

/// Deepest nesting of arrays and objects in client JSON (spec, status, lock details, operation
/// params and results). serde_json refuses to read a value nested deeper than 128 levels, and a
/// command wraps the client's value in several more, so a deeper value would be accepted here
/// and then be unreadable in the log, in peer messages and in snapshots. Checked where client
/// text enters (servers, `Resource::from_json`), not in apply.
pub const JSON_DEPTH_MAX: usize = 64;

/// Longest kind, like a DNS label.
pub const KIND_CHARS_MAX: usize = 63;
/// Longest DNS-1123 subdomain (names, apiVersion groups, label key prefixes).
pub const SUBDOMAIN_CHARS_MAX: usize = 253;
/// Longest DNS-1123 label (namespaces, apiVersion versions).
pub const LABEL_CHARS_MAX: usize = 63;
/// Longest label value and label/annotation key name part.
pub const QUALIFIED_NAME_CHARS_MAX: usize = 63;
/// Total bytes of annotation keys plus values on one object (Kubernetes' limit).
pub const ANNOTATIONS_BYTES_MAX: usize = 256 * 1024;
/// Largest object, as compact JSON: 1.5 MiB, etcd's default request limit, so that one object
/// always fits in one Raft entry.
pub const OBJECT_BYTES_MAX: usize = 1536 * 1024;

const SUBDOMAIN_RULE: &str = "must be a lowercase RFC 1123 subdomain: lowercase letters, digits, \
     '-' or '.', starting and ending with a letter or digit";
const DNS_LABEL_RULE: &str = "must be a lowercase RFC 1123 label: lowercase letters, digits or \
     '-', starting and ending with a letter or digit";
const QUALIFIED_RULE: &str = "must consist of letters, digits, '-', '_' or '.', starting and \
     ending with a letter or digit";

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Rejection {
    Rejection::Invalid {
        field: field.into(),
        rule: rule.into(),
    }
}

/// Checks every structural rule on a whole object, first failure wins (in the order kind,
/// apiVersion, name, namespace, labels, annotations, spec, status, size).
pub fn validate_object(obj: &Resource) -> Result<(), Rejection> {
    validate_key(&obj.key())?;
    validate_api_version(&obj.api_version)?;
    validate_map("metadata.labels", &obj.metadata.labels, true)?;
    validate_map("metadata.annotations", &obj.metadata.annotations, false)?;
    validate_annotations_size(&obj.metadata.annotations)?;
    let spec_ok = obj.spec.is_object() || obj.spec.is_null();
    let status_ok = obj.status.is_object() || obj.status.is_null();
    for (field, ok) in [("spec", spec_ok), ("status", status_ok)] {
        if !ok {
            return Err(invalid(field, "must be a JSON object"));
        }
    }
    validate_object_size(obj)
}

/// Checks the kind, namespace and name of a key (for Get/Delete/List by key).
pub fn validate_key(key: &ObjectKey) -> Result<(), Rejection> {
    validate_kind(&key.kind)?;
    check_subdomain(&key.name).map_err(|rule| invalid("metadata.name", rule))?;
    check_dns_label(&key.namespace).map_err(|rule| invalid("metadata.namespace", rule))
}

/// A namespace name: a DNS-1123 label.
pub fn validate_namespace_name(namespace: &str) -> Result<(), String> {
    check_dns_label(namespace)
}

/// `^[A-Z][A-Za-z0-9]*$`, 1..=63 characters.
pub fn validate_kind(kind: &str) -> Result<(), Rejection> {
    let camel = kind.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    if kind.is_empty() {
        Err(invalid("kind", "required"))
    } else if kind.len() > KIND_CHARS_MAX || !camel {
        Err(invalid(
            "kind",
            format!(
                "must be CamelCase: an uppercase letter then letters or digits, \
                 at most {KIND_CHARS_MAX} characters (got {kind:?})"
            ),
        ))
    } else {
        Ok(())
    }
}

/// `version` or `group/version`: group a DNS-1123 subdomain, version a DNS-1123 label.
pub fn validate_api_version(api_version: &str) -> Result<(), Rejection> {
    const FIELD: &str = "apiVersion";
    if api_version.is_empty() {
        return Err(invalid(FIELD, "required"));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (Some(g), v),
        None => (None, api_version),
    };
    if let Some(group) = group {
        check_subdomain(group).map_err(|rule| invalid(FIELD, format!("group {group:?} {rule}")))?;
    }
    check_dns_label(version).map_err(|rule| invalid(FIELD, format!("version {version:?} {rule}")))
}

/// A label key, valid alone (used by selectors too).
pub fn validate_label_key(field: &str, key: &str) -> Result<(), Rejection> {
    check_qualified_key(key).map_err(|rule| invalid(field, rule))
}

/// A label value: empty, or 1..=63 of the qualified-name charset.
pub fn validate_label_value(field: &str, value: &str) -> Result<(), Rejection> {
    if value.is_empty() {
        return Ok(());
    }
    check_qualified_name(value).map_err(|rule| invalid(field, format!("value {rule}")))
}

/// The JSON path of one entry of a map field: `metadata.labels["app"]`.
pub fn entry_field(map_field: &str, key: &str) -> String {
    let quoted = serde_json::to_string(key).unwrap_or_else(|_| format!("{key:?}"));
    format!("{map_field}[{quoted}]")
}

fn validate_map(
    field: &str,
    map: &BTreeMap<String, String>,
    check_values: bool,
) -> Result<(), Rejection> {
    for (k, v) in map {
        let entry = entry_field(field, k);
        validate_label_key(&entry, k)?;
        if check_values {
            validate_label_value(&entry, v)?;
        }
    }
    Ok(())
}

fn validate_annotations_size(annotations: &BTreeMap<String, String>) -> Result<(), Rejection> {
    let bytes: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > ANNOTATIONS_BYTES_MAX {
        return Err(Rejection::TooLarge {
            field: "metadata.annotations".to_string(),
            rule: format!(
                "keys and values total {bytes} bytes, more than the limit \
                 ANNOTATIONS_BYTES_MAX = {ANNOTATIONS_BYTES_MAX}"
            ),
        });
    }
    Ok(())
}

/// `TooLarge` if the object's compact JSON exceeds `OBJECT_BYTES_MAX`.
pub fn validate_object_size(obj: &Resource) -> Result<(), Rejection> {
    let bytes = json_len(obj);
    if bytes > OBJECT_BYTES_MAX {
        return Err(Rejection::TooLarge {
            field: "object".to_string(),
            rule: format!(
                "{bytes} bytes as JSON, more than the limit OBJECT_BYTES_MAX = {OBJECT_BYTES_MAX}"
            ),
        });
    }
    Ok(())
}

/// Length of the compact JSON form of an object (or any value), counted without building the
/// string.
pub fn json_len<T: serde::Serialize + ?Sized>(obj: &T) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Cannot fail: the writer never errors and the type always serializes.
    let _ = serde_json::to_writer(&mut counter, obj);
    counter.0
}

fn check_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("required".to_string());
    }
    if s.len() > SUBDOMAIN_CHARS_MAX {
        return Err(format!("must be at most {SUBDOMAIN_CHARS_MAX} characters"));
    }
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && ends_alnum(s, |b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!("{SUBDOMAIN_RULE} (got {s:?})"))
    }
}

fn check_dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("required".to_string());
    }
    if s.len() > LABEL_CHARS_MAX {
        return Err(format!("must be at most {LABEL_CHARS_MAX} characters"));
    }
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && ends_alnum(s, |b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!("{DNS_LABEL_RULE} (got {s:?})"))
    }
}

/// `[prefix/]name`: prefix a DNS-1123 subdomain, name a qualified name.
fn check_qualified_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        check_subdomain(prefix).map_err(|rule| format!("key prefix {rule}"))?;
    }
    check_qualified_name(name).map_err(|rule| format!("key name {rule}"))
}

fn check_qualified_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".to_string());
    }
    if s.len() > QUALIFIED_NAME_CHARS_MAX {
        return Err(format!(
            "must be at most {QUALIFIED_NAME_CHARS_MAX} characters"
        ));
    }
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && ends_alnum(s, |b| b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!("{QUALIFIED_RULE} (got {s:?})"))
    }
}

fn ends_alnum(s: &str, alnum: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    matches!((b.first(), b.last()), (Some(&f), Some(&l)) if alnum(f) && alnum(l))
}

/// Refuses client JSON text nested deeper than [`JSON_DEPTH_MAX`]. Counts brackets outside
/// strings, so it needs no parse; the text must be valid JSON (parse it first or after).
pub fn check_json_depth(field: &str, text: &str) -> Result<(), Rejection> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > JSON_DEPTH_MAX {
                    return Err(invalid(
                        field,
                        format!("is nested deeper than JSON_DEPTH_MAX = {JSON_DEPTH_MAX} levels"),
                    ));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_is_counted_outside_strings_and_refused_past_the_limit() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(check_json_depth("params", &nested(JSON_DEPTH_MAX)), Ok(()));
        let err = check_json_depth("params", &nested(JSON_DEPTH_MAX + 1)).unwrap_err();
        assert_eq!(
            err,
            invalid("params", "is nested deeper than JSON_DEPTH_MAX = 64 levels")
        );
        // Brackets and escaped quotes inside strings do not count.
        let in_string = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(100), "{".repeat(100));
        assert_eq!(check_json_depth("spec", &in_string), Ok(()));
        // A whole object: its fields nest one level below the body.
        let body = format!(r#"{{"kind":"K","status":{}}}"#, nested(JSON_DEPTH_MAX));
        let err = Resource::from_json(&body).unwrap_err();
        assert_eq!(
            err,
            invalid("body", "is nested deeper than JSON_DEPTH_MAX = 64 levels")
        );
    }
    use crate::objects::raw_json::RawJson;
    use serde_json::json;

    fn obj() -> Resource {
        let mut r = Resource::new(
            "deployment.servicefabrik.io/v1alpha1",
            "Director",
            "default",
            "d-1",
        );
        r.spec = RawJson::from_value(&json!({"options": "{}"}));
        r
    }

    fn field_of(r: Result<(), Rejection>) -> String {
        match r {
            Err(Rejection::Invalid { field, .. }) | Err(Rejection::TooLarge { field, .. }) => field,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn the_seed_objects_are_valid() {
        assert_eq!(validate_object(&obj()), Ok(()));
        let mut r = obj();
        r.metadata.name = "55ac1af2-abcd-4541-ae78-abcdefgh8d94".into();
        r.metadata
            .labels
            .insert("instance_guid".into(), "55ac1af2-abcd".into());
        r.metadata.labels.insert("state".into(), "in_queue".into());
        r.metadata
            .labels
            .insert("example.com/tier".into(), "".into());
        r.metadata
            .annotations
            .insert("lockedByManager".into(), "10.0.2.2 / any text!".into());
        assert_eq!(validate_object(&r), Ok(()));
        r.api_version = "v1".into();
        assert_eq!(validate_object(&r), Ok(()));
    }

    #[test]
    fn each_broken_field_is_named() {
        type Break = fn(&mut Resource);
        let cases: Vec<(&str, Break)> = vec![
            ("kind", |r| r.kind = "".into()),
            ("kind", |r| r.kind = "director".into()),
            ("kind", |r| r.kind = "Dir_ector".into()),
            ("kind", |r| r.kind = format!("D{}", "a".repeat(63)).into()),
            ("apiVersion", |r| r.api_version = "".into()),
            ("apiVersion", |r| r.api_version = "V1".into()),
            ("apiVersion", |r| r.api_version = "Example.com/v1".into()),
            ("apiVersion", |r| r.api_version = "example.com/".into()),
            ("apiVersion", |r| r.api_version = "a/b/c".into()),
            ("metadata.name", |r| r.metadata.name = "".into()),
            ("metadata.name", |r| r.metadata.name = "Upper".into()),
            ("metadata.name", |r| r.metadata.name = "-lead".into()),
            ("metadata.name", |r| r.metadata.name = "trail.".into()),
            ("metadata.name", |r| {
                r.metadata.name = "a".repeat(254).into()
            }),
            ("metadata.namespace", |r| r.metadata.namespace = "".into()),
            ("metadata.namespace", |r| {
                r.metadata.namespace = "a.b".into()
            }),
            ("metadata.namespace", |r| {
                r.metadata.namespace = "a".repeat(64).into()
            }),
            ("metadata.labels[\"-x\"]", |r| {
                r.metadata.labels.insert("-x".into(), "v".into());
            }),
            ("metadata.labels[\"UP/x\"]", |r| {
                r.metadata.labels.insert("UP/x".into(), "v".into());
            }),
            ("metadata.labels[\"a/\"]", |r| {
                r.metadata.labels.insert("a/".into(), "v".into());
            }),
            ("metadata.labels[\"app\"]", |r| {
                r.metadata.labels.insert("app".into(), "has space".into());
            }),
            ("metadata.labels[\"app\"]", |r| {
                r.metadata.labels.insert("app".into(), "a".repeat(64));
            }),
            ("metadata.annotations[\"\"]", |r| {
                r.metadata.annotations.insert("".into(), "v".into());
            }),
            ("metadata.annotations", |r| {
                r.metadata
                    .annotations
                    .insert("big".into(), "x".repeat(ANNOTATIONS_BYTES_MAX));
            }),
            ("spec", |r| r.spec = RawJson::from_value(&json!("text"))),
            ("status", |r| r.status = json!([1])),
            ("object", |r| {
                r.spec = RawJson::from_value(&json!({ "blob": "x".repeat(OBJECT_BYTES_MAX) }));
            }),
        ];
        for (want, mutate) in cases {
            let mut r = obj();
            mutate(&mut r);
            assert_eq!(field_of(validate_object(&r)), want, "{r:.200?}");
        }
    }

    #[test]
    fn limits_are_inclusive() {
        let mut r = obj();
        r.kind = format!("D{}", "a".repeat(62)).into();
        r.metadata.name = "a".repeat(253).into();
        r.metadata.namespace = "a".repeat(63).into();
        let key = format!("{}/{}", "p".repeat(253), "n".repeat(63));
        r.metadata.labels.insert(key, "v".repeat(63));
        r.metadata
            .annotations
            .insert("k".into(), "x".repeat(ANNOTATIONS_BYTES_MAX - 1));
        assert_eq!(validate_object(&r), Ok(()));
    }

    #[test]
    fn too_large_is_its_own_variant() {
        let mut r = obj();
        r.metadata
            .annotations
            .insert("k".into(), "x".repeat(ANNOTATIONS_BYTES_MAX));
        assert!(matches!(
            validate_object(&r),
            Err(Rejection::TooLarge { .. })
        ));
    }

    #[test]
    fn messages_name_field_and_rule() {
        let mut r = obj();
        r.kind = "director".into();
        let msg = validate_object(&r).expect_err("invalid").to_string();
        assert!(msg.starts_with("kind: must be CamelCase"), "{msg}");
        let key = ObjectKey::new("Lock", "default", "Bad");
        let msg = validate_key(&key).expect_err("invalid").to_string();
        assert!(
            msg.starts_with("metadata.name: must be a lowercase RFC 1123 subdomain"),
            "{msg}"
        );
    }

    #[test]
    fn json_len_matches_to_json() {
        let r = obj();
        assert_eq!(json_len(&r), r.to_json().len());
    }
}
